//! The workspace suite: content-addressed checkpoints (stow-workspace, in
//! process) against `cp -a … && sync` and `git add -A && git commit` on a
//! generated tree (10,000 files, 150 MB; `--quick`: 1,000 files, 15 MB).
//!
//! Figures: first checkpoint vs `cp -a` + sync and vs git; a checkpoint
//! after changing 10 files vs a git commit of the same change; restore vs
//! `cp -a` + sync. Info: on-disk growth of 10 checkpoints each changing 10
//! files, relative to one tree copy.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use stow_workspace::checkpoint::{self, CaptureOptions};
use stow_workspace::restore::{restore, RestoreLimits};
use stow_workspace::Registry;

use crate::data::{mix, Pool, SEED};
use crate::harness::{
    alternate, context, time_one_all_cpu, vm_hwm_kib, Cache, Figure, Result, Run, Side, Spec, Unit,
    Work,
};
use crate::machine::{loadavg, Machine};
use crate::report::{Info, Report};
use crate::suites::SuiteArgs;

struct Plan {
    mode: &'static str,
    files: u64,
    bytes: u64,
    reps: usize,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                mode: "quick",
                files: 1_000,
                bytes: 15_000_000,
                reps: 3,
            }
        } else {
            Plan {
                mode: "full",
                files: 10_000,
                bytes: 150_000_000,
                reps: 5,
            }
        }
    }
}

/// Size of file `i`: deterministic, averaging `bytes / files`.
fn size_of(plan: &Plan, i: u64) -> u64 {
    let avg = plan.bytes / plan.files;
    avg / 2 + mix(i ^ SEED) % avg
}

fn generate(plan: &Plan, pool: &Pool, dir: &Path) -> Result<u64> {
    use std::io::Read;
    let mut total = 0;
    for i in 0..plan.files {
        let p = dir.join(format!("d{:02}/s{:02}/f{i:05}.dat", i % 37, i % 11));
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).map_err(context("create tree"))?;
        }
        let len = size_of(plan, i);
        let mut buf = Vec::with_capacity(len as usize);
        pool.body(i, len)
            .read_to_end(&mut buf)
            .map_err(context("generate"))?;
        fs::write(&p, &buf).map_err(context("write tree"))?;
        total += len;
    }
    Ok(total)
}

/// Rewrites 10 files (chosen by `round`) with new bytes of the same size.
fn change_ten(plan: &Plan, pool: &Pool, root: &Path, round: u64) -> Result<()> {
    use std::io::Read;
    for j in 0..10 {
        let i = mix(round * 1000 + j) % plan.files;
        let p = root.join(format!("d{:02}/s{:02}/f{i:05}.dat", i % 37, i % 11));
        let len = size_of(plan, i);
        let mut buf = Vec::with_capacity(len as usize);
        pool.body(i + 7919 * (round + 1), len)
            .read_to_end(&mut buf)
            .map_err(context("generate"))?;
        fs::write(&p, &buf).map_err(context("change file"))?;
    }
    Ok(())
}

fn sh(cmd: &str, dir: &Path) -> Result<()> {
    let st = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .status()
        .map_err(context(cmd))?;
    if !st.success() {
        return Err(format!("{cmd} failed").into());
    }
    Ok(())
}

const GIT: &str = "git -c user.name=b -c user.email=b@b -c core.fsync=all";

/// A fresh registry partition holding the bench workspace's record.
fn fresh_registry(base: &Path, name: &str, record: &[u8], ws: &str) -> Result<Registry> {
    let dir = base.join(name);
    fs::create_dir_all(&dir).map_err(context("create registry"))?;
    fs::write(dir.join(format!("{ws}.json")), record).map_err(context("write record"))?;
    Registry::resolve(Some(&dir), None).map_err(|e| e.to_string().into())
}

fn one(elapsed: Run) -> Run {
    elapsed
}

/// Runs the workspace suite.
pub fn run(args: &SuiteArgs) -> Result<Report> {
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let plan = Plan::new(args.quick);
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    fs::create_dir_all(&base).map_err(context(format!("create {}", base.display())))?;
    if !args.no_settle {
        super::settle(&base);
    }
    let t0 = Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("stow-bench-workspace-")
        .tempdir_in(&base)
        .map_err(context("create a directory"))?;
    let top = tmp.path().to_path_buf();
    let machine = Machine::probe(&top);
    let loadavg_start = loadavg();
    eprintln!(
        "stow-bench workspace ({}): {}",
        plan.mode,
        machine.summary()
    );
    let pool = Pool::new(SEED, (plan.bytes / plan.files * 2) as usize + 1024);
    let mut figures = Vec::new();
    let mut info = Vec::new();

    // Setup (untimed): the tree, a prepared workspace over a copy of it.
    let src = top.join("tree");
    let tree_bytes = generate(&plan, &pool, &src)?;
    fs::write(
        top.join("task.json"),
        format!(
            r#"{{"version":1,"root":"ws","registry_dir":"reg0","max_bytes":{},"max_objects":{},
               "inputs":[{{"source":"tree","destination":"."}}]}}"#,
            tree_bytes * 2,
            plan.files * 2
        ),
    )
    .map_err(context("write manifest"))?;
    let ws = stow_workspace::prepare(&top.join("task.json")).map_err(|e| e.to_string())?;
    let root = ws.root.clone();
    let record = fs::read(top.join("reg0").join(format!("{}.json", ws.workspace_id)))
        .map_err(context("read record"))?;
    let opts = CaptureOptions::default();

    // 1. First checkpoint vs cp -a + sync, and vs git add -A && git commit.
    let mut first_ids: Vec<(Registry, String)> = Vec::new();
    let [ours, cp] = alternate(plan.reps, |side, rep| {
        if side == 0 {
            let reg = fresh_registry(&top, &format!("first{rep}"), &record, &ws.workspace_id)?;
            let mut id = String::new();
            let run = time_one_all_cpu(|| {
                let c = checkpoint::capture(&reg, &ws.workspace_id, &opts)
                    .map_err(|e| e.to_string())?;
                id = c.checkpoint_id;
                Ok(Work {
                    ops: 1,
                    bytes: c.bytes,
                })
            })?;
            first_ids.push((reg, id));
            Ok(one(run))
        } else {
            let dst = top.join(format!("cp{rep}"));
            time_one_all_cpu(|| {
                sh(
                    &format!("cp -a {} {} && sync", root.display(), dst.display()),
                    &top,
                )?;
                Ok(Work {
                    ops: 1,
                    bytes: tree_bytes,
                })
            })
        }
    })?;
    let first_ours = ours.clone();
    figures.push(Figure::new(
        Spec {
            id: "first_checkpoint_vs_cp",
            title: "first checkpoint vs cp -a + sync".into(),
            threads: 1,
            cache: Cache::Write,
            unit: Unit::MsPerOp,
            note: format!(
                "{} files, {} bytes; target ≤ 1.5× cp -a + sync",
                plan.files, tree_bytes
            ),
        },
        Side::new("stow checkpoint", Unit::MsPerOp, ours),
        Side::new("cp -a && sync", Unit::MsPerOp, cp),
    ));
    let mut git_runs = Vec::new();
    // git's first commit with core.fsync=all is slow: two repetitions.
    for rep in 0..plan.reps.min(2) {
        let g = top.join(format!("git{rep}"));
        sh(&format!("cp -a {} {}", root.display(), g.display()), &top)?;
        sh("git init -q", &g)?;
        git_runs.push(time_one_all_cpu(|| {
            sh(
                &format!("{GIT} add -A && {GIT} commit -qm first && sync"),
                &g,
            )?;
            Ok(Work {
                ops: 1,
                bytes: tree_bytes,
            })
        })?);
    }
    figures.push(Figure::new(
        Spec {
            id: "first_checkpoint_vs_git",
            title: "first checkpoint vs git add -A && git commit".into(),
            threads: 1,
            cache: Cache::Write,
            unit: Unit::MsPerOp,
            note: "git with core.fsync=all, then sync".into(),
        },
        Side::new("stow checkpoint", Unit::MsPerOp, first_ours),
        Side::new("git add+commit", Unit::MsPerOp, git_runs),
    ));

    // 2. Checkpoint after changing 10 files vs a git commit of the same change.
    let (reg, _) = first_ids.first().cloned().ok_or("no first checkpoint")?;
    let g = top.join("git0");
    let mut ours_inc = Vec::new();
    let mut git_inc = Vec::new();
    for rep in 0..plan.reps as u64 {
        change_ten(&plan, &pool, &root, rep)?;
        ours_inc.push(time_one_all_cpu(|| {
            checkpoint::capture(&reg, &ws.workspace_id, &opts).map_err(|e| e.to_string())?;
            Ok(Work { ops: 1, bytes: 0 })
        })?);
        change_ten(&plan, &pool, &g, rep)?;
        git_inc.push(time_one_all_cpu(|| {
            sh(
                &format!("{GIT} add -A && {GIT} commit -qm next && sync"),
                &g,
            )?;
            Ok(Work { ops: 1, bytes: 0 })
        })?);
    }
    figures.push(Figure::new(
        Spec {
            id: "checkpoint_10_changed",
            title: "checkpoint after changing 10 files vs git commit".into(),
            threads: 1,
            cache: Cache::Write,
            unit: Unit::MsPerOp,
            note: "target ≤ 100 ms".into(),
        },
        Side::new("stow checkpoint", Unit::MsPerOp, ours_inc),
        Side::new("git add+commit", Unit::MsPerOp, git_inc),
    ));

    // 3. Restore vs cp -a + sync.
    let (reg0, cp0) = first_ids.first().cloned().ok_or("no first checkpoint")?;
    let [ours_r, cp_r] = alternate(plan.reps, |side, rep| {
        let dst = top.join(format!("restore{side}-{rep}"));
        if side == 0 {
            time_one_all_cpu(|| {
                restore(&reg0, &cp0, &dst, RestoreLimits::default()).map_err(|e| e.to_string())?;
                sh("sync", &top)?;
                Ok(Work {
                    ops: 1,
                    bytes: tree_bytes,
                })
            })
        } else {
            time_one_all_cpu(|| {
                sh(
                    &format!("cp -a {} {} && sync", src.display(), dst.display()),
                    &top,
                )?;
                Ok(Work {
                    ops: 1,
                    bytes: tree_bytes,
                })
            })
        }
    })?;
    figures.push(Figure::new(
        Spec {
            id: "restore_vs_cp",
            title: "restore vs cp -a + sync".into(),
            threads: 1,
            cache: Cache::Write,
            unit: Unit::MsPerOp,
            note: "restore verifies every payload's SHA-256; target ≤ 1.2× cp -a + sync".into(),
        },
        Side::new("stow restore", Unit::MsPerOp, ours_r),
        Side::new("cp -a && sync", Unit::MsPerOp, cp_r),
    ));

    // 4. Disk growth: 10 checkpoints each changing 10 files.
    let reg10 = fresh_registry(&top, "ten", &record, &ws.workspace_id)?;
    for round in 0..10u64 {
        if round > 0 {
            change_ten(&plan, &pool, &root, 100 + round)?;
        }
        checkpoint::capture(&reg10, &ws.workspace_id, &opts).map_err(|e| e.to_string())?;
    }
    let stored = checkpoint::stored_bytes(&reg10);
    info.push(Info {
        name: "10 checkpoints each changing 10 files: blob bytes / one tree copy (target ≤ 1.1)"
            .into(),
        value: stored as f64 / tree_bytes as f64,
        unit: "ratio".into(),
    });
    let _: &PathBuf = &root;

    let peak_rss_kib = vm_hwm_kib();
    let loadavg_end = loadavg();
    drop(tmp);
    super::mark_cleanup(&base);
    Ok(Report {
        suite: "workspace".into(),
        mode: plan.mode.into(),
        started_unix,
        duration_s: t0.elapsed().as_secs_f64(),
        machine,
        loadavg_start,
        loadavg_end,
        method: vec![
            format!(
                "a generated tree of {} files, {} bytes (seed {SEED:#x}); ours runs stow-workspace in process",
                plan.files, tree_bytes
            ),
            "first checkpoint and restore alternate with cp -a && sync (A B A B …); each first \
             checkpoint uses a fresh registry so nothing is deduplicated against earlier runs"
                .into(),
            "checkpoints are durable when reported (many new blobs: one syncfs; a few: an fsync \
             each); git runs with core.fsync=all and a final sync"
                .into(),
            "cpu µs/op is the user+system CPU of the whole bench process (ours: every capture \
             thread) plus the commands it waited for (cp, git, sync); kernel writeback is not \
             counted"
                .into(),
        ],
        figures,
        info,
        peak_rss_kib,
        notes: Vec::new(),
    })
}
