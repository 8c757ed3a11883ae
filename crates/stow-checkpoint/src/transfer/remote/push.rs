//! Push: a local checkpoint's blobs the remote lacks, then its manifest,
//! all with create-only writes.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use super::document::{decode_remote, distinct_payloads, fetch_document};
use super::{
    blob_key, manifest_key, parallel, Body, Created, RemoteError, RemoteObject, RemoteStore,
};
use crate::archive::{check_sensitive, manifest_document, ArchiveLimits};
use crate::error::{Result, WsError};
use crate::progress::Progress;
use crate::registry::Registry;
use crate::{load_manifest, open_verified, CheckpointManifest, FileEntry};

/// Blobs up to this size are read whole and sent in one PUT; larger ones
/// stream from the blob file (in parts, by the remote store).
const SMALL_BLOB: u64 = 8 << 20;

/// With more unknown blobs than this, one listing of `blobs/` is cheaper
/// than a HEAD per blob...
const LIST_OVER: usize = 256;
/// ...unless the remote holds more than this many blobs per unknown one: the
/// listing stops there (a page of a listing names up to 1,000 keys, so
/// what it asked cost at most a 16th of the HEADs), and the HEADs go on.
/// It also bounds what a listing holds in memory.
const LIST_AT_MOST_PER_UNKNOWN: usize = 64;

/// Options of a push.
#[derive(Default)]
pub struct PushOptions<'a> {
    /// Push a checkpoint holding sensitive-looking paths (refused without
    /// it, as export refuses: a remote is shared).
    pub include_sensitive: bool,
    /// Receives bytes uploaded or found present.
    pub progress: Option<&'a dyn Progress>,
}

/// What a push did.
#[derive(Debug, Clone, Serialize)]
pub struct PushResult {
    pub checkpoint_id: String,
    pub workspace_id: String,
    /// `s3://bucket/prefix` of the remote.
    pub remote_url: String,
    /// Distinct payloads uploaded by this push, and their bytes.
    pub uploaded_blobs: u64,
    pub uploaded_bytes: u64,
    /// Distinct payloads the remote already held (not sent again).
    pub skipped_blobs: u64,
    pub skipped_bytes: u64,
    /// `uploaded`, or `already_present` (the remote had this checkpoint).
    pub manifest: &'static str,
}

/// Pushes checkpoint `checkpoint_id` of `registry` to `remote`: every blob
/// the remote lacks (create-only; a blob already there must have the
/// right size and recorded digest), then the manifest (create-only, last).
/// Blobs the remote's copy of the parent checkpoint names are known to be
/// there. A rerun after an interruption sends nothing twice; pushing a
/// checkpoint the remote already has is a no-op, and one that differs
/// from the remote's is refused (`already_exists`).
pub fn push(
    registry: &Registry,
    checkpoint_id: &str,
    remote: &dyn RemoteStore,
    opts: &PushOptions,
) -> Result<PushResult> {
    let m = load_manifest(registry, checkpoint_id)?;
    check_sensitive(&m, opts.include_sensitive)?;
    let doc = manifest_document(&m)?;
    let payloads = distinct_payloads(&m);
    let total: u64 = payloads.iter().map(|f| f.size).sum();
    let mut result = PushResult {
        checkpoint_id: m.id.clone(),
        workspace_id: m.workspace_id.clone(),
        remote_url: remote.url(),
        uploaded_blobs: 0,
        uploaded_bytes: 0,
        skipped_blobs: 0,
        skipped_bytes: 0,
        manifest: "uploaded",
    };
    let key = manifest_key(&m.id);
    if let Some(theirs) = fetch_document(remote, &key)? {
        same_checkpoint(&m, &theirs, &key)?;
        result.skipped_blobs = payloads.len() as u64;
        result.skipped_bytes = total;
        result.manifest = "already_present";
        return Ok(result);
    }
    let known = parent_blobs(&m, remote)?;
    let unknown: Vec<&FileEntry> = payloads
        .iter()
        .filter(|f| !known.contains(&f.sha256))
        .collect();
    let listed: Option<HashMap<String, u64>> = if unknown.len() > LIST_OVER {
        let most = unknown.len().saturating_mul(LIST_AT_MOST_PER_UNKNOWN);
        remote.list_at_most("blobs/", most)?.map(|keys| {
            keys.into_iter()
                .filter_map(|(k, size)| Some((k.strip_prefix("blobs/")?.to_string(), size)))
                .collect()
        })
    } else {
        None
    };
    let done = AtomicU64::new(total - unknown.iter().map(|f| f.size).sum::<u64>());
    let report = |n: u64| {
        let now = done.fetch_add(n, Ordering::Relaxed) + n;
        if let Some(p) = opts.progress {
            p.update("push", now, total);
        }
    };
    let sent = parallel(&unknown, |f| -> Result<bool> {
        let present = match &listed {
            Some(map) => map
                .get(&f.sha256)
                .map(|&size| RemoteObject { size, sha256: None }),
            None => remote.head(&blob_key(&f.sha256))?,
        };
        let uploaded = match present {
            Some(obj) => {
                check_remote_blob(f, &obj)?;
                false
            }
            None => upload_blob(registry, remote, f)?,
        };
        report(f.size);
        Ok(uploaded)
    })?;
    for (f, uploaded) in unknown.iter().zip(&sent) {
        if *uploaded {
            result.uploaded_blobs += 1;
            result.uploaded_bytes += f.size;
        }
    }
    result.skipped_blobs = payloads.len() as u64 - result.uploaded_blobs;
    result.skipped_bytes = total - result.uploaded_bytes;
    match remote.create(&key, Body::Bytes(doc), "")? {
        Created::Created => {}
        Created::AlreadyExists => {
            // A concurrent push of the same checkpoint won the race.
            let theirs = fetch_document(remote, &key)?.ok_or_else(|| {
                WsError::Remote(RemoteError::new(
                    super::RemoteFailure::Failed,
                    format!("{key} was refused as existing but cannot be read"),
                ))
            })?;
            same_checkpoint(&m, &theirs, &key)?;
            result.manifest = "already_present";
        }
    }
    Ok(result)
}

/// Checks that `remote` holds checkpoint `m` (one this registry holds)
/// with the very same manifest, as adopt must before it reuses `m`:
/// `not_found` when the remote lacks it, `already_exists` when the
/// remote's differs.
pub fn verify_remote_copy(m: &CheckpointManifest, remote: &dyn RemoteStore) -> Result<()> {
    let key = manifest_key(&m.id);
    let theirs = fetch_document(remote, &key)?
        .ok_or_else(|| WsError::NotFound(format!("checkpoint {} on {}", m.id, remote.url())))?;
    same_checkpoint(m, &theirs, &key)
}

/// Refuses when the remote's manifest at `key` is not checkpoint `m`.
fn same_checkpoint(m: &CheckpointManifest, theirs: &[u8], key: &str) -> Result<()> {
    let limits = ArchiveLimits {
        max_bytes: u64::MAX,
        max_files: u64::MAX,
    };
    let theirs = decode_remote(theirs, key, limits)?;
    if manifest_document(&theirs)? != manifest_document(m)? {
        return Err(WsError::AlreadyExists(format!(
            "checkpoint {} on the remote, with different contents",
            m.id
        )));
    }
    Ok(())
}

/// The digests the remote's copy of `m`'s parent names (all on the remote:
/// a manifest is written only after its blobs).
fn parent_blobs(m: &CheckpointManifest, remote: &dyn RemoteStore) -> Result<HashSet<String>> {
    let Some(parent) = &m.parent_id else {
        return Ok(HashSet::new());
    };
    let key = manifest_key(parent);
    let Some(bytes) = fetch_document(remote, &key)? else {
        return Ok(HashSet::new());
    };
    let limits = ArchiveLimits {
        max_bytes: u64::MAX,
        max_files: u64::MAX,
    };
    let pm = decode_remote(&bytes, &key, limits)?;
    Ok(distinct_payloads(&pm)
        .into_iter()
        .map(|f| f.sha256)
        .collect())
}

/// A blob already on the remote must be the one its name promises.
fn check_remote_blob(f: &FileEntry, obj: &RemoteObject) -> Result<()> {
    let digest_differs = obj.sha256.as_deref().is_some_and(|d| d != f.sha256);
    if obj.size != f.size || digest_differs {
        return Err(WsError::CorruptRemote(format!(
            "{} is {} bytes{} on the remote; its name says {} bytes, sha256 {}",
            blob_key(&f.sha256),
            obj.size,
            obj.sha256
                .as_deref()
                .map(|d| format!(" with sha256 {d}"))
                .unwrap_or_default(),
            f.size,
            f.sha256
        )));
    }
    Ok(())
}

/// Uploads one local blob, read through its verification (a damaged local
/// blob fails the read and creates nothing). `false` when a concurrent
/// writer created it first (and it checks out).
fn upload_blob(registry: &Registry, remote: &dyn RemoteStore, f: &FileEntry) -> Result<bool> {
    let mut blob = open_verified(registry, f)?;
    let body = if f.size <= SMALL_BLOB {
        let mut bytes = Vec::with_capacity(f.size as usize);
        blob.read_to_end(&mut bytes)
            .map_err(|e| WsError::Corrupt(format!("local blob {}: {e}", f.sha256)))?;
        Body::Bytes(bytes)
    } else {
        Body::Reader {
            reader: Box::new(blob),
            size: f.size,
        }
    };
    let key = blob_key(&f.sha256);
    match remote.create(&key, body, &f.sha256)? {
        Created::Created => Ok(true),
        Created::AlreadyExists => {
            let obj = remote.head(&key)?.ok_or_else(|| {
                WsError::Remote(RemoteError::new(
                    super::RemoteFailure::Failed,
                    format!("{key} was refused as existing but is absent"),
                ))
            })?;
            check_remote_blob(f, &obj)?;
            Ok(false)
        }
    }
}
