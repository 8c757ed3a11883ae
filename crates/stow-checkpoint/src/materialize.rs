//! Reading a checkpoint back out: verification of every payload, and
//! materialization of its files into a new root.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::Ordering;

use sha2::{Digest, Sha256};

use crate::blobs::{blob_path, verify_blob};
use crate::error::{Result, WsError};
use crate::format::{object_as_file, CheckpointManifest, FileEntry};
use crate::fsutil::{create_dirs_within, hex, syncfs};
use crate::parallel::{for_each_in_dir_runs, parent_dir, worker_threads};
use crate::paths::check_checkpoint_path;
use crate::progress::Progress;
use crate::registry::Registry;
use crate::stored::load_manifest;

/// Verifies every payload of a checkpoint.
pub fn verify(registry: &Registry, id: &str) -> Result<CheckpointManifest> {
    let m = load_manifest(registry, id)?;
    for f in &m.files {
        check_checkpoint_path(&f.path)?;
        verify_blob(registry, f)?;
    }
    for o in &m.objects {
        verify_blob(registry, &object_as_file(o))?;
    }
    Ok(m)
}

/// Writes a checkpoint's files into `root` (which exists and is empty but
/// for `.stow`), reproducing modes exactly, flushed to disk, and returns
/// the restored tree's `base_identity`.
///
/// Each payload is verified while it is copied: the copy reads the blob
/// once, hashing the same bytes it writes, so a torn or altered blob fails
/// the restore (the caller removes the half-made root) without a separate
/// verification pass. The identity is a single sequential hash in walk
/// order, so one extra thread computes it from the (page-cached) blobs
/// while the copies run, instead of re-reading the whole tree afterwards.
pub fn materialize(
    registry: &Registry,
    m: &CheckpointManifest,
    root: &Path,
    progress: Option<&dyn Progress>,
) -> Result<String> {
    // Directories first (recorded ones, then every file's and link's
    // parent), component by component and never through a symlink; links
    // come last, so no file is ever written through one, and directory
    // modes are set once everything inside them exists.
    let mut made: BTreeSet<&str> = BTreeSet::new();
    fn parent_of(p: &str) -> Option<&str> {
        p.rsplit_once('/').map(|(d, _)| d)
    }
    for rel in m
        .dirs
        .iter()
        .map(|d| d.path.as_str())
        .chain(m.files.iter().filter_map(|f| parent_of(&f.path)))
        .chain(m.links.iter().filter_map(|l| parent_of(&l.path)))
    {
        check_checkpoint_path(rel)?;
        if made.insert(rel) {
            create_dirs_within(root, rel, 0o755)?;
        }
    }
    for f in &m.files {
        check_checkpoint_path(&f.path)?;
    }
    // Walk order of `base_identity`: names compared per directory level.
    // Checkpoint paths never contain `.git` or a leading `.stow` (checked
    // above), so the restored tree holds exactly these files besides `.stow`.
    let mut order: Vec<&FileEntry> = m.files.iter().collect();
    order.sort_by(|a, b| a.path.split('/').cmp(b.path.split('/')));
    let total: u64 = m.files.iter().map(|f| f.size).sum();
    let done = std::sync::atomic::AtomicU64::new(0);
    let failed = std::sync::atomic::AtomicBool::new(false);
    // The copies go directory by directory (see `parallel`); the identity
    // thread reads the blobs in walk order meanwhile.
    let mut by_dir: Vec<&FileEntry> = m.files.iter().collect();
    by_dir.sort_by(|a, b| (parent_dir(&a.path), &a.path).cmp(&(parent_dir(&b.path), &b.path)));
    let (copied, identity) = std::thread::scope(|s| {
        let identity = s.spawn(|| identity_of_blobs(registry, &order, &failed));
        let copied = for_each_in_dir_runs(
            &by_dir,
            |f| parent_dir(&f.path),
            worker_threads(by_dir.len()),
            || vec![0u8; 256 << 10],
            |buf, f| {
                copy_verified(registry, f, root, buf).inspect_err(|_| {
                    failed.store(true, Ordering::Relaxed);
                })?;
                if let Some(p) = progress {
                    p.update(
                        "restore",
                        done.fetch_add(f.size, Ordering::Relaxed) + f.size,
                        total,
                    );
                }
                Ok(())
            },
        );
        (copied, identity.join())
    });
    copied?;
    for l in &m.links {
        let at = root.join(&l.path);
        std::os::unix::fs::symlink(&l.target, &at)
            .map_err(|e| WsError::io_at("create link", &at, e))?;
    }
    // Deepest first: a directory's own mode may forbid writing into it.
    let mut dirs: Vec<&crate::DirectoryEntry> = m.dirs.iter().collect();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.path.matches('/').count()));
    for d in dirs {
        let at = root.join(&d.path);
        fs::set_permissions(&at, fs::Permissions::from_mode(d.mode))
            .map_err(|e| WsError::io_at("chmod", &at, e))?;
    }
    // The whole tree on disk before the caller records it as the
    // checkpoint's (registry, head): one flush of the file system, not a
    // fsync per file and directory. (The skip point lets the power-loss
    // harness show it notices the flush missing.)
    let copied_all = identity
        .as_ref()
        .is_ok_and(|r| r.as_ref().is_ok_and(Option::is_some));
    if copied_all && !crate::fault::skipped("workspace-skip-restore-syncfs") {
        syncfs(root)?;
    }
    match identity {
        Ok(Ok(Some(id))) => Ok(id),
        Ok(Ok(None)) => Err(WsError::InvalidRequest("restore stopped early".into())),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(WsError::InvalidRequest("restore worker panicked".into())),
    }
}

/// Copies one payload to `root/<path>` (exclusive create, exact mode),
/// hashing the bytes as they are written; a size or digest mismatch is
/// `Corrupt`.
pub(crate) fn copy_verified(
    registry: &Registry,
    f: &FileEntry,
    root: &Path,
    buf: &mut [u8],
) -> Result<File> {
    let src = blob_path(registry, &f.sha256);
    let dst = root.join(&f.path);
    let mut input = File::open(&src)
        .map_err(|e| WsError::Corrupt(format!("payload of {} ({}): {e}", f.path, f.sha256)))?;
    // Exclusive create: two manifest entries can never write one file.
    let mut out = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&dst)
        .map_err(|e| WsError::io_at("create", &dst, e))?;
    let mut h = Sha256::new();
    let mut total = 0u64;
    loop {
        let n = match input.read(buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(WsError::io_at("read", &src, e)),
        };
        if n == 0 {
            break;
        }
        let chunk = buf.get(..n).unwrap_or_default();
        h.update(chunk);
        out.write_all(chunk)
            .map_err(|e| WsError::io_at("write", &dst, e))?;
        total += n as u64;
    }
    if total != f.size || hex(&h.finalize()) != f.sha256 {
        return Err(WsError::Corrupt(format!(
            "payload of {} does not match its digest",
            f.path
        )));
    }
    // fchmod on the open file: exact mode regardless of the umask.
    out.set_permissions(fs::Permissions::from_mode(f.mode))
        .map_err(|e| WsError::io_at("chmod", &dst, e))?;
    Ok(out)
}

/// `base_identity` of a tree holding exactly `files` (in walk order), read
/// from their blobs. `None` when stopped because a copy failed.
pub(super) fn identity_of_blobs(
    registry: &Registry,
    files: &[&FileEntry],
    failed: &std::sync::atomic::AtomicBool,
) -> Result<Option<String>> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 << 10];
    for f in files {
        if failed.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let p = blob_path(registry, &f.sha256);
        let mut file = File::open(&p)
            .map_err(|e| WsError::Corrupt(format!("payload of {} ({}): {e}", f.path, f.sha256)))?;
        h.update(f.path.as_bytes());
        h.update([0u8]);
        let mut total = 0u64;
        loop {
            let n = match file.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(WsError::io_at("read", &p, e)),
            };
            if n == 0 {
                break;
            }
            h.update(buf.get(..n).unwrap_or_default());
            total += n as u64;
        }
        // The copy verifies the digest; the size check keeps a blob that
        // changed between the two reads from yielding a wrong identity.
        if total != f.size {
            return Err(WsError::Corrupt(format!(
                "payload of {} does not match its size",
                f.path
            )));
        }
        h.update([0u8]);
    }
    Ok(Some(format!("sha256:{}", hex(&h.finalize()))))
}
