//! The workspace bucket view (ARCHITECTURE.md, "Workspace view writes"):
//! the primary bucket's objects are the files under the root (key = slash
//! path, `.stow` and `.git` excluded); a PUT with a portable key writes a
//! real file atomically. Keys that are not portable paths, keys whose path
//! is blocked (a directory where the file would go, or a file where a
//! directory would), and every other bucket live in a private `stow-store`
//! under `<root>/.stow/objects`.
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
//!
//! One job per file: `files` (symlink-safe lookup and atomic install of
//! files, the tree walk), `props` (the properties database), `quota` (usage
//! and quota accounting of files), `list` (listing) and `backend` (the
//! [`ObjectBackend`] implementation dispatching to them).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

use stow_store::{ObjectBackend, ObjectProps, PutOptions, Store, StoreError, StoreOptions};

use crate::error::{Result, WsError};
use crate::fsutil::FileLock;

mod backend;
mod files;
mod list;
mod props;
mod quota;

pub use quota::{ViewQuota, RECOUNT_AFTER};

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
    props: props::PropsDb,
    /// Serializes the condition check and rename of file-backed writes, so
    /// two conditional writes of one file cannot both pass.
    writes: Mutex<()>,
    /// S3 writes through the view hold this shared; a rewind in the
    /// process that owns the view holds it exclusive, so the two never
    /// interleave (ARCHITECTURE.md, "Rewind").
    gate: RwLock<()>,
    /// The workspace's session lock, when the view claims the workspace.
    _session: Option<FileLock>,
    /// When the tree's files were last counted into the store's outside
    /// usage; `None` for a view without quotas. Changed under `writes`.
    counted: Mutex<Option<Instant>>,
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
        let props = props::PropsDb::open(root).map_err(store_err)?;
        let view = WorkspaceBucket {
            root: root.to_path_buf(),
            primary: primary.to_string(),
            store,
            props,
            writes: Mutex::new(()),
            gate: RwLock::new(()),
            _session: None,
            counted: Mutex::new(None),
        };
        let dropped = view.drop_shadowed_objects().map_err(store_err)?;
        if dropped > 0 {
            tracing::info!("dropped {dropped} private object(s) shadowed by files");
        }
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

    pub(super) fn lock_writes(&self) -> MutexGuard<'_, ()> {
        self.writes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Holds every S3 write through this view off until the guard drops
    /// (writes in flight finish first). The view's own methods used while
    /// it is held never wait for it.
    pub fn hold_s3_writes(&self) -> RwLockWriteGuard<'_, ()> {
        self.gate.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Taken by each S3 write (shared with other writes).
    pub(super) fn s3_write(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read().unwrap_or_else(|e| e.into_inner())
    }

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
}

/// A view of a fresh scratch root (primary bucket `wsb`), for the parts'
/// unit tests.
#[cfg(test)]
fn scratch_view(quota: Option<ViewQuota>) -> (tempfile::TempDir, WorkspaceBucket) {
    let tmp = tempfile::tempdir().expect("scratch dir");
    let view = WorkspaceBucket::open_with_quota(tmp.path(), "wsb", quota).expect("open view");
    (tmp, view)
}
