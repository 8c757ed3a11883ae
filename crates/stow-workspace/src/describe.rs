//! What prepare, attach, resume and restore answer: the launch descriptor
//! of a workspace and its effective capabilities.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use stow_checkpoint::registry::Record;

/// A resolved Git input, as reported in `repositories[]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RepositoryResult {
    /// Absolute top level of the source repository.
    pub source: PathBuf,
    pub destination: String,
    #[serde(rename = "ref")]
    pub reference: String,
    pub commit: String,
}

/// Retention caps reported in capabilities (0 = unlimited).
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct CheckpointLimits {
    pub max_bytes: u64,
    pub max_count: u64,
}

/// Registry headroom: with no bound `limit` is 0 and `remaining` is null.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct RegistryBound {
    pub limit: u64,
    pub count: u64,
    pub remaining: Option<u64>,
}

impl RegistryBound {
    /// The bound report for `limit` (0 = none) and `count` records.
    pub fn new(limit: u64, count: u64) -> RegistryBound {
        RegistryBound {
            limit,
            count,
            remaining: (limit > 0).then(|| limit.saturating_sub(count)),
        }
    }
}

/// Effective capabilities of a workspace.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Capabilities {
    pub backend: &'static str,
    pub max_bytes: u64,
    pub max_objects: u64,
    pub persistent: bool,
    pub multipart: bool,
    pub upstream: bool,
    pub checkpoint_limits: CheckpointLimits,
    pub registry_bound: RegistryBound,
}

/// The launch descriptor of prepare, resume and restore.
#[derive(Debug, Clone, Serialize)]
pub struct WorkspaceResult {
    pub version: u32,
    pub workspace_id: String,
    pub root: PathBuf,
    pub working_directory: PathBuf,
    pub bucket: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registry_dir: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    #[serde(skip_serializing_if = "is_zero")]
    pub seeded_bytes: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub seeded_objects: u64,
    pub base_identity: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub repositories: Vec<RepositoryResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint_id: Option<String>,
    pub capabilities: Capabilities,
    pub authority: Vec<String>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// Capabilities of a record with a registry bound report.
pub fn capabilities(rec: &Record, bound: RegistryBound) -> Capabilities {
    Capabilities {
        backend: "workspace",
        max_bytes: rec.max_bytes,
        max_objects: rec.max_objects,
        persistent: true,
        multipart: true,
        upstream: false,
        checkpoint_limits: CheckpointLimits {
            max_bytes: rec.max_checkpoint_bytes,
            max_count: rec.max_checkpoints,
        },
        registry_bound: bound,
    }
}
