//! A bucket's policy: Put/Get/DeleteBucketPolicy and
//! GetBucketPolicyStatus. The store keeps the document as the bytes the
//! client sent; it is read and checked here (`crate::policy`) and
//! enforced by the access check (`crate::access`).
//!
//! - PutBucketPolicy refuses what AWS refuses (400 MalformedPolicy: bad
//!   JSON, no Statement, an Effect other than Allow/Deny, an action not
//!   `s3:`-shaped, a resource outside the bucket, over 20 KiB), a
//!   condition operator this server does not evaluate (501
//!   NotImplemented, never silently ignored), and a public policy where
//!   the bucket's public access block has BlockPublicPolicy (403
//!   AccessDenied).
//! - GetBucketPolicyStatus answers IsPublic: the policy is public (an
//!   Allow to everyone, not limited to a fixed source), or the bucket's
//!   canned ACL grants to everyone or every authenticated user (as
//!   ceph/s3-tests expect; AWS looks at the policy alone) where the
//!   bucket's ACLs count.

use s3s::dto::*;
use s3s::{s3_error, S3Error, S3Request, S3Response, S3Result};
use stow_store::{CannedAcl, MAX_BUCKET_POLICY_BYTES};

use super::{acls_count, blocking, StowS3};
use crate::errors::policy_refusal;
use crate::policy::Policy;

fn no_policy(bucket: &str) -> S3Error {
    s3_error!(
        NoSuchBucketPolicy,
        "The bucket policy does not exist (bucket {bucket:?})"
    )
}

pub(super) async fn put_bucket_policy(
    svc: &StowS3,
    req: S3Request<PutBucketPolicyInput>,
) -> S3Result<S3Response<PutBucketPolicyOutput>> {
    svc.writable()?;
    let input = req.input;
    let (bucket, text) = (input.bucket, input.policy);
    let b = bucket.clone();
    let access = svc.point_read(move |store| store.bucket_access(&b)).await?;
    if text.len() > MAX_BUCKET_POLICY_BYTES {
        return Err(s3_error!(
            MalformedPolicy,
            "Policies must be at most {MAX_BUCKET_POLICY_BYTES} bytes; this one is {}",
            text.len()
        ));
    }
    let policy = Policy::parse(&text, &bucket).map_err(policy_refusal)?;
    if policy.is_public()
        && access
            .public_access_block
            .is_some_and(|b| b.block_public_policy)
    {
        return Err(s3_error!(
            AccessDenied,
            "Access Denied: the bucket's public access block (BlockPublicPolicy) refuses a public policy"
        ));
    }
    let store = svc.store.clone();
    blocking(move || store.set_bucket_policy(&bucket, Some(text))).await?;
    Ok(S3Response::new(PutBucketPolicyOutput::default()))
}

pub(super) async fn get_bucket_policy(
    svc: &StowS3,
    req: S3Request<GetBucketPolicyInput>,
) -> S3Result<S3Response<GetBucketPolicyOutput>> {
    let bucket = req.input.bucket;
    let b = bucket.clone();
    let policy = svc.point_read(move |store| store.bucket_policy(&b)).await?;
    let policy = policy.ok_or_else(|| no_policy(&bucket))?;
    Ok(S3Response::new(GetBucketPolicyOutput {
        policy: Some(policy),
    }))
}

pub(super) async fn delete_bucket_policy(
    svc: &StowS3,
    req: S3Request<DeleteBucketPolicyInput>,
) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
    svc.writable()?;
    let store = svc.store.clone();
    let bucket = req.input.bucket;
    blocking(move || store.set_bucket_policy(&bucket, None)).await?;
    Ok(S3Response::new(DeleteBucketPolicyOutput {}))
}

pub(super) async fn get_bucket_policy_status(
    svc: &StowS3,
    req: S3Request<GetBucketPolicyStatusInput>,
) -> S3Result<S3Response<GetBucketPolicyStatusOutput>> {
    let bucket = req.input.bucket;
    let b = bucket.clone();
    let (access, text) = svc
        .point_read(move |store| Ok((store.bucket_access(&b)?, store.bucket_policy(&b)?)))
        .await?;
    // A stored policy that cannot be read back grants nothing.
    let policy_public = text
        .and_then(|t| Policy::parse(&t, &bucket).ok())
        .is_some_and(|p| p.is_public());
    let acl_public = acls_count(&access)
        && matches!(
            access.acl,
            CannedAcl::PublicRead | CannedAcl::PublicReadWrite | CannedAcl::AuthenticatedRead
        );
    Ok(S3Response::new(GetBucketPolicyStatusOutput {
        policy_status: Some(PolicyStatus {
            is_public: Some(policy_public || acl_public),
        }),
    }))
}
