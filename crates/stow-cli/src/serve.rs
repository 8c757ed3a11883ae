//! `stow-s3 serve`: a local S3 endpoint over a data directory (or memory).

use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use std::sync::Arc;
use stow_s3_http::{Server, ServerConfig};

use stow_store::{ObjectBackend, Store, StoreOptions};

use crate::CliError;

/// Where objects live.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Backend {
    /// Durable, in the data directory.
    Filesystem,
    /// In memory, gone at exit.
    Memory,
}

/// Listening, credentials and request limits: the flags `serve` and
/// `workspace serve` share.
#[derive(Args, Debug)]
pub struct ListenArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Access key clients sign with (else STOW_LOCAL_ACCESS_KEY_ID, else generated).
    #[arg(long)]
    access_key: Option<String>,
    /// Secret key clients sign with (else STOW_LOCAL_SECRET_ACCESS_KEY, else generated).
    #[arg(long)]
    secret_key: Option<String>,
    /// Region in the credential scope.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Largest request body (default 5 GiB, S3's single-PUT limit).
    #[arg(long, default_value_t = 5 << 30, value_parser = clap::value_parser!(u64).range(1..))]
    max_request_bytes: u64,
    /// Requests served at once; more get 503 SlowDown.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=4096))]
    max_concurrent_requests: u64,
    /// Write the readiness JSON to this inherited file descriptor instead of
    /// stdout.
    #[arg(long, value_parser = clap::value_parser!(i32).range(3..))]
    ready_fd: Option<i32>,
    /// Exit when this process (which must be the parent) exits.
    #[arg(long)]
    parent_pid: Option<i32>,
}

impl ListenArgs {
    /// Checks the flags and arms parent-death exit; call before anything
    /// is opened, so a refusal changes nothing.
    fn check(&self) -> Result<(), CliError> {
        if self.region.trim().is_empty() {
            return Err(refuse("invalid_argument", "--region must not be empty"));
        }
        if let Some(pid) = self.parent_pid {
            watch_parent(pid)?;
        }
        Ok(())
    }

    /// A server configuration over `store` with the shared settings and the
    /// given or generated keys.
    fn config(&self, store: Arc<dyn ObjectBackend>) -> ServerConfig {
        let (access_key, secret_key) =
            credentials(self.access_key.clone(), self.secret_key.clone());
        ServerConfig {
            store,
            access_key,
            secret_key,
            region: self.region.clone(),
            read_only: false,
            max_request_bytes: self.max_request_bytes,
            max_concurrent_requests: self.max_concurrent_requests as usize,
            cors_origins: Vec::new(),
            admin_token: None,
            base_host: None,
            allow_reset: false,
        }
    }

    /// Writes a readiness line to `--ready-fd`, else to stdout.
    fn announce(&self, line: &str) -> Result<(), CliError> {
        match self.ready_fd {
            Some(fd) => write_ready_fd(fd, line),
            None => {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
                Ok(())
            }
        }
    }
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    listen: ListenArgs,
    /// Port to listen on; 0 picks a free one (the bound port is reported).
    #[arg(long, default_value_t = 9000)]
    port: u16,
    /// Data directory of the filesystem backend.
    #[arg(long, default_value = ".stow")]
    data_dir: PathBuf,
    #[arg(long, value_enum, default_value_t = Backend::Filesystem, ignore_case = true)]
    backend: Backend,
    /// Refuse every mutation with 403 AccessDenied.
    #[arg(long)]
    read_only: bool,
    /// Quota on stored bytes (0 = unlimited).
    #[arg(long, default_value_t = 0)]
    max_bytes: u64,
    /// Quota on stored objects (0 = unlimited).
    #[arg(long, default_value_t = 0)]
    max_objects: u64,
    /// Allowed CORS origin (repeatable; `*` allows any). Default: loopback origins.
    #[arg(long = "cors-origin")]
    cors_origins: Vec<String>,
    /// Suffix for virtual-host addressing (`<bucket>.<base-host>`);
    /// `<bucket>.localhost` always works.
    #[arg(long)]
    base_host: Option<String>,
    /// Token for /_stow/* admin routes from non-loopback peers (prefer STOW_ADMIN_TOKEN).
    #[arg(long, env = "STOW_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// Answer `POST /_stow/reset` (SigV4-signed with this server's keys),
    /// which empties the store: for test sessions (the packages pass it).
    /// Without it the route is refused with 405 MethodNotAllowed.
    #[arg(long, conflicts_with = "read_only")]
    allow_reset: bool,
    /// Make a lifecycle "day" N seconds, counted from each object's
    /// modification (no rounding to midnight), so tests see rules expire
    /// objects; without it a day is S3's. `x-amz-expiration` keeps S3's
    /// dates either way.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    lifecycle_day_seconds: Option<u64>,
    #[command(flatten)]
    console: ConsoleArgs,
}

/// The web console's flags, shared by `serve` and `workspace serve`.
#[derive(Args, Debug)]
pub struct ConsoleArgs {
    /// Serve the web console (the default for a loopback --host).
    #[arg(long, overrides_with = "no_console")]
    console: bool,
    /// Do not serve the web console (the default for other hosts).
    #[arg(long, overrides_with = "console")]
    no_console: bool,
    /// Port of the web console, never the S3 port; 0 (the default) picks
    /// a free one (printed as `console=` in the readiness line).
    #[arg(long, default_value_t = 0)]
    console_port: u16,
}

impl ConsoleArgs {
    /// Where the console listens, when it is served: `--console`, or a
    /// loopback `host` without `--no-console`.
    fn address(&self, host: IpAddr) -> Option<SocketAddr> {
        (self.console || (!self.no_console && host.is_loopback()))
            .then(|| SocketAddr::new(host, self.console_port))
    }
}

/// `stow-s3 workspace serve`.
#[derive(Args)]
pub struct WorkspaceServeArgs {
    /// Workspace ID (default: the workspace holding the current directory).
    #[arg(long)]
    pub(crate) id: Option<String>,
    #[command(flatten)]
    pub(crate) registry: crate::args::RegistryArgs,
    #[command(flatten)]
    listen: ListenArgs,
    /// Port to listen on; 0 (the default) picks a free one.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Narrow the workspace's byte quota for this server (0 keeps it; a
    /// larger value is refused).
    #[arg(long, default_value_t = 0)]
    max_bytes: u64,
    /// Narrow the workspace's object quota for this server (0 keeps it; a
    /// larger value is refused).
    #[arg(long, default_value_t = 0)]
    max_objects: u64,
    #[command(flatten)]
    console: ConsoleArgs,
}

/// Serves a workspace's bucket view until SIGINT/SIGTERM. Readiness is one
/// JSON line (`version: 1`) on `--ready-fd`, else on stdout.
pub fn run_workspace(
    registry: &stow_checkpoint::Registry,
    id: &str,
    args: WorkspaceServeArgs,
) -> Result<serde_json::Value, CliError> {
    let listen = &args.listen;
    listen.check()?;
    let served =
        stow_workspace::open::serve_workspace(registry, id, args.max_bytes, args.max_objects)?;
    let view = Arc::new(served.view);
    // CLI captures and rewinds of the served workspace go through this
    // process (which owns the bucket view) and read only what changed
    // while the server runs. Another process's watch would take them
    // instead, unordered with this server's S3 writes: refused.
    let watched =
        stow_checkpoint::watch_service::WatchService::start_owning(registry, id, Arc::clone(&view));
    let _watch = match watched {
        Ok(w) => Some(w),
        Err(e @ stow_checkpoint::WsError::AlreadyWatched(_)) => {
            return Err(refuse(
                "in_use",
                format!(
                    "{e}; stop it first: `workspace serve` keeps its own watch, so that \
                     rewinds and S3 writes never interleave"
                ),
            ));
        }
        Err(e) => {
            tracing::warn!(error = %e, "captures of this workspace are not watched");
            None
        }
    };
    // Without a watch service here, the console's rewinds run in this
    // process with an owning monitor, so they still hold the view's writes.
    let monitor = _watch
        .is_none()
        .then(|| Arc::new(stow_checkpoint::TreeMonitor::owning(Arc::clone(&view))));
    let quota = served.quota;
    let bucket = served.description.bucket.clone();
    let max_uploads = view.store().options().max_uploads;
    let description = serde_json::to_value(&served.description).map_err(|e| {
        refuse(
            "internal",
            format!("cannot encode the readiness record: {e}"),
        )
    })?;
    let config = listen.config(view);
    let (access_key, secret_key) = (config.access_key.clone(), config.secret_key.clone());
    // The console: the bucket view through the object pages, and the
    // checkpoint pages, whose status and rewinds go through the watch
    // service above (it owns the view and takes its S3-write gate).
    let console = args.console.address(listen.host).map(|at| {
        let console = stow_console::ConsoleConfig {
            store: config.store.clone(),
            access_key: access_key.clone(),
            secret_key: secret_key.clone(),
            region: listen.region.clone(),
            read_only: false,
            max_upload_bytes: listen.max_request_bytes,
            workspace: Some(stow_console::workspace::WorkspacePages {
                registry: registry.clone(),
                workspace_id: id.to_string(),
                bucket: bucket.clone(),
                objects: config.store.clone(),
                monitor: monitor.clone(),
            }),
            quota: stow_console::Quota {
                max_bytes: (quota.max_bytes > 0).then_some(quota.max_bytes),
                max_objects: (quota.max_objects > 0).then_some(quota.max_objects),
            },
            s3_endpoint: None,
        };
        (at, console)
    });
    run_server(
        config,
        SocketAddr::new(listen.host, args.port),
        console,
        None,
        |endpoint, console_url| {
            // The workspace as `resume` describes it, and the server.
            let mut ready = description;
            if let serde_json::Value::Object(fields) = &mut ready {
                let server = serde_json::json!({
                    "endpoint": endpoint,
                    "region": listen.region,
                    "access_key_id": access_key,
                    "secret_access_key": secret_key,
                    "max_bytes": quota.max_bytes,
                    "max_objects": quota.max_objects,
                    "max_request_bytes": listen.max_request_bytes,
                    "max_concurrent_requests": listen.max_concurrent_requests,
                    "max_multipart_uploads": max_uploads,
                    "console": console_url,
                });
                if let serde_json::Value::Object(server) = server {
                    fields.extend(server);
                }
            }
            listen.announce(&ready.to_string())
        },
    )?;
    Ok(serde_json::Value::Null)
}

pub(crate) fn refuse(code: &str, message: impl Into<String>) -> CliError {
    CliError::new(code, message)
}

fn random_key(len: usize, alphabet: &[u8]) -> String {
    (0..len)
        .map(|_| alphabet[rand::random_range(0..alphabet.len())] as char)
        .collect()
}

pub(crate) fn credentials(
    access_key: Option<String>,
    secret_key: Option<String>,
) -> (String, String) {
    let from_env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let access = access_key.or_else(|| from_env("STOW_LOCAL_ACCESS_KEY_ID"));
    let secret = secret_key.or_else(|| from_env("STOW_LOCAL_SECRET_ACCESS_KEY"));
    match (access, secret) {
        (Some(a), Some(s)) if !a.is_empty() && !s.is_empty() => (a, s),
        _ => (
            format!(
                "STOW{}",
                random_key(16, b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
            ),
            random_key(
                40,
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
            ),
        ),
    }
}

/// Arms parent-death delivery of SIGTERM; refuses a pid that is not our parent.
pub(crate) fn watch_parent(pid: i32) -> Result<(), CliError> {
    // SAFETY: getppid and prctl take plain integers and touch no memory of ours.
    let parent = unsafe { libc::getppid() };
    if parent != pid {
        return Err(refuse(
            "invalid_argument",
            format!("--parent-pid {pid} is not this process's parent ({parent})"),
        ));
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: as above.
        let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) };
        if rc != 0 {
            return Err(refuse("unavailable", "cannot arm parent-death signal"));
        }
        // The parent may have died before the signal was armed.
        // SAFETY: as above.
        if unsafe { libc::getppid() } != pid {
            return Err(refuse(
                "parent_exited",
                "the parent process has already exited",
            ));
        }
    }
    Ok(())
}

pub(crate) fn write_ready_fd(fd: i32, line: &str) -> Result<(), CliError> {
    use std::os::fd::FromRawFd as _;
    // SAFETY: fcntl(F_GETFD) only queries the descriptor table.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(refuse(
            "invalid_argument",
            format!("--ready-fd {fd} is not an open descriptor"),
        ));
    }
    // SAFETY: the descriptor is open (checked above) and was handed to us for
    // this purpose; ManuallyDrop leaves it open for the parent to close.
    let mut file = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) });
    file.write_all(line.as_bytes())
        .and_then(|()| file.write_all(b"\n"))
        .map_err(|e| {
            refuse(
                "unavailable",
                format!("cannot write readiness to fd {fd}: {e}"),
            )
        })
}

/// Space a served store holds back so deletes still commit on a full disk
/// (`StoreOptions::space_reserve_bytes`).
const SPACE_RESERVE_BYTES: u64 = 4 << 20;

pub fn run(args: ServeArgs) -> Result<serde_json::Value, CliError> {
    let listen = &args.listen;
    listen.check()?;
    let opts = StoreOptions {
        max_bytes: (args.max_bytes > 0).then_some(args.max_bytes),
        max_objects: (args.max_objects > 0).then_some(args.max_objects),
        space_reserve_bytes: SPACE_RESERVE_BYTES,
        ..StoreOptions::default()
    };
    let (opts_max_bytes, opts_max_objects) = (opts.max_bytes, opts.max_objects);
    let store = match args.backend {
        Backend::Filesystem => Store::open(&args.data_dir, opts)?,
        Backend::Memory => Store::memory(opts)?,
    };
    // A read-only server changes nothing, lifecycle expiry included.
    let expiry = (!args.read_only).then(|| Expiry {
        store: store.clone(),
        day: match args.lifecycle_day_seconds {
            Some(n) => stow_store::DayLength::Seconds(n),
            None => stow_store::DayLength::Utc,
        },
    });
    let config = ServerConfig {
        read_only: args.read_only,
        cors_origins: args.cors_origins.clone(),
        admin_token: args.admin_token.clone().filter(|t| !t.is_empty()),
        base_host: args.base_host.clone(),
        allow_reset: args.allow_reset,
        ..listen.config(Arc::new(store))
    };
    let (access_key, secret_key) = (config.access_key.clone(), config.secret_key.clone());
    let console = args.console.address(listen.host).map(|at| {
        let console = stow_console::ConsoleConfig {
            store: config.store.clone(),
            access_key: access_key.clone(),
            secret_key: secret_key.clone(),
            region: listen.region.clone(),
            read_only: args.read_only,
            max_upload_bytes: listen.max_request_bytes,
            workspace: None,
            quota: stow_console::Quota {
                max_bytes: opts_max_bytes,
                max_objects: opts_max_objects,
            },
            s3_endpoint: None,
        };
        (at, console)
    });
    let backend_name = match args.backend {
        Backend::Filesystem => "filesystem",
        Backend::Memory => "memory",
    };
    run_server(
        config,
        SocketAddr::new(listen.host, args.port),
        console,
        expiry,
        |endpoint, console_url| {
            let line = match listen.ready_fd {
            Some(_) => serde_json::json!({
                "protocolVersion": 1,
                "binaryVersion": env!("CARGO_PKG_VERSION"),
                "endpoint": endpoint,
                "region": listen.region,
                "accessKeyId": access_key,
                "secretAccessKey": secret_key,
                "mode": "local",
                "backend": backend_name,
                "console": console_url,
                "capabilities": {
                    "persistent": args.backend == Backend::Filesystem,
                    "multipart": true,
                    "upstream": false,
                    "conditionalWrites": true,
                    "presignedUrls": true,
                    "maxBytes": args.max_bytes,
                    "maxObjects": args.max_objects,
                    "maxRequestBytes": listen.max_request_bytes,
                    "maxConcurrentRequests": listen.max_concurrent_requests,
                },
            })
            .to_string(),
            None => format!(
                "STOW_READY endpoint={endpoint} access_key={access_key} secret_key={secret_key} mode=local{}",
                console_url.map(|u| format!(" console={u}")).unwrap_or_default()
            ),
        };
            listen.announce(&line)
        },
    )?;
    Ok(serde_json::Value::Null)
}

/// Lifecycle expiry run by `serve` in the background.
pub(crate) struct Expiry {
    store: Store,
    day: stow_store::DayLength,
}

impl Expiry {
    /// How often expiry runs: a twentieth of a day, between 50 ms and 10
    /// minutes (S3 itself expires within a day of the due time).
    fn period(&self) -> Duration {
        let day = match self.day {
            stow_store::DayLength::Seconds(n) => Duration::from_secs(n),
            stow_store::DayLength::Utc => Duration::from_secs(86_400),
        };
        (day / 20).clamp(Duration::from_millis(50), Duration::from_secs(600))
    }

    /// Runs expiry every [`Expiry::period`] until the task is aborted; each
    /// run on a blocking thread, one at a time.
    async fn run(self) {
        let mut tick = tokio::time::interval(self.period());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let (store, day) = (self.store.clone(), self.day);
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
            match tokio::task::spawn_blocking(move || store.expire_due(now, day)).await {
                Ok(Ok(report)) if !report.is_empty() => {
                    tracing::info!(?report, "lifecycle expiry");
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "lifecycle expiry failed"),
                Err(e) => tracing::warn!(error = %e, "lifecycle expiry stopped"),
            }
        }
    }
}

/// Binds `addr` (and the console's address, if any), calls `announce`
/// with the endpoint and the console's URL once both are ready, and
/// serves until SIGINT/SIGTERM, then drains for up to 10 s. `expiry`, when
/// given, runs in the background meanwhile.
pub(crate) fn run_server(
    config: ServerConfig,
    addr: SocketAddr,
    console: Option<(SocketAddr, stow_console::ConsoleConfig)>,
    expiry: Option<Expiry>,
    announce: impl FnOnce(&str, Option<&str>) -> Result<(), CliError>,
) -> Result<(), CliError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| refuse("unavailable", format!("cannot start the runtime: {e}")))?;
    runtime.block_on(async move {
        let server = Server::bind(addr, config)
            .await
            .map_err(|e| refuse("address_in_use", format!("cannot listen on {addr}: {e}")))?;
        let bound = server.local_addr();
        let shown = if bound.ip().is_unspecified() {
            SocketAddr::new(IpAddr::from([127, 0, 0, 1]), bound.port())
        } else {
            bound
        };
        let endpoint = format!("http://{shown}");
        let console = match console {
            Some((at, mut console)) => Some({
                // Share links point at this S3 port.
                console.s3_endpoint = Some(endpoint.clone());
                stow_console::Console::bind(at, console)
                    .await
                    .map_err(|e| {
                        refuse(
                            "address_in_use",
                            format!("cannot listen on {at} for the console: {e}"),
                        )
                    })?
            }),
            None => None,
        };
        let console_url = console.as_ref().map(stow_console::Console::url);
        let shutdown = shutdown_signal()?;
        tracing::info!("stow listening on {endpoint} (mode=local)");
        announce(&endpoint, console_url.as_deref())?;
        let console = console.map(|c| c.spawn(Duration::from_secs(10)));
        let expiry = expiry.map(|e| tokio::spawn(e.run()));
        server.run(shutdown, Duration::from_secs(10)).await;
        if let Some(expiry) = expiry {
            expiry.abort();
            let _ = expiry.await;
        }
        if let Some(console) = console {
            console.stop().await;
        }
        tracing::info!("stopped; data directory released");
        Ok::<(), CliError>(())
    })
}

/// Installs the SIGINT/SIGTERM handlers now (before readiness is
/// announced, so an early signal cannot kill the process outright) and
/// returns a future that resolves on the first of them.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, CliError> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())
        .map_err(|e| refuse("unavailable", format!("cannot handle SIGTERM: {e}")))?;
    let mut int = signal(SignalKind::interrupt())
        .map_err(|e| refuse("unavailable", format!("cannot handle SIGINT: {e}")))?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
    })
}
