//! The remote suite: `stow-s3 workspace push/pull/adopt` against `aws s3
//! sync` of the same tree, both talking to one `stow-s3 serve` on
//! loopback (the generated 10,000-file tree of the workspace suite;
//! `--quick`: 1,000 files).
//!
//! Figures: first push (fresh prefix each repetition) vs `aws s3 sync` up
//! to a fresh prefix; push of a child checkpoint after 10 changed files vs
//! `aws s3 sync` of the changed tree onto its earlier copy; pull into a
//! fresh registry vs `aws s3 sync` down (and + sync, as pull is durable);
//! adopt (pull + restore into a new workspace) vs `aws s3 sync` down + sync.
//! Both sides run as users run them: the release binary and the AWS CLI.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use stow_checkpoint::{self as checkpoint, CaptureOptions, CaptureSpec};

use super::s3::{start_ours, ACCESS_KEY, REGION, SECRET_KEY};
use super::workspace::{bench_workspace, change_ten, fresh_registry, Plan};
use crate::data::{Pool, SEED};
use crate::harness::{
    alternate, context, time_one_all_cpu, vm_hwm_kib, Cache, Figure, Result, Run, Side, Spec, Unit,
    Work,
};
use crate::machine::{loadavg, Machine};
use crate::report::{Info, Report};
use crate::suites::SuiteArgs;

const BUCKET: &str = "bench";

/// The environment both sides run with: the server's keys, nothing from
/// the user's AWS files.
fn with_env(cmd: &mut Command) -> &mut Command {
    cmd.env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env("AWS_DEFAULT_REGION", REGION)
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .env_remove("AWS_PROFILE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
}

/// Runs a command to completion; its stdout on success.
fn exec(cmd: &mut Command) -> Result<String> {
    let out = with_env(cmd)
        .output()
        .map_err(context(format!("run {cmd:?}")))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What `aws` to run (`AWS_CLI` or the one on PATH).
fn aws() -> Command {
    Command::new(std::env::var_os("AWS_CLI").unwrap_or_else(|| "aws".into()))
}

fn timed(work: Work, cmd: &mut Command) -> Result<Run> {
    time_one_all_cpu(|| {
        exec(cmd)?;
        Ok(work)
    })
}

fn sync_fs() -> Result<Run> {
    time_one_all_cpu(|| {
        exec(&mut Command::new("sync"))?;
        Ok(Work { ops: 1, bytes: 0 })
    })
}

fn plus(mut a: Run, b: Run) -> Run {
    a.elapsed_s += b.elapsed_s;
    a.cpu_s = a.cpu_s.zip(b.cpu_s).map(|(x, y)| x + y);
    a
}

/// A JSON field of a command's output, as u64.
fn field(out: &str, name: &str) -> u64 {
    serde_json::from_str::<serde_json::Value>(out)
        .ok()
        .and_then(|v| v[name].as_u64())
        .unwrap_or(0)
}

/// Runs the remote suite.
pub fn run(args: &SuiteArgs) -> Result<Report> {
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut plan = Plan::new(args.quick, args.files);
    // `aws s3 sync` of the full tree takes tens of seconds: 3 repetitions.
    plan.reps = plan.reps.min(3);
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    fs::create_dir_all(&base).map_err(context(format!("create {}", base.display())))?;
    if !args.no_settle {
        super::settle(&base);
    }
    let t0 = Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("stow-bench-remote-")
        .tempdir_in(&base)
        .map_err(context("create a directory"))?;
    let top = tmp.path().to_path_buf();
    let machine = Machine::probe(&top);
    let loadavg_start = loadavg();
    eprintln!("stow-bench remote ({}): {}", plan.mode, machine.summary());
    let bin = super::mcp::server_binary()?;
    let aws_version = exec(aws().arg("--version")).unwrap_or_else(|e| format!("unavailable: {e}"));
    let pool = Pool::new(SEED, (plan.bytes / plan.files * 2) as usize + 1024);

    // Setup (untimed): the tree, a workspace over it, its first checkpoint,
    // the server and its bucket.
    let (ws, tree_bytes, record) = bench_workspace(&plan, &pool, &top)?;
    let root = PathBuf::from(&ws.root);
    let reg = fresh_registry(&top, "reg-a", &record, &ws.workspace_id)?;
    let opts = CaptureOptions::default();
    let cp0 = checkpoint::capture(&reg, &ws.workspace_id, &opts)
        .map_err(|e| e.to_string())?
        .checkpoint_id;
    let (server, _) = start_ours(&bin, &top.join("server"))?;
    let endpoint = format!("http://{}", server.addr);
    let result = measure(
        &plan, &pool, &top, &bin, &endpoint, &ws, &reg, &cp0, &root, tree_bytes,
    );
    server.stop();
    let (figures, info) = result?;
    let peak_rss_kib = vm_hwm_kib();
    let loadavg_end = loadavg();
    drop(tmp);
    super::mark_cleanup(&base);
    Ok(Report {
        suite: "remote".into(),
        mode: plan.mode.into(),
        started_unix,
        duration_s: t0.elapsed().as_secs_f64(),
        machine,
        loadavg_start,
        loadavg_end,
        method: vec![
            format!(
                "a generated tree of {} files, {} bytes (seed {SEED:#x}); one stow-s3 serve \
                 (filesystem backend, every PUT fsynced) on loopback serves both sides",
                plan.files, tree_bytes
            ),
            format!(
                "ours: the stow-s3 binary ({}) as users run it; peer: {}",
                bin.display(),
                aws_version.trim()
            ),
            "first push and pull alternate with aws s3 sync (A B A B …), each repetition on a \
             fresh prefix (push) or a fresh registry (pull); incremental pushes alternate with \
             aws s3 sync of the same 10 changed files"
                .into(),
            "pull and adopt are durable when they return (syncfs/fsync); aws s3 sync down is \
             not, so it is also shown followed by sync"
                .into(),
        ],
        figures,
        info,
        peak_rss_kib,
        notes: Vec::new(),
    })
}

/// Runs the remote workloads (first push, push after changes, pull, adopt)
/// against `aws s3 sync`. Long because they share the server, the
/// registries and the alternation order; each is one commented block.
#[allow(clippy::too_many_arguments)]
fn measure(
    plan: &Plan,
    pool: &Pool,
    top: &Path,
    bin: &Path,
    endpoint: &str,
    ws: &stow_workspace::WorkspaceResult,
    reg: &stow_checkpoint::Registry,
    cp0: &str,
    root: &Path,
    tree_bytes: u64,
) -> Result<(Vec<Figure>, Vec<Info>)> {
    let mut figures = Vec::new();
    let mut info = Vec::new();
    let reg_dir = reg.dir().to_path_buf();
    let stow = |args: &[&str]| {
        let mut c = Command::new(bin);
        c.args(args);
        c
    };
    exec(
        aws()
            .args([
                "s3api",
                "create-bucket",
                "--bucket",
                BUCKET,
                "--endpoint-url",
            ])
            .arg(endpoint),
    )?;
    let tree = Work {
        ops: 1,
        bytes: tree_bytes,
    };
    let reg_arg = reg_dir.display().to_string();
    let add_remote = |name: &str, prefix: &str, registry: &str| -> Result<()> {
        exec(
            stow(&["remote", "add", name])
                .arg(format!("s3://{BUCKET}/{prefix}"))
                .args(["--endpoint-url", endpoint, "--registry-dir", registry]),
        )?;
        Ok(())
    };

    // 1. First push vs aws s3 sync up, each to a fresh prefix.
    let mut uploaded = 0;
    let [ours, peer] = alternate(plan.reps, |side, rep| {
        if side == 0 {
            add_remote(&format!("r{rep}"), &format!("push{rep}"), &reg_arg)?;
            let mut out = String::new();
            let r = time_one_all_cpu(|| {
                out = exec(stow(&["workspace", "push", "--checkpoint-id", cp0]).args([
                    "--remote",
                    &format!("r{rep}"),
                    "--registry-dir",
                    &reg_arg,
                ]))?;
                Ok(tree)
            })?;
            uploaded = field(&out, "uploaded_blobs");
            Ok(r)
        } else {
            timed(
                tree,
                aws()
                    .args(["s3", "sync", "--only-show-errors"])
                    .arg(root)
                    .arg(format!("s3://{BUCKET}/sync{rep}"))
                    .args(["--endpoint-url", endpoint]),
            )
        }
    })?;
    figures.push(Figure::new(
        Spec {
            id: "first_push_vs_aws_sync",
            title: "first push vs aws s3 sync up".into(),
            threads: 1,
            cache: Cache::Write,
            unit: Unit::MsPerOp,
            note: format!(
                "{} files, {tree_bytes} bytes ({uploaded} distinct blobs); target ≤ 1.0×",
                plan.files
            ),
        },
        Side::new("stow-s3 workspace push", Unit::MsPerOp, ours),
        Side::new("aws s3 sync", Unit::MsPerOp, peer),
    ));

    // 2. Push of a child after 10 changed files vs aws s3 sync of them.
    let mut parent = cp0.to_string();
    let (mut ours_inc, mut peer_inc) = (Vec::new(), Vec::new());
    let mut sent = 0;
    for rep in 0..plan.reps as u64 {
        change_ten(plan, pool, root, 500 + rep)?;
        let child = checkpoint::capture(
            reg,
            &ws.workspace_id,
            &CaptureOptions {
                spec: CaptureSpec {
                    parent: Some(parent.clone()),
                    ..CaptureSpec::default()
                },
                ..CaptureOptions::default()
            },
        )
        .map_err(|e| e.to_string())?
        .checkpoint_id;
        let mut out = String::new();
        ours_inc.push(time_one_all_cpu(|| {
            out = exec(
                stow(&["workspace", "push", "--checkpoint-id", &child]).args([
                    "--remote",
                    "r0",
                    "--registry-dir",
                    &reg_arg,
                ]),
            )?;
            Ok(Work { ops: 1, bytes: 0 })
        })?);
        sent = field(&out, "uploaded_blobs");
        peer_inc.push(timed(
            Work { ops: 1, bytes: 0 },
            aws()
                .args(["s3", "sync", "--only-show-errors"])
                .arg(root)
                .arg(format!("s3://{BUCKET}/sync0"))
                .args(["--endpoint-url", endpoint]),
        )?);
        parent = child;
    }
    figures.push(Figure::new(
        Spec {
            id: "push_10_changed_vs_aws_sync",
            title: "push after 10 changed files vs aws s3 sync".into(),
            threads: 1,
            cache: Cache::Write,
            unit: Unit::MsPerOp,
            note: format!("ours uploaded {sent} blobs per push; target ≤ 0.1×"),
        },
        Side::new("stow-s3 workspace push", Unit::MsPerOp, ours_inc),
        Side::new("aws s3 sync", Unit::MsPerOp, peer_inc),
    ));

    // 3. Pull into a fresh registry vs aws s3 sync down; adopt vs sync down + sync.
    let mut synced = Vec::new();
    let [ours_pull, peer_down] = alternate(plan.reps, |side, rep| {
        if side == 0 {
            let fresh = top.join(format!("reg-pull{rep}"));
            let fresh_arg = fresh.display().to_string();
            add_remote("origin", &format!("push{rep}"), &fresh_arg)?;
            timed(
                tree,
                stow(&["workspace", "pull", "--checkpoint-id", cp0]).args([
                    "--remote",
                    "origin",
                    "--registry-dir",
                    &fresh_arg,
                ]),
            )
        } else {
            let r = timed(
                tree,
                aws()
                    .args(["s3", "sync", "--only-show-errors"])
                    .arg(format!("s3://{BUCKET}/sync{rep}"))
                    .arg(top.join(format!("down{rep}")))
                    .args(["--endpoint-url", endpoint]),
            )?;
            synced.push(plus(r, sync_fs()?));
            Ok(r)
        }
    })?;
    figures.push(Figure::new(
        Spec {
            id: "pull_vs_aws_sync_down",
            title: "pull vs aws s3 sync down".into(),
            threads: 1,
            cache: Cache::Write,
            unit: Unit::MsPerOp,
            note: "pull verifies every digest and is durable; aws is not fsynced; target ≤ 1.0×"
                .into(),
        },
        Side::new("stow-s3 workspace pull", Unit::MsPerOp, ours_pull.clone()),
        Side::new("aws s3 sync", Unit::MsPerOp, peer_down),
    ));
    figures.push(Figure::new(
        Spec {
            id: "pull_vs_aws_sync_down_sync",
            title: "pull vs aws s3 sync down + sync".into(),
            threads: 1,
            cache: Cache::Write,
            unit: Unit::MsPerOp,
            note: "both durable".into(),
        },
        Side::new("stow-s3 workspace pull", Unit::MsPerOp, ours_pull),
        Side::new("aws s3 sync + sync", Unit::MsPerOp, synced.clone()),
    ));
    let mut adopt = Vec::new();
    for rep in 0..plan.reps {
        let fresh = top.join(format!("reg-adopt{rep}"));
        let fresh_arg = fresh.display().to_string();
        add_remote("origin", &format!("push{rep}"), &fresh_arg)?;
        let dst = top.join(format!("adopted{rep}"));
        adopt.push(plus(
            timed(
                tree,
                stow(&[
                    "workspace",
                    "adopt",
                    "--remote",
                    "origin",
                    "--checkpoint-id",
                    cp0,
                ])
                .arg("--root")
                .arg(&dst)
                .args(["--registry-dir", &fresh_arg]),
            )?,
            sync_fs()?,
        ));
    }
    figures.push(Figure::new(
        Spec {
            id: "adopt_vs_aws_sync_down_sync",
            title: "adopt (pull + restore) + sync vs aws s3 sync down + sync".into(),
            threads: 1,
            cache: Cache::Write,
            unit: Unit::MsPerOp,
            note: "adopt writes the blobs and a restored tree; aws writes the tree".into(),
        },
        Side::new("stow-s3 workspace adopt", Unit::MsPerOp, adopt),
        Side::new("aws s3 sync + sync", Unit::MsPerOp, synced),
    ));
    info.push(Info {
        name: "blobs uploaded by the first push".into(),
        value: uploaded as f64,
        unit: "blobs".into(),
    });
    Ok((figures, info))
}
