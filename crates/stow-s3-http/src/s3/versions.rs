//! Versioning: Put/GetBucketVersioning and ListObjectVersions. Reads,
//! deletes and copies by `versionId` are in `reads` and `writes`.

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};
use stow_store as store;
use stow_store::Versioning;

use super::convert::*;
use super::{blocking, reading, StowS3};

pub(super) async fn put_bucket_versioning(
    svc: &StowS3,
    req: S3Request<PutBucketVersioningInput>,
) -> S3Result<S3Response<PutBucketVersioningOutput>> {
    svc.writable()?;
    let input = req.input;
    let config = input.versioning_configuration;
    if config
        .mfa_delete
        .as_ref()
        .is_some_and(|m| m.as_str() == MFADelete::ENABLED)
    {
        return Err(s3_error!(
            NotImplemented,
            "MFA delete is not supported: there is no MFA device to check"
        ));
    }
    let state = match config.status.as_ref().map(|s| s.as_str()) {
        Some(BucketVersioningStatus::ENABLED) => Versioning::Enabled,
        Some(BucketVersioningStatus::SUSPENDED) => Versioning::Suspended,
        // AWS answers a configuration without a valid Status this way.
        _ => {
            return Err(s3_error!(
                MalformedXML,
                "The XML you provided was not well-formed or did not validate against our published schema"
            ))
        }
    };
    let store = svc.store.clone();
    let bucket = input.bucket;
    blocking(move || store.set_bucket_versioning(&bucket, state)).await?;
    Ok(S3Response::new(PutBucketVersioningOutput {}))
}

pub(super) async fn get_bucket_versioning(
    svc: &StowS3,
    req: S3Request<GetBucketVersioningInput>,
) -> S3Result<S3Response<GetBucketVersioningOutput>> {
    let bucket = req.input.bucket;
    let state = svc
        .point_read(move |store| store.bucket_versioning(&bucket))
        .await?;
    // Never enabled: no Status element at all, as on AWS.
    let status = match state {
        Versioning::Unversioned => None,
        Versioning::Enabled => Some(BucketVersioningStatus::ENABLED),
        Versioning::Suspended => Some(BucketVersioningStatus::SUSPENDED),
    };
    Ok(S3Response::new(GetBucketVersioningOutput {
        status: status.map(BucketVersioningStatus::from_static),
        ..Default::default()
    }))
}

pub(super) async fn list_object_versions(
    svc: &StowS3,
    req: S3Request<ListObjectVersionsInput>,
) -> S3Result<S3Response<ListObjectVersionsOutput>> {
    let input = req.input;
    let url = wants_url(&input.encoding_type)?;
    let max = max_count(input.max_keys, "max-keys")?;
    let key_marker = input.key_marker.clone().filter(|m| !m.is_empty());
    let version_marker = input.version_id_marker.clone().filter(|v| !v.is_empty());
    if version_marker.is_some() && key_marker.is_none() {
        return Err(s3_error!(
            InvalidArgument,
            "A version-id marker cannot be specified without a key marker."
        ));
    }
    let query = store::VersionQuery {
        prefix: input.prefix.clone().unwrap_or_default(),
        delimiter: input.delimiter.clone().filter(|d| !d.is_empty()),
        key_marker,
        version_id_marker: version_marker,
        max_keys: max,
    };
    let store = svc.store.clone();
    let bucket = input.bucket.clone();
    let page = reading(move || store.list_object_versions(&bucket, &query)).await?;
    let enc = |s: String| if url { url_encode(&s) } else { s };
    let truncated = page.is_truncated;
    let owner = Some(super::acl::owner());
    let mut versions = Vec::new();
    let mut markers = Vec::new();
    // The store's order (by key, newest first), one letter per entry, for
    // the layer that writes the two lists as one (patches.rs).
    let mut order = String::with_capacity(page.versions.len());
    for v in page.versions {
        order.push(if v.delete_marker { 'M' } else { 'V' });
        if v.delete_marker {
            markers.push(DeleteMarkerEntry {
                key: Some(enc(v.key)),
                version_id: Some(v.version_id),
                is_latest: Some(v.is_latest),
                last_modified: Some(timestamp(v.last_modified_ns)),
                owner: owner.clone(),
            });
        } else {
            versions.push(ObjectVersion {
                key: Some(enc(v.key)),
                size: Some(v.size as i64),
                e_tag: Some(etag(&v.etag)),
                last_modified: Some(timestamp(v.last_modified_ns)),
                is_latest: Some(v.is_latest),
                version_id: Some(v.version_id),
                owner: owner.clone(),
                storage_class: Some(ObjectVersionStorageClass::from_static(
                    ObjectVersionStorageClass::STANDARD,
                )),
                ..Default::default()
            });
        }
    }
    let interleaved = !versions.is_empty() && !markers.is_empty();
    let mut resp = S3Response::new(ListObjectVersionsOutput {
        name: Some(input.bucket),
        prefix: Some(enc(input.prefix.unwrap_or_default())),
        key_marker: Some(enc(input.key_marker.unwrap_or_default())),
        version_id_marker: Some(input.version_id_marker.unwrap_or_default()),
        max_keys: Some(max as i32),
        is_truncated: Some(truncated),
        next_key_marker: page.next_key_marker.filter(|_| truncated).map(enc),
        next_version_id_marker: page.next_version_id_marker.filter(|_| truncated),
        // An empty delimiter is no delimiter, and is not echoed.
        delimiter: input.delimiter.filter(|d| !d.is_empty()).map(enc),
        encoding_type: input.encoding_type,
        versions: Some(versions),
        delete_markers: Some(markers),
        common_prefixes: Some(common_prefixes(page.common_prefixes, url)),
        ..Default::default()
    });
    if interleaved {
        if let Ok(v) = http::HeaderValue::from_str(&order) {
            resp.headers.insert(crate::patches::VERSION_ORDER_HEADER, v);
        }
    }
    Ok(resp)
}
