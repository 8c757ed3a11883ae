//! A rewind's changes to the live tree, journaled: the plan's steps
//! (`plan`), the staged bytes, the journal in the registry (`journal`),
//! the steps run below the root without following links (`steps`,
//! `beneath`), the bucket view put back (`bucket`), and finishing a
//! journal that a crash left (`finish_locked`, `finish_pending`).
//!
//! `rewind` (the operation: request, undo capture, dry run) builds a plan
//! and hands it here; a capture, a status and a check only finish what a
//! crash interrupted. So this module needs neither of them, and both can
//! call it: no import circle between capture, status and rewind.
//!
//! Crash rule: a kill before the journal is written leaves the tree
//! untouched (a stale stage under `.stow` is removed by the next rewind);
//! after it, every path is as it was or as the target has it (each
//! change is one rename), and whoever next takes the workspace's capture
//! lock finishes the journal by the same steps, a path already in its
//! wanted state counting as done.

mod beneath;
mod bucket;
pub(crate) mod journal;
pub(crate) mod plan;
mod steps;

use serde::{Deserialize, Serialize};

pub use steps::Conflict;

use crate::bucket::WorkspaceBucket;
use crate::diff::{LinkChange, StatusChange};
use crate::error::{Result, WsError};
use crate::fsutil::{create_private_dir, FileLock};
use crate::history;
use crate::layout::{cache_path, state};
use crate::paths::check_workspace_id;
use crate::registry::{Record, Registry};
use crate::statcache::StatCache;
use journal::Journal;
pub(crate) use steps::Applier;

/// What a rewind did (or, with `dry_run`, would do).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RewindResult {
    pub version: u32,
    pub workspace_id: String,
    /// The checkpoint rewound to.
    pub checkpoint_id: String,
    /// The capture taken first; rewinding to it undoes this rewind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo_checkpoint_id: Option<String>,
    /// The workspace's head afterwards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    pub dry_run: bool,
    /// `--paths`, as normalized.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// Files and links written, and files whose mode was set.
    pub written: u64,
    /// Files and links removed (emptied directories go too, uncounted,
    /// as `status` does not list directories).
    pub deleted: u64,
    /// Files already as the checkpoint has them.
    pub unchanged: u64,
    /// Paths left alone because they changed after the undo capture.
    pub conflicts: Vec<Conflict>,
    /// Checkpoint paths the capture rules leave out (ignored, sensitive):
    /// never written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// Dry run: the tree against the checkpoint, as `status` reports it.
    #[serde(default, skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub changes: Option<Vec<StatusChange>>,
    #[serde(default, skip_deserializing, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<LinkChange>,
    /// Answered from a keyed rewind's receipt.
    #[serde(default)]
    pub replayed: bool,
}

impl RewindResult {
    /// The error a rewind with conflicts ends with (its result still
    /// says what it did).
    pub fn error(&self) -> Option<WsError> {
        (!self.conflicts.is_empty()).then(|| {
            WsError::WorkspaceChanged(format!(
                "{} path(s) changed after the rewind's undo checkpoint and were left as they are: {}",
                self.conflicts.len(),
                self.conflicts
                    .iter()
                    .take(5)
                    .map(|c| c.path.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
    }
}

/// Runs a journal's steps with `applier`, then ends the rewind (flush,
/// head, receipt, journal and stage removed).
pub(crate) fn run_journal(
    registry: &Registry,
    root: &std::path::Path,
    j: &Journal,
    mut applier: Applier,
    owned: Option<&WorkspaceBucket>,
) -> Result<RewindResult> {
    // The closing directory modes run after `finish`: a file a writer
    // wrote meanwhile goes back into a read-only directory while it is
    // still open.
    let closing = j
        .steps
        .iter()
        .rev()
        .take_while(|s| matches!(s, plan::Step::DirMode { .. }))
        .count();
    let first_closing = j.steps.len() - closing;
    for (n, step) in j.steps.iter().enumerate().take(first_closing) {
        applier.run(n, step);
        crate::fault::point("rewind.step");
    }
    applier.finish(&j.steps)?;
    for (n, step) in j.steps.iter().enumerate().skip(first_closing) {
        applier.run(n, step);
        crate::fault::point("rewind.step");
    }
    applier.flush_dir_modes(&j.steps[first_closing..])?;
    if let Some(e) = applier.stage_must_stay.take() {
        return Err(e);
    }
    let mut applied = applier.applied;
    if j.bucket {
        let rec = registry.get(&j.workspace_id)?;
        bucket::rewind_bucket(registry, &rec, &j.undo, &j.target, &mut applied, owned)?;
    }
    history::set_head(registry, &j.workspace_id, &j.head)?;
    let result = RewindResult {
        version: 1,
        workspace_id: j.workspace_id.clone(),
        checkpoint_id: j.target.clone(),
        undo_checkpoint_id: Some(j.undo.clone()),
        head: Some(j.head.clone()),
        dry_run: false,
        paths: j.scope.clone(),
        written: applied.written,
        deleted: applied.deleted,
        unchanged: j.unchanged,
        conflicts: applied.conflicts,
        skipped: j.skipped.clone(),
        changes: None,
        links: Vec::new(),
        replayed: false,
    };
    if let Some(key) = &j.key {
        journal::store_receipt(registry, key, &result)?;
    }
    // The stage goes before the journal: no stage outlives its journal
    // (finishing again finds every path done), a power cut included, so
    // its removal is made durable first.
    remove_stages(root);
    crate::fsutil::fsync_dir(&root.join(".stow"))?;
    crate::fault::point("rewind.unstaged");
    journal::remove(registry, &j.workspace_id)?;
    Ok(result)
}

/// `<root>/.stow/rewind`: the stage directories of rewinds.
pub(crate) fn stage_root(rec: &Record) -> std::path::PathBuf {
    rec.dir.join(".stow").join("rewind")
}

/// Removes every stage directory of the workspace at `root` (called
/// under its capture lock once its rewind is done: what is left there
/// belongs to none).
pub(crate) fn remove_stages(root: &std::path::Path) {
    let _ = std::fs::remove_dir_all(root.join(".stow").join("rewind"));
}

/// The workspace's capture lock (refused with `in_progress` when held)
/// and the registry lock.
pub(crate) fn lock(registry: &Registry, ws: &str) -> Result<(FileLock, FileLock)> {
    registry.ensure()?;
    let locks = state(registry).join("capture-locks");
    create_private_dir(&locks)?;
    let capture = FileLock::try_lock(&locks.join(format!("{ws}.lock")))?
        .ok_or_else(|| WsError::InProgress(ws.to_string()))?;
    Ok((capture, registry.lock()?))
}

/// A workspace held still: its capture lock and the registry lock, so no
/// capture, rewind or status runs on it meanwhile. What forgetting a
/// workspace (`workspace detach`) holds.
pub struct HeldWorkspace {
    _capture: FileLock,
    _registry: FileLock,
}

impl HeldWorkspace {
    /// Takes workspace `ws`'s locks (`in_progress` when another process
    /// holds it).
    pub fn take(registry: &Registry, ws: &str) -> Result<HeldWorkspace> {
        check_workspace_id(ws)?;
        let (capture, registry) = lock(registry, ws)?;
        Ok(HeldWorkspace {
            _capture: capture,
            _registry: registry,
        })
    }

    /// Finishes an interrupted rewind of `rec`, if there is one: its
    /// stage holds files moved aside from the tree, which only finishing
    /// the journal puts back or lets go.
    pub fn finish_pending(
        &self,
        registry: &Registry,
        rec: &Record,
    ) -> Result<Option<RewindResult>> {
        finish_locked(registry, rec, None)
    }
}

/// `<root>/.stow/kept`: files written while a rewind replaced them that
/// could not go back to their paths (`steps::Applier::keep`); the
/// workspace's owner decides what to do with them.
pub fn kept_root(root: &std::path::Path) -> std::path::PathBuf {
    root.join(".stow").join("kept")
}

/// Finishes an interrupted rewind of `rec`, the caller holding the
/// workspace's capture lock and the registry lock (and, in a process that
/// owns the bucket view, passing it in `owned`). Nothing to do (the
/// common case) costs one `stat`.
pub(crate) fn finish_locked(
    registry: &Registry,
    rec: &Record,
    owned: Option<&WorkspaceBucket>,
) -> Result<Option<RewindResult>> {
    let Some(j) = journal::read(registry, &rec.id)? else {
        return Ok(None);
    };
    let stage = stage_root(rec).join(&j.run);
    create_private_dir(&stage_root(rec))?;
    create_private_dir(&stage)?;
    let cache = StatCache::load(&cache_path(registry, &rec.id));
    let applier = Applier::new(registry, &rec.dir, &stage, cache, true)?;
    tracing::info!(workspace = %rec.id, target = %j.target, "finishing an interrupted rewind");
    let _s3_writes = owned.map(WorkspaceBucket::hold_s3_writes);
    run_journal(registry, &rec.dir, &j, applier, owned).map(Some)
}

/// Finishes an interrupted rewind of workspace `ws`, if there is one
/// (`status` and `check` call this; a capture and a rewind do it under
/// their own locks). `in_progress` when another process holds the
/// workspace.
pub fn finish_pending(registry: &Registry, ws: &str) -> Result<Option<RewindResult>> {
    finish_pending_in(registry, ws, None)
}

/// [`finish_pending`] in a process that may own the workspace's bucket
/// view (`owned`).
pub(crate) fn finish_pending_in(
    registry: &Registry,
    ws: &str,
    owned: Option<&WorkspaceBucket>,
) -> Result<Option<RewindResult>> {
    check_workspace_id(ws)?;
    if !journal::exists(registry, ws) {
        return Ok(None);
    }
    let rec = registry.get(ws)?;
    let _locks = lock(registry, ws)?;
    finish_locked(registry, &rec, owned)
}

/// Finishes every interrupted rewind of the partition (`workspace
/// check`): each workspace with a journal, and how finishing it went.
pub fn finish_all_pending(registry: &Registry) -> Result<Vec<(String, Result<()>)>> {
    Ok(journal::pending(registry)?
        .into_iter()
        .map(|ws| {
            let done = finish_pending(registry, &ws).map(|_| ());
            (ws, done)
        })
        .collect())
}

/// Forgets a removed workspace's rewind journal.
pub(crate) fn forget(registry: &Registry, ws: &str) {
    journal::forget(registry, ws);
}
