//! Handoff documents: version 1 names a workspace in a registry on this
//! machine (`resume`); version 2 also carries a checkpoint for another
//! machine (`adopt`): a portable archive, or a remote that holds it.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::describe::WorkspaceResult;
use crate::manifest::check_new_root;
use crate::restore::{restore_as, RestoreLimits};
use stow_checkpoint::archive::{
    export, file_sha256, import_with_digest, ArchiveLimits, Expectation, ExportOptions,
    ImportOptions,
};
use stow_checkpoint::fsutil::{absolute, write_new_file};
use stow_checkpoint::progress::{PhaseClock, Progress};
use stow_checkpoint::registry::Registry;
use stow_checkpoint::remote::{
    check_spec, get_remote, pull, push, verify_remote_copy, Connector, PullOptions, PushOptions,
    PushResult, RemoteSpec,
};
use stow_checkpoint::{Result, WsError};

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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<HandoffRemote>,
}

/// The remote a version-2 handoff names: where the checkpoint was pushed.
/// No credentials: the adopting machine uses its own.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HandoffRemote {
    /// `s3://BUCKET[/PREFIX]`.
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
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
        stow_checkpoint::paths::check_workspace_id(&doc.workspace_id)?;
        if let Some(r) = &doc.remote {
            if doc.archive.is_some() || doc.checkpoint_id.is_none() {
                return Err(WsError::InvalidRequest(
                    "a handoff through a remote names a checkpoint and carries no archive".into(),
                ));
            }
            check_spec(&r.spec())?;
        }
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
        stow_checkpoint::check_belongs(registry, cp, &rec.id)?;
    }
    let output = check_output(output)?;
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
        remote: None,
    };
    if let Some(out) = &output {
        if let Err(e) = write_document(out, &doc) {
            // The archive was made for this document only.
            if let Some((path, _)) = &carried {
                let _ = fs::remove_file(path);
            }
            return Err(e);
        }
    }
    Ok(doc)
}

/// Refuses an output path that exists (before any work is done).
fn check_output(output: Option<&Path>) -> Result<Option<PathBuf>> {
    let output = output.map(absolute).transpose()?;
    if let Some(out) = &output {
        if fs::symlink_metadata(out).is_ok() {
            return Err(WsError::AlreadyExists(out.display().to_string()));
        }
    }
    Ok(output)
}

/// Writes a document to a new file (mode 0600), never replacing one.
fn write_document(out: &Path, doc: &HandoffDocument) -> Result<()> {
    let mut bytes = serde_json::to_vec_pretty(doc)
        .map_err(|e| WsError::InvalidRequest(format!("encode handoff: {e}")))?;
    bytes.push(b'\n');
    write_new_file(out, &bytes, 0o600)
}

impl HandoffRemote {
    /// The remote as a spec (no profile: the adopter's chain applies).
    pub fn spec(&self) -> RemoteSpec {
        RemoteSpec {
            url: self.url.clone(),
            endpoint_url: self.endpoint_url.clone(),
            region: self.region.clone(),
            profile: None,
        }
    }
}

/// A handoff through a remote: pushes checkpoint `checkpoint_id` of
/// workspace `id` to the partition's remote `remote_name` (a no-op when it
/// is there already), then writes the version-2 document naming the
/// remote's URL, endpoint and region and the checkpoint (with `output`, to
/// that new file). Returns the document and what the push did.
pub fn handoff_via_remote(
    registry: &Registry,
    id: &str,
    checkpoint_id: &str,
    remote_name: &str,
    connector: &dyn Connector,
    output: Option<&Path>,
) -> Result<(HandoffDocument, PushResult)> {
    let rec = registry.get(id)?;
    stow_checkpoint::check_belongs(registry, checkpoint_id, &rec.id)?;
    let output = check_output(output)?;
    let spec = get_remote(registry, remote_name)?;
    let remote = connector.connect(&spec)?;
    let pushed = push(
        registry,
        checkpoint_id,
        remote.as_ref(),
        &PushOptions::default(),
    )?;
    let doc = HandoffDocument {
        version: 2,
        workspace_id: rec.id,
        checkpoint_id: Some(checkpoint_id.to_string()),
        registry_dir: None,
        team: registry.team().map(str::to_string),
        archive: None,
        remote: Some(HandoffRemote {
            url: spec.url,
            endpoint_url: spec.endpoint_url,
            region: spec.region,
        }),
    };
    if let Some(out) = &output {
        write_document(out, &doc)?;
    }
    Ok((doc, pushed))
}

/// Options of `adopt`.
#[derive(Default)]
pub struct AdoptOptions<'a> {
    /// Import sensitive-looking paths (refused without it).
    pub include_sensitive: bool,
    /// Archive bounds; they also narrow the new workspace's limits.
    pub limits: ArchiveLimits,
    pub progress: Option<&'a dyn Progress>,
    /// Opens the remote a handoff through a remote names.
    pub connector: Option<&'a dyn Connector>,
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
    if let (Some(r), Some(cp)) = (&doc.remote, &doc.checkpoint_id) {
        return adopt_pulled(registry, &r.spec(), cp, Some(&doc.workspace_id), root, opts);
    }
    let Some(archive) = &doc.archive else {
        return Err(WsError::InvalidRequest(
            "this is a same-machine handoff with no archive; hand off with --archive to adopt it elsewhere, or use resume --handoff".into(),
        ));
    };
    let root = absolute(root)?;
    check_new_root(&root)?;
    crate::identity::check_root_apart(registry, &root)?;
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
    let restored = restore_adopted(registry, &imported.checkpoint_id, &root, opts);
    clock.lap("restore");
    restored
}

/// Restores a checkpoint just brought in as a new adopted workspace; a
/// failure leaves the checkpoint (`partial_import`).
fn restore_adopted(
    registry: &Registry,
    checkpoint_id: &str,
    root: &Path,
    opts: &AdoptOptions,
) -> Result<WorkspaceResult> {
    let limits = RestoreLimits {
        max_bytes: opts.limits.max_bytes,
        max_files: opts.limits.max_files,
        progress: opts.progress,
    };
    restore_as(registry, checkpoint_id, root, limits, false).map_err(|e| WsError::PartialImport {
        checkpoint_id: checkpoint_id.to_string(),
        reason: e.to_string(),
    })
}

/// Adopts checkpoint `checkpoint_id` of the partition's remote
/// `remote_name`: pulls it (unless this registry holds it already with
/// the remote's very manifest: then nothing is downloaded or written; a
/// different one is `already_exists`) and restores it into the new
/// directory `root` as an adopted workspace.
pub fn adopt_remote(
    registry: &Registry,
    remote_name: &str,
    checkpoint_id: &str,
    root: &Path,
    opts: &AdoptOptions,
) -> Result<WorkspaceResult> {
    let spec = get_remote(registry, remote_name)?;
    adopt_pulled(registry, &spec, checkpoint_id, None, root, opts)
}

/// Pull (when needed) and restore, for both remote forms of adopt. The
/// root is checked before anything is fetched.
fn adopt_pulled(
    registry: &Registry,
    spec: &RemoteSpec,
    checkpoint_id: &str,
    expect_workspace: Option<&str>,
    root: &Path,
    opts: &AdoptOptions,
) -> Result<WorkspaceResult> {
    let root = absolute(root)?;
    check_new_root(&root)?;
    crate::identity::check_root_apart(registry, &root)?;
    let connector = opts.connector.ok_or_else(|| {
        WsError::InvalidRequest(
            "this handoff names a remote, and no remote client was given".into(),
        )
    })?;
    let local = stow_checkpoint::load_manifest(registry, checkpoint_id);
    let remote = connector.connect(spec)?;
    let workspace_id = match local {
        // Held already: reused, once the remote's manifest proves to be
        // the same (nothing is downloaded or written).
        Ok(m) => {
            verify_remote_copy(&m, remote.as_ref())?;
            m.workspace_id
        }
        Err(WsError::NotFound(_)) => {
            let pulled = pull(
                registry,
                checkpoint_id,
                remote.as_ref(),
                &PullOptions {
                    include_sensitive: opts.include_sensitive,
                    limits: opts.limits,
                    progress: opts.progress,
                    expect_workspace,
                },
            )?;
            pulled.checkpoint.workspace_id
        }
        Err(e) => return Err(e),
    };
    if let Some(want) = expect_workspace.filter(|w| *w != workspace_id) {
        return Err(WsError::InvalidRequest(format!(
            "checkpoint {checkpoint_id} belongs to workspace {workspace_id}, not {want} as the handoff says"
        )));
    }
    restore_adopted(registry, checkpoint_id, &root, opts)
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
