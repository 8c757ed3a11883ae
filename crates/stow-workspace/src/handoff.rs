//! Handoff documents: version 1 names a workspace in a registry on this
//! machine (`resume`); version 2 also carries a portable archive of a
//! checkpoint (`adopt` on another machine).

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, WsError};
use crate::fsutil::atomic_write;
use crate::prepare::WorkspaceResult;
use crate::registry::Registry;

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
    pub archive: Option<serde_json::Value>,
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

/// Writes a same-machine (version 1) handoff document for a workspace,
/// without claiming it. Returns the document.
pub fn handoff(
    registry: &Registry,
    id: &str,
    checkpoint_id: Option<&str>,
    output: Option<&Path>,
) -> Result<HandoffDocument> {
    let rec = registry.get(id)?;
    if let Some(cp) = checkpoint_id {
        crate::checkpoint::check_belongs(registry, cp, &rec.id)?;
    }
    let doc = HandoffDocument {
        version: 1,
        workspace_id: rec.id,
        checkpoint_id: checkpoint_id.map(str::to_string),
        registry_dir: Some(registry.dir().to_path_buf()),
        team: registry.team().map(str::to_string),
        archive: None,
    };
    if let Some(out) = output {
        if fs::symlink_metadata(out).is_ok() {
            return Err(WsError::InvalidRequest(format!(
                "{} already exists",
                out.display()
            )));
        }
        let mut bytes = serde_json::to_vec_pretty(&doc)
            .map_err(|e| WsError::InvalidRequest(format!("encode handoff: {e}")))?;
        bytes.push(b'\n');
        let out = crate::fsutil::absolute(out)?;
        atomic_write(&out, &bytes, 0o600)?;
    }
    Ok(doc)
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
