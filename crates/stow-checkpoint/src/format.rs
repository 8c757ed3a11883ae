//! The checkpoint format: manifests (v1 files; v2 with the bucket's
//! objects), the small per-checkpoint summary, their strict loading, and
//! the JSON a capture writes straight from its scan.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Result, WsError};
use crate::layout::checkpoints_dir;
use crate::paths::check_checkpoint_id;
use crate::registry::Registry;

/// One captured file.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    pub path: String,
    pub size: u64,
    pub mode: u32,
    pub sha256: String,
    /// v2: the content type the file was last written with through S3
    /// (while the file is unchanged since).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// v2: the user metadata the file was last written with through S3.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

/// S3 properties a portable capture keeps for a file (as for an object).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FileProps {
    pub content_type: Option<String>,
    pub metadata: BTreeMap<String, String>,
}

/// A manifest as a capture writes it: the tree layout (see `tree`),
/// whose files, directories, links and skipped entries are in the nodes
/// under `tree`.
#[derive(Serialize)]
pub(crate) struct ManifestView<'a> {
    pub(super) version: u32,
    pub(super) id: &'a str,
    pub(super) workspace_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) parent_id: Option<&'a str>,
    pub(super) created: &'a str,
    /// The root node's SHA-256.
    pub(super) tree: &'a str,
    pub(super) excluded: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) primary_bucket: Option<&'a str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub(super) buckets: &'a [String],
    #[serde(skip_serializing_if = "<[ObjectEntry]>::is_empty")]
    pub(super) objects: &'a [ObjectEntry],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) ignored: Option<&'a Ignored>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) message: Option<&'a str>,
}

/// A captured symbolic link: its path and target text, never what it
/// points at.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LinkEntry {
    pub path: String,
    pub target: String,
}

/// A captured directory (every one, so empty directories and directory
/// modes are restored).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DirectoryEntry {
    pub path: String,
    pub mode: u32,
}

/// A socket, FIFO or device met in the tree: not captured, listed with the
/// reason.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SkippedEntry {
    pub path: String,
    pub reason: String,
}

/// What `.stowignore` kept out of a capture: how many paths, and the
/// first [`Ignored::MAX_LISTED`] of them (directories end with `/`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Ignored {
    pub count: u64,
    pub paths: Vec<String>,
}

impl Ignored {
    /// Most ignored paths a manifest lists.
    pub const MAX_LISTED: usize = 1000;

    /// The record of `paths` (sorted), or `None` when nothing was ignored.
    pub(crate) fn of(paths: &[String]) -> Option<Ignored> {
        (!paths.is_empty()).then(|| Ignored {
            count: paths.len() as u64,
            paths: paths.iter().take(Self::MAX_LISTED).cloned().collect(),
        })
    }
}

/// An immutable checkpoint manifest (version 1: files; version 2 also the
/// bucket's objects). Directories, links and skipped entries were added
/// later: older manifests have none and read as before.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointManifest {
    pub version: u32,
    pub id: String,
    pub workspace_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    pub created: String,
    pub files: Vec<FileEntry>,
    #[serde(default)]
    pub excluded: Vec<String>,
    /// v2: the workspace's primary bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_bucket: Option<String>,
    /// v2: every bucket, including empty ones and the primary.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buckets: Vec<String>,
    /// v2: objects held outside the file view (non-portable keys, other buckets).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<ObjectEntry>,
    /// Every directory with its mode.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dirs: Vec<DirectoryEntry>,
    /// Symbolic links, as links.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<LinkEntry>,
    /// Sockets, FIFOs and devices that were not captured.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedEntry>,
    /// Paths `.stowignore` kept out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignored: Option<Ignored>,
    /// The message given with the checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// One captured object of a portable (v2) checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ObjectEntry {
    pub bucket: String,
    pub key: String,
    pub size: u64,
    pub sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

/// The small per-checkpoint record used for accounting and lookups, so they
/// never parse full manifests.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    pub version: u32,
    pub id: String,
    pub workspace_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    pub created: String,
    pub files: u64,
    pub bytes: u64,
    /// The message given with the checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// How the checkpoint came into this registry (absent: a capture made
    /// before origins were recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
}

/// How a checkpoint came into a registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// A capture of the workspace's tree.
    Capture,
    /// Imported from a transfer archive (also adopt).
    Import,
    /// Made by applying a delta.
    Apply,
    /// Pulled from a remote.
    Pull,
    /// The capture a rewind takes before it changes the tree.
    Rewind,
}

impl Origin {
    /// Whether a checkpoint of this origin is the tree as it was when it
    /// was published (so the workspace's head moves to it).
    pub fn is_of_the_tree(self) -> bool {
        matches!(self, Origin::Capture | Origin::Rewind)
    }
}

/// Longest checkpoint message, in bytes of UTF-8.
pub const MAX_MESSAGE_BYTES: usize = 4096;

/// Refuses a checkpoint message over [`MAX_MESSAGE_BYTES`] or holding a
/// NUL (UTF-8 is the type's own guarantee).
pub fn check_message(message: &str) -> Result<()> {
    if message.len() > MAX_MESSAGE_BYTES {
        return Err(WsError::InvalidRequest(format!(
            "a checkpoint message is {} bytes; the limit is {MAX_MESSAGE_BYTES}",
            message.len()
        )));
    }
    if message.contains('\0') {
        return Err(WsError::InvalidRequest(
            "a checkpoint message may not hold NUL characters".into(),
        ));
    }
    Ok(())
}

impl CheckpointManifest {
    /// Logical bytes: files and objects. (Saturating: a validated
    /// manifest's sizes are bounded, so this only matters for one that is
    /// not.)
    pub fn payload_bytes(&self) -> u64 {
        self.files
            .iter()
            .map(|f| f.size)
            .chain(self.objects.iter().map(|o| o.size))
            .fold(0u64, u64::saturating_add)
    }
}

impl Summary {
    /// The summary of a validated manifest from outside (import, pull):
    /// its bytes are the files' and the objects'.
    pub(crate) fn of_outside(m: &CheckpointManifest, origin: Origin) -> Summary {
        Summary {
            version: 1,
            id: m.id.clone(),
            workspace_id: m.workspace_id.clone(),
            parent_id: m.parent_id.clone(),
            created: m.created.clone(),
            files: m.files.len() as u64,
            bytes: m.payload_bytes(),
            message: m.message.clone(),
            origin: Some(origin),
        }
    }
}

/// The result of a plain capture.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckpointResult {
    pub version: u32,
    pub checkpoint_id: String,
    pub workspace_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_checkpoint_id: Option<String>,
    pub created: String,
    /// Captured files.
    pub files: u64,
    /// Logical captured bytes (what retention counts).
    pub bytes: u64,
    /// Bytes newly stored by this capture (physical growth of the blob store).
    pub stored_bytes: u64,
    /// Portable (v2) captures: objects outside the file view.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objects: Option<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub excluded_sensitive_paths: Vec<String>,
    /// Symbolic links captured (as links).
    #[serde(skip_serializing_if = "is_zero")]
    pub links: u64,
    /// Sockets, FIFOs and devices not captured, with the reason.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedEntry>,
    /// Paths `.stowignore` kept out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ignored: Option<Ignored>,
    /// The message given with the checkpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl CheckpointResult {
    /// The result of publishing manifest `m` (import, apply), `stored_bytes`
    /// of it new to the blob store.
    pub(crate) fn of(m: &CheckpointManifest, stored_bytes: u64) -> CheckpointResult {
        CheckpointResult {
            version: 1,
            checkpoint_id: m.id.clone(),
            workspace_id: m.workspace_id.clone(),
            parent_checkpoint_id: m.parent_id.clone(),
            created: m.created.clone(),
            files: m.files.len() as u64,
            bytes: m
                .files
                .iter()
                .map(|f| f.size)
                .chain(m.objects.iter().map(|o| o.size))
                .fold(0, u64::saturating_add),
            stored_bytes,
            objects: (m.version == 2).then_some(m.objects.len() as u64),
            excluded_sensitive_paths: m.excluded.clone(),
            links: m.links.len() as u64,
            skipped: m.skipped.clone(),
            ignored: m.ignored.clone(),
            message: m.message.clone(),
        }
    }
}

/// Whether `d` is 64 lowercase hex digits (a SHA-256 as we store it).
pub(super) fn valid_sha(d: &str) -> bool {
    d.len() == 64
        && d.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Every published summary in the partition, in ID order.
pub fn summaries(registry: &Registry) -> Result<Vec<Summary>> {
    let dir = checkpoints_dir(registry);
    let rd = match fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(WsError::io_at("read checkpoints", &dir, e)),
    };
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| WsError::io_at("read checkpoints", &dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        out.push(load_summary(registry, &name)?);
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

pub(super) fn load_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    let bytes = fs::read(path).map_err(|e| WsError::io_at("read", path, e))?;
    serde_json::from_slice(&bytes).map_err(|e| WsError::Corrupt(format!("{}: {e}", path.display())))
}

pub(crate) fn load_summary(registry: &Registry, id: &str) -> Result<Summary> {
    let s: Summary = load_json(&checkpoints_dir(registry).join(id).join("summary.json"))?;
    if s.id != id {
        return Err(WsError::Corrupt(format!(
            "checkpoint {id} names itself {}",
            s.id
        )));
    }
    Ok(s)
}

/// Refuses a checkpoint that is missing or belongs to another workspace.
pub fn check_belongs(registry: &Registry, cp: &str, ws: &str) -> Result<()> {
    check_checkpoint_id(cp)?;
    if !checkpoints_dir(registry).join(cp).is_dir() {
        return Err(WsError::NotFound(format!("checkpoint {cp}")));
    }
    let s = load_summary(registry, cp)?;
    if s.workspace_id != ws {
        return Err(WsError::InvalidRequest(format!(
            "checkpoint {cp} belongs to a different workspace"
        )));
    }
    Ok(())
}

/// Checkpoint count and logical bytes of the whole partition.
pub fn registry_usage(registry: &Registry) -> Result<(u64, u64)> {
    let s = summaries(registry)?;
    Ok((s.len() as u64, s.iter().map(|s| s.bytes).sum()))
}

/// An object entry seen as a payload to verify.
pub fn object_as_file(o: &ObjectEntry) -> FileEntry {
    FileEntry {
        path: format!("s3://{}/{}", o.bucket, o.key),
        size: o.size,
        mode: 0o600,
        sha256: o.sha256.clone(),
        ..FileEntry::default()
    }
}

pub(super) mod erased {
    use crate::error::{Result, WsError};

    /// Object-safe JSON encoding for the publication helper.
    pub trait Ser {
        fn bytes(&self) -> Result<Vec<u8>>;
    }

    impl<T: serde::Serialize> Ser for T {
        fn bytes(&self) -> Result<Vec<u8>> {
            let mut v = serde_json::to_vec_pretty(self)
                .map_err(|e| WsError::InvalidRequest(format!("encode: {e}")))?;
            v.push(b'\n');
            Ok(v)
        }
    }
}
