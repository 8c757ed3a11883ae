//! MCP profiles of stow-s3 over stdio, on the official Rust SDK (`rmcp`).
//!
//! The **object profile** (`stow-s3 mcp --object-dir D --bucket B`) exposes
//! guarded saves of one bucket of a [`stow_store::Store`]: read-for-save
//! with an opaque observation token, keyed save with a durable receipt,
//! resolution after a lost reply or restart, token release and capability
//! inspection; with `--browser` also a read-only bucket browser (an MCP
//! Apps UI, mentions, and object resources). Tool names, descriptions and
//! schemas are those of `object_tools.json` and `workspace_tools.json`, verbatim.
//!
//! The **workspace profile** (`stow-s3 mcp --registry-dir R --workspace-id
//! W --timeout D`, [`workspace`]) exposes keyed portable checkpoints of one
//! workspace, their inspection and diff in pages, and handoff bundles.
//!
//! This crate is a protocol adapter only: every storage decision (guards,
//! receipts, quotas, durability) is the store's. Results use the version-1
//! object envelope ([`envelope`]); stdout carries JSON-RPC only and logs go
//! to stderr through `tracing`.

mod config;
mod core;
pub mod envelope;
#[doc(hidden)]
pub mod fuzzing;
mod schema;
mod server;
mod tokens;
mod transport;
pub mod workspace;

use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use stow_store::{Store, StoreError, StoreOptions};

pub use crate::config::{ConfigError, ObjectConfig, Settings};
pub use crate::core::{
    Core, MAX_ARGUMENT_BYTES, MAX_CONCURRENT_CALLS, MAX_RESPONSE_BYTES, MAX_TOOL_NAME_BYTES,
};
pub use crate::server::{ObjectServer, BROWSER_UI_URI, OBJECT_INSTRUCTIONS};
pub use crate::tokens::{Clock, SystemClock, OBSERVATION_TTL};
pub use crate::transport::{LineTransport, MAX_LINE_BYTES};

/// How long shutdown waits for admitted tool calls to finish.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// Why the object profile could not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A launch setting is refused (nothing was touched).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// No store exists in the directory and `--create-bucket` was not given.
    #[error("no object store in {dir}; pass --create-bucket to create it with bucket {bucket}")]
    NoStore { dir: String, bucket: String },
    /// The bucket is missing and `--create-bucket` was not given.
    #[error("bucket {bucket} does not exist in {dir}; pass --create-bucket to create it")]
    MissingBucket { dir: String, bucket: String },
    /// The store's usage already exceeds the configured quota.
    #[error("the object store already holds {bytes} bytes in {objects} objects, over the configured quota (--max-bytes {max_bytes}, --max-objects {max_objects})")]
    OverQuota {
        bytes: u64,
        objects: u64,
        max_bytes: u64,
        max_objects: u64,
    },
    /// The store refused to open (for example, another process owns it).
    #[error("cannot open the object store: {0}")]
    Store(#[from] StoreError),
    /// The built-in tool definitions are broken (never expected).
    #[error(transparent)]
    Definitions(#[from] server::DefinitionError),
    /// A workspace-profile launch setting is refused (nothing was touched).
    #[error("{0}")]
    Workspace(String),
    /// The async runtime or the signal handlers could not start.
    #[error("cannot start the MCP runtime: {0}")]
    Runtime(std::io::Error),
}

/// Opens the store and checks the bucket and quotas, as startup does.
///
/// Without `create_bucket` nothing is created: a directory without a store
/// or a store without the bucket is refused. The returned store owns the
/// directory exclusively until dropped.
pub fn open_object_store(settings: &Settings) -> Result<Store, ServeError> {
    let opts = StoreOptions {
        max_bytes: Some(settings.max_bytes),
        max_objects: Some(settings.max_objects),
        // Tool bodies are at most 64 KiB: a small page cache keeps an agent
        // host's sidecar lean (the OS caches the file anyway).
        db_cache_bytes: 2 << 20,
        ..StoreOptions::default()
    };
    let dir = settings.dir.display().to_string();
    let store = if settings.create_bucket {
        Store::open(&settings.dir, opts)?
    } else {
        match Store::open_existing(&settings.dir, opts) {
            Ok(s) => s,
            Err(StoreError::NoSuchStore { .. }) => {
                return Err(ServeError::NoStore {
                    dir,
                    bucket: settings.bucket.clone(),
                })
            }
            Err(e) => return Err(e.into()),
        }
    };
    match store.head_bucket(&settings.bucket) {
        Ok(_) => {}
        Err(StoreError::NoSuchBucket { .. }) if settings.create_bucket => {
            store.create_bucket(&settings.bucket)?;
        }
        Err(StoreError::NoSuchBucket { .. }) => {
            return Err(ServeError::MissingBucket {
                dir,
                bucket: settings.bucket.clone(),
            })
        }
        Err(e) => return Err(e.into()),
    }
    let usage = store.usage()?;
    if usage.bytes > settings.max_bytes || usage.objects > settings.max_objects {
        return Err(ServeError::OverQuota {
            bytes: usage.bytes,
            objects: usage.objects,
            max_bytes: settings.max_bytes,
            max_objects: settings.max_objects,
        });
    }
    Ok(store)
}

/// Runs the object profile on stdin/stdout until stdin closes or SIGINT or
/// SIGTERM arrives, then closes the profile and releases the directory.
///
/// Settings are validated before anything touches the disk. Object data and
/// save receipts are kept; observation tokens are not.
pub fn serve_object_profile(config: &ObjectConfig) -> Result<(), ServeError> {
    let settings = config.validate()?;
    let store = open_object_store(&settings)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    let core = Arc::new(Core::new(store, settings, Arc::new(SystemClock)));
    let server = ObjectServer::new(Arc::clone(&core))?;
    let result = runtime.block_on(serve_stdio(server));
    core.close();
    // A read of a blocking stdin cannot be cancelled; do not wait for it.
    runtime.shutdown_timeout(Duration::from_millis(200));
    result
}

async fn serve_stdio(server: ObjectServer) -> Result<(), ServeError> {
    let core = Arc::clone(server.core());
    serve_until_closed(server.clone()).await?;
    // The session is over: calls already admitted finish (their effects
    // complete even if no reply can be sent), then the profile closes and
    // the runtime shutdown ends what is left.
    server.drain(DRAIN_LIMIT).await;
    core.close();
    Ok(())
}

/// Serves `server` on stdin/stdout (1 MiB lines) until stdin closes or
/// SIGINT or SIGTERM arrives.
pub(crate) async fn serve_until_closed<S>(server: S) -> Result<(), ServeError>
where
    S: rmcp::ServerHandler,
{
    use tokio::signal::unix::{signal, SignalKind};
    let mut sigint = signal(SignalKind::interrupt()).map_err(ServeError::Runtime)?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(ServeError::Runtime)?;
    let (read, write) = rmcp::transport::stdio_pipes();
    let transport = LineTransport::new(read, write, MAX_LINE_BYTES);
    let session = async {
        match server.serve(transport).await {
            Ok(running) => {
                if let Err(e) = running.waiting().await {
                    tracing::warn!("MCP session ended abnormally: {e}");
                }
            }
            // EOF before the first request, or a failed handshake: nothing
            // to serve, and not an error of the server.
            Err(e) => tracing::info!("MCP session ended before it began: {e}"),
        }
    };
    tokio::select! {
        () = session => {}
        _ = sigint.recv() => tracing::info!("SIGINT: closing"),
        _ = sigterm.recv() => tracing::info!("SIGTERM: closing"),
    }
    Ok(())
}
