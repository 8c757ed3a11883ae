//! The store's own [`ObjectBackend`]: every operation forwards to the
//! [`Store`] method of the same name.

use std::collections::BTreeMap;
use std::io::Read;

use super::ObjectBackend;
use crate::error::Result;
use crate::model::*;
use crate::store::ResetReport;
use crate::store::{ObjectRead, Store};

impl ObjectBackend for Store {
    fn is_persistent(&self) -> bool {
        Store::is_persistent(self)
    }
    fn point_reads_are_cheap(&self) -> bool {
        true
    }
    fn detached_put_max(&self) -> usize {
        crate::SMALL_BODY_MAX
    }
    fn put_object_detached(
        &self,
        bucket: &str,
        key: &str,
        body: Vec<u8>,
        opts: PutOptions,
        done: Box<dyn FnOnce(Result<ObjectMeta>) + Send>,
    ) {
        Store::put_object_detached(self, bucket, key, body, opts, done)
    }
    fn reset(&self) -> Result<ResetReport> {
        Store::reset(self)
    }
    fn usage(&self) -> Result<Usage> {
        Store::usage(self)
    }
    fn create_bucket(&self, name: &str) -> Result<bool> {
        Store::create_bucket(self, name)
    }
    fn create_bucket_with_acl(&self, name: &str, acl: CannedAcl) -> Result<bool> {
        Store::create_bucket_with_acl(self, name, acl)
    }
    fn bucket_acl(&self, name: &str) -> Result<CannedAcl> {
        Store::bucket_acl(self, name)
    }
    fn set_bucket_acl(&self, name: &str, acl: CannedAcl) -> Result<()> {
        Store::set_bucket_acl(self, name, acl)
    }
    fn set_object_acl(&self, bucket: &str, key: &str, acl: CannedAcl) -> Result<ObjectMeta> {
        Store::set_object_acl(self, bucket, key, acl)
    }
    fn head_bucket(&self, name: &str) -> Result<BucketInfo> {
        Store::head_bucket(self, name)
    }
    fn list_buckets(&self) -> Result<Vec<BucketInfo>> {
        Store::list_buckets(self)
    }
    fn delete_bucket(&self, name: &str) -> Result<()> {
        Store::delete_bucket(self, name)
    }
    fn put_object(
        &self,
        bucket: &str,
        key: &str,
        body: &mut dyn Read,
        opts: PutOptions,
    ) -> Result<ObjectMeta> {
        Store::put_object(self, bucket, key, body, opts)
    }
    fn head_object(&self, bucket: &str, key: &str) -> Result<ObjectMeta> {
        Store::head_object(self, bucket, key)
    }
    fn get_object(&self, bucket: &str, key: &str, range: Option<ByteRange>) -> Result<ObjectRead> {
        Store::get_object(self, bucket, key, range)
    }
    fn get_object_part(&self, bucket: &str, key: &str, part_number: u32) -> Result<ObjectRead> {
        Store::get_object_part(self, bucket, key, part_number)
    }
    fn delete_object(&self, bucket: &str, key: &str) -> Result<bool> {
        Store::delete_object(self, bucket, key)
    }
    fn copy_object(
        &self,
        src_bucket: &str,
        src_key: &str,
        dst_bucket: &str,
        dst_key: &str,
        opts: CopyOptions,
    ) -> Result<ObjectMeta> {
        Store::copy_object(self, src_bucket, src_key, dst_bucket, dst_key, opts)
    }
    fn set_object_tags(
        &self,
        bucket: &str,
        key: &str,
        tags: std::collections::BTreeMap<String, String>,
    ) -> Result<ObjectMeta> {
        Store::set_object_tags(self, bucket, key, tags)
    }
    fn list_objects(&self, bucket: &str, query: &ListQuery) -> Result<ListPage> {
        Store::list_objects(self, bucket, query)
    }
    fn set_version_tags(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        tags: BTreeMap<String, String>,
    ) -> Result<ObjectMeta> {
        Store::set_version_tags(self, bucket, key, version, tags)
    }
    fn set_version_acl(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        acl: CannedAcl,
    ) -> Result<ObjectMeta> {
        Store::set_version_acl(self, bucket, key, version, acl)
    }
    fn bucket_tags(&self, bucket: &str) -> Result<Option<BTreeMap<String, String>>> {
        Store::bucket_tags(self, bucket)
    }
    fn set_bucket_tags(&self, bucket: &str, tags: Option<BTreeMap<String, String>>) -> Result<()> {
        Store::set_bucket_tags(self, bucket, tags)
    }
    fn bucket_ownership(&self, bucket: &str) -> Result<Option<crate::ObjectOwnership>> {
        Store::bucket_ownership(self, bucket)
    }
    fn set_bucket_ownership(
        &self,
        bucket: &str,
        ownership: Option<crate::ObjectOwnership>,
    ) -> Result<()> {
        Store::set_bucket_ownership(self, bucket, ownership)
    }
    fn public_access_block(&self, bucket: &str) -> Result<Option<crate::PublicAccessBlock>> {
        Store::public_access_block(self, bucket)
    }
    fn set_public_access_block(
        &self,
        bucket: &str,
        block: Option<crate::PublicAccessBlock>,
    ) -> Result<()> {
        Store::set_public_access_block(self, bucket, block)
    }
    fn bucket_policy(&self, bucket: &str) -> Result<Option<String>> {
        Store::bucket_policy(self, bucket)
    }
    fn set_bucket_policy(&self, bucket: &str, policy: Option<String>) -> Result<()> {
        Store::set_bucket_policy(self, bucket, policy)
    }
    fn bucket_encryption(&self, bucket: &str) -> Result<Option<crate::DefaultEncryption>> {
        Store::bucket_encryption(self, bucket)
    }
    fn set_bucket_encryption(
        &self,
        bucket: &str,
        encryption: Option<crate::DefaultEncryption>,
    ) -> Result<()> {
        Store::set_bucket_encryption(self, bucket, encryption)
    }
    fn bucket_access(&self, bucket: &str) -> Result<crate::BucketAccess> {
        Store::bucket_access(self, bucket)
    }
    fn bucket_versioning(&self, bucket: &str) -> Result<Versioning> {
        Store::bucket_versioning(self, bucket)
    }
    fn bucket_cors(&self, bucket: &str) -> Result<Option<Vec<crate::CorsRule>>> {
        Store::bucket_cors(self, bucket)
    }
    fn set_bucket_cors(&self, bucket: &str, rules: Option<Vec<crate::CorsRule>>) -> Result<()> {
        Store::set_bucket_cors(self, bucket, rules)
    }
    fn bucket_lifecycle(&self, bucket: &str) -> Result<Option<crate::LifecycleConfig>> {
        Store::bucket_lifecycle(self, bucket)
    }
    fn set_bucket_lifecycle(
        &self,
        bucket: &str,
        config: Option<crate::LifecycleConfig>,
    ) -> Result<Option<crate::LifecycleConfig>> {
        Store::set_bucket_lifecycle(self, bucket, config)
    }
    fn object_expiration(&self, meta: &ObjectMeta) -> Result<Option<crate::ObjectExpiration>> {
        Store::object_expiration(self, meta)
    }
    fn upload_abort(
        &self,
        bucket: &str,
        key: &str,
        initiated_ns: i64,
    ) -> Result<Option<crate::ObjectExpiration>> {
        Store::upload_abort(self, bucket, key, initiated_ns)
    }
    fn set_bucket_versioning(&self, bucket: &str, state: Versioning) -> Result<()> {
        Store::set_bucket_versioning(self, bucket, state)
    }
    fn create_bucket_with_lock(&self, name: &str, acl: CannedAcl) -> Result<bool> {
        Store::create_bucket_with_lock(self, name, acl)
    }
    fn bucket_object_lock(&self, bucket: &str) -> Result<Option<crate::LockConfig>> {
        Store::bucket_object_lock(self, bucket)
    }
    fn set_bucket_object_lock(&self, bucket: &str, config: crate::LockConfig) -> Result<()> {
        Store::set_bucket_object_lock(self, bucket, config)
    }
    fn object_lock(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
    ) -> Result<crate::ObjectLock> {
        Store::object_lock(self, bucket, key, version)
    }
    fn set_object_retention(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        retention: Option<crate::Retention>,
        bypass_governance: bool,
    ) -> Result<ObjectMeta> {
        Store::set_object_retention(self, bucket, key, version, retention, bypass_governance)
    }
    fn set_object_legal_hold(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        on: bool,
    ) -> Result<ObjectMeta> {
        Store::set_object_legal_hold(self, bucket, key, version, on)
    }
    fn delete_object_version_bypassing(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        bypass_governance: bool,
    ) -> Result<Deleted> {
        Store::delete_object_version_bypassing(self, bucket, key, version, bypass_governance)
    }
    fn head_object_version(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
    ) -> Result<ObjectMeta> {
        Store::head_object_version(self, bucket, key, version)
    }
    fn get_object_version(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        range: Option<ByteRange>,
        part: Option<u32>,
    ) -> Result<ObjectRead> {
        Store::get_object_version(self, bucket, key, version, range, part)
    }
    fn supports_customer_keys(&self) -> bool {
        true
    }
    fn get_object_keyed(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        range: Option<ByteRange>,
        part: Option<u32>,
        sse: Option<&crate::CustomerKey>,
    ) -> Result<ObjectRead> {
        Store::get_object_keyed(self, bucket, key, version, range, part, sse)
    }
    fn head_object_keyed(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        sse: Option<&crate::CustomerKey>,
    ) -> Result<ObjectMeta> {
        Store::head_object_keyed(self, bucket, key, version, sse)
    }
    fn check_upload_key(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        sse: &crate::CustomerKey,
    ) -> Result<()> {
        Store::check_upload_key(self, bucket, key, upload_id, sse)
    }
    fn delete_object_version(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
    ) -> Result<Deleted> {
        Store::delete_object_version(self, bucket, key, version)
    }
    fn list_object_versions(&self, bucket: &str, q: &VersionQuery) -> Result<VersionPage> {
        Store::list_object_versions(self, bucket, q)
    }
    fn create_upload(
        &self,
        bucket: &str,
        key: &str,
        opts: CreateUploadOptions,
    ) -> Result<UploadInfo> {
        Store::create_upload(self, bucket, key, opts)
    }
    fn upload_part(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part_number: i64,
        body: &mut dyn Read,
        opts: PartOptions,
    ) -> Result<PartInfo> {
        Store::upload_part(self, bucket, key, upload_id, part_number, body, opts)
    }
    fn list_parts(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        marker: u32,
        max_parts: usize,
    ) -> Result<PartsPage> {
        Store::list_parts(self, bucket, key, upload_id, marker, max_parts)
    }
    fn list_uploads(
        &self,
        bucket: &str,
        prefix: &str,
        key_marker: Option<&str>,
        upload_id_marker: Option<&str>,
        max_uploads: usize,
    ) -> Result<UploadsPage> {
        Store::list_uploads(
            self,
            bucket,
            prefix,
            key_marker,
            upload_id_marker,
            max_uploads,
        )
    }
    fn abort_upload(&self, bucket: &str, key: &str, upload_id: &str) -> Result<()> {
        Store::abort_upload(self, bucket, key, upload_id)
    }
    fn complete_upload_checked(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        listed: &[CompletedPart],
        condition: WriteCondition,
        expected: Option<(crate::ChecksumAlgorithm, String)>,
    ) -> Result<ObjectMeta> {
        Store::complete_upload_checked(self, bucket, key, upload_id, listed, condition, expected)
    }
}
