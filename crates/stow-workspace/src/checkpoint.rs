//! Content-addressed checkpoints (D3).
//!
//! Layout inside a registry partition `R`:
//!
//! ```text
//! R/.stow/blobs/<xx>/<sha256>          immutable payloads, stored once
//! R/.stow/checkpoints/<cp_id>/         one published checkpoint:
//!     manifest.json                      files (path, size, mode, sha256), exclusions
//!     summary.json                       id, workspace, parent, created, files, bytes
//! R/.stow/checkpoints/.stage-*         a capture being assembled (ignored)
//! R/.stow/checkpoints/.deleted-*       a checkpoint being removed (ignored)
//! R/.stow/tmp/                         blobs being written
//! R/.stow/statcache/<ws>.cache         per-workspace stat cache (binary)
//! R/.stow/capture-locks/<ws>.lock      per-workspace capture lock
//! ```
//!
//! Crash rules: a blob reaches its final name only after its bytes are
//! durable (`syncfs`), and a checkpoint directory is renamed into place only
//! after every blob it names is durable, so a published checkpoint never
//! names a missing or torn blob. (A capture refused after its blobs were
//! named leaves them unreferenced: complete, reused by a retry, removed by
//! garbage collection.) Garbage collection runs under the registry
//! lock (which every capture also holds) and deletes only blobs no published
//! manifest names; it refuses to run when any manifest is unreadable.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Result, WsError};
use crate::fsutil::{create_private_dir, fsync_dir, hex, now_rfc3339, random_hex, FileLock};
use crate::paths::{
    check_checkpoint_id, check_checkpoint_leaf, check_checkpoint_path, is_sensitive,
};
use crate::progress::Progress;
use crate::registry::{min_bound, Registry};
use crate::statcache::{unhex32, CacheEntry, StatCache};
use crate::tree::excluded;
use crate::watch::{TreeWatch, Verdict};

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

/// A manifest as written by a capture: the same JSON as
/// [`CheckpointManifest`], serialized straight from the scan and the
/// digests (a large tree's entries are not copied first).
#[derive(Serialize)]
pub(crate) struct ManifestView<'a> {
    version: u32,
    id: &'a str,
    workspace_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent_id: Option<&'a str>,
    created: &'a str,
    files: FilesView<'a>,
    excluded: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    primary_bucket: Option<&'a str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    buckets: &'a [String],
    #[serde(skip_serializing_if = "<[ObjectEntry]>::is_empty")]
    objects: &'a [ObjectEntry],
}

/// The `files` of a [`ManifestView`]: scanned files with their digests
/// and, in a portable capture, their S3 properties.
struct FilesView<'a> {
    scanned: &'a [Scanned],
    produced: &'a [Produced],
    props: Option<&'a HashMap<String, FileProps>>,
}

impl Serialize for FilesView<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Entry<'a> {
            path: &'a str,
            size: u64,
            mode: u32,
            sha256: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            content_type: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            metadata: Option<&'a BTreeMap<String, String>>,
        }
        s.collect_seq(self.scanned.iter().zip(self.produced).map(|(f, p)| {
            let props = self.props.and_then(|m| m.get(&f.path));
            Entry {
                path: &f.path,
                size: f.size,
                mode: f.mode,
                sha256: &p.sha256,
                content_type: props.and_then(|p| p.content_type.as_deref()),
                metadata: props.map(|p| &p.metadata).filter(|m| !m.is_empty()),
            }
        }))
    }
}

/// An immutable version-1 checkpoint manifest.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
}

/// The result of a plain capture.
#[derive(Debug, Clone, Serialize)]
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
}

/// Options of a capture.
#[derive(Default)]
pub struct CaptureOptions<'a> {
    /// Parent checkpoint to record (must belong to the same workspace).
    pub parent: Option<String>,
    /// Per-capture byte cap (0 = none).
    pub max_bytes: u64,
    /// Per-capture file cap (0 = none).
    pub max_files: u64,
    /// Capture sensitive-looking paths instead of excluding them.
    pub include_sensitive: bool,
    /// Portable (v2): capture the workspace bucket's objects and buckets too.
    pub portable: bool,
    /// Stop with `cancelled` (nothing published) once this instant has
    /// passed before the checkpoint is published.
    pub deadline: Option<std::time::Instant>,
    /// Receives bytes copied so far.
    pub progress: Option<&'a dyn Progress>,
    /// Test hook run after payloads are copied and before the re-scan.
    #[doc(hidden)]
    pub after_copy: Option<&'a (dyn Fn() + Sync)>,
}

impl CaptureOptions<'_> {
    fn check_deadline(&self) -> Result<()> {
        match self.deadline {
            Some(d) if std::time::Instant::now() > d => Err(WsError::Cancelled(
                "the deadline passed before the checkpoint was published".into(),
            )),
            _ => Ok(()),
        }
    }
}

fn state(registry: &Registry) -> PathBuf {
    registry.state_dir()
}

fn checkpoints_dir(registry: &Registry) -> PathBuf {
    state(registry).join("checkpoints")
}

/// Whether `d` is 64 lowercase hex digits (a SHA-256 as we store it).
fn valid_sha(d: &str) -> bool {
    d.len() == 64
        && d.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Callers pass only validated digests (manifests and caches are checked
/// on load).
fn blob_path(registry: &Registry, sha: &str) -> PathBuf {
    state(registry)
        .join("blobs")
        .join(sha.get(..2).unwrap_or("00"))
        .join(sha)
}

/// One scanned file with the stat fields the cache keys on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Scanned {
    path: String,
    size: u64,
    mode: u32,
    mtime_ns: i64,
    ctime_ns: i64,
    ino: u64,
    /// Hard links: such a file can change through a name the capture's
    /// watch does not cover.
    nlink: u64,
}

impl Scanned {
    fn new(path: String, meta: &fs::Metadata) -> Scanned {
        Scanned {
            path,
            size: meta.len(),
            mode: meta.permissions().mode() & 0o777,
            mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
            ctime_ns: meta.ctime() * 1_000_000_000 + meta.ctime_nsec(),
            ino: meta.ino(),
            nlink: meta.nlink(),
        }
    }
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Scan {
    files: Vec<Scanned>,
    excluded: Vec<String>,
}

/// Threads a scan uses: directories are independent, so two threads keep
/// the per-entry `statx` calls (the bulk of a scan) flowing on a second core.
const SCAN_THREADS: usize = 2;

/// Directories waiting to be read, shared by the scan threads.
struct ScanQueue {
    /// (absolute directory, slash path relative to the root, depth).
    pending: Vec<(PathBuf, String, usize)>,
    /// Threads currently reading a directory (they may queue more).
    busy: usize,
    error: Option<WsError>,
}

/// Scans the tree at `root`; with `watch`, each directory is watched before
/// it is read.
fn scan(root: &Path, include_sensitive: bool, watch: Option<&TreeWatch>) -> Result<Scan> {
    let queue = Mutex::new(ScanQueue {
        pending: vec![(root.to_path_buf(), String::new(), 0)],
        busy: 0,
        error: None,
    });
    let wake = std::sync::Condvar::new();
    let parts: Vec<Scan> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..SCAN_THREADS)
            .map(|_| s.spawn(|| scan_worker(&queue, &wake, include_sensitive, watch)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let q = queue
        .into_inner()
        .map_err(|_| WsError::InvalidRequest("scan worker panicked".into()))?;
    if let Some(e) = q.error {
        return Err(e);
    }
    if !q.pending.is_empty() || q.busy != 0 {
        return Err(WsError::InvalidRequest("scan worker panicked".into()));
    }
    let mut out = Scan::default();
    for p in parts {
        out.files.extend(p.files);
        out.excluded.extend(p.excluded);
    }
    // Threads finish directories in any order; the result is sorted so two
    // scans of the same tree compare equal.
    out.files.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    out.excluded.sort_unstable();
    Ok(out)
}

/// Takes directories off the queue until none are left (or one failed).
fn scan_worker(
    queue: &Mutex<ScanQueue>,
    wake: &std::sync::Condvar,
    sens: bool,
    watch: Option<&TreeWatch>,
) -> Scan {
    let mut out = Scan::default();
    let mut subdirs = Vec::new();
    let Ok(mut q) = queue.lock() else {
        return out;
    };
    loop {
        if q.error.is_some() {
            break;
        }
        let Some((dir, rel, depth)) = q.pending.pop() else {
            if q.busy == 0 {
                break;
            }
            q = match wake.wait(q) {
                Ok(q) => q,
                Err(_) => return out,
            };
            continue;
        };
        q.busy += 1;
        drop(q);
        let guard = PanicGuard { queue, wake };
        if let Some(w) = watch {
            w.add(&dir, &rel, depth);
        }
        let r = scan_dir(&dir, &rel, depth, sens, &mut out, &mut subdirs);
        std::mem::forget(guard);
        q = match queue.lock() {
            Ok(q) => q,
            Err(_) => return out,
        };
        q.busy -= 1;
        match r {
            Ok(()) => q.pending.append(&mut subdirs),
            Err(e) => {
                subdirs.clear();
                q.error.get_or_insert(e);
            }
        }
        wake.notify_all();
    }
    wake.notify_all();
    out
}

/// Armed while a scan thread reads a directory: if that panics, the other
/// threads must not wait forever for it to queue more work.
struct PanicGuard<'a> {
    queue: &'a Mutex<ScanQueue>,
    wake: &'a std::sync::Condvar,
}

impl Drop for PanicGuard<'_> {
    fn drop(&mut self) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.busy = q.busy.saturating_sub(1);
        q.error
            .get_or_insert_with(|| WsError::InvalidRequest("scan worker panicked".into()));
        self.wake.notify_all();
    }
}

/// Reads one directory: files are stat'ed (one `statx` each, relative to
/// the open directory), subdirectories are queued in `subdirs`. The entry
/// type comes from the directory listing, so directories cost no stat.
fn scan_dir(
    dir: &Path,
    rel: &str,
    depth: usize,
    sens: bool,
    out: &mut Scan,
    subdirs: &mut Vec<(PathBuf, String, usize)>,
) -> Result<()> {
    let rd = fs::read_dir(dir).map_err(|e| WsError::io_at("read directory", dir, e))?;
    // The first file of the directory has its whole path checked; the rest
    // only their names (the directory part is the same).
    let mut dir_checked = false;
    for entry in rd {
        let entry = entry.map_err(|e| WsError::io_at("read directory", dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if excluded(depth, &name) {
            continue;
        }
        let child = if rel.is_empty() {
            name.into_owned()
        } else {
            format!("{rel}/{name}")
        };
        let ft = entry
            .file_type()
            .map_err(|e| WsError::io_at("stat", &entry.path(), e))?;
        if ft.is_dir() {
            if !sens && is_sensitive(&format!("{child}/")) {
                out.excluded.push(format!("{child}/"));
                continue;
            }
            subdirs.push((entry.path(), child, depth + 1));
            continue;
        }
        if ft.is_file() {
            if !sens && is_sensitive(&child) {
                out.excluded.push(child);
                continue;
            }
            if dir_checked {
                check_checkpoint_leaf(&child)?;
            } else {
                check_checkpoint_path(&child)?;
                dir_checked = true;
            }
            // DirEntry::metadata does not follow symlinks and stats
            // relative to the open directory.
            let meta = entry
                .metadata()
                .map_err(|e| WsError::io_at("stat", &entry.path(), e))?;
            // Replaced by something else since the listing: refuse like
            // any non-regular entry (the re-scan would catch it anyway).
            if meta.file_type().is_file() {
                out.files.push(Scanned::new(child, &meta));
                continue;
            }
        }
        return Err(WsError::InvalidInput {
            path: entry.path(),
            reason: "symbolic links and special files cannot be captured".into(),
        });
    }
    Ok(())
}

/// Whether the tree still matches scan `before`: from the watch's events
/// when it covers the tree (plus a stat of each hard-linked file), else by
/// scanning again.
fn tree_unchanged(
    root: &Path,
    before: &Scan,
    sens: bool,
    watch: Option<&TreeWatch>,
) -> Result<bool> {
    match watch.map_or(Verdict::Unknown, |w| w.verdict(sens)) {
        Verdict::Changed => Ok(false),
        Verdict::Unchanged => Ok(before
            .files
            .iter()
            .filter(|f| f.nlink > 1)
            .all(|f| restat(root, f).as_ref() == Some(f))),
        Verdict::Unknown => Ok(scan(root, sens, None)? == *before),
    }
}

/// `f` as it is on disk now (`None` when it is no longer a regular file).
fn restat(root: &Path, f: &Scanned) -> Option<Scanned> {
    let meta = fs::symlink_metadata(root.join(&f.path)).ok()?;
    meta.file_type()
        .is_file()
        .then(|| Scanned::new(f.path.clone(), &meta))
}

/// The per-workspace stat cache (binary; see `statcache`).
fn cache_path(registry: &Registry, ws: &str) -> PathBuf {
    state(registry)
        .join("statcache")
        .join(format!("{ws}.cache"))
}

/// The JSON stat cache of earlier versions, removed with the workspace.
fn legacy_cache_path(registry: &Registry, ws: &str) -> PathBuf {
    state(registry).join("statcache").join(format!("{ws}.json"))
}

/// Cached digests for a sorted scan: both lists are in path order, so one
/// merge pass matches them without building a map.
fn cached_digests(cache: &StatCache, files: &[Scanned]) -> Vec<Option<String>> {
    let mut entries = cache.entries.iter().peekable();
    files
        .iter()
        .map(|f| {
            while entries.next_if(|c| c.path < f.path).is_some() {}
            let c = entries.next_if(|c| c.path == f.path)?;
            let same = c.size == f.size
                && c.mode == f.mode
                && c.mtime_ns == f.mtime_ns
                && c.ctime_ns == f.ctime_ns
                && c.ino == f.ino;
            (same && f.mtime_ns < cache.scan_start_ns).then(|| hex(&c.sha256))
        })
        .collect()
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
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

fn load_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    let bytes = fs::read(path).map_err(|e| WsError::io_at("read", path, e))?;
    serde_json::from_slice(&bytes).map_err(|e| WsError::Corrupt(format!("{}: {e}", path.display())))
}

fn load_summary(registry: &Registry, id: &str) -> Result<Summary> {
    let s: Summary = load_json(&checkpoints_dir(registry).join(id).join("summary.json"))?;
    if s.id != id {
        return Err(WsError::Corrupt(format!(
            "checkpoint {id} names itself {}",
            s.id
        )));
    }
    Ok(s)
}

/// Loads a published checkpoint manifest.
pub fn load_manifest(registry: &Registry, id: &str) -> Result<CheckpointManifest> {
    check_checkpoint_id(id)?;
    let dir = checkpoints_dir(registry).join(id);
    if !dir.is_dir() {
        return Err(WsError::NotFound(format!("checkpoint {id}")));
    }
    let m: CheckpointManifest = load_json(&dir.join("manifest.json"))?;
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
        return Err(WsError::Corrupt(format!(
            "checkpoint {id} manifest does not match"
        )));
    }
    Ok(m)
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

/// One payload to produce: a file whose digest is unknown (hash + store) or
/// known from the cache (verify the blob exists).
struct Work<'a> {
    file: &'a Scanned,
    cached: Option<String>,
}

struct Produced {
    sha256: String,
    /// Staged temp blob to publish, when the blob did not exist yet.
    staged: Option<PathBuf>,
}

/// Captures workspace `ws` into a new checkpoint.
pub fn capture(registry: &Registry, ws: &str, opts: &CaptureOptions) -> Result<CheckpointResult> {
    let rec = registry.get(ws)?;
    registry.ensure()?;
    let locks = state(registry).join("capture-locks");
    create_private_dir(&locks)?;
    let _capture = FileLock::try_lock(&locks.join(format!("{ws}.lock")))?
        .ok_or_else(|| WsError::InProgress(ws.to_string()))?;
    let _registry_lock = registry.lock()?;
    let id = format!("cp_{}", random_hex(12));
    capture_locked(registry, &rec, &id, opts, None)
}

pub(crate) fn capture_locked(
    registry: &Registry,
    rec: &crate::registry::Record,
    id: &str,
    opts: &CaptureOptions,
    receipt: Option<Vec<u8>>,
) -> Result<CheckpointResult> {
    let ws = rec.id.as_str();
    if let Some(parent) = &opts.parent {
        check_checkpoint_id(parent).map_err(|e| WsError::InvalidParent(e.to_string()))?;
        check_belongs(registry, parent, ws).map_err(|e| WsError::InvalidParent(e.to_string()))?;
    }
    if !rec.dir.is_dir() {
        return Err(WsError::NotFound(format!(
            "workspace directory {}",
            rec.dir.display()
        )));
    }
    let scan_start = now_ns();
    let mut clock = PhaseClock::start();
    // Every directory is watched from before it is read, so the check after
    // copying needs no second scan (see `watch`).
    let watch = TreeWatch::new();
    // The stat cache and the retained checkpoints (for the retention caps)
    // are read while the tree is scanned.
    let (before, cache, retained) = std::thread::scope(|s| {
        let cache = s.spawn(|| StatCache::load(&cache_path(registry, ws)));
        let retained = s.spawn(|| summaries(registry));
        let before = scan(&rec.dir, opts.include_sensitive, watch.as_ref());
        (
            before,
            cache.join().unwrap_or_default(),
            retained
                .join()
                .unwrap_or_else(|_| Err(WsError::InvalidRequest("capture worker panicked".into()))),
        )
    });
    let before = before?;
    let retained = retained?;
    clock.lap("scan");
    // Portable captures compare the bucket's objects before and after too.
    let snapshot = || {
        opts.portable
            .then(|| snapshot_objects(&rec.dir, &rec.bucket, opts.include_sensitive))
            .transpose()
    };
    let objects_before = snapshot()?;
    let object_bytes: u64 = objects_before
        .as_ref()
        .map(|o| o.objects.iter().map(|x| x.size).sum())
        .unwrap_or(0);
    let object_count = objects_before
        .as_ref()
        .map(|o| o.objects.len() as u64)
        .unwrap_or(0);
    let files = before.files.len() as u64;
    let bytes: u64 = before.files.iter().map(|f| f.size).sum::<u64>() + object_bytes;
    // Portable captures always apply archive bounds (1 GiB / 100,000).
    let (max_bytes, max_files) = if opts.portable {
        (
            if opts.max_bytes == 0 {
                1 << 30
            } else {
                opts.max_bytes
            },
            if opts.max_files == 0 {
                100_000
            } else {
                opts.max_files
            },
        )
    } else {
        (opts.max_bytes, opts.max_files)
    };
    if max_files > 0 && files + object_count > max_files {
        return Err(WsError::CapacityExceeded(format!(
            "{} files and objects exceed the per-capture limit of {max_files}",
            files + object_count
        )));
    }
    if max_bytes > 0 && bytes > max_bytes {
        return Err(WsError::CapacityExceeded(format!(
            "{bytes} bytes exceed the per-capture limit of {max_bytes}"
        )));
    }
    admit(registry, rec, bytes, &retained)?;

    let work: Vec<Work> = before
        .files
        .iter()
        .zip(cached_digests(&cache, &before.files))
        .map(|(file, cached)| Work { file, cached })
        .collect();
    drop(cache);
    let tmp = state(registry).join("tmp");
    create_private_dir(&tmp)?;
    clock.lap("admit");
    let produced = produce_all(registry, &rec.dir, &tmp, &work, opts)?;
    clock.lap("copy");
    let mut object_payloads: Vec<(Produced, u64)> = Vec::new();
    if let Some(snap) = &objects_before {
        for o in &snap.objects {
            match stage_bytes(registry, &tmp, &o.body) {
                Ok(p) => object_payloads.push((p, o.size)),
                Err(e) => {
                    discard(&produced);
                    discard_pairs(&object_payloads);
                    return Err(e);
                }
            }
        }
    }
    if let Some(hook) = opts.after_copy {
        hook();
    }
    // Until the blobs are published, a failure deletes what was staged.
    let abandon = |e: WsError| -> Result<CheckpointResult> {
        discard(&produced);
        discard_pairs(&object_payloads);
        Err(e)
    };
    if let Err(e) = opts.check_deadline() {
        return abandon(e);
    }
    let mut to_publish: Vec<(&Produced, u64)> = produced
        .iter()
        .zip(&work)
        .map(|(p, w)| (p, w.file.size))
        .collect();
    to_publish.extend(object_payloads.iter().map(|(p, s)| (p, *s)));
    let staged = staged_blobs(&to_publish);
    let objects_identity = objects_before.as_ref().map(ObjectSnapshot::identity);
    let mut excluded_paths = before.excluded.clone();
    if let Some(o) = &objects_before {
        excluded_paths.extend(o.excluded.iter().cloned());
    }
    let created = now_rfc3339();
    let summary = Summary {
        version: 1,
        id: id.to_string(),
        workspace_id: ws.to_string(),
        parent_id: opts.parent.clone(),
        created: created.clone(),
        files,
        bytes,
    };
    let extra: Vec<(&str, Vec<u8>)> = receipt.map(|r| ("receipt.json", r)).into_iter().collect();
    // Many new blobs are flushed with one syncfs after they are named (it
    // covers the checkpoint's files too); a few are fsynced one by one.
    let many_blobs = staged.len() > FEW_BLOBS;
    let objects: Vec<ObjectEntry> = objects_before
        .as_ref()
        .map(|o| {
            o.objects
                .iter()
                .zip(&object_payloads)
                .map(|(o, (p, _))| ObjectEntry {
                    bucket: o.bucket.clone(),
                    key: o.key.clone(),
                    size: o.size,
                    sha256: p.sha256.clone(),
                    content_type: o.content_type.clone(),
                    metadata: o.metadata.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    let manifest = ManifestView {
        version: if objects_before.is_some() { 2 } else { 1 },
        id,
        workspace_id: ws,
        parent_id: opts.parent.as_deref(),
        created: &created,
        files: FilesView {
            scanned: &before.files,
            produced: &produced,
            props: objects_before.as_ref().map(|o| &o.file_props),
        },
        excluded: &excluded_paths,
        primary_bucket: objects_before.as_ref().map(|_| rec.bucket.as_str()),
        buckets: objects_before.as_ref().map_or(&[], |o| &o.buckets),
        objects: &objects,
    };
    // The stat cache is an optimisation: failing to save it is harmless.
    // Not fsynced: after a crash the cache is the old one, the new one or
    // unreadable (then ignored); each entry names a published blob.
    let encode_cache = || {
        StatCache {
            scan_start_ns: scan_start,
            entries: before
                .files
                .iter()
                .zip(&produced)
                .filter_map(|(f, p)| {
                    Some(CacheEntry {
                        path: f.path.clone(),
                        size: f.size,
                        mode: f.mode,
                        mtime_ns: f.mtime_ns,
                        ctime_ns: f.ctime_ns,
                        ino: f.ino,
                        sha256: unhex32(&p.sha256)?,
                    })
                })
                .collect(),
        }
        .encode()
    };
    // Meanwhile the staged blobs and the checkpoint's own files are written
    // and flushed, and the next stat cache is encoded. The checkpoint stays a
    // stage directory until the tree is known unchanged. Its blobs take their
    // content address as soon as their bytes are durable: a refused capture
    // leaves only complete blobs no checkpoint names, which garbage
    // collection removes (and a retry reuses).
    let (check, named, stage, cache_bytes) = std::thread::scope(|s| {
        let named = s.spawn(|| -> Result<u64> {
            make_blobs_durable(registry, &staged)?;
            let (stored, dirs) = publish_blob_names(registry, &staged)?;
            // Many blobs: their names are flushed by the syncfs that also
            // covers the staged checkpoint files.
            if !many_blobs {
                let dirs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
                fsync_parallel(&dirs)?;
            }
            Ok(stored)
        });
        let stage =
            s.spawn(|| stage_checkpoint(registry, &manifest, &summary, &extra, !many_blobs));
        let cache_bytes = s.spawn(encode_cache);
        let check = tree_unchanged(&rec.dir, &before, opts.include_sensitive, watch.as_ref())
            .and_then(|same| Ok((same, snapshot()?)));
        let panicked = || WsError::InvalidRequest("capture worker panicked".into());
        (
            check,
            named.join().unwrap_or_else(|_| Err(panicked())),
            stage.join().unwrap_or_else(|_| Err(panicked())),
            cache_bytes.join().ok(),
        )
    });
    let stage = match stage {
        Ok(stage) => stage,
        Err(e) => return abandon(e),
    };
    let abandon_staged = |e: WsError| -> Result<CheckpointResult> {
        stage.discard();
        abandon(e)
    };
    let ((tree_same, objects_after), stored_bytes) =
        match check.and_then(|r| named.map(|stored| (r, stored))) {
            Ok(r) => r,
            Err(e) => return abandon_staged(e),
        };
    clock.lap("check+flush");
    let objects_same = objects_identity == objects_after.as_ref().map(ObjectSnapshot::identity);
    if !tree_same || !objects_same {
        return abandon_staged(WsError::WorkspaceChanged(
            "files or objects changed while the capture copied them; pause writers and retry"
                .into(),
        ));
    }
    if let Err(e) = opts.check_deadline() {
        return abandon_staged(e);
    }
    // Saved only once the blob names it holds are durable (digests from the
    // cache are trusted without looking at the blob), while the checkpoint
    // is renamed into place.
    let save_cache = || {
        if let Some(bytes) = &cache_bytes {
            StatCache::write_encoded(&cache_path(registry, ws), bytes);
        }
    };
    stage.commit(registry, id, many_blobs, &save_cache)?;
    clock.lap("publish");
    Ok(CheckpointResult {
        version: 1,
        checkpoint_id: id.to_string(),
        workspace_id: ws.to_string(),
        parent_checkpoint_id: opts.parent.clone(),
        created,
        files,
        bytes,
        stored_bytes,
        objects: opts.portable.then_some(object_count),
        excluded_sensitive_paths: excluded_paths,
    })
}

/// Logs how long each phase of a capture took (at debug level: `STOW_LOG=stow_workspace=debug`).
struct PhaseClock(std::time::Instant);

impl PhaseClock {
    fn start() -> Self {
        Self(std::time::Instant::now())
    }

    fn lap(&mut self, phase: &str) {
        let now = std::time::Instant::now();
        tracing::debug!(
            phase,
            micros = (now - self.0).as_micros() as u64,
            "capture phase"
        );
        self.0 = now;
    }
}

/// Retention caps of the workspace and the standing policy; refuses rather
/// than evicting.
/// `all`: every checkpoint of the registry partition.
fn admit(
    registry: &Registry,
    rec: &crate::registry::Record,
    bytes: u64,
    all: &[Summary],
) -> Result<()> {
    let mine: Vec<&Summary> = all.iter().filter(|s| s.workspace_id == rec.id).collect();
    let my_bytes: u64 = mine.iter().map(|s| s.bytes).sum();
    if rec.max_checkpoints > 0 && mine.len() as u64 >= rec.max_checkpoints {
        return Err(WsError::CapacityExceeded(format!(
            "workspace {} retains {} checkpoints, at its limit of {}; delete one first",
            rec.id,
            mine.len(),
            rec.max_checkpoints
        )));
    }
    if rec.max_checkpoint_bytes > 0 && my_bytes + bytes > rec.max_checkpoint_bytes {
        return Err(WsError::CapacityExceeded(format!(
            "retained checkpoint bytes {} + {bytes} would exceed the limit of {}",
            my_bytes, rec.max_checkpoint_bytes
        )));
    }
    let policy = registry.policy()?;
    let total_bytes: u64 = all.iter().map(|s| s.bytes).sum();
    if min_bound(policy.max_checkpoints, 0) > 0 && all.len() as u64 >= policy.max_checkpoints {
        return Err(WsError::CapacityExceeded(format!(
            "the registry retains {} checkpoints, at its policy limit of {}",
            all.len(),
            policy.max_checkpoints
        )));
    }
    if policy.max_checkpoint_bytes > 0 && total_bytes + bytes > policy.max_checkpoint_bytes {
        return Err(WsError::CapacityExceeded(format!(
            "registry checkpoint bytes {total_bytes} + {bytes} would exceed the policy limit of {}",
            policy.max_checkpoint_bytes
        )));
    }
    Ok(())
}

fn produce_all(
    registry: &Registry,
    root: &Path,
    tmp: &Path,
    work: &[Work],
    opts: &CaptureOptions,
) -> Result<Vec<Produced>> {
    // Cached digests need no I/O: the cache is dropped whenever GC deletes
    // blobs, so a digest it holds names a blob that still exists.
    let mut slots: Vec<Option<Produced>> = work
        .iter()
        .map(|w| {
            w.cached.as_ref().map(|sha| Produced {
                sha256: sha.clone(),
                staged: None,
            })
        })
        .collect();
    let todo: Vec<usize> = (0..work.len()).filter(|&i| slots[i].is_none()).collect();
    let total: u64 = todo.iter().map(|&i| work[i].file.size).sum();
    let done = std::sync::atomic::AtomicU64::new(0);
    let next = AtomicUsize::new(0);
    let failed = std::sync::atomic::AtomicBool::new(false);
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(2, 4)
        .min(todo.len().max(1));
    let outcomes: Vec<Vec<(usize, Result<Produced>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut local = Vec::new();
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        if k >= todo.len() || failed.load(Ordering::Relaxed) {
                            break;
                        }
                        let i = todo[k];
                        let r = opts
                            .check_deadline()
                            .and_then(|()| produce_one(registry, root, tmp, &work[i]));
                        if r.is_err() {
                            failed.store(true, Ordering::Relaxed);
                        }
                        local.push((i, r));
                        if let Some(p) = opts.progress {
                            let size = work[i].file.size;
                            let now = done.fetch_add(size, Ordering::Relaxed) + size;
                            p.update("capture", now, total);
                        }
                    }
                    local
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut first_err = None;
    for (i, r) in outcomes.into_iter().flatten() {
        match r {
            Ok(p) => slots[i] = Some(p),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    let complete = slots.iter().all(Option::is_some);
    let produced: Vec<Produced> = slots.into_iter().flatten().collect();
    if let Some(e) = first_err {
        discard(&produced);
        return Err(e);
    }
    if !complete {
        discard(&produced);
        return Err(WsError::InvalidRequest("a capture worker failed".into()));
    }
    Ok(produced)
}

fn discard(produced: &[Produced]) {
    for p in produced {
        if let Some(t) = &p.staged {
            let _ = fs::remove_file(t);
        }
    }
}

fn blob_ok(registry: &Registry, sha: &str, size: u64) -> bool {
    fs::metadata(blob_path(registry, sha)).is_ok_and(|m| m.is_file() && m.len() == size)
}

fn produce_one(registry: &Registry, root: &Path, tmp: &Path, w: &Work) -> Result<Produced> {
    if let Some(sha) = &w.cached {
        if blob_ok(registry, sha, w.file.size) {
            return Ok(Produced {
                sha256: sha.clone(),
                staged: None,
            });
        }
    }
    // Hash and stage in one read. Staging even when the blob may already
    // exist keeps this single-pass; the duplicate is dropped at publication.
    let src = root.join(&w.file.path);
    let mut input = File::open(&src).map_err(|e| WsError::io_at("read", &src, e))?;
    let staged = tmp.join(random_hex(12));
    let mut out = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o400)
        .open(&staged)
        .map_err(|e| WsError::io_at("stage", &staged, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 << 10];
    let mut total = 0u64;
    let res: std::io::Result<()> = (|| {
        loop {
            let n = input.read(&mut buf)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
            out.write_all(&buf[..n])?;
            total += n as u64;
        }
        Ok(())
    })();
    if let Err(e) = res {
        let _ = fs::remove_file(&staged);
        return Err(WsError::io_at("copy", &src, e));
    }
    if total != w.file.size {
        let _ = fs::remove_file(&staged);
        return Err(WsError::WorkspaceChanged(format!(
            "{} changed size while it was copied",
            w.file.path
        )));
    }
    let sha = hex(&h.finalize());
    if blob_ok(registry, &sha, total) {
        let _ = fs::remove_file(&staged);
        return Ok(Produced {
            sha256: sha,
            staged: None,
        });
    }
    Ok(Produced {
        sha256: sha,
        staged: Some(staged),
    })
}

/// Up to this many new blobs are fsynced individually rather than with one
/// `syncfs`.
const FEW_BLOBS: usize = 64;

/// Flushes the whole file system holding `dir` (one flush instead of one
/// fsync per file; what `cp -a && sync` pays too).
fn syncfs(dir: &Path) -> Result<()> {
    let f = File::open(dir).map_err(|e| WsError::io_at("open", dir, e))?;
    // SAFETY: syncfs on a descriptor we own.
    if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
        return Err(WsError::io_at(
            "syncfs",
            dir,
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// The payloads of a capture that were staged (new to the blob store).
fn staged_blobs<'a>(all: &[(&'a Produced, u64)]) -> Vec<(&'a Produced, u64)> {
    all.iter()
        .filter(|(p, _)| p.staged.is_some())
        .copied()
        .collect()
}

/// At most this many fsyncs are in flight at once (the spec's bound for a
/// checkpoint's files; enough for the file system to batch them).
const FSYNC_PARALLEL: usize = 16;

/// Fsyncs files or directories on up to `FSYNC_PARALLEL` threads, so the
/// file system can flush them together instead of one after another.
fn fsync_parallel(paths: &[&Path]) -> Result<()> {
    let next = AtomicUsize::new(0);
    let first_err: Mutex<Option<WsError>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..paths.len().min(FSYNC_PARALLEL) {
            s.spawn(|| {
                while let Some(p) = paths.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let r = File::open(p).and_then(|f| f.sync_all());
                    if let Err(e) = r {
                        if let Ok(mut slot) = first_err.lock() {
                            slot.get_or_insert(WsError::io_at("fsync", p, e));
                        }
                    }
                }
            });
        }
    });
    match first_err.into_inner() {
        Ok(None) => Ok(()),
        Ok(Some(e)) => Err(e),
        Err(_) => Err(WsError::InvalidRequest("fsync worker panicked".into())),
    }
}

/// Makes the bytes of staged blobs durable. Nothing is published here, so
/// it can run while the tree is re-scanned; a capture that then finds the
/// tree changed only discards the staged files.
fn make_blobs_durable(registry: &Registry, staged: &[(&Produced, u64)]) -> Result<()> {
    if staged.is_empty() {
        return Ok(());
    }
    // A few new blobs are fsynced (in parallel); many are flushed with one
    // syncfs (cheaper than thousands of fsyncs, but it also flushes other
    // dirty data of the file system).
    if staged.len() <= FEW_BLOBS {
        let files: Vec<&Path> = staged
            .iter()
            .filter_map(|(p, _)| p.staged.as_deref())
            .collect();
        fsync_parallel(&files)
    } else {
        syncfs(&state(registry))
    }
}

/// Moves durable staged blobs to their content address. Returns the bytes
/// newly stored and the directories whose entries changed: the caller
/// flushes them together with the checkpoint's own files, before the
/// checkpoint is renamed into place (the only point where a manifest
/// naming these blobs becomes visible).
fn publish_blob_names(
    registry: &Registry,
    staged: &[(&Produced, u64)],
) -> Result<(u64, Vec<PathBuf>)> {
    if staged.is_empty() {
        return Ok((0, Vec::new()));
    }
    let blobs = state(registry).join("blobs");
    let mut stored = 0u64;
    let mut dirs = BTreeSet::new();
    // Blobs that existed before this capture were never staged (checked
    // after hashing, under the registry lock every capture holds), so the
    // only duplicates left are files of this capture with equal content.
    let mut published: HashSet<&str> = HashSet::new();
    for (p, size) in staged {
        let Some(tmp) = &p.staged else { continue };
        if !published.insert(p.sha256.as_str()) {
            let _ = fs::remove_file(tmp);
            continue;
        }
        let dst = blob_path(registry, &p.sha256);
        if let Some(d) = dst.parent() {
            if !dirs.contains(d) {
                create_private_dir(d)?;
                dirs.insert(d.to_path_buf());
            }
        }
        fs::rename(tmp, &dst).map_err(|e| WsError::io_at("publish blob", &dst, e))?;
        stored += size;
    }
    // The blob root gains an entry when a new `<xx>` directory is made.
    let mut changed = vec![blobs];
    changed.extend(dirs);
    Ok((stored, changed))
}

/// A checkpoint directory written under a temporary name in the
/// checkpoints directory: invisible to readers until committed.
pub(crate) struct StagedCheckpoint {
    dir: PathBuf,
}

/// Writes a checkpoint's manifest, summary and `extra` (name, bytes) files
/// into a fresh stage directory; with `fsync`, flushes them and the stage
/// directory as well. Nothing is left behind on failure.
pub(crate) fn stage_checkpoint(
    registry: &Registry,
    manifest: &ManifestView,
    summary: &Summary,
    extra: &[(&str, Vec<u8>)],
    fsync: bool,
) -> Result<StagedCheckpoint> {
    let parent = checkpoints_dir(registry);
    create_private_dir(&parent)?;
    let stage = StagedCheckpoint {
        dir: parent.join(format!(".stage-{}", random_hex(8))),
    };
    create_private_dir(&stage.dir)?;
    let write = || -> Result<()> {
        let enc = |v: &dyn erased::Ser| v.bytes();
        let mut files: Vec<(&str, Vec<u8>)> = vec![
            ("manifest.json", enc(manifest)?),
            ("summary.json", enc(summary)?),
        ];
        files.extend(extra.iter().map(|(n, b)| (*n, b.clone())));
        let mut written: Vec<PathBuf> = Vec::with_capacity(files.len() + 1);
        for (name, bytes) in &files {
            let p = stage.dir.join(name);
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&p)
                .map_err(|e| WsError::io_at("write", &p, e))?;
            f.write_all(bytes)
                .map_err(|e| WsError::io_at("write", &p, e))?;
            written.push(p);
        }
        if fsync {
            written.push(stage.dir.clone());
            let paths: Vec<&Path> = written.iter().map(PathBuf::as_path).collect();
            fsync_parallel(&paths)?;
        }
        Ok(())
    };
    match write() {
        Ok(()) => Ok(stage),
        Err(e) => {
            stage.discard();
            Err(e)
        }
    }
}

impl StagedCheckpoint {
    /// Removes the stage directory (the checkpoint is abandoned).
    pub(crate) fn discard(&self) {
        let _ = fs::remove_dir_all(&self.dir);
    }

    /// Renames the stage to checkpoint `id` and flushes the checkpoints
    /// directory; with `syncfs`, first flushes the file system (the staged
    /// files and the blob names were written but not fsynced). Everything
    /// the checkpoint names must be durable once that flush is done:
    /// `after_flush` then runs on its own thread while the rename and the
    /// parent flush proceed.
    pub(crate) fn commit(
        self,
        registry: &Registry,
        id: &str,
        syncfs_first: bool,
        after_flush: &(dyn Fn() + Sync),
    ) -> Result<()> {
        let parent = checkpoints_dir(registry);
        let before_rename = || -> Result<PathBuf> {
            if syncfs_first {
                syncfs(&self.dir)?;
            }
            let dst = parent.join(id);
            if dst.exists() {
                return Err(WsError::InvalidRequest(format!(
                    "checkpoint {id} already exists"
                )));
            }
            Ok(dst)
        };
        let dst = match before_rename() {
            Ok(dst) => dst,
            Err(e) => {
                self.discard();
                return Err(e);
            }
        };
        std::thread::scope(|s| {
            s.spawn(after_flush);
            if let Err(e) = fs::rename(&self.dir, &dst) {
                self.discard();
                return Err(WsError::io_at("publish", &dst, e));
            }
            // Past the rename the checkpoint is visible: a failure now
            // leaves its durability unknown, never "not committed".
            fsync_dir(&parent).map_err(|e| WsError::OutcomeUnknown(e.to_string()))
        })
    }
}

mod erased {
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

/// One difference between two checkpoints.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Change {
    pub path: String,
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<FileEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<FileEntry>,
}

/// The result of `diff`.
#[derive(Debug, Clone, Serialize)]
pub struct DiffResult {
    pub version: u32,
    pub changes: Vec<Change>,
    /// Portable (v2) comparisons only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buckets: Option<Vec<BucketChange>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objects: Option<Vec<ObjectChange>>,
}

/// Differences between two checkpoints, sorted by path: `added`, `deleted`,
/// `changed` (content or mode).
pub fn diff(registry: &Registry, from: &str, to: &str) -> Result<DiffResult> {
    let a = load_manifest(registry, from)?;
    let b = load_manifest(registry, to)?;
    let portable = a.version == 2 || b.version == 2;
    Ok(DiffResult {
        version: 1,
        changes: diff_files(&a.files, &b.files),
        buckets: portable.then(|| diff_buckets(&a.buckets, &b.buckets)),
        objects: portable.then(|| diff_objects(&a.objects, &b.objects)),
    })
}

/// Sorted differences of two file lists.
pub fn diff_files(a: &[FileEntry], b: &[FileEntry]) -> Vec<Change> {
    let am: BTreeMap<&str, &FileEntry> = a.iter().map(|f| (f.path.as_str(), f)).collect();
    let bm: BTreeMap<&str, &FileEntry> = b.iter().map(|f| (f.path.as_str(), f)).collect();
    let paths: BTreeSet<&str> = am.keys().chain(bm.keys()).copied().collect();
    let mut out = Vec::new();
    for p in paths {
        let (kind, from, to) = match (am.get(p), bm.get(p)) {
            (None, Some(t)) => ("added", None, Some((*t).clone())),
            (Some(f), None) => ("deleted", Some((*f).clone()), None),
            (Some(f), Some(t)) if f.sha256 != t.sha256 || f.mode != t.mode || f.size != t.size => {
                ("changed", Some((*f).clone()), Some((*t).clone()))
            }
            _ => continue,
        };
        out.push(Change {
            path: p.to_string(),
            kind,
            from,
            to,
        });
    }
    out
}

/// Reads a blob, checking its size and digest.
pub fn verify_blob(registry: &Registry, f: &FileEntry) -> Result<()> {
    let p = blob_path(registry, &f.sha256);
    let mut file = File::open(&p)
        .map_err(|e| WsError::Corrupt(format!("payload of {} ({}): {e}", f.path, f.sha256)))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 << 10];
    let mut total = 0u64;
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| WsError::io_at("read", &p, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        total += n as u64;
    }
    if total != f.size || hex(&h.finalize()) != f.sha256 {
        return Err(WsError::Corrupt(format!(
            "payload of {} does not match its digest",
            f.path
        )));
    }
    Ok(())
}

/// Verifies every payload of a checkpoint.
pub fn verify(registry: &Registry, id: &str) -> Result<CheckpointManifest> {
    let m = load_manifest(registry, id)?;
    for f in &m.files {
        check_checkpoint_path(&f.path)?;
        verify_blob(registry, f)?;
    }
    for o in &m.objects {
        verify_blob(registry, &object_as_file(o))?;
    }
    Ok(m)
}

/// Writes a checkpoint's files into `root` (which exists and is empty but
/// for `.stow`), reproducing modes exactly, and returns the restored tree's
/// `base_identity`.
///
/// Each payload is verified while it is copied: the copy reads the blob
/// once, hashing the same bytes it writes, so a torn or altered blob fails
/// the restore (the caller removes the half-made root) without a separate
/// verification pass. The identity is a single sequential hash in walk
/// order, so one extra thread computes it from the (page-cached) blobs
/// while the copies run, instead of re-reading the whole tree afterwards.
pub(crate) fn materialize(
    registry: &Registry,
    m: &CheckpointManifest,
    root: &Path,
    progress: Option<&dyn Progress>,
) -> Result<String> {
    let mut made: BTreeSet<PathBuf> = BTreeSet::new();
    for f in &m.files {
        check_checkpoint_path(&f.path)?;
        if let Some(parent) = root.join(&f.path).parent() {
            if made.insert(parent.to_path_buf()) {
                use std::os::unix::fs::DirBuilderExt;
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o755)
                    .create(parent)
                    .map_err(|e| WsError::io_at("create directory", parent, e))?;
            }
        }
    }
    // Walk order of `base_identity`: names compared per directory level.
    // Checkpoint paths never contain `.git` or a leading `.stow` (checked
    // above), so the restored tree holds exactly these files besides `.stow`.
    let mut order: Vec<&FileEntry> = m.files.iter().collect();
    order.sort_by(|a, b| a.path.split('/').cmp(b.path.split('/')));
    let next = AtomicUsize::new(0);
    let total: u64 = m.files.iter().map(|f| f.size).sum();
    let done = std::sync::atomic::AtomicU64::new(0);
    let failed = std::sync::atomic::AtomicBool::new(false);
    let first_err: Mutex<Option<WsError>> = Mutex::new(None);
    let record = |e: WsError| {
        failed.store(true, Ordering::Relaxed);
        if let Ok(mut slot) = first_err.lock() {
            slot.get_or_insert(e);
        }
    };
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(2, 4);
    let identity = std::thread::scope(|s| {
        let identity = s.spawn(|| identity_of_blobs(registry, &order, &failed));
        for _ in 0..threads {
            s.spawn(|| {
                let mut buf = vec![0u8; 256 << 10];
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= order.len() || failed.load(Ordering::Relaxed) {
                        break;
                    }
                    if let Err(e) = copy_verified(registry, order[i], root, &mut buf) {
                        record(e);
                    }
                    if let Some(p) = progress {
                        let size = order[i].size;
                        p.update(
                            "restore",
                            done.fetch_add(size, Ordering::Relaxed) + size,
                            total,
                        );
                    }
                }
            });
        }
        identity.join()
    });
    if let Ok(Some(e)) = first_err.into_inner() {
        return Err(e);
    }
    match identity {
        Ok(Ok(Some(id))) => Ok(id),
        Ok(Ok(None)) => Err(WsError::InvalidRequest("restore stopped early".into())),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(WsError::InvalidRequest("restore worker panicked".into())),
    }
}

/// Copies one payload to `root/<path>` (exclusive create, exact mode),
/// hashing the bytes as they are written; a size or digest mismatch is
/// `Corrupt`.
fn copy_verified(registry: &Registry, f: &FileEntry, root: &Path, buf: &mut [u8]) -> Result<()> {
    let src = blob_path(registry, &f.sha256);
    let dst = root.join(&f.path);
    let mut input = File::open(&src)
        .map_err(|e| WsError::Corrupt(format!("payload of {} ({}): {e}", f.path, f.sha256)))?;
    // Exclusive create: two manifest entries can never write one file.
    let mut out = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&dst)
        .map_err(|e| WsError::io_at("create", &dst, e))?;
    let mut h = Sha256::new();
    let mut total = 0u64;
    loop {
        let n = match input.read(buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(WsError::io_at("read", &src, e)),
        };
        if n == 0 {
            break;
        }
        let chunk = buf.get(..n).unwrap_or_default();
        h.update(chunk);
        out.write_all(chunk)
            .map_err(|e| WsError::io_at("write", &dst, e))?;
        total += n as u64;
    }
    if total != f.size || hex(&h.finalize()) != f.sha256 {
        return Err(WsError::Corrupt(format!(
            "payload of {} does not match its digest",
            f.path
        )));
    }
    // fchmod on the open file: exact mode regardless of the umask.
    out.set_permissions(fs::Permissions::from_mode(f.mode))
        .map_err(|e| WsError::io_at("chmod", &dst, e))
}

/// `base_identity` of a tree holding exactly `files` (in walk order), read
/// from their blobs. `None` when stopped because a copy failed.
fn identity_of_blobs(
    registry: &Registry,
    files: &[&FileEntry],
    failed: &std::sync::atomic::AtomicBool,
) -> Result<Option<String>> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 << 10];
    for f in files {
        if failed.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let p = blob_path(registry, &f.sha256);
        let mut file = File::open(&p)
            .map_err(|e| WsError::Corrupt(format!("payload of {} ({}): {e}", f.path, f.sha256)))?;
        h.update(f.path.as_bytes());
        h.update([0u8]);
        let mut total = 0u64;
        loop {
            let n = match file.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(WsError::io_at("read", &p, e)),
            };
            if n == 0 {
                break;
            }
            h.update(buf.get(..n).unwrap_or_default());
            total += n as u64;
        }
        // The copy verifies the digest; the size check keeps a blob that
        // changed between the two reads from yielding a wrong identity.
        if total != f.size {
            return Err(WsError::Corrupt(format!(
                "payload of {} does not match its size",
                f.path
            )));
        }
        h.update([0u8]);
    }
    Ok(Some(format!("sha256:{}", hex(&h.finalize()))))
}

/// The result of `checkpoint-delete`.
#[derive(Debug, Clone, Serialize)]
pub struct DeleteResult {
    pub version: u32,
    pub checkpoint_id: String,
    pub deleted: bool,
    /// Blobs no retained checkpoint needed any more.
    pub freed_blobs: u64,
    pub freed_bytes: u64,
}

/// Deletes a checkpoint (refused while another names it as parent) and
/// collects blobs no retained checkpoint needs.
pub fn delete(registry: &Registry, id: &str) -> Result<DeleteResult> {
    check_checkpoint_id(id)?;
    let _lock = registry.lock()?;
    if !checkpoints_dir(registry).join(id).is_dir() {
        return Err(WsError::NotFound(format!("checkpoint {id}")));
    }
    for s in summaries(registry)? {
        if s.parent_id.as_deref() == Some(id) {
            return Err(WsError::Refused(format!(
                "checkpoint {} names {id} as its parent; delete it first",
                s.id
            )));
        }
    }
    remove_checkpoint_dir(registry, id)?;
    let (freed_blobs, freed_bytes) = gc_locked(registry)?;
    Ok(DeleteResult {
        version: 1,
        checkpoint_id: id.to_string(),
        deleted: true,
        freed_blobs,
        freed_bytes,
    })
}

/// Unpublishes atomically (rename to a dot name listing ignores), then
/// removes the directory.
fn remove_checkpoint_dir(registry: &Registry, id: &str) -> Result<()> {
    let dir = checkpoints_dir(registry);
    let src = dir.join(id);
    let trash = dir.join(format!(".deleted-{}", random_hex(8)));
    fs::rename(&src, &trash).map_err(|e| WsError::io_at("unpublish", &src, e))?;
    fsync_dir(&dir)?;
    fs::remove_dir_all(&trash).map_err(|e| WsError::io_at("remove", &trash, e))
}

/// Deletes every checkpoint of a workspace and collects blobs. Caller holds
/// the registry lock.
pub(crate) fn delete_workspace_checkpoints(registry: &Registry, ws: &str) -> Result<()> {
    if !checkpoints_dir(registry).exists() {
        return Ok(());
    }
    let mut any = false;
    for s in summaries(registry)? {
        if s.workspace_id == ws {
            remove_checkpoint_dir(registry, &s.id)?;
            any = true;
        }
    }
    let _ = fs::remove_file(cache_path(registry, ws));
    let _ = fs::remove_file(legacy_cache_path(registry, ws));
    let _ = fs::remove_file(
        state(registry)
            .join("capture-locks")
            .join(format!("{ws}.lock")),
    );
    if any {
        gc_locked(registry)?;
    }
    Ok(())
}

/// Collects unreferenced blobs and leftover staging. Caller holds the
/// registry lock, so no capture is running in this partition.
pub(crate) fn gc_locked(registry: &Registry) -> Result<(u64, u64)> {
    let mut needed: HashMap<String, ()> = HashMap::new();
    for s in summaries(registry)? {
        // An unreadable manifest aborts: never delete what might be needed.
        let m = load_manifest(registry, &s.id)?;
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
            let _ = fs::remove_file(e.path());
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
    let (mut n, mut bytes) = (0u64, 0u64);
    for (path, size) in doomed {
        if fs::remove_file(&path).is_ok() {
            n += 1;
            bytes += size;
        }
    }
    Ok((n, bytes))
}

/// Physical bytes held by the partition's blob store.
pub fn stored_bytes(registry: &Registry) -> u64 {
    let mut total = 0;
    if let Ok(rd) = fs::read_dir(state(registry).join("blobs")) {
        for sub in rd.flatten() {
            if let Ok(inner) = fs::read_dir(sub.path()) {
                total += inner
                    .flatten()
                    .filter_map(|b| b.metadata().ok())
                    .map(|m| m.len())
                    .sum::<u64>();
            }
        }
    }
    total
}

/// An object entry seen as a payload to verify.
pub(crate) fn object_as_file(o: &ObjectEntry) -> FileEntry {
    FileEntry {
        path: format!("s3://{}/{}", o.bucket, o.key),
        size: o.size,
        mode: 0o600,
        sha256: o.sha256.clone(),
        ..FileEntry::default()
    }
}

/// Reads a verified blob into memory (object payloads).
pub(crate) fn read_blob(registry: &Registry, f: &FileEntry) -> Result<Vec<u8>> {
    verify_blob(registry, f)?;
    let p = blob_path(registry, &f.sha256);
    fs::read(&p).map_err(|e| WsError::io_at("read", &p, e))
}

/// One object read for a portable capture.
struct SnapObject {
    bucket: String,
    key: String,
    size: u64,
    etag: String,
    content_type: Option<String>,
    metadata: BTreeMap<String, String>,
    body: Vec<u8>,
}

struct ObjectSnapshot {
    buckets: Vec<String>,
    objects: Vec<SnapObject>,
    excluded: Vec<String>,
    /// S3 properties recorded for files of the primary bucket, by path.
    file_props: HashMap<String, FileProps>,
}

type ObjectIdentity = (String, String, u64, String);

impl ObjectSnapshot {
    fn identity(&self) -> Vec<ObjectIdentity> {
        self.objects
            .iter()
            .map(|o| (o.bucket.clone(), o.key.clone(), o.size, o.etag.clone()))
            .collect()
    }
}

fn key_excluded(key: &str) -> bool {
    key.split('/').enumerate().any(|(i, seg)| {
        seg.eq_ignore_ascii_case(".git") || (i == 0 && seg.eq_ignore_ascii_case(".stow"))
    })
}

/// Reads every private-store object of a workspace (files of the primary
/// bucket are captured as files). A running server owns the store: capture
/// then reports `in_progress`.
fn snapshot_objects(root: &Path, primary: &str, include_sensitive: bool) -> Result<ObjectSnapshot> {
    let dir = crate::bucket::private_store_dir(root);
    let mut snap = ObjectSnapshot {
        buckets: vec![primary.to_string()],
        objects: Vec::new(),
        excluded: Vec::new(),
        file_props: HashMap::new(),
    };
    if !dir.exists() {
        return Ok(snap);
    }
    let view = crate::bucket::WorkspaceBucket::open(root, primary)?;
    snap.file_props = view
        .file_properties()?
        .into_iter()
        .map(|(path, p)| {
            let props = FileProps {
                content_type: p.content_type,
                metadata: p.metadata,
            };
            (path, props)
        })
        .filter(|(_, p)| *p != FileProps::default())
        .collect();
    snap.buckets = view.bucket_names()?;
    if !snap.buckets.iter().any(|b| b == primary) {
        snap.buckets.push(primary.to_string());
        snap.buckets.sort();
    }
    for b in snap.buckets.clone() {
        for o in view.private_objects(&b)? {
            if key_excluded(&o.key) {
                continue;
            }
            if !include_sensitive && is_sensitive(&o.key) {
                snap.excluded.push(format!("s3://{b}/{}", o.key));
                continue;
            }
            let meta = view
                .store()
                .head_object(&b, &o.key)
                .map_err(|e| WsError::InvalidRequest(format!("object {b}/{}: {e}", o.key)))?;
            let (body, props) = view.read_bytes(&b, &o.key)?;
            snap.objects.push(SnapObject {
                bucket: b.clone(),
                key: o.key,
                size: body.len() as u64,
                etag: meta.etag,
                content_type: props.content_type,
                metadata: props.metadata,
                body,
            });
        }
    }
    Ok(snap)
}

fn discard_pairs(v: &[(Produced, u64)]) {
    for (p, _) in v {
        if let Some(t) = &p.staged {
            let _ = fs::remove_file(t);
        }
    }
}

/// Stages bytes already in memory as a blob candidate.
fn stage_bytes(registry: &Registry, tmp: &Path, body: &[u8]) -> Result<Produced> {
    let sha = hex(&Sha256::digest(body));
    if blob_ok(registry, &sha, body.len() as u64) {
        return Ok(Produced {
            sha256: sha,
            staged: None,
        });
    }
    let staged = tmp.join(random_hex(12));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o400)
        .open(&staged)
        .map_err(|e| WsError::io_at("stage", &staged, e))?;
    if let Err(e) = f.write_all(body) {
        let _ = fs::remove_file(&staged);
        return Err(WsError::io_at("stage", &staged, e));
    }
    Ok(Produced {
        sha256: sha,
        staged: Some(staged),
    })
}

/// One bucket difference of a portable diff.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BucketChange {
    pub bucket: String,
    pub kind: &'static str,
}

/// One object difference of a portable diff.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ObjectChange {
    pub bucket: String,
    pub key: String,
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<ObjectEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<ObjectEntry>,
}

fn diff_buckets(a: &[String], b: &[String]) -> Vec<BucketChange> {
    let a: BTreeSet<&String> = a.iter().collect();
    let b: BTreeSet<&String> = b.iter().collect();
    let mut out: Vec<BucketChange> = b
        .difference(&a)
        .map(|n| BucketChange {
            bucket: (*n).clone(),
            kind: "added",
        })
        .chain(a.difference(&b).map(|n| BucketChange {
            bucket: (*n).clone(),
            kind: "deleted",
        }))
        .collect();
    out.sort_by(|x, y| x.bucket.cmp(&y.bucket));
    out
}

fn diff_objects(a: &[ObjectEntry], b: &[ObjectEntry]) -> Vec<ObjectChange> {
    let key = |o: &ObjectEntry| (o.bucket.clone(), o.key.clone());
    let am: BTreeMap<(String, String), &ObjectEntry> = a.iter().map(|o| (key(o), o)).collect();
    let bm: BTreeMap<(String, String), &ObjectEntry> = b.iter().map(|o| (key(o), o)).collect();
    let keys: BTreeSet<&(String, String)> = am.keys().chain(bm.keys()).collect();
    let mut out = Vec::new();
    for k in keys {
        let (kind, from, to) = match (am.get(k), bm.get(k)) {
            (None, Some(t)) => ("added", None, Some((*t).clone())),
            (Some(f), None) => ("deleted", Some((*f).clone()), None),
            (Some(f), Some(t)) if f != t => ("changed", Some((*f).clone()), Some((*t).clone())),
            _ => continue,
        };
        out.push(ObjectChange {
            bucket: k.0.clone(),
            key: k.1.clone(),
            kind,
            from,
            to,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scanned(path: &str, size: u64) -> Scanned {
        Scanned {
            path: path.into(),
            size,
            mode: 0o644,
            mtime_ns: 1,
            ctime_ns: 2,
            ino: 3,
            nlink: 1,
        }
    }

    #[test]
    fn the_manifest_view_writes_the_manifest_format_byte_for_byte() {
        let files = vec![scanned("a.txt", 3), scanned("d/b \"q\".bin", 0)];
        let produced: Vec<Produced> = ["ab", "cd"]
            .iter()
            .map(|c| Produced {
                sha256: c.repeat(32),
                staged: None,
            })
            .collect();
        let object = ObjectEntry {
            bucket: "other".into(),
            key: "k:1".into(),
            size: 5,
            sha256: "ef".repeat(32),
            content_type: Some("text/plain".into()),
            metadata: BTreeMap::from([("m".into(), "v".into())]),
        };
        let excluded = vec![".env".to_string()];
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
        for (parent, portable) in [(None, false), (Some("cp_parent"), true)] {
            let objects = if portable {
                vec![object.clone()]
            } else {
                vec![]
            };
            let view = ManifestView {
                version: if portable { 2 } else { 1 },
                id: "cp_x",
                workspace_id: "ws_y",
                parent_id: parent,
                created: "2026-11-30T00:00:00Z",
                files: FilesView {
                    scanned: &files,
                    produced: &produced,
                    props: portable.then_some(&file_props),
                },
                excluded: &excluded,
                primary_bucket: portable.then_some("main"),
                buckets: if portable { &buckets } else { &[] },
                objects: &objects,
            };
            let owned = CheckpointManifest {
                version: view.version,
                id: "cp_x".into(),
                workspace_id: "ws_y".into(),
                parent_id: parent.map(str::to_string),
                created: "2026-11-30T00:00:00Z".into(),
                files: files
                    .iter()
                    .zip(&produced)
                    .map(|(f, p)| {
                        let props = file_props
                            .get(&f.path)
                            .filter(|_| portable)
                            .cloned()
                            .unwrap_or_default();
                        FileEntry {
                            path: f.path.clone(),
                            size: f.size,
                            mode: f.mode,
                            sha256: p.sha256.clone(),
                            content_type: props.content_type,
                            metadata: props.metadata,
                        }
                    })
                    .collect(),
                excluded: excluded.clone(),
                primary_bucket: portable.then(|| "main".to_string()),
                buckets: if portable { buckets.clone() } else { vec![] },
                objects: objects.clone(),
            };
            let enc = |v: &dyn erased::Ser| v.bytes().unwrap();
            assert_eq!(
                String::from_utf8(enc(&view)).unwrap(),
                String::from_utf8(enc(&owned)).unwrap()
            );
        }
    }
}
