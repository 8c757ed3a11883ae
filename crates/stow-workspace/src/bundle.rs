//! Handoff bundles: a named directory holding `handoff.json` (version 2)
//! and `checkpoint.tar.gz`, a direct child of a transfer root the host
//! configured. The MCP workspace profile exports and adopts through them,
//! so tool arguments name a bundle, never a path.

use std::fs;
use std::path::{Path, PathBuf};

use crate::describe::WorkspaceResult;
use crate::handoff::{adopt_document, AdoptOptions, HandoffArchive, HandoffDocument};
use stow_checkpoint::archive::ExportOptions;
use stow_checkpoint::fsutil::{
    create_private_dir, fsync_dir, random_hex, rename_noreplace, write_new_file, FileLock,
};
use stow_checkpoint::paths::segment_problem;
use stow_checkpoint::registry::Registry;
use stow_checkpoint::{Result, WsError};

/// The archive's name inside a bundle.
pub const BUNDLE_ARCHIVE: &str = "checkpoint.tar.gz";
/// The handoff document's name inside a bundle.
pub const BUNDLE_DOCUMENT: &str = "handoff.json";

/// Refuses anything but a visible, portable direct-child name.
pub fn check_child_name(name: &str, what: &str) -> Result<()> {
    let bad = |reason: &str| {
        Err(WsError::InvalidRequest(format!(
            "{what} {name:?} must be a direct child name: {reason}"
        )))
    };
    if name.is_empty() || name.len() > 255 {
        return bad("empty or longer than 255 bytes");
    }
    if name.contains(['/', '\\', ':']) {
        return bad("it contains / \\ or :");
    }
    if name.starts_with('.') {
        return bad("hidden names and . or .. are refused");
    }
    if let Some(reason) = segment_problem(name) {
        return bad(reason);
    }
    Ok(())
}

/// The result of a bundle export.
#[derive(Debug, Clone)]
pub struct ExportedBundle {
    /// The bundle's name (a direct child of the root).
    pub bundle: String,
    pub path: PathBuf,
    /// The handoff document it holds.
    pub handoff: HandoffDocument,
}

/// Names of a bundle's stage directory under the root (`<prefix><hex>`)
/// and of its lock file (`<prefix><hex>.lock`).
const STAGE_PREFIX: &str = ".stow-bundle-";

/// A stage directory and the lock that marks it live. The lock file is
/// created and locked before the directory and removed after it (renamed
/// or removed), so a stage whose lock file is not held belongs to an
/// export that died; [`sweep_dead_stages`] removes it.
struct Stage {
    dir: PathBuf,
    lock_path: PathBuf,
    _lock: FileLock,
}

impl Stage {
    fn create(root: &Path) -> Result<Stage> {
        loop {
            let hex = random_hex(8);
            let lock_path = root.join(format!("{STAGE_PREFIX}{hex}.lock"));
            let Some(lock) = FileLock::try_lock(&lock_path)? else {
                continue;
            };
            // A sweep may have taken and removed the file between its
            // creation and the lock: then the lock guards nothing.
            if !lock.is_at(&lock_path) {
                continue;
            }
            let dir = root.join(format!("{STAGE_PREFIX}{hex}"));
            create_private_dir(&dir)?;
            return Ok(Stage {
                dir,
                lock_path,
                _lock: lock,
            });
        }
    }

    /// Removes what is left of the stage (the directory, unless renamed
    /// into place), then its lock file.
    fn finish(self) {
        let _ = fs::remove_dir_all(&self.dir);
        let _ = fs::remove_file(&self.lock_path);
    }
}

/// Removes the stages of exports that were killed: those whose lock file
/// no process holds.
fn sweep_dead_stages(root: &Path) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(hex) = name
            .to_str()
            .and_then(|n| n.strip_prefix(STAGE_PREFIX)?.strip_suffix(".lock"))
        else {
            continue;
        };
        // Never created here: a sweep must not make a lock file another
        // export is about to lock.
        if let Ok(Some(_dead)) = FileLock::try_lock_existing(&entry.path()) {
            let _ = fs::remove_dir_all(root.join(format!("{STAGE_PREFIX}{hex}")));
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Exports checkpoint `cp` of workspace `ws` as bundle `name` under
/// `root`: assembled in a hidden stage directory there, flushed, then
/// renamed into place without ever replacing an existing entry. A failure
/// after the rename (flushing the root) is `outcome_unknown`. Stages that
/// killed exports left under `root` are removed first.
pub fn export_bundle(
    registry: &Registry,
    ws: &str,
    cp: &str,
    root: &Path,
    name: &str,
) -> Result<ExportedBundle> {
    check_child_name(name, "bundle")?;
    stow_checkpoint::check_belongs(registry, cp, ws)?;
    let dst = root.join(name);
    if fs::symlink_metadata(&dst).is_ok() {
        return Err(WsError::AlreadyExists(format!("bundle {name}")));
    }
    sweep_dead_stages(root);
    let staged = Stage::create(root)?;
    let stage = staged.dir.clone();
    let built = (|| -> Result<HandoffDocument> {
        let exported = stow_checkpoint::archive::export(
            registry,
            cp,
            &stage.join(BUNDLE_ARCHIVE),
            &ExportOptions::default(),
        )?;
        let doc = HandoffDocument {
            version: 2,
            workspace_id: ws.to_string(),
            checkpoint_id: Some(cp.to_string()),
            registry_dir: None,
            team: None,
            archive: Some(HandoffArchive {
                path: PathBuf::from(BUNDLE_ARCHIVE),
                sha256: exported.sha256,
                bytes: exported.bytes,
                files: exported.files,
            }),
            remote: None,
        };
        let mut bytes = serde_json::to_vec_pretty(&doc)
            .map_err(|e| WsError::InvalidRequest(format!("encode handoff: {e}")))?;
        bytes.push(b'\n');
        write_new_file(&stage.join(BUNDLE_DOCUMENT), &bytes, 0o600)?;
        fsync_dir(&stage)?;
        rename_noreplace(&stage, &dst).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => WsError::AlreadyExists(format!("bundle {name}")),
            _ => WsError::io_at("publish bundle", &dst, e),
        })?;
        Ok(doc)
    })();
    staged.finish();
    let doc = built?;
    fsync_dir(root).map_err(|e| {
        WsError::OutcomeUnknown(format!("bundle {} was published: {e}", dst.display()))
    })?;
    Ok(ExportedBundle {
        bundle: name.to_string(),
        path: dst,
        handoff: doc,
    })
}

/// Adopts bundle `name` of `export_root` into the new directory
/// `destination` under `adopt_root`, as a workspace of `registry`. The
/// bundle's files must be regular files (never followed through a
/// symlink), its document must name no team and the archive exactly
/// `checkpoint.tar.gz`; all of this is checked before anything is created.
pub fn adopt_bundle(
    registry: &Registry,
    export_root: &Path,
    name: &str,
    adopt_root: &Path,
    destination: &str,
    opts: &AdoptOptions,
) -> Result<WorkspaceResult> {
    check_child_name(name, "bundle")?;
    check_child_name(destination, "destination")?;
    let dir = export_root.join(name);
    let regular = |p: &Path| -> Result<()> {
        let meta = fs::symlink_metadata(p).map_err(|e| WsError::io_at("open bundle", p, e))?;
        if !meta.file_type().is_file() {
            return Err(WsError::InvalidRequest(format!(
                "{} is not a regular file",
                p.display()
            )));
        }
        Ok(())
    };
    let meta = fs::symlink_metadata(&dir).map_err(|e| WsError::io_at("open bundle", &dir, e))?;
    if !meta.file_type().is_dir() {
        return Err(WsError::InvalidRequest(format!(
            "bundle {name} is not a directory"
        )));
    }
    regular(&dir.join(BUNDLE_DOCUMENT))?;
    regular(&dir.join(BUNDLE_ARCHIVE))?;
    let doc = HandoffDocument::load(&dir.join(BUNDLE_DOCUMENT))?;
    if doc.team.is_some() {
        return Err(WsError::InvalidRequest(
            "a bundle's handoff names no team".into(),
        ));
    }
    match &doc.archive {
        Some(a) if a.path == Path::new(BUNDLE_ARCHIVE) => {}
        _ => {
            return Err(WsError::InvalidRequest(format!(
                "a bundle's handoff names its archive {BUNDLE_ARCHIVE}"
            )))
        }
    }
    adopt_document(registry, &doc, &dir, &adopt_root.join(destination), opts)
}
