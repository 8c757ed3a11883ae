//! Fault points for crash tests, shared by every storage crate. A
//! process started with [`VAR`] set to a point's name kills itself with
//! SIGKILL when it reaches that point: no destructors, no flush, exactly
//! what `kill -9` leaves. Tests use it to stop a process between two
//! steps whose crash state they check. Without the variable a fault point
//! does nothing (the variable is read once per process).
//!
//! The store's own points are `store-reset-emptied` (inside a reset's
//! transaction, before its commit), `store-reset-committed` (after the
//! commit, before the switch to the fresh blob directory),
//! `store-reset-switched` (after the switch, before the old directory is
//! swept), `store-reset-sweeping` (the sweep has removed one shard) and
//! `store-lifecycle-batch` (inside an expiry transaction, before its
//! commit);
//! the checkpoint engine names its points at their call sites.
//!
//! A *skip point* ([`skipped`]) is the opposite: it leaves out one step
//! (an fsync) when [`VAR`] names it, so the power-loss harness
//! (`tools/powerloss`, `tests/powerloss`) can show that it notices the
//! step missing. The store's is `store-skip-stage-dir-fsync` (the fsync of
//! `tmp/` after a large body is staged there); the checkpoint engine's is
//! `workspace-skip-restore-syncfs` (the flush of a restored tree).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The environment variable naming the fault point to die at.
pub const VAR: &str = "STOW_TEST_FAULT";

/// Dies here if [`VAR`] names `name`; `name#N` dies at the point's Nth
/// visit instead of its first (a point inside a loop); `name@MS` sleeps
/// MS milliseconds there instead of dying (a window for a concurrent
/// writer).
pub fn point(name: &str) {
    static VISITS: AtomicU64 = AtomicU64::new(0);
    let Some(armed) = armed() else {
        return;
    };
    if armed.point != name || VISITS.fetch_add(1, Ordering::SeqCst) + 1 < armed.nth {
        return;
    }
    if let Some(ms) = armed.sleep_ms {
        tracing::warn!("fault point {name}: pausing {ms} ms");
        std::thread::sleep(std::time::Duration::from_millis(ms));
        return;
    }
    tracing::warn!("fault point {name}: killing the process");
    // SAFETY: getpid and kill have no preconditions; the signal ends the
    // process before anything else runs.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    std::process::abort();
}

/// Whether the test-only skip point `name` is armed: [`VAR`] names it
/// (every visit skips). For tests of the power-loss harness only: a caller
/// leaves out one fsync when this says so, to show the harness fails.
pub fn skipped(name: &str) -> bool {
    armed().is_some_and(|a| a.point == name)
}

/// The point [`VAR`] names, read once per process.
fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let v = std::env::var(VAR).ok().filter(|v| !v.is_empty())?;
            let (v, sleep_ms) = match v.rsplit_once('@') {
                Some((p, ms)) => (p.to_string(), ms.parse().ok()),
                None => (v, None),
            };
            let (point, nth) = match v.rsplit_once('#') {
                Some((p, n)) => (p.to_string(), n.parse().unwrap_or(1)),
                None => (v, 1),
            };
            Some(Armed {
                point,
                nth,
                sleep_ms,
            })
        })
        .as_ref()
}

/// A fault point armed by [`VAR`].
struct Armed {
    point: String,
    nth: u64,
    sleep_ms: Option<u64>,
}
