//! Put/Get/DeleteBucketCors: a bucket's CORS rules, converted to and from
//! the store's [`CorsRule`] (which validates them as S3 does). Which rule
//! answers a browser is `crate::bucket_cors`'s business.

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};
use stow_store::CorsRule;

use super::{blocking, StowS3};

fn to_store(rule: CORSRule) -> CorsRule {
    CorsRule {
        id: rule.id,
        allowed_methods: rule.allowed_methods,
        allowed_origins: rule.allowed_origins,
        allowed_headers: rule.allowed_headers.unwrap_or_default(),
        expose_headers: rule.expose_headers.unwrap_or_default(),
        max_age_seconds: rule.max_age_seconds,
    }
}

fn from_store(rule: CorsRule) -> CORSRule {
    CORSRule {
        id: rule.id,
        allowed_methods: rule.allowed_methods,
        allowed_origins: rule.allowed_origins,
        allowed_headers: (!rule.allowed_headers.is_empty()).then_some(rule.allowed_headers),
        expose_headers: (!rule.expose_headers.is_empty()).then_some(rule.expose_headers),
        max_age_seconds: rule.max_age_seconds,
    }
}

pub(super) async fn put_bucket_cors(
    svc: &StowS3,
    req: S3Request<PutBucketCorsInput>,
) -> S3Result<S3Response<PutBucketCorsOutput>> {
    svc.writable()?;
    let input = req.input;
    let rules: Vec<CorsRule> = input
        .cors_configuration
        .cors_rules
        .into_iter()
        .map(to_store)
        .collect();
    let store = svc.store.clone();
    let bucket = input.bucket;
    blocking(move || store.set_bucket_cors(&bucket, Some(rules))).await?;
    Ok(S3Response::new(PutBucketCorsOutput {}))
}

pub(super) async fn get_bucket_cors(
    svc: &StowS3,
    req: S3Request<GetBucketCorsInput>,
) -> S3Result<S3Response<GetBucketCorsOutput>> {
    let bucket = req.input.bucket;
    let rules = svc
        .point_read(move |store| store.bucket_cors(&bucket))
        .await?;
    let Some(rules) = rules else {
        return Err(s3_error!(
            NoSuchCORSConfiguration,
            "The CORS configuration does not exist"
        ));
    };
    Ok(S3Response::new(GetBucketCorsOutput {
        cors_rules: Some(rules.into_iter().map(from_store).collect()),
    }))
}

pub(super) async fn delete_bucket_cors(
    svc: &StowS3,
    req: S3Request<DeleteBucketCorsInput>,
) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
    svc.writable()?;
    let store = svc.store.clone();
    let bucket = req.input.bucket;
    blocking(move || store.set_bucket_cors(&bucket, None)).await?;
    Ok(S3Response::new(DeleteBucketCorsOutput {}))
}
