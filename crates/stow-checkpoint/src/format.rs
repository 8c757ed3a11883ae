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

/// `manifest.json` as stored: either layout. The flat one (every
/// checkpoint before tree manifests, and what import, pull and apply
/// write) lists `files` (and `dirs`, `links`, `skipped`); the tree one
/// names its root node in `tree`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredManifest {
    version: u32,
    id: String,
    workspace_id: String,
    #[serde(default)]
    parent_id: Option<String>,
    created: String,
    #[serde(default)]
    files: Option<Vec<FileEntry>>,
    #[serde(default)]
    tree: Option<String>,
    #[serde(default)]
    excluded: Vec<String>,
    #[serde(default)]
    primary_bucket: Option<String>,
    #[serde(default)]
    buckets: Vec<String>,
    #[serde(default)]
    objects: Vec<ObjectEntry>,
    #[serde(default)]
    dirs: Vec<DirectoryEntry>,
    #[serde(default)]
    links: Vec<LinkEntry>,
    #[serde(default)]
    skipped: Vec<SkippedEntry>,
    #[serde(default)]
    ignored: Option<Ignored>,
    #[serde(default)]
    message: Option<String>,
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

pub(super) fn load_summary(registry: &Registry, id: &str) -> Result<Summary> {
    let s: Summary = load_json(&checkpoints_dir(registry).join(id).join("summary.json"))?;
    if s.id != id {
        return Err(WsError::Corrupt(format!(
            "checkpoint {id} names itself {}",
            s.id
        )));
    }
    Ok(s)
}

/// Loads a published checkpoint manifest (either layout).
pub fn load_manifest(registry: &Registry, id: &str) -> Result<CheckpointManifest> {
    Ok(load_manifest_with_nodes(registry, id)?.0)
}

/// Loads a published checkpoint manifest and the digests of the tree
/// nodes it is stored in (none for the flat layout): the blobs it names
/// besides its payloads.
pub(crate) fn load_manifest_with_nodes(
    registry: &Registry,
    id: &str,
) -> Result<(CheckpointManifest, Vec<String>)> {
    check_checkpoint_id(id)?;
    let dir = checkpoints_dir(registry).join(id);
    if !dir.is_dir() {
        return Err(WsError::NotFound(format!("checkpoint {id}")));
    }
    let s: StoredManifest = load_json(&dir.join("manifest.json"))?;
    let mismatch = || WsError::Corrupt(format!("checkpoint {id} manifest does not match"));
    let (files, dirs, links, skipped, nodes) = match (s.files, s.tree) {
        (Some(files), None) => (files, s.dirs, s.links, s.skipped, Vec::new()),
        (None, Some(root)) if s.dirs.is_empty() && s.links.is_empty() && s.skipped.is_empty() => {
            let t = crate::tree::load_tree(registry, &root)?;
            (t.files, t.dirs, t.links, t.skipped, t.nodes)
        }
        _ => return Err(mismatch()),
    };
    let m = CheckpointManifest {
        version: s.version,
        id: s.id,
        workspace_id: s.workspace_id,
        parent_id: s.parent_id,
        created: s.created,
        files,
        excluded: s.excluded,
        primary_bucket: s.primary_bucket,
        buckets: s.buckets,
        objects: s.objects,
        dirs,
        links,
        skipped,
        ignored: s.ignored,
        message: s.message,
    };
    let v2_fields = m.primary_bucket.is_some() || !m.buckets.is_empty() || !m.objects.is_empty();
    let consistent = match m.version {
        1 => !v2_fields,
        2 => m.primary_bucket.is_some(),
        _ => false,
    };
    let digests_ok = m
        .files
        .iter()
        .map(|f| &f.sha256)
        .chain(m.objects.iter().map(|o| &o.sha256))
        .all(|d| valid_sha(d));
    let modes_ok = m.files.iter().all(|f| f.mode <= 0o777);
    if m.id != id || !consistent || !digests_ok || !modes_ok {
        return Err(mismatch());
    }
    Ok((m, nodes))
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::blobs::blob_path;
    use crate::fsutil::hex;
    use crate::scan::{Scan, Scanned};
    use crate::tree;

    #[test]
    fn a_tree_manifest_loads_as_the_flat_manifest_it_stands_for() {
        let files = vec![
            Scanned::for_test("a.txt", 3),
            Scanned::for_test("d/b \"q\".bin", 0),
        ];
        let produced: Vec<[u8; 32]> = vec![[0xab; 32], [0xcd; 32]];
        let object = ObjectEntry {
            bucket: "other".into(),
            key: "k:1".into(),
            size: 5,
            sha256: "ef".repeat(32),
            content_type: Some("text/plain".into()),
            metadata: BTreeMap::from([("m".into(), "v".into())]),
        };
        let excluded = vec![".env".to_string()];
        let dirs = vec![
            DirectoryEntry {
                path: "bin".into(),
                mode: 0o755,
            },
            DirectoryEntry {
                path: "d".into(),
                mode: 0o700,
            },
        ];
        let links = vec![LinkEntry {
            path: "bin/tool".into(),
            target: "../node_modules/x/\"q\".js".into(),
        }];
        let skipped = vec![SkippedEntry {
            path: "dev.sock".into(),
            reason: "a socket is not captured".into(),
        }];
        let ignored = Ignored::of(&["build/".to_string(), "x.log".to_string()]);
        let buckets = vec!["main".to_string(), "other".to_string()];
        // A portable capture keeps S3 properties of files (here: both kinds
        // on one file, a content type alone on the other).
        let file_props = HashMap::from([
            (
                "a.txt".to_string(),
                FileProps {
                    content_type: Some("text/csv".into()),
                    metadata: BTreeMap::from([("k".into(), "v \"q\"".into())]),
                },
            ),
            (
                "d/b \"q\".bin".to_string(),
                FileProps {
                    content_type: Some("application/x-b".into()),
                    metadata: BTreeMap::new(),
                },
            ),
        ]);
        let scan = Scan {
            files: files.clone(),
            dirs: dirs.clone(),
            links: links.clone(),
            skipped: skipped.clone(),
            ..Scan::default()
        };
        for (n, (parent, portable)) in [(None, false), (Some("cp_parent"), true)]
            .into_iter()
            .enumerate()
        {
            let t = tempfile::tempdir().unwrap();
            let registry = Registry::resolve(Some(t.path()), None).unwrap();
            let id = format!("cp_{n:024}");
            let built =
                tree::build(&scan, &produced, portable.then_some(&file_props), &|_| None).unwrap();
            for (sha, bytes) in &built.nodes {
                let p = blob_path(&registry, &hex(sha));
                fs::create_dir_all(p.parent().unwrap()).unwrap();
                fs::write(p, bytes).unwrap();
            }
            let objects = if portable {
                vec![object.clone()]
            } else {
                vec![]
            };
            let root = hex(&built.root);
            let view = ManifestView {
                version: if portable { 2 } else { 1 },
                id: &id,
                workspace_id: "ws_y",
                parent_id: parent,
                created: "2026-11-30T00:00:00Z",
                tree: &root,
                excluded: &excluded,
                primary_bucket: portable.then_some("main"),
                buckets: if portable { &buckets } else { &[] },
                objects: &objects,
                ignored: ignored.as_ref(),
                message: None,
            };
            let dir = checkpoints_dir(&registry).join(&id);
            fs::create_dir_all(&dir).unwrap();
            fs::write(
                dir.join("manifest.json"),
                erased::Ser::bytes(&view).unwrap(),
            )
            .unwrap();
            let owned = CheckpointManifest {
                version: view.version,
                id: id.clone(),
                workspace_id: "ws_y".into(),
                parent_id: parent.map(str::to_string),
                created: "2026-11-30T00:00:00Z".into(),
                files: files
                    .iter()
                    .zip(&produced)
                    .map(|(f, p)| {
                        let props = file_props
                            .get(&*f.path)
                            .filter(|_| portable)
                            .cloned()
                            .unwrap_or_default();
                        FileEntry {
                            path: f.path.to_string(),
                            size: f.size,
                            mode: f.mode,
                            sha256: hex(p),
                            content_type: props.content_type,
                            metadata: props.metadata,
                        }
                    })
                    .collect(),
                excluded: excluded.clone(),
                primary_bucket: portable.then(|| "main".to_string()),
                buckets: if portable { buckets.clone() } else { vec![] },
                objects: objects.clone(),
                dirs: dirs.clone(),
                links: links.clone(),
                skipped: skipped.clone(),
                ignored: ignored.clone(),
                message: None,
            };
            let (loaded, nodes) = load_manifest_with_nodes(&registry, &id).unwrap();
            let enc = |v: &dyn erased::Ser| String::from_utf8(v.bytes().unwrap()).unwrap();
            assert_eq!(enc(&loaded), enc(&owned));
            assert_eq!(nodes.len(), built.nodes.len());

            // A node that is missing or altered makes the checkpoint corrupt.
            let p = blob_path(&registry, &hex(&built.nodes[0].0));
            let mut bytes = fs::read(&p).unwrap();
            *bytes.last_mut().unwrap() ^= 1;
            fs::write(&p, &bytes).unwrap();
            assert!(matches!(
                load_manifest(&registry, &id),
                Err(WsError::Corrupt(_))
            ));
            fs::remove_file(&p).unwrap();
            assert!(matches!(
                load_manifest(&registry, &id),
                Err(WsError::Corrupt(_))
            ));
        }
    }
}
