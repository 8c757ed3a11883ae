//! Measurement helpers shared by every suite: timed multi-threaded runs,
//! process CPU time, peak RSS, repetition statistics and the alternating
//! ours/peer schedule (A B A B …).

use std::fmt;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;

/// Errors of the harness: anything, with a message.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
pub type Result<T> = std::result::Result<T, Error>;

/// Wraps an error with what was being done.
pub fn context<E: fmt::Display>(what: impl fmt::Display) -> impl FnOnce(E) -> Error {
    move |e| format!("{what}: {e}").into()
}

/// One timed run of a workload (one repetition of one side).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Run {
    /// Wall-clock seconds from the start signal to the last worker's end.
    pub elapsed_s: f64,
    /// CPU seconds (user + system) of the threads doing the work, from
    /// `/proc/thread-self/schedstat`. Kernel threads working on their behalf
    /// (journal commits, writeback) are not included.
    pub cpu_s: Option<f64>,
    /// Operations completed.
    pub ops: u64,
    /// Payload bytes moved.
    pub bytes: u64,
}

impl Run {
    /// CPU microseconds per operation, if CPU time is known.
    pub fn cpu_us_per_op(&self) -> Option<f64> {
        match (self.cpu_s, self.ops) {
            (Some(cpu), ops) if ops > 0 => Some(cpu * 1e6 / ops as f64),
            _ => None,
        }
    }
}

/// What one worker did: operations and payload bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Work {
    pub ops: u64,
    pub bytes: u64,
}

impl std::ops::AddAssign for Work {
    fn add_assign(&mut self, o: Work) {
        self.ops += o.ops;
        self.bytes += o.bytes;
    }
}

/// CPU time the calling thread has spent running (user + system), in
/// nanoseconds, from `/proc/thread-self/schedstat`.
pub fn thread_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = stat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// Peak resident set size of this process in KiB (`VmHWM`).
pub fn vm_hwm_kib() -> Option<u64> {
    status_kib("VmHWM:")
}

fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..].split_whitespace().next()?.parse().ok()
}

/// User+system CPU of this whole process plus that of the child processes
/// it has waited for (`getrusage` SELF + CHILDREN).
pub fn process_and_children_cpu() -> Option<Duration> {
    let usage = |who| {
        // SAFETY: getrusage fills the zeroed struct we own.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        (unsafe { libc::getrusage(who, &mut ru) } == 0).then(|| {
            let tv = |t: libc::timeval| {
                Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
            };
            tv(ru.ru_utime) + tv(ru.ru_stime)
        })
    };
    Some(usage(libc::RUSAGE_SELF)? + usage(libc::RUSAGE_CHILDREN)?)
}

/// Times `body` like [`time_one`], counting the CPU of every thread of the
/// process and of the child processes `body` waits for: for work that
/// spawns helper threads or runs commands. Nothing else may run in the
/// process meanwhile.
pub fn time_one_all_cpu(body: impl FnOnce() -> Result<Work>) -> Result<Run> {
    let cpu0 = process_and_children_cpu();
    let mut run = time_one(body)?;
    run.cpu_s = process_and_children_cpu()
        .zip(cpu0)
        .map(|(b, a)| b.saturating_sub(a).as_secs_f64());
    Ok(run)
}

/// Times `body` on the calling thread.
pub fn time_one(body: impl FnOnce() -> Result<Work>) -> Result<Run> {
    let cpu0 = thread_cpu();
    let start = Instant::now();
    let work = body()?;
    let elapsed = start.elapsed();
    let cpu = cpu_since(cpu0);
    Ok(Run {
        elapsed_s: elapsed.as_secs_f64(),
        cpu_s: cpu.map(|c| c.as_secs_f64()),
        ops: work.ops,
        bytes: work.bytes,
    })
}

fn cpu_since(start: Option<Duration>) -> Option<Duration> {
    Some(thread_cpu()?.saturating_sub(start?))
}

/// Runs `body(thread_index)` on `threads` threads released together, and
/// times from the release to the end of the last one. Setup done before the
/// call is not timed; everything `body` does is.
pub fn run_threads<F>(threads: usize, body: F) -> Result<Run>
where
    F: Fn(usize) -> Result<Work> + Sync,
{
    let threads = threads.max(1);
    let barrier = Barrier::new(threads + 1);
    let (elapsed, results) = thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, body) = (&barrier, &body);
                s.spawn(move || {
                    barrier.wait();
                    let cpu0 = thread_cpu();
                    let work = body(t)?;
                    Ok((work, cpu_since(cpu0)))
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let results: Vec<Result<(Work, Option<Duration>)>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a worker thread panicked".into()))
            })
            .collect();
        (start.elapsed(), results)
    });
    let mut total = Work::default();
    let mut cpu = Some(Duration::ZERO);
    for r in results {
        let (work, c) = r?;
        total += work;
        cpu = cpu.zip(c).map(|(a, b)| a + b);
    }
    Ok(Run {
        elapsed_s: elapsed.as_secs_f64(),
        cpu_s: cpu.map(|c| c.as_secs_f64()),
        ops: total.ops,
        bytes: total.bytes,
    })
}

/// Deletes every file under `dir` with `threads` threads (leaving the
/// directories), returning how many were deleted. On a filesystem mounted
/// with `discard`, unlinking many files one after another is slow; several
/// at once share journal commits.
pub fn remove_files_parallel(dir: &std::path::Path, threads: usize) -> Result<u64> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).map_err(context(format!("list {}", d.display())))? {
            let entry = entry.map_err(context(format!("list {}", d.display())))?;
            let kind = entry
                .file_type()
                .map_err(context(format!("stat {}", entry.path().display())))?;
            if kind.is_dir() {
                dirs.push(entry.path());
            } else {
                files.push(entry.path());
            }
        }
    }
    let threads = threads.max(1);
    let run = run_threads(threads, |t| {
        let mut n = 0;
        for path in files.iter().skip(t).step_by(threads) {
            match std::fs::remove_file(path) {
                Ok(()) => n += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("delete {}: {e}", path.display()).into()),
            }
        }
        Ok(Work { ops: n, bytes: 0 })
    })?;
    Ok(run.ops)
}

/// Runs `f(side, rep)` for `reps` repetitions, alternating the two sides
/// within each repetition (A B A B …). Side 0 is ours, side 1 the peer.
pub fn alternate(
    reps: usize,
    mut f: impl FnMut(usize, usize) -> Result<Run>,
) -> Result<[Vec<Run>; 2]> {
    let mut out = [Vec::with_capacity(reps), Vec::with_capacity(reps)];
    for rep in 0..reps {
        for (side, runs) in out.iter_mut().enumerate() {
            runs.push(f(side, rep)?);
        }
    }
    Ok(out)
}

/// The unit of a figure, which also fixes which direction is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Operations per second (higher is better).
    OpsPerSec,
    /// Payload megabytes (10^6 bytes) per second (higher is better).
    MbPerSec,
    /// Milliseconds per operation (lower is better).
    MsPerOp,
}

impl Unit {
    pub fn label(self) -> &'static str {
        match self {
            Unit::OpsPerSec => "ops/s",
            Unit::MbPerSec => "MB/s",
            Unit::MsPerOp => "ms/op",
        }
    }

    pub fn better(self) -> Better {
        match self {
            Unit::OpsPerSec | Unit::MbPerSec => Better::Higher,
            Unit::MsPerOp => Better::Lower,
        }
    }

    /// The figure one run gives in this unit.
    pub fn of(self, run: &Run) -> f64 {
        let secs = run.elapsed_s.max(1e-9);
        match self {
            Unit::OpsPerSec => run.ops as f64 / secs,
            Unit::MbPerSec => run.bytes as f64 / 1e6 / secs,
            Unit::MsPerOp => run.elapsed_s * 1e3 / run.ops.max(1) as f64,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    Higher,
    Lower,
}

impl Better {
    pub fn label(self) -> &'static str {
        match self {
            Better::Higher => "higher",
            Better::Lower => "lower",
        }
    }
}

/// Median, minimum and maximum of repeated measurements.
#[derive(Debug, Clone, Serialize)]
pub struct Stat {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub samples: Vec<f64>,
}

impl Stat {
    pub fn of(samples: Vec<f64>) -> Stat {
        let mut sorted = samples.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = match n {
            0 => f64::NAN,
            _ if n % 2 == 1 => sorted[n / 2],
            _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        };
        Stat {
            median,
            min: sorted.first().copied().unwrap_or(f64::NAN),
            max: sorted.last().copied().unwrap_or(f64::NAN),
            samples,
        }
    }
}

/// Whether a figure was taken with data in the page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cache {
    /// Inputs were in the page cache (just written or read before).
    Warm,
    /// A write: the page cache does not hold what is measured (fsync is).
    Write,
}

impl Cache {
    pub fn label(self) -> &'static str {
        match self {
            Cache::Warm => "warm",
            Cache::Write => "fsync",
        }
    }
}

/// What a figure measures, before it is measured.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Stable identifier, e.g. `put_4k_t1`.
    pub id: &'static str,
    pub title: String,
    pub threads: usize,
    pub cache: Cache,
    pub unit: Unit,
    pub note: String,
}

/// One side of a comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Side {
    pub name: String,
    pub value: Stat,
    /// Process CPU microseconds per operation over the repetitions.
    pub cpu_us_per_op: Option<Stat>,
    pub runs: Vec<Run>,
}

impl Side {
    pub fn new(name: &str, unit: Unit, runs: Vec<Run>) -> Side {
        let cpu: Option<Vec<f64>> = runs.iter().map(Run::cpu_us_per_op).collect();
        Side {
            name: name.to_string(),
            value: Stat::of(runs.iter().map(|r| unit.of(r)).collect()),
            cpu_us_per_op: cpu.map(Stat::of),
            runs,
        }
    }
}

/// A measured figure: ours against a peer doing the same work.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub id: String,
    pub title: String,
    pub threads: usize,
    pub cache: Cache,
    pub unit: Unit,
    pub better: Better,
    pub ours: Side,
    pub peer: Side,
    /// Median of ours divided by median of the peer.
    pub ratio: f64,
    /// How many times better ours is (> 1) or worse (< 1), whatever the
    /// unit's direction.
    pub advantage: f64,
    pub note: String,
    /// Peak RSS of the bench process once this figure was done (KiB).
    pub vm_hwm_kib_after: Option<u64>,
}

impl Figure {
    pub fn new(spec: Spec, ours: Side, peer: Side) -> Figure {
        let ratio = ours.value.median / peer.value.median;
        let advantage = match spec.unit.better() {
            Better::Higher => ratio,
            Better::Lower => 1.0 / ratio,
        };
        Figure {
            id: spec.id.to_string(),
            title: spec.title,
            threads: spec.threads,
            cache: spec.cache,
            unit: spec.unit,
            better: spec.unit.better(),
            ours,
            peer,
            ratio,
            advantage,
            note: spec.note,
            vm_hwm_kib_after: vm_hwm_kib(),
        }
    }

    /// "1.8× better", "2.3× worse" or "≈ same" (within 5%).
    pub fn verdict(&self) -> String {
        let a = self.advantage;
        if !a.is_finite() || a <= 0.0 {
            "n/a".into()
        } else if (0.95..=1.05).contains(&a) {
            "≈ same".into()
        } else if a > 1.0 {
            format!("{} better", times(a))
        } else {
            format!("{} worse", times(1.0 / a))
        }
    }
}

fn times(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}×")
    } else if x >= 10.0 {
        format!("{x:.1}×")
    } else {
        format!("{x:.2}×")
    }
}

/// A number with about three significant digits and thousands separators.
pub fn num(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let a = x.abs();
    if a >= 100.0 {
        let s = format!("{:.0}", a);
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        if x < 0.0 {
            out.insert(0, '-');
        }
        out
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(Stat::of(vec![3.0, 1.0, 2.0]).median, 2.0);
        let s = Stat::of(vec![4.0, 1.0, 2.0, 3.0]);
        assert_eq!((s.median, s.min, s.max), (2.5, 1.0, 4.0));
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(num(1234567.0), "1,234,567");
        assert_eq!(num(123.4), "123");
        assert_eq!(num(12.34), "12.3");
        assert_eq!(num(1.234), "1.23");
        assert_eq!(num(0.1234), "0.123");
    }

    #[test]
    fn alternates_sides() {
        let mut order = Vec::new();
        alternate(2, |side, rep| {
            order.push((side, rep));
            Ok(Run::default())
        })
        .unwrap();
        assert_eq!(order, vec![(0, 0), (1, 0), (0, 1), (1, 1)]);
    }
}
