//! `workspace status`: the live tree against a checkpoint (by default the
//! workspace's head), as the changes `diff` would report between that
//! checkpoint and a capture taken now. Changes nothing in the registry.
//!
//! The tree is read by the rules a capture reads it by (`.stowignore`,
//! sensitive paths left out unless the checkpoint holds some, `.git` and
//! `.stow` never), and only files whose stat differs from the stat cache
//! are read and hashed, so the cost is a stat per file plus the changed
//! bytes.

use serde::Serialize;

use crate::capture::cached_digests;
use crate::diff::{diff_files, diff_links, Change, Kind, LinkChange};
use crate::error::{Result, WsError};
use crate::format::{check_belongs, FileEntry};
use crate::fsutil::{hash_file, hex};
use crate::history;
use crate::layout::cache_path;
use crate::paths::{check_checkpoint_id, is_sensitive};
use crate::registry::Registry;
use crate::scan::scan;
use crate::statcache::StatCache;
use crate::stored::load_manifest;

/// The live tree against a checkpoint.
#[derive(Debug, Clone, Serialize)]
pub struct StatusResult {
    pub version: u32,
    pub workspace_id: String,
    /// The checkpoint compared with.
    pub checkpoint_id: String,
    /// Nothing differs.
    pub clean: bool,
    pub added: u64,
    pub changed: u64,
    pub deleted: u64,
    /// File changes in `diff`'s shape, sorted by path (`from`: the
    /// checkpoint's entry, `to`: the tree's).
    pub changes: Vec<Change>,
    /// Symbolic links added, removed or retargeted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<LinkChange>,
}

/// Compares the tree of workspace `ws` with checkpoint `against` (one of
/// the workspace's own), or with its head.
pub fn status(registry: &Registry, ws: &str, against: Option<&str>) -> Result<StatusResult> {
    let rec = registry.get(ws)?;
    // An interrupted rewind is finished first: the tree is then one the
    // history knows.
    crate::rewind::finish_pending(registry, ws)?;
    let checkpoint_id = match against {
        Some(id) => {
            check_checkpoint_id(id)?;
            check_belongs(registry, id, ws)?;
            id.to_string()
        }
        None => history::head(registry, ws)?.ok_or_else(|| {
            WsError::NotFound(format!(
                "a checkpoint of workspace {ws} to compare with (take one with `workspace checkpoint`)"
            ))
        })?,
    };
    let m = load_manifest(registry, &checkpoint_id)?;
    if !rec.dir.is_dir() {
        return Err(WsError::NotFound(format!(
            "workspace directory {}",
            rec.dir.display()
        )));
    }
    let rules = crate::ignorefile::load(&rec.dir, rec.gitignore)?;
    // A checkpoint taken with the sensitive-path opt-in is compared with
    // the tree read the same way.
    let include_sensitive = m.files.iter().any(|f| is_sensitive(&f.path));
    let tree = scan(&rec.dir, include_sensitive, rules.as_ref(), None)?;
    let cache = StatCache::load(&cache_path(registry, ws));
    let digests = cached_digests(&cache, &tree.files);
    let mut live = Vec::with_capacity(tree.files.len());
    for (f, cached) in tree.files.iter().zip(digests) {
        let sha256 = match cached {
            Some(d) => hex(&d),
            None => hash_file(&rec.dir.join(&*f.path))?.ok_or_else(|| {
                WsError::WorkspaceChanged(format!("{} was removed or replaced while read", f.path))
            })?,
        };
        live.push(FileEntry {
            path: f.path.to_string(),
            size: f.size,
            mode: f.mode,
            sha256,
            content_type: None,
            metadata: Default::default(),
        });
    }
    let changes = diff_files(&m.files, &live);
    let links = diff_links(&m.links, &tree.links);
    let count = |k: &str| changes.iter().filter(|c| c.kind == k).count() as u64;
    let (added, changed, deleted) = (count("added"), count("changed"), count("deleted"));
    Ok(StatusResult {
        version: 1,
        workspace_id: ws.to_string(),
        checkpoint_id,
        clean: changes.is_empty() && links.is_empty(),
        added: added + links.iter().filter(|l| l.kind == Kind::Added).count() as u64,
        changed: changed + links.iter().filter(|l| l.kind == Kind::Changed).count() as u64,
        deleted: deleted + links.iter().filter(|l| l.kind == Kind::Deleted).count() as u64,
        changes,
        links,
    })
}
