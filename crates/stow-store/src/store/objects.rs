//! The [`Store`]'s objects: receiving and committing bodies, reads,
//! deletes, tags, copies, listing and usage.

use std::io::{self, Read};
use std::sync::Arc;

use rusqlite::Connection;

use super::{
    body, check_write_condition, no_such_key, ConditionCheck, ObjectBody, ObjectRead, ReceivedBody,
    Store, VERIFIED_READ_LIMIT,
};
use crate::blobs::Staged;
use crate::checksum::{self, BodyHasher, Checksum, ChecksumAlgorithm, ChecksumType};
use crate::encryption::{check_key, CustomerKey, KeyRecord, Sealer};
use crate::error::{Result, StoreError};
use crate::model::*;
use crate::record::{self, Extent, Record, StoredProps};
use crate::{validate, versions};

/// Whether a copy keeps the source's bytes: both plain, or both sealed
/// with the same customer key.
fn shares_blobs(source: Option<&KeyRecord>, copy: Option<&CustomerKey>) -> bool {
    match (source, copy) {
        (None, None) => true,
        (Some(r), Some(k)) => r.matches(k),
        _ => false,
    }
}

impl Store {
    /// Receives a body and verifies the caller's digests (of the body as
    /// sent); with `key` (SSE-C) it is sealed as it is staged. Nothing is
    /// committed yet.
    #[allow(
        clippy::too_many_arguments,
        reason = "each caller names what it verifies; a struct would only restate them"
    )]
    pub(crate) fn stage_verified(
        &self,
        body: &mut dyn Read,
        keep_alg: Option<ChecksumAlgorithm>,
        expected: &[(ChecksumAlgorithm, String)],
        content_md5: Option<&str>,
        trailing: Option<TrailingChecksums>,
        want_sha256: bool,
        key: Option<&CustomerKey>,
    ) -> Result<(Staged, Option<Checksum>)> {
        let md5 = content_md5.map(checksum::decode_content_md5).transpose()?;
        let mut decoded = Vec::with_capacity(expected.len());
        for (alg, value) in expected {
            decoded.push((*alg, alg.decode(value)?));
        }
        let keep_alg = keep_alg.or_else(|| expected.first().map(|(a, _)| *a));
        let mut algs: Vec<ChecksumAlgorithm> = expected.iter().map(|(a, _)| *a).collect();
        algs.extend(keep_alg);
        let hasher = BodyHasher::new(&algs, want_sha256);
        let staged = match key {
            None => self.inner.blobs.stage(body, hasher)?,
            Some(key) => {
                // Sealed as it is received: the plaintext is hashed (the
                // digests are of what the client sent) and never staged.
                let mut sealer = Sealer::new(body, key, hasher);
                let mut staged = self
                    .inner
                    .blobs
                    .stage(&mut sealer, BodyHasher::new(&[], false))?;
                staged.digests = sealer.finish();
                staged.opaque_etag = Some(key.etag_digest(&staged.digests.md5));
                staged
            }
        };
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
            sealed,
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
                sse_c: sealed,
            },
            extents: vec![Extent {
                blob: staged.id,
                size,
            }],
            vid: None,
            seq: 0,
        };
        let inline = staged.inline.clone();
        let stored = staged.stored;
        let (bucket_s, key_s) = (bucket.to_string(), key.to_string());
        let quota = self.inner.quota();
        let job = move |conn: &Connection, fx: &mut crate::db::Effects| {
            let b = versions::bucket(conn, &bucket_s)?;
            let old = record::load_record(conn, b.id, &key_s)?;
            check_write_condition(&condition, old.as_ref(), &bucket_s, &key_s)?;
            let mut rec = rec;
            rec.modified_ns = record::now_ns();
            rec.generation = record::new_generation();
            record::insert_blob(conn, fx, rec.extents[0].blob, stored, inline.as_deref())?;
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
            opts.encryption.as_ref(),
        )?;
        Ok(ReceivedBody {
            size: staged.digests.size,
            etag: checksum::etag_of_md5(&staged.etag_md5()),
            checksum,
            props,
            staged,
            sealed: opts.encryption.as_ref().map(CustomerKey::record),
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
        self.get_object_with(bucket, key, None, range, None, None)
    }

    /// Opens one part of a multipart object (part 1 of a simple object is
    /// the whole object).
    pub fn get_object_part(&self, bucket: &str, key: &str, part_number: u32) -> Result<ObjectRead> {
        self.get_object_with(bucket, key, None, None, Some(part_number), None)
    }

    /// Opens `version` of an object (`"null"` for the null version, `None`
    /// for the latest), whole, one byte range or one part. An object
    /// written with a customer key (SSE-C) opens only with `sse`, that key
    /// (`encryption_key_missing`, `wrong_encryption_key`); a key for a
    /// plain object is `encryption_not_applicable`.
    pub(crate) fn get_object_with(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        range: Option<ByteRange>,
        part: Option<u32>,
        sse: Option<&CustomerKey>,
    ) -> Result<ObjectRead> {
        validate::bucket_name(bucket)?;
        validate::object_key(key)?;
        let version = version.map(versions::VersionRef::parse).transpose()?;
        let blobs = Arc::clone(&self.inner.blobs);
        let pin = self.inner.db.pin();
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
            // The key is checked once the range or part is known to exist
            // (a missing part is InvalidPart with or without the key).
            check_key(rec.props.sse_c.as_ref(), sse)?;
            let ranged = range.is_some() || part.is_some();
            let mut body = ObjectBody::plan(conn, &blobs, &rec.extents, (offset, len), sse, pin)?;
            // A sealed body is authenticated record by record instead.
            if !ranged && rec.size <= VERIFIED_READ_LIMIT && sse.is_none() {
                if let Some(md5) = body::plain_etag_md5(&rec.etag) {
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
            .clone()
            .map(validate::normalize_props)
            .transpose()?;
        // Customer keys (SSE-C): the source opens only with its own key; a
        // copy under that same key shares its blobs, any other change of key
        // (or to or from none) rewrites the bytes.
        let src_sealed = self.inner.db.read(|conn| {
            let sbucket = versions::bucket(conn, src_bucket)?;
            let src =
                versions::lookup(conn, sbucket, src_bucket, src_key, source_version.as_ref())?;
            Ok(src.props.sse_c)
        })?;
        check_key(src_sealed.as_ref(), opts.source_key.as_ref())?;
        if !shares_blobs(src_sealed.as_ref(), opts.encryption.as_ref()) {
            return self.copy_rewritten(src_bucket, src_key, dst_bucket, dst_key, opts, replace);
        }
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
            // The source may have changed since its keys were looked at.
            check_key(src.props.sse_c.as_ref(), opts.source_key.as_ref())?;
            if !shares_blobs(src.props.sse_c.as_ref(), opts.encryption.as_ref()) {
                return Err(StoreError::Conflict);
            }
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
            rec.props.props.lock = opts.lock;
            rec.props.props.sse_s3 = opts.sse_s3;
            rec.modified_ns = record::now_ns();
            rec.generation = record::new_generation();
            record::retain(conn, &rec.extents)?;
            versions::install(conn, fx, &quota, dbucket, &dk, old, &mut rec)?;
            Ok(versions::meta_in(&rec, dbucket, &db, &dk))
        })
    }

    /// A copy that cannot share the source's blobs: its key differs from
    /// the source's (or one of them has none), so the bytes are read,
    /// decrypted and sealed again (or written plain). This is a byte copy,
    /// unavoidable when the bytes at rest change.
    fn copy_rewritten(
        &self,
        src_bucket: &str,
        src_key: &str,
        dst_bucket: &str,
        dst_key: &str,
        opts: CopyOptions,
        replace: Option<ObjectProps>,
    ) -> Result<ObjectMeta> {
        let read = self.get_object_with(
            src_bucket,
            src_key,
            opts.source_version.as_deref(),
            None,
            None,
            opts.source_key.as_ref(),
        )?;
        if opts.source.check(&read.meta) != ConditionCheck::Pass {
            return Err(StoreError::PreconditionFailed {
                reason: "copy source condition did not hold",
            });
        }
        let mut props = replace.unwrap_or_else(|| read.meta.props.clone());
        props.acl = opts.acl;
        props.lock = opts.lock;
        props.sse_s3 = opts.sse_s3;
        // A full-object checksum is computed again over the same bytes.
        let keep = read
            .meta
            .checksum
            .as_ref()
            .filter(|c| c.kind == ChecksumType::FullObject)
            .map(|c| c.algorithm);
        let put = PutOptions {
            props,
            checksum_algorithm: keep,
            condition: opts.condition,
            encryption: opts.encryption,
            ..PutOptions::default()
        };
        let mut body = read.body;
        self.put_object(dst_bucket, dst_key, &mut body, put)
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
