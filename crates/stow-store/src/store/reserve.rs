//! Space held back for deletes on a full disk.
//!
//! A delete needs a little new space to commit (SQLite appends its pages
//! to the WAL) before it frees any, so on a full disk it would fail like
//! a write, and a full store could never be emptied. A disk store opened
//! with [`crate::StoreOptions::space_reserve_bytes`] keeps a file of that
//! size (`space.reserve`, blocks allocated, fsynced) in its directory.
//! When a delete fails for want of space, the file is removed and the
//! delete tried once more; after a delete commits, the file is made again
//! if the space is there (else it stays released and the next freeing
//! operation tries again). Nothing else ever uses the file.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::Mutex;

use crate::error::{io_is_no_space, Result};

/// The reserve file's name in a store directory.
pub(crate) const RESERVE_FILE: &str = "space.reserve";

/// The reserve of one store: absent for memory stores and a size of 0.
#[derive(Debug)]
pub(crate) struct Reserve {
    /// The reserve file, when the store keeps one.
    path: Option<PathBuf>,
    bytes: u64,
    /// Whether the file is in place at its full size.
    held: Mutex<bool>,
}

impl Reserve {
    /// No reserve (memory stores, or a size of 0).
    pub(crate) fn none() -> Reserve {
        Reserve {
            path: None,
            bytes: 0,
            held: Mutex::new(false),
        }
    }

    /// The reserve of the store in `dir`: made (or kept) now when there is
    /// room; a disk already too full to hold it opens without one.
    pub(crate) fn open(dir: &std::path::Path, bytes: u64) -> Reserve {
        if bytes == 0 {
            // A reserve left by an earlier run that asked for one is space
            // this run would never use.
            let _ = fs::remove_file(dir.join(RESERVE_FILE));
            return Reserve::none();
        }
        let reserve = Reserve {
            path: Some(dir.join(RESERVE_FILE)),
            bytes,
            held: Mutex::new(false),
        };
        reserve.restore();
        reserve
    }

    /// Gives the reserved space back to the filesystem; `true` when there
    /// was a reserve to give (so a retry may now succeed).
    pub(crate) fn release(&self) -> bool {
        let Some(path) = &self.path else {
            return false;
        };
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if !*held {
            return false;
        }
        *held = false;
        match fs::remove_file(path) {
            Ok(()) => {
                tracing::warn!("the disk is full: released the space reserved for deletes");
                true
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => {
                tracing::warn!("cannot release {}: {e}", path.display());
                false
            }
        }
    }

    /// Makes the reserve file again if it is not in place; a disk without
    /// the room leaves it released (and logs nothing: that is expected).
    pub(crate) fn restore(&self) {
        let Some(path) = &self.path else {
            return;
        };
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if *held {
            return;
        }
        match fs::metadata(path) {
            Ok(m) if m.len() == self.bytes => {
                *held = true;
                return;
            }
            _ => {}
        }
        let staged = path.with_extension("reserve.tmp");
        match fill(&staged, self.bytes).and_then(|()| fs::rename(&staged, path)) {
            Ok(()) => *held = true,
            Err(e) => {
                let _ = fs::remove_file(&staged);
                if !io_is_no_space(&e) {
                    tracing::warn!(
                        "cannot reserve space for deletes at {}: {e}",
                        path.display()
                    );
                }
            }
        }
    }
}

/// Writes `bytes` zero bytes to a new file at `path` and fsyncs it, so its
/// blocks are allocated (a sparse file would reserve nothing).
fn fill(path: &std::path::Path, bytes: u64) -> io::Result<()> {
    let mut f: File = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(path)?;
    let chunk = vec![0u8; 64 << 10];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    f.sync_all()
}

/// Runs a freeing operation (a delete, an abort); when it fails for want
/// of space and a reserve was released, runs it once more. After it
/// succeeds the reserve is made again where the freed space allows.
pub(crate) fn freeing<T>(reserve: &Reserve, op: impl Fn() -> Result<T>) -> Result<T> {
    let result = match op() {
        Err(e) if e.is_no_space() && reserve.release() => op(),
        r => r,
    };
    if result.is_ok() {
        reserve.restore();
    }
    result
}

impl super::Store {
    /// Deletes an object; deleting an absent key is not an error. Returns
    /// whether an object was deleted. On a full disk the space reserve is
    /// released for it (see the module).
    pub fn delete_object(&self, bucket: &str, key: &str) -> Result<bool> {
        freeing(&self.inner.reserve, || self.delete_object_once(bucket, key))
    }

    /// Deletes a bucket that holds no objects; its in-progress multipart
    /// uploads are aborted with it. Works on a full disk like
    /// [`Self::delete_object`].
    pub fn delete_bucket(&self, name: &str) -> Result<()> {
        freeing(&self.inner.reserve, || self.delete_bucket_once(name))
    }

    /// Aborts an upload, dropping its parts and their usage. Works on a
    /// full disk like [`Self::delete_object`].
    pub fn abort_upload(&self, bucket: &str, key: &str, upload_id: &str) -> Result<()> {
        freeing(&self.inner.reserve, || {
            self.abort_upload_once(bucket, key, upload_id)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserve_is_made_released_and_made_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(RESERVE_FILE);
        let r = Reserve::open(dir.path(), 100_000);
        assert_eq!(fs::metadata(&path).unwrap().len(), 100_000);
        assert!(r.release());
        assert!(!path.exists());
        assert!(!r.release(), "nothing left to release");
        r.restore();
        assert_eq!(fs::metadata(&path).unwrap().len(), 100_000);
        // A later open without a reserve gives the space back.
        drop(r);
        let none = Reserve::open(dir.path(), 0);
        assert!(!path.exists());
        assert!(!none.release());
    }

    #[test]
    fn freeing_retries_once_after_releasing() {
        let dir = tempfile::tempdir().unwrap();
        let r = Reserve::open(dir.path(), 4096);
        let calls = std::cell::Cell::new(0);
        let full = || crate::StoreError::Io(io::Error::from_raw_os_error(28));
        let got = freeing(&r, || {
            calls.set(calls.get() + 1);
            if calls.get() == 1 {
                Err(full())
            } else {
                Ok(7)
            }
        });
        assert_eq!((got.unwrap(), calls.get()), (7, 2));
        // Made again after the success.
        assert!(dir.path().join(RESERVE_FILE).exists());
        // Without a reserve to release, a full disk is reported at once.
        let none = Reserve::none();
        calls.set(0);
        let got = freeing(&none, || -> Result<()> {
            calls.set(calls.get() + 1);
            Err(full())
        });
        assert!(got.unwrap_err().is_no_space());
        assert_eq!(calls.get(), 1);
    }
}
