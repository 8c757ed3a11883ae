//! The workspace suite's transfer figures (export, preview, import +
//! adopt against tar), disk growth over 10 checkpoints, and a delta of 10
//! changed files: run on the default trees only.

use std::fs;
use std::path::Path;
use std::time::Instant;

use stow_checkpoint::archive::{self, ArchiveLimits, ExportOptions};
use stow_checkpoint::delta::{self, DeltaOptions};
use stow_checkpoint::Registry;
use stow_checkpoint::{self as checkpoint, CaptureOptions};

use super::{change_ten, file_len, fresh_registry, peer_then_sync, sh, then, Plan};
use crate::data::Pool;
use crate::harness::{
    alternate, context, time_one_all_cpu, Cache, Figure, Result, Side, Spec, Unit, Work,
};
use crate::report::Info;

/// Disk growth over 10 checkpoints, the transfer figures and a delta.
#[allow(clippy::too_many_arguments)]
pub(super) fn more_figures(
    plan: &Plan,
    pool: &Pool,
    top: &Path,
    src: &Path,
    ws: &stow_workspace::WorkspaceResult,
    record: &[u8],
    tree_bytes: u64,
    reg0: &Registry,
    cp0: &str,
    figures: &mut Vec<Figure>,
    info: &mut Vec<Info>,
) -> Result<()> {
    let root = ws.root.clone();
    let opts = CaptureOptions::default();
    // 4. Disk growth: 10 checkpoints each changing 10 files.
    let reg10 = fresh_registry(top, "ten", record, &ws.workspace_id)?;
    for round in 0..10u64 {
        if round > 0 {
            change_ten(plan, pool, &root, 100 + round)?;
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

    // 5. Transfer: export / preview / import + adopt against tar, on the
    //    first checkpoint of the whole tree.
    transfer(plan, top, src, reg0, cp0, tree_bytes, figures, info)?;

    // 6. A delta of 10 changed files, and applying it.
    let c_a = checkpoint::capture(&reg10, &ws.workspace_id, &opts).map_err(|e| e.to_string())?;
    change_ten(plan, pool, &root, 300)?;
    let c_b = checkpoint::capture(&reg10, &ws.workspace_id, &opts).map_err(|e| e.to_string())?;
    let (mut delta_ms, mut apply_ms, mut doc_bytes) = (Vec::new(), Vec::new(), 0);
    for rep in 0..plan.reps {
        let doc = top.join(format!("delta{rep}.json"));
        let t = Instant::now();
        let d = delta::delta(
            &reg10,
            &c_a.checkpoint_id,
            &c_b.checkpoint_id,
            &doc,
            DeltaOptions::default(),
        )
        .map_err(|e| e.to_string())?;
        delta_ms.push(t.elapsed().as_secs_f64() * 1e3);
        doc_bytes = file_len(&d.document);
        let t = Instant::now();
        delta::apply(&reg10, &doc, &c_a.checkpoint_id, &Default::default())
            .map_err(|e| e.to_string())?;
        apply_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    info.push(Info {
        name: "delta of 10 changed files: document size".into(),
        value: doc_bytes as f64,
        unit: "bytes".into(),
    });
    info.push(Info {
        name: format!(
            "delta of 10 changed files: create, median of {} [{:.1}–{:.1}]",
            plan.reps,
            delta_ms.iter().copied().fold(f64::MAX, f64::min),
            delta_ms.iter().copied().fold(0.0, f64::max)
        ),
        value: median(&mut delta_ms),
        unit: "ms".into(),
    });
    info.push(Info {
        name: format!(
            "delta of 10 changed files: apply (new durable checkpoint), median of {} [{:.1}–{:.1}]",
            plan.reps,
            apply_ms.iter().copied().fold(f64::MAX, f64::min),
            apply_ms.iter().copied().fold(0.0, f64::max)
        ),
        value: median(&mut apply_ms),
        unit: "ms".into(),
    });

    Ok(())
}

/// Export, preview and import + adopt of checkpoint `cp` of `reg` next to
/// `tar czf`, `tar tzf` and `tar xzf` of the same tree; a delta of 10
/// changed files. Long because the five comparisons run on the same
/// checkpoint and tree in one alternating loop.
#[allow(clippy::too_many_arguments)]
fn transfer(
    plan: &Plan,
    top: &Path,
    src: &Path,
    reg: &Registry,
    cp: &str,
    tree_bytes: u64,
    figures: &mut Vec<Figure>,
    info: &mut Vec<Info>,
) -> Result<()> {
    let limits = ArchiveLimits {
        max_bytes: tree_bytes * 2,
        max_files: plan.files * 2,
    };
    let work = || Work {
        ops: 1,
        bytes: tree_bytes,
    };
    // Export vs tar czf (and tar czf + sync: ours is fsynced).
    let mut tar_sync = Vec::new();
    let [ours_x, tar_x] = alternate(plan.reps, |side, rep| {
        if side == 0 {
            let out = top.join(format!("export{rep}.tar.gz"));
            let opts = ExportOptions {
                limits,
                ..Default::default()
            };
            time_one_all_cpu(|| {
                archive::export(reg, cp, &out, &opts).map_err(|e| e.to_string())?;
                Ok(work())
            })
        } else {
            let out = top.join(format!("tar{rep}.tgz"));
            let cmd = format!("tar czf {} -C {} .", out.display(), src.display());
            peer_then_sync(&cmd, top, work(), &mut tar_sync)
        }
    })?;
    let ours_size = file_len(&top.join("export0.tar.gz"));
    let tar_size = file_len(&top.join("tar0.tgz"));
    figures.push(Figure::new(
        Spec {
            id: "export_vs_tar_czf",
            title: "export vs tar czf".into(),
            threads: 1,
            cache: Cache::Write,
            unit: Unit::MsPerOp,
            note: "ours verifies every payload and fsyncs the archive; target ≤ 0.35×".into(),
        },
        Side::new("stow export", Unit::MsPerOp, ours_x.clone()),
        Side::new("tar czf", Unit::MsPerOp, tar_x),
    ));
    figures.push(Figure::new(
        Spec {
            id: "export_vs_tar_czf_sync",
            title: "export vs tar czf + sync".into(),
            threads: 1,
            cache: Cache::Write,
            unit: Unit::MsPerOp,
            note: "the peer made durable like ours".into(),
        },
        Side::new("stow export", Unit::MsPerOp, ours_x),
        Side::new("tar czf && sync", Unit::MsPerOp, tar_sync),
    ));
    info.push(Info {
        name: format!("archive size: ours {ours_size} B / tar czf {tar_size} B (random payloads)"),
        value: ours_size as f64 / tar_size.max(1) as f64,
        unit: "ratio".into(),
    });

    // Preview vs tar tzf (each lists its own archive).
    let ours_a = top.join("export0.tar.gz");
    let tar_a = top.join("tar0.tgz");
    let [ours_p, tar_p] = alternate(plan.reps, |side, _| {
        if side == 0 {
            time_one_all_cpu(|| {
                archive::preview(&ours_a, limits).map_err(|e| e.to_string())?;
                Ok(work())
            })
        } else {
            time_one_all_cpu(|| {
                sh(&format!("tar tzf {} > /dev/null", tar_a.display()), top)?;
                Ok(work())
            })
        }
    })?;
    figures.push(Figure::new(
        Spec {
            id: "preview_vs_tar_tzf",
            title: "preview vs tar tzf".into(),
            threads: 1,
            cache: Cache::Warm,
            unit: Unit::MsPerOp,
            note: "ours checks every payload's size and SHA-256; target ≤ 1.0×".into(),
        },
        Side::new("stow preview", Unit::MsPerOp, ours_p),
        Side::new("tar tzf", Unit::MsPerOp, tar_p),
    ));

    // Import + adopt on a fresh registry vs tar xzf (and + sync).
    let handoff = top.join("handoff.json");
    stow_workspace::handoff::handoff(
        reg,
        &checkpoint::summaries(reg)
            .map_err(|e| e.to_string())?
            .iter()
            .find(|s| s.id == cp)
            .map(|s| s.workspace_id.clone())
            .ok_or("no workspace")?,
        Some(cp),
        Some(&top.join("handoff.tar.gz")),
        Some(&handoff),
    )
    .map_err(|e| e.to_string())?;
    let mut xsync = Vec::new();
    let [ours_i, tar_i] = alternate(plan.reps, |side, rep| {
        if side == 0 {
            let base = top.join(format!("adopt-reg{rep}"));
            let root = top.join(format!("adopted{rep}"));
            let opts = stow_workspace::handoff::AdoptOptions {
                limits,
                ..Default::default()
            };
            time_one_all_cpu(|| {
                stow_workspace::handoff::adopt(Some(&base), None, &handoff, &root, &opts)
                    .map_err(|e| e.to_string())?;
                Ok(work())
            })
        } else {
            let dst = top.join(format!("untar{rep}"));
            fs::create_dir_all(&dst).map_err(context("create untar dir"))?;
            let run = time_one_all_cpu(|| {
                sh(
                    &format!("tar xzf {} -C {}", tar_a.display(), dst.display()),
                    top,
                )?;
                Ok(work())
            })?;
            let sync = time_one_all_cpu(|| {
                sh("sync", top)?;
                Ok(work())
            })?;
            xsync.push(then(run, sync));
            Ok(run)
        }
    })?;
    figures.push(Figure::new(
        Spec {
            id: "import_adopt_vs_tar_xzf",
            title: "import + adopt vs tar xzf".into(),
            threads: 1,
            cache: Cache::Write,
            unit: Unit::MsPerOp,
            note:
                "ours: digest check, import (durable blobs), restore into a new root; target ≤ 1.5×"
                    .into(),
        },
        Side::new("stow adopt", Unit::MsPerOp, ours_i.clone()),
        Side::new("tar xzf", Unit::MsPerOp, tar_i),
    ));
    figures.push(Figure::new(
        Spec {
            id: "import_adopt_vs_tar_xzf_sync",
            title: "import + adopt vs tar xzf + sync".into(),
            threads: 1,
            cache: Cache::Write,
            unit: Unit::MsPerOp,
            note: "the peer made durable".into(),
        },
        Side::new("stow adopt", Unit::MsPerOp, ours_i),
        Side::new("tar xzf && sync", Unit::MsPerOp, xsync),
    ));
    // Every byte and mode equal after the round trip (checked once).
    sh(
        &format!(
            "diff -r {} {} > /dev/null",
            src.display(),
            top.join("untar0").display()
        ),
        top,
    )?;
    same_tree(src, &top.join("adopted0"))
}

/// Refuses unless `b` holds exactly `a`'s files (bytes and modes), `.stow`
/// aside.
fn same_tree(a: &Path, b: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fn walk(root: &Path, d: &Path, out: &mut Vec<(String, u32, Vec<u8>)>) -> Result<()> {
        for e in fs::read_dir(d).map_err(context("read tree"))? {
            let e = e.map_err(context("read tree"))?;
            let p = e.path();
            let rel = p.strip_prefix(root).map_err(|e| e.to_string())?;
            if rel == Path::new(".stow") {
                continue;
            }
            let meta = fs::symlink_metadata(&p).map_err(context("stat"))?;
            if meta.is_dir() {
                walk(root, &p, out)?;
            } else {
                let bytes = fs::read(&p).map_err(context("read"))?;
                out.push((
                    rel.display().to_string(),
                    meta.permissions().mode() & 0o777,
                    bytes,
                ));
            }
        }
        Ok(())
    }
    let (mut x, mut y) = (Vec::new(), Vec::new());
    walk(a, a, &mut x)?;
    walk(b, b, &mut y)?;
    x.sort();
    y.sort();
    if x != y {
        return Err(format!("{} and {} differ", a.display(), b.display()).into());
    }
    Ok(())
}
