//! A full consistency check of a store, for tests, crash recovery checks and
//! `doctor`-style tooling. Reads everything; never repairs.

use std::collections::HashMap;

use std::io::Read;

use md5::Digest as _;

use crate::blobs::BlobId;
use crate::error::Result;
use crate::record::decode_extents;
use crate::store::Store;

impl Store {
    /// Checks that usage counters equal a recount, that every blob's
    /// reference count equals the records and parts naming it, that every
    /// file blob exists with its recorded size, that no unreferenced blob
    /// file is left, and that receipt counters match. Returns the problems
    /// found (empty when the store is consistent).
    pub fn verify(&self) -> Result<Vec<String>> {
        let mut problems = Vec::new();
        let blobs = &self.inner.blobs;
        let (rows, mut refs, usage, recount, receipts, dead) = self.inner.db.read(|conn| {
            let mut refs: HashMap<i64, i64> = HashMap::new();
            let mut object_bytes = 0i64;
            let mut objects = 0i64;
            // Every version counts: current rows, noncurrent versions, and
            // delete markers (no bytes, not an object).
            let mut st = conn.prepare(
                "SELECT size, extents, 0 FROM objects
                 UNION ALL SELECT size, extents, marker FROM versions",
            )?;
            let mut q = st.query([])?;
            let mut bad_sizes = 0;
            while let Some(r) = q.next()? {
                let size: i64 = r.get(0)?;
                let ext = decode_extents(&r.get::<_, Vec<u8>>(1)?)?;
                let marker: bool = r.get(2)?;
                if ext.iter().map(|e| e.size as i64).sum::<i64>() != size || (marker && size != 0) {
                    bad_sizes += 1;
                }
                for e in ext {
                    *refs.entry(e.blob.0).or_default() += 1;
                }
                object_bytes += size;
                objects += i64::from(!marker);
            }
            let mut st = conn.prepare("SELECT blob, size FROM parts")?;
            let mut q = st.query([])?;
            let mut part_bytes = 0i64;
            while let Some(r) = q.next()? {
                *refs.entry(r.get(0)?).or_default() += 1;
                part_bytes += r.get::<_, i64>(1)?;
            }
            let rows: Vec<(i64, i64, i64, Option<i64>)> = conn
                .prepare("SELECT id, size, refs, length(data) FROM blobs")?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                .collect::<rusqlite::Result<_>>()?;
            let usage: (i64, i64, i64, i64) = conn.query_row(
                "SELECT bytes, objects, receipts, receipt_bytes FROM usage WHERE id = 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )?;
            let receipts: (i64, i64) = conn.query_row(
                "SELECT count(*), coalesce(sum(bytes), 0) FROM receipts",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            let dead: Vec<i64> = conn
                .prepare("SELECT id FROM dead_blobs")?
                .query_map([], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            Ok((
                rows,
                refs,
                usage,
                (object_bytes + part_bytes, objects, bad_sizes),
                receipts,
                dead,
            ))
        })?;
        if recount.2 > 0 {
            problems.push(format!(
                "{} objects whose size differs from their extents",
                recount.2
            ));
        }
        if (usage.0, usage.1) != (recount.0, recount.1) {
            problems.push(format!(
                "usage says {} bytes / {} objects, recount finds {} / {}",
                usage.0, usage.1, recount.0, recount.1
            ));
        }
        if (usage.2, usage.3) != receipts {
            problems.push(format!(
                "receipt counters say {} / {} bytes, recount finds {} / {}",
                usage.2, usage.3, receipts.0, receipts.1
            ));
        }
        let mut file_blobs = HashMap::new();
        for (id, size, count, inline_len) in &rows {
            let wanted = refs.remove(id).unwrap_or(0);
            if wanted != *count {
                problems.push(format!(
                    "blob {id:x} has {count} references, records name it {wanted} times"
                ));
            }
            match inline_len {
                Some(len) if len != size => {
                    problems.push(format!("inline blob {id:x} holds {len} bytes, not {size}"))
                }
                Some(_) => {}
                None => {
                    file_blobs.insert(*id, *size);
                    match blobs.len_of(BlobId(*id)) {
                        Ok(len) if len as i64 == *size => {}
                        Ok(len) => {
                            problems.push(format!("blob file {id:x} holds {len} bytes, not {size}"))
                        }
                        Err(e) => problems.push(format!("blob file {id:x}: {e}")),
                    }
                }
            }
        }
        for id in refs.keys() {
            problems.push(format!("records name blob {id:x}, which does not exist"));
        }
        for id in blobs.list_files()? {
            if !file_blobs.contains_key(&id.0) && !dead.contains(&id.0) {
                problems.push(format!("blob file {:x} is not referenced", id.0));
            }
        }
        Ok(problems)
    }

    /// Reads every object's bytes and checks them against its ETag (the
    /// MD5 of a simple object; for a multipart one, the MD5 of its parts'
    /// MD5s), so a damaged blob file or inline body is found and named.
    /// Returns one problem per damaged or unreadable object.
    pub fn verify_contents(&self) -> Result<Vec<String>> {
        let mut problems = Vec::new();
        let names: Vec<(String, String)> = self.inner.db.read(|conn| {
            let mut st = conn.prepare(
                "SELECT b.name, o.key FROM objects o JOIN buckets b ON b.id = o.bucket
                 ORDER BY b.name, o.key",
            )?;
            let rows = st.query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (bucket, key) = row?;
                out.push((bucket, String::from_utf8_lossy(&key).into_owned()));
            }
            Ok(out)
        })?;
        for (bucket, key) in names {
            if let Err(why) = self.check_object_bytes(&bucket, &key) {
                problems.push(format!("object {bucket}/{key}: {why}"));
            }
        }
        Ok(problems)
    }

    fn check_object_bytes(&self, bucket: &str, key: &str) -> std::result::Result<(), String> {
        if let Some(sealed) = self
            .sealed_blobs(bucket, key)
            .map_err(|e| format!("cannot be read: {e}"))?
        {
            return self.check_sealed_bytes(&sealed);
        }
        let read = self
            .get_object(bucket, key, None)
            .map_err(|e| format!("cannot be read: {e}"))?;
        let meta = read.meta;
        let mut body = read.body;
        // Part boundaries of a multipart object (one part otherwise).
        let sizes: Vec<u64> = if meta.parts.is_empty() {
            vec![meta.size]
        } else {
            meta.parts.iter().map(|p| p.size).collect()
        };
        let mut part_md5s = Vec::with_capacity(sizes.len());
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        for size in &sizes {
            let mut h = md5::Md5::new();
            let mut left = *size;
            while left > 0 {
                let want = left.min(buf.len() as u64) as usize;
                let n = body
                    .read(&mut buf[..want])
                    .map_err(|e| format!("cannot be read: {e}"))?;
                if n == 0 {
                    return Err(format!("ends after {total} of {} bytes", meta.size));
                }
                h.update(&buf[..n]);
                left -= n as u64;
                total += n as u64;
            }
            part_md5s.push(h.finalize().to_vec());
        }
        let etag = meta.etag.trim_matches('"');
        let computed = if meta.parts.is_empty() {
            crate::hex(&part_md5s[0])
        } else {
            let mut all = md5::Md5::new();
            for d in &part_md5s {
                all.update(d);
            }
            format!("{}-{}", crate::hex(&all.finalize()), part_md5s.len())
        };
        if computed != etag {
            return Err(format!(
                "its bytes do not match its ETag {etag} (they hash to {computed}): damaged on disk"
            ));
        }
        Ok(())
    }

    /// The blobs (with their plaintext sizes) of an object sealed with a
    /// customer key (SSE-C), `None` for a plain object.
    fn sealed_blobs(&self, bucket: &str, key: &str) -> Result<Option<Vec<(BlobId, u64)>>> {
        self.inner.db.read(|conn| {
            let b = crate::record::bucket_id(conn, bucket)?;
            let rec = crate::record::load_record(conn, b, key)?;
            Ok(rec
                .filter(|r| r.props.sse_c.is_some())
                .map(|r| r.extents.iter().map(|e| (e.blob, e.size)).collect()))
        })
    }

    /// A sealed object cannot be decrypted without its key, so `check`
    /// checks what it can: each blob starts with a sealed header and holds
    /// exactly the records its plaintext size needs. A changed byte inside
    /// a record is found when the object is read (its record fails
    /// authentication).
    fn check_sealed_bytes(&self, blobs: &[(BlobId, u64)]) -> std::result::Result<(), String> {
        for (id, plain) in blobs {
            let inline: Option<Vec<u8>> = self
                .inner
                .db
                .read(|conn| {
                    Ok(conn
                        .prepare_cached("SELECT data FROM blobs WHERE id = ?1")?
                        .query_row([id.0], |r| r.get(0))?)
                })
                .map_err(|e| format!("cannot be read: {e}"))?;
            let (head, len) = match inline {
                Some(bytes) => (bytes.clone(), bytes.len() as u64),
                None => {
                    let mut r = self
                        .inner
                        .blobs
                        .open(*id)
                        .map_err(|e| format!("cannot be read: {e}"))?;
                    let mut head = Vec::with_capacity(crate::encryption::HEADER);
                    (&mut r)
                        .take(crate::encryption::HEADER as u64)
                        .read_to_end(&mut head)
                        .map_err(|e| format!("cannot be read: {e}"))?;
                    let len = self
                        .inner
                        .blobs
                        .len_of(*id)
                        .map_err(|e| format!("cannot be read: {e}"))?;
                    (head, len)
                }
            };
            let want = crate::encryption::sealed_len(*plain);
            if !crate::encryption::is_sealed_header(&head) || len != want {
                return Err(format!(
                    "its sealed blob {:x} holds {len} bytes, not the {want} of its records, or lacks its header: damaged on disk",
                    id.0
                ));
            }
        }
        Ok(())
    }
}
