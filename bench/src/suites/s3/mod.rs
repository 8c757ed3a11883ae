//! The s3 suite: `stow-s3 serve` (filesystem backend, durable) against two
//! other S3 servers on the same machine, driven by a compiled load
//! generator ([`client`]): `s3s-fs` (the s3s project's filesystem server)
//! and `moto_server` (Python moto, in memory).
//!
//! Every repetition runs the workload on the three servers in turn (ours,
//! s3s-fs, moto; A B C A B C …). Each workload gives two figures, ours
//! against each peer. Beside throughput, every run records the server's
//! CPU time (utime + stime from `/proc/PID/stat`) around the workload, and
//! the suite reports each server's start-to-ready time, idle RSS and peak
//! RSS (`VmHWM`).
//!
//! Servers: ours is `STOW_BIN` or `stow-s3` beside the bench binary;
//! s3s-fs is `S3S_FS_BIN`, or `target/bench-peers/s3s-fs/bin/s3s-fs`
//! (installed there with `cargo install s3s-fs --version =0.14.1 --locked
//! --features binary --root …` when missing); moto is `MOTO_SERVER`, or
//! the `moto_server` that `pyenv which` names, or `moto_server` on PATH.

mod client;
mod frame;
mod load;
mod servers;
pub mod versions;

pub(crate) use frame::{Finish, Frame};
pub use load::{load, LoadArgs};
pub(crate) use servers::start_ours;
use servers::*;

use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::data::{mix, Pool, SEED};
use crate::harness::{run_threads, Cache, Figure, Result, Run, Side, Spec, Stat, Unit, Work};
use crate::report::{Info, Report};
use crate::suites::SuiteArgs;

use client::{ok, Conn, Creds};

pub(crate) const ACCESS_KEY: &str = "stowbench";
pub(crate) const SECRET_KEY: &str = "stowbench-secret-key-0000000000000000";
pub(crate) const REGION: &str = "us-east-1";
pub(crate) const SMALL: u64 = 4 * 1024;
pub(crate) const TINY: u64 = 64;
pub(crate) const S3S_FS_VERSION: &str = "0.14.1";

/// Targets of the issue.
const TARGET_VS_S3S_FS: f64 = 1.5;
const TARGET_VS_MOTO: f64 = 20.0;
const TARGET_PUT_CPU_VS_S3S_FS: f64 = 0.6;
const TARGET_READY_MS: f64 = 10.0;
const TARGET_IDLE_RSS_MIB: f64 = 10.0;

struct Plan {
    mode: &'static str,
    reps: usize,
    big_reps: usize,
    starts: usize,
    put_ops: [u64; 2],
    get_ops: [u64; 2],
    get_objects: u64,
    cap: Duration,
    big: u64,
    list_objects: u64,
    list_calls: u64,
    list_cap: Duration,
    populate_cap: Duration,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                mode: "quick",
                reps: 3,
                big_reps: 2,
                starts: 5,
                put_ops: [300, 1000],
                get_ops: [1000, 2000],
                get_objects: 300,
                cap: Duration::from_secs(3),
                big: 64 << 20,
                list_objects: 10_000,
                list_calls: 20,
                list_cap: Duration::from_secs(3),
                populate_cap: Duration::from_secs(300),
            }
        } else {
            Plan {
                mode: "full",
                reps: 5,
                big_reps: 3,
                starts: 10,
                put_ops: [1500, 4000],
                get_ops: [4000, 8000],
                get_objects: 1000,
                cap: Duration::from_secs(8),
                big: 256 << 20,
                list_objects: 100_000,
                list_calls: 50,
                list_cap: Duration::from_secs(8),
                populate_cap: Duration::from_secs(900),
            }
        }
    }
}

pub(crate) fn creds() -> Creds {
    Creds {
        access_key: ACCESS_KEY.into(),
        secret_key: SECRET_KEY.into(),
        region: REGION.into(),
    }
}

/// Runs `body(conn, thread)` on `conns` connections released together,
/// and charges the server's CPU time over the run to it.
pub(crate) fn drive<F>(srv: &Server, conns: usize, body: F) -> Result<Run>
where
    F: Fn(&mut Conn, usize) -> Result<Work> + Sync,
{
    let c = creds();
    let cpu0 = srv.cpu();
    let mut run = run_threads(conns, |t| {
        let mut conn = Conn::new(srv.addr, &c)?;
        body(&mut conn, t)
    })?;
    let cpu1 = srv.cpu();
    run.cpu_s = cpu0
        .zip(cpu1)
        .map(|(a, b)| b.saturating_sub(a).as_secs_f64());
    Ok(run)
}

/// `ops` PUTs of `size`-byte bodies under `prefix`, spread over `conns`
/// connections, stopping early at `cap`.
pub(crate) fn put_many(
    srv: &Server,
    bucket: &str,
    prefix: &str,
    conns: usize,
    (ops, cap): (u64, Duration),
    size: u64,
    bodies: &[Vec<u8>],
) -> Result<Run> {
    let conns_u = conns as u64;
    let start = Instant::now();
    drive(srv, conns, |conn, t| {
        let mut w = Work::default();
        let mut i = t as u64;
        while i < ops && start.elapsed() < cap {
            let body = &bodies[(i % bodies.len() as u64) as usize][..size as usize];
            let path = format!("/{bucket}/{prefix}{i:07}");
            ok("PUT object", conn.request("PUT", &path, "", body, false)?)?;
            w.ops += 1;
            w.bytes += size;
            i += conns_u;
        }
        Ok(w)
    })
}

/// `ops` GETs of `size`-byte objects `{path}{k:07}` (`path` is
/// `/bucket/prefix`), `k` picked with a seeded hash (varying with `rep`)
/// among `objects`, spread over `conns` connections, stopping early at
/// `cap`; every answer must have `size` bytes.
pub(crate) fn get_many(
    srv: &Server,
    path: &str,
    conns: usize,
    (ops, cap): (u64, Duration),
    objects: u64,
    size: u64,
    rep: usize,
) -> Result<Run> {
    let start = Instant::now();
    drive(srv, conns, |conn, t| {
        let mut w = Work::default();
        let mut i = t as u64;
        while i < ops && start.elapsed() < cap {
            let key = mix(SEED ^ ((rep as u64) << 40) ^ i) % objects;
            let r = conn.request("GET", &format!("{path}{key:07}"), "", b"", true)?;
            let r = ok("GET object", r)?;
            if r.len != size {
                return Err(format!("GET returned {} bytes, not {size}", r.len).into());
            }
            w.ops += 1;
            w.bytes += r.len;
            i += conns as u64;
        }
        Ok(w)
    })
}

/// Fills `bucket` with `n` keys `{prefix}{i:07}` on 16 connections.
pub(crate) fn populate(
    srv: &Server,
    bucket: &str,
    prefix: &str,
    n: u64,
    size: u64,
    cap: Duration,
    bodies: &[Vec<u8>],
) -> Result<Run> {
    let run = put_many(srv, bucket, prefix, 16, (n, cap), size, bodies)?;
    if run.ops < n {
        return Err(format!(
            "{}: populating {bucket} stopped at {} of {n} objects after {cap:?}",
            srv.kind.name(),
            run.ops
        )
        .into());
    }
    Ok(run)
}

pub(crate) fn create_bucket(srv: &Server, bucket: &str) -> Result<()> {
    let mut conn = Conn::new(srv.addr, &creds())?;
    let r = conn.request("PUT", &format!("/{bucket}"), "", b"", false)?;
    // 409 (already exists / owned by you) is fine on a reused data dir.
    if r.status != 409 {
        ok(&format!("{}: create bucket {bucket}", srv.kind.name()), r)?;
    }
    Ok(())
}

/// 256 seeded 4 KiB bodies (windows of `pool`) for the small PUTs.
pub(crate) fn small_bodies(pool: &Pool) -> Result<Vec<Vec<u8>>> {
    let bodies = (0..256)
        .map(|i| {
            let mut b = Vec::with_capacity(SMALL as usize);
            pool.body(i, SMALL).read_to_end(&mut b).map(|_| b)
        })
        .collect::<std::io::Result<_>>()?;
    Ok(bodies)
}

/// One side's runs of one workload.
type Runs = [Vec<Run>; 3];

/// Runs `f(server, rep)` for `reps` repetitions on the three servers in
/// turn (A B C A B C …), printing each run.
fn rotate(
    servers: &[Server],
    reps: usize,
    label: &str,
    unit: Unit,
    mut f: impl FnMut(&Server, usize) -> Result<Run>,
) -> Result<Runs> {
    let mut out: Runs = Default::default();
    for rep in 0..reps {
        for (i, srv) in servers.iter().enumerate() {
            let run = f(srv, rep)?;
            eprintln!(
                "    {label} rep {}/{reps} {:<8} {} {}, server cpu {} µs/op",
                rep + 1,
                srv.kind.name(),
                crate::harness::num(unit.of(&run)),
                unit.label(),
                run.cpu_us_per_op()
                    .map_or_else(|| "?".into(), crate::harness::num)
            );
            out[i].push(run);
        }
    }
    Ok(out)
}

/// Two figures (ours against each peer) from one workload's runs.
fn figures_of(
    id: &str,
    title: &str,
    conns: usize,
    cache: Cache,
    unit: Unit,
    note: &str,
    runs: Runs,
) -> Vec<Figure> {
    let [ours, s3s, moto] = runs;
    [(Kind::S3sFs, s3s), (Kind::Moto, moto)]
        .into_iter()
        .map(|(peer, peer_runs)| {
            let spec = Spec {
                id: "s3",
                title: format!("{title} vs {}", peer.name()),
                threads: conns,
                cache,
                unit,
                note: if peer == Kind::S3sFs {
                    note.to_string()
                } else {
                    String::new()
                },
            };
            let mut f = Figure::new(
                spec,
                Side::new(Kind::Ours.name(), unit, ours.clone()),
                Side::new(peer.name(), unit, peer_runs),
            );
            f.id = format!("{id}_vs_{}", peer.slug());
            f
        })
        .collect()
}

fn median(v: &[f64]) -> f64 {
    Stat::of(v.to_vec()).median
}

/// Runs the s3 suite.
pub fn run(args: &SuiteArgs) -> Result<Report> {
    let plan = Plan::new(args.quick);
    let bins = find_bins()?;
    let frame = Frame::open(args, "stow-bench-s3-")?;
    let (started_unix, t0, loadavg_start) = (frame.started_unix, frame.t0, frame.loadavg_start);
    let machine = frame.machine.clone();
    eprintln!(
        "stow-bench s3 ({}): {}\n  ours {}\n  s3s-fs {}\n  moto {}",
        plan.mode,
        machine.summary(),
        bins.ours.display(),
        bins.s3s_fs.display(),
        bins.moto.display()
    );

    let mut servers: Vec<Server> = Vec::new();
    let result = measure(&plan, &bins, frame.tmp.path(), &mut servers);
    for s in servers {
        s.stop();
    }
    let (figures, mut info, notes) = result?;
    let Finish {
        peak_rss_kib,
        loadavg_end,
    } = frame.finish(&mut info)?;

    Ok(Report {
        suite: "s3".into(),
        mode: plan.mode.into(),
        started_unix,
        duration_s: t0.elapsed().as_secs_f64(),
        machine,
        loadavg_start,
        loadavg_end,
        method: vec![
            "three servers run at once on 127.0.0.1, data directories on the same filesystem: \
             stow-s3 serve (filesystem backend: every PUT is fsynced before it is answered), \
             s3s-fs 0.14.1 (writes a temp file through a BufWriter, flushes it to the kernel and \
             renames it into place: no fsync of file or directory), moto_server (Python; objects \
             in memory, nothing on disk)"
                .into(),
            "load: a compiled client in this process, HTTP/1.1 keep-alive, one TCP connection per \
             worker thread (TCP_NODELAY), path-style, SigV4 header auth with UNSIGNED-PAYLOAD; \
             workers start together behind a barrier"
                .into(),
            format!(
                "each repetition runs the workload on stow-s3, s3s-fs, moto in turn (A B C A B C \
                 …), {} reps ({} for large objects); every run is bounded in operations and \
                 time ({:?}); two figures per workload, ours against each peer",
                plan.reps, plan.big_reps, plan.cap
            ),
            "cpu µs/op is the SERVER's user+system CPU (/proc/PID/stat, all its threads, clock \
             ticks of 10 ms) over the run divided by operations; the client's CPU is not in it"
                .into(),
            format!(
                "bodies are windows of a seeded pool (seed {SEED:#x}); GETs pick keys with a \
                 seeded hash among {} objects written before the GET figures (warm)",
                plan.get_objects
            ),
        ],
        figures,
        info,
        peak_rss_kib,
        notes,
    })
}

type Measured = (Vec<Figure>, Vec<Info>, Vec<String>);

/// Runs every workload of the plan on the three servers in turn and
/// returns the figures. Long because the workloads share the running
/// servers, the body pool and the alternation order (A B C per
/// repetition), which a split into one function per workload would have to
/// pass around whole; each workload is one commented block.
fn measure(plan: &Plan, bins: &Bins, dir: &Path, servers: &mut Vec<Server>) -> Result<Measured> {
    let mut info = Vec::new();
    let mut push = |name: String, value: f64, unit: &str| {
        info.push(Info {
            name,
            value,
            unit: unit.into(),
        })
    };
    let pool = Pool::new(SEED, 4 << 20);
    let bodies = small_bodies(&pool)?;

    // Start-to-ready and idle RSS: a first start on a fresh data directory
    // (creating it), then `starts` restarts on it (A B C per round); the
    // servers of the last round stay up for the figures.
    let mut first = [0f64; 3];
    let mut ready = [Vec::new(), Vec::new(), Vec::new()];
    let mut idle_rss = [0u64; 3];
    for round in 0..=plan.starts {
        for s in servers.drain(..) {
            s.stop();
        }
        for (i, kind) in Kind::ALL.into_iter().enumerate() {
            let (srv, ms) = start(kind, bins, &dir.join(kind.slug()))?;
            if round == 0 {
                first[i] = ms;
            } else {
                ready[i].push(ms);
            }
            servers.push(srv);
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    for (i, srv) in servers.iter().enumerate() {
        idle_rss[i] = status_kib(srv.pid(), "VmRSS:").unwrap_or(0);
        let r = Stat::of(ready[i].clone());
        eprintln!(
            "  {}: first start {:.1} ms, restarts {:.1} ms [{:.1}–{:.1}], idle RSS {:.1} MiB",
            srv.kind.name(),
            first[i],
            r.median,
            r.min,
            r.max,
            idle_rss[i] as f64 / 1024.0
        );
        push(
            format!(
                "{}: start to ready on an existing data dir, median of {} [min–max {:.1}–{:.1}]",
                srv.kind.name(),
                plan.starts,
                r.min,
                r.max
            ),
            r.median,
            "ms",
        );
        push(
            format!(
                "{}: first start to ready (creates the data dir)",
                srv.kind.name()
            ),
            first[i],
            "ms",
        );
        push(
            format!("{}: idle RSS after start (VmRSS)", srv.kind.name()),
            idle_rss[i] as f64 / 1024.0,
            "MiB",
        );
    }
    for srv in servers.iter() {
        create_bucket(srv, "bench")?;
        create_bucket(srv, "list")?;
    }

    let mut figures = Vec::new();
    // 1. PUT 4 KiB.
    for (k, conns) in [1usize, 16].into_iter().enumerate() {
        eprintln!("  PUT 4 KiB, {conns} conn ({} reps)", plan.reps);
        let runs = rotate(servers, plan.reps, "put", Unit::OpsPerSec, |srv, rep| {
            put_many(
                srv,
                "bench",
                &format!("p{conns}-{rep}-"),
                conns,
                (plan.put_ops[k], plan.cap),
                SMALL,
                &bodies,
            )
        })?;
        figures.extend(figures_of(
            if conns == 1 {
                "put_4k_c1"
            } else {
                "put_4k_c16"
            },
            "PUT 4 KiB",
            conns,
            Cache::Write,
            Unit::OpsPerSec,
            "fresh keys each run; ours fsyncs every PUT (group commit), s3s-fs does not fsync, \
             moto keeps objects in memory",
            runs,
        ));
    }

    // 2. GET 4 KiB (warm).
    for srv in servers.iter() {
        populate(
            srv,
            "bench",
            "g",
            plan.get_objects,
            SMALL,
            plan.populate_cap,
            &bodies,
        )?;
    }
    for (k, conns) in [1usize, 16].into_iter().enumerate() {
        eprintln!("  GET 4 KiB, {conns} conn ({} reps)", plan.reps);
        let ops = plan.get_ops[k];
        let objects = plan.get_objects;
        let cap = plan.cap;
        let runs = rotate(servers, plan.reps, "get", Unit::OpsPerSec, |srv, rep| {
            get_many(srv, "/bench/g", conns, (ops, cap), objects, SMALL, rep)
        })?;
        figures.extend(figures_of(
            if conns == 1 {
                "get_4k_c1"
            } else {
                "get_4k_c16"
            },
            "GET 4 KiB",
            conns,
            Cache::Warm,
            Unit::OpsPerSec,
            "random keys (seeded) among objects written before the figure",
            runs,
        ));
    }

    // 3. Large PUT and GET, one connection; deleted after each rep.
    let mib = plan.big >> 20;
    eprintln!("  PUT and GET {mib} MiB ({} reps)", plan.big_reps);
    let mut put_runs: Runs = Default::default();
    let mut get_runs: Runs = Default::default();
    for rep in 0..plan.big_reps {
        for (i, srv) in servers.iter().enumerate() {
            let path = format!("/bench/big-{rep}");
            let put = drive(srv, 1, |conn, _| {
                let r = conn.put_stream(&path, plan.big, &mut pool.body(rep as u64, plan.big))?;
                ok("PUT large object", r)?;
                Ok(Work {
                    ops: 1,
                    bytes: plan.big,
                })
            })?;
            let get = drive(srv, 1, |conn, _| {
                let r = ok(
                    "GET large object",
                    conn.request("GET", &path, "", b"", true)?,
                )?;
                if r.len != plan.big {
                    return Err(format!("GET returned {} bytes", r.len).into());
                }
                Ok(Work {
                    ops: 1,
                    bytes: r.len,
                })
            })?;
            let mut conn = Conn::new(srv.addr, &creds())?;
            ok("DELETE", conn.request("DELETE", &path, "", b"", false)?)?;
            eprintln!(
                "    big rep {}/{} {:<8} PUT {:.0} MB/s, GET {:.0} MB/s",
                rep + 1,
                plan.big_reps,
                srv.kind.name(),
                Unit::MbPerSec.of(&put),
                Unit::MbPerSec.of(&get)
            );
            put_runs[i].push(put);
            get_runs[i].push(get);
        }
    }
    let (put_id, get_id, put_title, get_title) = if mib == 256 {
        ("put_256m", "get_256m", "PUT 256 MiB", "GET 256 MiB")
    } else {
        ("put_64m", "get_64m", "PUT 64 MiB", "GET 64 MiB")
    };
    figures.extend(figures_of(
        put_id,
        put_title,
        1,
        Cache::Write,
        Unit::MbPerSec,
        "one connection, streamed body; ours computes MD5 and fsyncs the blob",
        put_runs,
    ));
    figures.extend(figures_of(
        get_id,
        get_title,
        1,
        Cache::Warm,
        Unit::MbPerSec,
        "the object just written (page cache warm), body read and discarded by the client",
        get_runs,
    ));

    // 4. LIST 1,000 keys after a start key in a large bucket.
    let n = plan.list_objects;
    let mut populate_runs: Runs = Default::default();
    for (i, srv) in servers.iter().enumerate() {
        eprintln!(
            "  populating {}: {n} objects of {TINY} B, 16 connections",
            srv.kind.name()
        );
        let run = populate(srv, "list", "l", n, TINY, plan.populate_cap, &bodies)?;
        eprintln!(
            "    {:.0} PUT/s, server cpu {:.0} µs/op",
            Unit::OpsPerSec.of(&run),
            run.cpu_us_per_op().unwrap_or(f64::NAN)
        );
        populate_runs[i].push(run);
    }
    figures.extend(figures_of(
        "put_64b_fill_c16",
        &format!("PUT 64 B filling the list bucket ({n})"),
        16,
        Cache::Write,
        Unit::OpsPerSec,
        "one sample per server (the servers fill one after another, not alternating)",
        populate_runs,
    ));
    let start_after = format!("l{:07}", n / 2);
    let query = format!("list-type=2&max-keys=1000&start-after={start_after}");
    eprintln!(
        "  LIST 1,000 after {start_after} of {n} ({} reps)",
        plan.reps
    );
    let runs = rotate(servers, plan.reps, "list", Unit::MsPerOp, |srv, _| {
        let start = Instant::now();
        drive(srv, 1, |conn, _| {
            let mut w = Work::default();
            while w.ops < plan.list_calls && (w.ops == 0 || start.elapsed() < plan.list_cap) {
                let r = ok("LIST", conn.request("GET", "/list", &query, b"", false)?)?;
                let text = String::from_utf8_lossy(&r.body);
                let keys = text.matches("<Key>").count();
                let first = format!("<Key>l{:07}</Key>", n / 2 + 1);
                if keys != 1000 || !text.contains(&first) {
                    return Err(format!(
                        "{}: LIST returned {keys} keys (first expected {first})",
                        srv.kind.name()
                    )
                    .into());
                }
                w.ops += 1;
                w.bytes += r.len;
            }
            Ok(w)
        })
    })?;
    figures.extend(figures_of(
        "list_1000",
        &format!("LIST 1,000 after start-after in {n}"),
        1,
        Cache::Warm,
        Unit::MsPerOp,
        "ListObjectsV2 max-keys=1000 start-after=<middle key>; every response is checked for \
         1,000 keys starting right after the start key",
        runs,
    ));

    // 6. Peak RSS.
    let mut peak = [0u64; 3];
    for (i, srv) in servers.iter().enumerate() {
        peak[i] = status_kib(srv.pid(), "VmHWM:").unwrap_or(0);
        push(
            format!("{}: peak RSS over the run (VmHWM)", srv.kind.name()),
            peak[i] as f64 / 1024.0,
            "MiB",
        );
    }

    // Targets.
    let find = |id: &str| figures.iter().find(|f| f.id == id);
    let mut notes = Vec::new();
    for (id, target) in [
        ("put_4k_c1_vs_s3s_fs", TARGET_VS_S3S_FS),
        ("put_4k_c16_vs_s3s_fs", TARGET_VS_S3S_FS),
        ("get_4k_c1_vs_s3s_fs", TARGET_VS_S3S_FS),
        ("get_4k_c16_vs_s3s_fs", TARGET_VS_S3S_FS),
        ("put_4k_c1_vs_moto", TARGET_VS_MOTO),
        ("put_4k_c16_vs_moto", TARGET_VS_MOTO),
        ("get_4k_c1_vs_moto", TARGET_VS_MOTO),
        ("get_4k_c16_vs_moto", TARGET_VS_MOTO),
    ] {
        if let Some(f) = find(id) {
            notes.push(format!(
                "{} ({} conn): {:.2}× (target >= {target}×: {})",
                f.title,
                f.threads,
                f.advantage,
                if f.advantage >= target {
                    "met"
                } else {
                    "MISSED"
                }
            ));
        }
    }
    for id in ["put_4k_c1_vs_s3s_fs", "put_4k_c16_vs_s3s_fs"] {
        if let Some(f) = find(id) {
            let cpu = |s: &Side| s.cpu_us_per_op.as_ref().map_or(f64::NAN, |c| c.median);
            let r = cpu(&f.ours) / cpu(&f.peer);
            notes.push(format!(
                "server CPU per PUT 4 KiB ({} conn), ours/s3s-fs: {:.0}/{:.0} µs = {r:.2} \
                 (target <= {TARGET_PUT_CPU_VS_S3S_FS}: {})",
                f.threads,
                cpu(&f.ours),
                cpu(&f.peer),
                if r <= TARGET_PUT_CPU_VS_S3S_FS {
                    "met"
                } else {
                    "MISSED"
                }
            ));
        }
    }
    let ready_ours = median(&ready[0]);
    notes.push(format!(
        "stow-s3 start to ready on an existing data dir: {ready_ours:.2} ms median (target <= {TARGET_READY_MS} ms: {})",
        if ready_ours <= TARGET_READY_MS {
            "met"
        } else {
            "MISSED"
        }
    ));
    let idle = idle_rss[0] as f64 / 1024.0;
    notes.push(format!(
        "stow-s3 idle RSS: {idle:.1} MiB (target <= {TARGET_IDLE_RSS_MIB} MiB: {})",
        if idle <= TARGET_IDLE_RSS_MIB {
            "met"
        } else {
            "MISSED"
        }
    ));
    notes.push(
        "durability differs: stow-s3 fsyncs every PUT; s3s-fs never fsyncs (temp file, \
         BufWriter flush, rename); moto holds objects in memory — their write figures are \
         upper bounds a durable server cannot reach"
            .into(),
    );
    notes.push(
        "s3s-fs does not set TCP_NODELAY on accepted sockets (hyper writes the head and the \
         body separately), so its small responses can wait on Nagle and the client's delayed \
         ACK: its 4 KiB GET figures measure that stall as much as its request handling"
            .into(),
    );
    notes.push(
        "peers' start to ready is polled (a TCP connect every 0.5 ms); stow-s3's is the \
         readiness line on --ready-fd"
            .into(),
    );
    Ok((figures, info, notes))
}
