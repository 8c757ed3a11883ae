//! Deleting the blobs a commit frees, once no reader can still open them.
//!
//! A read plans a body inside its snapshot and opens a simple object's
//! one blob there, but the blobs of a body in many pieces (a multipart
//! object) are opened one after another as the body is read. A delete or
//! overwrite committed meanwhile frees those blobs; deleting their files
//! at once cut such a read short. So every read holds a [`ReadPin`] from
//! before its snapshot begins until its body is planned, and a planned
//! body holds the blobs it has yet to open ([`BlobHolds`], each let go as
//! its piece is opened). A freed blob's file is deleted once no read that
//! began before the freeing commit is still planning and no body holds
//! it: a client that stops reading keeps its own object's parts, nothing
//! else.
//!
//! Crash rule: a freed blob keeps its `dead_blobs` row until its file's
//! deletion is durable (see `Db`), so a crash while deletions wait loses
//! nothing: opening the store deletes every blob that row names.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{BlobId, BlobStore};

/// The freed blobs and the reads that may still need them.
pub(crate) struct Reclaimer {
    blobs: Arc<BlobStore>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Counts commits that freed blobs while they could still be needed.
    epoch: u64,
    /// Reads planning, by the epoch they began in.
    reads: BTreeMap<u64, usize>,
    /// Blobs planned bodies have yet to open, with how many hold each.
    held: HashMap<BlobId, usize>,
    /// Freed blobs waiting for the reads of their epoch or before to end
    /// and for the bodies holding them to let go.
    waiting: Vec<(u64, BlobId)>,
    /// Blobs deleted (durably) since the last [`Reclaimer::take_deleted`].
    deleted: Vec<BlobId>,
}

/// Held by a read from before its snapshot begins until its body is
/// planned: every blob its snapshot may name stays.
pub(crate) struct ReadPin {
    reclaimer: Arc<Reclaimer>,
    epoch: u64,
}

/// The blobs a planned body has yet to open: each stays until the body
/// opens it ([`BlobHolds::release`]) or is dropped.
pub(crate) struct BlobHolds {
    reclaimer: Arc<Reclaimer>,
    ids: Vec<BlobId>,
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

    /// Deletes the blobs a commit just freed, or leaves them for later
    /// when a read that began before the commit still plans or a body
    /// holds them. Returns the blobs deleted now (durably).
    pub(crate) fn free(&self, ids: &[BlobId]) -> Vec<BlobId> {
        if ids.is_empty() {
            return Vec::new();
        }
        let now: Vec<BlobId> = {
            let mut state = self.state();
            // Every read planning began in this epoch or before; reads
            // that begin from now on cannot see these blobs.
            let epoch = state.epoch;
            state.epoch += 1;
            let planning = !state.reads.is_empty();
            let (wait, now): (Vec<BlobId>, Vec<BlobId>) = ids
                .iter()
                .partition(|id| planning || state.held.contains_key(id));
            state.waiting.extend(wait.into_iter().map(|id| (epoch, id)));
            now
        };
        self.delete(&now);
        now
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

    /// Ends a read's planning begun in `epoch`.
    fn unpin(&self, epoch: u64) {
        self.settle(|state| {
            if let Some(n) = state.reads.get_mut(&epoch) {
                *n -= 1;
                if *n == 0 {
                    state.reads.remove(&epoch);
                }
            }
        });
    }

    /// Lets go of blobs a body held.
    fn unhold(&self, ids: &[BlobId]) {
        self.settle(|state| {
            for id in ids {
                if let Some(n) = state.held.get_mut(id) {
                    *n -= 1;
                    if *n == 0 {
                        state.held.remove(id);
                    }
                }
            }
        });
    }

    /// Applies `change`, then deletes the waiting blobs nothing needs any
    /// more: no read that began in their epoch or before still plans, and
    /// no body holds them.
    fn settle(&self, change: impl FnOnce(&mut State)) {
        let due: Vec<BlobId> = {
            let mut state = self.state();
            change(&mut state);
            let oldest = state.reads.keys().next().copied().unwrap_or(u64::MAX);
            let waiting = std::mem::take(&mut state.waiting);
            let (due, keep): (Vec<_>, Vec<_>) = waiting
                .into_iter()
                .partition(|(e, id)| *e < oldest && !state.held.contains_key(id));
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

impl ReadPin {
    /// Ends the read's planning, holding `ids`: the blobs its body has yet
    /// to open.
    pub(crate) fn hold(self, ids: Vec<BlobId>) -> BlobHolds {
        {
            let mut state = self.reclaimer.state();
            for &id in &ids {
                *state.held.entry(id).or_default() += 1;
            }
        }
        BlobHolds {
            reclaimer: Arc::clone(&self.reclaimer),
            ids,
        }
    }
}

impl Drop for ReadPin {
    fn drop(&mut self) {
        self.reclaimer.unpin(self.epoch);
    }
}

impl BlobHolds {
    /// Lets go of `id`, which the body has opened (its open file keeps the
    /// bytes).
    pub(crate) fn release(&mut self, id: BlobId) {
        if let Some(at) = self.ids.iter().position(|&h| h == id) {
            self.ids.swap_remove(at);
            self.reclaimer.unhold(&[id]);
        }
    }
}

impl Drop for BlobHolds {
    fn drop(&mut self) {
        self.reclaimer.unhold(&self.ids);
    }
}

impl std::fmt::Debug for BlobHolds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobHolds")
            .field("ids", &self.ids.len())
            .finish()
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

    /// A planned body keeps only the blobs it has yet to open: a reader
    /// that stops reading holds back nothing else.
    #[test]
    fn a_body_holds_only_its_own_unopened_blobs() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Arc::new(BlobStore::disk(dir.path()).unwrap());
        let r = Reclaimer::new(Arc::clone(&blobs));
        let (p1, p2, other) = (BlobId(1), BlobId(2), BlobId(3));
        let mut holds = r.pin().hold(vec![p1, p2]);
        // Another object's blob freed meanwhile goes at once.
        assert_eq!(r.free(&[other]), [other]);
        assert!(r.free(&[p1, p2]).is_empty());
        holds.release(p1);
        assert_eq!(r.take_deleted(), [p1]);
        drop(holds);
        assert_eq!(r.take_deleted(), [p2]);
        assert_eq!(r.waiting(), 0);
    }
}
