//! Versioning inside a write or read transaction: a bucket's state, version
//! IDs, and the one way every write installs a new current version.
//!
//! The current version of a key, when it is not a delete marker, is its row
//! in `objects` (so unversioned reads, listings and writes are what they
//! were). Every other version — noncurrent ones and every delete marker,
//! the latest one included — is a row of `versions`, keyed by `(bucket,
//! key, seq)`; `seq` orders a key's versions (newest highest) and the
//! current row's `seq` is the highest of its key. A version owns the
//! references to its blobs and counts in usage (bytes, and one object
//! unless it is a delete marker) until it is deleted by its ID.
//!
//! A version ID is 32 hex digits: the version's `seq` (16) and 64 random
//! bits (16), so a version's place is known from its ID alone (a paging
//! marker whose version is gone still says where to resume). The null
//! version (written while a bucket is unversioned or suspended) has no ID:
//! `vid` is NULL and S3 calls it `"null"`.

use rusqlite::{params, Connection, OptionalExtension};

use crate::db::Effects;
use crate::error::{Result, StoreError};
use crate::lock::{self, LockConfig};
use crate::model::{Deleted, ObjectMeta, Versioning};
use crate::record::{self, Quota, RawRecord, Record, StoredProps};

/// S3's name of the null version.
pub(crate) const NULL: &str = "null";

/// A bucket as a write sees it: its row id, versioning state and object
/// lock configuration (`None`: created without object lock).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bucket {
    pub id: i64,
    pub state: Versioning,
    pub lock: Option<LockConfig>,
}

/// Looks a bucket up with its versioning state, or `no_such_bucket`.
pub(crate) fn bucket(conn: &Connection, name: &str) -> Result<Bucket> {
    let row: Option<(i64, i64, Option<String>)> = conn
        .prepare_cached("SELECT id, versioning, object_lock FROM buckets WHERE name = ?1")?
        .query_row([name], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let (id, v, lock) = row.ok_or_else(|| StoreError::NoSuchBucket {
        bucket: name.to_string(),
    })?;
    let state = Versioning::from_column(v)
        .ok_or_else(|| StoreError::Corrupt(format!("bucket {name} has versioning state {v}")))?;
    let lock = lock::from_column(name, lock)?;
    Ok(Bucket { id, state, lock })
}

/// A version named by a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum VersionRef {
    /// `"null"`.
    Null,
    /// One of our IDs, with the place it encodes.
    Id { vid: String, seq: i64 },
}

impl VersionRef {
    /// Parses a client's version ID; anything we never issue is
    /// `invalid_version_id`.
    pub(crate) fn parse(s: &str) -> Result<Self> {
        if s == NULL {
            return Ok(Self::Null);
        }
        let bad = || StoreError::InvalidVersionId {
            version_id: s.to_string(),
        };
        let lower_hex = |c: u8| c.is_ascii_digit() || (b'a'..=b'f').contains(&c);
        if s.len() != 32 || !s.bytes().all(lower_hex) {
            return Err(bad());
        }
        let seq = i64::from_str_radix(&s[..16], 16).map_err(|_| bad())?;
        Ok(Self::Id {
            vid: s.to_string(),
            seq,
        })
    }

    /// Whether a version with this `vid` is the one named.
    fn names(&self, vid: Option<&str>) -> bool {
        match (self, vid) {
            (Self::Null, None) => true,
            (Self::Id { vid: want, .. }, Some(v)) => want == v,
            _ => false,
        }
    }

    /// The ID as S3 spells it.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            Self::Null => NULL,
            Self::Id { vid, .. } => vid,
        }
    }
}

/// S3's spelling of a stored `vid`.
pub(crate) fn spelled(vid: Option<&str>) -> String {
    vid.unwrap_or(NULL).to_string()
}

/// A new version ID for the version at `seq`.
fn new_vid(seq: i64) -> String {
    format!("{seq:016x}{:016x}", rand::random::<u64>())
}

/// Object metadata as a version-aware caller sees it: `version_id` is set
/// (`"null"` for the null version) once the bucket has had versioning.
pub(crate) fn meta_in(rec: &Record, b: Bucket, bucket: &str, key: &str) -> ObjectMeta {
    let mut meta = rec.meta(bucket, key);
    if b.state != Versioning::Unversioned {
        meta.version_id = Some(spelled(rec.vid.as_deref()));
    }
    meta
}

/// The `seq` a new version of `key` takes: above every version it has.
fn next_seq(conn: &Connection, b: i64, key: &str, current: Option<&Record>) -> Result<i64> {
    let top: Option<i64> = conn
        .prepare_cached("SELECT max(seq) FROM versions WHERE bucket = ?1 AND key = ?2")?
        .query_row(params![b, key.as_bytes()], |r| r.get(0))?;
    let cur = current.map_or(0, |c| c.seq);
    Ok(top.unwrap_or(0).max(cur) + 1)
}

/// A row of `versions`: a noncurrent version or a delete marker.
pub(crate) struct Version {
    pub rec: Record,
    pub marker: bool,
}

const VERSION_COLUMNS: &str =
    "size, etag, modified_ns, generation, props, extents, vid, seq, marker";

fn version_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<(RawRecord, bool)> {
    Ok((RawRecord::of(r)?, r.get(8)?))
}

fn decode(row: Option<(RawRecord, bool)>) -> Result<Option<Version>> {
    row.map(|(raw, marker)| {
        Ok(Version {
            rec: raw.decode()?,
            marker,
        })
    })
    .transpose()
}

/// The newest row of `versions` for `key`.
pub(crate) fn newest(conn: &Connection, b: i64, key: &str) -> Result<Option<Version>> {
    let sql = format!(
        "SELECT {VERSION_COLUMNS} FROM versions WHERE bucket = ?1 AND key = ?2
         ORDER BY seq DESC LIMIT 1"
    );
    decode(
        conn.prepare_cached(&sql)?
            .query_row(params![b, key.as_bytes()], version_of)
            .optional()?,
    )
}

/// The row of `versions` a client's version ID names.
pub(crate) fn find(
    conn: &Connection,
    b: i64,
    key: &str,
    v: &VersionRef,
) -> Result<Option<Version>> {
    let row = match v {
        VersionRef::Null => {
            let sql = format!(
                "SELECT {VERSION_COLUMNS} FROM versions
                 WHERE bucket = ?1 AND key = ?2 AND vid IS NULL"
            );
            conn.prepare_cached(&sql)?
                .query_row(params![b, key.as_bytes()], version_of)
                .optional()?
        }
        VersionRef::Id { vid, seq } => {
            let sql = format!(
                "SELECT {VERSION_COLUMNS} FROM versions
                 WHERE bucket = ?1 AND key = ?2 AND seq = ?3 AND vid = ?4"
            );
            conn.prepare_cached(&sql)?
                .query_row(params![b, key.as_bytes(), seq, vid], version_of)
                .optional()?
        }
    };
    decode(row)
}

fn insert_version(conn: &Connection, b: i64, key: &str, rec: &Record, marker: bool) -> Result<()> {
    let props = serde_json::to_string(&rec.props)
        .map_err(|e| StoreError::Corrupt(format!("cannot encode properties: {e}")))?;
    conn.prepare_cached(
        "INSERT INTO versions
         (bucket, key, seq, vid, marker, size, etag, modified_ns, generation, props, extents)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?
    .execute(params![
        b,
        key.as_bytes(),
        rec.seq,
        rec.vid,
        marker,
        rec.size as i64,
        rec.etag,
        rec.modified_ns,
        &rec.generation[..],
        props,
        record::encode_extents(&rec.extents),
    ])?;
    Ok(())
}

fn delete_version_row(conn: &Connection, b: i64, key: &str, seq: i64) -> Result<()> {
    conn.prepare_cached("DELETE FROM versions WHERE bucket = ?1 AND key = ?2 AND seq = ?3")?
        .execute(params![b, key.as_bytes(), seq])?;
    Ok(())
}

/// Removes a key's null version wherever it is (the current row `current`
/// or a row of `versions`), dropping its blob references. Returns the
/// bytes and objects it freed, and whether it was the current row.
fn drop_null(
    conn: &Connection,
    fx: &mut Effects,
    b: i64,
    key: &str,
    current: Option<&Record>,
) -> Result<(i64, i64, bool)> {
    if let Some(cur) = current.filter(|c| c.vid.is_none()) {
        record::delete_record(conn, b, key)?;
        record::release(conn, fx, &cur.extents)?;
        return Ok((cur.size as i64, 1, true));
    }
    let Some(old) = find(conn, b, key, &VersionRef::Null)? else {
        return Ok((0, 0, false));
    };
    delete_version_row(conn, b, key, old.rec.seq)?;
    record::release(conn, fx, &old.rec.extents)?;
    Ok((old.rec.size as i64, i64::from(!old.marker), false))
}

/// Makes `rec` the current version of `key` in bucket `b`, whose current
/// row was `old` (loaded by the caller, which checked its conditions on
/// it). `rec`'s blob references must already be taken. Usage grows by
/// `rec`'s size, checked against the quotas, less what the write replaces:
///
/// - unversioned: `old` is replaced (its references dropped);
/// - enabled: `old` becomes a noncurrent version; `rec` gets a new ID;
/// - suspended: `rec` is the null version; the key's old null version
///   (current or not) is replaced, a current `old` with an ID is kept as
///   a noncurrent version.
pub(crate) fn install(
    conn: &Connection,
    fx: &mut Effects,
    quota: &Quota,
    b: Bucket,
    key: &str,
    old: Option<Record>,
    rec: &mut Record,
) -> Result<()> {
    let size = rec.size as i64;
    lock::on_write(b.lock, &mut rec.props.props.lock, record::now_ns())?;
    match b.state {
        Versioning::Unversioned => {
            let old_size = old.as_ref().map_or(0, |o| o.size as i64);
            record::charge(conn, quota, size - old_size, i64::from(old.is_none()))?;
            rec.vid = None;
            rec.seq = 0;
            record::store_record(conn, b.id, key, rec)?;
            if let Some(old) = old {
                record::release(conn, fx, &old.extents)?;
            }
        }
        Versioning::Enabled => {
            record::charge(conn, quota, size, 1)?;
            rec.seq = next_seq(conn, b.id, key, old.as_ref())?;
            rec.vid = Some(new_vid(rec.seq));
            if let Some(old) = &old {
                insert_version(conn, b.id, key, old, false)?;
            }
            record::store_record(conn, b.id, key, rec)?;
        }
        Versioning::Suspended => {
            rec.seq = next_seq(conn, b.id, key, old.as_ref())?;
            rec.vid = None;
            let (bytes, objects, was_current) = drop_null(conn, fx, b.id, key, old.as_ref())?;
            record::charge(conn, quota, size - bytes, 1 - objects)?;
            if let Some(old) = old.filter(|_| !was_current) {
                insert_version(conn, b.id, key, &old, false)?;
            }
            record::store_record(conn, b.id, key, rec)?;
        }
    }
    crate::fault::point("store-version-installed");
    Ok(())
}

/// A delete without a version ID: removes the object of an unversioned
/// bucket; in a versioned one adds a delete marker as the latest version
/// (the current object, if any, becoming noncurrent; when suspended the
/// marker is the null version and replaces the old null version).
pub(crate) fn delete_latest(
    conn: &Connection,
    fx: &mut Effects,
    quota: &Quota,
    b: Bucket,
    key: &str,
) -> Result<Deleted> {
    let old = record::load_record(conn, b.id, key)?;
    if b.state == Versioning::Unversioned {
        let Some(old) = old else {
            return Ok(Deleted::default());
        };
        record::delete_record(conn, b.id, key)?;
        record::release(conn, fx, &old.extents)?;
        record::charge(conn, quota, -(old.size as i64), -1)?;
        return Ok(Deleted {
            existed: true,
            ..Deleted::default()
        });
    }
    let seq = next_seq(conn, b.id, key, old.as_ref())?;
    let mut kept = old;
    let vid = if b.state == Versioning::Enabled {
        Some(new_vid(seq))
    } else {
        let (bytes, objects, was_current) = drop_null(conn, fx, b.id, key, kept.as_ref())?;
        record::charge(conn, quota, -bytes, -objects)?;
        if was_current {
            kept = None;
        }
        None
    };
    if let Some(old) = kept {
        record::delete_record(conn, b.id, key)?;
        insert_version(conn, b.id, key, &old, false)?;
    }
    let marker = Record {
        size: 0,
        etag: String::new(),
        modified_ns: record::now_ns(),
        generation: record::new_generation(),
        props: StoredProps::default(),
        extents: Vec::new(),
        vid,
        seq,
    };
    insert_version(conn, b.id, key, &marker, true)?;
    crate::fault::point("store-version-marked");
    Ok(Deleted {
        version_id: Some(spelled(marker.vid.as_deref())),
        delete_marker: true,
        existed: true,
    })
}

/// Deletes one version (or delete marker) by its ID, for good. When the
/// current version goes, the newest remaining one becomes current (a
/// delete marker stays where it is: the key then reads as deleted). A
/// version that is not there deletes nothing (`existed: false`). A version
/// under object lock is `object_locked` (GOVERNANCE retention yields to
/// `bypass_governance`), checked here, in the deleting transaction.
pub(crate) fn delete_version(
    conn: &Connection,
    fx: &mut Effects,
    quota: &Quota,
    b: Bucket,
    key: &str,
    v: &VersionRef,
    bypass_governance: bool,
) -> Result<Deleted> {
    let spelled_id = (b.state != Versioning::Unversioned).then(|| v.as_str().to_string());
    let current = record::load_record(conn, b.id, key)?;
    let refuse = |rec: &Record| match rec
        .props
        .props
        .lock
        .refusal(record::now_ns(), bypass_governance)
    {
        Some(reason) => Err(StoreError::ObjectLocked {
            reason: reason.to_string(),
        }),
        None => Ok(()),
    };
    if let Some(cur) = current.as_ref().filter(|c| v.names(c.vid.as_deref())) {
        refuse(cur)?;
        record::delete_record(conn, b.id, key)?;
        record::release(conn, fx, &cur.extents)?;
        record::charge(conn, quota, -(cur.size as i64), -1)?;
        promote(conn, b.id, key)?;
        return Ok(Deleted {
            version_id: spelled_id,
            delete_marker: false,
            existed: true,
        });
    }
    let Some(old) = find(conn, b.id, key, v)? else {
        return Ok(Deleted {
            version_id: spelled_id,
            ..Deleted::default()
        });
    };
    refuse(&old.rec)?;
    delete_version_row(conn, b.id, key, old.rec.seq)?;
    record::release(conn, fx, &old.rec.extents)?;
    if !old.marker {
        record::charge(conn, quota, -(old.rec.size as i64), -1)?;
    }
    if current.is_none() {
        promote(conn, b.id, key)?;
    }
    crate::fault::point("store-version-deleted");
    Ok(Deleted {
        version_id: spelled_id,
        delete_marker: old.marker,
        existed: true,
    })
}

/// Makes the newest noncurrent version of a key without a current row its
/// current version, unless it is a delete marker.
fn promote(conn: &Connection, b: i64, key: &str) -> Result<()> {
    let Some(top) = newest(conn, b, key)? else {
        return Ok(());
    };
    if top.marker {
        return Ok(());
    }
    delete_version_row(conn, b, key, top.rec.seq)?;
    record::store_record(conn, b, key, &top.rec)
}

/// Rewrites the properties of the version of `key` at `rec.seq`, the
/// current row or a row of `versions` (bytes, blobs and usage unchanged).
pub(crate) fn store_props(conn: &Connection, b: i64, key: &str, rec: &Record) -> Result<()> {
    let props = serde_json::to_string(&rec.props)
        .map_err(|e| StoreError::Corrupt(format!("cannot encode properties: {e}")))?;
    let args = params![b, key.as_bytes(), rec.seq, props];
    let n = conn
        .prepare_cached(
            "UPDATE objects SET props = ?4 WHERE bucket = ?1 AND key = ?2 AND seq = ?3",
        )?
        .execute(args)?;
    if n == 0 {
        conn.prepare_cached(
            "UPDATE versions SET props = ?4 WHERE bucket = ?1 AND key = ?2 AND seq = ?3",
        )?
        .execute(args)?;
    }
    Ok(())
}

/// What a read of `key` (at version `v`, or the latest) finds: the
/// version's record, or the refusal S3 gives (`no_such_key`, also with a
/// delete marker as the latest version; `no_such_version`; a delete marker
/// named by its ID).
pub(crate) fn lookup(
    conn: &Connection,
    b: Bucket,
    bucket: &str,
    key: &str,
    v: Option<&VersionRef>,
) -> Result<Record> {
    let current = record::load_record(conn, b.id, key)?;
    let Some(v) = v else {
        if let Some(cur) = current {
            return Ok(cur);
        }
        if b.state != Versioning::Unversioned {
            if let Some(top) = newest(conn, b.id, key)?.filter(|t| t.marker) {
                return Err(StoreError::KeyDeleted {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                    version_id: spelled(top.rec.vid.as_deref()),
                });
            }
        }
        return Err(crate::error::no_such_key(bucket, key));
    };
    if let Some(cur) = current.filter(|c| v.names(c.vid.as_deref())) {
        return Ok(cur);
    }
    match find(conn, b.id, key, v)? {
        Some(found) if found.marker => Err(StoreError::DeleteMarkerVersion {
            bucket: bucket.to_string(),
            key: key.to_string(),
            version_id: v.as_str().to_string(),
        }),
        Some(found) => Ok(found.rec),
        None => Err(StoreError::NoSuchVersion {
            bucket: bucket.to_string(),
            key: key.to_string(),
            version_id: v.as_str().to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_ids_encode_their_place_and_refuse_strangers() {
        let vid = new_vid(0x2a);
        assert_eq!(vid.len(), 32);
        assert_eq!(
            VersionRef::parse(&vid).unwrap(),
            VersionRef::Id {
                vid: vid.clone(),
                seq: 0x2a
            }
        );
        assert_eq!(VersionRef::parse("null").unwrap(), VersionRef::Null);
        for bad in [
            "",
            "NULL",
            "abc",
            &vid.to_uppercase(),
            &format!("{vid}0"),
            "ffffffffffffffff0000000000000000",
        ] {
            assert!(
                matches!(
                    VersionRef::parse(bad),
                    Err(StoreError::InvalidVersionId { .. })
                ),
                "{bad:?} accepted"
            );
        }
    }
}
