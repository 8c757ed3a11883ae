//! Benchmark suites. Each suite is a subcommand: it measures ours against a
//! peer doing the same work and returns a [`crate::report::Report`].
//!
//! To add a suite (s3, mcp, workspace): add a module here with a
//! `run(&SuiteArgs) -> Result<Report>`, and a variant to `Suite` in
//! `main.rs`. Timing, statistics and the alternating schedule live in
//! [`crate::harness`]; machine facts in [`crate::machine`].

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub mod mcp;
pub mod mcp_workspace;
pub(crate) mod mcp_workspace_server;
pub mod remote;
pub mod s3;
pub mod store;
pub mod workspace;

/// Options every suite takes.
#[derive(Debug, Clone, clap::Args)]
pub struct SuiteArgs {
    /// Smaller inputs and fewer repetitions (about a minute).
    #[arg(long)]
    pub quick: bool,
    /// Also write every figure, sample and machine fact to this JSON file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Where to put generated data (a fresh subdirectory, deleted at the
    /// end). Defaults to the system temporary directory.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Do not wait for the filesystem to settle after a previous run's
    /// cleanup.
    #[arg(long)]
    pub no_settle: bool,
    /// Workspace suites: files in the generated tree (15 KB each on
    /// average; default 10,000, or 1,000 with --quick).
    #[arg(long, value_name = "N")]
    pub files: Option<u64>,
}

/// How long the filesystem needs after a run deletes its data: this
/// machine's ext4 has no journal, and in that mode it skips inodes freed
/// in the last 60 s when it allocates one (fs/ext4/ialloc.c,
/// `recently_deleted`), so file creation is slower for about a minute
/// after a mass delete.
const SETTLE: Duration = Duration::from_secs(90);
/// Records, in the base data directory, when a run last deleted its data.
const CLEANUP_MARKER: &str = ".stow-bench-cleanup";

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Waits until [`SETTLE`] has passed since a previous run's cleanup under
/// `base`.
pub fn settle(base: &Path) {
    let Ok(text) = std::fs::read_to_string(base.join(CLEANUP_MARKER)) else {
        return;
    };
    let Ok(at) = text.trim().parse::<u64>() else {
        return;
    };
    let since = Duration::from_secs(now_unix().saturating_sub(at));
    if let Some(wait) = SETTLE.checked_sub(since).filter(|w| !w.is_zero()) {
        eprintln!(
            "waiting {} s: a previous run deleted its data {} s ago and the filesystem is \
             still slow after mass deletes (--no-settle skips this)",
            wait.as_secs(),
            since.as_secs()
        );
        std::thread::sleep(wait);
    }
}

/// Notes that a run has just deleted its data under `base`.
pub fn mark_cleanup(base: &Path) {
    let _ = std::fs::write(base.join(CLEANUP_MARKER), format!("{}\n", now_unix()));
}
