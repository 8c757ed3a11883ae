//! The workspace view as an [`ObjectBackend`]: each request goes to a file
//! of the tree or to the private store (see the module documentation).

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;

use stow_store::{
    validate, BucketInfo, ByteRange, CompletedPart, ConditionCheck, CopyOptions,
    CreateUploadOptions, DefaultEncryption, Joined, JoinedUpload, ListPage, ListQuery,
    ObjectBackend, ObjectBody, ObjectMeta, ObjectOwnership, ObjectRead, PartInfo, PartOptions,
    PartsPage, PublicAccessBlock, PutOptions, StoreError, UploadInfo, UploadsPage, Usage,
    WriteCondition,
};

use super::files::{is_missing, sync_dir};
use super::props::StampedProps;
use super::{StoreResult, WorkspaceBucket};

/// The view keeps no versions, so it has no object lock: a write asking
/// for retention or a legal hold is refused (`not_implemented`), never
/// silently stored unlocked.
fn refuse_lock(lock: &stow_store::ObjectLock) -> StoreResult<()> {
    if lock.is_empty() {
        return Ok(());
    }
    Err(StoreError::NotImplemented {
        reason: "the workspace bucket view keeps no object versions, so it has no object lock \
                 (retention, legal hold)"
            .into(),
    })
}

/// The view is never public (its ACLs are all private): a write asking
/// for a public ACL is refused (`not_implemented`), never stored as one
/// that nothing honours.
fn refuse_public_acl(acl: stow_store::CannedAcl) -> StoreResult<()> {
    if acl.is_private() {
        return Ok(());
    }
    Err(StoreError::NotImplemented {
        reason: format!(
            "the workspace bucket view keeps no public ACLs; only the canned ACL \"private\" is \
             accepted (got {:?})",
            acl.as_str()
        ),
    })
}

impl WorkspaceBucket {
    /// The object now at a primary-bucket file key: the file, else a
    /// private-store object of that key.
    pub(super) fn current(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        if let Some((mut f, m)) = self.open_file(key)? {
            return Ok(Some(self.file_meta(key, &mut f, &m)?));
        }
        match self.store.head_object(&self.primary, key) {
            Ok(meta) => Ok(Some(meta)),
            Err(StoreError::NoSuchKey { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Completes an upload of a file key into the file. The store joins the
    /// parts into a staged file without recording an object under the key;
    /// under the write lock the condition is checked against the file now
    /// there and the staged file renamed over it; then the store drops the
    /// upload. A crash before the rename leaves the upload as it was; after
    /// it, the file in place and the upload still in flight (its parts
    /// counted, listed, abortable), which a retried completion finishes.
    /// A retry after the upload was finished answers as the first did.
    fn complete_into_file(
        &self,
        key: &str,
        upload_id: &str,
        listed: &[CompletedPart],
        condition: WriteCondition,
        expected: Option<(stow_store::ChecksumAlgorithm, String)>,
    ) -> StoreResult<ObjectMeta> {
        let joined = self
            .store
            .join_upload(&self.primary, key, upload_id, listed, expected)?;
        let JoinedUpload { meta, body, ticket } = match joined {
            Joined::Replayed(meta) => return Ok(meta),
            Joined::Staged(joined) => joined,
        };
        let _w = self.lock_writes();
        let current = self.current(key)?;
        condition.check(
            current.as_ref().map(|m| m.etag.as_str()),
            &self.primary,
            key,
        )?;
        let old_size = self.file_size(key)?;
        let charge = self.charge_joined_file(old_size)?;
        crate::fault::point("bucket-complete-joined");
        let props = StampedProps {
            etag: meta.etag,
            props: meta.props,
            checksum: meta.checksum,
            parts: meta.parts,
        };
        let installed = match self.install(key, props, |path, mode| body.persist_as(path, mode)) {
            Ok(installed) => installed,
            Err(e) => {
                self.uncharge(charge);
                return Err(e);
            }
        };
        self.note_joined_file(old_size, installed.size);
        crate::fault::point("bucket-complete-installed");
        self.store.finish_joined(ticket)?;
        Ok(installed)
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
        let _g = self.s3_write();
        self.store.create_bucket(name)
    }

    fn head_bucket(&self, name: &str) -> StoreResult<BucketInfo> {
        self.store.head_bucket(name)
    }

    fn list_buckets(&self) -> StoreResult<Vec<BucketInfo>> {
        self.store.list_buckets()
    }

    fn set_object_tags(
        &self,
        bucket: &str,
        key: &str,
        tags: BTreeMap<String, String>,
    ) -> StoreResult<ObjectMeta> {
        validate::check_tags(&tags)?;
        let _g = self.s3_write();
        if self.file_key(bucket, key) {
            let _w = self.lock_writes();
            if let Some(meta) = self.set_file_tags(key, tags.clone())? {
                return Ok(meta);
            }
        }
        // Not a file: a private object of that key, or none.
        self.store.set_object_tags(bucket, key, tags)
    }

    // Bucket settings live in the private store, for the primary bucket as
    // for the others. The view's ACLs are always private, so an Object
    // Ownership setting or a public access block holds trivially.
    fn bucket_tags(&self, bucket: &str) -> StoreResult<Option<BTreeMap<String, String>>> {
        self.store.bucket_tags(bucket)
    }

    fn set_bucket_tags(
        &self,
        bucket: &str,
        tags: Option<BTreeMap<String, String>>,
    ) -> StoreResult<()> {
        let _g = self.s3_write();
        self.store.set_bucket_tags(bucket, tags)
    }

    fn bucket_ownership(&self, bucket: &str) -> StoreResult<Option<ObjectOwnership>> {
        self.store.bucket_ownership(bucket)
    }

    fn set_bucket_ownership(
        &self,
        bucket: &str,
        ownership: Option<ObjectOwnership>,
    ) -> StoreResult<()> {
        let _g = self.s3_write();
        self.store.set_bucket_ownership(bucket, ownership)
    }

    fn public_access_block(&self, bucket: &str) -> StoreResult<Option<PublicAccessBlock>> {
        self.store.public_access_block(bucket)
    }

    fn set_public_access_block(
        &self,
        bucket: &str,
        block: Option<PublicAccessBlock>,
    ) -> StoreResult<()> {
        let _g = self.s3_write();
        self.store.set_public_access_block(bucket, block)
    }

    // A bucket policy is kept with the other settings, in the private
    // store; the protocol server reads and enforces it as on a plain store
    // (Deny statements bind the owner too; Allow statements are the one
    // way to open the view to unsigned requests, as the owner chose).
    fn bucket_policy(&self, bucket: &str) -> StoreResult<Option<String>> {
        self.store.bucket_policy(bucket)
    }

    fn set_bucket_policy(&self, bucket: &str, policy: Option<String>) -> StoreResult<()> {
        let _g = self.s3_write();
        self.store.set_bucket_policy(bucket, policy)
    }

    // Default encryption (SSE-S3 only) is a setting like the policy: kept
    // in the private store, and a file's SSE-S3 flag with its properties.
    fn bucket_encryption(&self, bucket: &str) -> StoreResult<Option<DefaultEncryption>> {
        self.store.bucket_encryption(bucket)
    }

    fn set_bucket_encryption(
        &self,
        bucket: &str,
        encryption: Option<DefaultEncryption>,
    ) -> StoreResult<()> {
        let _g = self.s3_write();
        self.store.set_bucket_encryption(bucket, encryption)
    }

    fn delete_bucket(&self, name: &str) -> StoreResult<()> {
        if name == self.primary {
            // The primary bucket is the workspace directory itself.
            return Err(StoreError::BucketNotEmpty {
                bucket: name.to_string(),
            });
        }
        let _g = self.s3_write();
        self.store.delete_bucket(name)
    }

    fn put_object(
        &self,
        bucket: &str,
        key: &str,
        body: &mut dyn Read,
        mut opts: PutOptions,
    ) -> StoreResult<ObjectMeta> {
        refuse_lock(&opts.props.lock)?;
        refuse_public_acl(opts.props.acl)?;
        if !self.writes_file(bucket, key)? {
            let _g = self.s3_write();
            return self.store.put_object(bucket, key, body, opts);
        }
        let condition = std::mem::take(&mut opts.condition);
        let received = self.receive_within_quota(key, body, opts)?;
        let props = StampedProps {
            etag: received.etag.clone(),
            props: received.props.clone(),
            checksum: received.checksum.clone(),
            parts: Vec::new(),
        };
        // The body is in; only installing it waits for a rewind.
        let _g = self.s3_write();
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
        let _g = self.s3_write();
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
        self.props.forget(key)?;
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
        refuse_lock(&opts.lock)?;
        refuse_public_acl(opts.acl)?;
        if let Some(v) = opts.source_version.as_deref().filter(|v| *v != "null") {
            // The view keeps no versions: only the null one exists.
            return Err(StoreError::NoSuchVersion {
                bucket: src_bucket.to_string(),
                key: src_key.to_string(),
                version_id: v.to_string(),
            });
        }
        let _g = self.s3_write();
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
        let mut props = opts
            .replace_props
            .unwrap_or_else(|| read.meta.props.clone());
        props.sse_s3 = opts.sse_s3;
        let put = PutOptions {
            props,
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
        refuse_lock(&opts.props.lock)?;
        refuse_public_acl(opts.props.acl)?;
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
        let _g = self.s3_write();
        if !self.writes_file(bucket, key)? {
            return self
                .store
                .complete_upload_checked(bucket, key, upload_id, listed, condition, expected);
        }
        self.complete_into_file(key, upload_id, listed, condition, expected)
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use stow_store::{ObjectBackend, PutOptions};

    use super::super::scratch_view;

    /// A file key writes a file; a blocked path, a key that is not a
    /// portable path and another bucket write private objects; a delete
    /// removes the file and the directories it leaves empty.
    #[test]
    fn requests_go_to_files_or_to_the_private_store() {
        let (tmp, view) = scratch_view(None);
        view.ensure_bucket("other").unwrap();
        fs::create_dir(tmp.path().join("blocked")).unwrap();
        for (bucket, key) in [
            ("wsb", "d/e/f.txt"),
            ("wsb", "blocked"),
            ("wsb", "odd:key"),
            ("other", "g.txt"),
        ] {
            let body = format!("{bucket}/{key}");
            ObjectBackend::put_object(
                &view,
                bucket,
                key,
                &mut body.as_bytes(),
                PutOptions::default(),
            )
            .unwrap();
            let (bytes, _) = view.read_bytes(bucket, key).unwrap();
            assert_eq!(bytes, body.as_bytes());
        }
        assert_eq!(
            fs::read(tmp.path().join("d/e/f.txt")).unwrap(),
            b"wsb/d/e/f.txt"
        );
        assert!(tmp.path().join("blocked").is_dir());
        assert!(!tmp.path().join("g.txt").exists());
        let private: Vec<String> = view
            .private_objects("wsb")
            .unwrap()
            .into_iter()
            .map(|o| o.key)
            .collect();
        assert_eq!(private, ["blocked", "odd:key"]);

        assert!(ObjectBackend::delete_object(&view, "wsb", "d/e/f.txt").unwrap());
        assert!(!tmp.path().join("d").exists(), "empty directories pruned");
        assert!(!ObjectBackend::delete_object(&view, "wsb", "d/e/f.txt").unwrap());
    }
}
