//! The partition's content-addressed blob store: staging a payload while
//! hashing it, making staged payloads durable, naming them by their
//! SHA-256, verifying and reading them.
//!
//! Rule: a blob reaches its final name only after its bytes are durable, so
//! a name under `blobs/` always holds complete, verified bytes.

use std::collections::{BTreeSet, HashSet};
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::error::{Result, WsError};
use crate::format::FileEntry;
use crate::fsutil::{create_private_dir, hex, random_hex, syncfs};
use crate::layout::state;
use crate::registry::Registry;

/// Callers pass only validated digests (manifests and caches are checked
/// on load).
pub(crate) fn blob_path(registry: &Registry, sha: &str) -> PathBuf {
    state(registry)
        .join("blobs")
        .join(sha.get(..2).unwrap_or("00"))
        .join(sha)
}

/// A payload a checkpoint names: its digest and, when it is new to the
/// store, the staged temp file that publication names by that digest.
pub(crate) struct Payload {
    pub(crate) sha256: String,
    /// Staged temp blob to publish, when the blob did not exist yet.
    pub(crate) staged: Option<PathBuf>,
}

/// Why [`stage_reader`] refused a body.
pub(crate) enum StageError {
    /// Reading the source or writing the stage failed.
    Io(std::io::Error),
    /// The body was not the expected size (`got` bytes so far).
    Size { got: u64 },
}

/// The copy buffer of [`stage_reader`], one per thread.
const COPY_BUF_BYTES: usize = 256 << 10;

thread_local! {
    static COPY_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Copies `input` into a new staged file under `tmp` while hashing it
/// (one pass), expecting exactly `size` bytes; reads at most `size + 1`.
/// Returns the digest and the staged file, or deletes the stage. When a
/// blob with that digest exists already, the stage is dropped and the
/// payload names the existing blob.
pub(crate) fn stage_reader(
    registry: &Registry,
    tmp: &Path,
    input: &mut dyn Read,
    size: u64,
) -> std::result::Result<Payload, StageError> {
    let staged = tmp.join(random_hex(12));
    let mut out = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o400)
        .open(&staged)
        .map_err(StageError::Io)?;
    let mut h = Sha256::new();
    let mut total = 0u64;
    let mut limited = input.take(size.saturating_add(1));
    // One buffer per thread, not one 256 KiB allocation (and zeroing) per
    // file: a first capture stages every file of the tree.
    let res: std::io::Result<()> = COPY_BUF.with_borrow_mut(|buf| {
        if buf.len() < COPY_BUF_BYTES {
            buf.resize(COPY_BUF_BYTES, 0);
        }
        loop {
            let n = match limited.read(buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if n == 0 {
                break;
            }
            let chunk = buf.get(..n).unwrap_or_default();
            h.update(chunk);
            out.write_all(chunk)?;
            total += n as u64;
        }
        Ok(())
    });
    let refused = match res {
        Err(e) => Some(StageError::Io(e)),
        Ok(()) if total != size => Some(StageError::Size { got: total }),
        Ok(()) => None,
    };
    if let Some(e) = refused {
        let _ = fs::remove_file(&staged);
        return Err(e);
    }
    let sha = hex(&h.finalize());
    if blob_ok(registry, &sha, total) {
        let _ = fs::remove_file(&staged);
        return Ok(Payload {
            sha256: sha,
            staged: None,
        });
    }
    Ok(Payload {
        sha256: sha,
        staged: Some(staged),
    })
}

/// Stages `body`, whose SHA-256 the caller computed (`sha256`), as a new
/// blob candidate under `tmp`.
pub(crate) fn stage_known(tmp: &Path, body: &[u8], sha256: String) -> Result<Payload> {
    let staged = tmp.join(random_hex(12));
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o400)
        .open(&staged)
        .and_then(|mut f| f.write_all(body));
    if let Err(e) = written {
        let _ = fs::remove_file(&staged);
        return Err(WsError::io_at("stage", &staged, e));
    }
    Ok(Payload {
        sha256,
        staged: Some(staged),
    })
}

pub(crate) fn discard(produced: &[Payload]) {
    for p in produced {
        if let Some(t) = &p.staged {
            let _ = fs::remove_file(t);
        }
    }
}

pub(crate) fn blob_ok(registry: &Registry, sha: &str, size: u64) -> bool {
    fs::metadata(blob_path(registry, sha)).is_ok_and(|m| m.is_file() && m.len() == size)
}

/// Up to this many new blobs are fsynced individually rather than with one
/// `syncfs`.
pub(super) const FEW_BLOBS: usize = 64;

/// The payloads of a capture that were staged (new to the blob store).
pub(super) fn staged_blobs<'a>(all: &[(&'a Payload, u64)]) -> Vec<(&'a Payload, u64)> {
    all.iter()
        .filter(|(p, _)| p.staged.is_some())
        .copied()
        .collect()
}

/// At most this many fsyncs are in flight at once (the spec's bound for a
/// checkpoint's files; enough for the file system to batch them).
pub(super) const FSYNC_PARALLEL: usize = 16;

/// Fsyncs files or directories on up to `FSYNC_PARALLEL` threads, so the
/// file system can flush them together instead of one after another.
pub(super) fn fsync_parallel(paths: &[&Path]) -> Result<()> {
    let next = AtomicUsize::new(0);
    let first_err: Mutex<Option<WsError>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..paths.len().min(FSYNC_PARALLEL) {
            s.spawn(|| {
                while let Some(p) = paths.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let r = File::open(p).and_then(|f| f.sync_all());
                    if let Err(e) = r {
                        if let Ok(mut slot) = first_err.lock() {
                            slot.get_or_insert(WsError::io_at("fsync", p, e));
                        }
                    }
                }
            });
        }
    });
    match first_err.into_inner() {
        Ok(None) => Ok(()),
        Ok(Some(e)) => Err(e),
        Err(_) => Err(WsError::InvalidRequest("fsync worker panicked".into())),
    }
}

/// Makes the bytes of staged blobs durable. Nothing is published here, so
/// it can run while the tree is re-scanned; a capture that then finds the
/// tree changed only discards the staged files.
pub(super) fn make_blobs_durable(registry: &Registry, staged: &[(&Payload, u64)]) -> Result<()> {
    if staged.is_empty() {
        return Ok(());
    }
    // A few new blobs are fsynced (in parallel); many are flushed with one
    // syncfs (cheaper than thousands of fsyncs, but it also flushes other
    // dirty data of the file system).
    if staged.len() <= FEW_BLOBS {
        let files: Vec<&Path> = staged
            .iter()
            .filter_map(|(p, _)| p.staged.as_deref())
            .collect();
        fsync_parallel(&files)
    } else {
        syncfs(&state(registry))
    }
}

/// Moves durable staged blobs to their content address. Returns the bytes
/// newly stored and the directories whose entries changed: the caller
/// flushes them together with the checkpoint's own files, before the
/// checkpoint is renamed into place (the only point where a manifest
/// naming these blobs becomes visible).
pub(super) fn publish_blob_names(
    registry: &Registry,
    staged: &[(&Payload, u64)],
) -> Result<(u64, Vec<PathBuf>)> {
    if staged.is_empty() {
        return Ok((0, Vec::new()));
    }
    let blobs = state(registry).join("blobs");
    // A registry's first capture makes the blob root itself: its name in
    // the state directory is flushed with the rest, or a power loss could
    // keep the checkpoint and lose every blob it names (found by the
    // power-loss harness, tests/powerloss).
    let new_root = !blobs.is_dir();
    let mut stored = 0u64;
    let mut dirs = BTreeSet::new();
    // Blobs that existed before this capture were never staged (checked
    // after hashing, under the registry lock every capture holds), so the
    // only duplicates left are files of this capture with equal content.
    let mut published: HashSet<&str> = HashSet::new();
    for (p, size) in staged {
        let Some(tmp) = &p.staged else { continue };
        if !published.insert(p.sha256.as_str()) {
            let _ = fs::remove_file(tmp);
            continue;
        }
        let dst = blob_path(registry, &p.sha256);
        if let Some(d) = dst.parent() {
            if !dirs.contains(d) {
                create_private_dir(d)?;
                dirs.insert(d.to_path_buf());
            }
        }
        fs::rename(tmp, &dst).map_err(|e| WsError::io_at("publish blob", &dst, e))?;
        stored += size;
    }
    // The blob root gains an entry when a new `<xx>` directory is made.
    let mut changed = vec![blobs];
    if new_root {
        changed.push(state(registry));
    }
    changed.extend(dirs);
    Ok((stored, changed))
}

/// Reads a blob, checking its size and digest.
pub fn verify_blob(registry: &Registry, f: &FileEntry) -> Result<()> {
    let p = blob_path(registry, &f.sha256);
    let mut file = File::open(&p)
        .map_err(|e| WsError::Corrupt(format!("payload of {} ({}): {e}", f.path, f.sha256)))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 << 10];
    let mut total = 0u64;
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| WsError::io_at("read", &p, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        total += n as u64;
    }
    if total != f.size || hex(&h.finalize()) != f.sha256 {
        return Err(WsError::Corrupt(format!(
            "payload of {} does not match its digest",
            f.path
        )));
    }
    Ok(())
}

/// Reads a verified blob into memory (object payloads).
pub(crate) fn read_blob(registry: &Registry, f: &FileEntry) -> Result<Vec<u8>> {
    verify_blob(registry, f)?;
    let p = blob_path(registry, &f.sha256);
    fs::read(&p).map_err(|e| WsError::io_at("read", &p, e))
}

/// A blob opened for streaming: reads fail with `InvalidData` at the end
/// when the bytes read are not the entry's size and digest, so a consumer
/// that reads to the end never accepts a torn or altered blob.
pub struct VerifiedBlob {
    file: File,
    sha: Sha256,
    read: u64,
    size: u64,
    sha256: String,
}

/// Opens `f`'s blob for a verified streaming read.
pub fn open_verified(registry: &Registry, f: &FileEntry) -> Result<VerifiedBlob> {
    let p = blob_path(registry, &f.sha256);
    let file = File::open(&p)
        .map_err(|e| WsError::Corrupt(format!("payload of {} ({}): {e}", f.path, f.sha256)))?;
    Ok(VerifiedBlob {
        file,
        sha: Sha256::new(),
        read: 0,
        size: f.size,
        sha256: f.sha256.clone(),
    })
}

impl Read for VerifiedBlob {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read(buf)?;
        self.sha.update(&buf[..n]);
        self.read += n as u64;
        if n == 0 && (self.read != self.size || hex(&self.sha.clone().finalize()) != self.sha256) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the blob does not match its digest",
            ));
        }
        Ok(n)
    }
}

/// Physical bytes held by the partition's blob store.
pub fn stored_bytes(registry: &Registry) -> u64 {
    let mut total = 0;
    if let Ok(rd) = fs::read_dir(state(registry).join("blobs")) {
        for sub in rd.flatten() {
            if let Ok(inner) = fs::read_dir(sub.path()) {
                total += inner
                    .flatten()
                    .filter_map(|b| b.metadata().ok())
                    .map(|m| m.len())
                    .sum::<u64>();
            }
        }
    }
    total
}

pub(super) fn discard_pairs(v: &[(Payload, u64)]) {
    for (p, _) in v {
        if let Some(t) = &p.staged {
            let _ = fs::remove_file(t);
        }
    }
}

/// Stages bytes already in memory as a blob candidate.
pub(crate) fn stage_bytes(registry: &Registry, tmp: &Path, body: &[u8]) -> Result<Payload> {
    let sha = hex(&Sha256::digest(body));
    if blob_ok(registry, &sha, body.len() as u64) {
        return Ok(Payload {
            sha256: sha,
            staged: None,
        });
    }
    let staged = tmp.join(random_hex(12));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o400)
        .open(&staged)
        .map_err(|e| WsError::io_at("stage", &staged, e))?;
    if let Err(e) = f.write_all(body) {
        let _ = fs::remove_file(&staged);
        return Err(WsError::io_at("stage", &staged, e));
    }
    Ok(Payload {
        sha256: sha,
        staged: Some(staged),
    })
}
