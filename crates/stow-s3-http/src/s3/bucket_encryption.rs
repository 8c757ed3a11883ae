//! A bucket's default encryption: Put/Get/DeleteBucketEncryption, and the
//! default's part in a write.
//!
//! - Only the server-managed kind (SSE-S3, `AES256`) is kept. SSE-KMS
//!   (`aws:kms`, `aws:kms:dsse`) needs a key service this server does not
//!   have: 501 NotImplemented, as for a write that asks for it, never
//!   stored and ignored. As with SSE-S3 on a write, the bytes are not
//!   encrypted at rest (SECURITY.md); the setting is kept and answered.
//! - A configuration holds exactly one rule with
//!   `ApplyServerSideEncryptionByDefault` (400 MalformedXML otherwise); a
//!   `KMSMasterKeyID` beside `AES256` is 400 InvalidArgument, as AWS
//!   answers.
//! - A bucket without one answers GetBucketEncryption with 404
//!   ServerSideEncryptionConfigurationNotFoundError, as S3 did before it
//!   encrypted every bucket by default (and as ceph/s3-tests expect).
//! - A write that names no encryption of its own (no `AES256`, no
//!   customer key) to a bucket with a default is SSE-S3 ([`with_default`]).

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};
use stow_store::DefaultEncryption;

use super::{blocking, StowS3};

pub(super) async fn put_bucket_encryption(
    svc: &StowS3,
    req: S3Request<PutBucketEncryptionInput>,
) -> S3Result<S3Response<PutBucketEncryptionOutput>> {
    svc.writable()?;
    let input = req.input;
    let setting = default_of(&input.server_side_encryption_configuration)?;
    let store = svc.store.clone();
    let bucket = input.bucket;
    blocking(move || store.set_bucket_encryption(&bucket, Some(setting))).await?;
    Ok(S3Response::new(PutBucketEncryptionOutput::default()))
}

/// The setting a configuration asks for, or S3's refusal of it.
fn default_of(config: &ServerSideEncryptionConfiguration) -> S3Result<DefaultEncryption> {
    let [rule] = config.rules.as_slice() else {
        return Err(s3_error!(
            MalformedXML,
            "A server-side encryption configuration holds exactly one rule ({} given)",
            config.rules.len()
        ));
    };
    let Some(by_default) = &rule.apply_server_side_encryption_by_default else {
        return Err(s3_error!(
            MalformedXML,
            "The rule must name ApplyServerSideEncryptionByDefault"
        ));
    };
    match by_default.sse_algorithm.as_str() {
        ServerSideEncryption::AES256 => {}
        ServerSideEncryption::AWS_KMS | ServerSideEncryption::AWS_KMS_DSSE => {
            return Err(s3_error!(
                NotImplemented,
                "SSE-KMS is not offered: there is no KMS here; use AES256 (SSE-S3) as the bucket's default"
            ))
        }
        other => {
            return Err(s3_error!(
                MalformedXML,
                "SSEAlgorithm {other:?} is not one of AES256, aws:kms, aws:kms:dsse"
            ))
        }
    }
    if by_default.kms_master_key_id.is_some() {
        return Err(s3_error!(
            InvalidArgument,
            "a KMSMasterKeyID is not applicable if the default sse algorithm is not aws:kms or aws:kms:dsse"
        ));
    }
    Ok(DefaultEncryption {
        bucket_key_enabled: rule.bucket_key_enabled.unwrap_or(false),
    })
}

pub(super) async fn get_bucket_encryption(
    svc: &StowS3,
    req: S3Request<GetBucketEncryptionInput>,
) -> S3Result<S3Response<GetBucketEncryptionOutput>> {
    let bucket = req.input.bucket;
    let b = bucket.clone();
    let setting = svc
        .point_read(move |store| store.bucket_encryption(&b))
        .await?;
    let Some(setting) = setting else {
        // 404 as S3 answers (`s3s` gives this code 400).
        let mut e = s3_error!(
            ServerSideEncryptionConfigurationNotFoundError,
            "The server side encryption configuration was not found (bucket {bucket:?})"
        );
        e.set_status_code(http::StatusCode::NOT_FOUND);
        return Err(e);
    };
    let rule = ServerSideEncryptionRule {
        apply_server_side_encryption_by_default: Some(ServerSideEncryptionByDefault {
            kms_master_key_id: None,
            sse_algorithm: ServerSideEncryption::from_static(ServerSideEncryption::AES256),
        }),
        bucket_key_enabled: Some(setting.bucket_key_enabled),
    };
    Ok(S3Response::new(GetBucketEncryptionOutput {
        server_side_encryption_configuration: Some(ServerSideEncryptionConfiguration {
            rules: vec![rule],
        }),
    }))
}

pub(super) async fn delete_bucket_encryption(
    svc: &StowS3,
    req: S3Request<DeleteBucketEncryptionInput>,
) -> S3Result<S3Response<DeleteBucketEncryptionOutput>> {
    svc.writable()?;
    let store = svc.store.clone();
    let bucket = req.input.bucket;
    blocking(move || store.set_bucket_encryption(&bucket, None)).await?;
    Ok(S3Response::new(DeleteBucketEncryptionOutput::default()))
}

/// Whether a write to `bucket` is SSE-S3: what its
/// `x-amz-server-side-encryption` asks for ([`super::sse::server_managed`],
/// which refuses SSE-KMS), else, where it names no encryption of its own
/// (neither `AES256` nor a customer key), whether the bucket has a default.
pub(super) async fn with_default(
    svc: &StowS3,
    bucket: &str,
    sse: Option<&ServerSideEncryption>,
    kms_key: Option<&str>,
    customer_key: bool,
) -> S3Result<bool> {
    let asked = super::sse::server_managed(sse, kms_key)?;
    if asked || customer_key {
        return Ok(asked);
    }
    let b = bucket.to_string();
    let setting = svc
        .point_read(move |store| store.bucket_encryption(&b))
        .await?;
    Ok(setting.is_some())
}
