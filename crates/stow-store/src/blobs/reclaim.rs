//! Deleting the blobs a commit frees, once no reader can still open them.
//!
//! A read plans a body inside its snapshot and opens a simple object's
//! one blob there, but the blobs of a body in many pieces (a multipart
//! object) are opened one after another as the body is read. A delete or
//! overwrite committed meanwhile frees those blobs; deleting their files
//! at once cut such a read short. So every read holds a [`ReadPin`] from
//! before its snapshot begins, and a freed blob's file is deleted only
//! when no read that began before the freeing commit still holds its pin.
//!
//! Crash rule: a freed blob keeps its `dead_blobs` row until its file's
//! deletion is durable (see `Db`), so a crash while deletions wait loses
//! nothing: opening the store deletes every blob that row names.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{BlobId, BlobStore};

/// The freed blobs and the reads that may still need them.
pub(crate) struct Reclaimer {
    blobs: Arc<BlobStore>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Counts commits that freed blobs while reads were running.
    epoch: u64,
    /// Reads running, by the epoch they began in.
    reads: BTreeMap<u64, usize>,
    /// Freed blobs waiting for the reads of their epoch or before to end.
    waiting: Vec<(u64, BlobId)>,
    /// Blobs deleted (durably) since the last [`Reclaimer::take_deleted`].
    deleted: Vec<BlobId>,
}

/// Held by a read from before its snapshot begins until its body is read
/// (or dropped): the blobs it may open stay.
pub(crate) struct ReadPin {
    reclaimer: Arc<Reclaimer>,
    epoch: u64,
}

impl Reclaimer {
    pub(crate) fn new(blobs: Arc<BlobStore>) -> Arc<Reclaimer> {
        Arc::new(Reclaimer {
            blobs,
            state: Mutex::new(State::default()),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Pins the blobs a read about to begin may see.
    pub(crate) fn pin(self: &Arc<Self>) -> ReadPin {
        let mut state = self.state();
        let epoch = state.epoch;
        *state.reads.entry(epoch).or_default() += 1;
        ReadPin {
            reclaimer: Arc::clone(self),
            epoch,
        }
    }

    /// Deletes the blobs a commit just freed, or, while reads that began
    /// before it run, leaves them for the last of those to delete. Returns
    /// the blobs deleted now (durably).
    pub(crate) fn free(&self, ids: &[BlobId]) -> Vec<BlobId> {
        if ids.is_empty() {
            return Vec::new();
        }
        {
            let mut state = self.state();
            if !state.reads.is_empty() {
                // Every running read began in this epoch or before; reads
                // that begin from now on cannot see these blobs.
                let epoch = state.epoch;
                state.epoch += 1;
                state.waiting.extend(ids.iter().map(|&id| (epoch, id)));
                return Vec::new();
            }
        }
        self.delete(ids);
        ids.to_vec()
    }

    /// The blobs whose waiting deletion has been done since last asked:
    /// their `dead_blobs` rows may go.
    pub(crate) fn take_deleted(&self) -> Vec<BlobId> {
        std::mem::take(&mut self.state().deleted)
    }

    fn delete(&self, ids: &[BlobId]) {
        for &id in ids {
            self.blobs.remove(id);
        }
        self.blobs.sync_removed(ids);
    }

    /// Ends a read begun in `epoch`, deleting the blobs no running read
    /// can need any more.
    fn unpin(&self, epoch: u64) {
        let due: Vec<BlobId> = {
            let mut state = self.state();
            if let Some(n) = state.reads.get_mut(&epoch) {
                *n -= 1;
                if *n == 0 {
                    state.reads.remove(&epoch);
                }
            }
            let oldest = state.reads.keys().next().copied().unwrap_or(u64::MAX);
            let (due, keep): (Vec<_>, Vec<_>) =
                state.waiting.drain(..).partition(|&(e, _)| e < oldest);
            state.waiting = keep;
            due.into_iter().map(|(_, id)| id).collect()
        };
        if due.is_empty() {
            return;
        }
        self.delete(&due);
        self.state().deleted.extend(due);
    }

    /// Freed blobs still waiting for reads (for tests).
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.state().waiting.len()
    }
}

impl Drop for ReadPin {
    fn drop(&mut self) {
        self.reclaimer.unpin(self.epoch);
    }
}

impl std::fmt::Debug for ReadPin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadPin")
            .field("epoch", &self.epoch)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_freed_blob_waits_for_the_reads_begun_before() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Arc::new(BlobStore::disk(dir.path()).unwrap());
        let r = Reclaimer::new(Arc::clone(&blobs));
        let (a, b) = (BlobId(1), BlobId(2));
        let early = r.pin();
        assert!(r.free(&[a]).is_empty(), "a read is running");
        let late = r.pin();
        assert!(r.free(&[b]).is_empty());
        assert_eq!(r.waiting(), 2);
        // The read begun after `a` was freed does not hold it up.
        drop(early);
        assert_eq!(r.take_deleted(), [a]);
        assert_eq!(r.waiting(), 1);
        drop(late);
        assert_eq!(r.take_deleted(), [b]);
        // No read running: deleted at once.
        assert_eq!(r.free(&[a, b]), [a, b]);
        assert!(r.take_deleted().is_empty());
    }
}
