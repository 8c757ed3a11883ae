//! Bucket operations: create, head, location, list, delete.

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::convert::*;
use super::{blocking, StowS3};

pub(super) async fn create_bucket(
    svc: &StowS3,
    req: S3Request<CreateBucketInput>,
) -> S3Result<S3Response<CreateBucketOutput>> {
    svc.writable()?;
    let store = svc.store.clone();
    let bucket = req.input.bucket.clone();
    blocking(move || store.create_bucket(&bucket)).await?;
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

pub(super) async fn list_buckets(
    svc: &StowS3,
    _req: S3Request<ListBucketsInput>,
) -> S3Result<S3Response<ListBucketsOutput>> {
    let store = svc.store.clone();
    let buckets = blocking(move || store.list_buckets()).await?;
    Ok(S3Response::new(ListBucketsOutput {
        buckets: Some(
            buckets
                .into_iter()
                .map(|b| Bucket {
                    name: Some(b.name),
                    creation_date: Some(timestamp(b.created_ns)),
                    bucket_region: Some(svc.region.clone()),
                })
                .collect(),
        ),
        owner: Some(Owner {
            display_name: Some("stow".into()),
            id: Some("stow".into()),
        }),
        ..Default::default()
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
