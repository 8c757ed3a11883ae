//! The [`Store`] handle: opening, buckets, objects, listing.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension};

use crate::blobs::{BlobId, BlobReader, BlobStore, Staged};
use crate::checksum::{self, BodyHasher, Checksum, ChecksumAlgorithm, ChecksumType};
use crate::db::Db;
use crate::error::{Result, StoreError};
use crate::model::*;
use crate::record::{self, Extent, Record, StoredProps};
use crate::{validate, versions};

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
    pub reserve: crate::reserve::Reserve,
    _lock: Option<File>,
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

impl Store {
    /// Opens (creating if needed) the disk store in `dir`, taking exclusive
    /// ownership of it. A second opener gets `store_locked`.
    pub fn open(dir: impl AsRef<Path>, opts: StoreOptions) -> Result<Store> {
        let dir = dir.as_ref();
        create_dir_all_durably(dir)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(LOCK_FILE))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(StoreError::StoreLocked {
                    dir: dir.to_path_buf(),
                })
            }
            Err(TryLockError::Error(e)) => return Err(e.into()),
        }
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
            crate::reset::open_blob_dir(conn, &b)?;
            b.recover(conn)?;
            store_identity(conn)
        })?;
        let reserve = crate::reserve::Reserve::open(dir, opts.space_reserve_bytes);
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
                reserve: crate::reserve::Reserve::none(),
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
            crate::multipart::drop_bucket_uploads(conn, fx, &quota, id)?;
            conn.execute("DELETE FROM buckets WHERE id = ?1", [id])?;
            Ok(())
        })
    }

    // ---- objects -------------------------------------------------------

    /// Receives a body and verifies the caller's digests. Nothing is
    /// committed yet.
    pub(crate) fn stage_verified(
        &self,
        body: &mut dyn Read,
        keep_alg: Option<ChecksumAlgorithm>,
        expected: &[(ChecksumAlgorithm, String)],
        content_md5: Option<&str>,
        trailing: Option<TrailingChecksums>,
        want_sha256: bool,
    ) -> Result<(Staged, Option<Checksum>)> {
        let md5 = content_md5.map(checksum::decode_content_md5).transpose()?;
        let mut decoded = Vec::with_capacity(expected.len());
        for (alg, value) in expected {
            decoded.push((*alg, alg.decode(value)?));
        }
        let keep_alg = keep_alg.or_else(|| expected.first().map(|(a, _)| *a));
        let mut algs: Vec<ChecksumAlgorithm> = expected.iter().map(|(a, _)| *a).collect();
        algs.extend(keep_alg);
        let staged = self
            .inner
            .blobs
            .stage(body, BodyHasher::new(&algs, want_sha256))?;
        if let Some(md5) = md5 {
            if md5 != staged.digests.md5 {
                return Err(StoreError::BadDigest {
                    reason: "Content-MD5 does not match the body".into(),
                });
            }
        }
        if let Some(trailing) = trailing {
            for (alg, value) in (trailing.0)() {
                if staged.digests.get(alg).is_none() {
                    return Err(StoreError::InvalidDigest {
                        reason: format!(
                            "{} checksum was not announced before the body",
                            alg.as_str()
                        ),
                    });
                }
                decoded.push((alg, alg.decode(&value)?));
            }
        }
        for (alg, want) in &decoded {
            if staged.digests.get(*alg) != Some(want.as_slice()) {
                return Err(StoreError::BadDigest {
                    reason: format!("{} checksum does not match the body", alg.as_str()),
                });
            }
        }
        let kept = keep_alg.and_then(|a| {
            staged.digests.get(a).map(|raw| Checksum {
                algorithm: a,
                value: checksum::b64(raw),
                kind: ChecksumType::FullObject,
            })
        });
        Ok((staged, kept))
    }

    /// Stores an object, streaming its body from `body`. The object, its
    /// usage and its condition check commit atomically; the call returns once
    /// the object is durable.
    pub fn put_object(
        &self,
        bucket: &str,
        key: &str,
        body: &mut dyn Read,
        mut opts: PutOptions,
    ) -> Result<ObjectMeta> {
        validate::bucket_name(bucket)?;
        validate::object_key(key)?;
        // A missing bucket is refused before a large body is received (the
        // write transaction checks again); a small body is in memory after
        // one read, and the transaction's own check is enough for it.
        let mut head = Vec::with_capacity(8 * 1024);
        body.take(crate::blobs::INLINE_MAX as u64 + 1)
            .read_to_end(&mut head)?;
        if head.len() > crate::blobs::INLINE_MAX {
            self.head_bucket(bucket)?;
        }
        let condition = std::mem::take(&mut opts.condition);
        let received = self.receive(&mut io::Cursor::new(head).chain(body), opts)?;
        let (staged, job) = self.put_job(bucket, key, received, condition);
        let meta = self.inner.db.write(job)?;
        staged.keep();
        Ok(meta)
    }

    /// [`Store::put_object`] for a body already in memory, without waiting
    /// for the commit: `done` gets the result, on the store's commit thread,
    /// once the object is durable or refused. A body of at most
    /// [`SMALL_BODY_MAX`] bytes is never written to disk on the calling
    /// thread, so an async runtime's worker may call this; a larger one is
    /// staged here first. `done` must not block.
    pub fn put_object_detached(
        &self,
        bucket: &str,
        key: &str,
        body: Vec<u8>,
        mut opts: PutOptions,
        done: impl FnOnce(Result<ObjectMeta>) + Send + 'static,
    ) {
        let prepared = validate::bucket_name(bucket)
            .and_then(|()| validate::object_key(key))
            .and_then(|()| {
                let condition = std::mem::take(&mut opts.condition);
                let received = self.receive(&mut io::Cursor::new(body), opts)?;
                Ok(self.put_job(bucket, key, received, condition))
            });
        match prepared {
            Ok((staged, job)) => self.inner.db.submit(job, move |result| {
                if result.is_ok() {
                    staged.keep();
                }
                done(result)
            }),
            Err(e) => done(Err(e)),
        }
    }

    /// The write job that commits a received body as `bucket/key` (checking
    /// `condition` and the quotas in the transaction), and the staged bytes
    /// to keep once it committed.
    fn put_job(
        &self,
        bucket: &str,
        key: &str,
        received: ReceivedBody,
        condition: WriteCondition,
    ) -> (
        Staged,
        impl FnOnce(&Connection, &mut crate::db::Effects) -> Result<ObjectMeta> + Send + 'static,
    ) {
        let ReceivedBody {
            size,
            etag,
            checksum,
            props,
            staged,
        } = received;
        let rec = Record {
            size,
            etag,
            modified_ns: 0,
            generation: [0; 16],
            props: StoredProps {
                props,
                checksum,
                parts: Vec::new(),
            },
            extents: vec![Extent {
                blob: staged.id,
                size,
            }],
            vid: None,
            seq: 0,
        };
        let inline = staged.inline.clone();
        let (bucket_s, key_s) = (bucket.to_string(), key.to_string());
        let quota = self.inner.quota();
        let job = move |conn: &Connection, fx: &mut crate::db::Effects| {
            let b = versions::bucket(conn, &bucket_s)?;
            let old = record::load_record(conn, b.id, &key_s)?;
            check_write_condition(&condition, old.as_ref(), &bucket_s, &key_s)?;
            let mut rec = rec;
            rec.modified_ns = record::now_ns();
            rec.generation = record::new_generation();
            record::insert_blob(conn, fx, rec.extents[0].blob, rec.size, inline.as_deref())?;
            versions::install(conn, fx, &quota, b, &key_s, old, &mut rec)?;
            Ok(versions::meta_in(&rec, b, &bucket_s, &key_s))
        };
        (staged, job)
    }

    /// Receives and verifies a body exactly as [`Store::put_object`] would
    /// (Content-MD5, announced and trailing checksums), without storing an
    /// object. The caller decides where the bytes go: see
    /// [`ReceivedBody::persist_as`]. Dropping the result discards them.
    pub fn receive(&self, body: &mut dyn Read, opts: PutOptions) -> Result<ReceivedBody> {
        let props = validate::normalize_props(opts.props)?;
        let (staged, checksum) = self.stage_verified(
            body,
            opts.checksum_algorithm,
            &opts.expected_checksums,
            opts.content_md5.as_deref(),
            opts.trailing_checksums,
            false,
        )?;
        Ok(ReceivedBody {
            size: staged.digests.size,
            etag: checksum::etag_of_md5(&staged.digests.md5),
            checksum,
            props,
            staged,
        })
    }

    /// Describes an object, or `no_such_key`.
    pub fn head_object(&self, bucket: &str, key: &str) -> Result<ObjectMeta> {
        validate::bucket_name(bucket)?;
        validate::object_key(key)?;
        self.head_object_version(bucket, key, None)
    }

    /// Opens an object for reading, whole or one byte range.
    pub fn get_object(
        &self,
        bucket: &str,
        key: &str,
        range: Option<ByteRange>,
    ) -> Result<ObjectRead> {
        self.get_object_with(bucket, key, None, range, None)
    }

    /// Opens one part of a multipart object (part 1 of a simple object is
    /// the whole object).
    pub fn get_object_part(&self, bucket: &str, key: &str, part_number: u32) -> Result<ObjectRead> {
        self.get_object_with(bucket, key, None, None, Some(part_number))
    }

    /// Opens `version` of an object (`"null"` for the null version, `None`
    /// for the latest), whole, one byte range or one part.
    pub(crate) fn get_object_with(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        range: Option<ByteRange>,
        part: Option<u32>,
    ) -> Result<ObjectRead> {
        validate::bucket_name(bucket)?;
        validate::object_key(key)?;
        let version = version.map(versions::VersionRef::parse).transpose()?;
        let blobs = Arc::clone(&self.inner.blobs);
        self.inner.db.read(|conn| {
            let b = versions::bucket(conn, bucket)?;
            let rec = versions::lookup(conn, b, bucket, key, version.as_ref())?;
            let (offset, len) = match (range, part) {
                (Some(r), _) => r
                    .resolve(rec.size)
                    .ok_or(StoreError::InvalidRange { size: rec.size })?,
                (None, Some(n)) => {
                    let n = validate::part_number(i64::from(n))? as usize;
                    // A simple object is one part, whatever its storage.
                    let sizes: Vec<u64> = if rec.props.parts.is_empty() {
                        vec![rec.size]
                    } else {
                        rec.props.parts.iter().map(|p| p.size).collect()
                    };
                    if n > sizes.len() {
                        return Err(StoreError::InvalidPart {
                            reason: format!(
                                "part {n} requested; the object has {} part(s)",
                                sizes.len()
                            ),
                        });
                    }
                    let start: u64 = sizes[..n - 1].iter().sum();
                    (start, sizes[n - 1])
                }
                (None, None) => (0, rec.size),
            };
            let ranged = range.is_some() || part.is_some();
            let mut body = ObjectBody::plan(conn, &blobs, &rec.extents, offset, len)?;
            if !ranged && rec.size <= VERIFIED_READ_LIMIT {
                if let Some(md5) = plain_etag_md5(&rec.etag) {
                    body = body.verified(md5);
                }
            }
            Ok(ObjectRead {
                meta: versions::meta_in(&rec, b, bucket, key),
                range: ranged.then_some((offset, len)),
                body,
            })
        })
    }

    /// [`Store::delete_object`] without the retry on a full disk.
    pub(crate) fn delete_object_once(&self, bucket: &str, key: &str) -> Result<bool> {
        validate::bucket_name(bucket)?;
        validate::object_key(key)?;
        let (bucket, key) = (bucket.to_string(), key.to_string());
        let quota = self.inner.quota();
        self.inner.db.write(move |conn, fx| {
            let b = versions::bucket(conn, &bucket)?;
            versions::delete_latest(conn, fx, &quota, b, &key).map(|d| d.existed)
        })
    }

    /// Copies an object without copying its bytes: the new record shares the
    /// source's blobs.
    /// Replaces an object's tags, leaving its bytes, ETag, time and other
    /// properties as they are (S3's PutObjectTagging/DeleteObjectTagging).
    pub fn set_object_tags(
        &self,
        bucket: &str,
        key: &str,
        tags: std::collections::BTreeMap<String, String>,
    ) -> Result<ObjectMeta> {
        validate::bucket_name(bucket)?;
        validate::object_key(key)?;
        validate::check_tags(&tags)?;
        let (bucket, key) = (bucket.to_string(), key.to_string());
        self.inner.db.write(move |conn, _| {
            let b = record::bucket_id(conn, &bucket)?;
            let mut rec =
                record::load_record(conn, b, &key)?.ok_or_else(|| no_such_key(&bucket, &key))?;
            rec.props.props.tags = tags;
            // Same extents, same blobs: no reference or usage changes.
            record::store_record(conn, b, &key, &rec)?;
            Ok(rec.meta(&bucket, &key))
        })
    }

    pub fn copy_object(
        &self,
        src_bucket: &str,
        src_key: &str,
        dst_bucket: &str,
        dst_key: &str,
        opts: CopyOptions,
    ) -> Result<ObjectMeta> {
        for b in [src_bucket, dst_bucket] {
            validate::bucket_name(b)?;
        }
        for k in [src_key, dst_key] {
            validate::object_key(k)?;
        }
        let source_version = opts
            .source_version
            .as_deref()
            .map(versions::VersionRef::parse)
            .transpose()?;
        let replace = opts
            .replace_props
            .map(validate::normalize_props)
            .transpose()?;
        let (sb, sk, db, dk) = (
            src_bucket.to_string(),
            src_key.to_string(),
            dst_bucket.to_string(),
            dst_key.to_string(),
        );
        let quota = self.inner.quota();
        self.inner.db.write(move |conn, fx| {
            let sbucket = versions::bucket(conn, &sb)?;
            let src = versions::lookup(conn, sbucket, &sb, &sk, source_version.as_ref())?;
            if opts.source.check(&src.meta(&sb, &sk)) != ConditionCheck::Pass {
                return Err(StoreError::PreconditionFailed {
                    reason: "copy source condition did not hold",
                });
            }
            let dbucket = versions::bucket(conn, &db)?;
            let old = record::load_record(conn, dbucket.id, &dk)?;
            check_write_condition(&opts.condition, old.as_ref(), &db, &dk)?;
            let mut rec = src;
            if let Some(props) = replace {
                rec.props.props = props;
            }
            rec.props.props.acl = opts.acl;
            rec.modified_ns = record::now_ns();
            rec.generation = record::new_generation();
            record::retain(conn, &rec.extents)?;
            versions::install(conn, fx, &quota, dbucket, &dk, old, &mut rec)?;
            Ok(versions::meta_in(&rec, dbucket, &db, &dk))
        })
    }

    /// Lists a bucket in key byte order from the key index.
    pub fn list_objects(&self, bucket: &str, query: &ListQuery) -> Result<ListPage> {
        validate::bucket_name(bucket)?;
        if query.delimiter.as_deref() == Some("") {
            return Err(StoreError::InvalidArgument {
                reason: "delimiter must not be empty".into(),
            });
        }
        self.inner.db.read(|conn| {
            let b = record::bucket_id(conn, bucket)?;
            crate::list::list(conn, b, query)
        })
    }

    /// Current logical usage of the store itself (not counting
    /// [`Store::outside_usage`]).
    pub fn usage(&self) -> Result<Usage> {
        self.inner.db.read(record::load_usage)
    }

    /// Usage held outside the store that counts against its quotas, as last
    /// set or charged by its owner (zero unless set).
    pub fn outside_usage(&self) -> Usage {
        self.inner.outside.get()
    }

    /// Replaces the outside usage (for example with a fresh count of the
    /// files a view serves beside the store). Not checked against the
    /// quotas: it describes what is already there.
    pub fn set_outside_usage(&self, usage: Usage) -> Result<()> {
        let quota = self.inner.quota();
        self.outside_job(move |_| {
            let before = quota.outside.get();
            quota.outside.set(usage);
            Ok(before)
        })
    }

    /// Grows (or shrinks) the outside usage by a delta, checked against
    /// the quotas together with the store's own usage in one write
    /// transaction, so concurrent writes cannot together pass a limit. Growth
    /// past a limit is refused with `quota_exceeded` and changes nothing;
    /// shrinking is always allowed.
    pub fn charge_outside(&self, bytes: i64, objects: i64) -> Result<()> {
        let quota = self.inner.quota();
        self.outside_job(move |conn| record::charge_outside(conn, &quota, bytes, objects, true))
    }

    /// Changes the outside usage by a delta without a quota check: for bytes
    /// and objects that were admitted elsewhere and only move (a completed
    /// upload's parts, counted by the store, becoming a file).
    pub fn adjust_outside(&self, bytes: i64, objects: i64) -> Result<()> {
        let quota = self.inner.quota();
        self.outside_job(move |conn| record::charge_outside(conn, &quota, bytes, objects, false))
    }

    /// Runs a change of the outside usage as a write job (ordered with every
    /// quota check), and undoes it if the transaction does not commit.
    fn outside_job(
        &self,
        change: impl FnOnce(&Connection) -> Result<Usage> + Send + 'static,
    ) -> Result<()> {
        let applied: Arc<std::sync::Mutex<Option<Usage>>> = Arc::default();
        let seen = Arc::clone(&applied);
        let result = self.inner.db.write(move |conn, _| {
            let before = change(conn)?;
            *seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(before);
            Ok(())
        });
        if result.is_err() {
            if let Some(before) = *applied.lock().unwrap_or_else(|e| e.into_inner()) {
                self.inner.outside.set(before);
            }
        }
        result
    }
}

pub(crate) fn no_such_key(bucket: &str, key: &str) -> StoreError {
    StoreError::NoSuchKey {
        bucket: bucket.to_string(),
        key: key.to_string(),
    }
}

pub(crate) fn check_write_condition(
    cond: &WriteCondition,
    old: Option<&Record>,
    bucket: &str,
    key: &str,
) -> Result<()> {
    cond.check(old.map(|o| o.etag.as_str()), bucket, key)
}

impl WriteCondition {
    /// Checks the condition against the ETag of the object now at
    /// `bucket/key` (`None` when there is none), with the store's errors:
    /// `precondition_failed`, or `no_such_key` for `If-Match` on nothing.
    pub fn check(&self, current_etag: Option<&str>, bucket: &str, key: &str) -> Result<()> {
        match (self, current_etag) {
            (WriteCondition::Always, _) | (WriteCondition::IfAbsent, None) => Ok(()),
            (WriteCondition::IfAbsent, Some(_)) => Err(StoreError::PreconditionFailed {
                reason: "the object already exists",
            }),
            (WriteCondition::IfMatch(_), None) => Err(no_such_key(bucket, key)),
            (WriteCondition::IfMatch(tag), Some(etag)) => {
                if record::etag_matches(tag, etag) {
                    Ok(())
                } else {
                    Err(StoreError::PreconditionFailed {
                        reason: "the object's ETag does not match",
                    })
                }
            }
        }
    }
}

/// The result of evaluating HTTP read conditions against an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionCheck {
    Pass,
    /// 304: `If-None-Match` matched or `If-Modified-Since` was not exceeded.
    NotModified,
    /// 412: `If-Match` or `If-Unmodified-Since` failed.
    PreconditionFailed,
}

impl ReadConditions {
    /// Evaluates the conditions with S3's precedence: a passing `If-Match`
    /// overrides `If-Unmodified-Since`, a failing `If-None-Match` overrides
    /// `If-Modified-Since`. Times compare at whole seconds.
    pub fn check(&self, meta: &ObjectMeta) -> ConditionCheck {
        let secs = |ns: i64| ns.div_euclid(1_000_000_000);
        let modified = secs(meta.last_modified_ns);
        if let Some(tag) = &self.if_match {
            if !record::etag_matches(tag, &meta.etag) {
                return ConditionCheck::PreconditionFailed;
            }
        } else if let Some(t) = self.if_unmodified_since_ns {
            if modified > secs(t) {
                return ConditionCheck::PreconditionFailed;
            }
        }
        if let Some(tag) = &self.if_none_match {
            if record::etag_matches(tag, &meta.etag) {
                return ConditionCheck::NotModified;
            }
        } else if let Some(t) = self.if_modified_since_ns {
            if modified <= secs(t) {
                return ConditionCheck::NotModified;
            }
        }
        ConditionCheck::Pass
    }
}

/// A verified body not stored as an object (see [`Store::receive`]).
pub struct ReceivedBody {
    /// Bytes received.
    pub size: u64,
    /// The quoted MD5 ETag of the bytes.
    pub etag: String,
    /// The full-object checksum kept for the body, if one was asked for.
    pub checksum: Option<Checksum>,
    /// The properties of the request, normalized.
    pub props: ObjectProps,
    staged: Staged,
}

impl std::fmt::Debug for ReceivedBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceivedBody")
            .field("size", &self.size)
            .field("etag", &self.etag)
            .finish_non_exhaustive()
    }
}

impl ReceivedBody {
    /// Moves the bytes to `path` as a durable file with permission bits
    /// `mode`, atomically replacing what is there; the parent directory
    /// must exist. Large bodies are renamed, not copied.
    pub fn persist_as(self, path: &Path, mode: u32) -> Result<()> {
        self.staged.persist_as(path, mode).map_err(StoreError::from)
    }
}

/// An object opened for reading: its metadata and a reader over its bytes.
#[derive(Debug)]
pub struct ObjectRead {
    pub meta: ObjectMeta,
    /// `(offset, length)` when a range or part was requested.
    pub range: Option<(u64, u64)>,
    pub body: ObjectBody,
}

enum Piece {
    Inline(Vec<u8>),
    /// A file blob not yet opened, with the offset to start at and bytes to take.
    Blob(BlobId, u64, u64),
    Open(io::Take<BlobReader>),
    File(io::Take<File>),
}

/// The MD5 a single-part ETag (`"<32 hex>"`) stands for; `None` for a
/// multipart ETag (`…-N`).
fn plain_etag_md5(etag: &str) -> Option<[u8; 16]> {
    let hex = etag.strip_prefix('"')?.strip_suffix('"')?;
    if hex.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Streams an object's bytes (or a range of them) across its blobs.
pub struct ObjectBody {
    blobs: Option<Arc<BlobStore>>,
    pieces: std::collections::VecDeque<Piece>,
    len: u64,
    /// A whole small object is checked against its ETag as it is read: the
    /// end of the body is an error, not wrong bytes, when they differ.
    verify: Option<(md5::Md5, [u8; 16])>,
}

/// Whole single-part objects up to this size are MD5-checked on every read
/// (about 0.4 ms of CPU at the limit; larger bodies are left to
/// `stow-s3 check`, which reads everything).
pub const VERIFIED_READ_LIMIT: u64 = 256 * 1024;

impl std::fmt::Debug for ObjectBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectBody")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl ObjectBody {
    pub(crate) fn plan(
        conn: &Connection,
        blobs: &Arc<BlobStore>,
        extents: &[Extent],
        offset: u64,
        len: u64,
    ) -> Result<Self> {
        let mut pieces = std::collections::VecDeque::new();
        let mut data = conn.prepare_cached("SELECT data FROM blobs WHERE id = ?1")?;
        let mut start = 0u64;
        let end = offset + len;
        for e in extents {
            let (lo, hi) = (start, start + e.size);
            start = hi;
            if hi <= offset || lo >= end || e.size == 0 {
                continue;
            }
            let from = offset.max(lo) - lo;
            let take = end.min(hi) - lo - from;
            let inline: Option<Vec<u8>> = data
                .query_row([e.blob.0], |r| r.get(0))
                .optional()?
                .ok_or_else(|| StoreError::Corrupt(format!("blob {} is missing", e.blob.0)))?;
            pieces.push_back(match inline {
                Some(bytes) => Piece::Inline(bytes[from as usize..(from + take) as usize].to_vec()),
                None => Piece::Blob(e.blob, from, take),
            });
        }
        // A simple object's one blob is opened inside the read snapshot, so
        // a concurrent overwrite cannot take it away mid-read.
        if pieces.len() == 1 {
            if let Some(Piece::Blob(id, from, take)) = pieces.front() {
                let opened = open_at(blobs, *id, *from, *take)?;
                pieces[0] = Piece::Open(opened);
            }
        }
        Ok(ObjectBody {
            blobs: Some(Arc::clone(blobs)),
            pieces,
            len,
            verify: None,
        })
    }

    /// Checks the bytes read against `md5` (the whole body's digest).
    pub(crate) fn verified(mut self, md5: [u8; 16]) -> Self {
        use md5::Digest as _;
        self.verify = Some((md5::Md5::new(), md5));
        self
    }

    /// A body of `len` bytes of `file` from `offset`, for backends whose
    /// objects are plain files.
    pub fn from_file(mut file: File, offset: u64, len: u64) -> io::Result<Self> {
        file.seek(SeekFrom::Start(offset))?;
        Ok(ObjectBody {
            blobs: None,
            pieces: std::collections::VecDeque::from([Piece::File(file.take(len))]),
            len,
            verify: None,
        })
    }

    /// Number of bytes this body yields.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether this body yields no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the bytes are already in memory (bodies stored inline), so
    /// reading them never waits on the disk.
    pub fn in_memory(&self) -> bool {
        self.pieces.iter().all(|p| matches!(p, Piece::Inline(_)))
    }

    /// Reads the whole body into memory (for small objects and tests).
    pub fn into_vec(mut self) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(self.len as usize);
        self.read_to_end(&mut out)?;
        Ok(out)
    }
}

fn open_at(blobs: &BlobStore, id: BlobId, from: u64, take: u64) -> Result<io::Take<BlobReader>> {
    let mut r = blobs.open(id)?;
    if from > 0 {
        r.seek(SeekFrom::Start(from))?;
    }
    Ok(r.take(take))
}

impl Read for ObjectBody {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.read_pieces(buf)?;
        if let Some((hasher, want)) = &mut self.verify {
            use md5::Digest as _;
            if n > 0 {
                hasher.update(&buf[..n]);
            } else if !buf.is_empty() {
                let got: [u8; 16] = std::mem::take(hasher).finalize().into();
                let want = *want;
                self.verify = None;
                if got != want {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "the stored bytes do not match the object's ETag (damaged on disk)",
                    ));
                }
            }
        }
        Ok(n)
    }
}

impl ObjectBody {
    fn read_pieces(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let Some(front) = self.pieces.front_mut() else {
                return Ok(0);
            };
            let n = match front {
                Piece::Inline(bytes) => {
                    let n = buf.len().min(bytes.len());
                    buf[..n].copy_from_slice(&bytes[..n]);
                    bytes.drain(..n);
                    n
                }
                Piece::Blob(id, from, take) => {
                    let Some(blobs) = &self.blobs else {
                        return Err(io::Error::other("blob body without a blob store"));
                    };
                    let opened = open_at(blobs, *id, *from, *take)
                        .map_err(|e| io::Error::other(e.to_string()))?;
                    *front = Piece::Open(opened);
                    continue;
                }
                Piece::Open(r) => r.read(buf)?,
                Piece::File(r) => r.read(buf)?,
            };
            if n == 0 && !buf.is_empty() {
                let left = match front {
                    Piece::Open(r) => r.limit(),
                    Piece::File(r) => r.limit(),
                    _ => 0,
                };
                if left > 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "body is shorter than its record",
                    ));
                }
                self.pieces.pop_front();
                continue;
            }
            return Ok(n);
        }
    }
}
