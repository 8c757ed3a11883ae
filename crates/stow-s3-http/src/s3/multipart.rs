//! Multipart uploads: create, parts (and part copies), complete, abort, list.

use s3s::dto::*;
use s3s::{s3_error, S3Error, S3Request, S3Response, S3Result};
use stow_store as store;
use stow_store::{ByteRange, ChecksumAlgorithm as Alg, ObjectMeta, StoreError};

use super::convert::*;
use super::{blocking, StowS3};
use crate::body::request_reader;
use crate::errors::to_s3;

pub(super) async fn create_multipart_upload(
    svc: &StowS3,
    req: S3Request<CreateMultipartUploadInput>,
) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
    svc.writable()?;
    let input = req.input;
    let alg = input.checksum_algorithm.as_ref().map(alg_of).transpose()?;
    let kind = match input
        .checksum_type
        .as_ref()
        .map(|t| t.as_str().to_ascii_uppercase())
    {
        None => None,
        Some(t) if t == "COMPOSITE" => Some(store::ChecksumType::Composite),
        Some(t) if t == "FULL_OBJECT" => Some(store::ChecksumType::FullObject),
        Some(_) => return Err(s3_error!(InvalidArgument, "unknown checksum type")),
    };
    if kind == Some(store::ChecksumType::Composite) && alg == Some(Alg::Crc64nvme) {
        return Err(s3_error!(
            InvalidRequest,
            "CRC64NVME supports only the FULL_OBJECT checksum type"
        ));
    }
    let kind = kind.or(match alg {
        Some(Alg::Crc64nvme) => Some(store::ChecksumType::FullObject),
        _ => None,
    });
    let lock = super::lock::lock_of(
        input.object_lock_mode.as_ref(),
        input.object_lock_retain_until_date.as_ref(),
        input.object_lock_legal_hold_status.as_ref(),
    )?;
    let encryption = super::sse::customer_key(
        svc.store.as_ref(),
        input.server_side_encryption.as_ref(),
        input.ssekms_key_id.as_deref(),
        input.sse_customer_algorithm.as_deref(),
        input.sse_customer_key.as_deref(),
        input.sse_customer_key_md5.as_deref(),
    )?;
    let echo = super::sse::Echo::of(encryption.as_ref());
    let mut opts = store::CreateUploadOptions {
        props: props_of!(input, &req.headers),
        checksum_algorithm: alg,
        checksum_type: kind,
        encryption,
    };
    opts.props.lock = lock;
    opts.props.sse_s3 = super::bucket_encryption::with_default(
        svc,
        &input.bucket,
        input.server_side_encryption.as_ref(),
        input.ssekms_key_id.as_deref(),
        opts.encryption.is_some(),
    )
    .await?;
    let server_side_encryption = super::sse::server_managed_echo(opts.props.sse_s3);
    super::ownership::check_acl(svc, &input.bucket, opts.props.acl, input.acl.as_ref()).await?;
    let store = svc.store.clone();
    let (bucket, key) = (input.bucket.clone(), input.key.clone());
    let info = blocking(move || store.create_upload(&bucket, &key, opts)).await?;
    let (abort_date, abort_rule_id) = super::lifecycle::abort_of(
        svc.store.as_ref(),
        &input.bucket,
        &input.key,
        info.initiated_ns,
    );
    Ok(S3Response::new(CreateMultipartUploadOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(info.upload_id),
        abort_date,
        abort_rule_id,
        checksum_algorithm: alg.map(dto_alg),
        checksum_type: alg
            .map(|_| dto_checksum_type(kind.unwrap_or(store::ChecksumType::Composite))),
        server_side_encryption,
        sse_customer_algorithm: echo.algorithm,
        sse_customer_key_md5: echo.key_md5,
        ..Default::default()
    }))
}

pub(super) async fn upload_part(
    svc: &StowS3,
    req: S3Request<UploadPartInput>,
) -> S3Result<S3Response<UploadPartOutput>> {
    svc.writable()?;
    let trailer = trailer_alg(&req.headers);
    let trailing_checksums = trailing(req.trailing_headers.clone());
    let input = req.input;
    let supplied = supplied_checksums!(input);
    let declared = input.checksum_algorithm.as_ref().map(alg_of).transpose()?;
    let encryption = super::sse::request_key!(svc.store.as_ref(), input)?;
    let echo = super::sse::Echo::of(encryption.as_ref());
    let opts = store::PartOptions {
        content_md5: input.content_md5,
        expected_checksums: supplied,
        checksum_algorithm: declared.or(trailer),
        trailing_checksums: trailer.and(trailing_checksums),
        encryption,
    };
    let mut reader = request_reader(input.body, input.content_length).await;
    let store = svc.store.clone();
    let (bucket, key, upload) = (input.bucket, input.key, input.upload_id);
    let number = i64::from(input.part_number);
    let info =
        blocking(move || store.upload_part(&bucket, &key, &upload, number, &mut reader, opts))
            .await?;
    let c = ChecksumFields::of(info.checksum.as_ref());
    Ok(S3Response::new(UploadPartOutput {
        e_tag: Some(etag(&info.etag)),
        checksum_crc32: c.crc32,
        checksum_crc32c: c.crc32c,
        checksum_crc64nvme: c.crc64nvme,
        checksum_sha1: c.sha1,
        checksum_sha256: c.sha256,
        server_side_encryption: super::sse::server_managed_echo(info.sse_s3),
        sse_customer_algorithm: echo.algorithm,
        sse_customer_key_md5: echo.key_md5,
        ..Default::default()
    }))
}

pub(super) async fn upload_part_copy(
    svc: &StowS3,
    req: S3Request<UploadPartCopyInput>,
) -> S3Result<S3Response<UploadPartCopyOutput>> {
    svc.writable()?;
    let input = req.input;
    let (src_bucket, src_key, src_version) = svc.copy_source_of(&input.copy_source).await?;
    let range = match input.copy_source_range.as_deref() {
        None => None,
        Some(r) => {
            let parsed = Range::parse(r).map_err(|_| {
                s3_error!(
                    InvalidArgument,
                    "The x-amz-copy-source-range value must be of the form bytes=first-last"
                )
            })?;
            match parsed {
                Range::Int {
                    first,
                    last: Some(last),
                } => Some(ByteRange::FromTo(first, last)),
                _ => {
                    return Err(s3_error!(
                        InvalidArgument,
                        "The x-amz-copy-source-range value must be of the form bytes=first-last"
                    ))
                }
            }
        }
    };
    let conditions = source_conditions(
        input.copy_source_if_match,
        input.copy_source_if_none_match,
        input.copy_source_if_modified_since,
        input.copy_source_if_unmodified_since,
    );
    // Customer keys (SSE-C): the source's, and the upload's own.
    let source_key = super::sse::plain_key(
        svc.store.as_ref(),
        input.copy_source_sse_customer_algorithm.as_deref(),
        input.copy_source_sse_customer_key.as_deref(),
        input.copy_source_sse_customer_key_md5.as_deref(),
    )?;
    let encryption = super::sse::request_key!(svc.store.as_ref(), input)?;
    let echo = super::sse::Echo::of(encryption.as_ref());
    let store = svc.store.clone();
    let (bucket, key, upload) = (input.bucket, input.key, input.upload_id);
    let number = i64::from(input.part_number);
    let info = tokio::task::spawn_blocking(move || {
        let read = match store.get_object_keyed(
            &src_bucket,
            &src_key,
            src_version.as_deref(),
            range,
            None,
            source_key.as_ref(),
        ) {
            Err(StoreError::InvalidRange { size }) => return Err(copy_range_outside(size)),
            r => r.map_err(to_s3)?,
        };
        // A read clamps the range's end to the object; a copy range must
        // lie wholly inside the source.
        if let Some(ByteRange::FromTo(_, last)) = range {
            if last >= read.meta.size {
                return Err(copy_range_outside(read.meta.size));
            }
        }
        if conditions.check(&read.meta) != store::ConditionCheck::Pass {
            return Err(s3_error!(PreconditionFailed));
        }
        let mut body = read.body;
        store
            .upload_part(
                &bucket,
                &key,
                &upload,
                number,
                &mut body,
                store::PartOptions {
                    encryption,
                    ..Default::default()
                },
            )
            .map_err(to_s3)
    })
    .await
    .map_err(S3Error::internal_error)??;
    Ok(S3Response::new(UploadPartCopyOutput {
        copy_part_result: Some(CopyPartResult {
            e_tag: Some(etag(&info.etag)),
            last_modified: Some(timestamp(info.last_modified_ns)),
            ..Default::default()
        }),
        server_side_encryption: super::sse::server_managed_echo(info.sse_s3),
        sse_customer_algorithm: echo.algorithm,
        sse_customer_key_md5: echo.key_md5,
        ..Default::default()
    }))
}

/// A copy range reaching outside the source: the request's fault, 400
/// InvalidRange (as AWS answers UploadPartCopy), not a 416 read.
fn copy_range_outside(size: u64) -> S3Error {
    let mut e = s3_error!(
        InvalidRange,
        "Range specified is not valid for source object of size: {size}"
    );
    e.set_status_code(http::StatusCode::BAD_REQUEST);
    e
}

pub(super) async fn complete_multipart_upload(
    svc: &StowS3,
    req: S3Request<CompleteMultipartUploadInput>,
) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
    svc.writable()?;
    let input = req.input;
    let condition = write_condition(input.if_match, input.if_none_match)?;
    let parts = input
        .multipart_upload
        .and_then(|m| m.parts)
        .unwrap_or_default()
        .into_iter()
        .map(|p| {
            let number = p
                .part_number
                .ok_or_else(|| s3_error!(MalformedXML, "a part has no PartNumber"))?;
            let tag = p
                .e_tag
                .ok_or_else(|| s3_error!(MalformedXML, "a part has no ETag"))?;
            Ok(store::CompletedPart {
                part_number: u32::try_from(number)
                    .map_err(|_| s3_error!(InvalidPart, "invalid part number"))?,
                etag: tag.value().to_string(),
            })
        })
        .collect::<S3Result<Vec<_>>>()?;
    // A whole-object checksum the client sent must be the object's.
    let expected = [
        (Alg::Crc32, input.checksum_crc32.clone()),
        (Alg::Crc32c, input.checksum_crc32c.clone()),
        (Alg::Crc64nvme, input.checksum_crc64nvme.clone()),
        (Alg::Sha1, input.checksum_sha1.clone()),
        (Alg::Sha256, input.checksum_sha256.clone()),
    ]
    .into_iter()
    .find_map(|(alg, v)| v.map(|v| (alg, v)));
    // A completion that names a customer key (SSE-C) names the upload's.
    let sse = super::sse::request_key!(svc.store.as_ref(), input)?;
    let store = svc.store.clone();
    let (bucket, key, upload) = (input.bucket.clone(), input.key.clone(), input.upload_id);
    let meta: ObjectMeta = blocking(move || {
        if let Some(sse) = &sse {
            store.check_upload_key(&bucket, &key, &upload, sse)?;
        }
        store.complete_upload_checked(&bucket, &key, &upload, &parts, condition, expected)
    })
    .await?;
    let c = ChecksumFields::of(meta.checksum.as_ref());
    Ok(S3Response::new(CompleteMultipartUploadOutput {
        bucket: Some(input.bucket.clone()),
        key: Some(input.key.clone()),
        location: Some(format!("/{}/{}", input.bucket, input.key)),
        e_tag: Some(etag(&meta.etag)),
        version_id: written_version(&meta),
        expiration: super::lifecycle::expiration_of(svc.store.as_ref(), &meta),
        server_side_encryption: super::sse::server_managed_echo(meta.props.sse_s3),
        checksum_crc32: c.crc32,
        checksum_crc32c: c.crc32c,
        checksum_crc64nvme: c.crc64nvme,
        checksum_sha1: c.sha1,
        checksum_sha256: c.sha256,
        checksum_type: c.kind,
        ..Default::default()
    }))
}

pub(super) async fn abort_multipart_upload(
    svc: &StowS3,
    req: S3Request<AbortMultipartUploadInput>,
) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
    svc.writable()?;
    let store = svc.store.clone();
    let i = req.input;
    blocking(move || store.abort_upload(&i.bucket, &i.key, &i.upload_id)).await?;
    Ok(S3Response::with_status(
        AbortMultipartUploadOutput::default(),
        http::StatusCode::NO_CONTENT,
    ))
}

pub(super) async fn list_parts(
    svc: &StowS3,
    req: S3Request<ListPartsInput>,
) -> S3Result<S3Response<ListPartsOutput>> {
    let input = req.input;
    let max = match input.max_parts {
        None => 1000,
        Some(n) if n >= 0 => (n as usize).min(1000),
        Some(_) => {
            return Err(s3_error!(
                InvalidArgument,
                "max-parts must be a non-negative integer"
            ))
        }
    };
    let marker = match input.part_number_marker {
        None => 0,
        Some(n) if (0..=10_000).contains(&n) => n as u32,
        Some(_) => {
            return Err(s3_error!(
                InvalidArgument,
                "part-number-marker must be 0 to 10000"
            ))
        }
    };
    let store = svc.store.clone();
    let (bucket, key, upload) = (
        input.bucket.clone(),
        input.key.clone(),
        input.upload_id.clone(),
    );
    let page = blocking(move || store.list_parts(&bucket, &key, &upload, marker, max)).await?;
    Ok(S3Response::new(ListPartsOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(input.upload_id),
        part_number_marker: Some(marker as i32),
        next_part_number_marker: page.next_part_number_marker.map(|n| n as i32),
        max_parts: Some(max as i32),
        is_truncated: Some(page.is_truncated),
        parts: Some(
            page.parts
                .into_iter()
                .map(|p| {
                    let c = ChecksumFields::of(p.checksum.as_ref());
                    Part {
                        part_number: Some(p.part_number as i32),
                        size: Some(p.size as i64),
                        e_tag: Some(etag(&p.etag)),
                        last_modified: Some(timestamp(p.last_modified_ns)),
                        checksum_crc32: c.crc32,
                        checksum_crc32c: c.crc32c,
                        checksum_crc64nvme: c.crc64nvme,
                        checksum_sha1: c.sha1,
                        checksum_sha256: c.sha256,
                    }
                })
                .collect(),
        ),
        // The one owner started every upload (see `acl::owner`).
        initiator: Some(Initiator {
            display_name: super::acl::owner().display_name,
            id: super::acl::owner().id,
        }),
        owner: Some(super::acl::owner()),
        ..Default::default()
    }))
}

pub(super) async fn list_multipart_uploads(
    svc: &StowS3,
    req: S3Request<ListMultipartUploadsInput>,
) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
    let input = req.input;
    let max = max_count(input.max_uploads, "max-uploads")?;
    let store = svc.store.clone();
    let bucket = input.bucket.clone();
    let prefix = input.prefix.clone().unwrap_or_default();
    let (km, um) = (input.key_marker.clone(), input.upload_id_marker.clone());
    let page = blocking(move || {
        store.list_uploads(
            &bucket,
            &prefix,
            km.as_deref().filter(|s| !s.is_empty()),
            um.as_deref(),
            max,
        )
    })
    .await?;
    Ok(S3Response::new(ListMultipartUploadsOutput {
        bucket: Some(input.bucket),
        prefix: input.prefix,
        delimiter: input.delimiter,
        key_marker: input.key_marker,
        upload_id_marker: input.upload_id_marker,
        max_uploads: Some(max as i32),
        is_truncated: Some(page.is_truncated),
        next_key_marker: page.next_key_marker,
        next_upload_id_marker: page.next_upload_id_marker,
        uploads: Some(
            page.uploads
                .into_iter()
                .map(|u| MultipartUpload {
                    key: Some(u.key),
                    upload_id: Some(u.upload_id),
                    initiated: Some(timestamp(u.initiated_ns)),
                    storage_class: Some(StorageClass::from_static(StorageClass::STANDARD)),
                    // The one owner started every upload (see `acl::owner`).
                    initiator: Some(Initiator {
                        display_name: super::acl::owner().display_name,
                        id: super::acl::owner().id,
                    }),
                    owner: Some(super::acl::owner()),
                    ..Default::default()
                })
                .collect(),
        ),
        ..Default::default()
    }))
}
