//! Multipart uploads. Parts are blobs like any body; completion references
//! them from the new object's record, so no byte is copied.

use std::io::Read;

use md5::Digest as _;
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

use super::{check_write_condition, Store};
use crate::blobs::BlobId;
use crate::checksum::{self, Checksum, ChecksumAlgorithm, ChecksumType};
use crate::completed;
use crate::encryption::{check_key, KeyRecord};
use crate::error::{Result, StoreError};
use crate::model::*;
use crate::record::{self, Extent, Record, StoredProps};
use crate::validate;

/// Every part but the last must be at least this large.
pub const MIN_PART_SIZE: u64 = 5 * 1024 * 1024;

#[derive(Serialize, Deserialize)]
pub(crate) struct UploadProps {
    #[serde(flatten)]
    props: ObjectProps,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    checksum_algorithm: Option<ChecksumAlgorithm>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    checksum_type: Option<ChecksumType>,
    /// The record of the upload's customer key (SSE-C): every part is
    /// sealed with that key, and the object keeps the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sse_c: Option<KeyRecord>,
}

pub(crate) struct PartRow {
    number: u32,
    blob: BlobId,
    size: u64,
    etag: String,
    checksum: Option<String>,
}

pub(crate) fn load_upload(
    conn: &Connection,
    bucket: i64,
    key: &str,
    upload_id: &str,
) -> Result<UploadProps> {
    let props: Option<String> = conn
        .prepare_cached("SELECT props FROM uploads WHERE id = ?1 AND bucket = ?2 AND key = ?3")?
        .query_row(params![upload_id, bucket, key.as_bytes()], |r| r.get(0))
        .optional()?;
    let props = props.ok_or_else(|| StoreError::NoSuchUpload {
        upload_id: upload_id.to_string(),
    })?;
    serde_json::from_str(&props)
        .map_err(|e| StoreError::Corrupt(format!("malformed upload properties: {e}")))
}

pub(crate) fn load_parts(conn: &Connection, upload_id: &str) -> Result<Vec<PartRow>> {
    let mut st = conn.prepare_cached(
        "SELECT number, blob, size, etag, checksum FROM parts WHERE upload = ?1 ORDER BY number",
    )?;
    let rows = st.query_map([upload_id], |r| {
        Ok(PartRow {
            number: r.get::<_, i64>(0)? as u32,
            blob: BlobId(r.get(1)?),
            size: r.get::<_, i64>(2)? as u64,
            etag: r.get(3)?,
            checksum: r.get(4)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(crate) fn check_upload_id(upload_id: &str) -> Result<()> {
    if upload_id.is_empty() || upload_id.len() > 128 {
        return Err(StoreError::NoSuchUpload {
            upload_id: upload_id.chars().take(128).collect(),
        });
    }
    Ok(())
}

impl Store {
    /// Starts a multipart upload; its properties and checksum algorithm are
    /// fixed now.
    pub fn create_upload(
        &self,
        bucket: &str,
        key: &str,
        opts: CreateUploadOptions,
    ) -> Result<UploadInfo> {
        validate::bucket_name(bucket)?;
        validate::object_key(key)?;
        let props = UploadProps {
            props: validate::normalize_props(opts.props)?,
            checksum_algorithm: opts.checksum_algorithm,
            checksum_type: opts
                .checksum_type
                .or(opts.checksum_algorithm.map(|_| ChecksumType::Composite)),
            sse_c: opts.encryption.as_ref().map(|k| k.record()),
        };
        if props.sse_c.is_some() && props.checksum_type == Some(ChecksumType::FullObject) {
            // Completion would have to decrypt every part to hash it.
            return Err(StoreError::NotImplemented {
                reason: "a full-object checksum with a customer-provided key (SSE-C) is not supported; use a composite checksum".into(),
            });
        }
        if props.checksum_type.is_some() && props.checksum_algorithm.is_none() {
            return Err(StoreError::InvalidArgument {
                reason: "a checksum type needs a checksum algorithm".into(),
            });
        }
        let encoded = serde_json::to_string(&props)
            .map_err(|e| StoreError::Corrupt(format!("cannot encode upload: {e}")))?;
        let (bucket, key) = (bucket.to_string(), key.to_string());
        let max_uploads = self.inner.opts.max_uploads;
        let mut asked_lock = props.props.lock;
        self.inner.db.write(move |conn, _| {
            // Object lock asked of a bucket without it is refused now, not
            // at completion (which applies the lock for good).
            let found = crate::versions::bucket(conn, &bucket)?;
            crate::lock::on_write(found.lock, &mut asked_lock, record::now_ns())?;
            let b = found.id;
            let in_flight: i64 = conn
                .prepare_cached("SELECT count(*) FROM uploads")?
                .query_row([], |r| r.get(0))?;
            if in_flight as u64 >= max_uploads {
                return Err(StoreError::QuotaExceeded {
                    reason: format!(
                        "{in_flight} multipart uploads are in flight, the limit; complete or abort one first"
                    ),
                });
            }
            let info = UploadInfo {
                upload_id: crate::hex(&rand::random::<[u8; 16]>()),
                key: key.clone(),
                initiated_ns: record::now_ns(),
            };
            conn.execute(
                "INSERT INTO uploads (id, bucket, key, initiated_ns, props) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![info.upload_id, b, key.as_bytes(), info.initiated_ns, encoded],
            )?;
            Ok(info)
        })
    }

    /// Uploads (or replaces) one part. Its bytes count against the quota
    /// until the upload completes or is aborted.
    pub fn upload_part(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part_number: i64,
        body: &mut dyn Read,
        opts: PartOptions,
    ) -> Result<PartInfo> {
        validate::bucket_name(bucket)?;
        validate::object_key(key)?;
        check_upload_id(upload_id)?;
        let number = validate::part_number(part_number)?;
        let (alg, sealed, sse_s3) = self.inner.db.read(|conn| {
            let b = record::bucket_id(conn, bucket)?;
            let up = load_upload(conn, b, key, upload_id)?;
            Ok((up.checksum_algorithm, up.sse_c, up.props.sse_s3))
        })?;
        // A part of a sealed upload comes with the upload's own key.
        check_key(sealed.as_ref(), opts.encryption.as_ref())?;
        let (staged, kept) = self.stage_verified(
            body,
            alg.or(opts.checksum_algorithm),
            &opts.expected_checksums,
            opts.content_md5.as_deref(),
            opts.trailing_checksums,
            false,
            opts.encryption.as_ref(),
        )?;
        let info = PartInfo {
            part_number: number,
            size: staged.digests.size,
            etag: checksum::etag_of_md5(&staged.etag_md5()),
            last_modified_ns: record::now_ns(),
            checksum: kept,
            sse_s3,
        };
        let kept_value = info
            .checksum
            .as_ref()
            .filter(|c| Some(c.algorithm) == alg)
            .map(|c| c.value.clone());
        let (bucket, key, upload_id) = (bucket.to_string(), key.to_string(), upload_id.to_string());
        let blob = staged.id;
        let inline = staged.inline.clone();
        let stored = staged.stored;
        let quota = self.inner.quota();
        let out = info.clone();
        self.inner.db.write(move |conn, fx| {
            let b = record::bucket_id(conn, &bucket)?;
            let up = load_upload(conn, b, &key, &upload_id)?;
            if up.sse_c != sealed {
                // Never a part sealed under one record in an upload of
                // another (the upload was replaced meanwhile).
                return Err(StoreError::NoSuchUpload { upload_id });
            }
            let old: Option<(i64, i64)> = conn
                .prepare_cached("SELECT blob, size FROM parts WHERE upload = ?1 AND number = ?2")?
                .query_row(params![upload_id, number], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            let old_size = old.map_or(0, |(_, s)| s);
            record::charge(conn, &quota, info.size as i64 - old_size, 0)?;
            record::insert_blob(conn, fx, blob, stored, inline.as_deref())?;
            conn.prepare_cached(
                "INSERT OR REPLACE INTO parts (upload, number, blob, size, etag, modified_ns, checksum)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                upload_id,
                number,
                blob.0,
                info.size as i64,
                info.etag,
                info.last_modified_ns,
                kept_value
            ])?;
            if let Some((old_blob, old_size)) = old {
                let extent = Extent {
                    blob: BlobId(old_blob),
                    size: old_size as u64,
                };
                record::release(conn, fx, &[extent])?;
            }
            Ok(())
        })?;
        staged.keep();
        Ok(out)
    }

    /// Checks that `sse` is the customer key (SSE-C) an upload was
    /// created with: `encryption_not_applicable` for a plain upload,
    /// `wrong_encryption_key` for another key.
    pub fn check_upload_key(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        sse: &crate::CustomerKey,
    ) -> Result<()> {
        validate::bucket_name(bucket)?;
        validate::object_key(key)?;
        check_upload_id(upload_id)?;
        self.inner.db.read(|conn| {
            let b = record::bucket_id(conn, bucket)?;
            let up = load_upload(conn, b, key, upload_id)?;
            check_key(up.sse_c.as_ref(), Some(sse))
        })
    }

    /// Lists parts in number order after `marker`, at most `max_parts`.
    pub fn list_parts(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        marker: u32,
        max_parts: usize,
    ) -> Result<PartsPage> {
        validate::bucket_name(bucket)?;
        validate::object_key(key)?;
        check_upload_id(upload_id)?;
        self.inner.db.read(|conn| {
            let b = record::bucket_id(conn, bucket)?;
            let up = load_upload(conn, b, key, upload_id)?;
            let (alg, sse_s3) = (up.checksum_algorithm, up.props.sse_s3);
            let mut st = conn.prepare_cached(
                "SELECT number, size, etag, modified_ns, checksum FROM parts
                 WHERE upload = ?1 AND number > ?2 ORDER BY number LIMIT ?3",
            )?;
            let mut parts: Vec<PartInfo> = st
                .query_map(params![upload_id, marker, max_parts as i64 + 1], |r| {
                    Ok(PartInfo {
                        part_number: r.get::<_, i64>(0)? as u32,
                        size: r.get::<_, i64>(1)? as u64,
                        etag: r.get(2)?,
                        last_modified_ns: r.get(3)?,
                        checksum: r.get::<_, Option<String>>(4)?.zip(alg).map(
                            |(value, algorithm)| Checksum {
                                algorithm,
                                value,
                                kind: ChecksumType::FullObject,
                            },
                        ),
                        sse_s3,
                    })
                })?
                .collect::<rusqlite::Result<_>>()?;
            let is_truncated = parts.len() > max_parts;
            parts.truncate(max_parts);
            Ok(PartsPage {
                is_truncated,
                next_part_number_marker: parts.last().map(|p| p.part_number),
                parts,
            })
        })
    }

    /// Lists in-flight uploads of a bucket in key, initiation, id order.
    pub fn list_uploads(
        &self,
        bucket: &str,
        prefix: &str,
        key_marker: Option<&str>,
        upload_id_marker: Option<&str>,
        max_uploads: usize,
    ) -> Result<UploadsPage> {
        validate::bucket_name(bucket)?;
        self.inner.db.read(|conn| {
            let b = record::bucket_id(conn, bucket)?;
            let mut st = conn.prepare_cached(
                "SELECT id, key, initiated_ns FROM uploads WHERE bucket = ?1
                 ORDER BY key, initiated_ns, id",
            )?;
            let rows = st.query_map([b], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, Vec<u8>>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            })?;
            let mut uploads = Vec::new();
            // A marker pair resumes after (key, upload id); a key marker alone
            // resumes after every upload of that key.
            let mut skipping_key = key_marker.map(|k| (k.as_bytes().to_vec(), upload_id_marker));
            let mut is_truncated = false;
            for row in rows {
                let (id, key, initiated_ns) = row?;
                if !key.starts_with(prefix.as_bytes()) {
                    continue;
                }
                if let Some((mk, mid)) = &skipping_key {
                    match key.as_slice().cmp(mk.as_slice()) {
                        std::cmp::Ordering::Less => continue,
                        std::cmp::Ordering::Equal => {
                            match mid {
                                None => continue,
                                Some(m) if id.as_str() != *m => continue,
                                Some(_) => {
                                    // Found the marker upload itself: resume after it.
                                    skipping_key = None;
                                    continue;
                                }
                            }
                        }
                        std::cmp::Ordering::Greater => skipping_key = None,
                    }
                }
                if uploads.len() == max_uploads {
                    is_truncated = true;
                    break;
                }
                uploads.push(UploadInfo {
                    upload_id: id,
                    key: String::from_utf8(key)
                        .map_err(|_| StoreError::Corrupt("upload key is not UTF-8".into()))?,
                    initiated_ns,
                });
            }
            let last = uploads.last().cloned();
            Ok(UploadsPage {
                is_truncated,
                next_key_marker: last
                    .as_ref()
                    .filter(|_| is_truncated)
                    .map(|u| u.key.clone()),
                next_upload_id_marker: last.filter(|_| is_truncated).map(|u| u.upload_id),
                uploads,
            })
        })
    }

    /// [`Store::abort_upload`] without the retry on a full disk.
    pub(crate) fn abort_upload_once(&self, bucket: &str, key: &str, upload_id: &str) -> Result<()> {
        validate::bucket_name(bucket)?;
        validate::object_key(key)?;
        check_upload_id(upload_id)?;
        let (bucket, key, upload_id) = (bucket.to_string(), key.to_string(), upload_id.to_string());
        let quota = self.inner.quota();
        self.inner.db.write(move |conn, fx| {
            let b = record::bucket_id(conn, &bucket)?;
            load_upload(conn, b, &key, &upload_id)?;
            let parts = load_parts(conn, &upload_id)?;
            drop_upload(conn, fx, &quota, &upload_id, &parts)
        })
    }

    /// Completes an upload from the listed parts (ascending, each known with
    /// a matching ETag, every one but the last at least 5 MiB). Unlisted
    /// parts are dropped. The object's bytes are the parts' blobs, uncopied.
    pub fn complete_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        listed: &[CompletedPart],
        condition: WriteCondition,
    ) -> Result<ObjectMeta> {
        self.complete_upload_checked(bucket, key, upload_id, listed, condition, None)
    }

    /// [`Store::complete_upload`], refused with `BadDigest` (nothing
    /// committed) unless the whole object's checksum is `expected`
    /// (algorithm and base64 value; a composite's `-N` suffix optional).
    pub fn complete_upload_checked(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        listed: &[CompletedPart],
        condition: WriteCondition,
        expected: Option<(ChecksumAlgorithm, String)>,
    ) -> Result<ObjectMeta> {
        check_completion(bucket, key, upload_id, listed)?;
        // A full-object checksum needs the bytes: compute it outside the
        // write lock, then require the same part blobs inside it.
        let full = match self.full_object_checksum(bucket, key, upload_id, listed) {
            Err(StoreError::NoSuchUpload { .. }) => {
                // Completed already? A retry answers as the completion did.
                let replayed = self.inner.db.read(|conn| {
                    let b = record::bucket_id(conn, bucket)?;
                    completed::replay(conn, b, bucket, key, upload_id, listed)
                })?;
                return replayed.ok_or_else(|| StoreError::NoSuchUpload {
                    upload_id: upload_id.to_string(),
                });
            }
            r => r?,
        };
        let (bucket, key, upload_id) = (bucket.to_string(), key.to_string(), upload_id.to_string());
        let listed = listed.to_vec();
        let quota = self.inner.quota();
        self.inner.db.write(move |conn, fx| {
            let vb = crate::versions::bucket(conn, &bucket)?;
            let b = vb.id;
            let up = match load_upload(conn, b, &key, &upload_id) {
                // A concurrent completion (or a retry) got here first.
                Err(StoreError::NoSuchUpload { upload_id }) => {
                    return completed::replay(conn, b, &bucket, &key, &upload_id, &listed)?
                        .ok_or(StoreError::NoSuchUpload { upload_id })
                }
                r => r?,
            };
            let parts = load_parts(conn, &upload_id)?;
            let chosen = choose_parts(&parts, &listed)?;
            let old = record::load_record(conn, b, &key)?;
            check_write_condition(&condition, old.as_ref(), &bucket, &key)?;

            let mut rec = completed_record(up, &chosen, full.as_ref(), expected.as_ref())?;
            // The chosen parts' blobs move to the object; the rest are dropped.
            let unlisted: Vec<&PartRow> = parts
                .iter()
                .filter(|p| !chosen.iter().any(|c| c.number == p.number))
                .collect();
            let all_parts: u64 = parts.iter().map(|p| p.size).sum();
            let unlisted_extents: Vec<Extent> = unlisted
                .iter()
                .map(|p| Extent {
                    blob: p.blob,
                    size: p.size,
                })
                .collect();
            record::release(conn, fx, &unlisted_extents)?;
            conn.execute("DELETE FROM parts WHERE upload = ?1", [&upload_id])?;
            conn.execute("DELETE FROM uploads WHERE id = ?1", [&upload_id])?;
            // The parts' bytes leave usage as parts and come back as the
            // object's.
            record::charge(conn, &quota, -(all_parts as i64), 0)?;
            crate::versions::install(conn, fx, &quota, vb, &key, old, &mut rec)?;
            let meta = crate::versions::meta_in(&rec, vb, &bucket, &key);
            let vid = meta.version_id.as_deref();
            completed::remember(conn, b, &key, &upload_id, &listed, &rec, vid)?;
            Ok(meta)
        })
    }

    pub(crate) fn full_object_checksum(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        listed: &[CompletedPart],
    ) -> Result<Option<(Vec<BlobId>, String)>> {
        let pin = self.inner.db.pin();
        let (alg, extents) = self.inner.db.read(|conn| {
            let b = record::bucket_id(conn, bucket)?;
            let up = load_upload(conn, b, key, upload_id)?;
            let parts = load_parts(conn, upload_id)?;
            let extents: Vec<Extent> = listed
                .iter()
                .filter_map(|l| parts.iter().find(|p| p.number == l.part_number))
                .map(|p| Extent {
                    blob: p.blob,
                    size: p.size,
                })
                .collect();
            let alg = match (up.checksum_algorithm, up.checksum_type) {
                (Some(a), Some(ChecksumType::FullObject)) => Some(a),
                _ => None,
            };
            let total = extents.iter().map(|e| e.size).sum();
            // (A sealed upload has no full-object checksum: create_upload.)
            let blobs = &self.inner.blobs;
            let body = alg
                .map(|_| super::ObjectBody::plan(conn, blobs, &extents, (0, total), None, pin))
                .transpose()?;
            Ok((alg.zip(body), extents))
        })?;
        let Some((alg, mut body)) = alg else {
            return Ok(None);
        };
        let mut hasher = checksum::BodyHasher::new(&[alg], false);
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = body.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
        let digests = hasher.finish();
        let raw = digests
            .get(alg)
            .ok_or_else(|| StoreError::Corrupt("checksum was not computed".into()))?;
        Ok(Some((
            extents.iter().map(|e| e.blob).collect(),
            checksum::b64(raw),
        )))
    }
}

/// Aborts every in-progress upload of bucket `bucket` (its deletion) and
/// forgets its completed ones.
pub(crate) fn drop_bucket_uploads(
    conn: &Connection,
    fx: &mut crate::db::Effects,
    quota: &record::Quota,
    bucket: i64,
) -> Result<()> {
    let ids: Vec<String> = conn
        .prepare_cached("SELECT id FROM uploads WHERE bucket = ?1")?
        .query_map([bucket], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for id in ids {
        let parts = load_parts(conn, &id)?;
        drop_upload(conn, fx, quota, &id, &parts)?;
    }
    completed::forget_bucket(conn, bucket)
}

pub(crate) fn drop_upload(
    conn: &Connection,
    fx: &mut crate::db::Effects,
    quota: &record::Quota,
    upload_id: &str,
    parts: &[PartRow],
) -> Result<()> {
    let extents: Vec<Extent> = parts
        .iter()
        .map(|p| Extent {
            blob: p.blob,
            size: p.size,
        })
        .collect();
    let bytes: u64 = parts.iter().map(|p| p.size).sum();
    record::release(conn, fx, &extents)?;
    record::charge(conn, quota, -(bytes as i64), 0)?;
    conn.execute("DELETE FROM parts WHERE upload = ?1", [upload_id])?;
    conn.execute("DELETE FROM uploads WHERE id = ?1", [upload_id])?;
    Ok(())
}

/// The input rules of a completion (names, upload ID, part list), checked
/// before anything is read: one home for `complete_upload_checked` and
/// `join_upload`.
pub(crate) fn check_completion(
    bucket: &str,
    key: &str,
    upload_id: &str,
    listed: &[CompletedPart],
) -> Result<()> {
    validate::bucket_name(bucket)?;
    validate::object_key(key)?;
    check_upload_id(upload_id)?;
    check_part_list(listed)
}

/// Refuses an empty part list, or one not in ascending order.
pub(crate) fn check_part_list(listed: &[CompletedPart]) -> Result<()> {
    if listed.is_empty() {
        return Err(StoreError::InvalidPart {
            reason: "the part list is empty".into(),
        });
    }
    if listed
        .windows(2)
        .any(|w| w[0].part_number >= w[1].part_number)
    {
        return Err(StoreError::InvalidPartOrder);
    }
    Ok(())
}

/// The parts `listed` names, each uploaded with a matching ETag and every
/// one but the last at least [`MIN_PART_SIZE`].
pub(crate) fn choose_parts<'a>(
    parts: &'a [PartRow],
    listed: &[CompletedPart],
) -> Result<Vec<&'a PartRow>> {
    let mut chosen: Vec<&PartRow> = Vec::with_capacity(listed.len());
    for want in listed {
        let part = parts
            .iter()
            .find(|p| p.number == want.part_number)
            .ok_or_else(|| StoreError::InvalidPart {
                reason: format!("part {} was not uploaded", want.part_number),
            })?;
        if !record::etag_matches(&want.etag, &part.etag) || want.etag.trim() == "*" {
            return Err(StoreError::InvalidPart {
                reason: format!("part {} has a different ETag", want.part_number),
            });
        }
        chosen.push(part);
    }
    for p in &chosen[..chosen.len() - 1] {
        if p.size < MIN_PART_SIZE {
            return Err(StoreError::EntityTooSmall {
                part_number: p.number,
                size: p.size,
            });
        }
    }
    Ok(chosen)
}

/// The record an upload completes into from its `chosen` parts (extents:
/// the parts' blobs, in order): the multipart ETag, the checksum of the
/// upload's kind (`full`: the parts' blobs and their full-object checksum,
/// when it has one), refused with `BadDigest` unless it is `expected`.
pub(crate) fn completed_record(
    up: UploadProps,
    chosen: &[&PartRow],
    full: Option<&(Vec<BlobId>, String)>,
    expected: Option<&(ChecksumAlgorithm, String)>,
) -> Result<Record> {
    let mut md5s = md5::Md5::new();
    for p in chosen {
        let hex = p.etag.trim_matches('"');
        md5s.update(crate::unhex(hex).ok_or_else(|| {
            StoreError::Corrupt(format!("part {} has a malformed ETag", p.number))
        })?);
    }
    let etag = format!("\"{}-{}\"", crate::hex(&md5s.finalize()), chosen.len());
    let checksum = match (up.checksum_algorithm, up.checksum_type) {
        (Some(alg), Some(ChecksumType::Composite)) => {
            let mut digests = Vec::new();
            for p in chosen {
                let v = p
                    .checksum
                    .as_deref()
                    .ok_or_else(|| StoreError::InvalidPart {
                        reason: format!("part {} has no {} checksum", p.number, alg.as_str()),
                    })?;
                digests.push(alg.decode(v)?);
            }
            Some(Checksum {
                algorithm: alg,
                value: checksum::composite(alg, &digests),
                kind: ChecksumType::Composite,
            })
        }
        (Some(alg), Some(ChecksumType::FullObject)) => {
            let (blobs, value) = full.cloned().ok_or_else(|| {
                StoreError::Corrupt("full-object checksum was not computed".into())
            })?;
            if blobs != chosen.iter().map(|p| p.blob).collect::<Vec<_>>() {
                return Err(StoreError::InvalidPart {
                    reason: "parts changed while the upload completed".into(),
                });
            }
            Some(Checksum {
                algorithm: alg,
                value,
                kind: ChecksumType::FullObject,
            })
        }
        _ => None,
    };
    if let Some((alg, want)) = expected {
        let digest = |v: &str| v.trim().split('-').next().unwrap_or_default().to_string();
        match &checksum {
            Some(c) if c.algorithm == *alg && digest(&c.value) == digest(want) => {}
            Some(c) if c.algorithm == *alg => {
                return Err(StoreError::BadDigest {
                    reason: format!(
                        "the object's {} checksum is {}, not {want}",
                        alg.as_str(),
                        c.value
                    ),
                })
            }
            _ => {
                return Err(StoreError::BadDigest {
                    reason: format!(
                        "the upload was not created with the {} checksum",
                        alg.as_str()
                    ),
                })
            }
        }
    }
    let size: u64 = chosen.iter().map(|p| p.size).sum();
    let rec = Record {
        size,
        etag,
        modified_ns: record::now_ns(),
        generation: record::new_generation(),
        props: StoredProps {
            props: up.props,
            sse_c: up.sse_c,
            checksum,
            parts: chosen
                .iter()
                .map(|p| PartSummary {
                    size: p.size,
                    checksum: p.checksum.clone(),
                })
                .collect(),
        },
        extents: chosen
            .iter()
            .map(|p| Extent {
                blob: p.blob,
                size: p.size,
            })
            .collect(),
        vid: None,
        seq: 0,
    };
    Ok(rec)
}
