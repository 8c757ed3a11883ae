//! A workspace's identity document (`<root>/.stow/workspace.json`), how a
//! directory finds the workspace holding it, and the session claim.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use stow_checkpoint::fsutil::{atomic_write, create_private_dir, random_hex, FileLock};
use stow_checkpoint::registry::Registry;
use stow_checkpoint::{Result, WsError};

/// The identity document kept at `<root>/.stow/workspace.json`; destroy
/// checks it so a record can never delete a directory it does not name.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Identity {
    pub version: u32,
    pub workspace_id: String,
    pub bucket: String,
    pub created: String,
    pub owned: bool,
    /// The `base_identity` of the tree the workspace was prepared (or
    /// restored) with, so opening it never has to walk the tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_identity: Option<String>,
    /// The registry directory (partition base) holding the record, so a
    /// command run inside the workspace needs no `--registry-dir`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry_dir: Option<PathBuf>,
    /// The record's team partition, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
}

/// The identity file of the workspace rooted at `root`.
pub fn identity_path(root: &Path) -> PathBuf {
    root.join(".stow").join("workspace.json")
}

/// The workspace whose root is `dir` or its nearest ancestor holding an
/// identity: its root and identity.
pub fn find_workspace(dir: &Path) -> Option<(PathBuf, Identity)> {
    dir.ancestors().find_map(|d| {
        identity_path(d)
            .is_file()
            .then(|| read_identity(d).ok().map(|i| (d.to_path_buf(), i)))
            .flatten()
    })
}

/// Reads a workspace's identity document.
pub fn read_identity(root: &Path) -> Result<Identity> {
    let path = identity_path(root);
    let bytes = fs::read(&path).map_err(|e| WsError::io_at("read workspace identity", &path, e))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| WsError::Corrupt(format!("workspace identity {}: {e}", path.display())))
}

/// Writes the identity document and provenance directory of a new root.
pub(crate) fn write_identity(root: &Path, ident: &Identity) -> Result<()> {
    let stow = root.join(".stow");
    create_private_dir(&stow)?;
    let bytes = serde_json::to_vec_pretty(ident)
        .map_err(|e| WsError::InvalidRequest(format!("encode identity: {e}")))?;
    atomic_write(&stow.join("workspace.json"), &bytes, 0o600)
}

/// Records the base identity of a new workspace in its identity document.
pub(crate) fn record_base_identity(root: &Path, base_identity: &str) -> Result<()> {
    let mut ident = read_identity(root)?;
    ident.base_identity = Some(base_identity.to_string());
    write_identity(root, &ident)
}

/// The registry base directory an identity records: the partition's
/// directory without its `teams/<team>` suffix.
pub(crate) fn registry_base(registry: &Registry) -> Option<PathBuf> {
    let dir = registry.dir();
    match registry.team() {
        Some(_) => dir.parent().and_then(Path::parent).map(Path::to_path_buf),
        None => Some(dir.to_path_buf()),
    }
}

/// Why `root` (a workspace's root, existing or about to be made) may not
/// be one with `registry`: inside the registry's base directory (garbage
/// collection would take its files for blobs, `destroy` could remove the
/// registry's own state) or holding it. Real paths are compared: the
/// deepest existing ancestor of `root` is resolved.
pub(crate) fn registry_overlap(registry: &Registry, root: &Path) -> Option<&'static str> {
    let base = registry_base(registry).unwrap_or_else(|| registry.dir().to_path_buf());
    let (base, real) = (real_path(&base)?, real_path(root)?);
    if base.starts_with(&real) {
        Some("it holds the registry directory")
    } else if real.starts_with(&base) {
        Some("it is inside the registry directory")
    } else {
        None
    }
}

/// `path` with its deepest existing ancestor resolved (symlinks and all),
/// the rest appended: the real path it names, or will once created.
fn real_path(path: &Path) -> Option<PathBuf> {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    while !existing.exists() {
        rest.push(existing.file_name()?.to_os_string());
        existing = existing.parent()?.to_path_buf();
    }
    let mut real = existing.canonicalize().unwrap_or(existing);
    real.extend(rest.iter().rev());
    Some(real)
}

/// Refuses a new workspace root that [`registry_overlap`] rules out, or
/// one inside another workspace (as attach refuses it): the outer
/// workspace would capture the inner one's files and state, and a rewind
/// of it would delete them.
pub(crate) fn check_root_apart(registry: &Registry, root: &Path) -> Result<()> {
    let refuse = |reason: String| {
        Err(WsError::InvalidRoot {
            root: root.to_path_buf(),
            reason,
        })
    };
    if let Some(reason) = registry_overlap(registry, root) {
        return refuse(reason.to_string());
    }
    let outer = real_path(root)
        .as_deref()
        .and_then(Path::parent)
        .and_then(find_workspace);
    if let Some((outer, ident)) = outer {
        return refuse(format!(
            "it is inside workspace {} at {}",
            ident.workspace_id,
            outer.display()
        ));
    }
    Ok(())
}

/// Takes the session lock of a workspace, refusing when a live owner holds it.
pub fn claim_session(root: &Path, id: &str) -> Result<FileLock> {
    let stow = root.join(".stow");
    if !stow.is_dir() {
        return Err(WsError::NotFound(format!(
            "workspace directory {} (for {id})",
            root.display()
        )));
    }
    FileLock::try_lock(&stow.join("session.lock"))?.ok_or_else(|| WsError::InUse(id.to_string()))
}

/// Whether a live session holds the workspace (try-lock, then release).
pub fn is_live(root: &Path) -> Result<bool> {
    let stow = root.join(".stow");
    if !stow.is_dir() {
        return Ok(false);
    }
    Ok(FileLock::try_lock(&stow.join("session.lock"))?.is_none())
}

/// A new workspace ID: `ws_` + 16 lowercase hex.
pub fn new_workspace_id() -> String {
    format!("ws_{}", random_hex(8))
}
