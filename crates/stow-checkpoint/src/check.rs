//! Checking a registry partition: every published checkpoint's manifest
//! and tree nodes read back (digest-checked), and every payload it names
//! read against its SHA-256 (or, quick, only found with its size). Names
//! exactly which checkpoints are damaged and how.

use std::collections::HashMap;
use std::path::PathBuf;

use serde::Serialize;

use crate::blobs::{blob_ok, verify_blob};
use crate::error::Result;
use crate::format::{object_as_file, summaries, FileEntry};
use crate::registry::Registry;
use crate::stored::load_manifest_with_nodes;

/// A damaged checkpoint and what is wrong with it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Damage {
    pub checkpoint_id: String,
    pub workspace_id: String,
    /// One line per problem: the manifest, or a path and its payload.
    pub problems: Vec<String>,
}

/// The result of `workspace check`.
#[derive(Debug, Clone, Serialize)]
pub struct RegistryCheck {
    pub version: u32,
    pub registry_dir: PathBuf,
    /// Published checkpoints checked.
    pub checkpoints: u64,
    /// Distinct payloads checked.
    pub payloads: u64,
    /// Payload bytes read (0 for a quick check).
    pub bytes_read: u64,
    pub damaged: Vec<Damage>,
    /// Workspaces whose interrupted rewind the check finished first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rewinds_finished: Vec<String>,
    /// Interrupted rewinds the check could not finish, with why (the
    /// workspace is busy, or its tree cannot be written).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rewinds_unfinished: Vec<UnfinishedRewind>,
}

/// An interrupted rewind `check` could not finish.
#[derive(Debug, Clone, Serialize)]
pub struct UnfinishedRewind {
    pub workspace_id: String,
    pub code: &'static str,
    pub message: String,
}

/// Checks every published checkpoint of the partition, under the registry
/// lock (so GC cannot remove a blob meanwhile). `quick`: payloads are only
/// looked up (present, right size), not read.
pub fn check(registry: &Registry, quick: bool) -> Result<RegistryCheck> {
    let mut out = RegistryCheck {
        version: 1,
        registry_dir: registry.dir().to_path_buf(),
        checkpoints: 0,
        payloads: 0,
        bytes_read: 0,
        damaged: Vec::new(),
        rewinds_finished: Vec::new(),
        rewinds_unfinished: Vec::new(),
    };
    if !registry.state_dir().is_dir() {
        return Ok(out);
    }
    // Interrupted rewinds first: their trees are then ones the
    // checkpoints describe.
    for (ws, finished) in crate::apply::finish_all_pending(registry)? {
        match finished {
            Ok(()) => out.rewinds_finished.push(ws),
            Err(e) => out.rewinds_unfinished.push(UnfinishedRewind {
                workspace_id: ws,
                code: e.code(),
                message: e.to_string(),
            }),
        }
    }
    let _lock = registry.lock()?;
    // A payload shared by many checkpoints is read once.
    let mut verdicts: HashMap<String, Option<String>> = HashMap::new();
    for s in summaries(registry)? {
        out.checkpoints += 1;
        let mut problems = Vec::new();
        match load_manifest_with_nodes(registry, &s.id) {
            Err(e) => problems.push(format!("manifest: {e}")),
            Ok((m, _)) => {
                let payloads = m
                    .files
                    .iter()
                    .cloned()
                    .chain(m.objects.iter().map(object_as_file));
                for f in payloads {
                    let verdict = verdicts.entry(f.sha256.clone()).or_insert_with(|| {
                        out.payloads += 1;
                        check_payload(registry, &f, quick, &mut out.bytes_read)
                    });
                    if let Some(problem) = verdict {
                        problems.push(format!("{}: {problem}", f.path));
                    }
                }
            }
        }
        if !problems.is_empty() {
            out.damaged.push(Damage {
                checkpoint_id: s.id.clone(),
                workspace_id: s.workspace_id.clone(),
                problems,
            });
        }
    }
    Ok(out)
}

/// What is wrong with the payload of `f`, if anything.
fn check_payload(
    registry: &Registry,
    f: &FileEntry,
    quick: bool,
    bytes_read: &mut u64,
) -> Option<String> {
    if quick {
        return (!blob_ok(registry, &f.sha256, f.size))
            .then(|| format!("payload {} is missing or not {} bytes", f.sha256, f.size));
    }
    *bytes_read += f.size;
    verify_blob(registry, f).err().map(|e| e.to_string())
}
