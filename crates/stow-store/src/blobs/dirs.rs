//! The blob directory a store's bodies live in, and switching it: a reset
//! (`store/reset.rs`) names a fresh, empty directory in the database;
//! after its commit the store switches to it and the old one is swept in
//! the background; at open the directory the database names is made
//! current and any other a crash left is swept.

use std::fs;
use std::io;
use std::path::Path;
use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension};

use super::{BlobId, BlobStore};
use crate::error::{Result, StoreError};
use crate::fault;

/// The blob directory of a store that was never reset.
pub(crate) const DEFAULT_BLOB_DIR: &str = "blobs";
/// The `meta` row naming the current blob directory (absent: the default).
pub(crate) const META_BLOB_DIR: &str = "blob_dir";
/// The prefix of a blob directory a reset names.
pub(crate) const RESET_PREFIX: &str = "blobs-";

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
