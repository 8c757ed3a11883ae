//! Progress reports of long operations (capture, restore, export, import),
//! for a caller that wants to show them, their deadlines, and phase
//! timings in the debug log. The library never prints.

use crate::error::{Result, WsError};

/// Refuses with `cancelled` once `deadline` has passed (nothing is
/// published after that).
pub fn check_deadline(deadline: Option<std::time::Instant>) -> Result<()> {
    match deadline {
        Some(d) if std::time::Instant::now() > d => Err(WsError::Cancelled(
            "the deadline passed before the checkpoint was published".into(),
        )),
        _ => Ok(()),
    }
}

/// Receives progress from the thread doing the work.
pub trait Progress: Sync {
    /// `done` of `total` bytes of `phase` (`"capture"`, `"restore"`) are
    /// finished. Called often; implementations throttle their output.
    fn update(&self, phase: &str, done: u64, total: u64);
}

/// Ignores every report.
pub struct NoProgress;

impl Progress for NoProgress {
    fn update(&self, _phase: &str, _done: u64, _total: u64) {}
}

/// Logs how long each phase of an operation took, at debug level
/// (`STOW_LOG=stow_checkpoint=debug`).
pub struct PhaseClock {
    op: &'static str,
    since: std::time::Instant,
}

impl PhaseClock {
    pub fn start(op: &'static str) -> Self {
        PhaseClock {
            op,
            since: std::time::Instant::now(),
        }
    }

    pub fn lap(&mut self, phase: &str) {
        let now = std::time::Instant::now();
        tracing::debug!(
            op = self.op,
            phase,
            micros = (now - self.since).as_micros() as u64,
            "phase"
        );
        self.since = now;
    }
}
