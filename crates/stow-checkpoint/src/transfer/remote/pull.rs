//! Pull: a remote checkpoint's manifest and the blobs this registry lacks,
//! every byte verified against the manifest, then published through the
//! same path as import. And the listing of what a remote holds.

use serde::Serialize;

use super::document::{decode_remote, distinct_payloads, fetch_document, remote_read_error};
use super::{blob_key, manifest_key, parallel, RemoteStore};
use crate::archive::{admit_outside_manifest, ArchiveLimits};
use crate::error::{Result, WsError};
use crate::paths::check_checkpoint_id;
use crate::progress::Progress;
use crate::registry::Registry;
use crate::Origin;
use crate::{
    blob_ok, discard, publish, stage_reader, CheckpointResult, FileEntry, Payload, StageError,
    Summary,
};

/// Options of a pull.
#[derive(Default)]
pub struct PullOptions<'a> {
    /// Accept sensitive-looking paths (refused without it).
    pub include_sensitive: bool,
    /// Bounds on the checkpoint (defaults as for archives: 1 GiB, 100,000).
    pub limits: ArchiveLimits,
    /// Receives payload bytes downloaded or found here.
    pub progress: Option<&'a dyn Progress>,
    /// Refuse a checkpoint of any other workspace (a handoff's).
    pub expect_workspace: Option<&'a str>,
}

/// What a pull published.
#[derive(Debug, Clone, Serialize)]
pub struct PullResult {
    #[serde(flatten)]
    pub checkpoint: CheckpointResult,
    pub remote_url: String,
    /// Distinct payloads downloaded, and their bytes.
    pub downloaded_blobs: u64,
    pub downloaded_bytes: u64,
    /// Distinct payloads this registry already held.
    pub local_blobs: u64,
}

/// Pulls checkpoint `checkpoint_id` from `remote` into `registry`. The
/// manifest is checked by every rule an imported one is (and against the
/// bounds and this registry's retention); each missing blob is staged
/// while it is hashed and must match its name and size, or the pull is
/// refused (`corrupt_remote`) and nothing is published. Holds the registry
/// lock from admission to publication, like import.
pub fn pull(
    registry: &Registry,
    checkpoint_id: &str,
    remote: &dyn RemoteStore,
    opts: &PullOptions,
) -> Result<PullResult> {
    check_checkpoint_id(checkpoint_id)?;
    let key = manifest_key(checkpoint_id);
    let bytes = fetch_document(remote, &key)?.ok_or_else(|| {
        WsError::NotFound(format!("checkpoint {checkpoint_id} on {}", remote.url()))
    })?;
    let m = decode_remote(&bytes, &key, opts.limits)?;
    if m.id != checkpoint_id {
        return Err(WsError::CorruptRemote(format!(
            "{key} holds checkpoint {}",
            m.id
        )));
    }
    if let Some(want) = opts.expect_workspace.filter(|w| *w != m.workspace_id) {
        return Err(WsError::InvalidRequest(format!(
            "checkpoint {checkpoint_id} on the remote belongs to workspace {}, not {want}",
            m.workspace_id
        )));
    }
    let _lock = admit_outside_manifest(registry, &m, opts.include_sensitive)?;
    let tmp = registry.state_dir().join("tmp");
    let payloads = distinct_payloads(&m);
    let total: u64 = payloads.iter().map(|f| f.size).sum();
    let missing: Vec<&FileEntry> = payloads
        .iter()
        .filter(|f| !blob_ok(registry, &f.sha256, f.size))
        .collect();
    let done =
        std::sync::atomic::AtomicU64::new(total - missing.iter().map(|f| f.size).sum::<u64>());
    let staged: std::sync::Mutex<Vec<Payload>> = std::sync::Mutex::new(Vec::new());
    let fetched = parallel(&missing, |f| -> Result<()> {
        let p = download(registry, remote, &tmp, f)?;
        if let Ok(mut all) = staged.lock() {
            all.push(p);
        }
        let now = done.fetch_add(f.size, std::sync::atomic::Ordering::Relaxed) + f.size;
        if let Some(progress) = opts.progress {
            progress.update("pull", now, total);
        }
        Ok(())
    });
    let staged = staged.into_inner().unwrap_or_default();
    if let Err(e) = fetched {
        discard(&staged);
        return Err(e);
    }
    // Publication order: the manifest's (files, then object bodies).
    let by_sha: std::collections::HashMap<&str, &Payload> =
        staged.iter().map(|p| (p.sha256.as_str(), p)).collect();
    let present: std::collections::HashMap<&str, Payload> = payloads
        .iter()
        .filter(|f| !by_sha.contains_key(f.sha256.as_str()))
        .map(|f| {
            let p = Payload {
                sha256: f.sha256.clone(),
                staged: None,
            };
            (f.sha256.as_str(), p)
        })
        .collect();
    let order: Vec<(&Payload, u64)> = payloads
        .iter()
        .filter_map(|f| {
            let sha = f.sha256.as_str();
            let p = by_sha.get(sha).copied().or_else(|| present.get(sha))?;
            Some((p, f.size))
        })
        .collect();
    let summary = Summary::of_outside(&m, Origin::Pull);
    let stored = match publish(registry, &m.id, &order, &m, &summary) {
        Ok(n) => n,
        Err(e) => {
            discard(&staged);
            return Err(e);
        }
    };
    Ok(PullResult {
        checkpoint: CheckpointResult::of(&m, stored),
        remote_url: remote.url(),
        downloaded_blobs: missing.len() as u64,
        downloaded_bytes: missing.iter().map(|f| f.size).sum(),
        local_blobs: (payloads.len() - missing.len()) as u64,
    })
}

/// Downloads one blob into staging, verifying its size and digest.
fn download(
    registry: &Registry,
    remote: &dyn RemoteStore,
    tmp: &std::path::Path,
    f: &FileEntry,
) -> Result<Payload> {
    let key = blob_key(&f.sha256);
    let mut reader = remote.get(&key)?.ok_or_else(|| {
        WsError::CorruptRemote(format!(
            "{key} is missing from the remote, yet a manifest there names it"
        ))
    })?;
    let p = match stage_reader(registry, tmp, &mut reader, f.size) {
        Ok(p) => p,
        Err(StageError::Size { got }) => {
            return Err(WsError::CorruptRemote(format!(
                "{key} holds {}{got} bytes; the manifest says {}",
                if got > f.size { "more than " } else { "" },
                f.size
            )))
        }
        Err(StageError::Io(e)) => return Err(remote_read_error(&key, e)),
    };
    if p.sha256 != f.sha256 {
        discard(std::slice::from_ref(&p));
        return Err(WsError::CorruptRemote(format!(
            "{key} holds bytes whose sha256 is {}",
            p.sha256
        )));
    }
    Ok(p)
}

/// One checkpoint a remote holds.
#[derive(Debug, Clone, Serialize)]
pub struct RemoteCheckpoint {
    pub checkpoint_id: String,
    /// Size of the manifest object.
    pub manifest_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_checkpoint_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Why the manifest could not be read, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// The checkpoints of a remote.
#[derive(Debug, Clone, Serialize)]
pub struct RemoteListResult {
    pub remote_url: String,
    pub checkpoints: Vec<RemoteCheckpoint>,
}

/// Lists the checkpoints `remote` holds, in ID order, with what each
/// manifest says (read in parallel; one that does not decode is listed
/// with its problem).
pub fn remote_list(remote: &dyn RemoteStore) -> Result<RemoteListResult> {
    let listed: Vec<(String, u64)> = remote
        .list("checkpoints/")?
        .into_iter()
        .filter_map(|(k, size)| {
            let id = k.strip_prefix("checkpoints/")?.strip_suffix(".json")?;
            check_checkpoint_id(id).ok()?;
            Some((id.to_string(), size))
        })
        .collect();
    let limits = ArchiveLimits {
        max_bytes: u64::MAX,
        max_files: u64::MAX,
    };
    let checkpoints = parallel(&listed, |(id, size)| -> Result<RemoteCheckpoint> {
        let mut row = RemoteCheckpoint {
            checkpoint_id: id.clone(),
            manifest_bytes: *size,
            workspace_id: None,
            parent_checkpoint_id: None,
            created: None,
            files: None,
            bytes: None,
            problem: None,
        };
        let key = manifest_key(id);
        let decoded = match fetch_document(remote, &key) {
            Ok(Some(bytes)) => decode_remote(&bytes, &key, limits),
            Ok(None) => Err(WsError::NotFound(key.clone())),
            Err(e @ WsError::Remote(_)) => return Err(e),
            Err(e) => Err(e),
        };
        match decoded {
            Ok(m) if m.id == *id => {
                let s = Summary::of_outside(&m, Origin::Pull);
                row.workspace_id = Some(s.workspace_id);
                row.parent_checkpoint_id = s.parent_id;
                row.created = Some(s.created);
                row.files = Some(s.files);
                row.bytes = Some(s.bytes);
            }
            Ok(m) => row.problem = Some(format!("it holds checkpoint {}", m.id)),
            Err(e) => row.problem = Some(e.to_string()),
        }
        Ok(row)
    })?;
    Ok(RemoteListResult {
        remote_url: remote.url(),
        checkpoints,
    })
}
