//! Guarded saves: read-for-save observations, saves conditioned on them,
//! durable request receipts, and resolution after a lost reply.

use std::io::Read;

use rusqlite::{params, OptionalExtension};
use sha2::{Digest, Sha256};

use crate::checksum::{self, ChecksumAlgorithm};
use crate::error::{Result, StoreError};
use crate::model::{ObjectMeta, ObjectProps, Receipt};
use crate::record::{self, Extent, Record, StoredProps};
use crate::store::Store;
use crate::validate;

/// What a read observed, kept by the caller and handed back to [`Store::save`].
///
/// Opaque: it is bound to this store instance (not to the directory: a
/// reopened store refuses it), the exact bucket and key, and either the
/// absence of the object or its generation, which changes on every write.
#[derive(Clone, PartialEq, Eq)]
pub struct SaveCondition {
    instance: u128,
    bucket: String,
    key: String,
    state: Observed,
}

impl std::fmt::Debug for SaveCondition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaveCondition")
            .field("key", &self.key)
            .field("absent", &matches!(self.state, Observed::Absent))
            .finish_non_exhaustive()
    }
}

#[derive(Clone, PartialEq, Eq)]
enum Observed {
    Absent,
    Generation([u8; 16]),
}

impl SaveCondition {
    /// Whether the read found no object.
    pub fn observed_absent(&self) -> bool {
        self.state == Observed::Absent
    }
}

/// The result of [`Store::read_for_save`].
#[derive(Debug)]
pub struct Observation {
    /// The object's metadata, or `None` when the key was absent.
    pub object: Option<ObjectMeta>,
    /// The object's bytes (empty when absent).
    pub body: Vec<u8>,
    pub condition: SaveCondition,
}

/// What a save requires of the current object.
#[derive(Debug, Clone)]
pub enum SaveGuard {
    /// The object must still be as observed (absent, or the same generation).
    Observed(SaveCondition),
    /// Replace whatever is there.
    Replace,
}

/// A guarded, optionally keyed, save.
#[derive(Debug, Clone)]
pub struct SaveRequest {
    pub bucket: String,
    pub key: String,
    pub props: ObjectProps,
    pub checksum_algorithm: Option<ChecksumAlgorithm>,
    pub guard: SaveGuard,
    /// With a request key the save leaves a durable receipt, and a retry
    /// with the same key and meaning replays the original result.
    pub request_key: Option<String>,
}

/// The result of a committed (or replayed) save.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saved {
    pub object: ObjectMeta,
    /// The result came from a retained receipt; nothing was written.
    pub replayed: bool,
}

fn meaning(store_id: &[u8], req: &SaveRequest, props: &ObjectProps, body_sha: &[u8]) -> Vec<u8> {
    let mut h = Sha256::new();
    let mut field = |b: &[u8]| {
        h.update((b.len() as u64).to_le_bytes());
        h.update(b);
    };
    field(b"stow-save-v1");
    field(store_id);
    field(req.bucket.as_bytes());
    field(req.key.as_bytes());
    field(serde_json::to_string(props).unwrap_or_default().as_bytes());
    field(req.checksum_algorithm.map_or("", |a| a.as_str()).as_bytes());
    match &req.guard {
        SaveGuard::Replace => field(b"replace"),
        SaveGuard::Observed(c) => match &c.state {
            Observed::Absent => field(b"absent"),
            Observed::Generation(g) => {
                field(b"generation");
                field(g);
            }
        },
    }
    field(body_sha);
    h.finalize().to_vec()
}

impl Store {
    /// Reads an object's bytes and metadata coherently, with a condition that
    /// a later [`Store::save`] can require. An absent key in an existing
    /// bucket is an observation of absence; a missing bucket is an error.
    /// Objects larger than `max_body` are refused with `too_large`.
    pub fn read_for_save(&self, bucket: &str, key: &str, max_body: u64) -> Result<Observation> {
        validate::bucket_name(bucket)?;
        validate::object_key(key)?;
        let pin = self.inner.db.pin();
        let (object, generation, body) = self.inner.db.read(|conn| {
            let b = record::bucket_id(conn, bucket)?;
            let Some(rec) = record::load_record(conn, b, key)? else {
                return Ok((None, None, Vec::new()));
            };
            if rec.size > max_body {
                return Err(StoreError::TooLarge {
                    size: rec.size,
                    limit: max_body,
                });
            }
            let meta = rec.meta(bucket, key);
            let gen = rec.generation;
            // Read the bytes within the same snapshot as the metadata.
            let read = self.get_in(conn, &rec, pin)?;
            Ok((Some(meta), Some(gen), read))
        })?;
        Ok(Observation {
            object,
            body,
            condition: SaveCondition {
                instance: self.inner.instance,
                bucket: bucket.to_string(),
                key: key.to_string(),
                state: generation.map_or(Observed::Absent, Observed::Generation),
            },
        })
    }

    fn get_in(
        &self,
        conn: &rusqlite::Connection,
        rec: &Record,
        pin: crate::blobs::ReadPin,
    ) -> Result<Vec<u8>> {
        // An object sealed with a customer key (SSE-C) is not read here.
        crate::encryption::check_key(rec.props.sse_c.as_ref(), None)?;
        let mut body = crate::store::ObjectBody::plan(
            conn,
            &self.inner.blobs,
            &rec.extents,
            (0, rec.size),
            None,
            pin,
        )?;
        let mut out = Vec::with_capacity(rec.size as usize);
        body.read_to_end(&mut out)?;
        Ok(out)
    }

    /// Saves an object under a guard. With a request key, the object, its
    /// usage and the receipt commit in one transaction; a retry with the
    /// same key and meaning returns the original result (`replayed`) and
    /// writes nothing; the same key with another meaning is
    /// `request_conflict`. A guard that no longer holds is `conflict`, and
    /// leaves no receipt.
    pub fn save(&self, req: SaveRequest, body: &mut dyn Read) -> Result<Saved> {
        validate::bucket_name(&req.bucket)?;
        validate::object_key(&req.key)?;
        if let Some(rk) = &req.request_key {
            validate::request_key(rk)?;
        }
        if let SaveGuard::Observed(c) = &req.guard {
            if c.instance != self.inner.instance {
                return Err(StoreError::InvalidCondition {
                    reason: "the condition was issued by another store instance",
                });
            }
            if c.bucket != req.bucket || c.key != req.key {
                return Err(StoreError::InvalidCondition {
                    reason: "the condition was issued for another object",
                });
            }
        }
        let props = validate::normalize_props(req.props.clone())?;
        let (staged, checksum) = self.stage_verified(
            body,
            req.checksum_algorithm,
            &[],
            None,
            None,
            req.request_key.is_some(),
            None,
        )?;
        let meaning = staged
            .digests
            .sha256
            .map(|sha| meaning(&self.inner.store_id, &req, &props, &sha));
        let rec = Record {
            size: staged.digests.size,
            etag: checksum::etag_of_md5(&staged.digests.md5),
            modified_ns: 0,
            generation: [0; 16],
            props: StoredProps {
                props,
                checksum,
                parts: Vec::new(),
                sse_c: None,
            },
            extents: vec![Extent {
                blob: staged.id,
                size: staged.digests.size,
            }],
            vid: None,
            seq: 0,
        };
        let inline = staged.inline.clone();
        let opts = self.inner.opts.clone();
        let quota = self.inner.quota();
        let saved = self.inner.db.write(move |conn, fx| {
            if let (Some(rk), Some(meaning)) = (&req.request_key, &meaning) {
                let prior: Option<ReceiptRow> = conn
                    .prepare_cached(
                        "SELECT bucket, key, meaning, object FROM receipts WHERE request_key = ?1",
                    )?
                    .query_row([rk], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                    .optional()?;
                if let Some((b, k, m, object)) = prior {
                    if b != req.bucket || k != req.key.as_bytes() || &m != meaning {
                        return Err(StoreError::RequestConflict);
                    }
                    let object = decode_receipt_object(object.as_deref())?;
                    return Ok(Saved {
                        object,
                        replayed: true,
                    });
                }
            }
            let b = crate::versions::bucket(conn, &req.bucket)?;
            let old = record::load_record(conn, b.id, &req.key)?;
            if let SaveGuard::Observed(c) = &req.guard {
                let holds = match (&c.state, &old) {
                    (Observed::Absent, None) => true,
                    (Observed::Generation(g), Some(o)) => *g == o.generation,
                    _ => false,
                };
                if !holds {
                    return Err(StoreError::Conflict);
                }
            }
            let mut rec = rec;
            rec.modified_ns = record::now_ns();
            rec.generation = record::new_generation();
            record::insert_blob(conn, fx, rec.extents[0].blob, rec.size, inline.as_deref())?;
            crate::versions::install(conn, fx, &quota, b, &req.key, old, &mut rec)?;
            let object = crate::versions::meta_in(&rec, b, &req.bucket, &req.key);
            if let (Some(rk), Some(meaning)) = (&req.request_key, &meaning) {
                write_receipt(conn, &opts, rk, &req.bucket, &req.key, meaning, &object)?;
            }
            Ok(Saved {
                object,
                replayed: false,
            })
        })?;
        staged.keep();
        Ok(saved)
    }

    /// Answers what became of a keyed save, from its receipt alone: the
    /// object's metadata at commit. No receipt is `not_found` (which proves
    /// nothing about the save); a receipt for another object is
    /// `request_conflict`. Never writes.
    pub fn resolve_save(&self, bucket: &str, key: &str, request_key: &str) -> Result<ObjectMeta> {
        validate::bucket_name(bucket)?;
        validate::object_key(key)?;
        validate::request_key(request_key)?;
        self.inner.db.read(|conn| {
            let row: Option<(String, Vec<u8>, Option<String>)> = conn
                .prepare_cached("SELECT bucket, key, object FROM receipts WHERE request_key = ?1")?
                .query_row([request_key], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()?;
            match row {
                None => Err(StoreError::ReceiptNotFound),
                Some((b, k, _)) if b != bucket || k != key.as_bytes() => {
                    Err(StoreError::RequestConflict)
                }
                Some((_, _, object)) => decode_receipt_object(object.as_deref()),
            }
        })
    }

    /// Retained receipts in request-key order, after `after`, at most `limit`.
    pub fn list_receipts(&self, after: Option<&str>, limit: usize) -> Result<Vec<Receipt>> {
        self.inner.db.read(|conn| {
            let mut st = conn.prepare_cached(
                "SELECT request_key, bucket, key, object, created_ns FROM receipts
                 WHERE request_key > ?1 ORDER BY request_key LIMIT ?2",
            )?;
            let rows = st.query_map(params![after.unwrap_or(""), limit as i64], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Vec<u8>>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, i64>(4)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (request_key, bucket, key, object, created_ns) = row?;
                out.push(Receipt {
                    request_key,
                    bucket,
                    key: String::from_utf8(key)
                        .map_err(|_| StoreError::Corrupt("receipt key is not UTF-8".into()))?,
                    object: decode_receipt_object(object.as_deref())?,
                    created_ns,
                });
            }
            Ok(out)
        })
    }

    /// Retires receipts on purpose, freeing journal capacity. Returns how
    /// many existed. Retiring never happens automatically.
    pub fn retire_receipts(&self, request_keys: &[String]) -> Result<u64> {
        let keys = request_keys.to_vec();
        self.inner.db.write(move |conn, _| {
            let mut retired = 0u64;
            let mut st = conn
                .prepare_cached("DELETE FROM receipts WHERE request_key = ?1 RETURNING bytes")?;
            for k in &keys {
                if let Some(bytes) = st.query_row([k], |r| r.get::<_, i64>(0)).optional()? {
                    retired += 1;
                    conn.prepare_cached(
                        "UPDATE usage SET receipts = receipts - 1, receipt_bytes = receipt_bytes - ?1",
                    )?
                    .execute([bytes])?;
                }
            }
            Ok(retired)
        })
    }

    /// Number of retained receipts and their encoded bytes.
    pub fn receipt_usage(&self) -> Result<(u64, u64)> {
        self.inner.db.read(|conn| {
            Ok(conn.query_row(
                "SELECT receipts, receipt_bytes FROM usage WHERE id = 1",
                [],
                |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64)),
            )?)
        })
    }
}

/// bucket, key, meaning, encoded object.
type ReceiptRow = (String, Vec<u8>, Vec<u8>, Option<String>);

fn decode_receipt_object(object: Option<&str>) -> Result<ObjectMeta> {
    let object = object.ok_or_else(|| StoreError::Corrupt("receipt has no object".into()))?;
    serde_json::from_str(object).map_err(|e| StoreError::Corrupt(format!("malformed receipt: {e}")))
}

fn write_receipt(
    conn: &rusqlite::Connection,
    opts: &crate::model::StoreOptions,
    request_key: &str,
    bucket: &str,
    key: &str,
    meaning: &[u8],
    object: &ObjectMeta,
) -> Result<()> {
    let encoded = serde_json::to_string(object)
        .map_err(|e| StoreError::Corrupt(format!("cannot encode receipt: {e}")))?;
    let bytes =
        (encoded.len() + request_key.len() + bucket.len() + key.len() + meaning.len()) as u64;
    if bytes > opts.max_receipt_entry_bytes {
        return Err(StoreError::RetentionFull {
            reason: format!(
                "the receipt needs {bytes} bytes; one receipt may use {}",
                opts.max_receipt_entry_bytes
            ),
        });
    }
    let (count, used): (i64, i64) = conn.query_row(
        "SELECT receipts, receipt_bytes FROM usage WHERE id = 1",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    if count as u64 >= opts.max_receipts || used as u64 + bytes > opts.max_receipt_bytes {
        return Err(StoreError::RetentionFull {
            reason: format!(
                "{count} receipts use {used} bytes (limits {} receipts, {} bytes); retire some",
                opts.max_receipts, opts.max_receipt_bytes
            ),
        });
    }
    conn.prepare_cached(
        "INSERT INTO receipts (request_key, bucket, key, meaning, outcome, object, created_ns, bytes)
         VALUES (?1, ?2, ?3, ?4, 'committed', ?5, ?6, ?7)",
    )?
    .execute(params![
        request_key,
        bucket,
        key.as_bytes(),
        meaning,
        encoded,
        record::now_ns(),
        bytes as i64
    ])?;
    conn.prepare_cached(
        "UPDATE usage SET receipts = receipts + 1, receipt_bytes = receipt_bytes + ?1 WHERE id = 1",
    )?
    .execute([bytes as i64])?;
    Ok(())
}
