//! Object reads: GetObject, HeadObject, GetObjectAttributes.

use s3s::dto::*;
use s3s::{s3_error, S3Error, S3Request, S3Response, S3Result};
use stow_store as store;
use stow_store::{ChecksumAlgorithm as Alg, ObjectBackend, StoreError};

use super::convert::*;
use super::{off_runtime, StowS3};
use crate::body::response_body;
use crate::errors::to_s3;

pub(super) async fn get_object(
    svc: &StowS3,
    req: S3Request<GetObjectInput>,
) -> S3Result<S3Response<GetObjectOutput>> {
    super::sse::refuse_on_read(&req.headers)?;
    let input = req.input;
    let conditions = source_conditions(
        input.if_match,
        input.if_none_match,
        input.if_modified_since,
        input.if_unmodified_since,
    );
    let range = input.range.map(range_of);
    let part = input
        .part_number
        .map(|n| u32::try_from(n).map_err(|_| s3_error!(InvalidArgument, "invalid part number")))
        .transpose()?;
    if range.is_some() && part.is_some() {
        return Err(s3_error!(
            InvalidRequest,
            "Cannot specify both Range header and partNumber query parameter"
        ));
    }
    let sse = super::sse::request_key!(svc.store.as_ref(), input)?;
    let echo = super::sse::Echo::of(sse.as_ref());
    let (bucket, key, version) = (input.bucket, input.key, input.version_id);
    let latest = version.is_none();
    let open = move |store: &dyn ObjectBackend| {
        store.get_object_keyed(&bucket, &key, version.as_deref(), range, part, sse.as_ref())
    };
    let checked = move |read: Result<store::ObjectRead, StoreError>| {
        let read = match read {
            Err(StoreError::InvalidRange { size }) => return Err(invalid_range(size)),
            r => r.map_err(to_s3)?,
        };
        read_condition(conditions.check(&read.meta), &read.meta)?;
        Ok(read)
    };
    // On a plain store the lookup is a point read, and a body kept inline
    // is in memory: only a body in files needs a thread.
    let read = if svc.store.point_reads_are_cheap() {
        let read = checked(open(svc.store.as_ref()))?;
        let len = read.body.len();
        if read.body.in_memory() {
            let body = response_body(read.body).map_err(S3Error::internal_error)?;
            (read.meta, read.range, len, body)
        } else {
            off_runtime(move || {
                let body = response_body(read.body)?;
                Ok::<_, std::io::Error>((read.meta, read.range, len, body))
            })
            .await?
            .map_err(S3Error::internal_error)?
        }
    } else {
        let backend = svc.store.clone();
        off_runtime(move || {
            let read = checked(open(backend.as_ref()))?;
            let len = read.body.len();
            let body = response_body(read.body).map_err(S3Error::internal_error)?;
            Ok::<_, S3Error>((read.meta, read.range, len, body))
        })
        .await??
    };
    let (meta, range, len, body) = read;
    let c = match part.and_then(|n| part_checksum(&meta, n)) {
        // A part of a multipart object: that part's checksum and the
        // object's checksum type.
        Some(pc) => ChecksumFields::of(Some(&pc)),
        None if checksum_enabled(&input.checksum_mode) && range.is_none() => {
            ChecksumFields::of(meta.checksum.as_ref())
        }
        None => ChecksumFields::default(),
    };
    let parts_count = (!meta.parts.is_empty()).then_some(meta.parts.len() as i32);
    let content_range = range.map(|(off, n)| {
        if n == 0 {
            format!("bytes */{}", meta.size)
        } else {
            format!("bytes {}-{}/{}", off, off + n - 1, meta.size)
        }
    });
    let lock = super::lock::LockHeaders::of(&meta.props.lock);
    let mut resp = S3Response::new(GetObjectOutput {
        body: Some(body),
        accept_ranges: Some("bytes".into()),
        content_length: Some(len as i64),
        content_range: content_range.clone(),
        parts_count: part.and(parts_count),
        tag_count: (!meta.props.tags.is_empty()).then_some(meta.props.tags.len() as i32),
        object_lock_mode: lock.mode,
        object_lock_retain_until_date: lock.until,
        object_lock_legal_hold_status: lock.hold,
        server_side_encryption: super::sse::server_managed_echo(meta.props.sse_s3),
        sse_customer_algorithm: echo.algorithm,
        sse_customer_key_md5: echo.key_md5,
        expiration: latest
            .then(|| super::lifecycle::expiration_of(svc.store.as_ref(), &meta))
            .flatten(),
        ..object_output!(GetObjectOutput, meta, c)
    });
    resp.headers = metadata_raw_headers(&meta.props.metadata)?;
    if content_range.is_some() {
        resp.status = Some(http::StatusCode::PARTIAL_CONTENT);
    }
    Ok(resp)
}

pub(super) async fn head_object(
    svc: &StowS3,
    req: S3Request<HeadObjectInput>,
) -> S3Result<S3Response<HeadObjectOutput>> {
    super::sse::refuse_on_read(&req.headers)?;
    let input = req.input;
    let conditions = source_conditions(
        input.if_match,
        input.if_none_match,
        input.if_modified_since,
        input.if_unmodified_since,
    );
    let sse = super::sse::request_key!(svc.store.as_ref(), input)?;
    let echo = super::sse::Echo::of(sse.as_ref());
    let (bucket, key, version) = (input.bucket, input.key, input.version_id.clone());
    let meta = svc
        .point_read(move |store| {
            store.head_object_keyed(&bucket, &key, version.as_deref(), sse.as_ref())
        })
        .await?;
    read_condition(conditions.check(&meta), &meta)?;
    let (length, content_range, parts_count) = match input.part_number {
        Some(n) if n >= 1 && (n as usize) <= meta.parts.len().max(1) => {
            let sizes: Vec<u64> = if meta.parts.is_empty() {
                vec![meta.size]
            } else {
                meta.parts.iter().map(|p| p.size).collect()
            };
            let start: u64 = sizes[..n as usize - 1].iter().sum();
            let len = sizes[n as usize - 1];
            let range = format!(
                "bytes {}-{}/{}",
                start,
                (start + len).saturating_sub(1),
                meta.size
            );
            (len, Some(range), Some(sizes.len() as i32))
        }
        Some(n) => {
            return Err(s3_error!(
                InvalidPart,
                "part {n} requested; the object has {} part(s)",
                meta.parts.len().max(1)
            ))
        }
        None => (meta.size, None, None),
    };
    let part = input.part_number.and_then(|n| u32::try_from(n).ok());
    let c = match part.and_then(|n| part_checksum(&meta, n)) {
        Some(pc) => ChecksumFields::of(Some(&pc)),
        None if checksum_enabled(&input.checksum_mode) => {
            ChecksumFields::of(meta.checksum.as_ref())
        }
        None => ChecksumFields::default(),
    };
    let lock = super::lock::LockHeaders::of(&meta.props.lock);
    let mut resp = S3Response::new(HeadObjectOutput {
        accept_ranges: Some("bytes".into()),
        content_length: Some(length as i64),
        content_range: content_range.clone(),
        parts_count,
        object_lock_mode: lock.mode,
        object_lock_retain_until_date: lock.until,
        object_lock_legal_hold_status: lock.hold,
        server_side_encryption: super::sse::server_managed_echo(meta.props.sse_s3),
        sse_customer_algorithm: echo.algorithm,
        sse_customer_key_md5: echo.key_md5,
        expiration: input
            .version_id
            .is_none()
            .then(|| super::lifecycle::expiration_of(svc.store.as_ref(), &meta))
            .flatten(),
        ..object_output!(HeadObjectOutput, meta, c)
    });
    resp.headers = metadata_raw_headers(&meta.props.metadata)?;
    // As GET answers it (HeadObjectOutput has no field for it).
    if !meta.props.tags.is_empty() {
        resp.headers.insert(
            "x-amz-tagging-count",
            http::HeaderValue::from(meta.props.tags.len()),
        );
    }
    if content_range.is_some() {
        resp.status = Some(http::StatusCode::PARTIAL_CONTENT);
    }
    Ok(resp)
}

pub(super) async fn get_object_attributes(
    svc: &StowS3,
    req: S3Request<GetObjectAttributesInput>,
) -> S3Result<S3Response<GetObjectAttributesOutput>> {
    let input = req.input;
    let wanted: Vec<String> = input
        .object_attributes
        .iter()
        .flat_map(|a| {
            a.as_str()
                .split(',')
                .map(|p| p.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .collect();
    let want = |name: &str| wanted.iter().any(|w| w == name);
    let sse = super::sse::request_key!(svc.store.as_ref(), input)?;
    let (bucket, key, version) = (input.bucket, input.key, input.version_id.clone());
    let meta = svc
        .point_read(move |store| {
            store.head_object_keyed(&bucket, &key, version.as_deref(), sse.as_ref())
        })
        .await?;
    // A composite checksum keeps its `-N` part count here too, as on
    // GET/HEAD (ceph/s3-tests' multipart checksum tests; issue 29).
    let c = ChecksumFields::of(meta.checksum.as_ref());
    let checksum = (want("checksum") && meta.checksum.is_some()).then_some(Checksum {
        checksum_crc32: c.crc32,
        checksum_crc32c: c.crc32c,
        checksum_crc64nvme: c.crc64nvme,
        checksum_sha1: c.sha1,
        checksum_sha256: c.sha256,
        checksum_type: c.kind,
    });
    let object_parts = (want("objectparts") && !meta.parts.is_empty()).then(|| {
        let marker = input.part_number_marker.unwrap_or(0).max(0) as usize;
        let max = input.max_parts.unwrap_or(1000).clamp(0, 1000) as usize;
        let alg = meta.checksum.as_ref().map(|c| c.algorithm);
        let listed: Vec<ObjectPart> = meta
            .parts
            .iter()
            .enumerate()
            .skip(marker)
            .take(max)
            .map(|(i, p)| {
                let mut part = ObjectPart {
                    part_number: Some(i as i32 + 1),
                    size: Some(p.size as i64),
                    ..Default::default()
                };
                match alg {
                    Some(Alg::Crc32) => part.checksum_crc32 = p.checksum.clone(),
                    Some(Alg::Crc32c) => part.checksum_crc32c = p.checksum.clone(),
                    Some(Alg::Crc64nvme) => part.checksum_crc64nvme = p.checksum.clone(),
                    Some(Alg::Sha1) => part.checksum_sha1 = p.checksum.clone(),
                    Some(Alg::Sha256) => part.checksum_sha256 = p.checksum.clone(),
                    None => {}
                }
                part
            })
            .collect();
        let last = listed.last().and_then(|p| p.part_number);
        GetObjectAttributesParts {
            total_parts_count: Some(meta.parts.len() as i32),
            part_number_marker: Some(marker as i32),
            next_part_number_marker: last,
            max_parts: Some(max as i32),
            is_truncated: Some(marker + listed.len() < meta.parts.len()),
            parts: Some(listed),
        }
    });
    Ok(S3Response::new(GetObjectAttributesOutput {
        e_tag: want("etag").then(|| etag(&meta.etag)),
        object_size: want("objectsize").then_some(meta.size as i64),
        storage_class: want("storageclass")
            .then(|| StorageClass::from_static(StorageClass::STANDARD)),
        last_modified: Some(timestamp(meta.last_modified_ns)),
        version_id: meta.version_id.clone(),
        checksum,
        object_parts,
        ..Default::default()
    }))
}

/// Part `n`'s checksum of a multipart object that has one, with the
/// object's algorithm and checksum type (what GET/HEAD `?partNumber=n`
/// answer).
fn part_checksum(meta: &store::ObjectMeta, n: u32) -> Option<store::Checksum> {
    let object = meta.checksum.as_ref()?;
    let index = usize::try_from(n).ok()?.checked_sub(1)?;
    let value = meta.parts.get(index)?.checksum.clone()?;
    Some(store::Checksum {
        algorithm: object.algorithm,
        value,
        kind: object.kind,
    })
}
