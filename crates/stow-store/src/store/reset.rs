//! Emptying a store at once: [`Store::reset`].
//!
//! A reset must be atomic (a crash leaves the old store or an empty one,
//! never a mix) and fast (no work per object on the caller's path). It is
//! one write transaction that clears every table holding state (buckets,
//! objects, blob rows, uploads and parts, completed uploads, receipts,
//! dead blobs) with unqualified `DELETE`s, which SQLite performs by
//! dropping the tables' pages rather than visiting rows, zeroes the usage
//! counters, and names a fresh, empty blob directory (`blobs-<16 hex>`) in
//! the `meta` table — unless no body file is named (every body inline), when
//! the directory holds nothing to sweep and stays. The commit is the one
//! moment the reset happens.
//!
//! After the commit (on the thread that ran the batch, before any body of
//! a later write is published) the store switches to the fresh directory,
//! and a background thread sweeps the old one (`blobs::dirs`). A crash:
//! - before the commit leaves the old store, untouched;
//! - after it, the database names the fresh directory: `blobs::open_blob_dir`
//!   creates it if missing and sweeps every other blob directory
//!   (`blobs`, `blobs-*`) it finds, so a half-swept directory never
//!   outlives the next open. Staged bodies in `tmp/` that no row names
//!   are deleted by the usual recovery.
//!
//! A read that began before the commit and opens its body file after the
//! switch fails (its blob is gone): such a read raced with emptying the
//! store. Bodies already open stay readable.

use rusqlite::Connection;

use super::Store;
use crate::blobs::{META_BLOB_DIR, RESET_PREFIX};
use crate::error::Result;
use crate::fault;

/// What a reset removed, counted from the store's counters (no scan of
/// objects).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ResetReport {
    /// Buckets removed.
    pub buckets: u64,
    /// Objects removed.
    pub objects: u64,
    /// Bytes of objects and in-flight parts released.
    pub bytes: u64,
    /// Multipart uploads in progress that were dropped.
    pub uploads: u64,
    /// Save receipts forgotten.
    pub receipts: u64,
}

impl Store {
    /// Empties the store: every bucket, object, multipart upload, completed
    /// upload and save receipt goes, in one transaction, and usage returns to
    /// zero. The store's identity and options stay. Body files are removed
    /// afterwards, in the background; see the module documentation for the
    /// crash rules.
    pub fn reset(&self) -> Result<ResetReport> {
        let disk = self.is_persistent();
        let dir = format!("{RESET_PREFIX}{:016x}", rand::random::<u64>());
        self.inner.db.write(move |conn, fx| {
            let report = counts(conn)?;
            // Without a body file named (live or dead), the blob directory
            // holds nothing to sweep: the reset is the transaction alone.
            let files: bool = conn.query_row(
                "SELECT EXISTS (SELECT 1 FROM blobs WHERE data IS NULL)
                     OR EXISTS (SELECT 1 FROM dead_blobs)",
                [],
                |r| r.get(0),
            )?;
            conn.execute_batch(
                "DELETE FROM objects; DELETE FROM versions; DELETE FROM parts; DELETE FROM uploads;
                 DELETE FROM completed_uploads; DELETE FROM receipts;
                 DELETE FROM blobs; DELETE FROM dead_blobs; DELETE FROM buckets;
                 UPDATE usage SET bytes = 0, objects = 0, receipts = 0, receipt_bytes = 0;",
            )?;
            if disk && files {
                conn.execute(
                    "INSERT OR REPLACE INTO meta (name, value) VALUES (?1, ?2)",
                    rusqlite::params![META_BLOB_DIR, dir.as_bytes()],
                )?;
            }
            fault::point("store-reset-emptied");
            fx.reset = Some(files.then_some(dir));
            Ok(report)
        })
    }
}

/// The counts a reset reports, read in its transaction.
fn counts(conn: &Connection) -> Result<ResetReport> {
    let (bytes, objects, receipts): (i64, i64, i64) = conn.query_row(
        "SELECT bytes, objects, receipts FROM usage WHERE id = 1",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    let buckets: i64 = conn.query_row("SELECT count(*) FROM buckets", [], |r| r.get(0))?;
    let uploads: i64 = conn.query_row("SELECT count(*) FROM uploads", [], |r| r.get(0))?;
    let n = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(ResetReport {
        buckets: n(buckets),
        objects: n(objects),
        bytes: n(bytes),
        uploads: n(uploads),
        receipts: n(receipts),
    })
}
