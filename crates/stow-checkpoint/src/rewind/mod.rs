//! Rewind: the live tree of a workspace put back to one of its
//! checkpoints, in place, undoably, without losing a concurrent write.
//!
//! 1. Under the workspace's capture lock and the registry lock, a rewind
//!    interrupted earlier is finished first (`finish_pending`).
//! 2. The tree is captured (`origin: rewind`): the **undo checkpoint**,
//!    published durably before anything changes (a clean tree reuses its
//!    head instead). `rewind --to <undo>` undoes the rewind.
//! 3. The plan (`apply::plan`) is computed from the undo checkpoint and
//!    the target: only what differs, within the capture rules and
//!    `--paths`.
//! 4. New bytes are staged under `<root>/.stow/rewind/<run>/`, fsynced.
//! 5. The journal is written to the registry (`apply::journal`).
//! 6. The steps run (`apply`), each checking its path against the undo
//!    checkpoint first; a path written since is a conflict, left alone.
//! 7. The touched directories are flushed, the head moves to the target
//!    (a `--paths` rewind leaves it on the undo checkpoint), a keyed
//!    rewind's receipt is stored, and the journal and stage are removed.
//!
//! Steps 3 to 7 and the crash rule are `crate::apply`'s: this module is
//! the operation around them (the request, the undo capture, the dry
//! run), the one part that needs `capture` and `status`.

pub use crate::apply::{
    finish_all_pending, finish_pending, kept_root, Conflict, HeldWorkspace, RewindResult,
};

use crate::apply::journal::{self, Journal, KeyDigests};
use crate::apply::plan::{self, check_scope, Domain};
use crate::apply::{finish_locked, lock, remove_stages, run_journal, stage_root, Applier};
use crate::bucket::WorkspaceBucket;
use crate::capture::{capture_locked, CaptureOptions, CaptureSpec};
use crate::diff::{Kind, LinkChange, StatusChange};
use crate::error::{Result, WsError};
use crate::format::{check_belongs, check_message, Origin};
use crate::format::{load_summary, CheckpointManifest};
use crate::fsutil::{create_private_dir, hex, random_hex};
use crate::history;
use crate::ignorefile::Rules;
use crate::layout::cache_path;
use crate::monitor::TreeMonitor;
use crate::paths::{check_checkpoint_id, check_workspace_id};
use crate::progress::{PhaseClock, Progress};
use crate::registry::{Record, Registry};
use crate::statcache::StatCache;
use crate::stored::load_manifest;
use sha2::{Digest, Sha256};

/// Up to this many bytes of files to check against the undo capture,
/// hashing them costs less than reading the stat cache (about 50 ms for
/// 100,000 files), so a small rewind of a large tree skips it.
const CHECK_BY_HASH_BYTES: u64 = 16 << 20;

/// One rewind, as every caller states it.
#[derive(Default)]
pub struct RewindRequest<'a> {
    pub workspace_id: &'a str,
    /// The checkpoint to rewind to (one of the workspace's own).
    pub to: &'a str,
    /// Only these files or directories (empty: the whole tree).
    pub paths: Vec<String>,
    /// Only report the plan; change nothing.
    pub dry_run: bool,
    /// Rewind sensitive-looking paths too (`.env`, keys; the checkpoint
    /// must have been taken with them). Without it they are never touched.
    pub include_sensitive: bool,
    /// The undo checkpoint's message (default "before rewind to CP").
    pub message: Option<String>,
    /// A caller's key: the same key with the same inputs answers the first
    /// rewind's result again instead of rewinding twice.
    pub request_key: Option<&'a str>,
    /// Receives bytes staged so far.
    pub progress: Option<&'a dyn Progress>,
    /// A long-lived server's watch over this workspace (the undo capture
    /// reads only what changed).
    pub monitor: Option<&'a TreeMonitor>,
}

/// Rewinds workspace `req.workspace_id` to checkpoint `req.to`.
pub fn rewind(registry: &Registry, req: &RewindRequest) -> Result<RewindResult> {
    let ws = req.workspace_id;
    let scope = check_request(req)?;
    let rec = registry.get(ws)?;
    if req.dry_run {
        // Refused as the rewind itself would be: a plan of a typo is no plan.
        check_belongs(registry, req.to, ws)?;
        check_scope_names_something(registry, &rec, req.to, &scope)?;
        return dry_run(registry, &rec, req.to, scope);
    }
    let include_sensitive = req.include_sensitive;
    let mut clock = PhaseClock::start("rewind");
    let _locks = lock(registry, ws)?;
    let owned = req.monitor.and_then(TreeMonitor::view);
    finish_locked(registry, &rec, owned)?;
    // In the process that serves the workspace over S3, its S3 writes wait
    // until the rewind is done (they land after it, never part way).
    let _s3_writes = owned.map(WorkspaceBucket::hold_s3_writes);
    // A rewind killed before its journal left at most a stage.
    remove_stages(&rec.dir);
    let key = req.request_key.map(|k| key_digests(ws, k, req, &scope));
    if let Some(key) = &key {
        if let Some(mut done) = journal::replay(registry, key)? {
            done.replayed = true;
            return Ok(done);
        }
    }
    check_belongs(registry, req.to, ws)?;
    // A portable target holds the bucket view too: the undo capture then
    // holds it as well (uncapped, like the tree), and the view is rewound.
    let portable = manifest_version(registry, req.to)? == 2;
    if !rec.dir.is_dir() {
        return Err(WsError::NotFound(format!(
            "workspace directory {}",
            rec.dir.display()
        )));
    }
    check_scope_names_something(registry, &rec, req.to, &scope)?;
    let undo = undo_capture(registry, &rec, req, portable)?;
    clock.lap("undo capture");
    let undo_id = undo.checkpoint_id;
    let pair = compared(registry, &undo_id, req.to, scope.is_empty())?;
    let rules = crate::ignorefile::load(&rec.dir, rec.gitignore)?;
    let mut plan = plan::build(
        &pair.was,
        &pair.want,
        &scope,
        &Domain {
            rules: rules.as_ref(),
            include_sensitive,
        },
    );
    plan.unchanged += pair.unentered_files;
    if let Some(rules) = target_rules(registry, &rec, &pair.want)? {
        plan::keep_target_ignored(&mut plan, &rules);
    }
    clock.lap("plan");
    let run = random_hex(8);
    let stage = stage_root(&rec).join(&run);
    create_private_dir(&stage_root(&rec))?;
    create_private_dir(&stage)?;
    let cache = if plan::bytes_to_check(&plan.steps) > CHECK_BY_HASH_BYTES {
        StatCache::load(&cache_path(registry, ws))
    } else {
        StatCache::default()
    };
    let applier = match Applier::new(registry, &rec.dir, &stage, cache, false) {
        Ok(a) => a,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&stage);
            return Err(e);
        }
    };
    clock.lap("stat cache");
    if let Err(e) = applier.stage_all(&plan.steps, req.progress) {
        let _ = std::fs::remove_dir_all(&stage);
        return Err(e);
    }
    clock.lap("stage");
    let j = Journal {
        version: 1,
        workspace_id: ws.to_string(),
        run,
        target: req.to.to_string(),
        undo: undo_id.clone(),
        head: if scope.is_empty() {
            req.to.to_string()
        } else {
            undo_id
        },
        scope,
        unchanged: plan.unchanged,
        skipped: plan.skipped,
        key,
        bucket: portable,
        steps: plan.steps,
    };
    if let Err(e) = journal::write(registry, &j) {
        let _ = std::fs::remove_dir_all(&stage);
        return Err(e);
    }
    clock.lap("journal");
    crate::fault::point("rewind.journaled");
    let done = run_journal(registry, &rec.dir, &j, applier, owned);
    clock.lap("apply");
    done.map_err(|e| {
        // Past the journal the rewind is part way: whoever next takes the
        // workspace finishes it.
        WsError::OutcomeUnknown(format!(
            "the rewind stopped part way ({e}); the next rewind, capture or status of \
             workspace {ws} finishes it"
        ))
    })
}

/// The digests of key `key` for workspace `ws` with the inputs of
/// `req` (its paths as normalized: `scope`).
fn key_digests(ws: &str, key: &str, req: &RewindRequest, scope: &[String]) -> KeyDigests {
    let digest = |parts: &[&str]| {
        let mut h = Sha256::new();
        for p in parts {
            h.update(p.as_bytes());
            h.update([0u8]);
        }
        hex(&h.finalize())
    };
    let sensitive = if req.include_sensitive {
        "sensitive"
    } else {
        ""
    };
    let mut inputs = vec![
        "stow-rewind-inputs",
        req.to,
        req.message.as_deref().unwrap_or("\u{1}none"),
        sensitive,
    ];
    inputs.extend(scope.iter().map(String::as_str));
    KeyDigests {
        request_digest: digest(&["stow-rewind-key", ws, key]),
        inputs_digest: digest(&inputs),
    }
}

/// Checks a rewind request's arguments; returns its scope (`--paths`,
/// normalized; empty for the whole tree).
fn check_request(req: &RewindRequest) -> Result<Vec<String>> {
    check_workspace_id(req.workspace_id)?;
    check_checkpoint_id(req.to)?;
    if let Some(m) = &req.message {
        check_message(m)?;
    }
    let scope = check_scope(&req.paths)?;
    if let Some(k) = req.request_key {
        crate::keyed::check_request_key(k)?;
    }
    Ok(scope)
}

/// The capture a rewind takes first, so it can be undone (`origin:
/// rewind`, "before rewind to CP" unless the request has a message); a
/// portable target's undo holds the bucket view too, uncapped like the
/// tree. A clean tree's undo is its head, unless a message asks for a
/// checkpoint of its own.
fn undo_capture(
    registry: &Registry,
    rec: &Record,
    req: &RewindRequest,
    portable: bool,
) -> Result<crate::CheckpointResult> {
    let head = history::head(registry, &rec.id)?;
    capture_locked(
        registry,
        rec,
        &format!("cp_{}", random_hex(12)),
        &CaptureOptions {
            spec: CaptureSpec {
                include_sensitive: req.include_sensitive,
                portable,
                max_bytes: if portable { u64::MAX } else { 0 },
                max_files: if portable { u64::MAX } else { 0 },
                message: Some(
                    req.message
                        .clone()
                        .unwrap_or_else(|| format!("before rewind to {}", req.to)),
                ),
                ..Default::default()
            },
            origin: Some(Origin::Rewind),
            same_as: head.filter(|_| req.message.is_none()),
            monitor: req.monitor,
            progress: req.progress,
            ..Default::default()
        },
        None,
    )
}

/// The ignore rules the target was captured under: its own root
/// `.stowignore` and (attached workspaces) every `.gitignore` it holds,
/// with the repository's exclude file as it is now. (`want` may be
/// expanded only where it differs from the undo capture; the directories
/// above a differing one differ too, so every `.gitignore` that rules a
/// planned path is there.)
fn target_rules(
    registry: &Registry,
    rec: &Record,
    want: &CheckpointManifest,
) -> Result<Option<Rules>> {
    use crate::ignorefile::{GIT_IGNORE_FILE, IGNORE_FILE};
    let mut git = std::collections::HashMap::new();
    let mut stow = None;
    for f in &want.files {
        let (dir, name) = f.path.rsplit_once('/').unwrap_or(("", f.path.as_str()));
        if rec.gitignore && name == GIT_IGNORE_FILE {
            git.insert(dir.to_string(), crate::blobs::read_blob(registry, f)?);
        } else if f.path == IGNORE_FILE {
            stow = Some(crate::blobs::read_blob(registry, f)?);
        }
    }
    crate::ignorefile::from_contents(&rec.dir, rec.gitignore, &git, stow.as_deref())
}

/// A published checkpoint's manifest version (2: portable).
fn manifest_version(registry: &Registry, id: &str) -> Result<u32> {
    Ok(crate::stored::layout(registry, id)?.0)
}

/// What a plan compares: the undo checkpoint's entries and the target's.
struct Compared {
    was: CheckpointManifest,
    want: CheckpointManifest,
    /// The target's files in directories not entered (the same in both).
    unentered_files: u64,
}

/// The entries of checkpoints `undo` and `target` a plan needs. Two tree
/// manifests compared whole are expanded only below directories whose
/// nodes differ (an identical directory is listed, not entered): the cost
/// follows the change. A flat manifest, or a rewind of some paths, loads
/// both whole.
fn compared(registry: &Registry, undo: &str, target: &str, whole: bool) -> Result<Compared> {
    let roots = (
        crate::stored::layout(registry, undo)?.1,
        crate::stored::layout(registry, target)?.1,
    );
    let (Some(a), Some(b), true) = (roots.0, roots.1, whole) else {
        return Ok(Compared {
            was: load_manifest(registry, undo)?,
            want: load_manifest(registry, target)?,
            unentered_files: 0,
        });
    };
    let (was, want) = crate::tree::expand_differing(registry, &a, &b)?;
    let total = load_summary(registry, target)?.files;
    let unentered_files = total.saturating_sub(want.files.len() as u64);
    let manifest = |id: &str, e: crate::tree::Expanded| CheckpointManifest {
        version: 1,
        id: id.to_string(),
        workspace_id: String::new(),
        parent_id: None,
        created: String::new(),
        files: e.files,
        excluded: Vec::new(),
        primary_bucket: None,
        buckets: Vec::new(),
        objects: Vec::new(),
        dirs: e.dirs,
        links: e.links,
        skipped: e.skipped,
        ignored: None,
        message: None,
    };
    Ok(Compared {
        was: manifest(undo, was),
        want: manifest(target, want),
        unentered_files,
    })
}

/// Refuses a scope path that names nothing in the tree or in the target
/// (a typo would otherwise move the head to an undo checkpoint and change
/// nothing).
fn check_scope_names_something(
    registry: &Registry,
    rec: &Record,
    to: &str,
    scope: &[String],
) -> Result<()> {
    let absent: Vec<&String> = scope
        .iter()
        .filter(|p| std::fs::symlink_metadata(rec.dir.join(p)).is_err())
        .collect();
    if absent.is_empty() {
        return Ok(());
    }
    let m = load_manifest(registry, to)?;
    let within = |path: &str, p: &str| {
        path == p || (path.starts_with(p) && path.as_bytes().get(p.len()) == Some(&b'/'))
    };
    let names = |p: &str| {
        m.files.iter().any(|f| within(&f.path, p))
            || m.links.iter().any(|l| within(&l.path, p))
            || m.dirs.iter().any(|d| within(&d.path, p))
    };
    match absent.into_iter().find(|p| !names(p)) {
        Some(p) => Err(WsError::InvalidRequest(format!(
            "--paths {p}: nothing there in the tree or in checkpoint {to}"
        ))),
        None => Ok(()),
    }
}

/// The plan of a rewind as `status` reports the tree against the target,
/// restricted to `scope`; nothing changes.
fn dry_run(
    registry: &Registry,
    rec: &Record,
    to: &str,
    scope: Vec<String>,
) -> Result<RewindResult> {
    let s = crate::status::status(registry, &rec.id, Some(to))?;
    let in_scope = |p: &str| {
        scope.is_empty()
            || scope.iter().any(|s| {
                p == s || (p.starts_with(s.as_str()) && p.as_bytes().get(s.len()) == Some(&b'/'))
            })
    };
    let changes: Vec<StatusChange> = s
        .changes
        .into_iter()
        .filter(|c| in_scope(&c.path))
        .collect();
    let links: Vec<LinkChange> = s.links.into_iter().filter(|l| in_scope(&l.path)).collect();
    // Status compares checkpoint → tree: what the tree added, the rewind
    // deletes; everything else it writes.
    let file_writes = changes
        .iter()
        .filter(|c| c.diff_kind() != Kind::Added)
        .count();
    // A path the tree holds as a file where the checkpoint has a link (or
    // the other way round) is replaced in one step, not deleted.
    let gone = |kind: Kind| -> std::collections::HashSet<&str> {
        links
            .iter()
            .filter(|l| l.kind == kind)
            .map(|l| l.path.as_str())
            .collect()
    };
    let links_deleted = gone(Kind::Deleted);
    let files_deleted: std::collections::HashSet<&str> = changes
        .iter()
        .filter(|c| c.diff_kind() == Kind::Deleted)
        .map(|c| c.path.as_str())
        .collect();
    let deleted = changes
        .iter()
        .filter(|c| c.diff_kind() == Kind::Added && !links_deleted.contains(c.path.as_str()))
        .count()
        + links
            .iter()
            .filter(|l| l.kind == Kind::Added && !files_deleted.contains(l.path.as_str()))
            .count();
    let written = file_writes + links.iter().filter(|l| l.kind != Kind::Added).count();
    let target = load_manifest(registry, to)?;
    let in_target = target.files.iter().filter(|f| in_scope(&f.path)).count();
    Ok(RewindResult {
        version: 1,
        workspace_id: rec.id.clone(),
        checkpoint_id: to.to_string(),
        undo_checkpoint_id: None,
        head: history::head(registry, &rec.id)?,
        dry_run: true,
        paths: scope,
        written: written as u64,
        deleted: deleted as u64,
        unchanged: in_target.saturating_sub(file_writes) as u64,
        conflicts: Vec::new(),
        skipped: Vec::new(),
        changes: Some(changes),
        links,
        replayed: false,
    })
}
