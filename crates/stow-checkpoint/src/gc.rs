//! Garbage collection of the blob store: removes blobs no published
//! checkpoint names, under the registry lock.

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;

use serde::Serialize;

use crate::error::Result;
use crate::format::summaries;
use crate::fsutil::fsync_dir;
use crate::layout::{checkpoints_dir, state};
use crate::registry::Registry;
use crate::stored::load_manifest_with_nodes;

/// Collects unreferenced blobs and leftover staging. Caller holds the
/// registry lock, so no capture is running in this partition.
pub(crate) fn gc_locked(registry: &Registry) -> Result<(u64, u64)> {
    let mut needed: HashMap<String, ()> = HashMap::new();
    for s in summaries(registry)? {
        // An unreadable manifest aborts: never delete what might be needed.
        let (m, nodes) = load_manifest_with_nodes(registry, &s.id)?;
        for n in nodes {
            needed.insert(n, ());
        }
        for f in m.files {
            needed.insert(f.sha256, ());
        }
        for o in m.objects {
            needed.insert(o.sha256, ());
        }
    }
    let cps = checkpoints_dir(registry);
    if let Ok(rd) = fs::read_dir(&cps) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with('.') {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
    if let Ok(rd) = fs::read_dir(state(registry).join("tmp")) {
        for e in rd.flatten() {
            // A capture's per-thread staging directories, left by a crash.
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = fs::remove_dir_all(e.path());
            } else {
                let _ = fs::remove_file(e.path());
            }
        }
    }
    let blobs = state(registry).join("blobs");
    let mut doomed: Vec<(PathBuf, u64)> = Vec::new();
    if let Ok(rd) = fs::read_dir(&blobs) {
        for sub in rd.flatten() {
            let Ok(inner) = fs::read_dir(sub.path()) else {
                continue;
            };
            for b in inner.flatten() {
                let name = b.file_name().to_string_lossy().into_owned();
                if !needed.contains_key(&name) {
                    doomed.push((b.path(), b.metadata().map(|m| m.len()).unwrap_or(0)));
                }
            }
        }
    }
    if doomed.is_empty() {
        return Ok((0, 0));
    }
    // Stat caches may name the doomed blobs: drop them first, so a cached
    // digest always names an existing blob (a crash in between only costs
    // re-hashing on the next capture).
    if let Ok(rd) = fs::read_dir(state(registry).join("statcache")) {
        for e in rd.flatten() {
            let _ = fs::remove_file(e.path());
        }
    }
    fsync_dir(&state(registry)).ok();
    // Counted as payloads: tree nodes stand in for manifests, which are
    // not counted either (as in a capture's `stored_bytes`).
    let (mut n, mut bytes) = (0u64, 0u64);
    for (path, size) in doomed {
        let node = crate::tree::is_node_file(&path);
        if fs::remove_file(&path).is_ok() && !node {
            n += 1;
            bytes += size;
        }
    }
    Ok((n, bytes))
}

/// The result of `workspace gc`.
#[derive(Debug, Clone, Serialize)]
pub struct GcResult {
    pub version: u32,
    pub registry_dir: PathBuf,
    /// Blobs no published checkpoint named, now deleted.
    pub freed_blobs: u64,
    pub freed_bytes: u64,
}

/// Removes blobs no published checkpoint names (left by refused or
/// cancelled captures and interrupted imports) and leftover staging, under
/// the registry lock. A partition that does not exist is left uncreated.
pub fn gc(registry: &Registry) -> Result<GcResult> {
    let (freed_blobs, freed_bytes) = if registry.state_dir().is_dir() {
        let _lock = registry.lock()?;
        gc_locked(registry)?
    } else {
        (0, 0)
    };
    Ok(GcResult {
        version: 1,
        registry_dir: registry.dir().to_path_buf(),
        freed_blobs,
        freed_bytes,
    })
}
