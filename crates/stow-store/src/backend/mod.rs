//! [`ObjectBackend`]: the object operations a protocol server needs, so one
//! server can serve a [`Store`](crate::Store) or a view built on one (a
//! workspace bucket).
//!
//! The trait here is the whole contract a backend keeps: each operation
//! with the default of a backend that keeps less (no versions, no ACLs, no
//! bucket settings); `store.rs` holds the store's forwarding impl.

mod store;

use std::collections::BTreeMap;
use std::io::Read;

use crate::error::Result;
use crate::model::*;
use crate::store::{ObjectRead, ResetReport};

/// Buckets, objects, listing and multipart uploads with S3 semantics.
///
/// [`Store`](crate::Store) is the reference implementation; every other implementation
/// keeps its contract: the same errors for the same mistakes, writes that
/// are atomic and durable when they return.
pub trait ObjectBackend: Send + Sync + 'static {
    /// Whether objects outlive the process.
    fn is_persistent(&self) -> bool;
    /// Whether a point read (one record, an inline body) is cheap enough
    /// to run on an async runtime's own thread: no file is hashed or read
    /// beyond an inline body. A protocol server then skips the hand-off to
    /// a blocking thread.
    fn point_reads_are_cheap(&self) -> bool {
        false
    }
    /// Largest body [`ObjectBackend::put_object_detached`] commits without
    /// a blocking thread; 0 when the backend has no such path.
    fn detached_put_max(&self) -> usize {
        0
    }
    /// Commits a body of at most [`ObjectBackend::detached_put_max`] bytes
    /// as [`ObjectBackend::put_object`] does, without blocking the caller:
    /// `done` gets the result from the backend's commit thread. Backends
    /// without such a path run the plain put here.
    fn put_object_detached(
        &self,
        bucket: &str,
        key: &str,
        body: Vec<u8>,
        opts: PutOptions,
        done: Box<dyn FnOnce(Result<ObjectMeta>) + Send>,
    ) {
        done(self.put_object(bucket, key, &mut std::io::Cursor::new(body), opts));
    }
    /// Empties the backend in one step (every bucket, object, upload and
    /// receipt), for test sessions; `not_implemented` where it cannot.
    fn reset(&self) -> Result<ResetReport> {
        Err(crate::StoreError::NotImplemented {
            reason: "this backend cannot be reset (only a plain store can)".into(),
        })
    }
    /// Name of the backend for status reports.
    fn backend_name(&self) -> &'static str {
        if self.is_persistent() {
            "filesystem"
        } else {
            "memory"
        }
    }
    /// Current logical usage.
    fn usage(&self) -> Result<Usage>;
    /// Creates a bucket; `false` when it already existed.
    fn create_bucket(&self, name: &str) -> Result<bool>;
    /// Describes a bucket, or `no_such_bucket`.
    fn head_bucket(&self, name: &str) -> Result<BucketInfo>;
    /// Every bucket, by name.
    fn list_buckets(&self) -> Result<Vec<BucketInfo>>;
    /// Deletes an empty bucket.
    fn delete_bucket(&self, name: &str) -> Result<()>;
    /// Stores an object from a streamed body.
    fn put_object(
        &self,
        bucket: &str,
        key: &str,
        body: &mut dyn Read,
        opts: PutOptions,
    ) -> Result<ObjectMeta>;
    /// Describes an object, or `no_such_key`.
    fn head_object(&self, bucket: &str, key: &str) -> Result<ObjectMeta>;
    /// Opens an object for reading, whole or one byte range.
    fn get_object(&self, bucket: &str, key: &str, range: Option<ByteRange>) -> Result<ObjectRead>;
    /// Opens one part of an object.
    fn get_object_part(&self, bucket: &str, key: &str, part_number: u32) -> Result<ObjectRead>;
    /// Deletes an object; `false` when there was none.
    fn delete_object(&self, bucket: &str, key: &str) -> Result<bool>;
    /// Copies an object.
    fn copy_object(
        &self,
        src_bucket: &str,
        src_key: &str,
        dst_bucket: &str,
        dst_key: &str,
        opts: CopyOptions,
    ) -> Result<ObjectMeta>;
    /// Replaces an object's tags (bytes and other properties unchanged).
    /// Backends without tag storage refuse.
    fn set_object_tags(
        &self,
        bucket: &str,
        key: &str,
        tags: std::collections::BTreeMap<String, String>,
    ) -> Result<ObjectMeta> {
        let _ = (bucket, key, tags);
        Err(crate::StoreError::NotImplemented {
            reason: format!("{} does not store object tags", self.backend_name()),
        })
    }
    /// Replaces the tags of one version of an object (`None`: the latest;
    /// `"null"`: the null version). Backends without versions have only
    /// the null version, the current one.
    fn set_version_tags(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        tags: std::collections::BTreeMap<String, String>,
    ) -> Result<ObjectMeta> {
        if version.is_some() {
            self.head_object_version(bucket, key, version)?;
        }
        self.set_object_tags(bucket, key, tags)
    }
    /// Replaces the canned ACL of one version of an object (as
    /// [`ObjectBackend::set_version_tags`]).
    fn set_version_acl(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        acl: CannedAcl,
    ) -> Result<ObjectMeta> {
        if version.is_some() {
            self.head_object_version(bucket, key, version)?;
        }
        self.set_object_acl(bucket, key, acl)
    }
    /// A bucket's tags (`None`: none; always so where none are kept).
    fn bucket_tags(&self, bucket: &str) -> Result<Option<BTreeMap<String, String>>> {
        self.head_bucket(bucket).map(|_| None)
    }
    /// Replaces (`Some`) or removes (`None`) a bucket's tags. Backends
    /// that keep none refuse to set them with `not_implemented`.
    fn set_bucket_tags(&self, bucket: &str, tags: Option<BTreeMap<String, String>>) -> Result<()> {
        keeps_no_setting(self, bucket, tags.is_none(), "bucket tags")
    }
    /// A bucket's Object Ownership setting (`None`: none set; always so
    /// where none is kept).
    fn bucket_ownership(&self, bucket: &str) -> Result<Option<crate::ObjectOwnership>> {
        self.head_bucket(bucket).map(|_| None)
    }
    /// Sets (`Some`) or removes (`None`) a bucket's Object Ownership.
    /// Backends that keep none refuse to set one with `not_implemented`.
    fn set_bucket_ownership(
        &self,
        bucket: &str,
        ownership: Option<crate::ObjectOwnership>,
    ) -> Result<()> {
        keeps_no_setting(
            self,
            bucket,
            ownership.is_none(),
            "Object Ownership setting (its ACLs are always private)",
        )
    }
    /// A bucket's public access block (`None`: none set; always so where
    /// none is kept).
    fn public_access_block(&self, bucket: &str) -> Result<Option<crate::PublicAccessBlock>> {
        self.head_bucket(bucket).map(|_| None)
    }
    /// Sets (`Some`) or removes (`None`) a bucket's public access block.
    /// Backends that keep none refuse to set one with `not_implemented`.
    fn set_public_access_block(
        &self,
        bucket: &str,
        block: Option<crate::PublicAccessBlock>,
    ) -> Result<()> {
        keeps_no_setting(
            self,
            bucket,
            block.is_none(),
            "public access block (nothing in it is public: its ACLs are always private)",
        )
    }
    /// A bucket's policy document, the bytes its client sent (`None`:
    /// none; always so where none is kept). The store keeps it and never
    /// reads it: what it allows is the protocol server's decision.
    fn bucket_policy(&self, bucket: &str) -> Result<Option<String>> {
        self.head_bucket(bucket).map(|_| None)
    }
    /// Replaces (`Some`, at most [`crate::MAX_BUCKET_POLICY_BYTES`]) or
    /// removes (`None`) a bucket's policy document. Backends that keep none
    /// refuse to set one with `not_implemented`.
    fn set_bucket_policy(&self, bucket: &str, policy: Option<String>) -> Result<()> {
        keeps_no_setting(self, bucket, policy.is_none(), "bucket policy")
    }
    /// A bucket's default encryption (`None`: none; always so where none
    /// is kept).
    fn bucket_encryption(&self, bucket: &str) -> Result<Option<crate::DefaultEncryption>> {
        self.head_bucket(bucket).map(|_| None)
    }
    /// Sets (`Some`) or removes (`None`) a bucket's default encryption.
    /// Backends that keep none refuse to set one with `not_implemented`.
    fn set_bucket_encryption(
        &self,
        bucket: &str,
        encryption: Option<crate::DefaultEncryption>,
    ) -> Result<()> {
        keeps_no_setting(
            self,
            bucket,
            encryption.is_none(),
            "default bucket encryption",
        )
    }
    /// A bucket's ACL, Object Ownership and public access block.
    fn bucket_access(&self, bucket: &str) -> Result<crate::BucketAccess> {
        Ok(crate::BucketAccess {
            acl: self.bucket_acl(bucket)?,
            ownership: self.bucket_ownership(bucket)?,
            public_access_block: self.public_access_block(bucket)?,
        })
    }
    /// Creates a bucket with a canned ACL, or sets the ACL of the existing
    /// one; `false` when it already existed. Backends without ACL storage
    /// take `private` only.
    fn create_bucket_with_acl(&self, name: &str, acl: CannedAcl) -> Result<bool> {
        refuse_acl(self.backend_name(), acl)?;
        self.create_bucket(name)
    }
    /// A bucket's canned ACL (`private` where ACLs are not stored).
    fn bucket_acl(&self, name: &str) -> Result<CannedAcl> {
        self.head_bucket(name).map(|_| CannedAcl::Private)
    }
    /// Replaces a bucket's canned ACL. Backends without ACL storage take
    /// `private` only.
    fn set_bucket_acl(&self, name: &str, acl: CannedAcl) -> Result<()> {
        refuse_acl(self.backend_name(), acl)?;
        self.head_bucket(name).map(|_| ())
    }
    /// Replaces an object's canned ACL (bytes and other properties
    /// unchanged). Backends without ACL storage take `private` only.
    fn set_object_acl(&self, bucket: &str, key: &str, acl: CannedAcl) -> Result<ObjectMeta> {
        refuse_acl(self.backend_name(), acl)?;
        self.head_object(bucket, key)
    }
    /// Lists a bucket in key byte order.
    fn list_objects(&self, bucket: &str, query: &ListQuery) -> Result<ListPage>;
    /// A bucket's versioning state (always unversioned where no versions
    /// are kept).
    fn bucket_versioning(&self, bucket: &str) -> Result<Versioning> {
        self.head_bucket(bucket).map(|_| Versioning::Unversioned)
    }
    /// Enables or suspends versioning. Backends that keep no versions
    /// refuse with `not_implemented`.
    fn set_bucket_versioning(&self, bucket: &str, state: Versioning) -> Result<()> {
        self.head_bucket(bucket)?;
        Err(crate::StoreError::NotImplemented {
            reason: format!(
                "{} keeps no object versions; versioning cannot be {state:?}",
                self.backend_name()
            ),
        })
    }
    /// A bucket's CORS rules (`None`: none; always so where none are kept).
    fn bucket_cors(&self, bucket: &str) -> Result<Option<Vec<crate::CorsRule>>> {
        self.head_bucket(bucket).map(|_| None)
    }
    /// Replaces (`Some`) or removes (`None`) a bucket's CORS rules.
    /// Backends that keep none refuse to set them with `not_implemented`.
    fn set_bucket_cors(&self, bucket: &str, rules: Option<Vec<crate::CorsRule>>) -> Result<()> {
        keeps_no_setting(
            self,
            bucket,
            rules.is_none(),
            "bucket CORS rules; the server-wide origins (serve --cors-origin) apply",
        )
    }
    /// A bucket's lifecycle rules (`None`: none; always so where none are
    /// kept).
    fn bucket_lifecycle(&self, bucket: &str) -> Result<Option<crate::LifecycleConfig>> {
        self.head_bucket(bucket).map(|_| None)
    }
    /// Replaces (`Some`) or removes (`None`) a bucket's lifecycle rules,
    /// returning what is now stored. Backends that keep none refuse to set
    /// them with `not_implemented` (removing none succeeds).
    fn set_bucket_lifecycle(
        &self,
        bucket: &str,
        config: Option<crate::LifecycleConfig>,
    ) -> Result<Option<crate::LifecycleConfig>> {
        keeps_no_setting(
            self,
            bucket,
            config.is_none(),
            "lifecycle rules: nothing here expires, so rules are not accepted",
        )
        .map(|()| None)
    }
    /// When the bucket's lifecycle rules expire `meta`, taken as the
    /// current version (S3's `x-amz-expiration`); `None` where no rules
    /// are kept.
    fn object_expiration(&self, meta: &ObjectMeta) -> Result<Option<crate::ObjectExpiration>> {
        let _ = meta;
        Ok(None)
    }
    /// When the bucket's lifecycle rules abort an upload of `key` started
    /// at `initiated_ns` (S3's `x-amz-abort-date`); `None` where no rules
    /// are kept.
    fn upload_abort(
        &self,
        bucket: &str,
        key: &str,
        initiated_ns: i64,
    ) -> Result<Option<crate::ObjectExpiration>> {
        let _ = (bucket, key, initiated_ns);
        Ok(None)
    }
    /// Creates a bucket with object lock (and versioning) enabled; `false`
    /// when it already existed. Backends that keep no versions refuse with
    /// `not_implemented`.
    fn create_bucket_with_lock(&self, name: &str, acl: CannedAcl) -> Result<bool> {
        let _ = (name, acl);
        Err(no_lock(self.backend_name()))
    }
    /// A bucket's object lock configuration (`None`: object lock is not
    /// enabled; always so where no versions are kept).
    fn bucket_object_lock(&self, bucket: &str) -> Result<Option<crate::LockConfig>> {
        self.head_bucket(bucket).map(|_| None)
    }
    /// Replaces a bucket's object lock configuration. Backends without
    /// object lock refuse with `not_implemented`.
    fn set_bucket_object_lock(&self, bucket: &str, config: crate::LockConfig) -> Result<()> {
        let _ = config;
        self.head_bucket(bucket)?;
        Err(no_lock(self.backend_name()))
    }
    /// A version's object lock (retention, legal hold). Backends without
    /// object lock refuse with `not_implemented`.
    fn object_lock(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
    ) -> Result<crate::ObjectLock> {
        self.head_object_version(bucket, key, version)?;
        Err(no_lock(self.backend_name()))
    }
    /// Sets or removes a version's retention (see
    /// `Store::set_object_retention`). Backends without object lock refuse
    /// with `not_implemented`.
    fn set_object_retention(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        retention: Option<crate::Retention>,
        bypass_governance: bool,
    ) -> Result<ObjectMeta> {
        let _ = (retention, bypass_governance);
        self.head_object_version(bucket, key, version)?;
        Err(no_lock(self.backend_name()))
    }
    /// Puts a legal hold on a version or takes it off. Backends without
    /// object lock refuse with `not_implemented`.
    fn set_object_legal_hold(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        on: bool,
    ) -> Result<ObjectMeta> {
        let _ = on;
        self.head_object_version(bucket, key, version)?;
        Err(no_lock(self.backend_name()))
    }
    /// [`ObjectBackend::delete_object_version`], where GOVERNANCE retention
    /// yields to `bypass_governance` (backends without object lock ignore
    /// it: nothing of theirs is locked).
    fn delete_object_version_bypassing(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        bypass_governance: bool,
    ) -> Result<Deleted> {
        let _ = bypass_governance;
        self.delete_object_version(bucket, key, version)
    }
    /// Describes a version of an object (`None`: the latest; `"null"`: the
    /// null version). Without versions, only the null version exists.
    fn head_object_version(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
    ) -> Result<ObjectMeta> {
        only_null(bucket, key, version)?;
        self.head_object(bucket, key)
    }
    /// Opens a version of an object, whole, one range or one part.
    fn get_object_version(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        range: Option<ByteRange>,
        part: Option<u32>,
    ) -> Result<ObjectRead> {
        only_null(bucket, key, version)?;
        match part {
            Some(n) => self.get_object_part(bucket, key, n),
            None => self.get_object(bucket, key, range),
        }
    }
    /// Whether objects can be sealed with customer-provided keys (SSE-C).
    /// A protocol server refuses such keys (`not_implemented`, see
    /// [`no_customer_keys`]) before calling a backend that cannot.
    fn supports_customer_keys(&self) -> bool {
        false
    }
    /// [`ObjectBackend::get_object_version`] with the request's customer
    /// key (SSE-C): an object sealed with one opens only with it.
    fn get_object_keyed(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        range: Option<ByteRange>,
        part: Option<u32>,
        sse: Option<&crate::CustomerKey>,
    ) -> Result<ObjectRead> {
        if sse.is_some() {
            return Err(no_customer_keys(self.backend_name()));
        }
        self.get_object_version(bucket, key, version, range, part)
    }
    /// [`ObjectBackend::head_object_version`] with the request's customer
    /// key (SSE-C), refused unless it is the object's own (none for a
    /// plain object), as S3's HeadObject is.
    fn head_object_keyed(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        sse: Option<&crate::CustomerKey>,
    ) -> Result<ObjectMeta> {
        if sse.is_some() {
            return Err(no_customer_keys(self.backend_name()));
        }
        self.head_object_version(bucket, key, version)
    }
    /// Checks that `sse` is the customer key a multipart upload was
    /// created with (a completion that names one).
    fn check_upload_key(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        sse: &crate::CustomerKey,
    ) -> Result<()> {
        let _ = (bucket, key, upload_id, sse);
        Err(no_customer_keys(self.backend_name()))
    }
    /// Deletes the latest version (`None`) or one version for good.
    fn delete_object_version(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
    ) -> Result<Deleted> {
        if version.is_some() && self.head_object_version(bucket, key, version).is_err() {
            // Absent, or not a version we have: nothing to delete.
            self.head_bucket(bucket)?;
            return Ok(Deleted::default());
        }
        self.delete_object(bucket, key).map(|existed| Deleted {
            existed,
            ..Deleted::default()
        })
    }
    /// Lists every version of a bucket's objects; without versions, each
    /// object is its one (null) version.
    fn list_object_versions(&self, bucket: &str, q: &VersionQuery) -> Result<VersionPage> {
        let page = self.list_objects(
            bucket,
            &ListQuery {
                prefix: q.prefix.clone(),
                delimiter: q.delimiter.clone(),
                start_after: q.key_marker.clone(),
                max_keys: q.max_keys,
            },
        )?;
        let versions: Vec<VersionEntry> = page
            .objects
            .into_iter()
            .map(|o| VersionEntry {
                key: o.key,
                version_id: "null".into(),
                is_latest: true,
                delete_marker: false,
                size: o.size,
                etag: o.etag,
                last_modified_ns: o.last_modified_ns,
            })
            .collect();
        let last_is_version = versions.last().map(|v| v.key.clone()) == page.next_marker;
        Ok(VersionPage {
            next_version_id_marker: (page.is_truncated && last_is_version).then(|| "null".into()),
            next_key_marker: page.next_marker,
            versions,
            common_prefixes: page.common_prefixes,
            is_truncated: page.is_truncated,
        })
    }
    /// Starts a multipart upload.
    fn create_upload(
        &self,
        bucket: &str,
        key: &str,
        opts: CreateUploadOptions,
    ) -> Result<UploadInfo>;
    /// Stores one part of an upload.
    fn upload_part(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part_number: i64,
        body: &mut dyn Read,
        opts: PartOptions,
    ) -> Result<PartInfo>;
    /// Lists an upload's parts after `marker`.
    fn list_parts(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        marker: u32,
        max_parts: usize,
    ) -> Result<PartsPage>;
    /// Lists a bucket's uploads in progress.
    fn list_uploads(
        &self,
        bucket: &str,
        prefix: &str,
        key_marker: Option<&str>,
        upload_id_marker: Option<&str>,
        max_uploads: usize,
    ) -> Result<UploadsPage>;
    /// Abandons an upload and its parts.
    fn abort_upload(&self, bucket: &str, key: &str, upload_id: &str) -> Result<()>;
    /// Joins an upload's parts into an object.
    fn complete_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        listed: &[CompletedPart],
        condition: WriteCondition,
    ) -> Result<ObjectMeta> {
        self.complete_upload_checked(bucket, key, upload_id, listed, condition, None)
    }
    /// [`ObjectBackend::complete_upload`], refused with `BadDigest` unless
    /// the whole object's checksum is `expected` (algorithm, base64).
    fn complete_upload_checked(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        listed: &[CompletedPart],
        condition: WriteCondition,
        expected: Option<(crate::ChecksumAlgorithm, String)>,
    ) -> Result<ObjectMeta>;
}

/// Refuses a version other than the null one on a backend that keeps no
/// versions: `no_such_version`.
fn only_null(bucket: &str, key: &str, version: Option<&str>) -> Result<()> {
    match version {
        None | Some("null") => Ok(()),
        Some(v) => Err(crate::StoreError::NoSuchVersion {
            bucket: bucket.to_string(),
            key: key.to_string(),
            version_id: v.to_string(),
        }),
    }
}

/// The refusal of a customer-provided key (SSE-C) by a backend that keeps
/// plain files.
pub fn no_customer_keys(backend: &str) -> crate::StoreError {
    crate::StoreError::NotImplemented {
        reason: format!(
            "{backend} keeps objects as plain files, so server-side encryption with customer-provided keys (SSE-C) is not available here"
        ),
    }
}

/// The refusal of object lock by a backend that keeps no versions.
fn no_lock(backend: &str) -> crate::StoreError {
    crate::StoreError::NotImplemented {
        reason: format!("{backend} keeps no object versions, so it has no object lock"),
    }
}

/// A bucket setting's setter on a backend that keeps none of `what`:
/// removing it (there is none) succeeds, setting it is `not_implemented`,
/// and a missing bucket is `no_such_bucket` either way.
fn keeps_no_setting<B: ObjectBackend + ?Sized>(
    backend: &B,
    bucket: &str,
    removing: bool,
    what: &str,
) -> Result<()> {
    backend.head_bucket(bucket)?;
    if removing {
        return Ok(());
    }
    Err(crate::StoreError::NotImplemented {
        reason: format!("{} keeps no {what}", backend.backend_name()),
    })
}

/// Refuses a canned ACL other than `private` on a backend that keeps none.
fn refuse_acl(backend: &str, acl: CannedAcl) -> Result<()> {
    if acl.is_private() {
        return Ok(());
    }
    Err(crate::StoreError::NotImplemented {
        reason: format!(
            "{backend} does not store ACLs; only the canned ACL \"private\" is accepted (got {:?})",
            acl.as_str()
        ),
    })
}
