//! Fault points for crash tests. A process started with [`VAR`] set to a
//! point's name kills itself with SIGKILL when it reaches that point: no
//! destructors, no flush, exactly what `kill -9` leaves. Tests use it to
//! stop a process between two steps whose crash state they check. Without
//! the variable a fault point does nothing.

use std::sync::OnceLock;

/// The environment variable naming the fault point to die at.
pub const VAR: &str = "STOW_TEST_FAULT";

/// Dies here if [`VAR`] names `name`.
pub fn point(name: &str) {
    static ARMED: OnceLock<Option<String>> = OnceLock::new();
    let armed = ARMED.get_or_init(|| std::env::var(VAR).ok().filter(|v| !v.is_empty()));
    if armed.as_deref() == Some(name) {
        tracing::warn!("fault point {name}: killing the process");
        // SAFETY: getpid and kill have no preconditions; the signal ends
        // the process before anything else runs.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
        std::process::abort();
    }
}
