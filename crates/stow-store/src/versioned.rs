//! The versioning API of [`Store`]: a bucket's versioning state, reads and
//! deletes by version ID, and ListObjectVersions. The rules live in
//! `versions.rs`; this module validates, opens the transaction and pages.

use rusqlite::{params, Connection};

use crate::encryption::CustomerKey;
use crate::error::{Result, StoreError};
use crate::list::successor;
use crate::model::*;
use crate::store::{ObjectRead, Store};
use crate::versions::{self, VersionRef};
use crate::{record, validate};

impl Store {
    /// A bucket's versioning state, or `no_such_bucket`.
    pub fn bucket_versioning(&self, bucket: &str) -> Result<Versioning> {
        validate::bucket_name(bucket)?;
        self.inner
            .db
            .read(|conn| Ok(versions::bucket(conn, bucket)?.state))
    }

    /// Enables or suspends versioning of a bucket. A bucket that has had
    /// versioning never becomes unversioned again (`invalid_argument`);
    /// asking an unversioned one to stay so changes nothing.
    pub fn set_bucket_versioning(&self, bucket: &str, state: Versioning) -> Result<()> {
        validate::bucket_name(bucket)?;
        let bucket = bucket.to_string();
        self.inner.db.write(move |conn, _| {
            let b = versions::bucket(conn, &bucket)?;
            if state == Versioning::Suspended && b.lock.is_some() {
                return Err(StoreError::InvalidBucketState {
                    reason: "An Object Lock configuration is present on this bucket, so the \
                             versioning state cannot be changed."
                        .into(),
                });
            }
            if state == Versioning::Unversioned {
                if b.state != Versioning::Unversioned {
                    return Err(StoreError::InvalidArgument {
                        reason: format!(
                            "bucket {bucket} has had versioning; it can be suspended, not removed"
                        ),
                    });
                }
                return Ok(());
            }
            conn.prepare_cached("UPDATE buckets SET versioning = ?2 WHERE id = ?1")?
                .execute(params![b.id, state.column()])?;
            Ok(())
        })
    }

    /// Describes `version` of an object (`"null"` for the null version,
    /// `None` for the latest): `no_such_key` (also when the latest version
    /// is a delete marker: `KeyDeleted`), `no_such_version`, or
    /// `delete_marker` when the version named is one.
    pub fn head_object_version(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
    ) -> Result<ObjectMeta> {
        validate::bucket_name(bucket)?;
        validate::object_key(key)?;
        let version = version.map(VersionRef::parse).transpose()?;
        self.inner.db.read(|conn| {
            let b = versions::bucket(conn, bucket)?;
            let rec = versions::lookup(conn, b, bucket, key, version.as_ref())?;
            Ok(versions::meta_in(&rec, b, bucket, key))
        })
    }

    /// Opens `version` of an object (see [`Store::head_object_version`]),
    /// whole, one byte range, or one part.
    pub fn get_object_version(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        range: Option<ByteRange>,
        part: Option<u32>,
    ) -> Result<ObjectRead> {
        self.get_object_with(bucket, key, version, range, part, None)
    }

    /// [`Store::get_object_version`] of an object written with a customer
    /// key (SSE-C): `sse` must be that key; `None` reads a plain object.
    pub fn get_object_keyed(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        range: Option<ByteRange>,
        part: Option<u32>,
        sse: Option<&CustomerKey>,
    ) -> Result<ObjectRead> {
        self.get_object_with(bucket, key, version, range, part, sse)
    }

    /// [`Store::head_object_version`], refused unless `sse` is the
    /// customer key the object was written with (none for a plain
    /// object), as S3's HeadObject is.
    pub fn head_object_keyed(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        sse: Option<&CustomerKey>,
    ) -> Result<ObjectMeta> {
        validate::bucket_name(bucket)?;
        validate::object_key(key)?;
        let version = version.map(VersionRef::parse).transpose()?;
        self.inner.db.read(|conn| {
            let b = versions::bucket(conn, bucket)?;
            let rec = versions::lookup(conn, b, bucket, key, version.as_ref())?;
            crate::encryption::check_key(rec.props.sse_c.as_ref(), sse)?;
            Ok(versions::meta_in(&rec, b, bucket, key))
        })
    }

    /// Deletes an object as S3 does: without a version ID the latest
    /// (removing the object of an unversioned bucket, adding a delete
    /// marker in a versioned one); with one, that version or delete marker
    /// for good. Works on a full disk like [`Store::delete_object`].
    pub fn delete_object_version(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
    ) -> Result<Deleted> {
        self.delete_object_version_bypassing(bucket, key, version, false)
    }

    /// [`Store::delete_object_version`], where a version under object lock
    /// is refused with `object_locked` unless its retention is GOVERNANCE
    /// and `bypass_governance` is set (a legal hold or COMPLIANCE
    /// retention in force always refuses). A delete without a version ID
    /// only adds a delete marker and is never refused.
    pub fn delete_object_version_bypassing(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        bypass_governance: bool,
    ) -> Result<Deleted> {
        validate::bucket_name(bucket)?;
        validate::object_key(key)?;
        let version = version.map(VersionRef::parse).transpose()?;
        crate::store::reserve::freeing(&self.inner.reserve, || {
            let (bucket, key, version) = (bucket.to_string(), key.to_string(), version.clone());
            let quota = self.inner.quota();
            self.inner.db.write(move |conn, fx| {
                let b = versions::bucket(conn, &bucket)?;
                match &version {
                    None => versions::delete_latest(conn, fx, &quota, b, &key),
                    Some(v) => {
                        versions::delete_version(conn, fx, &quota, b, &key, v, bypass_governance)
                    }
                }
            })
        })
    }

    /// Lists every version and delete marker of a bucket: keys in byte
    /// order, each key's versions newest first, paged by key and version
    /// markers, rolled up by a delimiter like [`Store::list_objects`].
    pub fn list_object_versions(&self, bucket: &str, q: &VersionQuery) -> Result<VersionPage> {
        validate::bucket_name(bucket)?;
        if q.delimiter.as_deref() == Some("") {
            return Err(StoreError::InvalidArgument {
                reason: "delimiter must not be empty".into(),
            });
        }
        let start = match (&q.key_marker, &q.version_id_marker) {
            (None, Some(_)) => {
                return Err(StoreError::InvalidArgument {
                    reason: "a version-id marker needs a key marker".into(),
                })
            }
            (Some(k), Some(v)) if !v.is_empty() => Some((k.clone(), Some(VersionRef::parse(v)?))),
            (Some(k), _) if !k.is_empty() => Some((k.clone(), None)),
            _ => None,
        };
        self.inner.db.read(|conn| {
            let b = record::bucket_id(conn, bucket)?;
            list(conn, b, q, start)
        })
    }
}

/// Where a version listing resumes.
#[derive(Debug, Clone)]
enum Pos {
    /// At the first version of the first key `>=` this one.
    From(Vec<u8>),
    /// At the first version of the first key `>` this one.
    AfterKey(Vec<u8>),
    /// At the versions of this key older than `seq`, then the next keys.
    InKey(Vec<u8>, i64),
}

/// One listed row: a version of `key`.
struct Row {
    key: Vec<u8>,
    seq: i64,
    vid: Option<String>,
    marker: bool,
    size: i64,
    etag: String,
    modified_ns: i64,
}

const BATCH: i64 = 1000;

fn row_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok(Row {
        key: r.get(0)?,
        seq: r.get(1)?,
        vid: r.get(2)?,
        marker: r.get(3)?,
        size: r.get(4)?,
        etag: r.get(5)?,
        modified_ns: r.get(6)?,
    })
}

/// Up to `limit` versions from `pos`, in listing order, below `upper`.
fn fetch(
    conn: &Connection,
    b: i64,
    pos: &Pos,
    upper: Option<&[u8]>,
    limit: i64,
) -> Result<Vec<Row>> {
    // Both arms come in (key, seq DESC) order from their primary keys, so
    // SQLite merges them rather than sorting.
    const MERGED: &str = "SELECT key, seq, vid, 0, size, etag, modified_ns FROM objects
             WHERE bucket = ?1 AND key OP ?2 AND (?3 IS NULL OR key < ?3)
         UNION ALL
         SELECT key, seq, vid, marker, size, etag, modified_ns FROM versions
             WHERE bucket = ?1 AND key OP ?2 AND (?3 IS NULL OR key < ?3)
         ORDER BY 1, 2 DESC LIMIT ?4";
    let merged = |op: &str, key: &[u8], limit: i64| -> Result<Vec<Row>> {
        let sql = MERGED.replace("OP", op);
        let mut st = conn.prepare_cached(&sql)?;
        let rows = st.query_map(params![b, key, upper, limit], row_of)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    };
    match pos {
        Pos::From(k) => merged(">=", k, limit),
        Pos::AfterKey(k) => merged(">", k, limit),
        Pos::InKey(k, seq) => {
            // Both tables: the key's current version may be older than the
            // marker too (its newer versions deleted since the last page
            // promoted it).
            let mut st = conn.prepare_cached(
                "SELECT key, seq, vid, 0, size, etag, modified_ns FROM objects
                     WHERE bucket = ?1 AND key = ?2 AND seq < ?3
                 UNION ALL
                 SELECT key, seq, vid, marker, size, etag, modified_ns FROM versions
                     WHERE bucket = ?1 AND key = ?2 AND seq < ?3
                 ORDER BY 2 DESC LIMIT ?4",
            )?;
            let mut out: Vec<Row> = st
                .query_map(params![b, k, seq, limit], row_of)?
                .collect::<rusqlite::Result<_>>()?;
            let left = limit - out.len() as i64;
            if left > 0 {
                out.extend(merged(">", k, left)?);
            }
            Ok(out)
        }
    }
}

/// The seq a `version-id-marker` stands for in `key` (the null version's is
/// looked up; a missing null version resumes after the whole key).
fn marker_seq(conn: &Connection, b: i64, key: &str, v: &VersionRef) -> Result<Option<i64>> {
    match v {
        VersionRef::Id { seq, .. } => Ok(Some(*seq)),
        VersionRef::Null => {
            if let Some(cur) = record::load_record(conn, b, key)?.filter(|c| c.vid.is_none()) {
                return Ok(Some(cur.seq));
            }
            Ok(versions::find(conn, b, key, v)?.map(|f| f.rec.seq))
        }
    }
}

fn list(
    conn: &Connection,
    b: i64,
    q: &VersionQuery,
    start: Option<(String, Option<VersionRef>)>,
) -> Result<VersionPage> {
    let mut page = VersionPage::default();
    if q.max_keys == 0 {
        return Ok(page);
    }
    let prefix = q.prefix.as_bytes();
    let upper = successor(prefix);
    let delim = q.delimiter.as_deref().map(str::as_bytes);
    // Keys at or before the key marker are behind us (a version marker
    // resumes inside its key).
    let (after, mut pos, mut last_key) = match &start {
        None => (Vec::new(), Pos::From(prefix.to_vec()), None),
        Some((k, v)) => {
            let seq = match v {
                Some(v) => marker_seq(conn, b, k, v)?,
                None => None,
            };
            let kb = k.as_bytes().to_vec();
            let pos = match seq {
                Some(seq) => Pos::InKey(kb.clone(), seq),
                None if kb.as_slice() < prefix => Pos::From(prefix.to_vec()),
                None => Pos::AfterKey(kb.clone()),
            };
            (kb, pos, None)
        }
    };
    // Resuming inside a key: its first version listed here is the latest
    // only if nothing newer is left (the marker's version, and all newer
    // ones, deleted since the last page).
    let resumed_newest = match &pos {
        Pos::InKey(k, _) => Some((k.clone(), newest_seq(conn, b, k)?)),
        _ => None,
    };
    let full = |p: &VersionPage| p.versions.len() + p.common_prefixes.len() >= q.max_keys;
    'scan: loop {
        let rows = fetch(conn, b, &pos, upper.as_deref(), BATCH)?;
        let got = rows.len() as i64;
        let mut moved = false;
        for row in rows {
            if !row.key.starts_with(prefix) {
                // Only a version marker's own key, before the prefix, can
                // sit outside it.
                pos = Pos::From(prefix.to_vec());
                moved = true;
                break;
            }
            let rolled = delim.and_then(|d| {
                let rest = &row.key[prefix.len()..];
                rest.windows(d.len())
                    .position(|w| w == d)
                    .map(|i| row.key[..prefix.len() + i + d.len()].to_vec())
            });
            if let Some(cp) = rolled {
                if cp > after {
                    if full(&page) {
                        page.is_truncated = true;
                        break 'scan;
                    }
                    page.common_prefixes.push(utf8(cp.clone())?);
                }
                pos = match successor(&cp) {
                    Some(s) => Pos::From(s),
                    None => break 'scan,
                };
                last_key = None;
                moved = true;
                break;
            }
            if full(&page) {
                page.is_truncated = true;
                break 'scan;
            }
            let is_latest = last_key.as_deref() != Some(row.key.as_slice())
                && resumed_newest
                    .as_ref()
                    .is_none_or(|(k, newest)| *k != row.key || *newest == Some(row.seq));
            page.versions.push(VersionEntry {
                key: utf8(row.key.clone())?,
                version_id: versions::spelled(row.vid.as_deref()),
                is_latest,
                delete_marker: row.marker,
                size: row.size as u64,
                etag: row.etag,
                last_modified_ns: row.modified_ns,
            });
            pos = Pos::InKey(row.key.clone(), row.seq);
            last_key = Some(row.key);
            moved = true;
        }
        if !moved || (got < BATCH && !matches!(pos, Pos::From(_))) {
            break;
        }
    }
    if page.is_truncated {
        let last_version = page.versions.last();
        let last_prefix = page.common_prefixes.last();
        match (last_version, last_prefix) {
            (Some(v), p) if p.is_none_or(|p| v.key.as_bytes() > p.as_bytes()) => {
                page.next_key_marker = Some(v.key.clone());
                page.next_version_id_marker = Some(v.version_id.clone());
            }
            (_, p) => page.next_key_marker = p.cloned(),
        }
    }
    Ok(page)
}

/// The seq of `key`'s newest version or delete marker, if any.
fn newest_seq(conn: &Connection, b: i64, key: &[u8]) -> Result<Option<i64>> {
    let mut st = conn.prepare_cached(
        "SELECT max(seq) FROM (
             SELECT seq FROM objects WHERE bucket = ?1 AND key = ?2
             UNION ALL
             SELECT seq FROM versions WHERE bucket = ?1 AND key = ?2)",
    )?;
    Ok(st.query_row(params![b, key], |r| r.get(0))?)
}

fn utf8(key: Vec<u8>) -> Result<String> {
    String::from_utf8(key).map_err(|_| StoreError::Corrupt("stored key is not UTF-8".into()))
}
