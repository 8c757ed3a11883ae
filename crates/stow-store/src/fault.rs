//! Fault points for the store's crash tests. A process started with
//! [`VAR`] naming a point kills itself with SIGKILL on reaching it: no
//! destructors, no flush, what `kill -9` leaves. Unset (the normal case),
//! a point does nothing. The variable is read once per process.
//!
//! The store's points are `store-reset-emptied` (inside a reset's
//! transaction, before its commit), `store-reset-committed` (after the
//! commit, before the switch to the fresh blob directory),
//! `store-reset-switched` (after the switch, before the old directory is
//! swept) and `store-reset-sweeping` (the sweep has removed one shard).

use std::sync::OnceLock;

/// The environment variable naming the fault point to die at (the same
/// variable the checkpoint engine's fault points read).
pub const VAR: &str = "STOW_TEST_FAULT";

/// Dies here when [`VAR`] names `name`.
pub(crate) fn point(name: &str) {
    static ARMED: OnceLock<Option<String>> = OnceLock::new();
    let armed = ARMED.get_or_init(|| std::env::var(VAR).ok().filter(|v| !v.is_empty()));
    if armed.as_deref() != Some(name) {
        return;
    }
    tracing::warn!("fault point {name}: killing the process");
    // SAFETY: getpid and kill have no preconditions; SIGKILL ends the
    // process before anything else runs.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    std::process::abort();
}
