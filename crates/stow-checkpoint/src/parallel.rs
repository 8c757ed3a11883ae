//! Creating many files on a few threads without contending for one
//! directory.
//!
//! Creating a file takes its directory's lock. Threads that take files in
//! turn from one list are mostly in the same directory, so one creates
//! while the others spin on that lock (a profile of `prepare` on a
//! 100,000-file tree spent a third of its CPU in `rwsem_spin_on_owner`).
//! Handing out runs of consecutive items that share a directory keeps each
//! thread in a directory of its own.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::error::{Result, WsError};

/// A run holds at most this many items, so one large directory is still
/// shared out (its threads then contend, as before).
const MAX_RUN: usize = 256;

/// Frees `value` on a thread of its own: freeing a whole tree's scan
/// (100,000 names) takes milliseconds a caller need not wait for, and a
/// process about to exit never waits for it. (Where no thread can be
/// made, the value is freed here.)
pub(crate) fn drop_in_background<T: Send + 'static>(value: T) {
    if let Err(e) = std::thread::Builder::new()
        .name("stow-drop".into())
        .spawn(move || drop(value))
    {
        tracing::debug!("dropping in place: {e}");
    }
}

/// Worker threads for file creation on this machine: 2 to 4.
pub fn worker_threads(items: usize) -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(2, 4)
        .min(items.max(1))
}

/// Splits `items` (grouped by directory, as walk order leaves them) into
/// runs of consecutive items with the same `dir`, each at most `MAX_RUN`.
pub fn dir_runs<T>(items: &[T], dir: impl Fn(&T) -> &str) -> Vec<Range<usize>> {
    let mut runs = Vec::new();
    let mut start = 0;
    for i in 1..=items.len() {
        let boundary = i == items.len()
            || i - start >= MAX_RUN
            || items.get(i).map(&dir) != items.get(start).map(&dir);
        if boundary && i > start {
            runs.push(start..i);
            start = i;
        }
    }
    runs
}

/// Runs `work` on every item, on `threads` threads taking whole runs of
/// [`dir_runs`]; each thread's `work` gets a state of its own from `init`
/// (a copy buffer). Stops handing out work at the first error and returns
/// it.
pub fn for_each_in_dir_runs<T: Sync, S>(
    items: &[T],
    dir: impl Fn(&T) -> &str,
    threads: usize,
    init: impl Fn() -> S + Sync,
    work: impl Fn(&mut S, &T) -> Result<()> + Sync,
) -> Result<()> {
    let runs = dir_runs(items, dir);
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let first_err: Mutex<Option<WsError>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads.min(runs.len()).max(1) {
            s.spawn(|| {
                let mut state = init();
                while let Some(run) = runs.get(next.fetch_add(1, Ordering::Relaxed)) {
                    for item in items.get(run.clone()).unwrap_or_default() {
                        if failed.load(Ordering::Relaxed) {
                            return;
                        }
                        if let Err(e) = work(&mut state, item) {
                            failed.store(true, Ordering::Relaxed);
                            if let Ok(mut slot) = first_err.lock() {
                                slot.get_or_insert(e);
                            }
                            return;
                        }
                    }
                }
            });
        }
    });
    match first_err.into_inner() {
        Ok(None) => Ok(()),
        Ok(Some(e)) => Err(e),
        Err(_) => Err(WsError::InvalidRequest("a worker panicked".into())),
    }
}

/// The directory part of a slash path ("" at the root).
pub fn parent_dir(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(d, _)| d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_split_at_directories_and_at_the_cap() {
        let mut items: Vec<String> = vec!["a/1".into(), "a/2".into(), "b/1".into(), "top".into()];
        items.extend((0..MAX_RUN + 1).map(|i| format!("c/{i}")));
        let runs = dir_runs(&items, |p| parent_dir(p));
        assert_eq!(runs[0], 0..2);
        assert_eq!(runs[1], 2..3);
        assert_eq!(runs[2], 3..4);
        assert_eq!(runs[3], 4..4 + MAX_RUN);
        assert_eq!(runs[4], 4 + MAX_RUN..items.len());
        assert!(dir_runs(&Vec::<String>::new(), |p| parent_dir(p)).is_empty());
    }

    #[test]
    fn every_item_is_worked_once_and_the_first_error_stops_the_rest() {
        let items: Vec<String> = (0..1000).map(|i| format!("d{}/f{i}", i % 7)).collect();
        let seen = Mutex::new(Vec::new());
        for_each_in_dir_runs(
            &items,
            |p| parent_dir(p),
            3,
            || (),
            |_, p| {
                seen.lock().unwrap().push(p.clone());
                Ok(())
            },
        )
        .unwrap();
        let mut seen = seen.into_inner().unwrap();
        seen.sort();
        let mut want = items.clone();
        want.sort();
        assert_eq!(seen, want);
        let count = AtomicUsize::new(0);
        let err = for_each_in_dir_runs(
            &items,
            |p| parent_dir(p),
            2,
            || (),
            |_, p| {
                count.fetch_add(1, Ordering::Relaxed);
                if p == "d3/f10" {
                    Err(WsError::InvalidRequest("boom".into()))
                } else {
                    Ok(())
                }
            },
        )
        .unwrap_err();
        assert_eq!(err.code(), "invalid_request");
        assert!(count.load(Ordering::Relaxed) < items.len());
    }
}
