//! Object records and blob reference counting, inside a write or read
//! transaction. Shared by every operation that touches object rows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

use crate::blobs::BlobId;
use crate::checksum::Checksum;
use crate::db::Effects;
use crate::error::{Result, StoreError};
use crate::model::{ObjectMeta, ObjectProps, PartSummary, Usage};

/// A contiguous piece of an object's body: a whole blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Extent {
    pub blob: BlobId,
    pub size: u64,
}

/// Properties kept in a record's `props` column.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct StoredProps {
    #[serde(flatten)]
    pub props: ObjectProps,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<Checksum>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<PartSummary>,
    /// The record of the customer key the bytes are sealed with (SSE-C);
    /// absent for plain bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sse_c: Option<crate::encryption::KeyRecord>,
}

/// One object row.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub size: u64,
    pub etag: String,
    pub modified_ns: i64,
    pub generation: [u8; 16],
    pub props: StoredProps,
    pub extents: Vec<Extent>,
    /// The version ID; `None` for the null version.
    pub vid: Option<String>,
    /// The version's place among its key's versions (newest highest; 0
    /// in a bucket that never had versioning).
    pub seq: i64,
}

impl Record {
    pub fn meta(&self, bucket: &str, key: &str) -> ObjectMeta {
        ObjectMeta {
            bucket: bucket.to_string(),
            key: key.to_string(),
            size: self.size,
            etag: self.etag.clone(),
            last_modified_ns: self.modified_ns,
            version: crate::hex(&self.generation),
            version_id: self.vid.clone(),
            props: self.props.props.clone(),
            checksum: self.props.checksum.clone(),
            parts: self.props.parts.clone(),
        }
    }
}

pub(crate) fn encode_extents(extents: &[Extent]) -> Vec<u8> {
    let mut out = Vec::with_capacity(extents.len() * 16);
    for e in extents {
        out.extend_from_slice(&e.blob.0.to_le_bytes());
        out.extend_from_slice(&e.size.to_le_bytes());
    }
    out
}

pub(crate) fn decode_extents(raw: &[u8]) -> Result<Vec<Extent>> {
    if !raw.len().is_multiple_of(16) {
        return Err(StoreError::Corrupt("malformed extent list".into()));
    }
    Ok(raw
        .chunks_exact(16)
        .map(|c| {
            let mut id = [0u8; 8];
            let mut size = [0u8; 8];
            id.copy_from_slice(&c[..8]);
            size.copy_from_slice(&c[8..]);
            Extent {
                blob: BlobId(i64::from_le_bytes(id)),
                size: u64::from_le_bytes(size),
            }
        })
        .collect())
}

pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

pub(crate) fn new_generation() -> [u8; 16] {
    rand::random()
}

/// The id of a bucket, or `NoSuchBucket`.
pub(crate) fn bucket_id(conn: &Connection, name: &str) -> Result<i64> {
    conn.prepare_cached("SELECT id FROM buckets WHERE name = ?1")?
        .query_row([name], |r| r.get(0))
        .optional()?
        .ok_or_else(|| StoreError::NoSuchBucket {
            bucket: name.to_string(),
        })
}

pub(crate) fn load_record(conn: &Connection, bucket: i64, key: &str) -> Result<Option<Record>> {
    let row = conn
        .prepare_cached(
            "SELECT size, etag, modified_ns, generation, props, extents, vid, seq
             FROM objects WHERE bucket = ?1 AND key = ?2",
        )?
        .query_row(params![bucket, key.as_bytes()], RawRecord::of)
        .optional()?;
    row.map(RawRecord::decode).transpose()
}

/// A record's columns as read (`size, etag, modified_ns, generation,
/// props, extents, vid, seq`, in that order), before decoding.
pub(crate) struct RawRecord {
    size: i64,
    etag: String,
    modified_ns: i64,
    generation: Vec<u8>,
    props: String,
    extents: Vec<u8>,
    vid: Option<String>,
    seq: i64,
}

impl RawRecord {
    /// Reads the eight record columns from the start of a row.
    pub(crate) fn of(r: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(RawRecord {
            size: r.get(0)?,
            etag: r.get(1)?,
            modified_ns: r.get(2)?,
            generation: r.get(3)?,
            props: r.get(4)?,
            extents: r.get(5)?,
            vid: r.get(6)?,
            seq: r.get(7)?,
        })
    }

    pub(crate) fn decode(self) -> Result<Record> {
        Ok(Record {
            size: self.size as u64,
            etag: self.etag,
            modified_ns: self.modified_ns,
            generation: self
                .generation
                .try_into()
                .map_err(|_| StoreError::Corrupt("malformed generation".into()))?,
            props: serde_json::from_str(&self.props)
                .map_err(|e| StoreError::Corrupt(format!("malformed object properties: {e}")))?,
            extents: decode_extents(&self.extents)?,
            vid: self.vid,
            seq: self.seq,
        })
    }
}

pub(crate) fn store_record(conn: &Connection, bucket: i64, key: &str, rec: &Record) -> Result<()> {
    let props = serde_json::to_string(&rec.props)
        .map_err(|e| StoreError::Corrupt(format!("cannot encode properties: {e}")))?;
    conn.prepare_cached(
        "INSERT OR REPLACE INTO objects
         (bucket, key, size, etag, modified_ns, generation, props, extents, vid, seq)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?
    .execute(params![
        bucket,
        key.as_bytes(),
        rec.size as i64,
        rec.etag,
        rec.modified_ns,
        &rec.generation[..],
        props,
        encode_extents(&rec.extents),
        rec.vid,
        rec.seq,
    ])?;
    Ok(())
}

pub(crate) fn delete_record(conn: &Connection, bucket: i64, key: &str) -> Result<()> {
    conn.prepare_cached("DELETE FROM objects WHERE bucket = ?1 AND key = ?2")?
        .execute(params![bucket, key.as_bytes()])?;
    Ok(())
}

/// Adds a new blob row with one reference. File blobs are moved into place
/// after the commit.
pub(crate) fn insert_blob(
    conn: &Connection,
    fx: &mut Effects,
    id: BlobId,
    size: u64,
    inline: Option<&[u8]>,
) -> Result<()> {
    conn.prepare_cached("INSERT INTO blobs (id, size, refs, data) VALUES (?1, ?2, 1, ?3)")?
        .execute(params![id.0, size as i64, inline])?;
    if inline.is_none() {
        fx.publish.push(id);
    }
    Ok(())
}

/// One more reference to each extent's blob (a copy shares bytes).
pub(crate) fn retain(conn: &Connection, extents: &[Extent]) -> Result<()> {
    let mut st = conn.prepare_cached("UPDATE blobs SET refs = refs + 1 WHERE id = ?1")?;
    for e in extents {
        if st.execute([e.blob.0])? != 1 {
            return Err(StoreError::Corrupt(format!("blob {} is missing", e.blob.0)));
        }
    }
    Ok(())
}

/// Drops one reference to each extent's blob; a blob left with none is
/// deleted (its file after the commit, and again at open after a crash).
pub(crate) fn release(conn: &Connection, fx: &mut Effects, extents: &[Extent]) -> Result<()> {
    let mut dec = conn.prepare_cached(
        "UPDATE blobs SET refs = refs - 1 WHERE id = ?1 RETURNING refs, data IS NULL",
    )?;
    let mut del = conn.prepare_cached("DELETE FROM blobs WHERE id = ?1")?;
    let mut dead = conn.prepare_cached("INSERT OR IGNORE INTO dead_blobs (id) VALUES (?1)")?;
    for e in extents {
        let (refs, is_file): (i64, bool) = dec
            .query_row([e.blob.0], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?
            .ok_or_else(|| StoreError::Corrupt(format!("blob {} is missing", e.blob.0)))?;
        if refs <= 0 {
            del.execute([e.blob.0])?;
            if is_file {
                dead.execute([e.blob.0])?;
                fx.unlink.push(e.blob);
            }
        }
    }
    Ok(())
}

pub(crate) fn load_usage(conn: &Connection) -> Result<Usage> {
    Ok(conn
        .prepare_cached("SELECT bytes, objects FROM usage WHERE id = 1")?
        .query_row([], |r| {
            Ok(Usage {
                bytes: r.get::<_, i64>(0)? as u64,
                objects: r.get::<_, i64>(1)? as u64,
            })
        })?)
}

/// Usage that counts against a store's quotas but is held outside it: the
/// files a workspace view serves beside its private store. Its owner sets
/// and changes it through [`crate::Store::charge_outside`] and friends, which
/// run as write jobs, so every quota check sees the writes before it.
#[derive(Debug, Default)]
pub(crate) struct OutsideUsage {
    bytes: AtomicU64,
    objects: AtomicU64,
}

impl OutsideUsage {
    pub(crate) fn get(&self) -> Usage {
        // Only write jobs change it, one at a time, under the writer's lock.
        Usage {
            bytes: self.bytes.load(Ordering::Relaxed),
            objects: self.objects.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn set(&self, usage: Usage) {
        self.bytes.store(usage.bytes, Ordering::Relaxed);
        self.objects.store(usage.objects, Ordering::Relaxed);
    }
}

/// The quotas a write is checked against, and the usage outside the store
/// that counts with the store's own.
#[derive(Debug, Clone)]
pub(crate) struct Quota {
    pub max_bytes: Option<u64>,
    pub max_objects: Option<u64>,
    pub outside: Arc<OutsideUsage>,
}

impl Quota {
    /// Refuses growth that would take `stored + outside` past a limit.
    fn check(&self, stored: Usage, bytes: i64, objects: i64) -> Result<()> {
        let outside = self.outside.get();
        let new_bytes = (stored.bytes + outside.bytes) as i64 + bytes;
        let new_objects = (stored.objects + outside.objects) as i64 + objects;
        if let Some(max) = self.max_bytes {
            if bytes > 0 && new_bytes > max as i64 {
                return Err(StoreError::QuotaExceeded {
                    reason: format!("storing would use {new_bytes} bytes; the limit is {max}"),
                });
            }
        }
        if let Some(max) = self.max_objects {
            if objects > 0 && new_objects > max as i64 {
                return Err(StoreError::QuotaExceeded {
                    reason: format!("storing would make {new_objects} objects; the limit is {max}"),
                });
            }
        }
        Ok(())
    }
}

/// Applies a usage change after checking it against the quotas. A change
/// that does not grow a counter is always allowed.
pub(crate) fn charge(conn: &Connection, quota: &Quota, bytes: i64, objects: i64) -> Result<()> {
    let usage = load_usage(conn)?;
    quota.check(usage, bytes, objects)?;
    let new_bytes = usage.bytes as i64 + bytes;
    let new_objects = usage.objects as i64 + objects;
    if new_bytes < 0 || new_objects < 0 {
        return Err(StoreError::Corrupt("usage would become negative".into()));
    }
    conn.prepare_cached("UPDATE usage SET bytes = ?1, objects = ?2 WHERE id = 1")?
        .execute(params![new_bytes, new_objects])?;
    Ok(())
}

/// Changes the outside usage by a delta after checking growth against the
/// quotas with the store's own usage (`checked`), or unconditionally.
/// Returns the usage it replaced, to undo the change if the commit fails.
pub(crate) fn charge_outside(
    conn: &Connection,
    quota: &Quota,
    bytes: i64,
    objects: i64,
    checked: bool,
) -> Result<Usage> {
    if checked {
        quota.check(load_usage(conn)?, bytes, objects)?;
    }
    let before = quota.outside.get();
    // Clamped at zero: the owner's count can only be stale, not wrong in
    // sign, and a stale count is corrected by its next `set`.
    let apply = |v: u64, d: i64| (v as i64 + d).max(0) as u64;
    quota.outside.set(Usage {
        bytes: apply(before.bytes, bytes),
        objects: apply(before.objects, objects),
    });
    Ok(before)
}

/// Compares an S3 entity tag with a stored one (quotes and `W/` optional).
pub(crate) fn etag_matches(given: &str, stored: &str) -> bool {
    let norm = |s: &str| {
        let s = s.trim();
        let s = s.strip_prefix("W/").unwrap_or(s);
        s.trim_matches('"').to_string()
    };
    given.trim() == "*" || norm(given) == norm(stored)
}
