//! Object writes: PutObject, DeleteObject(s), CopyObject.

use s3s::dto::*;
use s3s::{s3_error, S3Error, S3Request, S3Response, S3Result};
use stow_store as store;
use stow_store::ChecksumAlgorithm as Alg;

use super::convert::*;
use super::{blocking, StowS3};
use crate::body::{request_body, RequestBody};
use crate::errors::to_s3;

pub(super) async fn put_object(
    svc: &StowS3,
    req: S3Request<PutObjectInput>,
) -> S3Result<S3Response<PutObjectOutput>> {
    svc.writable()?;
    let trailer = trailer_alg(&req.headers);
    let trailing_checksums = trailing(req.trailing_headers.clone());
    let mut input = req.input;
    // A browser POST form's checksum fields (post/).
    let form = req.extensions.get::<crate::post::FormUpload>();
    if let Some(form) = form {
        form.apply(&mut input)?;
    }
    let form = form.is_some();
    let supplied = supplied_checksums!(input);
    let declared = input.checksum_algorithm.as_ref().map(alg_of).transpose()?;
    let lock = super::lock::lock_of(
        input.object_lock_mode.as_ref(),
        input.object_lock_retain_until_date.as_ref(),
        input.object_lock_legal_hold_status.as_ref(),
    )?;
    let mut opts = store::PutOptions {
        props: props_of!(input, &req.headers),
        checksum_algorithm: declared.or(trailer),
        expected_checksums: supplied,
        content_md5: input.content_md5,
        trailing_checksums: trailer.and(trailing_checksums),
        condition: write_condition(input.if_match, input.if_none_match)?,
        encryption: None,
    };
    opts.props.lock = lock;
    super::ownership::check_acl(svc, &input.bucket, opts.props.acl, input.acl.as_ref()).await?;
    opts.encryption = super::sse::customer_key(
        svc.store.as_ref(),
        input.server_side_encryption.as_ref(),
        input.ssekms_key_id.as_deref(),
        input.sse_customer_algorithm.as_deref(),
        input.sse_customer_key.as_deref(),
        input.sse_customer_key_md5.as_deref(),
    )?;
    opts.props.sse_s3 = super::bucket_encryption::with_default(
        svc,
        &input.bucket,
        input.server_side_encryption.as_ref(),
        input.ssekms_key_id.as_deref(),
        opts.encryption.is_some(),
    )
    .await?;
    let echo = super::sse::Echo::of(opts.encryption.as_ref());
    let body = request_body(input.body, input.content_length).await;
    let (bucket, key) = (input.bucket, input.key);
    let meta = match body {
        // A small body of a plain store commits without a blocking
        // thread: the request waits for the store's commit thread. (A body
        // to seal with a customer key is encrypted on a blocking thread.)
        RequestBody::Complete(bytes)
            if bytes.len() <= svc.store.detached_put_max() && opts.encryption.is_none() =>
        {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let done = Box::new(move |r| {
                let _ = tx.send(r);
            });
            svc.store
                .put_object_detached(&bucket, &key, bytes, opts, done);
            rx.await.map_err(S3Error::internal_error)?.map_err(to_s3)?
        }
        body => {
            let mut reader = body.into_reader();
            let store = svc.store.clone();
            blocking(move || store.put_object(&bucket, &key, &mut reader, opts)).await?
        }
    };
    let c = ChecksumFields::of(meta.checksum.as_ref());
    let mut resp = S3Response::new(PutObjectOutput {
        e_tag: Some(etag(&meta.etag)),
        checksum_crc32: c.crc32,
        checksum_crc32c: c.crc32c,
        checksum_crc64nvme: c.crc64nvme,
        checksum_sha1: c.sha1,
        checksum_sha256: c.sha256,
        checksum_type: c.kind,
        version_id: written_version(&meta),
        server_side_encryption: super::sse::server_managed_echo(meta.props.sse_s3),
        sse_customer_algorithm: echo.algorithm,
        sse_customer_key_md5: echo.key_md5,
        expiration: super::lifecycle::expiration_of(svc.store.as_ref(), &meta),
        ..Default::default()
    });
    // `s3s` writes a POST's answer without the output's headers; S3 names
    // the ETag there too (a browser page reads it).
    if form {
        if let Ok(v) = http::HeaderValue::from_str(&meta.etag) {
            resp.headers.insert(http::header::ETAG, v);
        }
    }
    Ok(resp)
}

pub(super) async fn delete_object(
    svc: &StowS3,
    req: S3Request<DeleteObjectInput>,
) -> S3Result<S3Response<DeleteObjectOutput>> {
    svc.writable()?;
    let store = svc.store.clone();
    let input = req.input;
    let (bucket, key, version) = (input.bucket, input.key, input.version_id);
    let bypass = input.bypass_governance_retention.unwrap_or(false);
    let deleted = blocking(move || {
        store.delete_object_version_bypassing(&bucket, &key, version.as_deref(), bypass)
    })
    .await?;
    Ok(S3Response::with_status(
        DeleteObjectOutput {
            delete_marker: deleted.delete_marker.then_some(true),
            version_id: deleted.version_id,
            ..Default::default()
        },
        http::StatusCode::NO_CONTENT,
    ))
}

pub(super) async fn delete_objects(
    svc: &StowS3,
    req: S3Request<DeleteObjectsInput>,
) -> S3Result<S3Response<DeleteObjectsOutput>> {
    svc.writable()?;
    let input = req.input;
    let quiet = input.delete.quiet.unwrap_or(false);
    if input.delete.objects.len() > 1000 {
        return Err(s3_error!(
            MalformedXML,
            "at most 1000 keys may be deleted at once"
        ));
    }
    let store = svc.store.clone();
    let bucket = input.bucket;
    let bypass = input.bypass_governance_retention.unwrap_or(false);
    let objects = input.delete.objects;
    let (deleted, errors) = blocking(move || {
        store.head_bucket(&bucket)?;
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for o in objects {
            // A locked version is reported per key (AccessDenied).
            let version = o.version_id.as_deref();
            match store.delete_object_version_bypassing(&bucket, &o.key, version, bypass) {
                Ok(d) => deleted.push(DeletedObject {
                    key: Some(o.key),
                    // The version asked for, echoed; a marker made or
                    // removed is named as such.
                    delete_marker: d.delete_marker.then_some(true),
                    delete_marker_version_id: d.version_id.clone().filter(|_| d.delete_marker),
                    version_id: o.version_id,
                }),
                Err(e) => {
                    let s3 = to_s3(e);
                    errors.push(Error {
                        code: Some(s3.code().as_str().to_string()),
                        key: Some(o.key),
                        message: s3.message().map(String::from),
                        version_id: o.version_id,
                    })
                }
            }
        }
        Ok((deleted, errors))
    })
    .await?;
    Ok(S3Response::new(DeleteObjectsOutput {
        deleted: (!quiet).then_some(deleted),
        errors: Some(errors),
        ..Default::default()
    }))
}

/// Whether a copy's `x-amz-{what}-directive` says REPLACE (COPY, the
/// default, keeps the source's).
fn replaces(directive: Option<&str>, what: &str) -> S3Result<bool> {
    match directive.map(str::to_ascii_uppercase).as_deref() {
        None | Some("COPY") => Ok(false),
        Some("REPLACE") => Ok(true),
        Some(_) => Err(S3Error::with_message(
            s3s::S3ErrorCode::InvalidArgument,
            format!("Unknown {what} directive"),
        )),
    }
}

pub(super) async fn copy_object(
    svc: &StowS3,
    req: S3Request<CopyObjectInput>,
) -> S3Result<S3Response<CopyObjectOutput>> {
    svc.writable()?;
    let condition = header_condition(&req.headers)?;
    let input = req.input;
    // The copy's own ACL (never the source's), whatever the directive.
    let acl = super::acl::canned(input.acl.as_ref().map(|a| a.as_str()))?;
    super::ownership::check_acl(svc, &input.bucket, acl, input.acl.as_ref()).await?;
    // And its own lock: the headers, else the bucket's default retention.
    let lock = super::lock::lock_of(
        input.object_lock_mode.as_ref(),
        input.object_lock_retain_until_date.as_ref(),
        input.object_lock_legal_hold_status.as_ref(),
    )?;
    let (src_bucket, src_key, src_version) = svc.copy_source_of(&input.copy_source).await?;
    let (encryption, source_key) = super::sse::copy_keys(svc.store.as_ref(), &input)?;
    let echo = super::sse::Echo::of(encryption.as_ref());
    let replace = replaces(
        input.metadata_directive.as_ref().map(|d| d.as_str()),
        "metadata",
    )?;
    let replace_tags = replaces(
        input.tagging_directive.as_ref().map(|d| d.as_str()),
        "tagging",
    )?;
    // The copy's SSE-S3 is what its request asks for, else the bucket's
    // default (never the source's, as S3 documents for CopyObject).
    let sse_s3 = super::bucket_encryption::with_default(
        svc,
        &input.bucket,
        input.server_side_encryption.as_ref(),
        input.ssekms_key_id.as_deref(),
        encryption.is_some(),
    )
    .await?;
    // A copy onto itself that sets its encryption is a change; a bucket
    // default set with PutBucketEncryption counts, as S3 takes such a copy
    // (the way to encrypt existing objects after setting one).
    let rekeyed = encryption.is_some() || source_key.is_some() || sse_s3;
    if !replace
        && !replace_tags
        && !rekeyed
        && src_bucket == input.bucket
        && src_key == input.key
        && src_version.is_none()
    {
        return Err(s3_error!(
            InvalidRequest,
            "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes."
        ));
    }
    let replace_props = if replace || replace_tags {
        // What one directive does not replace comes from the source.
        let source = {
            let (b, k, v) = (src_bucket.clone(), src_key.clone(), src_version.clone());
            svc.point_read(move |store| store.head_object_version(&b, &k, v.as_deref()))
                .await?
        };
        let tags = if replace_tags {
            super::tagging::tags_of_header(input.tagging.as_deref())?
        } else {
            source.props.tags.clone()
        };
        let mut props = if replace {
            props_of!(input, &req.headers)
        } else {
            source.props
        };
        props.tags = tags;
        Some(props)
    } else {
        None
    };
    let opts = store::CopyOptions {
        replace_props,
        condition,
        source: source_conditions(
            input.copy_source_if_match,
            input.copy_source_if_none_match,
            input.copy_source_if_modified_since,
            input.copy_source_if_unmodified_since,
        ),
        acl,
        source_version: src_version.clone(),
        lock,
        sse_s3,
        source_key,
        encryption,
    };
    let store = svc.store.clone();
    let (bucket, key) = (input.bucket, input.key);
    let meta =
        blocking(move || store.copy_object(&src_bucket, &src_key, &bucket, &key, opts)).await?;
    let c = ChecksumFields::of(meta.checksum.as_ref());
    let copy_source_version_id = src_version;
    Ok(S3Response::new(CopyObjectOutput {
        copy_object_result: Some(CopyObjectResult {
            e_tag: Some(etag(&meta.etag)),
            last_modified: Some(timestamp(meta.last_modified_ns)),
            checksum_crc32: c.crc32,
            checksum_crc32c: c.crc32c,
            checksum_crc64nvme: c.crc64nvme,
            checksum_sha1: c.sha1,
            checksum_sha256: c.sha256,
            checksum_type: c.kind,
        }),
        version_id: written_version(&meta),
        copy_source_version_id,
        expiration: super::lifecycle::expiration_of(svc.store.as_ref(), &meta),
        server_side_encryption: super::sse::server_managed_echo(meta.props.sse_s3),
        sse_customer_algorithm: echo.algorithm,
        sse_customer_key_md5: echo.key_md5,
        ..Default::default()
    }))
}
