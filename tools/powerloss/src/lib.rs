//! A power-loss harness: a FUSE passthrough file system that remembers
//! what was made durable (`fsync`, `fdatasync`, directory `fsync`,
//! `syncfs`) and, told to cut the power, rewrites its backing directory to
//! only that. See the crate README.

pub mod control;
pub mod core;
pub mod error;
pub mod fs;
pub mod model;
pub mod rebuild;
mod sys;

use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::Arc;

use crate::error::{Context, Result};

/// Mounts `backing` at `mnt`, serves the control socket at `control`, and
/// calls `ready` once both are up. Returns when power was cut (the mount
/// is then detached) or the file system was unmounted.
pub fn run(
    backing: &Path,
    mnt: &Path,
    control: &Path,
    threads: usize,
    ready: impl FnOnce(),
) -> Result<()> {
    let core = core::Core::open(backing)?;
    clear_stale_mount(mnt);
    let _ = std::fs::remove_file(control);
    let listener = UnixListener::bind(control).ctx(|| format!("bind {}", control.display()))?;
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("powerloss".into()),
        fuser::MountOption::Subtype("powerloss".into()),
    ];
    config.acl = fuser::SessionACL::All;
    config.n_threads = Some(threads.max(1));
    let session = fuser::Session::new(fs::PowerlossFs::new(Arc::clone(&core)), mnt, &config)
        .ctx(|| format!("mount {}", mnt.display()))?;
    let bg = session.spawn().ctx(|| "start the FUSE session".into())?;
    // An unmount from outside ends the session: the daemon ends with it.
    std::thread::spawn(move || {
        let _ = bg.join();
        std::process::exit(0);
    });
    ready();
    let served = control::serve(core, listener);
    detach(mnt);
    let _ = std::fs::remove_file(control);
    served
}

/// Lazily unmounts `mnt` (processes still inside see `ENOTCONN`).
pub fn detach(mnt: &Path) {
    if let Ok(c) = std::ffi::CString::new(mnt.as_os_str().as_encoded_bytes()) {
        // SAFETY: a valid C string.
        unsafe {
            libc::umount2(c.as_ptr(), libc::MNT_DETACH);
        }
    }
}

/// A mount point left by a daemon that died answers `ENOTCONN`: detach it.
fn clear_stale_mount(mnt: &Path) {
    if let Err(e) = std::fs::metadata(mnt) {
        if e.raw_os_error() == Some(libc::ENOTCONN) {
            detach(mnt);
        }
    }
}
