//! Quota accounting of a served workspace view. The tree's files are the
//! private store's "outside usage" (see `Store::charge_outside`), so a file
//! write and a private-object write are checked in one order and cannot
//! pass a limit together. The agent also writes files directly, which no
//! quota can stop; the view counts the tree again at open and before a
//! file write when its count is older than [`RECOUNT_AFTER`].

use std::io::{self, Read};
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use stow_store::{ObjectBackend, PutOptions, ReceivedBody, StoreError, Usage};

use super::{StoreResult, WorkspaceBucket};
use crate::error::{Result, WsError};
use crate::registry::Record;

/// How stale a quota-bound view lets its count of the tree's files get
/// before a file write counts them again (the agent changes files directly).
pub const RECOUNT_AFTER: Duration = Duration::from_secs(2);

/// Quotas of a served view: stored bytes (file sizes, private objects and
/// in-flight upload parts) and objects (files and private objects).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ViewQuota {
    pub max_bytes: u64,
    pub max_objects: u64,
}

impl ViewQuota {
    /// The workspace's quotas, narrowed by a server's limits (0 keeps the
    /// workspace's). A limit above the workspace's is refused: a server
    /// may only narrow them.
    pub fn narrowed(record: &Record, max_bytes: u64, max_objects: u64) -> Result<ViewQuota> {
        let narrow = |asked: u64, own: u64, what: &str| match asked {
            0 => Ok(own),
            n if n <= own => Ok(n),
            n => Err(WsError::InvalidRequest(format!(
                "{what} {n} is above the workspace's quota of {own}; a server may only narrow it"
            ))),
        };
        Ok(ViewQuota {
            max_bytes: narrow(max_bytes, record.max_bytes, "max_bytes")?,
            max_objects: narrow(max_objects, record.max_objects, "max_objects")?,
        })
    }
}
/// The change in (bytes, objects) when a file of `old` bytes (or none)
/// becomes one of `new` bytes (or none).
fn file_change(old: Option<u64>, new: Option<u64>) -> (i64, i64) {
    let size = |s: Option<u64>| s.unwrap_or(0) as i64;
    let count = |s: Option<u64>| i64::from(s.is_some());
    (size(new) - size(old), count(new) - count(old))
}

/// A body reader that fails once more than `room` bytes arrive.
struct CappedReader<'a> {
    inner: &'a mut dyn Read,
    room: u64,
    overflowed: bool,
}

impl Read for CappedReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        match self.room.checked_sub(n as u64) {
            Some(left) => {
                self.room = left;
                Ok(n)
            }
            None => {
                self.overflowed = true;
                Err(io::Error::other("the body exceeds the quota"))
            }
        }
    }
}

impl WorkspaceBucket {
    pub(super) fn counted(&self) -> MutexGuard<'_, Option<Instant>> {
        self.counted.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts the tree's files into the store's outside usage. The caller
    /// holds the write lock (or is opening the view).
    pub(super) fn count_files(&self) -> StoreResult<()> {
        let files = self.walk_files("")?;
        self.store.set_outside_usage(Usage {
            bytes: files.iter().map(|(_, m)| m.len()).sum(),
            objects: files.len() as u64,
        })?;
        *self.counted() = Some(Instant::now());
        Ok(())
    }

    /// Admits a file write that replaces a file of `old_size` bytes (`None`:
    /// no file there) with `new_size` bytes, against the quotas. Returns the
    /// charge, to undo with [`WorkspaceBucket::uncharge`] if the write fails.
    /// The caller holds the write lock.
    pub(super) fn charge_file(
        &self,
        old_size: Option<u64>,
        new_size: u64,
    ) -> StoreResult<(i64, i64)> {
        if !self.recount_if_stale()? {
            return Ok((0, 0));
        }
        let charge = file_change(old_size, Some(new_size));
        self.store.charge_outside(charge.0, charge.1)?;
        Ok(charge)
    }

    /// Admits a multipart completion into a file that replaces one of
    /// `old_size` bytes (`None`: no file there). Its bytes were admitted as
    /// the upload's parts, which the store counts until the upload is
    /// finished, so only a new object is checked now; the bytes move into
    /// the files' count with [`WorkspaceBucket::note_joined_file`] once the
    /// file is in place. Returns the charge, to undo with
    /// [`WorkspaceBucket::uncharge`] if the file is not installed. The
    /// caller holds the write lock.
    pub(super) fn charge_joined_file(&self, old_size: Option<u64>) -> StoreResult<(i64, i64)> {
        if !self.recount_if_stale()? {
            return Ok((0, 0));
        }
        let charge = (0, file_change(old_size, Some(0)).1);
        self.store.charge_outside(charge.0, charge.1)?;
        Ok(charge)
    }

    /// Counts the bytes of a file installed by a multipart completion
    /// (admitted by [`WorkspaceBucket::charge_joined_file`]).
    pub(super) fn note_joined_file(&self, old_size: Option<u64>, new_size: u64) {
        self.adjust_files((file_change(old_size, Some(new_size)).0, 0));
    }

    /// Counts the tree again if the count is older than [`RECOUNT_AFTER`];
    /// `false` for a view without quotas (nothing to count).
    fn recount_if_stale(&self) -> StoreResult<bool> {
        let stale = match *self.counted() {
            None => return Ok(false),
            Some(at) => at.elapsed() >= RECOUNT_AFTER,
        };
        if stale {
            self.count_files()?;
        }
        Ok(true)
    }

    pub(super) fn uncharge(&self, (bytes, objects): (i64, i64)) {
        self.adjust_files((-bytes, -objects));
    }

    /// Counts a file change that needs no admission: a removal, or bytes
    /// admitted elsewhere that only moved into the tree.
    pub(super) fn note_file(&self, old_size: Option<u64>, new_size: Option<u64>) {
        self.adjust_files(file_change(old_size, new_size));
    }

    /// Changes the counted files' usage without a check (quota-bound views
    /// only). A failure leaves the count off until the next recount.
    pub(super) fn adjust_files(&self, (bytes, objects): (i64, i64)) {
        if self.counted().is_none() || (bytes, objects) == (0, 0) {
            return;
        }
        if let Err(e) = self.store.adjust_outside(bytes, objects) {
            tracing::warn!("cannot count a file change into the quota: {e}");
        }
    }

    /// Receives a body for a file key; with a quota, stops as soon as the
    /// body is larger than the room left (counting the file it replaces),
    /// so an oversized upload is refused without being stored first. The
    /// exact check is [`WorkspaceBucket::charge_file`]'s.
    pub(super) fn receive_within_quota(
        &self,
        key: &str,
        body: &mut dyn Read,
        opts: PutOptions,
    ) -> StoreResult<ReceivedBody> {
        let Some(max) = self.store.options().max_bytes else {
            return self.store.receive(body, opts);
        };
        let used = ObjectBackend::usage(self)?.bytes;
        let room = (max + self.file_size(key)?.unwrap_or(0)).saturating_sub(used);
        let mut capped = CappedReader {
            inner: body,
            room,
            overflowed: false,
        };
        match self.store.receive(&mut capped, opts) {
            Err(_) if capped.overflowed => Err(StoreError::QuotaExceeded {
                reason: format!("the body is larger than the {room} bytes the quota has left"),
            }),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::io::Read;

    use stow_store::{ObjectBackend, PutOptions, Usage};

    use super::super::scratch_view;
    use super::{file_change, CappedReader, ViewQuota};

    fn put(view: &super::WorkspaceBucket, key: &str, len: usize) -> Result<(), String> {
        ObjectBackend::put_object(
            view,
            "wsb",
            key,
            &mut &vec![b'x'; len][..],
            PutOptions::default(),
        )
        .map(|_| ())
        .map_err(|e| e.code().to_string())
    }

    fn usage(view: &super::WorkspaceBucket) -> (u64, u64) {
        let Usage { bytes, objects } = ObjectBackend::usage(view).unwrap();
        (bytes, objects)
    }

    #[test]
    fn a_file_change_counts_bytes_and_objects() {
        assert_eq!(file_change(None, Some(5)), (5, 1));
        assert_eq!(file_change(Some(5), Some(3)), (-2, 0));
        assert_eq!(file_change(Some(5), None), (-5, -1));
        assert_eq!(file_change(None, None), (0, 0));
    }

    #[test]
    fn the_capped_reader_fails_past_its_room() {
        let mut body = &b"0123456789"[..];
        let mut capped = CappedReader {
            inner: &mut body,
            room: 10,
            overflowed: false,
        };
        let mut out = Vec::new();
        capped.read_to_end(&mut out).unwrap();
        assert_eq!(out.len(), 10);
        assert!(!capped.overflowed);

        let mut body = &b"0123456789"[..];
        let mut capped = CappedReader {
            inner: &mut body,
            room: 9,
            overflowed: false,
        };
        assert!(capped.read_to_end(&mut Vec::new()).is_err());
        assert!(capped.overflowed);
    }

    /// Usage counts the tree's files (also those written behind the view's
    /// back before it opened) with the private objects; a write past either
    /// limit is refused and leaves nothing behind.
    #[test]
    fn a_write_past_the_limit_is_refused_and_usage_counts_files() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("seed.txt"), b"seed").unwrap();
        let quota = ViewQuota {
            max_bytes: 20,
            max_objects: 3,
        };
        let view = super::WorkspaceBucket::open_with_quota(tmp.path(), "wsb", Some(quota)).unwrap();
        assert_eq!(usage(&view), (4, 1));

        put(&view, "a.txt", 10).unwrap();
        assert_eq!(usage(&view), (14, 2));
        // 14 + 7 > 20, as a file and as a private object.
        assert_eq!(put(&view, "b.txt", 7), Err("quota_exceeded".into()));
        assert_eq!(put(&view, "odd:key", 7), Err("quota_exceeded".into()));
        assert!(!tmp.path().join("b.txt").exists());
        assert_eq!(usage(&view), (14, 2));
        // An overwrite counts only its growth: 4 + 16 = 20 fits.
        put(&view, "a.txt", 16).unwrap();
        assert_eq!(usage(&view), (20, 2));
        put(&view, "a.txt", 1).unwrap();
        put(&view, "odd:key", 1).unwrap();
        assert_eq!(usage(&view), (6, 3));
        // A fourth object is refused.
        assert_eq!(put(&view, "c.txt", 1), Err("quota_exceeded".into()));
        // Removing frees room.
        ObjectBackend::delete_object(&view, "wsb", "a.txt").unwrap();
        assert_eq!(usage(&view), (5, 2));
        put(&view, "c.txt", 1).unwrap();
        assert_eq!(usage(&view), (6, 3));

        // Without a quota, the view does not count files at all.
        drop(view);
        let (_tmp, free) = scratch_view(None);
        put(&free, "big.txt", 1000).unwrap();
        assert_eq!(usage(&free), (0, 0));
    }
}
