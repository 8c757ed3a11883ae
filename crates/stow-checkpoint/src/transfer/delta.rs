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

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::archive::ArchiveLimits;
use crate::error::{Result, WsError};
use crate::fsutil::{absolute, create_private_dir, hex, now_rfc3339, random_hex, write_new_file};
use crate::paths::{check_checkpoint_path, is_sensitive};
use crate::registry::Registry;
use crate::Origin;
use crate::{
    admit, blob_ok, diff_buckets, diff_files_exact, diff_links, diff_objects, discard,
    load_manifest, publish, read_blob, stage_bytes, summaries, validate_manifest,
    CheckpointManifest, CheckpointResult, DirectoryEntry, FileEntry, Kind, LinkChange, LinkEntry,
    ObjectEntry, Payload, RetentionCaps, Summary,
};

/// Most content bytes a delta carries (MaxDeltaBytes).
pub const MAX_DELTA_BYTES: u64 = 16 << 20;
/// Most changes a delta carries.
const MAX_CHANGES: usize = 100_000;
/// Largest document `apply` reads: the content in base64 plus the listing.
const MAX_DOCUMENT_BYTES: u64 = 2 * MAX_DELTA_BYTES + (1 << 20);

/// One file change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileChange {
    pub path: String,
    pub kind: Kind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<FileEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<FileEntry>,
}

/// One bucket change (version 2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BucketChange {
    pub bucket: String,
    pub kind: Kind,
}

/// One object change (version 2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectChange {
    pub bucket: String,
    pub key: String,
    pub kind: Kind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<ObjectEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<ObjectEntry>,
}

/// A delta document.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeltaDocument {
    pub version: u32,
    pub workspace_id: String,
    pub base_id: String,
    pub target_id: String,
    pub created: String,
    pub changes: Vec<FileChange>,
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

fn kind_of(k: &str) -> Kind {
    match k {
        "added" => Kind::Added,
        "deleted" => Kind::Deleted,
        _ => Kind::Changed,
    }
}

/// Records the changes from checkpoint `base` to `target` (of one
/// workspace) with the target's bytes in a new file `output`.
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
    let changes: Vec<FileChange> = diff_files_exact(&a.files, &b.files)
        .into_iter()
        .map(|c| FileChange {
            path: c.path,
            kind: kind_of(c.kind),
            from: c.from,
            to: c.to,
        })
        .collect();
    let portable = a.version == 2;
    let bucket_changes: Vec<BucketChange> = if portable {
        diff_buckets(&a.buckets, &b.buckets)
            .into_iter()
            .map(|c| BucketChange {
                bucket: c.bucket,
                kind: kind_of(c.kind),
            })
            .collect()
    } else {
        Vec::new()
    };
    let object_changes: Vec<ObjectChange> = if portable {
        diff_objects(&a.objects, &b.objects)
            .into_iter()
            .map(|c| ObjectChange {
                bucket: c.bucket,
                key: c.key,
                kind: kind_of(c.kind),
                from: c.from,
                to: c.to,
            })
            .collect()
    } else {
        Vec::new()
    };
    let link_changes = diff_links(&a.links, &b.links);
    let sensitive = changes
        .iter()
        .map(|c| c.path.as_str())
        .chain(link_changes.iter().map(|c| c.path.as_str()))
        .chain(object_changes.iter().map(|c| c.key.as_str()))
        .find(|p| is_sensitive(p))
        .map(str::to_string);
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

/// Options of `apply`.
#[derive(Debug, Clone, Default)]
pub struct ApplyOptions {
    /// SHA-256 the document's raw bytes must have (checked before decoding).
    pub expect_sha256: Option<String>,
    /// Accept sensitive-looking paths (the document must also carry them
    /// on purpose).
    pub include_sensitive: bool,
}

/// Reads, checks and decodes a delta document.
pub fn read_document(path: &Path, expect_sha256: Option<&str>) -> Result<DeltaDocument> {
    let meta = fs::metadata(path).map_err(|e| WsError::io_at("read delta", path, e))?;
    if !meta.is_file() {
        return Err(WsError::InvalidDelta(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    if meta.len() > MAX_DOCUMENT_BYTES {
        return Err(WsError::CapacityExceeded(format!(
            "the delta document is {} bytes, over the limit of {MAX_DOCUMENT_BYTES}",
            meta.len()
        )));
    }
    let raw = fs::read(path).map_err(|e| WsError::io_at("read delta", path, e))?;
    if raw.len() as u64 > MAX_DOCUMENT_BYTES {
        return Err(WsError::CapacityExceeded(
            "the delta document grew past its limit while it was read".into(),
        ));
    }
    if let Some(want) = expect_sha256 {
        let got = hex(&Sha256::digest(&raw));
        if got != want.trim().to_ascii_lowercase() {
            return Err(WsError::InvalidDelta(format!(
                "the document does not match the digest {} (it is {got})",
                want.trim()
            )));
        }
    }
    // Look at the version first, so a newer document gets a clear answer.
    #[derive(Deserialize)]
    struct Version {
        version: u32,
    }
    let v: Version = serde_json::from_slice(&raw)
        .map_err(|e| WsError::InvalidDelta(format!("the document is malformed: {e}")))?;
    if v.version != 1 && v.version != 2 {
        return Err(WsError::InvalidDelta(format!(
            "this build does not speak the document's version {} (supported: 1, 2)",
            v.version
        )));
    }
    let doc: DeltaDocument = serde_json::from_slice(&raw)
        .map_err(|e| WsError::InvalidDelta(format!("the document is malformed: {e}")))?;
    Ok(doc)
}

/// A decoded, checked payload of a document.
struct Body {
    bytes: Vec<u8>,
}

/// Checks a document's own invariants and decodes its content: kinds agree
/// with `from`/`to`, paths are valid and unique, every `to` has content of
/// its size and digest, no content is unreferenced, the totals add up.
fn check_document(doc: &DeltaDocument) -> Result<(HashMap<String, Body>, HashMap<String, Body>)> {
    let bad = |m: String| WsError::InvalidDelta(m);
    crate::paths::check_workspace_id(&doc.workspace_id).map_err(|e| bad(e.to_string()))?;
    crate::paths::check_checkpoint_id(&doc.base_id).map_err(|e| bad(e.to_string()))?;
    crate::paths::check_checkpoint_id(&doc.target_id).map_err(|e| bad(e.to_string()))?;
    if doc.version == 1
        && (!doc.bucket_changes.is_empty()
            || !doc.object_changes.is_empty()
            || !doc.object_content.is_empty())
    {
        return Err(bad("a version-1 delta carries bucket changes".into()));
    }
    if doc.changes.len() + doc.object_changes.len() > MAX_CHANGES {
        return Err(WsError::CapacityExceeded(
            "the delta holds too many changes".into(),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    let mut files = HashMap::new();
    let mut total = 0u64;
    for c in &doc.changes {
        check_checkpoint_path(&c.path).map_err(|e| bad(e.to_string()))?;
        if !seen.insert(c.path.as_str()) {
            return Err(bad(format!("{} changes twice", c.path)));
        }
        let shape_ok = match c.kind {
            Kind::Added => c.from.is_none() && c.to.is_some(),
            Kind::Deleted => c.from.is_some() && c.to.is_none(),
            Kind::Changed => c.from.is_some() && c.to.is_some(),
        };
        let paths_ok = [&c.from, &c.to]
            .into_iter()
            .flatten()
            .all(|e| e.path == c.path && e.mode <= 0o777);
        if !shape_ok || !paths_ok {
            return Err(bad(format!("the change of {} is malformed", c.path)));
        }
        match (&c.to, doc.content.get(&c.path)) {
            (Some(to), Some(b64)) => {
                let bytes = B64
                    .decode(b64)
                    .map_err(|_| bad(format!("the content of {} is not base64", c.path)))?;
                if bytes.len() as u64 != to.size || hex(&Sha256::digest(&bytes)) != to.sha256 {
                    return Err(bad(format!(
                        "the content of {} disagrees with the delta's manifest entry",
                        c.path
                    )));
                }
                total += to.size;
                files.insert(c.path.clone(), Body { bytes });
            }
            (Some(_), None) => return Err(bad(format!("no content for {}", c.path))),
            (None, Some(_)) => return Err(bad(format!("{} is deleted but has content", c.path))),
            (None, None) => {}
        }
    }
    let mut link_paths = std::collections::HashSet::new();
    for c in &doc.link_changes {
        check_checkpoint_path(&c.path).map_err(|e| bad(e.to_string()))?;
        let shape_ok = match c.kind {
            Kind::Added => c.from.is_none() && c.to.is_some(),
            Kind::Deleted => c.from.is_some() && c.to.is_none(),
            Kind::Changed => c.from.is_some() && c.to.is_some(),
        };
        if !shape_ok || !link_paths.insert(c.path.as_str()) {
            return Err(bad(format!("the change of link {} is malformed", c.path)));
        }
    }
    if doc.content.len() != files.len() {
        return Err(bad("the document holds content no change names".into()));
    }
    let mut keys = std::collections::HashSet::new();
    let mut objects = HashMap::new();
    for c in &doc.object_changes {
        if !keys.insert((c.bucket.as_str(), c.key.as_str())) {
            return Err(bad(format!("object {}/{} changes twice", c.bucket, c.key)));
        }
        let shape_ok = match c.kind {
            Kind::Added => c.from.is_none() && c.to.is_some(),
            Kind::Deleted => c.from.is_some() && c.to.is_none(),
            Kind::Changed => c.from.is_some() && c.to.is_some(),
        };
        let names_ok = [&c.from, &c.to]
            .into_iter()
            .flatten()
            .all(|e| e.bucket == c.bucket && e.key == c.key);
        if !shape_ok || !names_ok {
            return Err(bad(format!(
                "the change of object {}/{} is malformed",
                c.bucket, c.key
            )));
        }
        if let Some(to) = &c.to {
            if let Some(body) = objects.get(&to.sha256) {
                let body: &Body = body;
                if body.bytes.len() as u64 != to.size {
                    return Err(bad(format!(
                        "the content of object {}/{} disagrees with the delta's manifest entry",
                        c.bucket, c.key
                    )));
                }
                continue;
            }
            let b64 = doc
                .object_content
                .get(&to.sha256)
                .ok_or_else(|| bad(format!("no content for object {}/{}", c.bucket, c.key)))?;
            let bytes = B64.decode(b64).map_err(|_| {
                bad(format!(
                    "the content of object {}/{} is not base64",
                    c.bucket, c.key
                ))
            })?;
            if bytes.len() as u64 != to.size || hex(&Sha256::digest(&bytes)) != to.sha256 {
                return Err(bad(format!(
                    "the content of object {}/{} disagrees with the delta's manifest entry",
                    c.bucket, c.key
                )));
            }
            total += to.size;
            objects.insert(to.sha256.clone(), Body { bytes });
        }
    }
    if doc.object_content.len() != objects.len() {
        return Err(bad(
            "the document holds object content no change names".into()
        ));
    }
    if total > MAX_DELTA_BYTES {
        return Err(WsError::CapacityExceeded(format!(
            "the delta carries {total} content bytes, over the limit of {MAX_DELTA_BYTES}"
        )));
    }
    if total != doc.bytes || doc.files != doc.changes.len() as u64 {
        return Err(bad("the document's totals disagree with its changes".into()));
    }
    Ok((files, objects))
}

/// Checks every precondition on `base` and returns the target manifest's
/// files, buckets and objects; nothing is written.
fn replay(doc: &DeltaDocument, base: &CheckpointManifest) -> Result<Replayed> {
    let mut files: BTreeMap<String, FileEntry> = base
        .files
        .iter()
        .map(|f| (f.path.clone(), f.clone()))
        .collect();
    for c in &doc.changes {
        let have = files.get(&c.path);
        let holds = match c.kind {
            Kind::Added => have.is_none(),
            Kind::Changed | Kind::Deleted => have == c.from.as_ref(),
        };
        if !holds {
            let why = match (c.kind, have) {
                (Kind::Added, _) => "to be added, but the base has it",
                (_, None) => "to be changed or deleted, but the base lacks it",
                _ => "recorded differently in the base",
            };
            return Err(WsError::DeltaConflict(format!("{}: {why}", c.path)));
        }
        match &c.to {
            Some(to) => files.insert(c.path.clone(), to.clone()),
            None => files.remove(&c.path),
        };
    }
    let mut buckets: Vec<String> = base.buckets.clone();
    for c in &doc.bucket_changes {
        let at = buckets.iter().position(|b| *b == c.bucket);
        match (c.kind, at) {
            (Kind::Added, None) => buckets.push(c.bucket.clone()),
            (Kind::Deleted, Some(i)) => {
                buckets.remove(i);
            }
            _ => {
                return Err(WsError::DeltaConflict(format!(
                    "bucket {}: not as the delta expects",
                    c.bucket
                )))
            }
        }
    }
    buckets.sort();
    let mut objects: BTreeMap<(String, String), ObjectEntry> = base
        .objects
        .iter()
        .map(|o| ((o.bucket.clone(), o.key.clone()), o.clone()))
        .collect();
    for c in &doc.object_changes {
        let k = (c.bucket.clone(), c.key.clone());
        let have = objects.get(&k);
        let holds = match c.kind {
            Kind::Added => have.is_none(),
            Kind::Changed | Kind::Deleted => have == c.from.as_ref(),
        };
        if !holds {
            return Err(WsError::DeltaConflict(format!(
                "object {}/{}: not as the delta expects",
                c.bucket, c.key
            )));
        }
        match &c.to {
            Some(to) => objects.insert(k, to.clone()),
            None => objects.remove(&k),
        };
    }
    let mut links: BTreeMap<String, String> = base
        .links
        .iter()
        .map(|l| (l.path.clone(), l.target.clone()))
        .collect();
    for c in &doc.link_changes {
        let have = links.get(&c.path);
        let holds = match c.kind {
            Kind::Added => have.is_none(),
            Kind::Changed | Kind::Deleted => have == c.from.as_ref(),
        };
        if !holds {
            return Err(WsError::DeltaConflict(format!(
                "link {}: not as the delta expects",
                c.path
            )));
        }
        match &c.to {
            Some(t) => links.insert(c.path.clone(), t.clone()),
            None => links.remove(&c.path),
        };
    }
    Ok(Replayed {
        files: files.into_values().collect(),
        buckets,
        objects: objects.into_values().collect(),
        links: links
            .into_iter()
            .map(|(path, target)| LinkEntry { path, target })
            .collect(),
        dirs: doc.dirs.clone().unwrap_or_else(|| base.dirs.clone()),
    })
}

/// The target manifest's contents a delta rebuilds on its base.
struct Replayed {
    files: Vec<FileEntry>,
    buckets: Vec<String>,
    objects: Vec<ObjectEntry>,
    links: Vec<LinkEntry>,
    dirs: Vec<DirectoryEntry>,
}

/// Applies delta `path` to checkpoint `base`, publishing a new checkpoint
/// whose parent is the base (the base is never changed). Applying twice
/// gives two checkpoints.
pub fn apply(
    registry: &Registry,
    path: &Path,
    base: &str,
    opts: &ApplyOptions,
) -> Result<CheckpointResult> {
    let doc = read_document(path, opts.expect_sha256.as_deref())?;
    let (file_bodies, object_bodies) = check_document(&doc)?;
    let touched = doc
        .changes
        .iter()
        .map(|c| c.path.as_str())
        .chain(doc.object_changes.iter().map(|c| c.key.as_str()))
        .find(|p| is_sensitive(p));
    if let Some(p) = touched {
        if !(opts.include_sensitive && doc.include_sensitive) {
            return Err(WsError::SensitivePath {
                path: p.to_string(),
                opt_in: "--include-sensitive (on both delta and apply)",
            });
        }
    }
    // Held until publication: GC (which clears `tmp/`) waits, and the base
    // cannot be deleted between the checks and the publication.
    registry.ensure()?;
    let _lock = registry.lock()?;
    let b = load_manifest(registry, base)?;
    if b.workspace_id != doc.workspace_id {
        return Err(WsError::DeltaConflict(format!(
            "the base {base} belongs to workspace {}, the delta to {}",
            b.workspace_id, doc.workspace_id
        )));
    }
    if b.version != doc.version {
        return Err(WsError::DeltaConflict(format!(
            "a version-{} delta cannot apply to a version-{} checkpoint",
            doc.version, b.version
        )));
    }
    let Replayed {
        files,
        buckets,
        objects,
        links,
        dirs,
    } = replay(&doc, &b)?;
    let id = format!("cp_{}", random_hex(12));
    let m = CheckpointManifest {
        version: b.version,
        id: id.clone(),
        workspace_id: b.workspace_id.clone(),
        parent_id: Some(b.id.clone()),
        created: now_rfc3339(),
        files,
        excluded: b.excluded.clone(),
        primary_bucket: b.primary_bucket.clone(),
        buckets,
        objects,
        dirs,
        links,
        skipped: b.skipped.clone(),
        ignored: b.ignored.clone(),
        message: doc.message.clone(),
    };
    validate_manifest(&m).map_err(|e| WsError::DeltaConflict(format!("the result: {e}")))?;
    // Every payload the new checkpoint keeps from the base must be there.
    for f in &m.files {
        if !file_bodies.contains_key(&f.path) && !blob_ok(registry, &f.sha256, f.size) {
            return Err(WsError::Corrupt(format!(
                "payload of {} in the base is missing",
                f.path
            )));
        }
    }
    for o in &m.objects {
        if !object_bodies.contains_key(&o.sha256) && !blob_ok(registry, &o.sha256, o.size) {
            return Err(WsError::Corrupt(format!(
                "payload of object {}/{} in the base is missing",
                o.bucket, o.key
            )));
        }
    }
    let bytes: u64 =
        m.files.iter().map(|f| f.size).sum::<u64>() + m.objects.iter().map(|o| o.size).sum::<u64>();
    let caps = registry
        .get(&m.workspace_id)
        .map(|r| RetentionCaps::of(&r))
        .unwrap_or_default();
    admit(
        registry,
        &m.workspace_id,
        caps,
        bytes,
        &summaries(registry)?,
    )?;
    let tmp = registry.state_dir().join("tmp");
    create_private_dir(&tmp)?;
    let mut staged: Vec<(Payload, u64)> = Vec::new();
    let stage_all = |staged: &mut Vec<(Payload, u64)>| -> Result<()> {
        for body in file_bodies.values().chain(object_bodies.values()) {
            let p = stage_bytes(registry, &tmp, &body.bytes)?;
            staged.push((p, body.bytes.len() as u64));
        }
        Ok(())
    };
    let summary = Summary {
        version: 1,
        id: id.clone(),
        workspace_id: m.workspace_id.clone(),
        parent_id: m.parent_id.clone(),
        created: m.created.clone(),
        files: m.files.len() as u64,
        bytes,
        message: m.message.clone(),
        origin: Some(Origin::Apply),
    };
    let published = stage_all(&mut staged).and_then(|()| {
        let refs: Vec<(&Payload, u64)> = staged.iter().map(|(p, n)| (p, *n)).collect();
        publish(registry, &id, &refs, &m, &summary)
    });
    let stored_bytes = match published {
        Ok(n) => n,
        Err(e) => {
            let payloads: Vec<Payload> = staged.into_iter().map(|(p, _)| p).collect();
            discard(&payloads);
            return Err(e);
        }
    };
    Ok(CheckpointResult::of(&m, stored_bytes))
}
