//! The frame every s3 suite run shares: the settle wait, a fresh data
//! directory, machine facts and load average, and the cleanup at the end.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::harness::{context, vm_hwm_kib, Result};
use crate::machine::{loadavg, Machine};
use crate::report::Info;
use crate::suites::SuiteArgs;

/// The frame of an s3 suite run: the settle wait, a fresh data directory
/// under `--dir`, the machine facts and the load average at the start;
/// [`Frame::finish`] deletes the data and notes the cleanup.
pub(crate) struct Frame {
    pub(crate) started_unix: u64,
    pub(crate) t0: Instant,
    pub(crate) loadavg_start: Option<[f64; 3]>,
    pub(crate) machine: Machine,
    pub(crate) tmp: tempfile::TempDir,
    base: std::path::PathBuf,
    waited: f64,
}

/// What [`Frame::finish`] measured at the end of a run.
pub(crate) struct Finish {
    pub(crate) peak_rss_kib: Option<u64>,
    pub(crate) loadavg_end: Option<[f64; 3]>,
}

impl Frame {
    /// Waits for the filesystem to settle (unless `--no-settle`), then
    /// makes the run's data directory `{prefix}XXXX`.
    pub(crate) fn open(args: &SuiteArgs, prefix: &str) -> Result<Frame> {
        let started_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
        std::fs::create_dir_all(&base).map_err(context(format!("create {}", base.display())))?;
        let waited = Instant::now();
        if !args.no_settle {
            crate::suites::settle(&base);
        }
        let waited = waited.elapsed().as_secs_f64();
        let t0 = Instant::now();
        let loadavg_start = loadavg();
        let tmp = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(&base)
            .map_err(context(format!("create a directory in {}", base.display())))?;
        let machine = Machine::probe(tmp.path());
        Ok(Frame {
            started_unix,
            t0,
            loadavg_start,
            machine,
            tmp,
            base,
            waited,
        })
    }

    /// Takes the peak RSS and the load average, deletes the data directory
    /// (on several threads: many files) and adds the time it took, and the
    /// settle wait, to `info`.
    pub(crate) fn finish(self, info: &mut Vec<Info>) -> Result<Finish> {
        let peak_rss_kib = vm_hwm_kib();
        let loadavg_end = loadavg();
        let t = Instant::now();
        // Many files: unlink them on several threads first (see the store suite).
        let removed = crate::harness::remove_files_parallel(self.tmp.path(), 8);
        let closed = self.tmp.close();
        crate::suites::mark_cleanup(&self.base);
        removed?;
        closed.map_err(context("delete the data directory"))?;
        info.push(Info {
            name: "delete the data directory".into(),
            value: t.elapsed().as_secs_f64(),
            unit: "s".into(),
        });
        if self.waited > 0.5 {
            info.push(Info {
                name:
                    "waited for the filesystem to settle after a previous run (not in the run time)"
                        .into(),
                value: self.waited,
                unit: "s".into(),
            });
        }
        Ok(Finish {
            peak_rss_kib,
            loadavg_end,
        })
    }
}
