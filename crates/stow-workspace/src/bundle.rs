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
    create_private_dir, fsync_dir, random_hex, rename_noreplace, write_new_file,
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

/// Exports checkpoint `cp` of workspace `ws` as bundle `name` under
/// `root`: assembled in a hidden stage directory there, flushed, then
/// renamed into place without ever replacing an existing entry. A failure
/// after the rename (flushing the root) is `outcome_unknown`.
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
    let stage = root.join(format!(".stow-bundle-{}", random_hex(8)));
    create_private_dir(&stage)?;
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
    let doc = match built {
        Ok(doc) => doc,
        Err(e) => {
            let _ = fs::remove_dir_all(&stage);
            return Err(e);
        }
    };
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
