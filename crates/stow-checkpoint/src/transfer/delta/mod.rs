//! Deltas: the changes from one checkpoint of a
//! workspace to another, with the target's bytes, as one JSON document
//! that `apply` turns into a new checkpoint on top of the named base.
//!
//! Version 1 (between file checkpoints) keeps the reference format:
//! `{version, workspace_id, base_id, target_id, created, changes, files,
//! bytes, content}`, `content` mapping each added or changed path to its
//! bytes (standard base64). Version 2 (between portable checkpoints) also
//! carries `bucket_changes`, `object_changes` and `object_content` (object
//! bodies by SHA-256). A delta never merges: every precondition (an added
//! path absent, a changed or deleted one exactly as recorded) must hold on
//! the base, or nothing is written.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::archive::ArchiveLimits;
use crate::{BucketChange, Change, DirectoryEntry, LinkChange, ObjectChange};

/// Most content bytes a delta carries (MaxDeltaBytes).
pub const MAX_DELTA_BYTES: u64 = 16 << 20;
/// Most changes a delta carries.
const MAX_CHANGES: usize = 100_000;
/// Largest document `apply` reads: the content in base64 plus the listing.
const MAX_DOCUMENT_BYTES: u64 = 2 * MAX_DELTA_BYTES + (1 << 20);

/// A delta document.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeltaDocument {
    pub version: u32,
    pub workspace_id: String,
    pub base_id: String,
    pub target_id: String,
    pub created: String,
    pub changes: Vec<Change>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bucket_changes: Vec<BucketChange>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub object_changes: Vec<ObjectChange>,
    /// Number of file changes.
    pub files: u64,
    /// Content bytes (files and objects).
    pub bytes: u64,
    /// Added or changed file bytes by path (base64).
    pub content: BTreeMap<String, String>,
    /// Added or changed object bodies by SHA-256 (base64; version 2).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub object_content: BTreeMap<String, String>,
    /// The delta carries sensitive-looking paths (the sender opted in).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub include_sensitive: bool,
    /// Symbolic link changes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub link_changes: Vec<LinkChange>,
    /// The target's directories with their modes, when they differ from
    /// the base's (directories are metadata: replaced, never merged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dirs: Option<Vec<DirectoryEntry>>,
    /// The target's message, given to the checkpoint `apply` makes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The result of `delta`.
#[derive(Debug, Clone, Serialize)]
pub struct DeltaResult {
    pub version: u32,
    pub workspace_id: String,
    pub base_id: String,
    pub target_id: String,
    /// The document's absolute path.
    pub document: PathBuf,
    /// SHA-256 of the document's bytes (for `apply --expect-sha256`).
    pub sha256: String,
    /// File changes.
    pub files: u64,
    /// Content bytes.
    pub bytes: u64,
    /// Object changes (portable deltas).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objects: Option<u64>,
}

/// Options of `delta`.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeltaOptions {
    pub include_sensitive: bool,
    /// Bounds on content bytes and changes (0 = archive defaults); the
    /// content is also capped at [`MAX_DELTA_BYTES`].
    pub limits: ArchiveLimits,
}

/// Options of `apply`.
#[derive(Debug, Clone, Default)]
pub struct ApplyOptions {
    /// SHA-256 the document's raw bytes must have (checked before decoding).
    pub expect_sha256: Option<String>,
    /// Accept sensitive-looking paths (the document must also carry them
    /// on purpose).
    pub include_sensitive: bool,
}

/// The first sensitive-looking path a delta's changes name (files, links,
/// object keys): what both `delta` and `apply` refuse without
/// `--include-sensitive`.
fn first_sensitive<'a>(
    changes: &'a [Change],
    link_changes: &'a [LinkChange],
    object_changes: &'a [ObjectChange],
) -> Option<&'a str> {
    changes
        .iter()
        .map(|c| c.path.as_str())
        .chain(link_changes.iter().map(|c| c.path.as_str()))
        .chain(object_changes.iter().map(|c| c.key.as_str()))
        .find(|p| crate::paths::is_sensitive(p))
}

mod apply;
mod check;
mod make;

pub use apply::apply;
pub use check::read_document;
pub use make::delta;
