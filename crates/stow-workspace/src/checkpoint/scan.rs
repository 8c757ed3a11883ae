//! Scanning a workspace tree: one `statx` per file on two threads, with
//! an optional watch on every directory (see `watch`) so the check after
//! copying is a drain of events rather than a second scan.

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ignore::gitignore::Gitignore;

use super::format::{DirectoryEntry, LinkEntry, SkippedEntry};
use crate::error::{Result, WsError};
use crate::ignorefile::is_ignored;
use crate::paths::{check_checkpoint_leaf, check_checkpoint_path, is_sensitive};
use crate::tree::excluded;
use crate::watch::{TreeWatch, Verdict};

/// One scanned file with the stat fields the cache keys on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Scanned {
    pub(super) path: String,
    pub(super) size: u64,
    pub(super) mode: u32,
    pub(super) mtime_ns: i64,
    pub(super) ctime_ns: i64,
    pub(super) ino: u64,
    /// Hard links: such a file can change through a name the capture's
    /// watch does not cover.
    pub(super) nlink: u64,
}

impl Scanned {
    fn new(path: String, meta: &fs::Metadata) -> Scanned {
        Scanned {
            path,
            size: meta.len(),
            mode: meta.permissions().mode() & 0o777,
            mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
            ctime_ns: meta.ctime() * 1_000_000_000 + meta.ctime_nsec(),
            ino: meta.ino(),
            nlink: meta.nlink(),
        }
    }
}

#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Scan {
    pub(super) files: Vec<Scanned>,
    pub(super) excluded: Vec<String>,
    /// Every directory under the root, with its mode.
    pub(super) dirs: Vec<DirectoryEntry>,
    /// Symbolic links, never followed.
    pub(super) links: Vec<LinkEntry>,
    /// Sockets, FIFOs and devices, not captured.
    pub(super) skipped: Vec<SkippedEntry>,
    /// Paths `.stowignore` keeps out (directories with a trailing `/`).
    pub(super) ignored: Vec<String>,
}

/// Threads a scan uses: directories are independent, so two threads keep
/// the per-entry `statx` calls (the bulk of a scan) flowing on a second core.
pub(super) const SCAN_THREADS: usize = 2;

/// Directories waiting to be read, shared by the scan threads.
pub(super) struct ScanQueue {
    /// (absolute directory, slash path relative to the root, depth).
    pub(super) pending: Vec<(PathBuf, String, usize)>,
    /// Threads currently reading a directory (they may queue more).
    pub(super) busy: usize,
    pub(super) error: Option<WsError>,
}

/// Scans the tree at `root`; with `watch`, each directory is watched before
/// it is read.
pub(super) fn scan(
    root: &Path,
    include_sensitive: bool,
    ignore: Option<&Gitignore>,
    watch: Option<&TreeWatch>,
) -> Result<Scan> {
    let queue = Mutex::new(ScanQueue {
        pending: vec![(root.to_path_buf(), String::new(), 0)],
        busy: 0,
        error: None,
    });
    let wake = std::sync::Condvar::new();
    let parts: Vec<Scan> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..SCAN_THREADS)
            .map(|_| s.spawn(|| scan_worker(&queue, &wake, include_sensitive, ignore, watch)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let q = queue
        .into_inner()
        .map_err(|_| WsError::InvalidRequest("scan worker panicked".into()))?;
    if let Some(e) = q.error {
        return Err(e);
    }
    if !q.pending.is_empty() || q.busy != 0 {
        return Err(WsError::InvalidRequest("scan worker panicked".into()));
    }
    let mut out = Scan::default();
    for p in parts {
        out.files.extend(p.files);
        out.excluded.extend(p.excluded);
        out.dirs.extend(p.dirs);
        out.links.extend(p.links);
        out.skipped.extend(p.skipped);
        out.ignored.extend(p.ignored);
    }
    // Threads finish directories in any order; the result is sorted so two
    // scans of the same tree compare equal.
    out.files.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    out.excluded.sort_unstable();
    out.dirs.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    out.links.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    out.skipped.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    out.ignored.sort_unstable();
    Ok(out)
}

/// Takes directories off the queue until none are left (or one failed).
pub(super) fn scan_worker(
    queue: &Mutex<ScanQueue>,
    wake: &std::sync::Condvar,
    sens: bool,
    ignore: Option<&Gitignore>,
    watch: Option<&TreeWatch>,
) -> Scan {
    let mut out = Scan::default();
    let mut subdirs = Vec::new();
    let Ok(mut q) = queue.lock() else {
        return out;
    };
    loop {
        if q.error.is_some() {
            break;
        }
        let Some((dir, rel, depth)) = q.pending.pop() else {
            if q.busy == 0 {
                break;
            }
            q = match wake.wait(q) {
                Ok(q) => q,
                Err(_) => return out,
            };
            continue;
        };
        q.busy += 1;
        drop(q);
        let guard = PanicGuard { queue, wake };
        if let Some(w) = watch {
            w.add(&dir, &rel, depth);
        }
        let r = scan_dir(&dir, &rel, depth, sens, ignore, &mut out, &mut subdirs);
        std::mem::forget(guard);
        q = match queue.lock() {
            Ok(q) => q,
            Err(_) => return out,
        };
        q.busy -= 1;
        match r {
            Ok(()) => q.pending.append(&mut subdirs),
            Err(e) => {
                subdirs.clear();
                q.error.get_or_insert(e);
            }
        }
        wake.notify_all();
    }
    wake.notify_all();
    out
}

/// Armed while a scan thread reads a directory: if that panics, the other
/// threads must not wait forever for it to queue more work.
pub(super) struct PanicGuard<'a> {
    pub(super) queue: &'a Mutex<ScanQueue>,
    pub(super) wake: &'a std::sync::Condvar,
}

impl Drop for PanicGuard<'_> {
    fn drop(&mut self) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.busy = q.busy.saturating_sub(1);
        q.error
            .get_or_insert_with(|| WsError::InvalidRequest("scan worker panicked".into()));
        self.wake.notify_all();
    }
}

/// Reads one directory: files are stat'ed (one `statx` each, relative to
/// the open directory), subdirectories are queued in `subdirs`. The entry
/// type comes from the directory listing, so directories cost no stat.
pub(super) fn scan_dir(
    dir: &Path,
    rel: &str,
    depth: usize,
    sens: bool,
    ignore: Option<&Gitignore>,
    out: &mut Scan,
    subdirs: &mut Vec<(PathBuf, String, usize)>,
) -> Result<()> {
    let rd = fs::read_dir(dir).map_err(|e| WsError::io_at("read directory", dir, e))?;
    // The first file of the directory has its whole path checked; the rest
    // only their names (the directory part is the same).
    let mut dir_checked = false;
    for entry in rd {
        let entry = entry.map_err(|e| WsError::io_at("read directory", dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if excluded(depth, &name) {
            continue;
        }
        let child = if rel.is_empty() {
            name.into_owned()
        } else {
            format!("{rel}/{name}")
        };
        let ft = entry
            .file_type()
            .map_err(|e| WsError::io_at("stat", &entry.path(), e))?;
        if ignore.is_some_and(|rules| is_ignored(rules, &child, ft.is_dir())) {
            out.ignored.push(if ft.is_dir() {
                format!("{child}/")
            } else {
                child
            });
            continue;
        }
        if ft.is_dir() {
            if !sens && is_sensitive(&format!("{child}/")) {
                out.excluded.push(format!("{child}/"));
                continue;
            }
            check_checkpoint_path(&child)?;
            let meta = entry
                .metadata()
                .map_err(|e| WsError::io_at("stat", &entry.path(), e))?;
            out.dirs.push(DirectoryEntry {
                path: child.clone(),
                mode: meta.permissions().mode() & 0o777,
            });
            subdirs.push((entry.path(), child, depth + 1));
            continue;
        }
        if !sens && is_sensitive(&child) {
            out.excluded.push(child);
            continue;
        }
        if dir_checked {
            check_checkpoint_leaf(&child)?;
        } else {
            check_checkpoint_path(&child)?;
            dir_checked = true;
        }
        if ft.is_symlink() {
            // The link itself, never what it points at.
            let target = fs::read_link(entry.path())
                .map_err(|e| WsError::io_at("read link", &entry.path(), e))?;
            out.links.push(LinkEntry {
                path: child,
                target: target.to_string_lossy().into_owned(),
            });
            continue;
        }
        if ft.is_file() {
            // DirEntry::metadata does not follow symlinks and stats
            // relative to the open directory.
            let meta = entry
                .metadata()
                .map_err(|e| WsError::io_at("stat", &entry.path(), e))?;
            // Replaced by something else since the listing: refuse; a
            // retry sees what is there now.
            if meta.file_type().is_file() {
                out.files.push(Scanned::new(child, &meta));
                continue;
            }
            return Err(WsError::WorkspaceChanged(format!(
                "{child} changed while it was scanned"
            )));
        }
        let reason = if ft.is_socket() {
            "a socket is not captured"
        } else if ft.is_fifo() {
            "a FIFO is not captured"
        } else {
            "a device file is not captured"
        };
        out.skipped.push(SkippedEntry {
            path: child,
            reason: reason.into(),
        });
    }
    Ok(())
}

/// Whether the tree still matches scan `before`: from the watch's events
/// when it covers the tree (plus a stat of each hard-linked file), else by
/// scanning again.
pub(super) fn tree_unchanged(
    root: &Path,
    before: &Scan,
    sens: bool,
    ignore: Option<&Gitignore>,
    watch: Option<&TreeWatch>,
) -> Result<bool> {
    match watch.map_or(Verdict::Unknown, |w| w.verdict(sens, ignore)) {
        Verdict::Changed => Ok(false),
        Verdict::Unchanged => Ok(before
            .files
            .iter()
            .filter(|f| f.nlink > 1)
            .all(|f| restat(root, f).as_ref() == Some(f))),
        Verdict::Unknown => Ok(scan(root, sens, ignore, None)? == *before),
    }
}

/// `f` as it is on disk now (`None` when it is no longer a regular file).
pub(super) fn restat(root: &Path, f: &Scanned) -> Option<Scanned> {
    let meta = fs::symlink_metadata(root.join(&f.path)).ok()?;
    meta.file_type()
        .is_file()
        .then(|| Scanned::new(f.path.clone(), &meta))
}
