//! Captures through a watch that outlives one process.
//!
//! A CLI capture is a new process each time: it must stat every file of the
//! tree to learn what changed, and on a 100,000-file tree that stat pass
//! alone costs more than the rest of the capture. A long-lived process
//! keeps an inotify watch instead ([`TreeMonitor`]); this module lets
//! short-lived captures use it. `stow-s3 workspace watch` (and `workspace
//! serve`, while it runs) hosts a [`WatchService`] on a Unix socket in the
//! partition's private state directory, `.stow/watch/<ws>.sock`; a capture
//! ([`capture`]) sends its [`CaptureRequest`] there when a service answers
//! and otherwise runs in-process. Both run the same [`CaptureRequest::run`],
//! so a checkpoint is the same whichever process made it; only the
//! monitor differs.
//!
//! Failure rules. No service, a stale socket (its process died) or a
//! request that could not be sent: the capture runs in-process. A service
//! that dies after taking the request: a keyed capture is retried
//! in-process (request keys make that safe); a plain one reports
//! `outcome_unknown`, as a capture killed mid-way would have left it.

mod service;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::WsError;
use crate::keyed::{keyed_capture, KeyedEnvelope, KeyedRequest};
use crate::progress::Progress;
use crate::registry::Registry;
use crate::rewind::{RewindRequest, RewindResult};
use crate::status::{status_monitored, StatusResult};
use crate::{CaptureOptions, CaptureSpec, CheckpointResult, TreeMonitor};

pub use service::WatchService;

/// The wire version of requests and replies (2: requests are tagged
/// captures or rewinds; 3: and statuses; 4: statuses with finer kinds).
const PROTOCOL_VERSION: u32 = 4;

/// A request line is refused past this size.
const MAX_REQUEST_BYTES: u64 = 64 << 10;

/// One capture, as `workspace checkpoint` states it: plain, or keyed when
/// `request_key` is set (or `resolve`, which only looks).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CaptureRequest {
    pub workspace_id: String,
    /// What to capture (its members travel at the top level of a request).
    #[serde(flatten)]
    pub spec: CaptureSpec,
    pub request_key: Option<String>,
    pub resolve: bool,
    /// Deadline of a keyed capture, in nanoseconds.
    pub timeout_nanos: u64,
}

/// One rewind, as `workspace rewind` states it (a dry run never travels:
/// it changes nothing and needs no watch).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RewindCall {
    pub workspace_id: String,
    pub to: String,
    pub paths: Vec<String>,
    pub message: Option<String>,
    pub request_key: Option<String>,
    #[serde(default)]
    pub include_sensitive: bool,
}

impl RewindCall {
    /// Runs the rewind in this process, with `monitor` when a long-lived
    /// process keeps one for the workspace.
    pub fn run(
        &self,
        registry: &Registry,
        monitor: Option<&TreeMonitor>,
        progress: Option<&dyn Progress>,
    ) -> WatchReply {
        let req = RewindRequest {
            workspace_id: &self.workspace_id,
            to: &self.to,
            paths: self.paths.clone(),
            dry_run: false,
            include_sensitive: self.include_sensitive,
            message: self.message.clone(),
            request_key: self.request_key.as_deref(),
            progress,
            monitor,
        };
        match crate::rewind::rewind(registry, &req) {
            Ok(result) => WatchReply::Rewound {
                result: Box::new(result),
            },
            Err(e) => WatchReply::refused(&e),
        }
    }
}

/// One status, as `workspace status` states it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct StatusCall {
    pub workspace_id: String,
    /// The checkpoint compared with (`None`: the head).
    pub against: Option<String>,
}

impl StatusCall {
    /// Runs the status in this process, with `monitor` when a long-lived
    /// process keeps one for the workspace.
    pub fn run(&self, registry: &Registry, monitor: Option<&TreeMonitor>) -> WatchReply {
        match status_monitored(
            registry,
            &self.workspace_id,
            self.against.as_deref(),
            monitor,
        ) {
            Ok(result) => WatchReply::Status {
                result: Box::new(result),
            },
            Err(e) => WatchReply::refused(&e),
        }
    }
}

/// What a watch service is asked.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Request {
    Capture(CaptureRequest),
    Rewind(RewindCall),
    Status(StatusCall),
}

impl Request {
    fn workspace_id(&self) -> &str {
        match self {
            Request::Capture(c) => &c.workspace_id,
            Request::Rewind(r) => &r.workspace_id,
            Request::Status(s) => &s.workspace_id,
        }
    }

    /// Whether the request is safe to run again in process when a service
    /// took it and gave no answer: keyed, or changing nothing.
    fn is_repeatable(&self) -> bool {
        match self {
            Request::Capture(c) => c.is_keyed(),
            Request::Rewind(r) => r.request_key.is_some(),
            Request::Status(_) => true,
        }
    }
}

/// What a capture or a rewind answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum WatchReply {
    /// A plain capture's result.
    Captured { result: CheckpointResult },
    /// A keyed capture's envelope (it may carry an error), with the
    /// error's human message (which the envelope's JSON leaves out).
    Keyed {
        envelope: KeyedEnvelope,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// A rewind's result (it may list conflicts).
    Rewound { result: Box<RewindResult> },
    /// A status's result.
    Status { result: Box<StatusResult> },
    /// A plain capture or a rewind refused (or failed) with this code.
    Refused {
        code: String,
        message: String,
        /// Whether the same request may succeed when sent again.
        #[serde(default)]
        retryable: bool,
    },
}

impl WatchReply {
    fn refused(e: &WsError) -> WatchReply {
        WatchReply::Refused {
            code: e.code().to_string(),
            message: e.to_string(),
            retryable: e.retryable(),
        }
    }
}

impl CaptureRequest {
    fn is_keyed(&self) -> bool {
        self.request_key.is_some() || self.resolve
    }

    /// Runs the capture in this process, with `monitor` when a long-lived
    /// process keeps one for the workspace.
    pub fn run(
        &self,
        registry: &Registry,
        monitor: Option<&TreeMonitor>,
        progress: Option<&dyn Progress>,
    ) -> WatchReply {
        if self.is_keyed() {
            let envelope = keyed_capture(
                registry,
                &KeyedRequest {
                    workspace_id: &self.workspace_id,
                    request_key: self.request_key.as_deref().unwrap_or(""),
                    resolve: self.resolve,
                    timeout: Duration::from_nanos(self.timeout_nanos),
                    spec: self.spec.clone(),
                    monitor,
                },
            );
            let message = envelope.error.as_ref().map(|e| e.message.clone());
            return WatchReply::Keyed { envelope, message };
        }
        let opts = CaptureOptions {
            spec: self.spec.clone(),
            progress,
            monitor,
            ..CaptureOptions::default()
        };
        match crate::capture(registry, &self.workspace_id, &opts) {
            Ok(result) => WatchReply::Captured { result },
            Err(e) => WatchReply::refused(&e),
        }
    }
}

/// Runs `req` through the workspace's watch service when one answers, else
/// in this process (with `progress`).
pub fn capture(
    registry: &Registry,
    req: &CaptureRequest,
    progress: Option<&dyn Progress>,
) -> WatchReply {
    capture_in(registry, req, progress, None)
}

/// [`capture`] from a long-lived process with its own `monitor` of the
/// workspace (the MCP server), used when no service takes the request: a
/// running `workspace serve` owns the bucket view a portable capture reads,
/// so its service must take that capture.
pub fn capture_in(
    registry: &Registry,
    req: &CaptureRequest,
    progress: Option<&dyn Progress>,
    monitor: Option<&TreeMonitor>,
) -> WatchReply {
    deliver(
        registry,
        &Request::Capture(req.clone()),
        req.timeout_nanos,
        || req.run(registry, monitor, progress),
        || {
            format!(
                "the watch serving workspace {} stopped during the capture; whether a \
                 checkpoint was published is unknown (list the checkpoints)",
                req.workspace_id
            )
        },
    )
}

/// Runs a rewind through the workspace's watch service when one answers
/// (its undo capture then reads only what changed, and the rewind is
/// ordered with the service's own work), else in this process.
pub fn rewind(
    registry: &Registry,
    call: &RewindCall,
    progress: Option<&dyn Progress>,
) -> WatchReply {
    rewind_in(registry, call, progress, None)
}

/// [`rewind`] from a long-lived process with its own `monitor` of the
/// workspace (see [`capture_in`]).
pub fn rewind_in(
    registry: &Registry,
    call: &RewindCall,
    progress: Option<&dyn Progress>,
    monitor: Option<&TreeMonitor>,
) -> WatchReply {
    deliver(
        registry,
        &Request::Rewind(call.clone()),
        0,
        || call.run(registry, monitor, progress),
        || {
            format!(
                "the watch serving workspace {} stopped during the rewind; the next rewind, \
                 capture or status of the workspace finishes it",
                call.workspace_id
            )
        },
    )
}

/// Sends `request` to its workspace's service and returns the answer. No
/// service took it: it runs `here`, in this process. A service took it
/// and gave no answer: a keyed request or a status runs `here` too (a key
/// makes a second run safe: a finished one replays, an interrupted rewind
/// is finished first); a plain one is `outcome_unknown`, saying `lost`.
fn deliver(
    registry: &Registry,
    request: &Request,
    timeout_nanos: u64,
    here: impl FnOnce() -> WatchReply,
    lost: impl FnOnce() -> String,
) -> WatchReply {
    match through_service(registry, request, timeout_nanos) {
        Delivery::Answered(reply) => *reply,
        Delivery::Untaken => here(),
        Delivery::Lost if request.is_repeatable() => here(),
        Delivery::Lost => WatchReply::refused(&WsError::OutcomeUnknown(lost())),
    }
}

/// Where a request sent to a service ended.
enum Delivery {
    Answered(Box<WatchReply>),
    /// No service took the request: nothing was done.
    Untaken,
    /// The service took the request and gave no answer.
    Lost,
}

/// Runs a status through the workspace's watch service when one answers
/// (it then reads only what changed since its last look), else in this
/// process.
pub fn status(registry: &Registry, call: &StatusCall) -> WatchReply {
    deliver(
        registry,
        &Request::Status(call.clone()),
        0,
        || call.run(registry, None),
        String::new,
    )
}

/// Sends `req` to its workspace's service; a keyed capture waits at most
/// `timeout_nanos` (and a margin) for the answer.
fn through_service(registry: &Registry, req: &Request, timeout_nanos: u64) -> Delivery {
    if crate::paths::check_workspace_id(req.workspace_id()).is_err() {
        return Delivery::Untaken;
    }
    let dir = watch_dir(registry);
    let name = socket_name(req.workspace_id());
    if !dir.join(&name).exists() {
        return Delivery::Untaken;
    }
    let mut stream = match connect(&dir, &name) {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "no watch answers; capturing in process");
            return Delivery::Untaken;
        }
    };
    let mut line = match serde_json::to_vec(&RequestFrame {
        version: PROTOCOL_VERSION,
        request: req.clone(),
    }) {
        Ok(l) => l,
        Err(_) => return Delivery::Untaken,
    };
    line.push(b'\n');
    // The service acts only on a whole line, so a request not fully sent
    // was not acted on.
    if stream
        .write_all(&line)
        .and_then(|()| stream.flush())
        .is_err()
    {
        return Delivery::Untaken;
    }
    if matches!(req, Request::Capture(c) if c.is_keyed()) {
        // A keyed capture has a deadline; past it (and a margin) the
        // service is taken as lost and the key is resolved in process.
        let wait = Duration::from_nanos(timeout_nanos) + Duration::from_secs(5);
        let _ = stream.set_read_timeout(Some(wait));
    }
    let mut answer = String::new();
    match BufReader::new(stream).read_line(&mut answer) {
        Ok(n) if n > 0 => match serde_json::from_str::<ReplyFrame>(&answer) {
            Ok(r) if r.version == PROTOCOL_VERSION => Delivery::Answered(Box::new(r.reply)),
            _ => Delivery::Lost,
        },
        _ => Delivery::Lost,
    }
}

/// A request on the wire.
#[derive(Serialize, Deserialize)]
struct RequestFrame {
    version: u32,
    request: Request,
}

/// A reply on the wire.
#[derive(Serialize, Deserialize)]
struct ReplyFrame {
    version: u32,
    reply: WatchReply,
}

/// Whether a watch service (`workspace watch`, `workspace serve`) holds
/// workspace `ws` now.
pub fn is_watched(registry: &Registry, ws: &str) -> crate::Result<bool> {
    crate::paths::check_workspace_id(ws)?;
    let lock = watch_dir(registry).join(format!("{ws}.lock"));
    if !lock.exists() {
        return Ok(false);
    }
    Ok(crate::fsutil::FileLock::try_lock(&lock)?.is_none())
}

/// The partition's directory of watch sockets and their locks.
fn watch_dir(registry: &Registry) -> PathBuf {
    registry.state_dir().join("watch")
}

fn socket_name(ws: &str) -> String {
    format!("{ws}.sock")
}

/// A socket address is at most 107 bytes; a longer path is reached through
/// an open descriptor of its directory (`/proc/self/fd/N/name`).
const MAX_SOCKET_PATH: usize = 100;

fn connect(dir: &Path, name: &str) -> std::io::Result<UnixStream> {
    with_short_path(dir, name, |p| UnixStream::connect(p))
}

/// Calls `f` with a path naming `dir/name` short enough for a socket
/// address.
fn with_short_path<T>(
    dir: &Path,
    name: &str,
    f: impl FnOnce(&Path) -> std::io::Result<T>,
) -> std::io::Result<T> {
    let full = dir.join(name);
    if full.as_os_str().len() <= MAX_SOCKET_PATH {
        return f(&full);
    }
    let handle = std::fs::File::open(dir)?;
    use std::os::unix::io::AsRawFd;
    f(&PathBuf::from(format!(
        "/proc/self/fd/{}/{name}",
        handle.as_raw_fd()
    )))
}
