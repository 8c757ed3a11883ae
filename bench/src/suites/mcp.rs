//! The mcp suite: `stow-s3 mcp` (object profile) driven over stdio by a
//! minimal JSON-RPC client, against the same operations done in-process on
//! stow-store (the peer: the store without the MCP adapter and transport).
//!
//! Figures compare mean ms/op of guarded 4 KiB reads and saves (alternating
//! A B A B). Beside them, the suite reports what the MCP issue targets:
//! cold start to the first tool result, p50/p99 per-call latency of
//! `stow_object_read_for_save` and `stow_object_save` over 1,000 calls of
//! 4 KiB bodies, the server's CPU time per call, and the server's peak RSS.
//!
//! The server binary is `STOW_BIN` or `stow-s3` beside the bench binary
//! (build it with `cargo build --release --bin stow-s3`).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Value};
use stow_store::{SaveGuard, SaveRequest, Store, StoreOptions};

use crate::data::{Pool, SEED};
use crate::harness::{
    alternate, context, thread_cpu, vm_hwm_kib, Cache, Figure, Result, Run, Side, Spec, Unit,
};
use crate::machine::{loadavg, Machine};
use crate::report::{Info, Report};
use crate::suites::SuiteArgs;

const BODY: u64 = 4 * 1024;
const BUCKET: &str = "files";

/// Targets of the MCP issue.
const TARGET_COLD_START_MS: f64 = 10.0;
const TARGET_SAVE_P50_MS: f64 = 2.0;
const TARGET_READ_P50_MS: f64 = 0.5;
const TARGET_RSS_MIB: f64 = 15.0;

struct Plan {
    mode: &'static str,
    reps: usize,
    /// Calls of each kind per repetition.
    calls: u64,
    cold_starts: usize,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                mode: "quick",
                reps: 2,
                calls: 300,
                cold_starts: 10,
            }
        } else {
            Plan {
                mode: "full",
                reps: 3,
                calls: 1000,
                cold_starts: 30,
            }
        }
    }
}

/// The server binary to measure.
pub(crate) fn server_binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("STOW_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(context("locate the bench binary"))?;
    let dir = exe.parent().ok_or("the bench binary has no directory")?;
    let bin = dir.join("stow-s3");
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!(
            "{} not found: build it (cargo build --release --bin stow-s3) or set STOW_BIN",
            bin.display()
        )
        .into())
    }
}

/// A running `stow-s3 mcp` with a newline-delimited JSON-RPC client.
pub(crate) struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
    line: String,
}

impl Server {
    fn spawn(bin: &Path, dir: &Path) -> Result<Server> {
        let dir = dir.display().to_string();
        Server::spawn_with(
            bin,
            &["--object-dir", &dir, "--bucket", BUCKET, "--create-bucket"],
        )
    }

    /// Starts `stow-s3 mcp ARGS`.
    pub(crate) fn spawn_with(bin: &Path, args: &[&str]) -> Result<Server> {
        let mut child = Command::new(bin)
            .arg("mcp")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(context(format!("start {}", bin.display())))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        Ok(Server {
            child,
            stdin,
            stdout,
            next_id: 1,
            line: String::new(),
        })
    }

    fn send(&mut self, msg: &Value) -> Result<()> {
        let mut buf = serde_json::to_vec(msg)?;
        buf.push(b'\n');
        self.stdin.write_all(&buf)?;
        self.stdin.flush()?;
        Ok(())
    }

    fn request(&mut self, method: &str, params: Value) -> Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        loop {
            self.line.clear();
            if self.stdout.read_line(&mut self.line)? == 0 {
                return Err("the server closed stdout".into());
            }
            let mut msg: Value = serde_json::from_str(&self.line)?;
            if msg["id"] == id {
                if let Some(e) = msg.get("error") {
                    return Err(format!("{method}: {e}").into());
                }
                return Ok(msg["result"].take());
            }
        }
    }

    pub(crate) fn initialize(&mut self) -> Result<()> {
        self.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "stow-bench", "version": "1"}}),
        )?;
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    }

    /// Calls a tool; returns its envelope, refusing error envelopes.
    pub(crate) fn tool(&mut self, name: &str, args: Value) -> Result<Value> {
        let r = self.request("tools/call", json!({"name": name, "arguments": args}))?;
        let env = r["structuredContent"].clone();
        if env.get("error").is_some() || r["isError"] == true {
            return Err(format!("{name}: {env}").into());
        }
        Ok(env)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Closes stdin and waits for a clean exit.
    pub(crate) fn close(mut self) -> Result<()> {
        drop(self.stdin);
        let mut rest = String::new();
        let _ = self.stdout.read_to_string(&mut rest);
        let status = self.child.wait()?;
        if !status.success() {
            return Err(format!("the server exited with {status}").into());
        }
        Ok(())
    }
}

/// User+system CPU time of process `pid`.
pub(crate) fn cpu_of(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// Peak RSS of process `pid` (KiB).
pub(crate) fn hwm_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line["VmHWM:".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn body(pool: &Pool, id: u64) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(BODY as usize);
    pool.body(id, BODY).read_to_end(&mut out)?;
    Ok(out)
}

/// Latencies (ms) and CPU of one side's repetition.
#[derive(Default)]
struct Lat {
    read_ms: Vec<f64>,
    save_ms: Vec<f64>,
    server_hwm_kib: u64,
}

/// One repetition of reads (`save == false`) or saves over MCP.
fn mcp_rep(
    bin: &Path,
    dir: &Path,
    pool: &Pool,
    calls: u64,
    save: bool,
    lat: &mut Lat,
) -> Result<Run> {
    let mut srv = Server::spawn(bin, dir)?;
    srv.initialize()?;
    let bodies: Vec<String> = (0..calls)
        .map(|i| body(pool, i).map(|b| STANDARD.encode(b)))
        .collect::<Result<_>>()?;
    if !save {
        for (i, b) in bodies.iter().enumerate() {
            srv.tool(
                "stow_object_save",
                json!({"key": format!("obj/{i}"), "data_base64": b,
                       "request_key": format!("fill-{i}"), "replace": true}),
            )?;
        }
    }
    let cpu0 = cpu_of(srv.pid());
    let mut elapsed = Duration::ZERO;
    for (i, b) in bodies.iter().enumerate() {
        let key = format!("obj/{i}");
        if save {
            let env = srv.tool("stow_object_read_for_save", json!({"key": key}))?;
            let token = env["observation_token"].clone();
            let t = Instant::now();
            let env = srv.tool(
                "stow_object_save",
                json!({"key": key, "data_base64": b, "observation_token": token,
                       "request_key": format!("save-{i}")}),
            )?;
            let d = t.elapsed();
            if env["outcome"] != "committed" {
                return Err(format!("save not committed: {env}").into());
            }
            elapsed += d;
            lat.save_ms.push(d.as_secs_f64() * 1e3);
            srv.tool(
                "stow_object_release_observation",
                json!({"observation_token": token}),
            )?;
        } else {
            let t = Instant::now();
            let env = srv.tool("stow_object_read_for_save", json!({"key": key}))?;
            let d = t.elapsed();
            elapsed += d;
            lat.read_ms.push(d.as_secs_f64() * 1e3);
            let token = env["observation_token"].clone();
            srv.tool(
                "stow_object_release_observation",
                json!({"observation_token": token}),
            )?;
        }
    }
    let cpu1 = cpu_of(srv.pid());
    lat.server_hwm_kib = lat.server_hwm_kib.max(hwm_of(srv.pid()).unwrap_or(0));
    srv.close()?;
    Ok(Run {
        elapsed_s: elapsed.as_secs_f64(),
        // The server's CPU for the whole loop (untimed token releases and
        // reads included), spread over the timed calls.
        cpu_s: cpu0
            .zip(cpu1)
            .map(|(a, b)| b.saturating_sub(a).as_secs_f64()),
        ops: calls,
        bytes: calls * BODY,
    })
}

/// The same repetition on stow-store in-process.
fn store_rep(dir: &Path, pool: &Pool, calls: u64, save: bool) -> Result<Run> {
    let store = Store::open(dir, StoreOptions::default())?;
    store.create_bucket(BUCKET)?;
    let bodies: Vec<Vec<u8>> = (0..calls).map(|i| body(pool, i)).collect::<Result<_>>()?;
    if !save {
        for (i, b) in bodies.iter().enumerate() {
            let req = SaveRequest {
                bucket: BUCKET.into(),
                key: format!("obj/{i}"),
                props: Default::default(),
                checksum_algorithm: None,
                guard: SaveGuard::Replace,
                request_key: Some(format!("fill-{i}")),
            };
            store.save(req, &mut b.as_slice())?;
        }
    }
    let cpu0 = thread_cpu();
    let mut elapsed = Duration::ZERO;
    for (i, b) in bodies.iter().enumerate() {
        let key = format!("obj/{i}");
        if save {
            let obs = store.read_for_save(BUCKET, &key, 64 << 10)?;
            let t = Instant::now();
            let req = SaveRequest {
                bucket: BUCKET.into(),
                key,
                props: Default::default(),
                checksum_algorithm: None,
                guard: SaveGuard::Observed(obs.condition),
                request_key: Some(format!("save-{i}")),
            };
            store.save(req, &mut b.as_slice())?;
            elapsed += t.elapsed();
        } else {
            let t = Instant::now();
            let obs = store.read_for_save(BUCKET, &key, 64 << 10)?;
            // What the adapter does with the bytes before answering.
            let encoded = STANDARD.encode(&obs.body);
            elapsed += t.elapsed();
            std::hint::black_box(encoded);
        }
    }
    let cpu1 = thread_cpu();
    Ok(Run {
        elapsed_s: elapsed.as_secs_f64(),
        cpu_s: cpu0
            .zip(cpu1)
            .map(|(a, b)| b.saturating_sub(a).as_secs_f64()),
        ops: calls,
        bytes: calls * BODY,
    })
}

/// Spawn to first tool result (initialize, then one capabilities call), on
/// an existing store.
fn cold_start(bin: &Path, dir: &Path) -> Result<(f64, u64)> {
    let t = Instant::now();
    let mut srv = Server::spawn(bin, dir)?;
    srv.initialize()?;
    srv.tool("stow_object_capabilities", json!({}))?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let hwm = hwm_of(srv.pid()).unwrap_or(0);
    srv.close()?;
    Ok((ms, hwm))
}

/// Runs the mcp suite. Long because its workloads share one running
/// server per side and run in a fixed, alternating order; each is one
/// commented block.
pub fn run(args: &SuiteArgs) -> Result<Report> {
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let t0 = Instant::now();
    let loadavg_start = loadavg();
    let plan = Plan::new(args.quick);
    let bin = server_binary()?;
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&base).map_err(context(format!("create {}", base.display())))?;
    let tmp = tempfile::Builder::new()
        .prefix("stow-bench-mcp-")
        .tempdir_in(&base)
        .map_err(context(format!("create a directory in {}", base.display())))?;
    let machine = Machine::probe(tmp.path());
    eprintln!(
        "stow-bench mcp ({}): {}; server {}",
        plan.mode,
        machine.summary(),
        bin.display()
    );
    let pool = Pool::new(SEED, 1 << 20);
    let mut lat = Lat::default();
    let mut info = Vec::new();
    let mut figures = Vec::new();
    let mut dirs = 0u64;
    let mut fresh = || {
        dirs += 1;
        tmp.path().join(format!("d{dirs}"))
    };

    // Cold start, on a store that already exists.
    let cold_dir = fresh();
    Server::spawn(&bin, &cold_dir)?.close()?;
    let mut cold = Vec::new();
    let mut cold_hwm = 0;
    for _ in 0..plan.cold_starts {
        let (ms, hwm) = cold_start(&bin, &cold_dir)?;
        cold.push(ms);
        cold_hwm = cold_hwm.max(hwm);
    }
    cold.sort_by(f64::total_cmp);
    eprintln!("  cold start: p50 {:.2} ms", percentile(&cold, 50.0));

    for (save, id, title) in [
        (
            false,
            "read_for_save_4k",
            "read_for_save 4 KiB (token minted)",
        ),
        (true, "save_4k", "guarded keyed save 4 KiB (fsync)"),
    ] {
        eprintln!("  {title} ({} reps of {} calls)", plan.reps, plan.calls);
        let [ours, peer] = alternate(plan.reps, |side, rep| {
            let dir = fresh();
            let run = if side == 0 {
                mcp_rep(&bin, &dir, &pool, plan.calls, save, &mut lat)?
            } else {
                store_rep(&dir, &pool, plan.calls, save)?
            };
            eprintln!(
                "    rep {}/{} {:<10} {:.3} ms/op",
                rep + 1,
                plan.reps,
                if side == 0 { "mcp" } else { "in-process" },
                Unit::MsPerOp.of(&run)
            );
            Ok(run)
        })?;
        let spec = Spec {
            id,
            title: title.into(),
            threads: 1,
            cache: if save { Cache::Write } else { Cache::Warm },
            unit: Unit::MsPerOp,
            note: if save {
                "one call per request: read_for_save (untimed), save with its token (timed), \
                 release (untimed)"
                    .into()
            } else {
                "ours includes JSON-RPC over stdio, base64 and the token; the peer is the store \
                 call plus base64"
                    .into()
            },
        };
        figures.push(Figure::new(
            spec,
            Side::new("stow-s3 mcp", Unit::MsPerOp, ours),
            Side::new("stow-store in-process", Unit::MsPerOp, peer),
        ));
    }

    let mut push = |name: &str, value: f64, unit: &str| {
        info.push(Info {
            name: name.into(),
            value,
            unit: unit.into(),
        })
    };
    let mut read = lat.read_ms.clone();
    let mut save = lat.save_ms.clone();
    read.sort_by(f64::total_cmp);
    save.sort_by(f64::total_cmp);
    let server_rss_mib = lat.server_hwm_kib.max(cold_hwm) as f64 / 1024.0;
    push(
        "cold start to first tool result, p50",
        percentile(&cold, 50.0),
        "ms",
    );
    push(
        "cold start, min",
        cold.first().copied().unwrap_or(f64::NAN),
        "ms",
    );
    push(
        "cold start, max",
        cold.last().copied().unwrap_or(f64::NAN),
        "ms",
    );
    push(
        "read_for_save 4 KiB over MCP, p50",
        percentile(&read, 50.0),
        "ms",
    );
    push(
        "read_for_save 4 KiB over MCP, p99",
        percentile(&read, 99.0),
        "ms",
    );
    push(
        "save 4 KiB over MCP (fsync), p50",
        percentile(&save, 50.0),
        "ms",
    );
    push(
        "save 4 KiB over MCP (fsync), p99",
        percentile(&save, 99.0),
        "ms",
    );
    push(
        "server peak RSS (VmHWM, max over servers)",
        server_rss_mib,
        "MiB",
    );
    let verdict = |name: &str, got: f64, target: f64, unit: &str| {
        format!(
            "{name}: {got:.3} {unit} (target <= {target} {unit}: {})",
            if got <= target { "met" } else { "MISSED" }
        )
    };
    let notes = vec![
        verdict(
            "cold start p50",
            percentile(&cold, 50.0),
            TARGET_COLD_START_MS,
            "ms",
        ),
        verdict(
            "save p50",
            percentile(&save, 50.0),
            TARGET_SAVE_P50_MS,
            "ms",
        ),
        verdict(
            "read p50",
            percentile(&read, 50.0),
            TARGET_READ_P50_MS,
            "ms",
        ),
        verdict("server peak RSS", server_rss_mib, TARGET_RSS_MIB, "MiB"),
    ];
    let peak_rss_kib = vm_hwm_kib();
    let loadavg_end = loadavg();
    let closed = tmp.close();
    closed.map_err(context("delete the data directory"))?;

    Ok(Report {
        suite: "mcp".into(),
        mode: plan.mode.into(),
        started_unix,
        duration_s: t0.elapsed().as_secs_f64(),
        machine,
        method: vec![
            "ours is the stow-s3 binary serving the object profile over stdio pipes, driven by a \
             minimal newline-delimited JSON-RPC client in this process, one call at a time; the \
             peer does the same store operations in-process (no MCP, no JSON, no pipes)"
                .into(),
            "each repetition uses a fresh store directory (receipts are bounded at 1,024) and a \
             fresh server; reps alternate ours and the peer (A B A B …)"
                .into(),
            "latency is measured per call, from writing the request to parsing the response; \
             p50/p99 pool every call of every repetition"
                .into(),
            "saves are durable: the server answers committed after SQLite's WAL commit is \
             fsynced (synchronous=FULL)"
                .into(),
            "cold start: spawn, initialize (2025-11-25), notifications/initialized, one \
             stow_object_capabilities call, on an existing store; server CPU µs/op (ours) comes \
             from /proc/PID/stat of the server; VmHWM from /proc/PID/status before it exits"
                .into(),
            format!("4 KiB bodies are windows of a seeded pool (seed {SEED:#x})"),
        ],
        figures,
        info,
        peak_rss_kib,
        loadavg_start,
        loadavg_end,
        notes,
    })
}
