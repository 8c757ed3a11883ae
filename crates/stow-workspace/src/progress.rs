//! Progress reports of long operations (capture, restore), for a caller
//! that wants to show them. The library never prints.

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
