//! The workspace suite: content-addressed checkpoints (stow-workspace, in
//! process) against `cp -a … && sync` and `git add -A && git commit` on a
//! generated tree (10,000 files, 150 MB; `--quick`: 1,000 files, 15 MB).
//!
//! Figures: first checkpoint vs `cp -a` + sync and vs git; a checkpoint
//! after changing 10 files vs a git commit of the same change; restore vs
//! `cp -a` + sync. Info: on-disk growth of 10 checkpoints each changing 10
//! files, relative to one tree copy.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use stow_checkpoint::Registry;
use stow_checkpoint::{self as checkpoint, CaptureOptions};
use stow_workspace::restore::{restore, RestoreLimits};

use crate::data::{mix, Pool, SEED};
use crate::harness::{
    alternate, context, time_one_all_cpu, vm_hwm_kib, Cache, Figure, Result, Run, Side, Spec, Unit,
    Work,
};
use crate::machine::{loadavg, Machine};
use crate::report::{Info, Report};
use crate::suites::SuiteArgs;

mod transfer;

use transfer::more_figures;

pub(crate) struct Plan {
    pub(crate) mode: &'static str,
    pub(crate) files: u64,
    pub(crate) bytes: u64,
    pub(crate) reps: usize,
    /// Repetitions of the figures that copy the whole tree (first
    /// checkpoint, prepare, restore: the disk's speed swings most there).
    pub(crate) copy_reps: usize,
}

impl Plan {
    /// The default plans (1,000 files with `quick`, else 10,000), or
    /// `files` files of the same average size.
    pub(crate) fn new(quick: bool, files: Option<u64>) -> Plan {
        let (mode, default_files, reps) = if quick {
            ("quick", 1_000, 3)
        } else {
            ("full", 10_000, 5)
        };
        let files = files.unwrap_or(default_files).max(10);
        Plan {
            mode,
            files,
            bytes: files * 15_000,
            // Large trees: fewer repetitions (each copies the whole tree).
            reps: if files > 20_000 { 2 } else { reps },
            copy_reps: if files > 20_000 { 3 } else { reps },
        }
    }

    /// A tree large enough that the transfer figures (whole-tree archives)
    /// are left out.
    pub(super) fn large(&self) -> bool {
        self.files > 20_000
    }
}

/// Where file `i` lives: 407 directories per 10,000 files (the 10,000-file
/// tree is the same as ever; larger trees repeat it under `cN/`).
fn path_of(plan: &Plan, i: u64) -> String {
    let j = i % 10_000;
    let leaf = format!("d{:02}/s{:02}/f{j:05}.dat", j % 37, j % 11);
    if plan.files > 10_000 {
        format!("c{}/{leaf}", i / 10_000)
    } else {
        format!("d{:02}/s{:02}/f{i:05}.dat", i % 37, i % 11)
    }
}

/// Size of file `i`: deterministic, averaging `bytes / files`.
fn size_of(plan: &Plan, i: u64) -> u64 {
    let avg = plan.bytes / plan.files;
    avg / 2 + mix(i ^ SEED) % avg
}

pub(crate) fn generate(plan: &Plan, pool: &Pool, dir: &Path) -> Result<u64> {
    use std::io::Read;
    let mut total = 0;
    for i in 0..plan.files {
        let p = dir.join(path_of(plan, i));
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
pub(crate) fn change_ten(plan: &Plan, pool: &Pool, root: &Path, round: u64) -> Result<()> {
    use std::io::Read;
    for j in 0..10 {
        let i = mix(round * 1000 + j) % plan.files;
        let p = root.join(path_of(plan, i));
        let len = size_of(plan, i);
        let mut buf = Vec::with_capacity(len as usize);
        pool.body(i + 7919 * (round + 1), len)
            .read_to_end(&mut buf)
            .map_err(context("generate"))?;
        fs::write(&p, &buf).map_err(context("change file"))?;
    }
    Ok(())
}

pub(super) fn sh(cmd: &str, dir: &Path) -> Result<()> {
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

/// git with every write durable. Automatic gc is off on both: after a
/// first commit of 100,000 files a commit starts a background repack that
/// would run through every later measurement, ours included.
const GIT: &str =
    "git -c user.name=b -c user.email=b@b -c gc.auto=0 -c maintenance.auto=false -c core.fsync=all";
/// git as users run it (but for the background gc, see [`GIT`]).
const GIT_PLAIN: &str =
    "git -c user.name=b -c user.email=b@b -c gc.auto=0 -c maintenance.auto=false";

/// Runs `args` to its end under GNU time and returns its peak RSS (KiB).
/// Not `wait4` on our own child: Linux carries the parent's high-water
/// mark into a child at exec, so that would report the bench's own RSS.
/// `None` without /usr/bin/time.
fn peak_rss_kib(args: &[&std::ffi::OsStr]) -> Result<Option<u64>> {
    let time = Path::new("/usr/bin/time");
    if !time.is_file() {
        return Ok(None);
    }
    let out = Command::new(time)
        .args(["-f", "%M"])
        .args(args)
        .stdout(std::process::Stdio::null())
        .output()
        .map_err(context("run /usr/bin/time"))?;
    if !out.status.success() {
        return Err(format!("{args:?} failed").into());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    Ok(err.lines().last().and_then(|l| l.trim().parse().ok()))
}

/// `stow-s3 workspace watch` over the bench workspace, stopped (SIGTERM,
/// waited for) when dropped.
struct Watcher(std::process::Child);

impl Watcher {
    fn start(bin: &Path, reg: &Registry, ws: &str) -> Result<Watcher> {
        use std::io::BufRead;
        let mut child = Command::new(bin)
            .args(["workspace", "watch", "--id", ws, "--registry-dir"])
            .arg(reg.dir())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .map_err(context("start workspace watch"))?;
        let mut ready = String::new();
        if let Some(out) = child.stdout.take() {
            std::io::BufReader::new(out)
                .read_line(&mut ready)
                .map_err(context("read watch readiness"))?;
        }
        if !ready.contains("\"socket\"") {
            let _ = child.kill();
            return Err(format!("workspace watch did not start: {ready}").into());
        }
        Ok(Watcher(child))
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        // SAFETY: signals our own child, which has not been waited for.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

/// A fresh registry partition holding the bench workspace's record.
pub(crate) fn fresh_registry(base: &Path, name: &str, record: &[u8], ws: &str) -> Result<Registry> {
    let dir = base.join(name);
    fs::create_dir_all(&dir).map_err(context("create registry"))?;
    fs::write(dir.join(format!("{ws}.json")), record).map_err(context("write record"))?;
    Registry::resolve(Some(&dir), None).map_err(|e| e.to_string().into())
}

pub(super) fn one(elapsed: Run) -> Run {
    elapsed
}

/// A run followed by another (a command and the `sync` that makes it
/// durable), as one run.
pub(super) fn then(mut a: Run, b: Run) -> Run {
    a.elapsed_s += b.elapsed_s;
    a.cpu_s = a.cpu_s.zip(b.cpu_s).map(|(x, y)| x + y);
    a
}

/// Times `cmd` as users run it, then the `sync` that makes it durable:
/// returns the plain run and pushes the durable one onto `synced`.
pub(super) fn peer_then_sync(
    cmd: &str,
    top: &Path,
    work: Work,
    synced: &mut Vec<Run>,
) -> Result<Run> {
    let run = time_one_all_cpu(|| {
        sh(cmd, top)?;
        Ok(work)
    })?;
    let sync = time_one_all_cpu(|| {
        sh("sync", top)?;
        Ok(work)
    })?;
    synced.push(then(run, sync));
    Ok(run)
}

/// `cp -a src dst && sync`, timed as one run of `bytes`.
fn cp_a_sync(src: &Path, dst: &Path, top: &Path, bytes: u64) -> Result<Run> {
    time_one_all_cpu(|| {
        sh(
            &format!("cp -a {} {} && sync", src.display(), dst.display()),
            top,
        )?;
        Ok(Work { ops: 1, bytes })
    })
}

/// Flushes what earlier steps left dirty (untimed), so a timed run never
/// pays for another's writeback.
pub(super) fn flush_writeback(top: &Path) -> Result<()> {
    sh("sync", top)
}

/// The tree copies one figure's repetitions made. A large run removes them
/// once the figure is done (the disk holds a few dozen copies at most),
/// then waits for the filesystem to settle as between runs
/// ([`super::settle`]), so whichever side runs next does not pay for the
/// removal.
struct Copies {
    large: bool,
    settle: bool,
    paths: Vec<std::path::PathBuf>,
}

impl Copies {
    fn new(plan: &Plan, args: &SuiteArgs) -> Copies {
        Copies {
            large: plan.large(),
            settle: !args.no_settle,
            paths: Vec::new(),
        }
    }

    fn keep(&mut self, p: std::path::PathBuf) {
        self.paths.push(p);
    }

    fn clear(&mut self, top: &Path) -> Result<()> {
        if !self.large {
            return Ok(());
        }
        for p in self.paths.drain(..) {
            match fs::remove_dir_all(&p) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(format!("remove {}: {e}", p.display()).into())
                }
                _ => {}
            }
        }
        flush_writeback(top)?;
        super::mark_cleanup(top);
        if self.settle {
            super::settle(top);
        }
        Ok(())
    }
}

pub(super) fn file_len(p: &Path) -> u64 {
    fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// The bench tree under `top/tree` and a workspace prepared over a copy
/// of it (registry `top/reg0`): the workspace, the tree's bytes, and its
/// registry record (for fresh registries of the same workspace).
pub(crate) fn bench_workspace(
    plan: &Plan,
    pool: &Pool,
    top: &Path,
) -> Result<(stow_workspace::WorkspaceResult, u64, Vec<u8>)> {
    let tree_bytes = generate(plan, pool, &top.join("tree"))?;
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
    let record = fs::read(top.join("reg0").join(format!("{}.json", ws.workspace_id)))
        .map_err(context("read record"))?;
    Ok((ws, tree_bytes, record))
}

/// Runs the workspace suite. Long because its workloads run in one fixed
/// order on one tree and registry (each commented block builds on the state
/// the one before left), alternating stow-s3 and git per repetition.
pub fn run(args: &SuiteArgs) -> Result<Report> {
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let plan = Plan::new(args.quick, args.files);
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
    let (ws, tree_bytes, record) = bench_workspace(&plan, &pool, &top)?;
    let root = ws.root.clone();
    let opts = CaptureOptions::default();

    // 1. First checkpoint vs cp -a + sync, and vs git add -A && git commit.
    let mut first_ids: Vec<(Registry, String)> = Vec::new();
    let mut copies = Copies::new(&plan, args);
    let [ours, cp] = alternate(plan.copy_reps, |side, rep| {
        flush_writeback(&top)?;
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
            if first_ids.is_empty() {
                first_ids.push((reg, id));
            } else {
                copies.keep(reg.dir().to_path_buf());
            }
            Ok(one(run))
        } else {
            let dst = top.join(format!("cp{rep}"));
            copies.keep(dst.clone());
            cp_a_sync(&root, &dst, &top, tree_bytes)
        }
    })?;
    copies.clear(&top)?;
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
    // git's first commit: as users run it, and with core.fsync=all (slow:
    // one or two repetitions). Each in its own copy of the tree.
    let git_reps = if plan.large() { 1 } else { plan.reps.min(2) };
    let mut git_first = [Vec::new(), Vec::new()];
    for rep in 0..git_reps {
        for (k, git) in [GIT_PLAIN, GIT].into_iter().enumerate() {
            let g = top.join(format!("git{k}-{rep}"));
            sh(&format!("cp -a {} {}", root.display(), g.display()), &top)?;
            sh("git init -q", &g)?;
            flush_writeback(&top)?;
            let sync = if k == 0 { "" } else { " && sync" };
            git_first[k].push(time_one_all_cpu(|| {
                sh(&format!("{git} add -A && {git} commit -qm first{sync}"), &g)?;
                Ok(Work {
                    ops: 1,
                    bytes: tree_bytes,
                })
            })?);
        }
    }
    let [git_plain_first, git_fsync_first] = git_first;
    figures.push(Figure::new(
        Spec {
            id: "first_checkpoint_vs_git_plain",
            title: "first checkpoint vs git add -A && git commit (plain)".into(),
            threads: 1,
            cache: Cache::Write,
            unit: Unit::MsPerOp,
            note: "git as users run it: not fsynced".into(),
        },
        Side::new("stow checkpoint", Unit::MsPerOp, first_ours.clone()),
        Side::new("git add+commit", Unit::MsPerOp, git_plain_first),
    ));
    figures.push(Figure::new(
        Spec {
            id: "first_checkpoint_vs_git",
            title: "first checkpoint vs git add -A && git commit (core.fsync=all)".into(),
            threads: 1,
            cache: Cache::Write,
            unit: Unit::MsPerOp,
            note: "git with core.fsync=all, then sync".into(),
        },
        Side::new("stow checkpoint", Unit::MsPerOp, first_ours),
        Side::new("git add+commit", Unit::MsPerOp, git_fsync_first),
    ));

    // 2. A checkpoint after changing 10 files: in process, through the CLI
    //    (a process per capture) and through a running MCP server (its
    //    watch kept between captures), against git commits of the same
    //    change, plain and durable. Each side changes its own 10 files
    //    first, in turn.
    let (reg, _) = first_ids.first().cloned().ok_or("no first checkpoint")?;
    let bin = super::mcp::server_binary()?;
    // The MCP side has a registry of its own, so the other captures never
    // rewrite the stat cache it keeps.
    let mcp_reg = fresh_registry(&top, "mcp", &record, &ws.workspace_id)?;
    let mut server = super::mcp_workspace_server::serve_bounded(
        &bin,
        mcp_reg.dir(),
        &ws.workspace_id,
        tree_bytes * 2,
        plan.files * 2,
    )?;
    super::mcp_workspace_server::mcp_capture(&mut server, &ws.workspace_id, "first")?;
    let cli_capture = |reg: &Registry| -> Result<Run> {
        time_one_all_cpu(|| {
            let out = Command::new(&bin)
                .args(["workspace", "checkpoint", "--id", &ws.workspace_id])
                .arg("--registry-dir")
                .arg(reg.dir())
                .output()
                .map_err(context("run stow-s3"))?;
            if !out.status.success() {
                return Err(format!(
                    "stow-s3 workspace checkpoint: {}",
                    String::from_utf8_lossy(&out.stdout)
                )
                .into());
            }
            Ok(Work { ops: 1, bytes: 0 })
        })
    };
    // The CLI again, with `workspace watch` running (its own registry too):
    // its first capture scans the tree and leaves the watch.
    let watch_reg = fresh_registry(&top, "watched", &record, &ws.workspace_id)?;
    let watcher = Watcher::start(&bin, &watch_reg, &ws.workspace_id)?;
    cli_capture(&watch_reg)?;
    let g_plain = top.join("git0-0");
    let g_fsync = top.join("git1-0");
    let (mut ours_inc, mut cli_inc, mut mcp_inc) = (Vec::new(), Vec::new(), Vec::new());
    let mut watched_inc = Vec::new();
    let (mut git_inc, mut git_fsync_inc) = (Vec::new(), Vec::new());
    let inc_reps = plan.reps as u64 + 2;
    // The in-process, CLI, watched and MCP sides capture one tree into
    // three registries, so each first catches up (untimed) with the other
    // sides' changes: every timed capture follows exactly its own 10.
    for rep in 0..inc_reps {
        let round = rep * 8;
        checkpoint::capture(&reg, &ws.workspace_id, &opts).map_err(|e| e.to_string())?;
        change_ten(&plan, &pool, &root, round)?;
        ours_inc.push(time_one_all_cpu(|| {
            checkpoint::capture(&reg, &ws.workspace_id, &opts).map_err(|e| e.to_string())?;
            Ok(Work { ops: 1, bytes: 0 })
        })?);
        change_ten(&plan, &pool, &root, round + 1)?;
        cli_inc.push(cli_capture(&reg)?);
        cli_capture(&watch_reg)?;
        change_ten(&plan, &pool, &root, round + 5)?;
        watched_inc.push(cli_capture(&watch_reg)?);
        super::mcp_workspace_server::mcp_capture(
            &mut server,
            &ws.workspace_id,
            &format!("catch-up-{rep}"),
        )?;
        change_ten(&plan, &pool, &root, round + 2)?;
        mcp_inc.push(super::mcp_workspace_server::mcp_capture(
            &mut server,
            &ws.workspace_id,
            &format!("inc-{rep}"),
        )?);
        change_ten(&plan, &pool, &g_plain, round + 3)?;
        git_inc.push(time_one_all_cpu(|| {
            sh(
                &format!("{GIT_PLAIN} add -A && {GIT_PLAIN} commit -qm next"),
                &g_plain,
            )?;
            Ok(Work { ops: 1, bytes: 0 })
        })?);
        change_ten(&plan, &pool, &g_fsync, round + 4)?;
        git_fsync_inc.push(time_one_all_cpu(|| {
            sh(
                &format!("{GIT} add -A && {GIT} commit -qm next && sync"),
                &g_fsync,
            )?;
            Ok(Work { ops: 1, bytes: 0 })
        })?);
    }
    drop(server);
    drop(watcher);
    let targets = if plan.files >= 100_000 {
        "targets: CLI ≤ 0.25× plain git, MCP ≤ 50 ms"
    } else {
        "targets: CLI ≤ 0.5× plain git"
    };
    for (id, title, side, runs) in [
        (
            "checkpoint_10_changed",
            "checkpoint after changing 10 files (in process) vs plain git commit",
            "stow checkpoint",
            ours_inc.clone(),
        ),
        (
            "checkpoint_10_changed_cli",
            "checkpoint after changing 10 files (CLI) vs plain git commit",
            "stow-s3 workspace checkpoint",
            cli_inc.clone(),
        ),
        (
            "checkpoint_10_changed_cli_watched",
            "checkpoint after changing 10 files (CLI, workspace watch running) vs plain git commit",
            "stow-s3 workspace checkpoint (watched)",
            watched_inc.clone(),
        ),
        (
            "checkpoint_10_changed_mcp",
            "checkpoint after changing 10 files (MCP server, watched) vs plain git commit",
            "stow_checkpoint_create",
            mcp_inc.clone(),
        ),
    ] {
        figures.push(Figure::new(
            Spec {
                id,
                title: title.into(),
                threads: 1,
                cache: Cache::Write,
                unit: Unit::MsPerOp,
                note: format!("durable checkpoints; git not fsynced; {targets}"),
            },
            Side::new(side, Unit::MsPerOp, runs),
            Side::new("git add+commit", Unit::MsPerOp, git_inc.clone()),
        ));
    }
    figures.push(Figure::new(
        Spec {
            id: "checkpoint_10_changed_cli_vs_git_fsync",
            title: "checkpoint after changing 10 files (CLI) vs git commit (core.fsync=all)".into(),
            threads: 1,
            cache: Cache::Write,
            unit: Unit::MsPerOp,
            note: "both durable".into(),
        },
        Side::new("stow-s3 workspace checkpoint", Unit::MsPerOp, cli_inc),
        Side::new("git add+commit", Unit::MsPerOp, git_fsync_inc),
    ));

    // Peak RSS of a CLI capture of the whole tree (fresh registry: every
    // payload new), measured on the child alone.
    let rss_reg = fresh_registry(&top, "rss", &record, &ws.workspace_id)?;
    let capture_args = [
        bin.as_os_str(),
        "workspace".as_ref(),
        "checkpoint".as_ref(),
        "--id".as_ref(),
        ws.workspace_id.as_ref(),
        "--registry-dir".as_ref(),
        rss_reg.dir().as_os_str(),
    ];
    for what in ["first", "incremental"] {
        if let Some(kib) = peak_rss_kib(&capture_args)? {
            info.push(Info {
                name: format!(
                    "peak RSS of a {what} CLI capture of the {}-file tree (target ≤ 150 MiB)",
                    plan.files
                ),
                value: kib as f64 / 1024.0,
                unit: "MiB".into(),
            });
        }
    }

    // Prepare (copying the tree in) + sync vs cp -a + sync.
    let [ours_p, cp_p] = alternate(plan.copy_reps, |side, rep| {
        flush_writeback(&top)?;
        if side == 0 {
            let m = top.join(format!("prep{rep}.json"));
            fs::write(
                &m,
                format!(
                    r#"{{"version":1,"root":"prepared{rep}","registry_dir":"prep-reg{rep}","max_bytes":{},"max_objects":{},
                       "inputs":[{{"source":"tree","destination":"."}}]}}"#,
                    tree_bytes * 2,
                    plan.files * 2
                ),
            )
            .map_err(context("write manifest"))?;
            let run = time_one_all_cpu(|| {
                stow_workspace::prepare(&m).map_err(|e| e.to_string())?;
                sh("sync", &top)?;
                Ok(Work {
                    ops: 1,
                    bytes: tree_bytes,
                })
            });
            copies.keep(top.join(format!("prepared{rep}")));
            copies.keep(top.join(format!("prep-reg{rep}")));
            run
        } else {
            let dst = top.join(format!("cp-prep{rep}"));
            copies.keep(dst.clone());
            cp_a_sync(&src, &dst, &top, tree_bytes)
        }
    })?;
    copies.clear(&top)?;
    figures.push(Figure::new(
        Spec {
            id: "prepare_vs_cp",
            title: "prepare (copy the inputs) + sync vs cp -a + sync".into(),
            threads: 1,
            cache: Cache::Write,
            unit: Unit::MsPerOp,
            note: "target ≤ 1.0× cp -a + sync".into(),
        },
        Side::new("stow prepare", Unit::MsPerOp, ours_p),
        Side::new("cp -a && sync", Unit::MsPerOp, cp_p),
    ));

    // 3. Restore vs cp -a + sync.
    let (reg0, cp0) = first_ids.first().cloned().ok_or("no first checkpoint")?;
    let [ours_r, cp_r] = alternate(plan.copy_reps, |side, rep| {
        flush_writeback(&top)?;
        let dst = top.join(format!("restore{side}-{rep}"));
        let run = if side == 0 {
            time_one_all_cpu(|| {
                restore(&reg0, &cp0, &dst, RestoreLimits::default()).map_err(|e| e.to_string())?;
                sh("sync", &top)?;
                Ok(Work {
                    ops: 1,
                    bytes: tree_bytes,
                })
            })
        } else {
            cp_a_sync(&src, &dst, &top, tree_bytes)
        };
        copies.keep(dst);
        run
    })?;
    copies.clear(&top)?;
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

    // 4–6 on the default trees only: on a large one each would copy the
    // whole tree again (this machine's disk holds a few dozen copies), and
    // they do not depend on the tree's size.
    if !plan.large() {
        more_figures(
            &plan,
            &pool,
            &top,
            &src,
            &ws,
            &record,
            tree_bytes,
            &reg0,
            &cp0,
            &mut figures,
            &mut info,
        )?;
    }

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
             each); git runs as users run it (plain) and with core.fsync=all and a final sync"
                .into(),
            "the incremental figures take turns per repetition (in process, CLI, CLI with \
             `workspace watch` running, MCP, git, git fsync), each after changing its own 10 \
             files; the watched CLI and the MCP server have registries of their own and keep \
             their watch between captures; each of our sides first catches up, untimed, with the \
             other sides' changes to the shared tree, so its timed capture follows exactly its 10"
                .into(),
            "first checkpoint, prepare and restore: an untimed sync before every run, so no \
             side pays for another's writeback; on large trees each figure's copies are removed \
             after it, then the suite waits for the filesystem to settle as between runs (ext4 \
             without a journal skips inodes freed in the last 60 s, which slows every create \
             just after a removal)"
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
