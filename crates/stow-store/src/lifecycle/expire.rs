//! Expiry: [`Store::expire_due`] removes what the buckets' rules say is
//! due, through the store's ordinary delete paths.
//!
//! Each bucket with rules is read a page of keys at a time in a read
//! snapshot; the keys with something due are then handled in small write
//! transactions (at most [`BATCH`] deletions each, so a large bucket never
//! holds the writer long), each of which reads the key's versions and the
//! rules again and plans anew, so whatever changed since the scan (a new
//! write, a legal hold, rules removed) is what counts. Every transaction
//! is an ordinary committed delete: a crash between two leaves the ones
//! before it done and the rest due, found by the next run.

use rusqlite::{params, Connection, OptionalExtension};

use super::api;
use super::eval::{plan_key, Action, Row};
use super::{DayLength, LifecycleConfig};
use crate::error::{Result, StoreError};
use crate::record::RawRecord;
use crate::store::multipart;
use crate::store::reserve::freeing;
use crate::store::Store;
use crate::versions::{self, VersionRef};

/// Deletions (or markers written, or uploads aborted) per transaction.
const BATCH: usize = 64;
/// Versions read per page of a bucket's scan.
const PAGE: i64 = 1000;

/// What one run of [`Store::expire_due`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExpiryReport {
    /// Current versions expired: removed (unversioned bucket) or hidden
    /// behind a new delete marker (versioned bucket).
    pub expired: u64,
    /// Noncurrent versions deleted for good.
    pub noncurrent_deleted: u64,
    /// Delete markers removed (lone ones, or noncurrent ones).
    pub markers_removed: u64,
    /// Incomplete multipart uploads aborted.
    pub uploads_aborted: u64,
    /// Versions due but kept because they are under retention or a legal
    /// hold.
    pub locked: u64,
}

impl ExpiryReport {
    fn add(&mut self, other: ExpiryReport) {
        self.expired += other.expired;
        self.noncurrent_deleted += other.noncurrent_deleted;
        self.markers_removed += other.markers_removed;
        self.uploads_aborted += other.uploads_aborted;
        self.locked += other.locked;
    }

    /// Whether nothing was done or kept.
    pub fn is_empty(&self) -> bool {
        *self == ExpiryReport::default()
    }
}

const ROW_COLUMNS: &str = "size, etag, modified_ns, generation, props, extents, vid, seq";

fn row_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<(RawRecord, bool, bool, Vec<u8>)> {
    Ok((RawRecord::of(r)?, r.get(8)?, r.get(9)?, r.get(10)?))
}

/// Decodes a scanned row; `now_ns` decides whether it is locked.
fn decode(raw: RawRecord, marker: bool, current: bool, now_ns: i64) -> Result<Row> {
    let rec = raw.decode()?;
    Ok(Row {
        seq: rec.seq,
        vid: rec.vid,
        marker,
        current,
        size: rec.size,
        modified_ns: rec.modified_ns,
        locked: rec.props.props.lock.refusal(now_ns, false).is_some(),
        tags: rec.props.props.tags,
    })
}

/// Every version of `key`, newest first.
fn key_rows(conn: &Connection, b: i64, key: &str, now_ns: i64) -> Result<Vec<Row>> {
    let sql = format!(
        "SELECT {ROW_COLUMNS}, 0, 1, key FROM objects WHERE bucket = ?1 AND key = ?2
         UNION ALL
         SELECT {ROW_COLUMNS}, marker, 0, key FROM versions WHERE bucket = ?1 AND key = ?2
         ORDER BY 8 DESC"
    );
    let mut st = conn.prepare_cached(&sql)?;
    let rows = st.query_map(params![b, key.as_bytes()], row_of)?;
    let mut out = Vec::new();
    for row in rows {
        let (raw, marker, current, _) = row?;
        out.push(decode(raw, marker, current, now_ns)?);
    }
    Ok(out)
}

/// One page of a bucket's scan: the keys after `after` (in byte order)
/// with something due, and the last key examined (`None`: the scan is
/// over). A key is examined whole: when the page ends inside a key, that
/// key waits for the next page, unless it is the page's only key, which is
/// then read on its own.
fn scan_page(
    conn: &Connection,
    b: i64,
    config: &LifecycleConfig,
    after: &[u8],
    now_ns: i64,
    day: DayLength,
) -> Result<(Vec<String>, Option<Vec<u8>>)> {
    let sql = format!(
        "SELECT {ROW_COLUMNS}, 0, 1, key FROM objects WHERE bucket = ?1 AND key > ?2
         UNION ALL
         SELECT {ROW_COLUMNS}, marker, 0, key FROM versions WHERE bucket = ?1 AND key > ?2
         ORDER BY 11, 8 DESC LIMIT ?3"
    );
    let mut st = conn.prepare_cached(&sql)?;
    let raw: Vec<_> = st
        .query_map(params![b, after, PAGE], row_of)?
        .collect::<rusqlite::Result<_>>()?;
    let full = raw.len() as i64 == PAGE;
    let mut groups: Vec<(Vec<u8>, Vec<Row>)> = Vec::new();
    for (rec, marker, current, key) in raw {
        let row = decode(rec, marker, current, now_ns)?;
        match groups.last_mut() {
            Some((k, rows)) if *k == key => rows.push(row),
            _ => groups.push((key, vec![row])),
        }
    }
    if full {
        if groups.len() > 1 {
            groups.pop();
        } else if let Some((key, rows)) = groups.first_mut() {
            *rows = key_rows(conn, b, &utf8(key)?, now_ns)?;
        }
    }
    let last = groups.last().map(|(k, _)| k.clone());
    let mut due = Vec::new();
    for (key, rows) in groups {
        let key = utf8(&key)?;
        let plan = plan_key(config, &key, &rows, now_ns, day);
        if !plan.actions.is_empty() || plan.locked > 0 {
            due.push(key);
        }
    }
    Ok((due, last))
}

fn utf8(key: &[u8]) -> Result<String> {
    String::from_utf8(key.to_vec())
        .map_err(|_| StoreError::Corrupt("stored key is not UTF-8".into()))
}

/// The bucket a batch works on, read again in its transaction, with its
/// rules (`None`: the bucket or its rules are gone; nothing is due).
fn bucket_now(
    conn: &Connection,
    name: &str,
    id: i64,
) -> Result<Option<(versions::Bucket, LifecycleConfig)>> {
    let b = match versions::bucket(conn, name) {
        Ok(b) if b.id == id => b,
        Ok(_) | Err(StoreError::NoSuchBucket { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(api::load(conn, id, name)?.map(|c| (b, c)))
}

impl Store {
    /// Expires what every bucket's lifecycle rules say is due at `now_ns`
    /// (nanoseconds since the epoch), counting days as `day` says: current
    /// versions (removed, or a delete marker written in a versioned
    /// bucket), noncurrent versions, lone delete markers and incomplete
    /// multipart uploads. Locked versions are never removed (they are
    /// counted in [`ExpiryReport::locked`]). Works in small transactions,
    /// each an ordinary delete; works on a full disk like
    /// [`Store::delete_object`]. A bucket that fails is logged and left for
    /// the next run.
    pub fn expire_due(&self, now_ns: i64, day: DayLength) -> Result<ExpiryReport> {
        let buckets: Vec<(i64, String)> = self.inner.db.read(|conn| {
            let mut st = conn.prepare_cached(
                "SELECT id, name FROM buckets WHERE lifecycle IS NOT NULL ORDER BY name",
            )?;
            let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })?;
        let mut report = ExpiryReport::default();
        for (id, name) in buckets {
            match self.expire_bucket(id, &name, now_ns, day) {
                Ok(r) => report.add(r),
                Err(e) => tracing::warn!(bucket = %name, error = %e, "lifecycle expiry failed"),
            }
        }
        Ok(report)
    }

    fn expire_bucket(
        &self,
        id: i64,
        name: &str,
        now_ns: i64,
        day: DayLength,
    ) -> Result<ExpiryReport> {
        let mut report = ExpiryReport::default();
        let mut after: Vec<u8> = Vec::new();
        loop {
            let page = self.inner.db.read(|conn| {
                let Some(config) = api::load(conn, id, name)? else {
                    return Ok(None);
                };
                scan_page(conn, id, &config, &after, now_ns, day).map(Some)
            })?;
            let Some((mut due, last)) = page else {
                return Ok(report);
            };
            while !due.is_empty() {
                let (r, finished) = self.expire_keys(id, name, &due, now_ns, day)?;
                report.add(r);
                // A key cut short by the bound stays first (its actions so
                // far committed); the next transaction plans it again.
                due.drain(..finished.min(due.len()));
            }
            match last {
                Some(last) => after = last,
                None => break,
            }
        }
        let uploads: Vec<(String, String, i64)> = self.inner.db.read(|conn| {
            let mut st = conn.prepare_cached(
                "SELECT id, key, initiated_ns FROM uploads WHERE bucket = ?1 ORDER BY key, id",
            )?;
            let rows = st.query_map([id], |r| {
                Ok((r.get(0)?, r.get::<_, Vec<u8>>(1)?, r.get(2)?))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (upload, key, initiated) = row?;
                out.push((upload, utf8(&key)?, initiated));
            }
            Ok(out)
        })?;
        let config = self.bucket_lifecycle(name)?;
        let due: Vec<String> = uploads
            .into_iter()
            .filter(|(_, key, initiated)| {
                config
                    .as_ref()
                    .is_some_and(|c| c.upload_due(key, *initiated, now_ns, day))
            })
            .map(|(upload, _, _)| upload)
            .collect();
        for chunk in due.chunks(BATCH) {
            report.uploads_aborted += self.abort_due_uploads(id, name, chunk, now_ns, day)?;
        }
        Ok(report)
    }

    /// One transaction over the first keys of `keys`: each key's versions
    /// and the rules read again, planned, and acted on through the
    /// ordinary deletes, up to [`BATCH`] actions. Returns what it did and
    /// how many keys it finished (a key cut short by the bound is planned
    /// again by the next transaction).
    fn expire_keys(
        &self,
        id: i64,
        name: &str,
        keys: &[String],
        now_ns: i64,
        day: DayLength,
    ) -> Result<(ExpiryReport, usize)> {
        let keys: Vec<String> = keys.iter().take(BATCH).cloned().collect();
        let name = name.to_string();
        let quota = self.inner.quota();
        freeing(&self.inner.reserve, || {
            let (keys, name, quota) = (keys.clone(), name.clone(), quota.clone());
            self.inner.db.write(move |conn, fx| {
                let mut report = ExpiryReport::default();
                let Some((b, config)) = bucket_now(conn, &name, id)? else {
                    return Ok((report, keys.len()));
                };
                let mut budget = BATCH;
                let mut finished = 0;
                for key in &keys {
                    let rows = key_rows(conn, id, key, now_ns)?;
                    let plan = plan_key(&config, key, &rows, now_ns, day);
                    let cut = plan.actions.len() > budget;
                    for action in plan.actions.into_iter().take(budget) {
                        budget -= 1;
                        match action {
                            Action::ExpireCurrent => {
                                versions::delete_latest(conn, fx, &quota, b, key)?;
                                report.expired += 1;
                            }
                            Action::Delete { seq, vid } => {
                                let v = match vid {
                                    Some(vid) => VersionRef::Id { vid, seq },
                                    None => VersionRef::Null,
                                };
                                match versions::delete_version(conn, fx, &quota, b, key, &v, false)
                                {
                                    Ok(d) if d.delete_marker => report.markers_removed += 1,
                                    Ok(d) if d.existed => report.noncurrent_deleted += 1,
                                    Ok(_) => {}
                                    Err(StoreError::ObjectLocked { .. }) => report.locked += 1,
                                    Err(e) => return Err(e),
                                }
                            }
                        }
                    }
                    if cut {
                        break;
                    }
                    report.locked += plan.locked;
                    finished += 1;
                    if budget == 0 {
                        break;
                    }
                }
                crate::fault::point("store-lifecycle-batch");
                Ok((report, finished))
            })
        })
    }

    /// One transaction aborting the uploads named (each checked again
    /// against the rules); returns how many it aborted.
    fn abort_due_uploads(
        &self,
        id: i64,
        name: &str,
        uploads: &[String],
        now_ns: i64,
        day: DayLength,
    ) -> Result<u64> {
        let uploads = uploads.to_vec();
        let name = name.to_string();
        let quota = self.inner.quota();
        freeing(&self.inner.reserve, || {
            let (uploads, name, quota) = (uploads.clone(), name.clone(), quota.clone());
            self.inner.db.write(move |conn, fx| {
                let Some((_, config)) = bucket_now(conn, &name, id)? else {
                    return Ok(0);
                };
                let mut aborted = 0;
                for upload in &uploads {
                    let found: Option<(Vec<u8>, i64)> = conn
                        .prepare_cached(
                            "SELECT key, initiated_ns FROM uploads WHERE id = ?1 AND bucket = ?2",
                        )?
                        .query_row(params![upload, id], |r| Ok((r.get(0)?, r.get(1)?)))
                        .optional()?;
                    let Some((key, initiated)) = found else {
                        continue;
                    };
                    if !config.upload_due(&utf8(&key)?, initiated, now_ns, day) {
                        continue;
                    }
                    let parts = multipart::load_parts(conn, upload)?;
                    multipart::drop_upload(conn, fx, &quota, upload, &parts)?;
                    aborted += 1;
                }
                Ok(aborted)
            })
        })
    }
}
