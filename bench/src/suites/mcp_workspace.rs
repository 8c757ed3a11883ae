//! The mcp-workspace suite: a keyed portable capture through a running
//! `stow-s3 mcp` workspace server against the same capture through the CLI
//! (`stow-s3 workspace checkpoint --portable --request-key …`), on the
//! workspace suite's generated tree; first capture and after 10 changed
//! files, alternating A B A B. Beside them: the latency of an inspect
//! page of 1,000 entries, and the server's CPU per capture.
//!
//! Both sides are the release binary (`STOW_BIN` or `stow-s3` beside the
//! bench binary); the CLI side pays a process start per capture, which is
//! what a host that shells out per turn pays.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;

use super::mcp::server_binary;
use super::mcp_workspace_server::{mcp_capture, serve};
use super::workspace::{bench_workspace, change_ten, fresh_registry, Plan};
use crate::data::{Pool, SEED};
use crate::harness::{context, vm_hwm_kib, Cache, Figure, Result, Run, Side, Spec, Unit};
use crate::machine::{loadavg, Machine};
use crate::report::{Info, Report};
use crate::suites::SuiteArgs;

/// One keyed portable capture through the CLI.
fn cli_capture(bin: &Path, reg: &Path, ws: &str, key: &str) -> Result<Run> {
    let t = Instant::now();
    let out = Command::new(bin)
        .args([
            "workspace",
            "checkpoint",
            "--id",
            ws,
            "--portable",
            "--timeout",
            "600s",
        ])
        .args(["--request-key", key, "--registry-dir"])
        .arg(reg)
        .output()
        .map_err(context("run stow-s3 workspace checkpoint"))?;
    let elapsed_s = t.elapsed().as_secs_f64();
    if !out.status.success() {
        return Err(format!(
            "CLI capture failed: {}",
            String::from_utf8_lossy(&out.stdout)
        )
        .into());
    }
    Ok(Run {
        elapsed_s,
        cpu_s: None,
        ops: 1,
        bytes: 0,
    })
}

/// Runs the mcp-workspace suite. Long because its workloads share one
/// server and workspace and run in a fixed order; each is one commented
/// block.
pub fn run(args: &SuiteArgs) -> Result<Report> {
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let plan = Plan::new(args.quick, args.files);
    let bin = server_binary()?;
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    fs::create_dir_all(&base).map_err(context(format!("create {}", base.display())))?;
    if !args.no_settle {
        super::settle(&base);
    }
    let t0 = Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("stow-bench-mcp-workspace-")
        .tempdir_in(&base)
        .map_err(context("create a directory"))?;
    let top = tmp.path().to_path_buf();
    let machine = Machine::probe(&top);
    let loadavg_start = loadavg();
    eprintln!(
        "stow-bench mcp-workspace ({}): {}",
        plan.mode,
        machine.summary()
    );
    let pool = Pool::new(SEED, (plan.bytes / plan.files * 2) as usize + 1024);
    let (ws, tree_bytes, record) = bench_workspace(&plan, &pool, &top)?;
    let id = ws.workspace_id.clone();
    let mut figures = Vec::new();
    let mut info = Vec::new();

    // 1. First capture, each on a fresh registry (nothing to deduplicate).
    let (mut first_mcp, mut first_cli) = (Vec::new(), Vec::new());
    for rep in 0..plan.reps {
        let reg = top.join(format!("first-mcp{rep}"));
        fresh_registry(&top, &format!("first-mcp{rep}"), &record, &id)?;
        let mut server = serve(&bin, &reg, &id)?;
        first_mcp.push(mcp_capture(&mut server, &id, &format!("first-{rep}"))?);
        server.close()?;
        let reg = top.join(format!("first-cli{rep}"));
        fresh_registry(&top, &format!("first-cli{rep}"), &record, &id)?;
        first_cli.push(cli_capture(&bin, &reg, &id, &format!("first-{rep}"))?);
    }
    figures.push(Figure::new(
        Spec {
            id: "mcp_first_capture_vs_cli",
            title: "first capture: MCP vs CLI".into(),
            threads: 1,
            cache: Cache::Write,
            unit: Unit::MsPerOp,
            note: format!(
                "{} files, {tree_bytes} bytes, portable, keyed; target ≤ 1.0×",
                plan.files
            ),
        },
        Side::new("stow mcp", Unit::MsPerOp, first_mcp),
        Side::new("stow CLI", Unit::MsPerOp, first_cli),
    ));

    // 2. After 10 changed files, one registry, one long-lived server.
    let reg = top.join("inc");
    fresh_registry(&top, "inc", &record, &id)?;
    cli_capture(&bin, &reg, &id, "base")?;
    let mut server = serve(&bin, &reg, &id)?;
    let (mut inc_mcp, mut inc_cli) = (Vec::new(), Vec::new());
    for rep in 0..plan.reps as u64 {
        change_ten(&plan, &pool, &ws.root, 2 * rep)?;
        inc_mcp.push(mcp_capture(&mut server, &id, &format!("inc-mcp-{rep}"))?);
        change_ten(&plan, &pool, &ws.root, 2 * rep + 1)?;
        inc_cli.push(cli_capture(&bin, &reg, &id, &format!("inc-cli-{rep}"))?);
    }
    figures.push(Figure::new(
        Spec {
            id: "mcp_capture_10_changed_vs_cli",
            title: "capture after 10 changed files: MCP vs CLI".into(),
            threads: 1,
            cache: Cache::Write,
            unit: Unit::MsPerOp,
            note: "a long-lived server against a CLI process per capture; target ≤ 1.0×".into(),
        },
        Side::new("stow mcp", Unit::MsPerOp, inc_mcp),
        Side::new("stow CLI", Unit::MsPerOp, inc_cli),
    ));

    // 3. Inspect pages of up to 1,000 entries.
    let env = server.tool(
        "stow_checkpoint_create",
        json!({"workspace_id": id, "request_key": "inspect"}),
    )?;
    let cp = env["checkpoint_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut page_ms = Vec::new();
    let mut entries = 0;
    for _ in 0..plan.reps * 4 {
        let t = Instant::now();
        let env = server.tool(
            "stow_checkpoint_inspect",
            json!({"checkpoint_id": cp, "limit": 1000}),
        )?;
        page_ms.push(t.elapsed().as_secs_f64() * 1e3);
        entries = env["entries"].as_array().map_or(0, Vec::len);
    }
    page_ms.sort_by(f64::total_cmp);
    info.push(Info {
        name: format!(
            "inspect page (limit 1000, {entries} entries fit 256 KiB): median of {} [{:.1}–{:.1}]",
            page_ms.len(),
            page_ms[0],
            page_ms[page_ms.len() - 1]
        ),
        value: page_ms[page_ms.len() / 2],
        unit: "ms".into(),
    });
    let hwm = super::mcp::hwm_of(server.pid());
    server.close()?;
    if let Some(kib) = hwm {
        info.push(Info {
            name: "server peak RSS (VmHWM) after the captures".into(),
            value: kib as f64 / 1024.0,
            unit: "MiB".into(),
        });
    }
    let peak_rss_kib = vm_hwm_kib();
    let loadavg_end = loadavg();
    drop(tmp);
    super::mark_cleanup(&base);
    Ok(Report {
        suite: "mcp-workspace".into(),
        mode: plan.mode.into(),
        started_unix,
        duration_s: t0.elapsed().as_secs_f64(),
        machine,
        loadavg_start,
        loadavg_end,
        method: vec![
            format!(
                "the workspace suite's generated tree: {} files, {tree_bytes} bytes (seed {SEED:#x})",
                plan.files
            ),
            "both sides run the release stow-s3: a server started once (mcp) against a CLI \
             process per capture; every capture is keyed, portable and durable"
                .into(),
            "server CPU per capture is the mcp process's (from /proc); the CLI column has none"
                .into(),
        ],
        figures,
        info,
        peak_rss_kib,
        notes: Vec::new(),
    })
}
