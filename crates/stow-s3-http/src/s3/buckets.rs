//! Bucket operations: create, head, location, list, delete.

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

use super::convert::*;
use super::{blocking, StowS3};

pub(super) async fn create_bucket(
    svc: &StowS3,
    req: S3Request<CreateBucketInput>,
) -> S3Result<S3Response<CreateBucketOutput>> {
    svc.writable()?;
    let acl = super::acl::canned(req.input.acl.as_ref().map(|a| a.as_str()))?;
    let ownership = req
        .input
        .object_ownership
        .as_ref()
        .map(|o| super::ownership::ownership_of(o, true))
        .transpose()?;
    super::ownership::check_create(svc, &req.input.bucket, acl, ownership).await?;
    let store = svc.store.clone();
    let bucket = req.input.bucket.clone();
    let locked = req.input.object_lock_enabled_for_bucket == Some(true);
    blocking(move || {
        if locked {
            store.create_bucket_with_lock(&bucket, acl)?;
        } else {
            store.create_bucket_with_acl(&bucket, acl)?;
        }
        // The x-amz-object-ownership header, kept as
        // PutBucketOwnershipControls keeps it.
        if ownership.is_some() {
            store.set_bucket_ownership(&bucket, ownership)?;
        }
        Ok(())
    })
    .await?;
    Ok(S3Response::new(CreateBucketOutput {
        location: Some(format!("/{}", req.input.bucket)),
    }))
}

pub(super) async fn head_bucket(
    svc: &StowS3,
    req: S3Request<HeadBucketInput>,
) -> S3Result<S3Response<HeadBucketOutput>> {
    let bucket = req.input.bucket;
    svc.point_read(move |store| store.head_bucket(&bucket))
        .await?;
    Ok(S3Response::new(HeadBucketOutput {
        bucket_region: Some(svc.region.clone()),
        ..Default::default()
    }))
}

pub(super) async fn get_bucket_location(
    svc: &StowS3,
    req: S3Request<GetBucketLocationInput>,
) -> S3Result<S3Response<GetBucketLocationOutput>> {
    let bucket = req.input.bucket;
    svc.point_read(move |store| store.head_bucket(&bucket))
        .await?;
    let location =
        (svc.region != "us-east-1").then(|| BucketLocationConstraint::from(svc.region.clone()));
    Ok(S3Response::new(GetBucketLocationOutput {
        location_constraint: location,
    }))
}

/// Most buckets one ListBuckets page holds (AWS's bound).
const MAX_BUCKETS_PAGE: usize = 10_000;

pub(super) async fn list_buckets(
    svc: &StowS3,
    req: S3Request<ListBucketsInput>,
) -> S3Result<S3Response<ListBucketsOutput>> {
    let input = req.input;
    let limit = match input.max_buckets {
        None => MAX_BUCKETS_PAGE,
        Some(n) if (1..=MAX_BUCKETS_PAGE as i32).contains(&n) => n as usize,
        Some(_) => {
            return Err(s3_error!(
                InvalidArgument,
                "max-buckets must be from 1 to 10000"
            ))
        }
    };
    let after = input
        .continuation_token
        .as_deref()
        .filter(|t| !t.is_empty())
        .map(decode_token)
        .transpose()?;
    let prefix = input.prefix.clone().unwrap_or_default();
    let store = svc.store.clone();
    let mut buckets = blocking(move || store.list_buckets()).await?;
    buckets.sort_by(|a, b| a.name.cmp(&b.name));
    let mut page: Vec<_> = buckets
        .into_iter()
        .filter(|b| b.name.starts_with(&prefix))
        .filter(|b| after.as_deref().is_none_or(|a| b.name.as_str() > a))
        .take(limit + 1)
        .collect();
    let more = page.len() > limit;
    page.truncate(limit);
    let continuation_token = more
        .then(|| page.last().map(|b| encode_token(&b.name)))
        .flatten();
    Ok(S3Response::new(ListBucketsOutput {
        buckets: Some(
            page.into_iter()
                .map(|b| Bucket {
                    name: Some(b.name),
                    creation_date: Some(timestamp(b.created_ns)),
                    bucket_region: Some(svc.region.clone()),
                })
                .collect(),
        ),
        owner: Some(Owner {
            display_name: Some(super::OWNER.into()),
            id: Some(super::OWNER.into()),
        }),
        continuation_token,
        prefix: input.prefix,
    }))
}

pub(super) async fn delete_bucket(
    svc: &StowS3,
    req: S3Request<DeleteBucketInput>,
) -> S3Result<S3Response<DeleteBucketOutput>> {
    svc.writable()?;
    let store = svc.store.clone();
    blocking(move || store.delete_bucket(&req.input.bucket)).await?;
    Ok(S3Response::new(DeleteBucketOutput {}))
}
