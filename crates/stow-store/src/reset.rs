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
//! and a background thread sweeps the old one. A crash:
//! - before the commit leaves the old store, untouched;
//! - after it, the database names the fresh directory: [`open_blob_dir`]
//!   creates it if missing and sweeps every other blob directory
//!   (`blobs`, `blobs-*`) it finds, so a half-swept directory never
//!   outlives the next open. Staged bodies in `tmp/` that no row names
//!   are deleted by the usual recovery.
//!
//! A read that began before the commit and opens its body file after the
//! switch fails (its blob is gone): such a read raced with emptying the
//! store. Bodies already open stay readable.

use std::fs;
use std::io;
use std::path::Path;
use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension};

use crate::blobs::{BlobId, BlobStore};
use crate::error::{Result, StoreError};
use crate::fault;
use crate::store::Store;

/// The blob directory of a store that was never reset.
pub(crate) const DEFAULT_BLOB_DIR: &str = "blobs";
/// The `meta` row naming the current blob directory (absent: the default).
const META_BLOB_DIR: &str = "blob_dir";
/// The prefix of a blob directory a reset names.
const RESET_PREFIX: &str = "blobs-";

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

/// Whether `name` is one of the blob directory names this crate writes.
fn is_blob_dir_name(name: &str) -> bool {
    name == DEFAULT_BLOB_DIR
        || name
            .strip_prefix(RESET_PREFIX)
            .is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// At open, before blob recovery: makes the blob directory the database
/// names current (creating it if a crash came before it was made) and
/// sweeps, in the background, every other blob directory a reset left.
pub(crate) fn open_blob_dir(conn: &Connection, blobs: &BlobStore) -> Result<()> {
    let Some(root) = blobs.root().map(Path::to_path_buf) else {
        return Ok(());
    };
    let named: Option<Vec<u8>> = conn
        .query_row(
            "SELECT value FROM meta WHERE name = ?1",
            [META_BLOB_DIR],
            |r| r.get(0),
        )
        .optional()?;
    let current = match named {
        None => DEFAULT_BLOB_DIR.to_string(),
        Some(raw) => String::from_utf8(raw)
            .ok()
            .filter(|n| is_blob_dir_name(n))
            .ok_or_else(|| StoreError::Corrupt("the recorded blob directory is invalid".into()))?,
    };
    blobs.use_dir(&current);
    blobs.create_current()?;
    for entry in fs::read_dir(&root)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        if name != current && is_blob_dir_name(name) {
            tracing::info!("removing blob directory {name} left by a reset");
            sweep_in_background(Arc::from(root.join(name)));
        }
    }
    Ok(())
}

/// After a reset's commit: switches to the fresh blob directory, deletes
/// the staged bodies of writes the reset emptied, and sweeps the old
/// directory in the background. Failures are logged: the database already
/// names the fresh directory, and the next open finishes the work.
/// `dir` is `None` when the emptied store named no body file: the blob
/// directory stays.
pub(crate) fn after_commit(blobs: &BlobStore, dir: Option<&str>, discard: &[BlobId]) {
    fault::point("store-reset-committed");
    let old = dir.and_then(|dir| {
        let old = blobs.use_dir(dir);
        if let Err(e) = blobs.create_current() {
            tracing::warn!("cannot create the blob directory {dir} after a reset: {e}");
        }
        old
    });
    for id in discard {
        blobs.remove(*id);
    }
    fault::point("store-reset-switched");
    if let Some(old) = old {
        sweep_in_background(old);
    }
}

/// Removes a blob directory nothing names any more on a thread of its own.
fn sweep_in_background(dir: Arc<Path>) {
    let spawned = std::thread::Builder::new()
        .name("stow-reset-sweep".into())
        .spawn(move || {
            if let Err(e) = sweep(&dir) {
                tracing::warn!("cannot remove {}: {e}", dir.display());
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot start the sweep of an old blob directory: {e}");
    }
}

/// Removes `dir` shard by shard; a shard or directory already gone (another
/// sweep got there first) is not an error.
fn sweep(dir: &Path) -> io::Result<()> {
    let gone = |r: io::Result<()>| match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    };
    let entries = match fs::read_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        other => other?,
    };
    for entry in entries {
        let path = entry?.path();
        gone(if path.is_dir() {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        })?;
        fault::point("store-reset-sweeping");
    }
    gone(fs::remove_dir(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_directory_names() {
        assert!(is_blob_dir_name("blobs"));
        assert!(is_blob_dir_name("blobs-00112233aabbccdd"));
        for bad in [
            "blobs-",
            "blobs-xyz",
            "../blobs",
            "blobs-00112233aabbccdd0",
            "tmp",
        ] {
            assert!(!is_blob_dir_name(bad), "{bad}");
        }
    }
}
