//! Publication: the one way a checkpoint becomes visible, shared by
//! capture, import and delta apply.
//!
//! 1. [`prepare`]: the new blobs are made durable and named while the
//!    checkpoint's files (manifest, summary, receipt) are written into a
//!    stage directory `checkpoints/.stage-*` (invisible) and flushed.
//! 2. [`Pending::commit`]: the stage is renamed to `checkpoints/<id>` and
//!    the checkpoints directory flushed. The rename is the visibility point.
//!
//! A failure before the rename leaves no checkpoint (only complete,
//! unreferenced blobs, which a retry reuses and GC removes); a failure
//! after it is `OutcomeUnknown`, never `not committed`.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::blobs::{
    fsync_parallel, make_blobs_durable, publish_blob_names, staged_blobs, Payload, FEW_BLOBS,
};
use crate::error::{Result, WsError};
use crate::format::{erased, Summary};
use crate::fsutil::{create_private_dir, fsync_dir, random_hex, syncfs};
use crate::layout::checkpoints_dir;
use crate::registry::Registry;

/// A checkpoint directory written under a temporary name in the
/// checkpoints directory: invisible to readers until committed.
struct StagedCheckpoint {
    pub(super) dir: PathBuf,
}

/// Writes a checkpoint's manifest, summary and `extra` (name, bytes) files
/// into a fresh stage directory; with `fsync`, flushes them and the stage
/// directory as well. Nothing is left behind on failure.
fn stage_checkpoint(
    registry: &Registry,
    manifest: &dyn erased::Ser,
    summary: &Summary,
    extra: &[(&str, Vec<u8>)],
    fsync: bool,
) -> Result<StagedCheckpoint> {
    let parent = checkpoints_dir(registry);
    create_private_dir(&parent)?;
    let stage = StagedCheckpoint {
        dir: parent.join(format!(".stage-{}", random_hex(8))),
    };
    create_private_dir(&stage.dir)?;
    let write = || -> Result<()> {
        let mut files: Vec<(&str, Vec<u8>)> = vec![
            ("manifest.json", manifest.bytes()?),
            ("summary.json", erased::Ser::bytes(summary)?),
        ];
        files.extend(extra.iter().map(|(n, b)| (*n, b.clone())));
        let mut written: Vec<PathBuf> = Vec::with_capacity(files.len() + 1);
        for (name, bytes) in &files {
            let p = stage.dir.join(name);
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&p)
                .map_err(|e| WsError::io_at("write", &p, e))?;
            f.write_all(bytes)
                .map_err(|e| WsError::io_at("write", &p, e))?;
            written.push(p);
        }
        if fsync {
            written.push(stage.dir.clone());
            let paths: Vec<&Path> = written.iter().map(PathBuf::as_path).collect();
            fsync_parallel(&paths)?;
        }
        Ok(())
    };
    match write() {
        Ok(()) => Ok(stage),
        Err(e) => {
            stage.discard();
            Err(e)
        }
    }
}

impl StagedCheckpoint {
    /// Removes the stage directory (the checkpoint is abandoned).
    fn discard(&self) {
        let _ = fs::remove_dir_all(&self.dir);
    }

    /// Renames the stage to checkpoint `id` and flushes the checkpoints
    /// directory; with `syncfs`, first flushes the file system (the staged
    /// files and the blob names were written but not fsynced). Everything
    /// the checkpoint names must be durable once that flush is done:
    /// `after_flush` then runs on its own thread while the rename and the
    /// parent flush proceed.
    pub(crate) fn commit(
        self,
        registry: &Registry,
        id: &str,
        syncfs_first: bool,
        after_flush: &(dyn Fn() + Sync),
    ) -> Result<()> {
        let parent = checkpoints_dir(registry);
        let before_rename = || -> Result<PathBuf> {
            if syncfs_first {
                syncfs(&self.dir)?;
            }
            let dst = parent.join(id);
            if dst.exists() {
                return Err(WsError::AlreadyExists(format!("checkpoint {id}")));
            }
            Ok(dst)
        };
        let dst = match before_rename() {
            Ok(dst) => dst,
            Err(e) => {
                self.discard();
                return Err(e);
            }
        };
        std::thread::scope(|s| {
            s.spawn(after_flush);
            if let Err(e) = fs::rename(&self.dir, &dst) {
                self.discard();
                return Err(WsError::io_at("publish", &dst, e));
            }
            // Past the rename the checkpoint is visible: a failure now
            // leaves its durability unknown, never "not committed".
            fsync_dir(&parent).map_err(|e| WsError::OutcomeUnknown(e.to_string()))
        })
    }
}

/// A checkpoint ready to become visible: its new blobs are durable under
/// their content address and its files are in a flushed stage directory
/// (or, for many blobs, written and awaiting the one `syncfs` that
/// [`Pending::commit`] runs first).
pub(crate) struct Pending {
    stage: StagedCheckpoint,
    /// Recorded in the workspace's history just before publication.
    summary: Summary,
    syncfs_first: bool,
    /// Bytes newly stored in the blob store.
    pub stored_bytes: u64,
}

/// Step 1 of publication: makes the staged payloads among `blobs` durable
/// and names them by content, while the checkpoint's manifest, summary and
/// `extra` files are written to a stage directory. Runs both on their own
/// threads, so a caller may check its source meanwhile. Blobs named before
/// a failure stay (complete and unreferenced); the stage is removed.
pub(crate) fn prepare(
    registry: &Registry,
    blobs: &[(&Payload, u64)],
    manifest: &dyn erased::Ser,
    summary: &Summary,
    extra: &[(&str, Vec<u8>)],
) -> Result<Pending> {
    let staged = staged_blobs(blobs);
    // Many new blobs are flushed with one syncfs after they are named (it
    // covers the checkpoint's files too); a few are fsynced one by one.
    let many_blobs = staged.len() > FEW_BLOBS;
    let (named, stage) = std::thread::scope(|s| {
        let named = s.spawn(|| -> Result<u64> {
            make_blobs_durable(registry, &staged)?;
            let (stored, dirs) = publish_blob_names(registry, &staged)?;
            if !many_blobs {
                let dirs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
                fsync_parallel(&dirs)?;
            }
            Ok(stored)
        });
        let stage = stage_checkpoint(registry, manifest, summary, extra, !many_blobs);
        let panicked = || WsError::InvalidRequest("publication worker panicked".into());
        (named.join().unwrap_or_else(|_| Err(panicked())), stage)
    });
    let stage = stage?;
    match named {
        Ok(stored_bytes) => Ok(Pending {
            stage,
            summary: summary.clone(),
            syncfs_first: many_blobs,
            stored_bytes,
        }),
        Err(e) => {
            stage.discard();
            Err(e)
        }
    }
}

/// Makes staged blobs durable and names them, with no checkpoint: what a
/// refused capture keeps (complete, unreferenced; reused by a retry,
/// removed by GC). Caller holds the registry lock.
pub(crate) fn keep_blobs(registry: &Registry, blobs: &[(&Payload, u64)]) -> Result<()> {
    let staged = staged_blobs(blobs);
    if staged.is_empty() {
        return Ok(());
    }
    make_blobs_durable(registry, &staged)?;
    let (_, dirs) = publish_blob_names(registry, &staged)?;
    if staged.len() > FEW_BLOBS {
        syncfs(
            &dirs
                .first()
                .cloned()
                .unwrap_or_else(|| registry.state_dir()),
        )
    } else {
        let dirs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
        fsync_parallel(&dirs)
    }
}

impl Pending {
    /// Abandons the checkpoint: removes its stage directory.
    pub(crate) fn discard(self) {
        self.stage.discard();
    }

    /// Step 2 of publication: renames the stage to checkpoint `id` (refused
    /// with `already_exists` when one has that ID) and flushes the
    /// checkpoints directory. `after_flush` runs once everything the
    /// checkpoint names is durable, alongside the rename.
    pub(crate) fn commit(
        self,
        registry: &Registry,
        id: &str,
        after_flush: &(dyn Fn() + Sync),
    ) -> Result<()> {
        // Durable before the checkpoint is visible: the history never
        // misses a published checkpoint (see `history`).
        if let Err(e) = crate::history::record_published(registry, &self.summary) {
            self.stage.discard();
            return Err(e);
        }
        self.stage
            .commit(registry, id, self.syncfs_first, after_flush)
    }
}

/// Publishes checkpoint `id` in one go (import and delta apply: their
/// source is already verified). Returns the bytes newly stored.
pub(crate) fn publish(
    registry: &Registry,
    id: &str,
    blobs: &[(&Payload, u64)],
    manifest: &dyn erased::Ser,
    summary: &Summary,
) -> Result<u64> {
    let pending = prepare(registry, blobs, manifest, summary, &[])?;
    let stored = pending.stored_bytes;
    pending.commit(registry, id, &|| {})?;
    Ok(stored)
}
