//! Scanning a workspace tree: one `statx` per file on two threads, with
//! an optional watch on every directory (see `watch`) so the check after
//! copying is a drain of events rather than a second scan.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::ignorefile::{Rules, GIT_IGNORE_FILE};
use crate::listing::{self, EntryKind};

use crate::error::{Result, WsError};
use crate::format::{DirectoryEntry, LinkEntry, SkippedEntry};
use crate::paths::{check_checkpoint_leaf, check_checkpoint_path, is_sensitive};
use crate::walk::excluded;
use crate::watch::{Changes, TreeWatch};

/// One scanned file with the stat fields the cache keys on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Scanned {
    pub(super) path: std::sync::Arc<str>,
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
    fn new(path: impl Into<std::sync::Arc<str>>, meta: &fs::Metadata) -> Scanned {
        Scanned {
            path: path.into(),
            size: meta.len(),
            mode: meta.permissions().mode() & 0o777,
            mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
            ctime_ns: meta.ctime() * 1_000_000_000 + meta.ctime_nsec(),
            ino: meta.ino(),
            nlink: meta.nlink(),
        }
    }
}

#[cfg(test)]
impl Scanned {
    /// A regular file of `size` bytes at `path`, mode 0644, one link.
    pub(super) fn for_test(path: &str, size: u64) -> Scanned {
        Scanned {
            path: path.into(),
            size,
            mode: 0o644,
            mtime_ns: 1,
            ctime_ns: 2,
            ino: 3,
            nlink: 1,
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
    ignore: Option<&Rules>,
    watch: Option<&TreeWatch>,
) -> Result<Scan> {
    scan_from(
        vec![(root.to_path_buf(), String::new(), 0)],
        include_sensitive,
        ignore,
        watch,
    )
}

/// Scans the subtrees `starts` (absolute directory, slash path from the
/// root, depth), sorted.
fn scan_from(
    starts: Vec<(PathBuf, String, usize)>,
    include_sensitive: bool,
    ignore: Option<&Rules>,
    watch: Option<&TreeWatch>,
) -> Result<Scan> {
    let queue = Mutex::new(ScanQueue {
        pending: starts,
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
    // Threads finish directories in any order; each sorted its own part,
    // so the parts are merged, not sorted again, and two scans of the
    // same tree compare equal.
    Ok(parts.into_iter().fold(Scan::default(), Scan::merge))
}

impl Scan {
    /// Sorts every list by path. Paths are unique within a scan, so an
    /// unstable sort gives the one order and needs no scratch buffer.
    fn sort(&mut self) {
        self.files.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        self.excluded.sort_unstable();
        self.dirs.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        self.links.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        self.skipped.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        self.ignored.sort_unstable();
    }

    /// Merges sorted scan `b` (of other directories) into this sorted one.
    fn merge(self, b: Scan) -> Scan {
        Scan {
            files: merge_sorted(self.files, b.files, |f| &f.path),
            excluded: merge_sorted(self.excluded, b.excluded, |p| p),
            dirs: merge_sorted(self.dirs, b.dirs, |d| &d.path),
            links: merge_sorted(self.links, b.links, |l| &l.path),
            skipped: merge_sorted(self.skipped, b.skipped, |s| &s.path),
            ignored: merge_sorted(self.ignored, b.ignored, |p| p),
        }
    }
}

/// The directory part of slash path `path` ("" at the root); a trailing
/// slash (an excluded or ignored directory) is not a component.
pub(super) fn parent_dir(path: &str) -> &str {
    let path = path.strip_suffix('/').unwrap_or(path);
    path.rsplit_once('/').map_or("", |(p, _)| p)
}

/// The tree now, from scan `old` and the captured names that changed since
/// it was taken (`changed`, from a watch that has covered the tree since):
/// the directories holding a change are read again, a changed directory
/// (created, replaced, moved in) is scanned whole, and everything else is
/// kept from `old`. Each directory read is watched first.
pub(super) fn rescan(
    root: &Path,
    old: Scan,
    changed: &std::collections::BTreeSet<String>,
    sens: bool,
    ignore: Option<&Rules>,
    watch: &TreeWatch,
) -> Result<Scan> {
    use std::collections::BTreeSet;
    if changed.is_empty() {
        return Ok(old);
    }
    let relist: BTreeSet<&str> = changed.iter().map(|p| parent_dir(p)).collect();
    // Changed itself or beneath a changed directory: its ancestors are
    // looked up, so the cost follows the depth, not the number of changes.
    let replaced = |path: &str| {
        let mut p = path.strip_suffix('/').unwrap_or(path);
        loop {
            if changed.contains(p) {
                return true;
            }
            match p.rsplit_once('/') {
                Some((parent, _)) => p = parent,
                None => return false,
            }
        }
    };
    // Sorted by path: looked up by binary search while re-reading, then
    // kept like the other lists.
    let old_dirs = old.dirs;
    let known_dir = |rel: &str| {
        old_dirs
            .binary_search_by(|d| d.path.as_str().cmp(rel))
            .is_ok()
    };
    let stale = |path: &str| relist.contains(parent_dir(path)) || replaced(path);
    let mut kept = Scan {
        files: drop_stale(old.files, |f| &f.path, &relist, changed, &stale),
        excluded: drop_stale(old.excluded, |p| p, &relist, changed, &stale),
        dirs: Vec::new(),
        links: drop_stale(old.links, |l| &l.path, &relist, changed, &stale),
        skipped: drop_stale(old.skipped, |s| &s.path, &relist, changed, &stale),
        ignored: drop_stale(old.ignored, |p| p, &relist, changed, &stale),
    };
    let mut out = Scan::default();
    // Directories to scan whole: new or replaced ones met while re-reading.
    let mut whole: Vec<(PathBuf, String, usize)> = Vec::new();
    for &dir in &relist {
        // A directory that is itself replaced is read with its subtree.
        if replaced(dir) && !dir.is_empty() {
            continue;
        }
        let abs = if dir.is_empty() {
            root.to_path_buf()
        } else {
            root.join(dir)
        };
        let depth = if dir.is_empty() {
            0
        } else {
            dir.split('/').count()
        };
        match fs::symlink_metadata(&abs) {
            Ok(m) if m.is_dir() => {}
            // Gone (or no longer a directory): its parent's events say so.
            _ => continue,
        }
        watch.add(&abs, dir, depth);
        let mut subdirs = Vec::new();
        scan_dir(&abs, dir, depth, sens, ignore, &mut out, &mut subdirs)?;
        for (abs, rel, depth) in subdirs {
            if !known_dir(&rel) || replaced(&rel) {
                whole.push((abs, rel, depth));
            }
        }
    }
    out.sort();
    if !whole.is_empty() {
        out = out.merge(scan_from(whole, sens, ignore, Some(watch))?);
    }
    kept.dirs = drop_stale(old_dirs, |d| &d.path, &relist, changed, &stale);
    // What was read again is merged into what was kept: both sorted, so
    // one pass, not a sort of the whole tree.
    kept.files = merge_sorted(kept.files, out.files, |f| &f.path);
    kept.excluded = merge_sorted(kept.excluded, out.excluded, |p| p);
    kept.dirs = merge_sorted(kept.dirs, out.dirs, |d| &d.path);
    kept.links = merge_sorted(kept.links, out.links, |l| &l.path);
    kept.skipped = merge_sorted(kept.skipped, out.skipped, |s| &s.path);
    kept.ignored = merge_sorted(kept.ignored, out.ignored, |p| p);
    Ok(kept)
}

/// The entries of `list` (sorted by `key`) that `stale` does not reject.
/// Only the ranges the changes can reach are looked at: the entries below
/// each changed path and each re-read directory (contiguous in path
/// order), the changed paths themselves and, when the root is re-read, the
/// names at the root.
fn drop_stale<T>(
    list: Vec<T>,
    key: impl Fn(&T) -> &str,
    relist: &std::collections::BTreeSet<&str>,
    changed: &std::collections::BTreeSet<String>,
    stale: &dyn Fn(&str) -> bool,
) -> Vec<T> {
    let mut doomed = vec![false; list.len()];
    let lower = |bound: &str| list.partition_point(|e| key(e) < bound);
    // "p/…" lies in ["p/", "p0"): '0' follows '/'.
    let mut look = |prefix: &str| {
        let (from, to) = (lower(&format!("{prefix}/")), lower(&format!("{prefix}0")));
        for i in from..to {
            doomed[i] = stale(key(&list[i]));
        }
    };
    for dir in relist.iter().filter(|d| !d.is_empty()) {
        look(dir);
    }
    for p in changed.iter().filter(|p| !p.is_empty()) {
        look(p);
    }
    for p in changed {
        // The path itself, and as an excluded or ignored directory.
        for exact in [p.clone(), format!("{p}/")] {
            let i = lower(&exact);
            if list.get(i).is_some_and(|e| key(e) == exact) {
                doomed[i] = true;
            }
        }
    }
    if relist.contains("") {
        for (i, e) in list.iter().enumerate() {
            let k = key(e);
            if !k.strip_suffix('/').unwrap_or(k).contains('/') {
                doomed[i] = stale(k);
            }
        }
    }
    list.into_iter()
        .zip(doomed)
        .filter_map(|(e, d)| (!d).then_some(e))
        .collect()
}

/// Merges two lists sorted by `key` into one (on equal keys, `a`'s entry
/// first). When `b` is short (what a monitored capture read again) each
/// of its entries finds its place by binary search, and the runs of `a`
/// between them move without being compared; lists of like size (the
/// parts of a scan's threads) are merged in one pass.
fn merge_sorted<T>(a: Vec<T>, b: Vec<T>, key: impl Fn(&T) -> &str) -> Vec<T> {
    if b.is_empty() {
        return a;
    }
    if a.is_empty() {
        return b;
    }
    if b.len().saturating_mul(16) > a.len() {
        let mut out = Vec::with_capacity(a.len() + b.len());
        let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
        while let (Some(x), Some(y)) = (a.peek(), b.peek()) {
            let next = if key(x) <= key(y) { a.next() } else { b.next() };
            out.extend(next);
        }
        out.extend(a);
        out.extend(b);
        return out;
    }
    let cuts: Vec<usize> = b
        .iter()
        .map(|y| a.partition_point(|x| key(x) <= key(y)))
        .collect();
    let mut out = Vec::with_capacity(a.len() + b.len());
    let mut a = a.into_iter();
    let mut taken = 0;
    for (y, cut) in b.into_iter().zip(cuts) {
        out.extend(a.by_ref().take(cut.saturating_sub(taken)));
        taken = taken.max(cut);
        out.push(y);
    }
    out.extend(a);
    out
}

/// Takes directories off the queue until none are left (or one failed).
pub(super) fn scan_worker(
    queue: &Mutex<ScanQueue>,
    wake: &std::sync::Condvar,
    sens: bool,
    ignore: Option<&Rules>,
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
    drop(q);
    out.sort();
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

/// An entry that went away (or became something else) between its
/// listing and its read is the tree changing (retryable), not an I/O
/// failure: a writer may remove a directory at any moment.
fn changed_or_io(what: &str, path: &Path, shown: &str, e: std::io::Error) -> WsError {
    let gone = e.kind() == std::io::ErrorKind::NotFound
        || matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP));
    if gone && !(shown.is_empty() && what == "read directory") {
        WsError::WorkspaceChanged(format!("{shown} was removed or replaced while it was read"))
    } else {
        WsError::io_at(what, path, e)
    }
}

/// The last segment of slash path `path`.
fn leaf_of(path: &str) -> &str {
    path.rsplit_once('/').map_or(path, |(_, leaf)| leaf)
}

/// Reads one directory: files are stat'ed (one `statx` each, relative to
/// the open directory), subdirectories are queued in `subdirs`. The entry
/// type comes from the directory listing, so directories cost no stat.
pub(super) fn scan_dir(
    dir: &Path,
    rel: &str,
    depth: usize,
    sens: bool,
    ignore: Option<&Rules>,
    out: &mut Scan,
    subdirs: &mut Vec<(PathBuf, String, usize)>,
) -> Result<()> {
    let (open, listed) = listing::list(dir, rel, |name| !excluded(depth, name))
        .map_err(|e| changed_or_io("read directory", dir, rel, e))?;
    let dir_rules = ignore.map(|rules| {
        let gitignore = listed
            .iter()
            .any(|l| l.kind == EntryKind::File && leaf_of(&l.child) == GIT_IGNORE_FILE);
        rules.in_scanned_dir(rel, gitignore)
    });
    // The first file of the directory has its whole path checked; the rest
    // only their names (the directory part is the same).
    let mut dir_checked = false;
    for entry in listed {
        let is_dir = entry.kind == EntryKind::Dir;
        if dir_rules
            .as_ref()
            .is_some_and(|r| r.is_ignored(&entry.child, is_dir))
        {
            out.ignored.push(if is_dir {
                format!("{}/", entry.child)
            } else {
                entry.child
            });
            continue;
        }
        if !entry.is_utf8() {
            // A checkpoint holds UTF-8 paths only: listed, never captured
            // (failing the capture would fail every capture of the tree).
            out.skipped.push(SkippedEntry {
                path: entry.child,
                reason: "a name that is not UTF-8 is not captured".into(),
            });
            continue;
        }
        let stat = |e: &listing::Listed| {
            open.stat(e)
                .map_err(|err| changed_or_io("stat", &open.path_of(e), &e.child, err))
        };
        if is_dir {
            if !sens && is_sensitive(&format!("{}/", entry.child)) {
                out.excluded.push(format!("{}/", entry.child));
                continue;
            }
            check_checkpoint_path(&entry.child)?;
            let st = stat(&entry)?;
            out.dirs.push(DirectoryEntry {
                path: entry.child.clone(),
                mode: st.mode,
            });
            subdirs.push((open.path_of(&entry), entry.child, depth + 1));
            continue;
        }
        if !sens && is_sensitive(&entry.child) {
            out.excluded.push(entry.child);
            continue;
        }
        if dir_checked {
            check_checkpoint_leaf(&entry.child)?;
        } else {
            check_checkpoint_path(&entry.child)?;
            dir_checked = true;
        }
        match entry.kind {
            EntryKind::Link => {
                // The link itself, never what it points at.
                let target = open.read_link(&entry).map_err(|e| {
                    changed_or_io("read link", &open.path_of(&entry), &entry.child, e)
                })?;
                out.links.push(LinkEntry {
                    path: entry.child,
                    target,
                });
            }
            EntryKind::File => {
                let st = stat(&entry)?;
                // Replaced by something else since the listing: refuse; a
                // retry sees what is there now.
                if st.kind != Some(EntryKind::File) {
                    return Err(WsError::WorkspaceChanged(format!(
                        "{} changed while it was scanned",
                        entry.child
                    )));
                }
                out.files.push(Scanned {
                    path: entry.child.into(),
                    size: st.size,
                    mode: st.mode,
                    mtime_ns: st.mtime_ns,
                    ctime_ns: st.ctime_ns,
                    ino: st.ino,
                    nlink: st.nlink,
                });
            }
            kind => out.skipped.push(SkippedEntry {
                path: entry.child,
                reason: match kind {
                    EntryKind::Socket => "a socket is not captured",
                    EntryKind::Fifo => "a FIFO is not captured",
                    _ => "a device file is not captured",
                }
                .into(),
            }),
        }
    }
    Ok(())
}

/// What changed in the tree since scan `before`: from the watch's events
/// when it covers the tree (plus a stat of each hard-linked file, which can
/// change through a name outside it), else by scanning again (which can
/// only say "nothing" or "unknown").
pub(super) fn tree_changes(
    root: &Path,
    before: &Scan,
    sens: bool,
    ignore: Option<&Rules>,
    watch: Option<&TreeWatch>,
) -> Result<Changes> {
    if let Some(Changes::Paths(mut set)) = watch.map(|w| w.changes(sens, ignore)) {
        for f in before.files.iter().filter(|f| f.nlink > 1) {
            if restat(root, f).as_ref() != Some(f) {
                set.insert(f.path.to_string());
            }
        }
        return Ok(Changes::Paths(set));
    }
    if scan(root, sens, ignore, None)? == *before {
        Ok(Changes::Paths(Default::default()))
    } else {
        Ok(Changes::Unknown)
    }
}

/// `f` as it is on disk now (`None` when it is no longer a regular file).
pub(super) fn restat(root: &Path, f: &Scanned) -> Option<Scanned> {
    let meta = fs::symlink_metadata(root.join(&*f.path)).ok()?;
    meta.file_type()
        .is_file()
        .then(|| Scanned::new(f.path.clone(), &meta))
}

#[cfg(test)]
mod tests {
    use super::merge_sorted;
    use super::{scan, scan_dir, Scan};

    #[test]
    fn a_directory_removed_before_it_is_read_is_the_tree_changing() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut out, mut subdirs) = (Scan::default(), Vec::new());
        let gone = tmp.path().join("shared");
        let e = scan_dir(&gone, "shared", 1, false, None, &mut out, &mut subdirs).unwrap_err();
        assert_eq!(e.code(), "workspace_changed", "{e}");
        assert!(e.retryable());
        // The root itself missing is not a change of the tree.
        let e = scan_dir(&gone, "", 0, false, None, &mut out, &mut subdirs).unwrap_err();
        assert_eq!(e.code(), "io_failure", "{e}");
    }

    /// Nested `.gitignore` files found from the listing (no stat of their
    /// own) rule as git's do: a regular one rules its directory and those
    /// below; one that is a link does not; every decision of the scan is
    /// the one the rules give a single path looked up on its own.
    #[test]
    fn nested_gitignores_from_the_listing_rule_as_the_rules_do() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let write = |p: &str, s: &str| {
            let p = root.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, s).unwrap();
        };
        write(".gitignore", "*.log\n");
        write("a/.gitignore", "x.txt\n");
        write("a/x.txt", "");
        write("a/y.txt", "");
        write("a/sub/x.txt", "");
        write("b/x.txt", "");
        std::os::unix::fs::symlink("../a/.gitignore", root.join("b/.gitignore")).unwrap();
        write("c/d/.gitignore", "!keep.log\n");
        write("c/d/keep.log", "");
        write("c/d/other.log", "");
        write("c/top.log", "");
        let rules = crate::ignorefile::load(root, true).unwrap().unwrap();
        let got = scan(root, false, Some(&rules), None).unwrap();
        assert_eq!(
            got.ignored,
            ["a/sub/x.txt", "a/x.txt", "c/d/other.log", "c/top.log"]
        );
        let kept: Vec<&str> = got.files.iter().map(|f| &*f.path).collect();
        assert_eq!(
            kept,
            [
                ".gitignore",
                "a/.gitignore",
                "a/y.txt",
                "b/x.txt",
                "c/d/.gitignore",
                "c/d/keep.log"
            ]
        );
        let fresh = crate::ignorefile::load(root, true).unwrap().unwrap();
        for p in got.ignored.iter().map(String::as_str).chain(kept) {
            assert_eq!(
                fresh.is_ignored(p, false),
                got.ignored.iter().any(|i| i == p),
                "{p}"
            );
        }
    }

    fn key(e: &(String, u8)) -> &str {
        &e.0
    }

    #[test]
    fn merging_keeps_path_order_with_the_kept_entry_first() {
        let tag = |v: &[&str], t: u8| -> Vec<(String, u8)> {
            v.iter().map(|s| (s.to_string(), t)).collect()
        };
        let a = tag(&["a", "b/x", "b/y", "d", "f"], 0);
        let b = tag(&["0", "b/y", "c", "e", "z/1", "z/2"], 1);
        let mut want = [a.clone(), b.clone()].concat();
        // A stable sort: on equal paths the kept entry (0) stays first.
        want.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(merge_sorted(a.clone(), b.clone(), key), want);
        assert_eq!(merge_sorted(a.clone(), Vec::new(), key), a);
        assert_eq!(merge_sorted(Vec::new(), b.clone(), key), b);
        // Both strategies: a short list into a long one (binary search)
        // and lists of like size (one pass) give the stable order.
        let long: Vec<String> = (0..100).map(|i| format!("p{i:03}")).collect();
        let long = tag(&long.iter().map(String::as_str).collect::<Vec<_>>(), 0);
        let short = tag(&["p000", "p0505", "p099", "q"], 1);
        for (a, b) in [(long.clone(), short.clone()), (short, long)] {
            let mut want = [a.clone(), b.clone()].concat();
            want.sort_by(|x, y| x.0.cmp(&y.0));
            assert_eq!(merge_sorted(a, b, key), want);
        }
    }
}
