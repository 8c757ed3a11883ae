//! `stow-s3 workspace watch`: hosts a workspace's watch service until
//! SIGINT or SIGTERM, so CLI captures read only what changed.

use std::io::Write;

use stow_checkpoint::watch_service::WatchService;
use stow_checkpoint::Registry;

use crate::CliError;

pub fn run(
    registry: &Registry,
    id: &str,
    parent_pid: Option<i32>,
) -> Result<serde_json::Value, CliError> {
    // Blocked before any thread starts, so every thread inherits the mask
    // and the signals wait for `sigwait` below instead of killing the
    // process mid-capture. A parent's death arrives as SIGTERM too.
    let signals = block_stop_signals()?;
    if let Some(pid) = parent_pid {
        crate::serve::watch_parent(pid)?;
    }
    let service = WatchService::start(registry, id)?;
    let ready = serde_json::json!({
        "version": 1,
        "workspace_id": id,
        "socket": service.socket_path(),
        "pid": std::process::id(),
    });
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{ready}");
        let _ = out.flush();
    }
    let mut sig: libc::c_int = 0;
    // SAFETY: `signals` is an initialised set; `sig` is a valid out slot.
    unsafe { libc::sigwait(&signals, &mut sig) };
    tracing::info!(signal = sig, "stopping the watch");
    drop(service);
    Ok(serde_json::Value::Null)
}

fn block_stop_signals() -> Result<libc::sigset_t, CliError> {
    // SAFETY: the set is initialised by sigemptyset before use, and
    // pthread_sigmask only reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return Err(CliError::new("unavailable", "cannot block SIGINT/SIGTERM"));
        }
        Ok(set)
    }
}
