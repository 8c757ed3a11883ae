//! The [`Store`] handle: opening and buckets here; objects and listing in
//! `objects`, write and read conditions in `conditions`, bodies received
//! and read in `body`.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rusqlite::{params, OptionalExtension};

use crate::blobs::BlobStore;
use crate::db::Db;
use crate::error::{Result, StoreError};
use crate::model::*;
use crate::record::{self};
use crate::validate;

mod body;
mod conditions;
pub(crate) mod multipart;
mod objects;
pub(crate) mod reserve;
mod reset;

pub(crate) use crate::error::no_such_key;
pub use body::{ObjectBody, ObjectRead, ReceivedBody, VERIFIED_READ_LIMIT};
pub(crate) use conditions::check_write_condition;
pub use conditions::ConditionCheck;
pub use multipart::MIN_PART_SIZE;
pub use reset::ResetReport;

/// Name of the lock file that marks a directory's owner.
pub const LOCK_FILE: &str = "stow.lock";
/// Largest body kept inline in the database: [`Store::put_object_detached`]
/// never touches the disk on its caller's thread for a body this size.
pub const SMALL_BODY_MAX: usize = crate::blobs::INLINE_MAX;
const OWNER_FILE: &str = ".stow-owner";
const DB_FILE: &str = "meta.db";

/// A handle on one object store. Cheap to clone; all clones share the store.
///
/// A disk store owns its directory exclusively until the last clone drops.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub db: Db,
    pub blobs: Arc<BlobStore>,
    pub opts: StoreOptions,
    /// Usage held outside the store that counts against its quotas.
    pub outside: Arc<record::OutsideUsage>,
    /// Random per open: binds save conditions to this runtime.
    pub instance: u128,
    /// Persistent identity of the store, part of every request meaning.
    pub store_id: Vec<u8>,
    pub dir: Option<PathBuf>,
    /// Space held back so deletes commit on a full disk.
    pub reserve: reserve::Reserve,
    /// Whether any bucket has lifecycle rules (`crate::lifecycle`):
    /// unknown, none or some; spares reads that cannot find any.
    pub lifecycle_seen: std::sync::atomic::AtomicU8,
    /// Last, so the database has closed before another process may open.
    _lock: Option<OwnerLock>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.inner.dir)
            .finish()
    }
}

/// The store's persistent identity, created on first open.
fn store_identity(conn: &rusqlite::Connection) -> Result<Vec<u8>> {
    let id: Option<Vec<u8>> = conn
        .query_row("SELECT value FROM meta WHERE name = 'store_id'", [], |r| {
            r.get(0)
        })
        .optional()?;
    match id {
        Some(id) => Ok(id),
        None => {
            let id = rand::random::<[u8; 16]>().to_vec();
            conn.execute(
                "INSERT INTO meta (name, value) VALUES ('store_id', ?1)",
                [&id],
            )?;
            Ok(id)
        }
    }
}

impl Inner {
    /// The quotas writes are checked against.
    pub(crate) fn quota(&self) -> record::Quota {
        record::Quota {
            max_bytes: self.opts.max_bytes,
            max_objects: self.opts.max_objects,
            outside: Arc::clone(&self.outside),
        }
    }
}

/// `fs::create_dir_all`, with each directory it makes fsynced into its
/// parent: a data directory made now survives a power loss once the store
/// acknowledges a write in it.
fn create_dir_all_durably(dir: &Path) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(p) = at {
        if p.as_os_str().is_empty() || p.is_dir() {
            break;
        }
        missing.push(p);
        at = p.parent();
    }
    fs::create_dir_all(dir)?;
    for made in missing {
        let parent = match made.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        crate::blobs::sync_dir(parent)?;
    }
    Ok(())
}

/// The exclusive lock on a store directory's [`LOCK_FILE`].
///
/// Dropping it unlocks explicitly rather than leaving that to the close:
/// the lock belongs to the open file, which a child forked by another
/// thread shares until it execs, so a close alone could leave the store
/// locked for that moment after its owner let go (seen as `store_locked`
/// when a test reopened a store while a sibling test spawned processes).
struct OwnerLock(File);

impl OwnerLock {
    fn take(dir: &Path) -> Result<OwnerLock> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(LOCK_FILE))?;
        match file.try_lock() {
            Ok(()) => Ok(OwnerLock(file)),
            Err(TryLockError::WouldBlock) => Err(StoreError::StoreLocked {
                dir: dir.to_path_buf(),
            }),
            Err(TryLockError::Error(e)) => Err(e.into()),
        }
    }
}

impl Drop for OwnerLock {
    fn drop(&mut self) {
        if let Err(e) = self.0.unlock() {
            tracing::warn!("cannot unlock the store directory: {e}");
        }
    }
}

impl Store {
    /// Opens (creating if needed) the disk store in `dir`, taking exclusive
    /// ownership of it. A second opener gets `store_locked`.
    pub fn open(dir: impl AsRef<Path>, opts: StoreOptions) -> Result<Store> {
        let dir = dir.as_ref();
        create_dir_all_durably(dir)?;
        let lock = OwnerLock::take(dir)?;
        let owner = dir.join(OWNER_FILE);
        if !owner.exists() {
            if let Err(e) = fs::write(&owner, b"{\"owner\":\"stow\",\"version\":1}\n") {
                tracing::warn!("cannot write {}: {e}", owner.display());
            }
        }
        let blobs = Arc::new(BlobStore::disk(dir)?);
        let db = Db::open(&dir.join(DB_FILE), Arc::clone(&blobs), opts.db_cache_bytes)?;
        let b = Arc::clone(&blobs);
        let store_id = db.write(move |conn, _| {
            crate::blobs::open_blob_dir(conn, &b)?;
            b.recover(conn)?;
            store_identity(conn)
        })?;
        let reserve = reserve::Reserve::open(dir, opts.space_reserve_bytes);
        // Orders the names a new store made (the database, `tmp/`, the lock
        // and owner files, the reserve) before the first write it
        // acknowledges: SQLite fsyncs its WAL's directory entry but not the
        // database file's, so without this a power loss right after a new
        // store's first commits loses the whole store (found by the
        // power-loss harness, tests/powerloss).
        crate::blobs::sync_dir(dir)?;
        Ok(Store {
            inner: Arc::new(Inner {
                db,
                blobs,
                opts,
                outside: Arc::default(),
                instance: rand::random(),
                store_id,
                dir: Some(dir.to_path_buf()),
                reserve,
                lifecycle_seen: Default::default(),
                _lock: Some(lock),
            }),
        })
    }

    /// Opens an existing disk store; a directory without one is
    /// `no_such_store`, and nothing is created.
    pub fn open_existing(dir: impl AsRef<Path>, opts: StoreOptions) -> Result<Store> {
        let dir = dir.as_ref();
        if !dir.join(DB_FILE).is_file() {
            return Err(StoreError::NoSuchStore {
                dir: dir.to_path_buf(),
            });
        }
        Self::open(dir, opts)
    }

    /// A store that lives in memory only, with the same behaviour as a disk
    /// store (everything is lost when the last clone drops).
    pub fn memory(opts: StoreOptions) -> Result<Store> {
        let blobs = Arc::new(BlobStore::memory());
        let db = Db::memory(Arc::clone(&blobs))?;
        let store_id = db.write(|conn, _| store_identity(conn))?;
        Ok(Store {
            inner: Arc::new(Inner {
                db,
                blobs,
                opts,
                outside: Arc::default(),
                instance: rand::random(),
                store_id,
                dir: None,
                reserve: reserve::Reserve::none(),
                lifecycle_seen: Default::default(),
                _lock: None,
            }),
        })
    }

    /// The data directory of a disk store.
    pub fn dir(&self) -> Option<&Path> {
        self.inner.dir.as_deref()
    }

    /// Whether the store survives the process.
    pub fn is_persistent(&self) -> bool {
        self.inner.dir.is_some()
    }

    /// The limits this store was opened with.
    pub fn options(&self) -> &StoreOptions {
        &self.inner.opts
    }

    // ---- buckets -------------------------------------------------------

    /// Creates a bucket; `Ok(false)` if it already existed.
    pub fn create_bucket(&self, name: &str) -> Result<bool> {
        validate::bucket_name(name)?;
        let name = name.to_string();
        self.inner.db.write(move |conn, _| {
            let n = conn.execute(
                "INSERT OR IGNORE INTO buckets (name, created_ns) VALUES (?1, ?2)",
                params![name, record::now_ns()],
            )?;
            Ok(n == 1)
        })
    }

    /// Describes a bucket, or `no_such_bucket`.
    pub fn head_bucket(&self, name: &str) -> Result<BucketInfo> {
        validate::bucket_name(name)?;
        self.inner.db.read(|conn| {
            conn.prepare_cached("SELECT created_ns FROM buckets WHERE name = ?1")?
                .query_row([name], |r| r.get(0))
                .optional()?
                .map(|created_ns| BucketInfo {
                    name: name.to_string(),
                    created_ns,
                })
                .ok_or_else(|| StoreError::NoSuchBucket {
                    bucket: name.to_string(),
                })
        })
    }

    /// Every bucket, sorted by name.
    pub fn list_buckets(&self) -> Result<Vec<BucketInfo>> {
        self.inner.db.read(|conn| {
            let mut st =
                conn.prepare_cached("SELECT name, created_ns FROM buckets ORDER BY name")?;
            let rows = st.query_map([], |r| {
                Ok(BucketInfo {
                    name: r.get(0)?,
                    created_ns: r.get(1)?,
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// [`Store::delete_bucket`] without the retry on a full disk.
    pub(crate) fn delete_bucket_once(&self, name: &str) -> Result<()> {
        validate::bucket_name(name)?;
        let name = name.to_string();
        let quota = self.inner.quota();
        self.inner.db.write(move |conn, fx| {
            let id = record::bucket_id(conn, &name)?;
            // Noncurrent versions and delete markers keep a bucket too.
            let busy: bool = conn.query_row(
                "SELECT EXISTS (SELECT 1 FROM objects WHERE bucket = ?1)
                     OR EXISTS (SELECT 1 FROM versions WHERE bucket = ?1)",
                [id],
                |r| r.get(0),
            )?;
            if busy {
                return Err(StoreError::BucketNotEmpty { bucket: name });
            }
            // In-progress uploads do not keep a bucket alive (as on AWS):
            // they are aborted, their parts freed, in this transaction.
            multipart::drop_bucket_uploads(conn, fx, &quota, id)?;
            conn.execute("DELETE FROM buckets WHERE id = ?1", [id])?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store's lock is free once the store drops, even while another
    /// descriptor of the same open file lives on (as in a child forked
    /// between a spawn's fork and exec); until then a second opener is
    /// refused.
    #[test]
    fn dropping_a_store_unlocks_a_shared_lock_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let s = Store::open(&dir, StoreOptions::default()).unwrap();
        let shared = match &s.inner._lock {
            Some(OwnerLock(file)) => file.try_clone().unwrap(),
            None => panic!("a disk store holds its lock"),
        };
        let e = Store::open(&dir, StoreOptions::default()).unwrap_err();
        assert!(matches!(e, StoreError::StoreLocked { .. }), "{e}");
        drop(s);
        Store::open(&dir, StoreOptions::default()).unwrap();
        drop(shared);
    }
}
