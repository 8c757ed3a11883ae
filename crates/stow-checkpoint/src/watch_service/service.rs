//! The service side: one workspace's [`TreeMonitor`] behind a Unix socket.
//!
//! Ownership of the socket is a lock, not the socket file: the service
//! holds `.stow/watch/<ws>.lock` (flock) for its whole life, so a socket
//! file whose owner died (kill -9 leaves it behind) is known stale and is
//! replaced by the next service, while a live service is never displaced.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{
    socket_name, watch_dir, with_short_path, ReplyFrame, Request, RequestFrame, WatchReply,
    MAX_REQUEST_BYTES, PROTOCOL_VERSION,
};
use crate::error::{Result, WsError};
use crate::fsutil::{create_private_dir, FileLock};
use crate::registry::Registry;
use crate::TreeMonitor;

/// Requests served at once; more are refused with `in_use` (captures of
/// one workspace run one at a time anyway).
const MAX_ACTIVE: usize = 8;

/// How long a connection may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The pause after a failed `accept`.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// A running watch service for one workspace. Dropping it stops accepting,
/// lets requests in flight finish, and removes the socket.
pub struct WatchService {
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
    dir: PathBuf,
    name: String,
    _lock: FileLock,
}

struct Shared {
    registry: Registry,
    workspace_id: String,
    monitor: TreeMonitor,
    stopping: AtomicBool,
    active: Mutex<usize>,
    idle: Condvar,
}

impl WatchService {
    /// Starts serving captures of workspace `ws`. Refused with `not_found`
    /// for an unknown workspace and `in_use` while another service runs.
    pub fn start(registry: &Registry, ws: &str) -> Result<WatchService> {
        Self::start_with(registry, ws, TreeMonitor::new())
    }

    /// [`WatchService::start`] in a process that owns the workspace's
    /// bucket view (`workspace serve`): portable captures and rewinds it
    /// serves read and write the private objects through `view`.
    pub fn start_owning(
        registry: &Registry,
        ws: &str,
        view: Arc<crate::bucket::WorkspaceBucket>,
    ) -> Result<WatchService> {
        Self::start_with(registry, ws, TreeMonitor::owning(view))
    }

    fn start_with(registry: &Registry, ws: &str, monitor: TreeMonitor) -> Result<WatchService> {
        crate::paths::check_workspace_id(ws)?;
        registry.get(ws)?;
        let dir = watch_dir(registry);
        registry.ensure()?;
        create_private_dir(&dir)?;
        let lock = FileLock::try_lock(&dir.join(format!("{ws}.lock")))?
            .ok_or_else(|| WsError::AlreadyWatched(ws.to_string()))?;
        let name = socket_name(ws);
        match std::fs::remove_file(dir.join(&name)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(WsError::io_at("remove stale socket", &dir.join(&name), e)),
        }
        let listener = with_short_path(&dir, &name, |p| UnixListener::bind(p))
            .map_err(|e| WsError::io_at("bind watch socket", &dir.join(&name), e))?;
        let shared = Arc::new(Shared {
            registry: registry.clone(),
            workspace_id: ws.to_string(),
            monitor,
            stopping: AtomicBool::new(false),
            active: Mutex::new(0),
            idle: Condvar::new(),
        });
        let accept = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("stow-watch".into())
                .spawn(move || accept_loop(&shared, &listener))
                .map_err(|e| WsError::io_at("start watch", &dir, e))?
        };
        Ok(WatchService {
            shared,
            accept: Some(accept),
            dir,
            name,
            _lock: lock,
        })
    }

    /// The socket captures of this workspace are sent to.
    pub fn socket_path(&self) -> PathBuf {
        self.dir.join(&self.name)
    }

    /// Whether the service holds a watch from an earlier capture (the next
    /// one reads only what changed).
    pub fn is_watching(&self) -> bool {
        self.shared.monitor.is_watching()
    }
}

impl Drop for WatchService {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees `stopping`.
        let _ = with_short_path(&self.dir, &self.name, |p| UnixStream::connect(p));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        let mut active = self.shared.active.lock().unwrap_or_else(|e| e.into_inner());
        while *active > 0 {
            active = self
                .shared
                .idle
                .wait(active)
                .unwrap_or_else(|e| e.into_inner());
        }
        drop(active);
        // Still under the lock: no newer service owns this name yet.
        let _ = std::fs::remove_file(self.dir.join(&self.name));
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: &UnixListener) {
    for conn in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let stream = match conn {
            Ok(stream) => stream,
            Err(e) => {
                // Out of descriptors (or memory) the error repeats at once:
                // pause instead of spinning until requests finish.
                tracing::warn!(error = %e, "accepting a watch request failed");
                std::thread::sleep(ACCEPT_BACKOFF);
                continue;
            }
        };
        {
            let mut active = shared.active.lock().unwrap_or_else(|e| e.into_inner());
            if *active >= MAX_ACTIVE {
                drop(active);
                let busy = WatchReply::refused(&WsError::Busy(format!(
                    "the watch is serving {MAX_ACTIVE} requests; retry"
                )));
                let _ = answer(&stream, busy);
                continue;
            }
            *active += 1;
        }
        let worker = Arc::clone(shared);
        let spawned = std::thread::Builder::new()
            .name("stow-watch-req".into())
            .spawn(move || {
                serve_one(&worker, stream);
                let mut active = worker.active.lock().unwrap_or_else(|e| e.into_inner());
                *active -= 1;
                worker.idle.notify_all();
            });
        if spawned.is_err() {
            let mut active = shared.active.lock().unwrap_or_else(|e| e.into_inner());
            *active -= 1;
        }
    }
}

/// Reads one request line, runs it with the monitor, answers.
fn serve_one(shared: &Shared, stream: UnixStream) {
    let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
    let mut line = String::new();
    let read = BufReader::new((&stream).take(MAX_REQUEST_BYTES)).read_line(&mut line);
    if read.is_err() || !line.ends_with('\n') {
        // Not a whole request: nothing is done, and the client knows it
        // (it never sees an answer).
        return;
    }
    let reply = match serde_json::from_str::<RequestFrame>(&line) {
        Ok(env) if env.version != PROTOCOL_VERSION => refused(format!(
            "watch protocol version {} is not {PROTOCOL_VERSION}",
            env.version
        )),
        Ok(env) if env.request.workspace_id() != shared.workspace_id => refused(format!(
            "this watch serves workspace {}, not {}",
            shared.workspace_id,
            env.request.workspace_id()
        )),
        Ok(env) => match env.request {
            Request::Capture(c) => c.run(&shared.registry, Some(&shared.monitor), None),
            Request::Rewind(r) => r.run(&shared.registry, Some(&shared.monitor), None),
            Request::Status(c) => c.run(&shared.registry, Some(&shared.monitor)),
        },
        Err(e) => refused(format!("unreadable watch request: {e}")),
    };
    let _ = answer(&stream, reply);
}

fn refused(message: String) -> WatchReply {
    WatchReply::refused(&WsError::InvalidRequest(message))
}

fn answer(mut stream: &UnixStream, reply: WatchReply) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(&ReplyFrame {
        version: PROTOCOL_VERSION,
        reply,
    })
    .map_err(std::io::Error::other)?;
    line.push(b'\n');
    let _ = stream.set_write_timeout(Some(REQUEST_TIMEOUT));
    stream.write_all(&line)?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_partition_path_still_binds() {
        let tmp = tempfile::tempdir().unwrap();
        let deep = tmp.path().join("p".repeat(90)).join("q".repeat(40));
        std::fs::create_dir_all(&deep).unwrap();
        let name = "ws_0123456789abcdef.sock";
        assert!(deep.join(name).as_os_str().len() > 108);
        let l = with_short_path(&deep, name, |p| UnixListener::bind(p)).unwrap();
        assert!(deep.join(name).exists());
        let c = with_short_path(&deep, name, |p| UnixStream::connect(p));
        assert!(c.is_ok());
        drop(l);
    }
}
