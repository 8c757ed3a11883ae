//! The workspace profile (`stow-s3 mcp --registry-dir R --workspace-id W
//! --timeout D`): checkpoints of one workspace and handoff bundles for an
//! agent host. Tool names, descriptions and schemas are seed 000's,
//! verbatim; every storage decision is `stow-workspace`'s.

mod config;
mod envelope;
mod server;
mod tools;

use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;

pub use config::{WorkspaceConfig, WorkspaceConfigError, WorkspaceSettings};
pub use server::{WorkspaceServer, GUIDE_URI};
pub use tools::WorkspaceCore;

use crate::transport::{LineTransport, MAX_LINE_BYTES};
use crate::ServeError;

/// Runs the workspace profile on stdin/stdout until stdin closes or SIGINT
/// or SIGTERM arrives. Settings are validated before anything is served;
/// closing never touches the workspace or its checkpoints.
pub fn serve_workspace_profile(config: &WorkspaceConfig) -> Result<(), ServeError> {
    let settings = config.validate().map_err(|e| ServeError::Workspace(e.0))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    let server = WorkspaceServer::new(Arc::new(WorkspaceCore::new(settings)))?;
    let result = runtime.block_on(serve_stdio(server));
    runtime.shutdown_timeout(Duration::from_millis(200));
    result
}

async fn serve_stdio(server: WorkspaceServer) -> Result<(), ServeError> {
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
