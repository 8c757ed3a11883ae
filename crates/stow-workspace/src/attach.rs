//! Attaching an existing directory as a workspace, in place, and
//! detaching it again.
//!
//! An attached workspace is *adopted* (`owned: false`): nothing is copied
//! or moved, nothing outside `DIR/.stow/` is ever written by attach or
//! detach, and `destroy` refuses it. `.stow/` holds a `.gitignore` of `*`,
//! so git never shows it and the user's own `.gitignore` is untouched.
//! Every refusal is checked before anything is written.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::describe::WorkspaceResult;
use crate::identity::{
    find_workspace, identity_path, is_live, new_workspace_id, read_identity, registry_base,
    registry_overlap, write_identity, Identity,
};
use crate::manifest::{DEFAULT_MAX_BYTES, DEFAULT_MAX_OBJECTS};
use crate::open::describe;
use stow_checkpoint::fsutil::{absolute, atomic_write, now_rfc3339, random_hex};
use stow_checkpoint::registry::{min_bound, Record, Registry, POLICY_VERSION, READ_WRITE_MASK};
use stow_checkpoint::rewind::{kept_root, HeldWorkspace};
use stow_checkpoint::{delete_workspace_checkpoints, summaries, Result, WsError};

/// What `workspace attach` is given.
#[derive(Debug, Clone, Default)]
pub struct AttachOptions {
    /// The directory to attach (absolute or relative to the current one).
    pub root: PathBuf,
    /// TTL for `collect` (0 = none; attached workspaces are never
    /// collected, so this is informational).
    pub ttl_seconds: u64,
    /// The bucket view's byte quota (0 = the default, 64 MiB).
    pub max_bytes: u64,
    /// The bucket view's object quota (0 = the default, 10,000).
    pub max_objects: u64,
    /// Captures do not leave out what git ignores.
    pub no_gitignore: bool,
}

/// The refusal for a directory that may not be attached.
fn refused(root: &Path, why: impl std::fmt::Display) -> WsError {
    WsError::Refused(format!("cannot attach {}: {why}", root.display()))
}

/// Checks that `root` may be attached in `registry`; writes nothing.
fn check_attachable(registry: &Registry, root: &Path) -> Result<()> {
    if !root.is_dir() {
        return Err(WsError::InvalidRoot {
            root: root.to_path_buf(),
            reason: "not an existing directory".into(),
        });
    }
    if root.parent().is_none() {
        return Err(refused(root, "the filesystem root is never a workspace"));
    }
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty());
    if let Some(home) = home.map(PathBuf::from).and_then(|h| h.canonicalize().ok()) {
        if home == root {
            return Err(refused(root, "the home directory is never a workspace"));
        }
    }
    if identity_path(root).exists() {
        let id = read_identity(root)
            .map(|i| i.workspace_id)
            .unwrap_or_default();
        return Err(WsError::AlreadyExists(format!(
            "workspace {id} at {} (attached or prepared already)",
            root.display()
        )));
    }
    // `.stow` is where a workspace keeps its state, and detach removes it
    // whole: one that is not a workspace's is never written into.
    if std::fs::symlink_metadata(root.join(".stow")).is_ok() {
        return Err(refused(
            root,
            "it already holds a .stow that is not a stow-s3 workspace's (move it away first)",
        ));
    }
    if let Some((outer, ident)) = root.parent().and_then(find_workspace) {
        return Err(refused(
            root,
            format!(
                "it is inside workspace {} at {}",
                ident.workspace_id,
                outer.display()
            ),
        ));
    }
    // The registry's base directory: every team's partition lies in it.
    if let Some(reason) = registry_overlap(registry, root) {
        return Err(refused(root, reason));
    }
    for rec in registry.records()? {
        let dir = rec.dir.canonicalize().unwrap_or(rec.dir.clone());
        if dir.starts_with(root) {
            return Err(refused(
                root,
                format!("it contains workspace {} at {}", rec.id, rec.dir.display()),
            ));
        }
    }
    Ok(())
}

/// Registers `opts.root` as an adopted workspace of `registry`, in place.
pub fn attach(registry: &Registry, opts: &AttachOptions) -> Result<WorkspaceResult> {
    let given = absolute(&opts.root)?;
    // Symlinks resolved: the refusals compare real paths.
    let root = given.canonicalize().map_err(|e| WsError::InvalidRoot {
        root: given.clone(),
        reason: format!("not an existing directory ({e})"),
    })?;
    check_attachable(registry, &root)?;
    // Read-only, before anything is written: the tree's identity and
    // totals, and no workspace of any registry below it.
    let survey = survey(&root)?;
    registry.ensure()?;
    let _lock = registry.lock()?;
    let bound = registry.policy()?.max_workspaces;
    let count = registry.count()?;
    if bound > 0 && count >= bound {
        return Err(WsError::CapacityExceeded(format!(
            "the registry holds {count} workspaces, at its bound of {bound}"
        )));
    }
    // Again under the lock: a concurrent attach of the same tree.
    check_attachable(registry, &root)?;
    let id = new_workspace_id();
    let bucket = format!("stow-workspace-{}", random_hex(8));
    let created = now_rfc3339();
    let rec = Record {
        id: id.clone(),
        dir: root.clone(),
        working_directory: Some(root.clone()),
        bucket: bucket.clone(),
        created: created.clone(),
        last_used: created.clone(),
        ttl_seconds: opts.ttl_seconds,
        policy_version: POLICY_VERSION,
        authority_mask: READ_WRITE_MASK,
        max_bytes: nonzero_or(opts.max_bytes, DEFAULT_MAX_BYTES),
        max_objects: nonzero_or(opts.max_objects, DEFAULT_MAX_OBJECTS),
        max_checkpoint_bytes: 0,
        max_checkpoints: 0,
        owned: false,
        gitignore: !opts.no_gitignore,
        attached: true,
    };
    let stow = root.join(".stow");
    let written = (|| -> Result<WorkspaceResult> {
        write_identity(
            &root,
            &Identity {
                version: 1,
                workspace_id: id.clone(),
                bucket: bucket.clone(),
                created: created.clone(),
                owned: false,
                base_identity: Some(survey.base_identity.clone()),
                registry_dir: registry_base(registry),
                team: registry.team().map(str::to_string),
            },
        )?;
        atomic_write(&stow.join(".gitignore"), b"*\n", 0o644)?;
        registry.put(&rec)?;
        let mut result = describe(registry, &rec, root.clone(), None, true)?;
        result.seeded_bytes = survey.bytes;
        result.seeded_objects = survey.files;
        Ok(result)
    })();
    if written.is_err() {
        // Nothing of a refused attach stays: `.stow` did not exist before.
        let _ = registry.remove(&id);
        let _ = fs::remove_dir_all(&stow);
    }
    written
}

/// What attach learns of a tree before it writes anything.
struct Survey {
    /// Over the regular files a capture would hold (`.git` and `.stow`
    /// left out; links and special files carry no bytes of their own).
    base_identity: String,
    bytes: u64,
    files: u64,
}

/// Walks `root` once: its identity and totals, refusing a tree that holds
/// another workspace (of any registry: its `.stow/workspace.json`).
fn survey(root: &Path) -> Result<Survey> {
    let files = stow_checkpoint::walk::identity_files(root)?;
    if let Some((rel, _)) = files
        .iter()
        .find(|(rel, _)| rel.ends_with("/.stow/workspace.json"))
    {
        let inner = rel.trim_end_matches("/.stow/workspace.json");
        return Err(refused(
            root,
            format!(
                "it contains the workspace at {}",
                root.join(inner).display()
            ),
        ));
    }
    let mut h = sha2::Sha256::default();
    let mut buf = vec![0u8; 256 << 10];
    let mut bytes = 0u64;
    for (rel, path) in &files {
        let meta = fs::metadata(path).map_err(|e| WsError::io_at("stat", path, e))?;
        bytes += meta.len();
        stow_checkpoint::walk::feed_identity(&mut h, rel, path, &mut buf)?;
    }
    Ok(Survey {
        base_identity: stow_checkpoint::walk::finish_identity(h),
        bytes,
        files: files.len() as u64,
    })
}

fn nonzero_or(v: u64, default: u64) -> u64 {
    if v == 0 {
        default
    } else {
        min_bound(v, u64::MAX)
    }
}

/// The result of `workspace detach`.
#[derive(Debug, Clone, Serialize)]
pub struct DetachResult {
    pub version: u32,
    pub workspace_id: String,
    pub root: PathBuf,
    /// Checkpoints of the workspace deleted with it (0 when kept).
    pub deleted_checkpoints: u64,
    pub kept_checkpoints: bool,
}

/// Forgets attached workspace `id`: its record, its `DIR/.stow/` and,
/// unless `keep_checkpoints`, its checkpoints. Never touches anything else
/// in the tree; refuses a prepared (owned) workspace (use `destroy`) and
/// one a live session holds.
pub fn detach(registry: &Registry, id: &str, keep_checkpoints: bool) -> Result<DetachResult> {
    let rec = registry.get(id)?;
    if rec.owned {
        return Err(WsError::Refused(format!(
            "workspace {id} was prepared, not attached: use `workspace destroy`"
        )));
    }
    if is_live(&rec.dir)? || stow_checkpoint::watch_service::is_watched(registry, id)? {
        return Err(WsError::InUse(id.to_string()));
    }
    // Taken once the refusals are behind (they write nothing, not even a
    // lock file).
    let held = HeldWorkspace::take(registry, id)?;
    let rec = registry.get(id)?;
    // Again, held: a session or watch that started meanwhile.
    if is_live(&rec.dir)? || stow_checkpoint::watch_service::is_watched(registry, id)? {
        return Err(WsError::InUse(id.to_string()));
    }
    // A rewind a kill interrupted: finished, so the tree is whole and the
    // files its stage holds (under `.stow`, removed below) are put back.
    held.finish_pending(registry, &rec)?;
    let kept = kept_root(&rec.dir);
    if fs::read_dir(&kept).is_ok_and(|mut d| d.next().is_some()) {
        return Err(WsError::Refused(format!(
            "{} holds what rewinds kept (files written while a rewind replaced them): look through it and remove it, then detach",
            kept.display()
        )));
    }
    // Only the identity's own workspace: a record must never remove the
    // `.stow` of another.
    let stow = rec.dir.join(".stow");
    let ours = read_identity(&rec.dir).is_ok_and(|i| i.workspace_id == id);
    let deleted_checkpoints = if keep_checkpoints {
        0
    } else {
        let n = summaries(registry)?
            .iter()
            .filter(|s| s.workspace_id == id)
            .count() as u64;
        delete_workspace_checkpoints(registry, id)?;
        n
    };
    registry.remove(id)?;
    if ours {
        fs::remove_dir_all(&stow).map_err(|e| WsError::io_at("remove", &stow, e))?;
    }
    Ok(DetachResult {
        version: 1,
        workspace_id: id.to_string(),
        root: rec.dir,
        deleted_checkpoints,
        kept_checkpoints: keep_checkpoints,
    })
}
