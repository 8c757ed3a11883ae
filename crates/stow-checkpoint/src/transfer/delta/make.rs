//! Making a delta: the changes from one checkpoint to another, with the
//! target's bytes.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use sha2::{Digest, Sha256};

use super::*;
use crate::error::{Result, WsError};
use crate::fsutil::{absolute, hex, now_rfc3339, write_new_file};
use crate::registry::Registry;
use crate::{diff_buckets, diff_files_exact, diff_links, diff_objects, load_manifest, read_blob};

/// Records the changes from checkpoint `base` to `target` (of one
/// workspace) with the target's bytes in a new file `output`.
///
/// Long because the file, link, bucket and object changes and their
/// bytes are gathered in one pass over the two manifests, each bounded as
/// it is added.
pub fn delta(
    registry: &Registry,
    base: &str,
    target: &str,
    output: &Path,
    opts: DeltaOptions,
) -> Result<DeltaResult> {
    let a = load_manifest(registry, base)?;
    let b = load_manifest(registry, target)?;
    if a.workspace_id != b.workspace_id {
        return Err(WsError::InvalidRequest(format!(
            "delta crosses workspaces: {base} belongs to {}, {target} to {}",
            a.workspace_id, b.workspace_id
        )));
    }
    if a.version != b.version {
        return Err(WsError::InvalidRequest(
            "a delta joins two file checkpoints or two portable ones, not one of each".into(),
        ));
    }
    let output = absolute(output)?;
    if fs::symlink_metadata(&output).is_ok() {
        return Err(WsError::AlreadyExists(output.display().to_string()));
    }
    let changes = diff_files_exact(&a.files, &b.files);
    let portable = a.version == 2;
    let bucket_changes = if portable {
        diff_buckets(&a.buckets, &b.buckets)
    } else {
        Vec::new()
    };
    let object_changes = if portable {
        diff_objects(&a.objects, &b.objects)
    } else {
        Vec::new()
    };
    let link_changes = diff_links(&a.links, &b.links);
    let sensitive = first_sensitive(&changes, &link_changes, &object_changes).map(str::to_string);
    if let (Some(path), false) = (&sensitive, opts.include_sensitive) {
        return Err(WsError::SensitivePath {
            path: path.clone(),
            opt_in: "--include-sensitive",
        });
    }
    let count = changes.len() + object_changes.len() + link_changes.len();
    let max_files = if opts.limits.max_files == 0 {
        MAX_CHANGES as u64
    } else {
        opts.limits.max_files.min(MAX_CHANGES as u64)
    };
    if count as u64 > max_files {
        return Err(WsError::CapacityExceeded(format!(
            "the delta holds {count} changes, over the limit of {max_files}"
        )));
    }
    let cap = match opts.limits.max_bytes {
        0 => MAX_DELTA_BYTES,
        n => n.min(MAX_DELTA_BYTES),
    };
    let file_bytes: u64 = changes
        .iter()
        .filter_map(|c| c.to.as_ref())
        .map(|t| t.size)
        .sum();
    let mut bodies: BTreeMap<String, u64> = BTreeMap::new();
    for t in object_changes.iter().filter_map(|c| c.to.as_ref()) {
        bodies.insert(t.sha256.clone(), t.size);
    }
    let bytes = file_bytes + bodies.values().sum::<u64>();
    if bytes > cap {
        return Err(WsError::CapacityExceeded(format!(
            "the delta carries {bytes} content bytes, over the limit of {cap}"
        )));
    }
    let mut content = BTreeMap::new();
    for t in changes.iter().filter_map(|c| c.to.as_ref()) {
        content.insert(t.path.clone(), B64.encode(read_blob(registry, t)?));
    }
    let mut object_content = BTreeMap::new();
    for t in object_changes.iter().filter_map(|c| c.to.as_ref()) {
        if !object_content.contains_key(&t.sha256) {
            let body = read_blob(registry, &crate::object_as_file(t))?;
            object_content.insert(t.sha256.clone(), B64.encode(body));
        }
    }
    let doc = DeltaDocument {
        version: a.version,
        workspace_id: a.workspace_id.clone(),
        base_id: a.id.clone(),
        target_id: b.id.clone(),
        created: now_rfc3339(),
        files: changes.len() as u64,
        bytes,
        changes,
        bucket_changes,
        object_changes,
        content,
        object_content,
        include_sensitive: sensitive.is_some(),
        link_changes,
        dirs: (a.dirs != b.dirs).then(|| b.dirs.clone()),
        message: b.message.clone(),
    };
    let raw = serde_json::to_vec(&doc)
        .map_err(|e| WsError::InvalidRequest(format!("encode delta: {e}")))?;
    // Refused here, before anything is written, rather than by `apply`.
    super::check::check_document_size(raw.len() as u64)?;
    write_new_file(&output, &raw, 0o600)?;
    Ok(DeltaResult {
        version: doc.version,
        workspace_id: doc.workspace_id,
        base_id: doc.base_id,
        target_id: doc.target_id,
        document: output,
        sha256: hex(&Sha256::digest(&raw)),
        files: doc.files,
        bytes,
        objects: portable.then_some(doc.object_changes.len() as u64),
    })
}
