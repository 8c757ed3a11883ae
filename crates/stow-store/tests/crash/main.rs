//! SIGKILL crash test of the disk store.
//!
//! `sigkill_crash_recovery` re-executes this test binary as a child process
//! that runs `crash_child` (which does nothing unless `STOW_CRASH_CHILD` is
//! set). The child opens the store and runs a seeded random sequence of
//! operations in two threads, each thread on its own keys: keyed saves and
//! replays of them, plain puts (inline and file bodies), deletes, copies,
//! multipart uploads (parts, completion, abort) and creation / deletion of a
//! spare bucket. Before each operation the child prints an intent line, and
//! after it returns a done line with its result; body bytes derive from the
//! operation id alone.
//!
//! The parent kills the child with SIGKILL after a random delay, reopens the
//! store and checks that it is consistent (`verify`), that every object reads
//! back in full with the bytes the operation that wrote it produced, that
//! every reported operation is durable (the state equals the model built from
//! done lines, plus possibly the effect of each thread's one in-flight
//! operation), that uploads and their parts survived, that receipts of
//! reported keyed saves resolve to the reported object (and that a receipt of
//! an in-flight save exists exactly when its object was written), and that
//! usage equals the model. The same directory is reused for every iteration,
//! so state accumulates.
//!
//! A SIGKILL leaves the kernel's page cache intact, so this test checks
//! atomicity and roll-forward recovery, not power-loss durability: a missing
//! fsync goes unnoticed here.
//!
//! `STOW_CRASH_ITERS` and `STOW_CRASH_SEED` override the number of iterations
//! and the base seed.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Cursor, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use md5::{Digest, Md5};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use serde::{Deserialize, Serialize};
use stow_store::*;

mod child;
mod model;
mod parent;
use child::*;
use model::*;
use parent::*;

const CHILD_ENV: &str = "STOW_CRASH_CHILD";
const CHILD_SEED_ENV: &str = "STOW_CRASH_CHILD_SEED";
const CHILD_BASE_ENV: &str = "STOW_CRASH_CHILD_BASE";
const CHILD_TEST: &str = "crash_child";
/// Prefix of every protocol line (libtest may print before it on a line).
const MARK: &str = "@@stow-crash@@ ";
const BUCKETS: [&str; 2] = ["crash-a", "crash-b"];
/// Created and deleted by thread 0 only.
const SPARE: &str = "crash-spare";
const THREADS: u64 = 2;
const KEYS_PER_THREAD: usize = 5;
const MAX_OPEN_UPLOADS: usize = 2;
const MAX_OPS_PER_THREAD: u64 = 5_000;
const DEFAULT_ITERATIONS: usize = 220;
const DEFAULT_SEED: u64 = 0x5709_c4a5_0001;

// ---- protocol ------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Op {
    Put {
        bucket: String,
        key: String,
        size: u64,
    },
    Save {
        bucket: String,
        key: String,
        size: u64,
        request_key: String,
    },
    /// The same keyed save again (body of op `body_id`): must replay.
    SaveRetry {
        bucket: String,
        key: String,
        body_id: u64,
        size: u64,
        request_key: String,
    },
    Delete {
        bucket: String,
        key: String,
    },
    Copy {
        src_bucket: String,
        src_key: String,
        bucket: String,
        key: String,
    },
    CreateUpload {
        bucket: String,
        key: String,
    },
    UploadPart {
        bucket: String,
        key: String,
        upload_id: String,
        part: u32,
        size: u64,
    },
    Complete {
        bucket: String,
        key: String,
        upload_id: String,
        parts: Vec<(u32, String)>,
    },
    Abort {
        bucket: String,
        key: String,
        upload_id: String,
    },
    CreateSpare,
    DeleteSpare,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Out {
    Object {
        etag: String,
        version: String,
        size: u64,
        replayed: bool,
    },
    Deleted(bool),
    Upload(String),
    Part {
        etag: String,
        size: u64,
    },
    Created(bool),
    Unit,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Line {
    Ready,
    Intent {
        thread: u64,
        id: u64,
        op: Op,
    },
    Done {
        thread: u64,
        id: u64,
        out: Result<Out, String>,
    },
}

/// The body of operation `id`: `size` bytes from a generator seeded by `id`.
fn body(id: u64, size: u64) -> Vec<u8> {
    let mut v = vec![0u8; size as usize];
    StdRng::seed_from_u64(id).fill_bytes(&mut v);
    v
}

fn md5_of(bytes: &[u8]) -> [u8; 16] {
    Md5::digest(bytes).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn err_text(e: &StoreError) -> String {
    format!("{}: {e}", e.code())
}

// ---- child ---------------------------------------------------------------

fn emit(line: &Line) {
    // One write per line, well under PIPE_BUF: a kill never tears a line.
    let text = format!("{MARK}{}\n", serde_json::to_string(line).unwrap());
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).unwrap();
    out.flush().unwrap();
}

/// Runs only as the child of `sigkill_crash_recovery`.
#[test]
fn crash_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let seed: u64 = std::env::var(CHILD_SEED_ENV).unwrap().parse().unwrap();
    let base: u64 = std::env::var(CHILD_BASE_ENV).unwrap().parse().unwrap();
    let store = Store::open(&dir, StoreOptions::default()).expect("the store opens after a crash");
    emit(&Line::Ready);
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || child_thread(&store, t, seed, base))
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn sigkill_crash_recovery() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let iterations: usize = std::env::var("STOW_CRASH_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_ITERATIONS);
    let seed: u64 = std::env::var("STOW_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SEED);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let stderr = tmp.path().join("child-stderr.txt");
    {
        let store = Store::open(&dir, StoreOptions::default()).unwrap();
        for b in BUCKETS {
            store.create_bucket(b).unwrap();
        }
    }
    let exe = std::env::current_exe().unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut world = World::default();
    let mut digests = Digests::default();
    let mut stats = Stats::default();
    let started = Instant::now();
    for iteration in 0..iterations {
        let child_seed: u64 = rng.random();
        let base = (iteration as u64 + 1) * 1_000_000;
        let t0 = Instant::now();
        let result = run_child(&exe, &dir, &stderr, child_seed, base, &mut rng).and_then(|run| {
            stats.child_time += t0.elapsed();
            let t1 = Instant::now();
            stats.early_kills += usize::from(run.early);
            stats.exited += usize::from(run.exited_by_itself);
            check_iteration(&dir, &world, &run, &mut digests, &mut stats)
                .map_err(|e| {
                    let tail: Vec<String> = run
                        .lines
                        .iter()
                        .rev()
                        .take(12)
                        .rev()
                        .map(|l| format!("{l:?}"))
                        .collect();
                    format!("{e}\n--- last reported lines ---\n{}", tail.join("\n"))
                })
                .inspect(|_| stats.check_time += t1.elapsed())
        });
        match result {
            Ok(w) => {
                digests.forget_dead(&w);
                world = w;
            }
            Err(e) => {
                let kept = tmp.keep();
                panic!(
                    "iteration {iteration} (seed {seed}, child seed {child_seed}) failed; store left in {}:\n{e}",
                    kept.display()
                );
            }
        }
        stats.iterations += 1;
    }
    eprintln!(
        "crash test: {} iterations in {:.1?} (seed {seed}): {} early kills, {} child exits, \
         {} ops reported (max {} per run), {} in flight at kill ({} committed), \
         {} receipts checked; {:?}; final state {} objects, {} uploads; \
         {:.1?} running children, {:.1?} checking",
        stats.iterations,
        started.elapsed(),
        stats.early_kills,
        stats.exited,
        stats.ops_done,
        stats.max_ops,
        stats.in_flight,
        stats.in_flight_applied,
        stats.receipts_checked,
        stats.by_kind,
        world.objects.len(),
        world.uploads.len(),
        stats.child_time,
        stats.check_time,
    );
}
