//! Completed multipart uploads, remembered for a while so that a retried
//! CompleteMultipartUpload (an SDK retry after a lost reply) answers as
//! the first completion did instead of `NoSuchUpload`, which a caller
//! would read as data loss. Another part list still finds no upload.
//!
//! Rows are written in the completing transaction (so a crash leaves the
//! object and its memory together or neither) and pruned there: older
//! than [`REMEMBER_NS`], or beyond the newest [`REMEMBER_MAX`].

use rusqlite::{params, Connection, OptionalExtension};

use crate::error::{Result, StoreError};
use crate::model::{CompletedPart, ObjectMeta};
use crate::record::{self, Record};

/// How long a completion is remembered (AWS keeps them for a while too).
pub(crate) const REMEMBER_NS: i64 = 24 * 3600 * 1_000_000_000;
/// At most this many completions are remembered.
pub(crate) const REMEMBER_MAX: i64 = 10_000;

/// The part list as compared on a retry: `number:etag` with the ETag's
/// quotes dropped and hex lowercased.
fn part_list(listed: &[CompletedPart]) -> String {
    listed
        .iter()
        .map(|p| {
            format!(
                "{}:{}",
                p.part_number,
                p.etag.trim().trim_matches('"').to_ascii_lowercase()
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Remembers that `upload_id` completed into `rec` from `listed`,
/// answering `version_id` (the version it made in a bucket that has had
/// versioning; `None` otherwise), so that a retry answers the same one.
pub(crate) fn remember(
    conn: &Connection,
    bucket: i64,
    key: &str,
    upload_id: &str,
    listed: &[CompletedPart],
    rec: &Record,
    version_id: Option<&str>,
) -> Result<()> {
    let props = serde_json::to_string(&rec.props)
        .map_err(|e| StoreError::Corrupt(format!("cannot encode properties: {e}")))?;
    let now = record::now_ns();
    conn.prepare_cached(
        "INSERT OR REPLACE INTO completed_uploads
         (id, bucket, key, parts, size, etag, modified_ns, generation, props, completed_ns,
          version_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?
    .execute(params![
        upload_id,
        bucket,
        key.as_bytes(),
        part_list(listed),
        rec.size as i64,
        rec.etag,
        rec.modified_ns,
        &rec.generation[..],
        props,
        now,
        version_id,
    ])?;
    conn.prepare_cached("DELETE FROM completed_uploads WHERE completed_ns < ?1")?
        .execute([now - REMEMBER_NS])?;
    conn.prepare_cached(
        "DELETE FROM completed_uploads WHERE id IN (
             SELECT id FROM completed_uploads ORDER BY completed_ns DESC LIMIT -1 OFFSET ?1)",
    )?
    .execute([REMEMBER_MAX])?;
    Ok(())
}

/// The first completion's result when `upload_id` of `bucket`/`key` was
/// completed with the same part list; `None` when it is not remembered;
/// `NoSuchUpload` when it was completed from other parts.
pub(crate) fn replay(
    conn: &Connection,
    bucket: i64,
    bucket_name: &str,
    key: &str,
    upload_id: &str,
    listed: &[CompletedPart],
) -> Result<Option<ObjectMeta>> {
    let row = conn
        .prepare_cached(
            "SELECT parts, size, etag, modified_ns, generation, props, version_id
             FROM completed_uploads WHERE id = ?1 AND bucket = ?2 AND key = ?3",
        )?
        .query_row(params![upload_id, bucket, key.as_bytes()], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, Vec<u8>>(4)?,
                r.get::<_, String>(5)?,
                r.get::<_, Option<String>>(6)?,
            ))
        })
        .optional()?;
    let Some((parts, size, etag, modified_ns, generation, props, version_id)) = row else {
        return Ok(None);
    };
    if parts != part_list(listed) {
        // Not a retry of that completion: the upload is gone (as on AWS).
        return Err(StoreError::NoSuchUpload {
            upload_id: upload_id.to_string(),
        });
    }
    let rec = Record {
        size: size as u64,
        etag,
        modified_ns,
        generation: generation
            .try_into()
            .map_err(|_| StoreError::Corrupt("malformed generation".into()))?,
        props: serde_json::from_str(&props)
            .map_err(|e| StoreError::Corrupt(format!("malformed object properties: {e}")))?,
        extents: Vec::new(),
        vid: None,
        seq: 0,
    };
    let mut meta = rec.meta(bucket_name, key);
    // The version the completion made, as it was answered (the same
    // version ID, not a new one and not none).
    meta.version_id = version_id;
    Ok(Some(meta))
}

/// Forgets the completions of a bucket being deleted.
pub(crate) fn forget_bucket(conn: &Connection, bucket: i64) -> Result<()> {
    conn.prepare_cached("DELETE FROM completed_uploads WHERE bucket = ?1")?
        .execute([bucket])?;
    Ok(())
}
