//! Handoff documents: version 1 names a workspace in a registry on this
//! machine (`resume`); version 2 also carries a portable archive of a
//! checkpoint (`adopt` on another machine).

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::archive::{
    export, file_sha256, import_with_digest, ArchiveLimits, Expectation, ExportOptions,
    ImportOptions,
};
use crate::error::{Result, WsError};
use crate::fsutil::{absolute, write_new_file};
use crate::manifest::check_new_root;
use crate::prepare::WorkspaceResult;
use crate::progress::{PhaseClock, Progress};
use crate::registry::Registry;
use crate::restore::{restore_as, RestoreLimits};

/// A handoff document (version 1 local; version 2 carries an archive).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandoffDocument {
    pub version: u32,
    pub workspace_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry_dir: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<HandoffArchive>,
}

/// The archive a version-2 handoff carries.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HandoffArchive {
    /// Relative paths resolve from the document's directory.
    pub path: PathBuf,
    /// SHA-256 of the archive file (lowercase hex).
    pub sha256: String,
    /// Size of the archive file (0: not checked).
    #[serde(default)]
    pub bytes: u64,
    /// Files of the checkpoint.
    #[serde(default)]
    pub files: u64,
}

/// Largest handoff document read.
const MAX_HANDOFF_BYTES: u64 = 1 << 20;

impl HandoffDocument {
    /// Reads and strictly decodes a handoff document.
    pub fn load(path: &Path) -> Result<HandoffDocument> {
        let meta = fs::metadata(path).map_err(|e| WsError::io_at("read handoff", path, e))?;
        if !meta.is_file() || meta.len() > MAX_HANDOFF_BYTES {
            return Err(WsError::InvalidRequest(format!(
                "{} must be a regular file of at most 1 MiB",
                path.display()
            )));
        }
        let bytes = fs::read(path).map_err(|e| WsError::io_at("read handoff", path, e))?;
        let doc: HandoffDocument = serde_json::from_slice(&bytes)
            .map_err(|e| WsError::InvalidRequest(format!("invalid handoff document: {e}")))?;
        if doc.version != 1 && doc.version != 2 {
            return Err(WsError::InvalidRequest(format!(
                "unsupported handoff version {} (supported: 1, 2)",
                doc.version
            )));
        }
        crate::paths::check_workspace_id(&doc.workspace_id)?;
        Ok(doc)
    }
}

/// Writes a handoff document for a workspace, without claiming it:
/// version 1 (same machine) names the workspace and its registry; with
/// `archive`, the checkpoint is exported there first (default bounds, no
/// sensitive paths) and the version-2 document records the archive's
/// SHA-256, size and file count. With `output`, the document is written
/// there (never replacing a file) and `archive.path` is relative to its
/// directory when the archive lies beneath it. Returns the document.
pub fn handoff(
    registry: &Registry,
    id: &str,
    checkpoint_id: Option<&str>,
    archive: Option<&Path>,
    output: Option<&Path>,
) -> Result<HandoffDocument> {
    let rec = registry.get(id)?;
    if let Some(cp) = checkpoint_id {
        crate::checkpoint::check_belongs(registry, cp, &rec.id)?;
    }
    let output = output.map(absolute).transpose()?;
    if let Some(out) = &output {
        if fs::symlink_metadata(out).is_ok() {
            return Err(WsError::AlreadyExists(out.display().to_string()));
        }
    }
    let carried = match archive {
        None => None,
        Some(path) => {
            let cp = checkpoint_id
                .ok_or_else(|| WsError::InvalidRequest("--archive needs --checkpoint-id".into()))?;
            let path = absolute(path)?;
            let exported = export(registry, cp, &path, &ExportOptions::default())?;
            let shown = match output.as_ref().and_then(|o| o.parent()) {
                Some(dir) => path.strip_prefix(dir).unwrap_or(&path).to_path_buf(),
                None => path.clone(),
            };
            Some((
                path,
                HandoffArchive {
                    path: shown,
                    sha256: exported.sha256,
                    bytes: exported.bytes,
                    files: exported.files,
                },
            ))
        }
    };
    let doc = HandoffDocument {
        version: if carried.is_some() { 2 } else { 1 },
        workspace_id: rec.id,
        checkpoint_id: checkpoint_id.map(str::to_string),
        registry_dir: Some(registry.dir().to_path_buf()),
        team: registry.team().map(str::to_string),
        archive: carried.as_ref().map(|(_, a)| a.clone()),
    };
    if let Some(out) = &output {
        let written = serde_json::to_vec_pretty(&doc)
            .map_err(|e| WsError::InvalidRequest(format!("encode handoff: {e}")))
            .and_then(|mut bytes| {
                bytes.push(b'\n');
                write_new_file(out, &bytes, 0o600)
            });
        if let Err(e) = written {
            // The archive was made for this document only.
            if let Some((path, _)) = &carried {
                let _ = fs::remove_file(path);
            }
            return Err(e);
        }
    }
    Ok(doc)
}

/// Options of `adopt`.
#[derive(Default)]
pub struct AdoptOptions<'a> {
    /// Import sensitive-looking paths (refused without it).
    pub include_sensitive: bool,
    /// Archive bounds; they also narrow the new workspace's limits.
    pub limits: ArchiveLimits,
    pub progress: Option<&'a dyn Progress>,
}

/// Adopts a portable handoff: checks the archive against the document's
/// size and SHA-256 before anything is created, imports its checkpoint
/// into the local registry (`registry_dir` of the document is ignored;
/// `team` comes from the flag or else the document, and the two must
/// agree), and restores it into the new directory `root` as a new,
/// adopted workspace (never deleted by destroy or collect).
pub fn adopt(
    registry_base: Option<&Path>,
    team: Option<&str>,
    handoff: &Path,
    root: &Path,
    opts: &AdoptOptions,
) -> Result<WorkspaceResult> {
    let doc = HandoffDocument::load(handoff)?;
    let team = match (team.filter(|t| !t.is_empty()), doc.team.as_deref()) {
        (Some(flag), Some(theirs)) if flag != theirs => {
            return Err(WsError::InvalidRequest(format!(
                "--team {flag} differs from the handoff's team {theirs}"
            )))
        }
        (Some(flag), _) => Some(flag),
        (None, theirs) => theirs,
    };
    let registry = Registry::resolve(registry_base, team)?;
    let doc_dir = absolute(handoff)?
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    adopt_document(&registry, &doc, &doc_dir, root, opts)
}

/// Adopts the handoff `doc` (read from directory `doc_dir`) into the new
/// directory `root` as a workspace of `registry`.
pub(crate) fn adopt_document(
    registry: &Registry,
    doc: &HandoffDocument,
    doc_dir: &Path,
    root: &Path,
    opts: &AdoptOptions,
) -> Result<WorkspaceResult> {
    let Some(archive) = &doc.archive else {
        return Err(WsError::InvalidRequest(
            "this is a same-machine handoff with no archive; hand off with --archive to adopt it elsewhere, or use resume --handoff".into(),
        ));
    };
    let root = absolute(root)?;
    check_new_root(&root)?;
    let path = if archive.path.is_absolute() {
        archive.path.clone()
    } else {
        doc_dir.join(&archive.path)
    };
    let meta = fs::symlink_metadata(&path).map_err(|e| WsError::io_at("open archive", &path, e))?;
    if !meta.is_file() {
        return Err(WsError::InvalidArchive(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    // No archive within the bounds can be larger than its payloads, the
    // manifest, the trailer and a header or two per entry.
    let plausible = opts
        .limits
        .effective_bytes()
        .saturating_mul(2)
        .saturating_add(17 << 20)
        .saturating_add(opts.limits.effective_files().saturating_mul(2048));
    if meta.len() > plausible {
        return Err(WsError::CapacityExceeded(format!(
            "{} is {} bytes, more than any archive within the bounds",
            path.display(),
            meta.len()
        )));
    }
    if archive.bytes > 0 && meta.len() != archive.bytes {
        return Err(WsError::InvalidArchive(format!(
            "{} is {} bytes; the handoff says {}",
            path.display(),
            meta.len(),
            archive.bytes
        )));
    }
    let mut clock = PhaseClock::start("adopt");
    let want = archive.sha256.to_ascii_lowercase();
    let (sha, _) = file_sha256(&path)?;
    clock.lap("digest");
    if sha != want {
        return Err(WsError::InvalidArchive(format!(
            "{} does not match the handoff's sha256 (it is not the archive that was handed off)",
            path.display()
        )));
    }
    let import = ImportOptions {
        include_sensitive: opts.include_sensitive,
        limits: opts.limits,
        progress: opts.progress,
    };
    let expect = Expectation {
        sha256: &want,
        workspace_id: &doc.workspace_id,
        checkpoint_id: doc.checkpoint_id.as_deref(),
    };
    let imported = import_with_digest(registry, &path, &import, Some(&expect))?;
    clock.lap("import");
    let limits = RestoreLimits {
        max_bytes: opts.limits.max_bytes,
        max_files: opts.limits.max_files,
        progress: opts.progress,
    };
    let restored =
        restore_as(registry, &imported.checkpoint_id, &root, limits, false).map_err(|e| {
            WsError::PartialImport {
                checkpoint_id: imported.checkpoint_id.clone(),
                reason: e.to_string(),
            }
        });
    clock.lap("restore");
    restored
}

/// Resumes from a handoff document: the registry comes from the document.
pub fn resume_handoff(path: &Path) -> Result<WorkspaceResult> {
    let doc = HandoffDocument::load(path)?;
    let dir = doc.registry_dir.clone().ok_or_else(|| {
        WsError::InvalidRequest("the handoff document has no registry_dir".into())
    })?;
    let registry = Registry::at(&dir, doc.team.as_deref())?;
    crate::open::resume(
        &registry,
        &doc.workspace_id,
        doc.checkpoint_id.as_deref(),
        false,
    )
}
