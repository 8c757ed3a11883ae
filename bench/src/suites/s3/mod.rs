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

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::data::{mix, Pool, SEED};
use crate::harness::{
    context, run_threads, vm_hwm_kib, Cache, Figure, Result, Run, Side, Spec, Stat, Unit, Work,
};
use crate::machine::{loadavg, Machine};
use crate::report::{Info, Report};
use crate::suites::SuiteArgs;

use client::{ok, Conn, Creds};

pub(crate) const ACCESS_KEY: &str = "stowbench";
pub(crate) const SECRET_KEY: &str = "stowbench-secret-key-0000000000000000";
pub(crate) const REGION: &str = "us-east-1";
const SMALL: u64 = 4 * 1024;
const TINY: u64 = 64;
const S3S_FS_VERSION: &str = "0.14.1";

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

/// User+system CPU time of process `pid`, from `/proc/PID/stat`.
fn cpu_of(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as u64 } else { 100 };
    Some(Duration::from_nanos(ticks * 1_000_000_000 / hz))
}

/// A field of `/proc/PID/status` in KiB (`VmHWM:`, `VmRSS:`).
fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..].split_whitespace().next()?.parse().ok()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ours,
    S3sFs,
    Moto,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Ours, Kind::S3sFs, Kind::Moto];

    fn name(self) -> &'static str {
        match self {
            Kind::Ours => "stow-s3",
            Kind::S3sFs => "s3s-fs",
            Kind::Moto => "moto",
        }
    }

    fn slug(self) -> &'static str {
        match self {
            Kind::Ours => "stow_s3",
            Kind::S3sFs => "s3s_fs",
            Kind::Moto => "moto",
        }
    }
}

/// A running server.
pub(crate) struct Server {
    kind: Kind,
    child: Child,
    pub(crate) addr: SocketAddr,
}

impl Server {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn cpu(&self) -> Option<Duration> {
        cpu_of(self.pid())
    }

    /// SIGTERM, then SIGKILL if it has not exited within 5 s.
    pub(crate) fn stop(mut self) {
        // SAFETY: kill on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where the peer binaries live.
struct Bins {
    ours: PathBuf,
    s3s_fs: PathBuf,
    moto: PathBuf,
}

fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(context("find a free port"))?;
    Ok(l.local_addr()?.port())
}

/// Finds (or installs under `target/bench-peers/`) the server binaries.
fn find_bins() -> Result<Bins> {
    let exe = std::env::current_exe().map_err(context("locate the bench binary"))?;
    let dir = exe.parent().ok_or("the bench binary has no directory")?;
    let ours = crate::suites::mcp::server_binary()?;
    let s3s_fs = match std::env::var_os("S3S_FS_BIN") {
        Some(p) => PathBuf::from(p),
        None => {
            let target = dir
                .parent()
                .ok_or("the bench binary is not under target/")?;
            let root = target.join("bench-peers").join("s3s-fs");
            let bin = root.join("bin").join("s3s-fs");
            if !bin.is_file() {
                eprintln!(
                    "installing s3s-fs {S3S_FS_VERSION} into {} (a peer: never committed)",
                    root.display()
                );
                let status = Command::new(std::env::var_os("CARGO").unwrap_or("cargo".into()))
                    .args(["install", "s3s-fs", "--version"])
                    .arg(format!("={S3S_FS_VERSION}"))
                    .args(["--locked", "--features", "binary", "--root"])
                    .arg(&root)
                    .status()
                    .map_err(context("run cargo install s3s-fs"))?;
                if !status.success() {
                    return Err(format!("cargo install s3s-fs failed: {status}").into());
                }
            }
            bin
        }
    };
    let moto = match std::env::var_os("MOTO_SERVER") {
        Some(p) => PathBuf::from(p),
        None => Command::new("pyenv")
            .args(["which", "moto_server"])
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| PathBuf::from(s.trim()))
            .filter(|p| p.is_file())
            .unwrap_or_else(|| PathBuf::from("moto_server")),
    };
    Ok(Bins { ours, s3s_fs, moto })
}

/// Starts `kind` on `dir`; returns it and its start-to-ready time (ms).
fn start(kind: Kind, bins: &Bins, dir: &Path) -> Result<(Server, f64)> {
    std::fs::create_dir_all(dir).map_err(context(format!("create {}", dir.display())))?;
    match kind {
        Kind::Ours => start_ours(&bins.ours, dir),
        Kind::S3sFs => {
            let port = free_port()?;
            let mut cmd = Command::new(&bins.s3s_fs);
            cmd.args(["--host", "127.0.0.1", "--port", &port.to_string()])
                .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
                .arg(dir);
            start_polled(kind, cmd, port, Duration::from_secs(30))
        }
        Kind::Moto => {
            let port = free_port()?;
            let mut cmd = Command::new(&bins.moto);
            cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .current_dir(dir);
            start_polled(kind, cmd, port, Duration::from_secs(60))
        }
    }
}

/// Spawns a peer and polls its port until it accepts a connection.
fn start_polled(kind: Kind, mut cmd: Command, port: u16, limit: Duration) -> Result<(Server, f64)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let t = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(context(format!("start {}", kind.name())))?;
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
            let ms = t.elapsed().as_secs_f64() * 1e3;
            return Ok((Server { kind, child, addr }, ms));
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("{} exited before it was ready: {status}", kind.name()).into());
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{} was not ready within {limit:?}", kind.name()).into());
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// Spawns `stow-s3 serve --port 0 --ready-fd N` and reads the readiness
/// JSON line from the pipe.
pub(crate) fn start_ours(bin: &Path, dir: &Path) -> Result<(Server, f64)> {
    use std::os::fd::FromRawFd as _;
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe writes two descriptors into the array.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()).into());
    }
    let [rfd, wfd] = fds;
    // SAFETY: both descriptors were just created and are owned here; the
    // read end is closed on exec, the write end is inherited by the child.
    let reader = unsafe {
        libc::fcntl(rfd, libc::F_SETFD, libc::FD_CLOEXEC);
        std::fs::File::from_raw_fd(rfd)
    };
    // SAFETY: as above; dropped (closed) once the child has it.
    let writer = unsafe { std::fs::File::from_raw_fd(wfd) };
    let t = Instant::now();
    let child = Command::new(bin)
        .args(["serve", "--port", "0", "--ready-fd", &wfd.to_string()])
        .arg("--data-dir")
        .arg(dir)
        .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
        .args(["--region", REGION])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(context(format!("start {}", bin.display())));
    drop(writer);
    let mut child = child?;
    let mut line = String::new();
    // Bounded: the child's exit closes the last write end (EOF).
    BufReader::new(reader).read_line(&mut line)?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let ready: serde_json::Value = match serde_json::from_str(&line) {
        Ok(v) => v,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("stow-s3 did not announce readiness (got {line:?})").into());
        }
    };
    let endpoint = ready["endpoint"].as_str().unwrap_or("");
    let addr: SocketAddr = endpoint
        .trim_start_matches("http://")
        .parse()
        .map_err(context(format!("endpoint {endpoint:?}")))?;
    Ok((
        Server {
            kind: Kind::Ours,
            child,
            addr,
        },
        ms,
    ))
}

fn creds() -> Creds {
    Creds {
        access_key: ACCESS_KEY.into(),
        secret_key: SECRET_KEY.into(),
        region: REGION.into(),
    }
}

/// Runs `body(conn, thread)` on `conns` connections released together,
/// and charges the server's CPU time over the run to it.
fn drive<F>(srv: &Server, conns: usize, body: F) -> Result<Run>
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
fn put_many(
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

/// Fills `bucket` with `n` keys `{prefix}{i:07}` on 16 connections.
fn populate(
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

fn create_bucket(srv: &Server, bucket: &str) -> Result<()> {
    let mut conn = Conn::new(srv.addr, &creds())?;
    let r = conn.request("PUT", &format!("/{bucket}"), "", b"", false)?;
    // 409 (already exists / owned by you) is fine on a reused data dir.
    if r.status != 409 {
        ok(&format!("{}: create bucket {bucket}", srv.kind.name()), r)?;
    }
    Ok(())
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
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let plan = Plan::new(args.quick);
    let bins = find_bins()?;
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&base).map_err(context(format!("create {}", base.display())))?;
    let waited = Instant::now();
    if !args.no_settle {
        super::settle(&base);
    }
    let waited = waited.elapsed().as_secs_f64();
    let t0 = Instant::now();
    let loadavg_start = loadavg();
    let tmp = tempfile::Builder::new()
        .prefix("stow-bench-s3-")
        .tempdir_in(&base)
        .map_err(context(format!("create a directory in {}", base.display())))?;
    let machine = Machine::probe(tmp.path());
    eprintln!(
        "stow-bench s3 ({}): {}\n  ours {}\n  s3s-fs {}\n  moto {}",
        plan.mode,
        machine.summary(),
        bins.ours.display(),
        bins.s3s_fs.display(),
        bins.moto.display()
    );

    let mut servers: Vec<Server> = Vec::new();
    let result = measure(&plan, &bins, tmp.path(), &mut servers);
    for s in servers {
        s.stop();
    }
    let (figures, mut info, notes) = result?;
    let peak_rss_kib = vm_hwm_kib();
    let loadavg_end = loadavg();
    let t = Instant::now();
    // Many files: unlink them on several threads first (see the store suite).
    let removed = crate::harness::remove_files_parallel(tmp.path(), 8);
    let closed = tmp.close();
    super::mark_cleanup(&base);
    removed?;
    closed.map_err(context("delete the data directory"))?;
    info.push(Info {
        name: "delete the data directory".into(),
        value: t.elapsed().as_secs_f64(),
        unit: "s".into(),
    });
    if waited > 0.5 {
        info.push(Info {
            name: "waited for the filesystem to settle after a previous run (not in the run time)"
                .into(),
            value: waited,
            unit: "s".into(),
        });
    }

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
    let bodies: Vec<Vec<u8>> = (0..256)
        .map(|i| {
            let mut b = Vec::with_capacity(SMALL as usize);
            pool.body(i, SMALL).read_to_end(&mut b).map(|_| b)
        })
        .collect::<std::io::Result<_>>()?;

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
            let start = Instant::now();
            drive(srv, conns, |conn, t| {
                let mut w = Work::default();
                let mut i = t as u64;
                while i < ops && start.elapsed() < cap {
                    let key = mix(SEED ^ ((rep as u64) << 40) ^ i) % objects;
                    let r = conn.request("GET", &format!("/bench/g{key:07}"), "", b"", true)?;
                    let r = ok("GET object", r)?;
                    if r.len != SMALL {
                        return Err(format!("GET returned {} bytes", r.len).into());
                    }
                    w.ops += 1;
                    w.bytes += r.len;
                    i += conns as u64;
                }
                Ok(w)
            })
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

/// Options of `stow-bench s3-load`.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// Address of a running server (host:port).
    #[arg(long)]
    pub addr: SocketAddr,
    #[arg(long, default_value = ACCESS_KEY)]
    pub access_key: String,
    #[arg(long, default_value = SECRET_KEY)]
    pub secret_key: String,
    /// Bucket to PUT into (created if missing).
    #[arg(long, default_value = "load")]
    pub bucket: String,
    /// Body size in bytes.
    #[arg(long, default_value_t = 4096)]
    pub size: usize,
    /// Connections (one worker thread each).
    #[arg(long, default_value_t = 16)]
    pub conns: usize,
    /// How long to run.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// GET instead: each connection PUTs one object, then reads it back
    /// until the time is up.
    #[arg(long)]
    pub get: bool,
    /// With `--get`: first write this many objects, then read keys picked
    /// at random among them (0: each connection reads its own one object).
    #[arg(long, default_value_t = 0)]
    pub keys: usize,
}

/// Drives PUTs (or GETs) at a server someone else started, for profiling it (e.g.
/// under `perf record -p`); prints the rate. Not a comparison.
pub fn load(args: &LoadArgs) -> Result<()> {
    let c = Creds {
        access_key: args.access_key.clone(),
        secret_key: args.secret_key.clone(),
        region: REGION.into(),
    };
    let mut conn = Conn::new(args.addr, &c)?;
    let r = conn.request("PUT", &format!("/{}", args.bucket), "", b"", false)?;
    if r.status != 409 {
        ok("create bucket", r)?;
    }
    let body = vec![0x5au8; args.size];
    let cap = Duration::from_secs(args.seconds);
    let start = Instant::now();
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let shared_key = |i: usize| format!("/{}/{stamp}/shared/{i}", args.bucket);
    if args.get && args.keys > 0 {
        run_threads(args.conns, |t| {
            let mut conn = Conn::new(args.addr, &c)?;
            for i in (t..args.keys).step_by(args.conns) {
                ok(
                    "PUT object",
                    conn.request("PUT", &shared_key(i), "", &body, false)?,
                )?;
            }
            Ok(Work::default())
        })?;
    }
    let start = if args.keys > 0 { Instant::now() } else { start };
    let run = run_threads(args.conns, |t| {
        let mut conn = Conn::new(args.addr, &c)?;
        let mut w = Work::default();
        let read_back = format!("/{}/{stamp}/{t}/read", args.bucket);
        if args.get && args.keys == 0 {
            ok(
                "PUT object",
                conn.request("PUT", &read_back, "", &body, false)?,
            )?;
        }
        // A cheap seeded generator: the same keys every run.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ t as u64;
        while start.elapsed() < cap {
            if args.get && args.keys > 0 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let key = shared_key((seed % args.keys as u64) as usize);
                ok("GET object", conn.request("GET", &key, "", b"", false)?)?;
            } else if args.get {
                ok(
                    "GET object",
                    conn.request("GET", &read_back, "", b"", false)?,
                )?;
            } else {
                let path = format!("/{}/{stamp}/{t}/{}", args.bucket, w.ops);
                ok("PUT object", conn.request("PUT", &path, "", &body, false)?)?;
            }
            w.ops += 1;
        }
        Ok(w)
    })?;
    println!(
        "{} {}s of {} bytes on {} connections in {:.2} s: {:.0} ops/s",
        run.ops,
        if args.get { "GET" } else { "PUT" },
        args.size,
        args.conns,
        run.elapsed_s,
        run.ops as f64 / run.elapsed_s
    );
    Ok(())
}
