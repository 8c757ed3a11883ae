//! The workspace bucket view (D4): the primary bucket's objects are the
//! files under the root (key = slash path, `.stow` and `.git` excluded); a
//! PUT with a portable key writes a real file atomically. Keys that are not
//! portable paths, keys whose path is blocked (a directory where the file
//! would go, or a file where a directory would), and every other bucket live
//! in a private `stow-store` under `<root>/.stow/objects`.
//!
//! Properties of file-backed objects written through the view (content
//! type, metadata, checksum, multipart ETag and parts) are kept in
//! `<root>/.stow/file-props.db`, tied to the file's stamp (size, mtime,
//! ctime, inode). A file changed behind the view's back no longer matches
//! its stamp: it gets default properties and a fresh MD5 ETag.
//!
//! [`WorkspaceBucket`] implements [`ObjectBackend`], so the S3 server serves
//! it unchanged (`stow-s3 workspace serve`).
//!
//! A served view enforces the workspace's quotas ([`ViewQuota`]) over files
//! and private objects together: the files' count and bytes are the private
//! store's "outside usage" (see [`Store::charge_outside`]), so a file write
//! and a private-object write are checked in one order and cannot pass a
//! limit together. The agent also writes files directly, which no quota can
//! stop; the view counts the tree again at open and before a file write
//! when its count is older than [`RECOUNT_AFTER`].

use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use md5::{Digest, Md5};
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use stow_store::{
    page_of_sorted, validate, BucketInfo, ByteRange, Checksum, CompletedPart, ConditionCheck,
    CopyOptions, CreateUploadOptions, ListPage, ListQuery, ObjectBackend, ObjectBody, ObjectMeta,
    ObjectProps, ObjectRead, ObjectSummary, PartInfo, PartOptions, PartSummary, PartsPage,
    PutOptions, ReceivedBody, Store, StoreError, StoreOptions, UploadInfo, UploadsPage, Usage,
    WriteCondition,
};

use crate::error::{Result, WsError};
use crate::fsutil::FileLock;
use crate::paths::check_checkpoint_path;
use crate::registry::Record;

type StoreResult<T> = std::result::Result<T, StoreError>;

/// One object as the view reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewObject {
    pub bucket: String,
    pub key: String,
    pub size: u64,
    /// `true` when the object is a file of the workspace tree.
    pub file: bool,
}

/// A workspace's buckets over its directory and private store.
pub struct WorkspaceBucket {
    root: PathBuf,
    primary: String,
    store: Store,
    /// Properties of file-backed objects, keyed by object key.
    props: Mutex<Connection>,
    /// Serializes the condition check and rename of file-backed writes, so
    /// two conditional writes of one file cannot both pass.
    writes: Mutex<()>,
    /// The workspace's session lock, when the view claims the workspace.
    _session: Option<FileLock>,
    /// When the tree's files were last counted into the store's outside
    /// usage; `None` for a view without quotas. Changed under `writes`.
    counted: Mutex<Option<Instant>>,
}

/// How stale a quota-bound view lets its count of the tree's files get
/// before a file write counts them again (the agent changes files directly).
pub const RECOUNT_AFTER: Duration = Duration::from_secs(2);

/// Quotas of a served view: stored bytes (file sizes, private objects and
/// in-flight upload parts) and objects (files and private objects).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ViewQuota {
    pub max_bytes: u64,
    pub max_objects: u64,
}

impl ViewQuota {
    /// The workspace's quotas, narrowed by a server's limits (0 keeps the
    /// workspace's). A limit above the workspace's is refused: a server
    /// may only narrow them.
    pub fn narrowed(record: &Record, max_bytes: u64, max_objects: u64) -> Result<ViewQuota> {
        let narrow = |asked: u64, own: u64, what: &str| match asked {
            0 => Ok(own),
            n if n <= own => Ok(n),
            n => Err(WsError::InvalidRequest(format!(
                "{what} {n} is above the workspace's quota of {own}; a server may only narrow it"
            ))),
        };
        Ok(ViewQuota {
            max_bytes: narrow(max_bytes, record.max_bytes, "max_bytes")?,
            max_objects: narrow(max_objects, record.max_objects, "max_objects")?,
        })
    }
}

fn store_err(e: StoreError) -> WsError {
    match e {
        StoreError::NoSuchKey { bucket, key } => {
            WsError::NotFound(format!("object {bucket}/{key}"))
        }
        StoreError::NoSuchBucket { bucket } => WsError::NotFound(format!("bucket {bucket}")),
        StoreError::StoreLocked { dir } => {
            WsError::InProgress(format!("object store {}", dir.display()))
        }
        other => WsError::InvalidRequest(other.to_string()),
    }
}

/// The private store directory of a workspace root.
pub fn private_store_dir(root: &Path) -> PathBuf {
    root.join(".stow").join("objects")
}

const PROPS_DB: &str = "file-props.db";

/// What identifies one version of a file without reading it. The ctime
/// cannot be set by a writer, so any write after ours changes the stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
    ino: u64,
}

impl Stamp {
    fn of(m: &fs::Metadata) -> Stamp {
        Stamp {
            size: m.len(),
            mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            ctime_ns: m.ctime() * 1_000_000_000 + m.ctime_nsec(),
            ino: m.ino(),
        }
    }

    fn encode(&self) -> String {
        format!(
            "{}:{}:{}:{}",
            self.size, self.mtime_ns, self.ctime_ns, self.ino
        )
    }
}

/// What a file key's path holds.
enum AtPath {
    /// Nothing yet: a file can be written there.
    Free,
    /// A regular file.
    File(PathBuf, fs::Metadata),
    /// A directory or special file at the key, or a file where a parent
    /// directory would be.
    Blocked,
    /// A symbolic link at the key or where a parent directory would be:
    /// never followed, and writes through it are refused.
    Link,
}

/// Properties of one file-backed object, valid while its stamp holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct FileProps {
    etag: String,
    #[serde(default)]
    props: ObjectProps,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    checksum: Option<Checksum>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    parts: Vec<PartSummary>,
}

fn open_props_db(root: &Path) -> StoreResult<Connection> {
    let conn = Connection::open(root.join(".stow").join(PROPS_DB))?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS file_props (
             key TEXT PRIMARY KEY,
             stamp TEXT NOT NULL,
             props TEXT NOT NULL
         )",
    )?;
    Ok(conn)
}

/// The change in (bytes, objects) when a file of `old` bytes (or none)
/// becomes one of `new` bytes (or none).
fn file_change(old: Option<u64>, new: Option<u64>) -> (i64, i64) {
    let size = |s: Option<u64>| s.unwrap_or(0) as i64;
    let count = |s: Option<u64>| i64::from(s.is_some());
    (size(new) - size(old), count(new) - count(old))
}

/// A body reader that fails once more than `room` bytes arrive.
struct CappedReader<'a> {
    inner: &'a mut dyn Read,
    room: u64,
    overflowed: bool,
}

impl Read for CappedReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        match self.room.checked_sub(n as u64) {
            Some(left) => {
                self.room = left;
                Ok(n)
            }
            None => {
                self.overflowed = true;
                Err(io::Error::other("the body exceeds the quota"))
            }
        }
    }
}

fn quoted_md5(file: &mut File) -> io::Result<String> {
    file.seek(SeekFrom::Start(0))?;
    let mut hasher = Md5::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let digest = hasher.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("\"{hex}\""))
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn is_missing(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

impl WorkspaceBucket {
    /// Opens (creating if needed) the view of `root` with `primary` as its
    /// primary bucket. The private store is owned exclusively while open.
    pub fn open(root: &Path, primary: &str) -> Result<WorkspaceBucket> {
        Self::open_with_quota(root, primary, None)
    }

    /// Opens the view like [`WorkspaceBucket::open`]; with a quota, writes
    /// through it that would take the workspace past a limit are refused
    /// with `quota_exceeded` (removals are always allowed).
    pub fn open_with_quota(
        root: &Path,
        primary: &str,
        quota: Option<ViewQuota>,
    ) -> Result<WorkspaceBucket> {
        let opts = StoreOptions {
            max_bytes: quota.map(|q| q.max_bytes),
            max_objects: quota.map(|q| q.max_objects),
            ..StoreOptions::default()
        };
        let store = Store::open(private_store_dir(root), opts).map_err(store_err)?;
        store.create_bucket(primary).map_err(store_err)?;
        let props = open_props_db(root).map_err(store_err)?;
        let view = WorkspaceBucket {
            root: root.to_path_buf(),
            primary: primary.to_string(),
            store,
            props: Mutex::new(props),
            writes: Mutex::new(()),
            _session: None,
            counted: Mutex::new(None),
        };
        if quota.is_some() {
            view.count_files().map_err(store_err)?;
        }
        Ok(view)
    }

    /// Keeps the workspace's session lock for as long as the view lives.
    pub fn hold_session(&mut self, session: FileLock) {
        self._session = Some(session);
    }

    /// The primary bucket's name.
    pub fn primary(&self) -> &str {
        &self.primary
    }

    /// The workspace root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The underlying private store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    fn db(&self) -> MutexGuard<'_, Connection> {
        self.props.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_writes(&self) -> MutexGuard<'_, ()> {
        self.writes.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn counted(&self) -> MutexGuard<'_, Option<Instant>> {
        self.counted.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts the tree's files into the store's outside usage. The caller
    /// holds the write lock (or is opening the view).
    fn count_files(&self) -> StoreResult<()> {
        let files = self.walk_files("")?;
        self.store.set_outside_usage(Usage {
            bytes: files.iter().map(|(_, m)| m.len()).sum(),
            objects: files.len() as u64,
        })?;
        *self.counted() = Some(Instant::now());
        Ok(())
    }

    /// Admits a file write that replaces a file of `old_size` bytes (`None`:
    /// no file there) with `new_size` bytes, against the quotas. Returns the
    /// charge, to undo with [`WorkspaceBucket::uncharge`] if the write fails.
    /// The caller holds the write lock.
    fn charge_file(&self, old_size: Option<u64>, new_size: u64) -> StoreResult<(i64, i64)> {
        let stale = match *self.counted() {
            None => return Ok((0, 0)),
            Some(at) => at.elapsed() >= RECOUNT_AFTER,
        };
        if stale {
            self.count_files()?;
        }
        let charge = file_change(old_size, Some(new_size));
        self.store.charge_outside(charge.0, charge.1)?;
        Ok(charge)
    }

    fn uncharge(&self, (bytes, objects): (i64, i64)) {
        self.adjust_files((-bytes, -objects));
    }

    /// Counts a file change that needs no admission: a removal, or bytes
    /// admitted elsewhere that only moved into the tree.
    fn note_file(&self, old_size: Option<u64>, new_size: Option<u64>) {
        self.adjust_files(file_change(old_size, new_size));
    }

    /// Changes the counted files' usage without a check (quota-bound views
    /// only). A failure leaves the count off until the next recount.
    fn adjust_files(&self, (bytes, objects): (i64, i64)) {
        if self.counted().is_none() || (bytes, objects) == (0, 0) {
            return;
        }
        if let Err(e) = self.store.adjust_outside(bytes, objects) {
            tracing::warn!("cannot count a file change into the quota: {e}");
        }
    }

    /// The size of the regular file at a file key, if there is one.
    fn file_size(&self, key: &str) -> StoreResult<Option<u64>> {
        Ok(self.regular_file(key)?.map(|(_, m)| m.len()))
    }

    /// Receives a body for a file key; with a quota, stops as soon as the
    /// body is larger than the room left (counting the file it replaces),
    /// so an oversized upload is refused without being stored first. The
    /// exact check is [`WorkspaceBucket::charge_file`]'s.
    fn receive_within_quota(
        &self,
        key: &str,
        body: &mut dyn Read,
        opts: PutOptions,
    ) -> StoreResult<ReceivedBody> {
        let Some(max) = self.store.options().max_bytes else {
            return self.store.receive(body, opts);
        };
        let used = ObjectBackend::usage(self)?.bytes;
        let room = (max + self.file_size(key)?.unwrap_or(0)).saturating_sub(used);
        let mut capped = CappedReader {
            inner: body,
            room,
            overflowed: false,
        };
        match self.store.receive(&mut capped, opts) {
            Err(_) if capped.overflowed => Err(StoreError::QuotaExceeded {
                reason: format!("the body is larger than the {room} bytes the quota has left"),
            }),
            other => other,
        }
    }

    /// Whether `bucket/key` names a file of the tree (if the path is free).
    fn file_key(&self, bucket: &str, key: &str) -> bool {
        bucket == self.primary && check_checkpoint_path(key).is_ok()
    }

    /// What stands at a file key's path, found by walking it without
    /// following symbolic links (a link could point outside the root).
    fn lookup(&self, key: &str) -> StoreResult<AtPath> {
        let mut path = self.root.clone();
        let segments: Vec<&str> = key.split('/').collect();
        for (i, seg) in segments.iter().enumerate() {
            path.push(seg);
            let meta = match fs::symlink_metadata(&path) {
                Ok(m) => m,
                Err(e) if is_missing(&e) => return Ok(AtPath::Free),
                Err(e) => return Err(e.into()),
            };
            let last = i + 1 == segments.len();
            if meta.file_type().is_symlink() {
                return Ok(AtPath::Link);
            }
            if last && meta.is_file() {
                return Ok(AtPath::File(path, meta));
            }
            if last || !meta.is_dir() {
                return Ok(AtPath::Blocked);
            }
        }
        Ok(AtPath::Free)
    }

    /// The regular file a file key names, if there is one.
    fn regular_file(&self, key: &str) -> StoreResult<Option<(PathBuf, fs::Metadata)>> {
        Ok(match self.lookup(key)? {
            AtPath::File(path, meta) => Some((path, meta)),
            AtPath::Free | AtPath::Blocked | AtPath::Link => None,
        })
    }

    /// Whether a write of `bucket/key` goes to a file (else to the private
    /// store). A file key whose path runs through a symbolic link is
    /// refused: the write would land wherever the link points.
    fn writes_file(&self, bucket: &str, key: &str) -> StoreResult<bool> {
        if !self.file_key(bucket, key) {
            return Ok(false);
        }
        match self.lookup(key)? {
            AtPath::Link => Err(StoreError::InvalidKey {
                reason: "the key's path goes through a symbolic link in the workspace",
            }),
            AtPath::Blocked => Ok(false),
            AtPath::Free | AtPath::File(..) => Ok(true),
        }
    }

    fn open_file(&self, key: &str) -> StoreResult<Option<(File, fs::Metadata)>> {
        let Some((path, _)) = self.regular_file(key)? else {
            return Ok(None);
        };
        let file = match fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if is_missing(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Ok(None);
        }
        Ok(Some((file, meta)))
    }

    fn load_props(&self, key: &str, stamp: Stamp) -> StoreResult<Option<FileProps>> {
        let row: Option<(String, String)> = self
            .db()
            .query_row(
                "SELECT stamp, props FROM file_props WHERE key = ?1",
                [key],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        Ok(row
            .filter(|(s, _)| *s == stamp.encode())
            .and_then(|(_, p)| serde_json::from_str(&p).ok()))
    }

    fn save_props(&self, key: &str, stamp: Stamp, props: &FileProps) -> StoreResult<()> {
        let json = serde_json::to_string(props)
            .map_err(|e| StoreError::Corrupt(format!("cannot encode properties: {e}")))?;
        self.db().execute(
            "INSERT INTO file_props (key, stamp, props) VALUES (?1, ?2, ?3)
             ON CONFLICT (key) DO UPDATE SET stamp = excluded.stamp, props = excluded.props",
            params![key, stamp.encode(), json],
        )?;
        Ok(())
    }

    fn forget_props(&self, key: &str) -> StoreResult<()> {
        self.db()
            .execute("DELETE FROM file_props WHERE key = ?1", [key])?;
        Ok(())
    }

    fn meta_from(&self, key: &str, m: &fs::Metadata, p: FileProps) -> ObjectMeta {
        let stamp = Stamp::of(m);
        ObjectMeta {
            bucket: self.primary.clone(),
            key: key.to_string(),
            size: stamp.size,
            etag: p.etag,
            last_modified_ns: stamp.mtime_ns,
            version: String::new(),
            props: p.props,
            checksum: p.checksum,
            parts: p.parts,
        }
    }

    /// The metadata of an open file: its recorded properties while its
    /// stamp holds, else default properties and the MD5 of its bytes (then
    /// recorded, so the next request does not hash again).
    fn file_meta(&self, key: &str, file: &mut File, m: &fs::Metadata) -> StoreResult<ObjectMeta> {
        let stamp = Stamp::of(m);
        let props = match self.load_props(key, stamp)? {
            Some(p) => p,
            None => {
                let p = FileProps {
                    etag: quoted_md5(file)?,
                    ..FileProps::default()
                };
                // Hashing raced with a writer: report, but do not record.
                if Stamp::of(&file.metadata()?) == stamp {
                    self.save_props(key, stamp, &p)?;
                }
                p
            }
        };
        Ok(self.meta_from(key, m, props))
    }

    /// The object now at a primary-bucket file key: the file, else a
    /// private-store object of that key.
    fn current(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        if let Some((mut f, m)) = self.open_file(key)? {
            return Ok(Some(self.file_meta(key, &mut f, &m)?));
        }
        match self.store.head_object(&self.primary, key) {
            Ok(meta) => Ok(Some(meta)),
            Err(StoreError::NoSuchKey { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Creates the missing directories above `path`, each made durable in
    /// its parent.
    fn create_parents(&self, path: &Path) -> StoreResult<()> {
        let Some(dir) = path.parent() else {
            return Ok(());
        };
        let mut missing = Vec::new();
        let mut at = dir;
        while at != self.root && !at.is_dir() {
            missing.push(at.to_path_buf());
            match at.parent() {
                Some(p) => at = p,
                None => break,
            }
        }
        for d in missing.iter().rev() {
            match fs::create_dir(d) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e.into()),
            }
            if let Some(parent) = d.parent() {
                sync_dir(parent)?;
            }
        }
        Ok(())
    }

    /// Puts a file in place with `write` (which must replace `path`
    /// atomically and durably), then records its properties. The caller
    /// holds the write lock.
    fn install(
        &self,
        key: &str,
        props: FileProps,
        write: impl FnOnce(&Path, u32) -> StoreResult<()>,
    ) -> StoreResult<ObjectMeta> {
        let path = self.root.join(key);
        let mode = fs::symlink_metadata(&path)
            .ok()
            .filter(fs::Metadata::is_file)
            .map_or(0o644, |m| m.mode() & 0o7777);
        self.create_parents(&path)?;
        write(&path, mode)?;
        let m = fs::symlink_metadata(&path)?;
        self.save_props(key, Stamp::of(&m), &props)?;
        // A private object of this key (from a time the path was blocked)
        // would be shadowed by the file; drop it.
        self.store.delete_object(&self.primary, key)?;
        Ok(self.meta_from(key, &m, props))
    }

    /// Removes now-empty directories from `dir` up to (not including) the root.
    fn prune_empty_dirs(&self, mut dir: &Path) {
        while dir != self.root && dir.starts_with(&self.root) {
            if fs::remove_dir(dir).is_err() {
                return;
            }
            match dir.parent() {
                Some(p) => {
                    let _ = sync_dir(p);
                    dir = p;
                }
                None => return,
            }
        }
    }

    /// Every file of the tree under `base` (a slash path, "" for the root)
    /// whose path is a portable key, with its metadata.
    fn walk_files(&self, base: &str) -> StoreResult<Vec<(String, fs::Metadata)>> {
        let mut out = Vec::new();
        let start = if base.is_empty() {
            self.root.clone()
        } else {
            self.root.join(base)
        };
        let mut stack = vec![(start, base.to_string())];
        while let Some((dir, rel)) = stack.pop() {
            let entries = match fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if is_missing(&e) => continue,
                Err(e) => return Err(e.into()),
            };
            for entry in entries {
                let entry = entry?;
                let Ok(name) = entry.file_name().into_string() else {
                    continue;
                };
                let key = if rel.is_empty() {
                    name
                } else {
                    format!("{rel}/{name}")
                };
                if check_checkpoint_path(&key).is_err() {
                    continue;
                }
                let meta = match entry.metadata() {
                    Ok(m) => m,
                    Err(e) if is_missing(&e) => continue,
                    Err(e) => return Err(e.into()),
                };
                if meta.is_dir() {
                    stack.push((entry.path(), key));
                } else if meta.is_file() {
                    out.push((key, meta));
                }
            }
        }
        Ok(out)
    }

    fn private_summaries(&self, bucket: &str) -> StoreResult<Vec<ObjectSummary>> {
        let mut out = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self.store.list_objects(
                bucket,
                &ListQuery {
                    start_after: after.clone(),
                    max_keys: 1000,
                    ..ListQuery::default()
                },
            )?;
            after = page.objects.last().map(|o| o.key.clone());
            out.extend(page.objects);
            if !page.is_truncated || after.is_none() {
                return Ok(out);
            }
        }
    }

    /// Lists the primary bucket: files merged with private objects, paged
    /// like the store, hashing only the files that land on the page.
    fn list_primary(&self, query: &ListQuery) -> StoreResult<ListPage> {
        // Only the directory the prefix names can hold matching files.
        let base = match query.prefix.rsplit_once('/') {
            Some((dir, _)) if check_checkpoint_path(dir).is_ok() => dir,
            Some(_) => "",
            None => "",
        };
        let mut merged = std::collections::BTreeMap::new();
        for o in self.private_summaries(&self.primary)? {
            merged.insert(o.key.clone(), o);
        }
        let mut files = std::collections::HashMap::new();
        for (key, meta) in self.walk_files(base)? {
            merged.insert(
                key.clone(),
                ObjectSummary {
                    key: key.clone(),
                    size: meta.len(),
                    etag: String::new(),
                    last_modified_ns: Stamp::of(&meta).mtime_ns,
                },
            );
            files.insert(key, meta);
        }
        let mut page = page_of_sorted(merged.into_values(), query)?;
        for o in &mut page.objects {
            let Some(meta) = files.get(&o.key) else {
                continue;
            };
            let stamp = Stamp::of(meta);
            o.etag = match self.load_props(&o.key, stamp)? {
                Some(p) => p.etag,
                None => match self.open_file(&o.key)? {
                    Some((mut f, m)) => {
                        let meta = self.file_meta(&o.key, &mut f, &m)?;
                        o.size = meta.size;
                        o.last_modified_ns = meta.last_modified_ns;
                        meta.etag
                    }
                    // Deleted since the walk: its last known size stays.
                    None => String::from("\"\""),
                },
            };
        }
        Ok(page)
    }

    // ---- conveniences for checkpoints, restore and tests -----------------

    /// Creates an extra bucket (idempotent).
    pub fn ensure_bucket(&self, name: &str) -> Result<()> {
        self.store
            .create_bucket(name)
            .map_err(store_err)
            .map(|_| ())
    }

    /// Bucket names, sorted.
    pub fn bucket_names(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .store
            .list_buckets()
            .map_err(store_err)?
            .into_iter()
            .map(|b| b.name)
            .collect();
        names.sort();
        Ok(names)
    }

    /// Writes an object from bytes with default options.
    pub fn put_bytes(
        &self,
        bucket: &str,
        key: &str,
        body: &[u8],
        props: ObjectProps,
    ) -> Result<()> {
        let opts = PutOptions {
            props,
            ..Default::default()
        };
        ObjectBackend::put_object(self, bucket, key, &mut &body[..], opts)
            .map_err(store_err)
            .map(|_| ())
    }

    /// Reads an object's bytes and properties.
    pub fn read_bytes(&self, bucket: &str, key: &str) -> Result<(Vec<u8>, ObjectProps)> {
        let read = ObjectBackend::get_object(self, bucket, key, None).map_err(store_err)?;
        let props = read.meta.props.clone();
        let bytes = read.body.into_vec().map_err(store_err)?;
        Ok((bytes, props))
    }

    /// Deletes an object (absent is fine).
    pub fn remove(&self, bucket: &str, key: &str) -> Result<()> {
        ObjectBackend::delete_object(self, bucket, key)
            .map_err(store_err)
            .map(|_| ())
    }

    /// Every object of a bucket in key byte order: files (primary only) and
    /// private-store objects.
    pub fn list_view(&self, bucket: &str) -> Result<Vec<ViewObject>> {
        let mut out: Vec<ViewObject> = if bucket == self.primary {
            self.walk_files("")
                .map_err(store_err)?
                .into_iter()
                .map(|(key, m)| ViewObject {
                    bucket: bucket.to_string(),
                    key,
                    size: m.len(),
                    file: true,
                })
                .collect()
        } else {
            Vec::new()
        };
        out.extend(self.private_objects(bucket)?);
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out.dedup_by(|later, earlier| later.key == earlier.key);
        Ok(out)
    }

    /// The properties recorded for files written through S3 that still
    /// hold (the file is unchanged since), by key.
    pub fn file_properties(&self) -> Result<Vec<(String, ObjectProps)>> {
        let rows = || -> rusqlite::Result<Vec<(String, String, String)>> {
            let db = self.db();
            let mut st = db.prepare("SELECT key, stamp, props FROM file_props ORDER BY key")?;
            let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
            rows.collect()
        };
        let rows = rows().map_err(|e| store_err(e.into()))?;
        let mut out = Vec::new();
        for (key, stamp, props) in rows {
            let Some((_, m)) = self.regular_file(&key).map_err(store_err)? else {
                continue;
            };
            if Stamp::of(&m).encode() != stamp {
                continue;
            }
            if let Ok(p) = serde_json::from_str::<FileProps>(&props) {
                out.push((key, p.props));
            }
        }
        Ok(out)
    }

    /// Records `props` for a restored file: they hold until the file
    /// changes, and its ETag is its MD5.
    pub fn restore_file_properties(&self, key: &str, props: ObjectProps) -> Result<()> {
        let _w = self.lock_writes();
        let Some((mut f, m)) = self.open_file(key).map_err(store_err)? else {
            return Err(WsError::NotFound(format!("restored file {key}")));
        };
        let etag = quoted_md5(&mut f).map_err(|e| store_err(e.into()))?;
        let saved = FileProps {
            etag,
            props,
            ..FileProps::default()
        };
        self.save_props(key, Stamp::of(&m), &saved)
            .map_err(store_err)
    }

    /// Objects of a bucket held in the private store only.
    pub fn private_objects(&self, bucket: &str) -> Result<Vec<ViewObject>> {
        Ok(self
            .private_summaries(bucket)
            .map_err(store_err)?
            .into_iter()
            .map(|o| ViewObject {
                bucket: bucket.to_string(),
                key: o.key,
                size: o.size,
                file: false,
            })
            .collect())
    }
}

impl ObjectBackend for WorkspaceBucket {
    fn is_persistent(&self) -> bool {
        true
    }

    fn backend_name(&self) -> &'static str {
        "workspace"
    }

    fn usage(&self) -> StoreResult<Usage> {
        let own = self.store.usage()?;
        let files = self.store.outside_usage();
        Ok(Usage {
            bytes: own.bytes + files.bytes,
            objects: own.objects + files.objects,
        })
    }

    fn create_bucket(&self, name: &str) -> StoreResult<bool> {
        self.store.create_bucket(name)
    }

    fn head_bucket(&self, name: &str) -> StoreResult<BucketInfo> {
        self.store.head_bucket(name)
    }

    fn list_buckets(&self) -> StoreResult<Vec<BucketInfo>> {
        self.store.list_buckets()
    }

    fn delete_bucket(&self, name: &str) -> StoreResult<()> {
        if name == self.primary {
            // The primary bucket is the workspace directory itself.
            return Err(StoreError::BucketNotEmpty {
                bucket: name.to_string(),
            });
        }
        self.store.delete_bucket(name)
    }

    fn put_object(
        &self,
        bucket: &str,
        key: &str,
        body: &mut dyn Read,
        mut opts: PutOptions,
    ) -> StoreResult<ObjectMeta> {
        if !self.writes_file(bucket, key)? {
            return self.store.put_object(bucket, key, body, opts);
        }
        let condition = std::mem::take(&mut opts.condition);
        let received = self.receive_within_quota(key, body, opts)?;
        let props = FileProps {
            etag: received.etag.clone(),
            props: received.props.clone(),
            checksum: received.checksum.clone(),
            parts: Vec::new(),
        };
        let _w = self.lock_writes();
        let current = self.current(key)?;
        condition.check(current.as_ref().map(|m| m.etag.as_str()), bucket, key)?;
        let charge = self.charge_file(self.file_size(key)?, received.size)?;
        let installed = self.install(key, props, |path, mode| received.persist_as(path, mode));
        if installed.is_err() {
            self.uncharge(charge);
        }
        installed
    }

    fn head_object(&self, bucket: &str, key: &str) -> StoreResult<ObjectMeta> {
        if self.file_key(bucket, key) {
            if let Some((mut f, m)) = self.open_file(key)? {
                return self.file_meta(key, &mut f, &m);
            }
        }
        self.store.head_object(bucket, key)
    }

    fn get_object(
        &self,
        bucket: &str,
        key: &str,
        range: Option<ByteRange>,
    ) -> StoreResult<ObjectRead> {
        if self.file_key(bucket, key) {
            if let Some((mut f, m)) = self.open_file(key)? {
                let meta = self.file_meta(key, &mut f, &m)?;
                let (offset, len) = match range {
                    Some(r) => r
                        .resolve(meta.size)
                        .ok_or(StoreError::InvalidRange { size: meta.size })?,
                    None => (0, meta.size),
                };
                return Ok(ObjectRead {
                    meta,
                    range: range.map(|_| (offset, len)),
                    body: ObjectBody::from_file(f, offset, len)?,
                });
            }
        }
        self.store.get_object(bucket, key, range)
    }

    fn get_object_part(
        &self,
        bucket: &str,
        key: &str,
        part_number: u32,
    ) -> StoreResult<ObjectRead> {
        if self.file_key(bucket, key) {
            if let Some((mut f, m)) = self.open_file(key)? {
                let meta = self.file_meta(key, &mut f, &m)?;
                let n = validate::part_number(i64::from(part_number))? as usize;
                let sizes: Vec<u64> = if meta.parts.is_empty() {
                    vec![meta.size]
                } else {
                    meta.parts.iter().map(|p| p.size).collect()
                };
                if n > sizes.len() {
                    return Err(StoreError::InvalidPart {
                        reason: format!(
                            "part {n} requested; the object has {} part(s)",
                            sizes.len()
                        ),
                    });
                }
                if sizes.iter().sum::<u64>() != meta.size {
                    return Err(StoreError::InvalidRange { size: meta.size });
                }
                let offset: u64 = sizes[..n - 1].iter().sum();
                let len = sizes[n - 1];
                return Ok(ObjectRead {
                    meta,
                    range: Some((offset, len)),
                    body: ObjectBody::from_file(f, offset, len)?,
                });
            }
        }
        self.store.get_object_part(bucket, key, part_number)
    }

    fn delete_object(&self, bucket: &str, key: &str) -> StoreResult<bool> {
        if !self.file_key(bucket, key) {
            return self.store.delete_object(bucket, key);
        }
        let _w = self.lock_writes();
        let mut deleted = false;
        if let Some((path, m)) = self.regular_file(key)? {
            match fs::remove_file(&path) {
                Ok(()) => {
                    deleted = true;
                    self.note_file(Some(m.len()), None);
                }
                Err(e) if is_missing(&e) => {}
                Err(e) => return Err(e.into()),
            }
            if let Some(dir) = path.parent() {
                sync_dir(dir)?;
                self.prune_empty_dirs(dir);
            }
        }
        self.forget_props(key)?;
        Ok(self.store.delete_object(bucket, key)? || deleted)
    }

    fn copy_object(
        &self,
        src_bucket: &str,
        src_key: &str,
        dst_bucket: &str,
        dst_key: &str,
        opts: CopyOptions,
    ) -> StoreResult<ObjectMeta> {
        let src_is_file =
            self.file_key(src_bucket, src_key) && self.regular_file(src_key)?.is_some();
        if !src_is_file && !self.writes_file(dst_bucket, dst_key)? {
            return self
                .store
                .copy_object(src_bucket, src_key, dst_bucket, dst_key, opts);
        }
        // A file is involved: copy the bytes through a verified write.
        let read = ObjectBackend::get_object(self, src_bucket, src_key, None)?;
        if opts.source.check(&read.meta) != ConditionCheck::Pass {
            return Err(StoreError::PreconditionFailed {
                reason: "copy source condition did not hold",
            });
        }
        let put = PutOptions {
            props: opts
                .replace_props
                .unwrap_or_else(|| read.meta.props.clone()),
            checksum_algorithm: read.meta.checksum.as_ref().map(|c| c.algorithm),
            condition: opts.condition,
            ..PutOptions::default()
        };
        let mut body = read.body;
        ObjectBackend::put_object(self, dst_bucket, dst_key, &mut body, put)
    }

    fn list_objects(&self, bucket: &str, query: &ListQuery) -> StoreResult<ListPage> {
        if bucket == self.primary {
            self.list_primary(query)
        } else {
            self.store.list_objects(bucket, query)
        }
    }

    fn create_upload(
        &self,
        bucket: &str,
        key: &str,
        opts: CreateUploadOptions,
    ) -> StoreResult<UploadInfo> {
        self.store.create_upload(bucket, key, opts)
    }

    fn upload_part(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part_number: i64,
        body: &mut dyn Read,
        opts: PartOptions,
    ) -> StoreResult<PartInfo> {
        self.store
            .upload_part(bucket, key, upload_id, part_number, body, opts)
    }

    fn list_parts(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        marker: u32,
        max_parts: usize,
    ) -> StoreResult<PartsPage> {
        self.store
            .list_parts(bucket, key, upload_id, marker, max_parts)
    }

    fn list_uploads(
        &self,
        bucket: &str,
        prefix: &str,
        key_marker: Option<&str>,
        upload_id_marker: Option<&str>,
        max_uploads: usize,
    ) -> StoreResult<UploadsPage> {
        self.store
            .list_uploads(bucket, prefix, key_marker, upload_id_marker, max_uploads)
    }

    fn abort_upload(&self, bucket: &str, key: &str, upload_id: &str) -> StoreResult<()> {
        self.store.abort_upload(bucket, key, upload_id)
    }

    fn complete_upload_checked(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        listed: &[CompletedPart],
        condition: WriteCondition,
        expected: Option<(stow_store::ChecksumAlgorithm, String)>,
    ) -> StoreResult<ObjectMeta> {
        if !self.writes_file(bucket, key)? {
            return self
                .store
                .complete_upload_checked(bucket, key, upload_id, listed, condition, expected);
        }
        let _w = self.lock_writes();
        let current = self.current(key)?;
        condition.check(current.as_ref().map(|m| m.etag.as_str()), bucket, key)?;
        // The store joins the parts (no bytes copied); the joined object is
        // then streamed into the file and the store's copy dropped.
        let done = self.store.complete_upload_checked(
            bucket,
            key,
            upload_id,
            listed,
            WriteCondition::Always,
            expected,
        )?;
        let mut joined = self.store.get_object(bucket, key, None)?.body;
        let received = self.store.receive(&mut joined, PutOptions::default())?;
        let props = FileProps {
            etag: done.etag,
            props: done.props,
            checksum: done.checksum,
            parts: done.parts,
        };
        // The parts' bytes and the object were admitted by the store; they
        // move into the tree (install drops the store's copy).
        let old_size = self.file_size(key)?;
        let size = received.size;
        let meta = self.install(key, props, |path, mode| received.persist_as(path, mode))?;
        self.note_file(old_size, Some(size));
        Ok(meta)
    }
}
