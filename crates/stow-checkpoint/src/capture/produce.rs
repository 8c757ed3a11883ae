//! Producing a capture's payloads: hashing and staging on a few threads
//! the files the stat cache does not vouch for, and the stat-cache
//! entries a capture leaves.

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::blobs::{discard, discard_pairs, stage_reader, Payload, StageError};
use crate::error::{Result, WsError};
use crate::fsutil::{create_private_dir, random_hex};
use crate::progress::{check_deadline, Progress};
use crate::registry::Registry;
use crate::scan::Scanned;
use crate::statcache::{unhex32, CacheEntry};

/// The payloads of a capture's files: every file's digest (scan order;
/// `None` where it was not produced) and the new blobs staged for them.
#[derive(Default)]
pub(crate) struct Produced {
    pub(crate) digests: Vec<Option<[u8; 32]>>,
    pub(crate) staged: Vec<(Payload, u64)>,
}

/// One staging directory per producing thread, under `tmp`: creating a
/// file takes its directory's lock, so threads staging into one directory
/// spent their time waiting on each other (see `parallel`). Removed, with
/// anything still in them, when dropped: by then every staged file was
/// published, kept or discarded. After a crash, GC removes them.
#[derive(Default)]
pub(crate) struct StageDirs {
    dirs: Vec<std::path::PathBuf>,
    /// Made for this capture (else the threads share `tmp` itself).
    owned: bool,
}

/// Up to this many files, the threads stage into `tmp` itself (two
/// directories more would cost more than they save).
const SHARED_STAGE_FILES: usize = 64;

impl StageDirs {
    /// The staging directories for producing the files `digests` lacks.
    /// The capture keeps them until it is done with what they hold.
    pub(crate) fn for_capture(tmp: &Path, digests: &[Option<[u8; 32]>]) -> Result<StageDirs> {
        let todo = digests.iter().filter(|d| d.is_none()).count();
        StageDirs::create(tmp, crate::parallel::worker_threads(todo), todo)
    }

    fn create(tmp: &Path, n: usize, files: usize) -> Result<StageDirs> {
        if files <= SHARED_STAGE_FILES {
            return Ok(StageDirs {
                dirs: vec![tmp.to_path_buf(); n],
                owned: false,
            });
        }
        let base = random_hex(8);
        let mut made = StageDirs {
            dirs: Vec::with_capacity(n),
            owned: true,
        };
        for k in 0..n.max(1) {
            let d = tmp.join(format!("{base}.{k}"));
            create_private_dir(&d)?;
            made.dirs.push(d);
        }
        Ok(made)
    }
}

impl Drop for StageDirs {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        for d in &self.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

impl Produced {
    pub(crate) fn discard(&self) {
        discard_pairs(&self.staged);
    }
}

/// Stat-cache entries for the scanned `files` whose digest is known and
/// that `keep` accepts.
pub(crate) fn cache_entries(
    files: &[Scanned],
    digests: &[Option<[u8; 32]>],
    keep: impl Fn(&Scanned) -> bool,
) -> Vec<CacheEntry> {
    files
        .iter()
        .zip(digests)
        .filter_map(|(f, d)| {
            let sha256 = (*d)?;
            keep(f).then(|| cache_entry(f, sha256))
        })
        .collect()
}

/// The stat-cache entry of scanned file `f` with digest `sha256`.
pub(crate) fn cache_entry(f: &Scanned, sha256: [u8; 32]) -> CacheEntry {
    CacheEntry {
        path: f.path.clone(),
        size: f.size,
        mode: f.mode,
        mtime_ns: f.mtime_ns,
        ctime_ns: f.ctime_ns,
        ino: f.ino,
        sha256,
    }
}

/// Produces the payload of every file whose digest is not known yet
/// (`digests`, in scan order): hashed and staged on a few threads, one per
/// directory of `stages`. On a
/// failure the other files are still produced when the failure is the
/// tree changing (their progress is worth keeping), and the partial result
/// comes back with the error.
pub(crate) fn produce_all(
    registry: &Registry,
    root: &Path,
    stages: &StageDirs,
    files: &[Scanned],
    mut digests: Vec<Option<[u8; 32]>>,
    deadline: Option<std::time::Instant>,
    progress: Option<&dyn Progress>,
) -> std::result::Result<Produced, (Produced, WsError)> {
    // Cached digests need no I/O: the cache is dropped whenever GC deletes
    // blobs, so a digest it holds names a blob that still exists.
    let todo: Vec<usize> = (0..files.len()).filter(|&i| digests[i].is_none()).collect();
    let total: u64 = todo.iter().map(|&i| files[i].size).sum();
    let done = std::sync::atomic::AtomicU64::new(0);
    let next = AtomicUsize::new(0);
    let failed = std::sync::atomic::AtomicBool::new(false);
    let outcomes: Vec<Vec<(usize, Result<Payload>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = stages
            .dirs
            .iter()
            .map(|tmp| {
                let (next, failed, done, todo) = (&next, &failed, &done, &todo);
                s.spawn(move || {
                    let mut local = Vec::new();
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        if k >= todo.len() || failed.load(Ordering::Relaxed) {
                            break;
                        }
                        let i = todo[k];
                        let r = check_deadline(deadline)
                            .and_then(|()| produce_one(registry, root, tmp, &files[i]));
                        if matches!(&r, Err(e) if !matches!(e, WsError::WorkspaceChanged(_))) {
                            failed.store(true, Ordering::Relaxed);
                        }
                        local.push((i, r));
                        if let Some(p) = progress {
                            let size = files[i].size;
                            let now = done.fetch_add(size, Ordering::Relaxed) + size;
                            p.update("capture", now, total);
                        }
                    }
                    local
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut first_err = None;
    let mut staged = Vec::new();
    for (i, r) in outcomes.into_iter().flatten() {
        match r.map(|p| {
            let sha = unhex32(&p.sha256)
                .ok_or_else(|| WsError::InvalidRequest("a capture digest is malformed".into()));
            (sha, p)
        }) {
            Ok((Ok(sha), p)) => {
                digests[i] = Some(sha);
                if p.staged.is_some() {
                    staged.push((p, files[i].size));
                }
            }
            Ok((Err(e), p)) => {
                discard(std::slice::from_ref(&p));
                first_err.get_or_insert(e);
            }
            Err(e) => {
                // Prefer reporting a failure that is not the tree changing.
                if !matches!(e, WsError::WorkspaceChanged(_))
                    || !matches!(first_err, Some(WsError::WorkspaceChanged(_)) | None)
                {
                    first_err = Some(e);
                } else {
                    first_err.get_or_insert(e);
                }
            }
        }
    }
    let produced = Produced { digests, staged };
    if let Some(e) = first_err {
        return Err((produced, e));
    }
    if produced.digests.iter().any(Option::is_none) {
        let e = WsError::InvalidRequest("a capture worker failed".into());
        return Err((produced, e));
    }
    Ok(produced)
}

pub(crate) fn produce_one(
    registry: &Registry,
    root: &Path,
    tmp: &Path,
    file: &Scanned,
) -> Result<Payload> {
    // Hash and stage in one read. Staging even when the blob may already
    // exist keeps this single-pass; the duplicate is dropped at publication.
    let src = root.join(&*file.path);
    // Never through a link; a file that went away (or became something
    // else) since the scan listed it is the tree changing, not an I/O
    // failure.
    let mut input = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&src)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT | libc::ELOOP | libc::ENOTDIR | libc::EISDIR) => {
                WsError::WorkspaceChanged(format!(
                    "{} was removed or replaced while the capture copied it",
                    file.path
                ))
            }
            _ => WsError::io_at("read", &src, e),
        })?;
    stage_reader(registry, tmp, &mut input, file.size).map_err(|e| match e {
        StageError::Io(e) => WsError::io_at("copy", &src, e),
        StageError::Size { .. } => {
            WsError::WorkspaceChanged(format!("{} changed size while it was copied", file.path))
        }
    })
}
