//! Deleting checkpoints: one (refused while another names it as parent)
//! or all of a workspace's, each followed by garbage collection.

use std::fs;

use serde::Serialize;

use crate::error::{Result, WsError};
use crate::format::summaries;
use crate::fsutil::{fsync_dir, random_hex};
use crate::gc::gc_locked;
use crate::layout::{cache_path, checkpoints_dir, legacy_cache_path, state};
use crate::paths::check_checkpoint_id;
use crate::registry::Registry;

/// The result of `checkpoint-delete`.
#[derive(Debug, Clone, Serialize)]
pub struct DeleteResult {
    pub version: u32,
    pub checkpoint_id: String,
    pub deleted: bool,
    /// Blobs no retained checkpoint needed any more.
    pub freed_blobs: u64,
    pub freed_bytes: u64,
}

/// Deletes a checkpoint (refused while another of its workspace names it
/// as parent) and collects blobs no retained checkpoint needs. A child of
/// another workspace does not keep it: an archive or a remote could
/// otherwise pin any checkpoint whose ID it knows.
pub fn delete(registry: &Registry, id: &str) -> Result<DeleteResult> {
    check_checkpoint_id(id)?;
    let _lock = registry.lock()?;
    if !checkpoints_dir(registry).join(id).is_dir() {
        return Err(WsError::NotFound(format!("checkpoint {id}")));
    }
    let all = summaries(registry)?;
    let own = all
        .iter()
        .find(|s| s.id == id)
        .map(|s| s.workspace_id.clone());
    for s in all {
        let same_workspace = own.as_ref().is_none_or(|w| *w == s.workspace_id);
        if s.parent_id.as_deref() == Some(id) && same_workspace {
            return Err(WsError::Refused(format!(
                "checkpoint {} names {id} as its parent; delete it first",
                s.id
            )));
        }
    }
    remove_checkpoint_dir(registry, id)?;
    let (freed_blobs, freed_bytes) = gc_locked(registry)?;
    Ok(DeleteResult {
        version: 1,
        checkpoint_id: id.to_string(),
        deleted: true,
        freed_blobs,
        freed_bytes,
    })
}

/// Unpublishes atomically (rename to a dot name listing ignores), then
/// removes the directory.
pub(super) fn remove_checkpoint_dir(registry: &Registry, id: &str) -> Result<()> {
    let dir = checkpoints_dir(registry);
    let src = dir.join(id);
    let trash = dir.join(format!(".deleted-{}", random_hex(8)));
    fs::rename(&src, &trash).map_err(|e| WsError::io_at("unpublish", &src, e))?;
    fsync_dir(&dir)?;
    fs::remove_dir_all(&trash).map_err(|e| WsError::io_at("remove", &trash, e))
}

/// Deletes every checkpoint of a workspace and collects blobs, but for
/// those another workspace of the registry has as its head (one adopted
/// from this workspace's handoff shares its checkpoint): they stay for it.
/// Caller holds the registry lock.
pub fn delete_workspace_checkpoints(registry: &Registry, ws: &str) -> Result<()> {
    if !checkpoints_dir(registry).exists() {
        return Ok(());
    }
    let mut others_heads = std::collections::HashSet::new();
    for rec in registry.records()? {
        if rec.id != ws {
            if let Ok(Some(h)) = crate::history::head(registry, &rec.id) {
                others_heads.insert(h);
            }
        }
    }
    let mut any = false;
    for s in summaries(registry)? {
        if s.workspace_id == ws && !others_heads.contains(&s.id) {
            remove_checkpoint_dir(registry, &s.id)?;
            any = true;
        }
    }
    crate::history::forget(registry, ws);
    crate::apply::forget(registry, ws);
    let _ = fs::remove_file(cache_path(registry, ws));
    let _ = fs::remove_file(legacy_cache_path(registry, ws));
    let _ = fs::remove_file(
        state(registry)
            .join("capture-locks")
            .join(format!("{ws}.lock")),
    );
    if any {
        gc_locked(registry)?;
    }
    Ok(())
}
