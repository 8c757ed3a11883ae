//! The rewind journal and the keyed rewind receipts, in the registry.
//!
//! ```text
//! R/.stow/rewind/<ws>.json                 the plan of a rewind under way
//! R/.stow/rewind/receipts/<digest>.json    the result of a keyed rewind
//! ```
//!
//! The journal is written (fsynced, renamed into place) after the undo
//! checkpoint is published and the new bytes are staged, before the first
//! change to the tree, and removed after the last change is flushed and
//! the head moved. While it exists the workspace's next rewind, capture,
//! status or check finishes it first. A receipt is written before the
//! journal is removed, so a keyed rewind that finished has one.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::plan::Step;
use super::RewindResult;
use crate::error::{Result, WsError};
use crate::fsutil::{atomic_write, create_durable_private_dir, fsync_dir};
use crate::layout::state;
use crate::registry::Registry;

/// The journal of a rewind under way.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Journal {
    pub version: u32,
    pub workspace_id: String,
    /// Names the stage directory `<root>/.stow/rewind/<run>`.
    pub run: String,
    /// The checkpoint rewound to.
    pub target: String,
    /// The undo checkpoint (complete and published before this journal).
    pub undo: String,
    /// `--paths` (empty: the whole tree).
    pub scope: Vec<String>,
    /// Where the head goes once the steps ran.
    pub head: String,
    pub unchanged: u64,
    pub skipped: Vec<String>,
    /// The keyed request this rewind answers, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<KeyDigests>,
    /// A portable target: the bucket view is rewound after the files.
    #[serde(default)]
    pub bucket: bool,
    pub steps: Vec<Step>,
}

/// What identifies a keyed rewind: its key, and its inputs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KeyDigests {
    pub request_digest: String,
    pub inputs_digest: String,
}

/// A keyed rewind's stored result.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Receipt {
    version: u32,
    #[serde(flatten)]
    key: KeyDigests,
    result: RewindResult,
}

fn dir(registry: &Registry) -> PathBuf {
    state(registry).join("rewind")
}

fn journal_path(registry: &Registry, ws: &str) -> PathBuf {
    dir(registry).join(format!("{ws}.json"))
}

fn receipt_path(registry: &Registry, key: &KeyDigests) -> PathBuf {
    dir(registry)
        .join("receipts")
        .join(format!("{}.json", key.request_digest))
}

/// Writes the journal durably.
pub(crate) fn write(registry: &Registry, j: &Journal) -> Result<()> {
    // The journal must outlive a power cut from here on: the first
    // rewind of a registry makes its directory, whose own name must be
    // durable too.
    create_durable_private_dir(&dir(registry))?;
    let bytes = serde_json::to_vec(j)
        .map_err(|e| WsError::InvalidRequest(format!("encode the rewind journal: {e}")))?;
    atomic_write(&journal_path(registry, &j.workspace_id), &bytes, 0o600)
}

/// The journal of a rewind of `ws` under way, if any.
pub(crate) fn read(registry: &Registry, ws: &str) -> Result<Option<Journal>> {
    let path = journal_path(registry, ws);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| WsError::Corrupt(format!("rewind journal {}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(WsError::io_at("read", &path, e)),
    }
}

/// Whether a rewind of `ws` is under way (or was interrupted).
pub(crate) fn exists(registry: &Registry, ws: &str) -> bool {
    journal_path(registry, ws).exists()
}

/// The workspaces with a rewind under way (or interrupted).
pub(crate) fn pending(registry: &Registry) -> Result<Vec<String>> {
    let d = dir(registry);
    let rd = match std::fs::read_dir(&d) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(WsError::io_at("read directory", &d, e)),
    };
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| WsError::io_at("read directory", &d, e))?;
        let name = entry.file_name();
        if let Some(ws) = name.to_str().and_then(|n| n.strip_suffix(".json")) {
            if crate::paths::check_workspace_id(ws).is_ok() {
                out.push(ws.to_string());
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Removes the journal durably.
pub(crate) fn remove(registry: &Registry, ws: &str) -> Result<()> {
    let path = journal_path(registry, ws);
    match std::fs::remove_file(&path) {
        Ok(()) => fsync_dir(&dir(registry)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(WsError::io_at("remove", &path, e)),
    }
}

/// The stored result of the keyed rewind `key` names: `Ok(None)` when
/// none ran, `RequestConflict` when one ran with other inputs.
pub(crate) fn replay(registry: &Registry, key: &KeyDigests) -> Result<Option<RewindResult>> {
    let path = receipt_path(registry, key);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(WsError::io_at("read", &path, e)),
    };
    let r: Receipt = serde_json::from_slice(&bytes)
        .map_err(|e| WsError::Corrupt(format!("rewind receipt {}: {e}", path.display())))?;
    if r.key != *key {
        return Err(WsError::RequestConflict);
    }
    Ok(Some(r.result))
}

/// Stores a keyed rewind's result durably.
pub(crate) fn store_receipt(
    registry: &Registry,
    key: &KeyDigests,
    result: &RewindResult,
) -> Result<()> {
    let path = receipt_path(registry, key);
    create_durable_private_dir(path.parent().unwrap_or(&dir(registry)))?;
    let bytes = serde_json::to_vec(&Receipt {
        version: 1,
        key: key.clone(),
        result: result.clone(),
    })
    .map_err(|e| WsError::InvalidRequest(format!("encode a rewind receipt: {e}")))?;
    atomic_write(&path, &bytes, 0o600)
}

/// Forgets the journal of `ws` (the workspace is gone; its receipts are
/// keyed by digest and stay harmless).
pub(crate) fn forget(registry: &Registry, ws: &str) {
    let _ = std::fs::remove_file(journal_path(registry, ws));
}
