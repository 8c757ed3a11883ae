//! The store suite: stow-store against the raw filesystem doing the same
//! work directly (a file per object), both durable.

mod peers;

use std::fs;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::data::{mix, Pool, SEED};
use crate::harness::{
    alternate, context, num, remove_files_parallel, run_threads, time_one, vm_hwm_kib, Cache,
    Figure, Result, Run, Side, Spec, Unit, Work,
};
use crate::machine::{loadavg, Machine};
use crate::report::{Info, Report};
use crate::suites::SuiteArgs;

use peers::{with_buffer, Peer, RawFs, Stow};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

/// Small objects.
const SMALL: u64 = 4 * KIB;
/// Large objects.
const BIG: u64 = 64 * MIB;
/// Objects of the listed bucket.
const TINY: u64 = 64;
/// The input pool: one large object plus room to vary its start.
const POOL_LEN: usize = (BIG + MIB) as usize;
/// The thread counts of the thread-scaling figures.
const THREADS: [usize; 2] = [1, 8];
/// Threads that populate buckets (untimed setup, or setup figures).
const POPULATE_THREADS: usize = 8;
/// Keys per listed page.
const PAGE: usize = 1000;

/// How much work each figure does.
#[derive(Debug, Clone)]
struct Plan {
    mode: &'static str,
    /// Repetitions of the 4 KiB and 64 MiB figures.
    reps: usize,
    /// 4 KiB puts (and saves) per repetition, for 1 and for 8 threads.
    small_ops: [u64; 2],
    /// Objects the 4 KiB gets choose from.
    get_objects: u64,
    /// 4 KiB gets per repetition, for 1 and for 8 threads.
    get_ops: [u64; 2],
    /// 64 MiB objects one thread puts per repetition.
    big_objects_t1: u64,
    /// Reads of each of the 8 large objects per get repetition.
    big_passes: u64,
    copy_size: u64,
    copy_reps: usize,
    list_objects: u64,
    list_reps: usize,
    /// Each list repetition lists pages for at least this long.
    list_min_time: Duration,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                mode: "quick",
                reps: 3,
                small_ops: [300, 1_000],
                get_objects: 1000,
                get_ops: [5_000, 10_000],
                big_objects_t1: 1,
                big_passes: 4,
                copy_size: 256 * MIB,
                copy_reps: 3,
                list_objects: 10_000,
                list_reps: 5,
                list_min_time: Duration::from_millis(100),
            }
        } else {
            Plan {
                mode: "full",
                reps: 5,
                small_ops: [600, 2_000],
                get_objects: 2_000,
                get_ops: [30_000, 60_000],
                big_objects_t1: 1,
                big_passes: 8,
                copy_size: GIB,
                copy_reps: 3,
                list_objects: 100_000,
                list_reps: 7,
                list_min_time: Duration::from_millis(300),
            }
        }
    }
}

/// What every figure needs.
struct Env<'a> {
    plan: &'a Plan,
    pool: &'a Pool,
    /// Ours first, then the peer.
    sides: [&'a dyn Peer; 2],
}

#[derive(Default)]
struct Out {
    figures: Vec<Figure>,
    info: Vec<Info>,
}

/// Runs the store suite.
pub fn run(args: &SuiteArgs) -> Result<Report> {
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let plan = Plan::new(args.quick);
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    fs::create_dir_all(&base).map_err(context(format!("create {}", base.display())))?;
    let waited = Instant::now();
    if !args.no_settle {
        super::settle(&base);
    }
    let waited = waited.elapsed().as_secs_f64();
    let t0 = Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("stow-bench-store-")
        .tempdir_in(&base)
        .map_err(context(format!("create a directory in {}", base.display())))?;
    let machine = Machine::probe(tmp.path());
    let loadavg_start = loadavg();
    eprintln!("stow-bench store ({}): {}", plan.mode, machine.summary());
    let pool = Pool::new(SEED, POOL_LEN);

    let mut out = Out::default();
    if waited >= 1.0 {
        out.info.push(Info {
            name: "waited for the filesystem to settle after a previous run (not in the run time)"
                .into(),
            value: waited,
            unit: "s".into(),
        });
    }
    let measured = (|| -> Result<()> {
        let ours = Stow::open(&tmp.path().join("stow"))?;
        let raw = RawFs::new(tmp.path().join("raw"))?;
        let env = Env {
            plan: &plan,
            pool: &pool,
            sides: [&ours, &raw],
        };
        for bucket in ["put4k", "save4k", "get4k", "big", "copy", "list"] {
            for side in env.sides {
                side.create_bucket(bucket)?;
            }
        }
        small_writes(&env, &mut out)?;
        small_reads(&env, &mut out)?;
        large(&env, &mut out)?;
        copy(&env, &mut out)?;
        list(&env, &mut out)?;
        Ok(())
    })();
    let peak_rss_kib = vm_hwm_kib();
    let loadavg_end = loadavg();

    eprintln!("  deleting {} ...", tmp.path().display());
    let t = Instant::now();
    let removed = remove_files_parallel(tmp.path(), POPULATE_THREADS);
    let closed = tmp.close();
    super::mark_cleanup(&base);
    let secs = t.elapsed().as_secs_f64();
    measured?;
    let files = removed?;
    closed.map_err(context("delete the data directory"))?;
    out.info.push(Info {
        name: format!("cleanup: delete the data directory ({files} files, 8 threads)"),
        value: secs,
        unit: "s".into(),
    });

    Ok(Report {
        suite: "store".into(),
        mode: plan.mode.into(),
        started_unix,
        duration_s: t0.elapsed().as_secs_f64(),
        machine,
        loadavg_start,
        loadavg_end,
        method: vec![
            "each figure alternates stow-store and raw-fs within every repetition (A B A B …); \
             cells are the median [min–max] over repetitions"
                .into(),
            "writes are durable on both sides: stow-store returns after its commit is fsynced \
             (SQLite WAL, synchronous=FULL; blobs > 32 KiB fsynced first); raw-fs writes a temp \
             file, fsyncs it, renames it into place and fsyncs the directory"
                .into(),
            format!(
                "inputs are windows of a {} MiB pool of seeded pseudo-random bytes (seed {SEED:#x}), \
                 made before any timing; MB = 10^6 bytes",
                POOL_LEN as u64 / MIB
            ),
            "cpu µs/op is the user+system CPU time of the threads doing the operations \
             (/proc/thread-self/schedstat) per operation; kernel threads working for them \
             (ext4 journal commits, writeback) are not counted"
                .into(),
            "ratio is ours/peer of the medians; verdict says how many times better or worse ours \
             is, whichever direction is better for the unit"
                .into(),
        ],
        figures: out.figures,
        info: out.info,
        peak_rss_kib,
        notes: vec![
            "the bench process holds the input pool and both sides, so its peak RSS includes them; \
             it is not the RSS of a stow-s3 server"
                .into(),
            "nothing is deleted until the run ends: deleting files makes this machine's ext4 \
             (mounted with discard) slow for about a minute; the next run waits until 90 s have \
             passed since this run's cleanup (--no-settle skips the wait)"
                .into(),
        ],
    })
}

/// Measures one figure on both sides, alternating, and records it.
fn compare(
    env: &Env,
    out: &mut Out,
    spec: Spec,
    reps: usize,
    mut measure: impl FnMut(&dyn Peer, usize, usize) -> Result<Run>,
) -> Result<()> {
    eprintln!(
        "  {} ({} thread(s), {} reps)",
        spec.title, spec.threads, reps
    );
    let unit = spec.unit;
    let [ours, peer] = alternate(reps, |side, rep| {
        let p = env.sides[side];
        let run = measure(p, side, rep)?;
        eprintln!(
            "    rep {}/{} {:<10} {:>10} {} ({} ops in {:.2} s)",
            rep + 1,
            reps,
            p.name(),
            num(unit.of(&run)),
            unit.label(),
            run.ops,
            run.elapsed_s
        );
        Ok(run)
    })?;
    let fig = Figure::new(
        spec,
        Side::new(env.sides[0].name(), unit, ours),
        Side::new(env.sides[1].name(), unit, peer),
    );
    eprintln!("    => ours/peer {:.3}: {}", fig.ratio, fig.verdict());
    out.figures.push(fig);
    Ok(())
}

/// How many threads do how many operations on objects of what size.
#[derive(Debug, Clone, Copy)]
struct Load {
    threads: usize,
    per_thread: u64,
    size: u64,
}

impl Load {
    fn new(threads: usize, per_thread: u64, size: u64) -> Load {
        Load {
            threads,
            per_thread,
            size,
        }
    }
}

/// How a write is issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriteKind {
    Put,
    /// A keyed save with a Replace guard (a put on the raw side).
    Save,
}

/// `threads` threads each write `per_thread` objects of `size` bytes, named
/// by `name(thread, i)` as (key, body id). Timed from the common start.
fn writes(
    env: &Env,
    peer: &dyn Peer,
    bucket: &str,
    load: Load,
    kind: WriteKind,
    name: impl Fn(usize, u64) -> (String, u64) + Sync,
) -> Result<Run> {
    let Load {
        threads,
        per_thread,
        size,
    } = load;
    run_threads(threads, |t| {
        for i in 0..per_thread {
            let (key, id) = name(t, i);
            let mut body = env.pool.body(id, size);
            match kind {
                WriteKind::Put => peer.put(bucket, &key, &mut body)?,
                WriteKind::Save => peer.save(bucket, &key, &format!("rk-{key}"), &mut body)?,
            }
        }
        Ok(Work {
            ops: per_thread,
            bytes: per_thread * size,
        })
    })
}

/// `threads` threads each read `per_thread` whole objects named by
/// `key(thread, i)`, checking each is `size` bytes long.
fn reads(
    peer: &dyn Peer,
    bucket: &str,
    load: Load,
    key: impl Fn(usize, u64) -> String + Sync,
) -> Result<Run> {
    let Load {
        threads,
        per_thread,
        size,
    } = load;
    run_threads(threads, |t| {
        with_buffer(|buf| {
            for i in 0..per_thread {
                let k = key(t, i);
                let got = peer.get(bucket, &k, buf)?;
                if got != size {
                    return Err(format!("{bucket}/{k}: read {got} bytes, expected {size}").into());
                }
            }
            Ok(Work {
                ops: per_thread,
                bytes: per_thread * size,
            })
        })
    })
}

/// Figures 1 and 4: durable 4 KiB puts and keyed saves, 1 and 8 threads.
fn small_writes(env: &Env, out: &mut Out) -> Result<()> {
    let plan = env.plan;
    for (kind, bucket, what) in [
        (WriteKind::Put, "put4k", "put"),
        (WriteKind::Save, "save4k", "save"),
    ] {
        // Warm-up, untimed: opens connections, prepares statements.
        for side in env.sides {
            writes(env, side, bucket, Load::new(1, 20, SMALL), kind, |_, i| {
                (format!("warm-{i:04}"), i)
            })?;
        }
        for (ti, &threads) in THREADS.iter().enumerate() {
            let per_thread = plan.small_ops[ti] / threads as u64;
            let (id, title, note) = match (kind, threads) {
                (WriteKind::Put, 1) => ("put_4k_t1", "put 4 KiB (durable)", ""),
                (WriteKind::Put, _) => ("put_4k_t8", "put 4 KiB (durable)", ""),
                (WriteKind::Save, 1) => (
                    "save_4k_t1",
                    "keyed save 4 KiB vs raw put",
                    "stow-store: Store::save with a request key and the Replace guard (object and \
                     receipt commit together); raw-fs has no keyed save, so its side is the same \
                     durable put as figure 1",
                ),
                (WriteKind::Save, _) => (
                    "save_4k_t8",
                    "keyed save 4 KiB vs raw put",
                    "as the 1-thread keyed save figure",
                ),
            };
            let spec = Spec {
                id,
                title: title.into(),
                threads,
                cache: Cache::Write,
                unit: Unit::OpsPerSec,
                note: note.into(),
            };
            compare(env, out, spec, plan.reps, |peer, _side, rep| {
                writes(
                    env,
                    peer,
                    bucket,
                    Load::new(threads, per_thread, SMALL),
                    kind,
                    |t, i| {
                        let key = format!("{what}-t{threads}-r{rep}-w{t}-{i:06}");
                        let id = (threads as u64) << 48 | (rep as u64) << 40 | (t as u64) << 32 | i;
                        (key, id)
                    },
                )
            })?;
        }
    }
    Ok(())
}

fn get_key(n: u64) -> String {
    format!("obj-{n:07}")
}

/// Figure 2: 4 KiB gets from the page cache, 1 and 8 threads.
fn small_reads(env: &Env, out: &mut Out) -> Result<()> {
    let plan = env.plan;
    let n = plan.get_objects;
    let per = n / POPULATE_THREADS as u64;
    eprintln!("  populating get4k with {n} objects of 4 KiB (8 threads, untimed)");
    for side in env.sides {
        writes(
            env,
            side,
            "get4k",
            Load::new(POPULATE_THREADS, per, SMALL),
            WriteKind::Put,
            |t, i| {
                let idx = t as u64 * per + i;
                (get_key(idx), idx)
            },
        )?;
        // Warm every object into the page cache and the store's caches.
        reads(
            side,
            "get4k",
            Load::new(1, per * POPULATE_THREADS as u64, SMALL),
            |_, i| get_key(i),
        )?;
    }
    let total = per * POPULATE_THREADS as u64;
    for (ti, &threads) in THREADS.iter().enumerate() {
        let per_thread = plan.get_ops[ti] / threads as u64;
        let spec = Spec {
            id: if threads == 1 {
                "get_4k_t1"
            } else {
                "get_4k_t8"
            },
            title: "get 4 KiB".into(),
            threads,
            cache: Cache::Warm,
            unit: Unit::OpsPerSec,
            note: if threads == 1 {
                format!(
                    "random keys (seeded) among {total} objects read once before; raw-fs opens \
                     and reads the file, stow-store looks up the record and reads the inline body"
                )
            } else {
                String::new()
            },
        };
        compare(env, out, spec, plan.reps, |peer, _side, rep| {
            // Each thread's key sequence is fixed by the seed, the
            // repetition and the thread, and is the same for both sides.
            let seqs: Vec<Vec<u64>> = (0..threads)
                .map(|t| {
                    let mut rng = StdRng::seed_from_u64(mix(SEED ^ (rep as u64) << 8 ^ t as u64));
                    (0..per_thread)
                        .map(|_| rng.random_range(0..total))
                        .collect()
                })
                .collect();
            reads(
                peer,
                "get4k",
                Load::new(threads, per_thread, SMALL),
                |t, i| get_key(seqs[t][i as usize]),
            )
        })?;
    }
    Ok(())
}

/// Figure 3: 64 MiB puts (durable) and gets (warm), 1 and 8 threads.
fn large(env: &Env, out: &mut Out) -> Result<()> {
    let plan = env.plan;
    let reps = plan.reps;
    let big_key =
        |threads: usize, rep: usize, t: usize, i: u64| format!("b{threads}-r{rep}-w{t}-{i}");
    for &threads in &THREADS {
        let per_thread = if threads == 1 { plan.big_objects_t1 } else { 1 };
        let spec = Spec {
            id: if threads == 1 {
                "put_64m_t1"
            } else {
                "put_64m_t8"
            },
            title: "put 64 MiB (durable)".into(),
            threads,
            cache: Cache::Write,
            unit: Unit::MbPerSec,
            note: if threads == 1 {
                format!(
                    "1 thread puts {} object(s) per repetition, 8 threads put 8 objects at once",
                    plan.big_objects_t1
                )
            } else {
                String::new()
            },
        };
        compare(env, out, spec, reps, |peer, _side, rep| {
            writes(
                env,
                peer,
                "big",
                Load::new(threads, per_thread, BIG),
                WriteKind::Put,
                |t, i| {
                    let id = (rep as u64) << 40 | (t as u64) << 32 | i;
                    (big_key(threads, rep, t, i), id)
                },
            )
        })?;
    }
    // Gets of the 8 objects the last 8-thread repetition left.
    let kept = |t: usize| big_key(8, reps - 1, t, 0);
    for side in env.sides {
        reads(side, "big", Load::new(1, 8, BIG), |_, i| kept(i as usize))?;
    }
    for &threads in &THREADS {
        let passes = plan.big_passes;
        let (per_thread, note) = if threads == 1 {
            (
                8 * passes,
                format!(
                    "the 8 objects written by the last 8-thread put, read {passes}× per \
                     repetition (1 thread: one after another; 8 threads: all at once), in the \
                     page cache"
                ),
            )
        } else {
            (passes, String::new())
        };
        let spec = Spec {
            id: if threads == 1 {
                "get_64m_t1"
            } else {
                "get_64m_t8"
            },
            title: "get 64 MiB".into(),
            threads,
            cache: Cache::Warm,
            unit: Unit::MbPerSec,
            note,
        };
        compare(env, out, spec, reps, |peer, _side, _rep| {
            reads(peer, "big", Load::new(threads, per_thread, BIG), |t, i| {
                kept((t + i as usize) % 8)
            })
        })?;
    }
    Ok(())
}

/// Figure 6: copy of a large object within a bucket.
fn copy(env: &Env, out: &mut Out) -> Result<()> {
    let plan = env.plan;
    let size = plan.copy_size;
    let label = if size >= GIB {
        format!("{} GiB", size / GIB)
    } else {
        format!("{} MiB", size / MIB)
    };
    eprintln!("  writing the {label} copy source on both sides");
    for side in env.sides {
        let run = writes(
            env,
            side,
            "copy",
            Load::new(1, 1, size),
            WriteKind::Put,
            |_, _| ("src".to_string(), 0x00c0_ffee),
        )?;
        out.info.push(Info {
            name: format!(
                "setup: put the {label} copy source, {} (1 sample)",
                side.name()
            ),
            value: Unit::MbPerSec.of(&run),
            unit: "MB/s".into(),
        });
    }
    let spec = Spec {
        id: "copy_large",
        title: format!("copy {label} object (durable)"),
        threads: 1,
        cache: Cache::Warm,
        unit: Unit::MsPerOp,
        note: "stow-store shares the source's blob and commits one record (no bytes copied); \
               raw-fs copies the file (std::fs::copy) to a temp file, fsyncs it, renames it into \
               place and fsyncs the directory; the source is in the page cache"
            .into(),
    };
    compare(env, out, spec, plan.copy_reps, |peer, _side, rep| {
        let dst = format!("dst-r{rep}");
        time_one(|| {
            peer.copy("copy", "src", &dst)?;
            Ok(Work {
                ops: 1,
                bytes: size,
            })
        })
    })?;
    Ok(())
}

fn list_key(n: u64) -> String {
    format!("k{n:07}")
}

/// Figure 5: one page of 1,000 keys from the middle of a large bucket.
fn list(env: &Env, out: &mut Out) -> Result<()> {
    let plan = env.plan;
    let n = plan.list_objects;
    let per = n / POPULATE_THREADS as u64;
    let total = per * POPULATE_THREADS as u64;
    let spec = Spec {
        id: "populate_list",
        title: format!(
            "put {TINY} B (durable), filling a {}-object bucket",
            num(total as f64)
        ),
        threads: POPULATE_THREADS,
        cache: Cache::Write,
        unit: Unit::OpsPerSec,
        note: "setup of the list figure, 1 sample per side".into(),
    };
    compare(env, out, spec, 1, |peer, _side, _rep| {
        writes(
            env,
            peer,
            "list",
            Load::new(POPULATE_THREADS, per, TINY),
            WriteKind::Put,
            |t, i| {
                let idx = t as u64 * per + i;
                (list_key(idx), idx)
            },
        )
    })?;
    let start = list_key(total / 2);
    let check = |peer: &dyn Peer| -> Result<()> {
        let got = peer.list_page("list", &start, PAGE)?;
        if got != PAGE {
            return Err(format!("{}: listed {got} keys, expected {PAGE}", peer.name()).into());
        }
        Ok(())
    };
    for side in env.sides {
        check(side)?;
    }
    let spec = Spec {
        id: "list_page",
        title: format!(
            "list {PAGE} keys after a start key, {}-object bucket",
            num(total as f64)
        ),
        threads: 1,
        cache: Cache::Warm,
        unit: Unit::MsPerOp,
        note: format!(
            "page from the middle (start after {start}); stow-store: list_objects with \
             start_after, max_keys {PAGE}; raw-fs: read_dir of the whole directory, sort, take \
             {PAGE} after the start key, stat each for its size; each repetition lists pages \
             for at least {} ms",
            plan.list_min_time.as_millis()
        ),
    };
    let min_time = plan.list_min_time;
    compare(env, out, spec, plan.list_reps, |peer, _side, _rep| {
        time_one(|| {
            let t = Instant::now();
            let mut ops = 0u64;
            while ops < 3 || t.elapsed() < min_time {
                check(peer)?;
                ops += 1;
            }
            Ok(Work { ops, bytes: 0 })
        })
    })?;
    Ok(())
}
