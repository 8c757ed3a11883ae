//! The S3 operations, mapped onto a `stow_store::ObjectBackend`. No storage logic
//! lives here: each operation converts its input, calls the store on a
//! blocking thread, and converts the result.
//!
//! One module per operation family (`buckets`, `reads`, `writes`,
//! `listing`, `multipart`, `acl`, `ownership`, `policy`, `tagging`, `versions`, `cors`,
//! `lifecycle`, `sse`, `bucket_encryption`), conversions in `convert`; the `S3` impl below
//! only dispatches to them.

mod acl;
mod bucket_encryption;
mod buckets;
mod convert;
mod cors;
pub(crate) mod fuzzing;
mod lifecycle;
mod listing;
mod lock;
mod multipart;
mod ownership;
mod policy;
mod reads;
mod sse;
mod tagging;
mod versions;
mod writes;

use s3s::dto::*;
use s3s::{s3_error, S3Error, S3Request, S3Response, S3Result, S3};
use std::sync::Arc;

use stow_store::{ObjectBackend, StoreError};

use crate::errors::to_s3;
pub(crate) use acl::OWNER;
pub(crate) use ownership::acls_count;

/// The S3 service over one store.
#[derive(Clone)]
pub struct StowS3 {
    pub(crate) store: Arc<dyn ObjectBackend>,
    pub(crate) read_only: bool,
    pub(crate) region: String,
}

impl StowS3 {
    /// A service over `store`; `read_only` refuses every mutation.
    pub fn new(store: Arc<dyn ObjectBackend>, read_only: bool, region: impl Into<String>) -> Self {
        Self {
            store,
            read_only,
            region: region.into(),
        }
    }

    /// Runs a point read (a few database pages: one object's or bucket's
    /// record, an inline body). On a plain store it runs right here, on the
    /// runtime: handing it to another thread and back costs more than the
    /// read. Other backends may hash files in a read, so they go through
    /// [`reading`].
    async fn point_read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn ObjectBackend) -> Result<T, StoreError> + Send + 'static,
    ) -> S3Result<T> {
        if self.store.point_reads_are_cheap() {
            return f(self.store.as_ref()).map_err(to_s3);
        }
        let backend = self.store.clone();
        reading(move || f(backend.as_ref())).await
    }

    /// The source of a copy (see `convert::copy_source`), refused as S3
    /// refuses it when its version ID names a delete marker: 400
    /// InvalidRequest, for a marker has no bytes to copy (a GET of it by
    /// its ID is 405). Versions never change, so the copy that follows
    /// meets the same version.
    async fn copy_source_of(&self, src: &CopySource) -> S3Result<(String, String, Option<String>)> {
        let (bucket, key, version) = convert::copy_source(src)?;
        if let Some(v) = version.clone() {
            let (b, k) = (bucket.clone(), key.clone());
            let marker = self
                .point_read(move |store| {
                    // Any other outcome is the copy's own to answer.
                    Ok(matches!(
                        store.head_object_version(&b, &k, Some(&v)),
                        Err(StoreError::DeleteMarkerVersion { .. })
                    ))
                })
                .await?;
            if marker {
                return Err(s3_error!(
                    InvalidRequest,
                    "The copy source names a delete marker by its version ID; a delete marker has no bytes to copy."
                ));
            }
        }
        Ok((bucket, key, version))
    }

    fn writable(&self) -> S3Result<()> {
        if self.read_only {
            return Err(s3_error!(
                AccessDenied,
                "writing is not permitted by this environment (read-only server)"
            ));
        }
        Ok(())
    }
}

/// Runs a store call on a blocking thread.
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> S3Result<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(to_s3),
        Err(e) => Err(S3Error::internal_error(e)),
    }
}

/// Runs a store call that reads no request body (see [`off_runtime`]).
pub(super) async fn reading<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> S3Result<T> {
    off_runtime(f).await?.map_err(to_s3)
}

/// Runs blocking work (store calls wait on disk and on group commit) without
/// stalling the runtime.
///
/// While the server has few tasks (a handful of connections), the request's
/// own thread runs it (`block_in_place`; the runtime hands that worker's
/// other tasks to another thread): the request pays no handoff to a pool
/// thread and back, a large share of a small request's latency. Under many
/// connections that handing-over happens on every call and costs more than
/// it saves, so the work goes to the blocking pool, as it does on a
/// current-thread runtime (tests).
///
/// Never for work that reads a streaming request body: the connection's
/// task, which this blocks, is the one that delivers the body.
pub(super) async fn off_runtime<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> S3Result<T> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let rt = Handle::current();
    let metrics = rt.metrics();
    if rt.runtime_flavor() == RuntimeFlavor::MultiThread
        && metrics.num_alive_tasks() <= metrics.num_workers()
    {
        return Ok(tokio::task::block_in_place(f));
    }
    tokio::task::spawn_blocking(f)
        .await
        .map_err(S3Error::internal_error)
}

#[async_trait::async_trait]
impl S3 for StowS3 {
    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        buckets::create_bucket(self, req).await
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        buckets::head_bucket(self, req).await
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        buckets::get_bucket_location(self, req).await
    }

    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        buckets::list_buckets(self, req).await
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        buckets::delete_bucket(self, req).await
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        writes::put_object(self, req).await
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        reads::get_object(self, req).await
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        reads::head_object(self, req).await
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        writes::delete_object(self, req).await
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        writes::delete_objects(self, req).await
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        writes::copy_object(self, req).await
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        listing::list_objects(self, req).await
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        listing::list_objects_v2(self, req).await
    }

    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        versions::list_object_versions(self, req).await
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        multipart::create_multipart_upload(self, req).await
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        multipart::upload_part(self, req).await
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        multipart::upload_part_copy(self, req).await
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        multipart::complete_multipart_upload(self, req).await
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        multipart::abort_multipart_upload(self, req).await
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        multipart::list_parts(self, req).await
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        multipart::list_multipart_uploads(self, req).await
    }

    async fn get_object_attributes(
        &self,
        req: S3Request<GetObjectAttributesInput>,
    ) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        reads::get_object_attributes(self, req).await
    }

    async fn get_bucket_acl(
        &self,
        req: S3Request<GetBucketAclInput>,
    ) -> S3Result<S3Response<GetBucketAclOutput>> {
        acl::get_bucket_acl(self, req).await
    }

    async fn get_object_acl(
        &self,
        req: S3Request<GetObjectAclInput>,
    ) -> S3Result<S3Response<GetObjectAclOutput>> {
        acl::get_object_acl(self, req).await
    }

    async fn put_bucket_acl(
        &self,
        req: S3Request<PutBucketAclInput>,
    ) -> S3Result<S3Response<PutBucketAclOutput>> {
        acl::put_bucket_acl(self, req).await
    }

    async fn put_object_acl(
        &self,
        req: S3Request<PutObjectAclInput>,
    ) -> S3Result<S3Response<PutObjectAclOutput>> {
        acl::put_object_acl(self, req).await
    }

    async fn get_bucket_versioning(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        versions::get_bucket_versioning(self, req).await
    }

    async fn put_bucket_versioning(
        &self,
        req: S3Request<PutBucketVersioningInput>,
    ) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        versions::put_bucket_versioning(self, req).await
    }

    async fn put_bucket_cors(
        &self,
        req: S3Request<PutBucketCorsInput>,
    ) -> S3Result<S3Response<PutBucketCorsOutput>> {
        cors::put_bucket_cors(self, req).await
    }

    async fn put_object_lock_configuration(
        &self,
        req: S3Request<PutObjectLockConfigurationInput>,
    ) -> S3Result<S3Response<PutObjectLockConfigurationOutput>> {
        lock::put_object_lock_configuration(self, req).await
    }

    async fn get_object_lock_configuration(
        &self,
        req: S3Request<GetObjectLockConfigurationInput>,
    ) -> S3Result<S3Response<GetObjectLockConfigurationOutput>> {
        lock::get_object_lock_configuration(self, req).await
    }

    async fn put_object_retention(
        &self,
        req: S3Request<PutObjectRetentionInput>,
    ) -> S3Result<S3Response<PutObjectRetentionOutput>> {
        lock::put_object_retention(self, req).await
    }

    async fn get_object_retention(
        &self,
        req: S3Request<GetObjectRetentionInput>,
    ) -> S3Result<S3Response<GetObjectRetentionOutput>> {
        lock::get_object_retention(self, req).await
    }

    async fn put_object_legal_hold(
        &self,
        req: S3Request<PutObjectLegalHoldInput>,
    ) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
        lock::put_object_legal_hold(self, req).await
    }

    async fn get_object_legal_hold(
        &self,
        req: S3Request<GetObjectLegalHoldInput>,
    ) -> S3Result<S3Response<GetObjectLegalHoldOutput>> {
        lock::get_object_legal_hold(self, req).await
    }

    async fn put_bucket_lifecycle_configuration(
        &self,
        req: S3Request<PutBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
        lifecycle::put_bucket_lifecycle_configuration(self, req).await
    }

    async fn get_bucket_lifecycle_configuration(
        &self,
        req: S3Request<GetBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
        lifecycle::get_bucket_lifecycle_configuration(self, req).await
    }

    async fn delete_bucket_lifecycle(
        &self,
        req: S3Request<DeleteBucketLifecycleInput>,
    ) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
        lifecycle::delete_bucket_lifecycle(self, req).await
    }

    async fn get_bucket_cors(
        &self,
        req: S3Request<GetBucketCorsInput>,
    ) -> S3Result<S3Response<GetBucketCorsOutput>> {
        cors::get_bucket_cors(self, req).await
    }

    async fn delete_bucket_cors(
        &self,
        req: S3Request<DeleteBucketCorsInput>,
    ) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
        cors::delete_bucket_cors(self, req).await
    }

    async fn get_object_tagging(
        &self,
        req: S3Request<GetObjectTaggingInput>,
    ) -> S3Result<S3Response<GetObjectTaggingOutput>> {
        tagging::get_object_tagging(self, req).await
    }

    async fn put_object_tagging(
        &self,
        req: S3Request<PutObjectTaggingInput>,
    ) -> S3Result<S3Response<PutObjectTaggingOutput>> {
        tagging::put_object_tagging(self, req).await
    }

    async fn delete_object_tagging(
        &self,
        req: S3Request<DeleteObjectTaggingInput>,
    ) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
        tagging::delete_object_tagging(self, req).await
    }

    async fn get_bucket_tagging(
        &self,
        req: S3Request<GetBucketTaggingInput>,
    ) -> S3Result<S3Response<GetBucketTaggingOutput>> {
        tagging::get_bucket_tagging(self, req).await
    }

    async fn put_bucket_tagging(
        &self,
        req: S3Request<PutBucketTaggingInput>,
    ) -> S3Result<S3Response<PutBucketTaggingOutput>> {
        tagging::put_bucket_tagging(self, req).await
    }

    async fn delete_bucket_tagging(
        &self,
        req: S3Request<DeleteBucketTaggingInput>,
    ) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
        tagging::delete_bucket_tagging(self, req).await
    }

    async fn get_bucket_ownership_controls(
        &self,
        req: S3Request<GetBucketOwnershipControlsInput>,
    ) -> S3Result<S3Response<GetBucketOwnershipControlsOutput>> {
        ownership::get_bucket_ownership_controls(self, req).await
    }

    async fn put_bucket_policy(
        &self,
        req: S3Request<PutBucketPolicyInput>,
    ) -> S3Result<S3Response<PutBucketPolicyOutput>> {
        policy::put_bucket_policy(self, req).await
    }

    async fn get_bucket_policy(
        &self,
        req: S3Request<GetBucketPolicyInput>,
    ) -> S3Result<S3Response<GetBucketPolicyOutput>> {
        policy::get_bucket_policy(self, req).await
    }

    async fn delete_bucket_policy(
        &self,
        req: S3Request<DeleteBucketPolicyInput>,
    ) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
        policy::delete_bucket_policy(self, req).await
    }

    async fn get_bucket_policy_status(
        &self,
        req: S3Request<GetBucketPolicyStatusInput>,
    ) -> S3Result<S3Response<GetBucketPolicyStatusOutput>> {
        policy::get_bucket_policy_status(self, req).await
    }

    async fn put_bucket_encryption(
        &self,
        req: S3Request<PutBucketEncryptionInput>,
    ) -> S3Result<S3Response<PutBucketEncryptionOutput>> {
        bucket_encryption::put_bucket_encryption(self, req).await
    }

    async fn get_bucket_encryption(
        &self,
        req: S3Request<GetBucketEncryptionInput>,
    ) -> S3Result<S3Response<GetBucketEncryptionOutput>> {
        bucket_encryption::get_bucket_encryption(self, req).await
    }

    async fn delete_bucket_encryption(
        &self,
        req: S3Request<DeleteBucketEncryptionInput>,
    ) -> S3Result<S3Response<DeleteBucketEncryptionOutput>> {
        bucket_encryption::delete_bucket_encryption(self, req).await
    }

    async fn put_bucket_ownership_controls(
        &self,
        req: S3Request<PutBucketOwnershipControlsInput>,
    ) -> S3Result<S3Response<PutBucketOwnershipControlsOutput>> {
        ownership::put_bucket_ownership_controls(self, req).await
    }

    async fn delete_bucket_ownership_controls(
        &self,
        req: S3Request<DeleteBucketOwnershipControlsInput>,
    ) -> S3Result<S3Response<DeleteBucketOwnershipControlsOutput>> {
        ownership::delete_bucket_ownership_controls(self, req).await
    }

    async fn get_public_access_block(
        &self,
        req: S3Request<GetPublicAccessBlockInput>,
    ) -> S3Result<S3Response<GetPublicAccessBlockOutput>> {
        ownership::get_public_access_block(self, req).await
    }

    async fn put_public_access_block(
        &self,
        req: S3Request<PutPublicAccessBlockInput>,
    ) -> S3Result<S3Response<PutPublicAccessBlockOutput>> {
        ownership::put_public_access_block(self, req).await
    }

    async fn delete_public_access_block(
        &self,
        req: S3Request<DeletePublicAccessBlockInput>,
    ) -> S3Result<S3Response<DeletePublicAccessBlockOutput>> {
        ownership::delete_public_access_block(self, req).await
    }
}
