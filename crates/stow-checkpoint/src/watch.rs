//! Seeing a workspace tree change while a capture copies it.
//!
//! A capture refuses a tree that changed between its scan and its commit.
//! Scanning again costs a `statx` per file, as much as the first scan, and
//! was the largest share of an incremental checkpoint. Instead the scan
//! registers an inotify watch on each directory *before* reading it, and
//! the capture later drains the event queue: any event on a captured name
//! means the tree changed.
//!
//! What the watch does not see, and how it is covered:
//! - a hard-linked file written through a name outside the watched
//!   directories: files with more than one link are stat'ed again;
//! - too many directories for the watch limit, or no inotify (other
//!   systems): the caller scans the whole tree again instead;
//! - writes through a shared memory mapping raise no event (they move
//!   mtime only when a clean page is first dirtied, so a re-scan misses
//!   most of them too).

/// What changed since the watches were added (or last drained).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Changes {
    /// Slash paths (from the root) of the captured names that changed: a
    /// file, a link, or a directory created, removed, moved or (its own
    /// event, `""` for the root) lost. Everything beneath a listed
    /// directory may have changed too.
    Paths(std::collections::BTreeSet<String>),
    /// The events do not cover the tree (a watch missing, the queue
    /// overflowed, an unreadable event): nothing can be vouched for.
    Unknown,
}

impl Changes {
    /// Whether `path` (a captured file or directory) is untouched: neither
    /// it nor a directory above it is listed.
    #[cfg(test)]
    pub(crate) fn untouched(&self, path: &str) -> bool {
        match self {
            Changes::Paths(set) => Changes::untouched_in(set, path),
            Changes::Unknown => false,
        }
    }

    /// [`Changes::untouched`] for the listed paths `set`.
    pub(crate) fn untouched_in(set: &std::collections::BTreeSet<String>, path: &str) -> bool {
        if set.is_empty() {
            return true;
        }
        if set.contains("") || set.contains(path) {
            return false;
        }
        let mut p = path;
        while let Some((parent, _)) = p.rsplit_once('/') {
            if set.contains(parent) {
                return false;
            }
            p = parent;
        }
        true
    }

    /// No captured name changed.
    pub(crate) fn none(&self) -> bool {
        matches!(self, Changes::Paths(set) if set.is_empty())
    }
}

/// A name in a watched directory that the captured tree does not contain:
/// excluded names (`.git`, root `.stow`) and, for content-only events,
/// sensitive files (their bytes are not captured).
fn ignored(
    depth: usize,
    rel_dir: &str,
    name: &str,
    is_dir: bool,
    content_only: bool,
    sens: bool,
) -> bool {
    if crate::walk::excluded(depth, name) {
        return true;
    }
    if !content_only {
        return false;
    }
    // A directory's attributes are its mode, which its parent's node
    // records: a change (its own content changes arrive on its own watch).
    if is_dir {
        return false;
    }
    if sens {
        return false;
    }
    let rel = if rel_dir.is_empty() {
        name.to_string()
    } else {
        format!("{rel_dir}/{name}")
    };
    crate::paths::is_sensitive(&rel)
}

#[cfg(target_os = "linux")]
mod imp {
    use std::collections::HashMap;
    use std::ffi::CString;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    use crate::ignorefile::Rules;

    use super::{ignored, Changes};

    /// Events that change what a capture would record. Opens, reads and
    /// closes (the capture's own) are not asked for.
    const MASK: u32 = libc::IN_MODIFY
        | libc::IN_ATTRIB
        | libc::IN_MOVED_FROM
        | libc::IN_MOVED_TO
        | libc::IN_CREATE
        | libc::IN_DELETE
        | libc::IN_DELETE_SELF
        | libc::IN_MOVE_SELF
        | libc::IN_ONLYDIR
        | libc::IN_DONT_FOLLOW;

    /// inotify watches on every directory of one scan.
    pub(crate) struct TreeWatch {
        fd: OwnedFd,
        /// Watch descriptor → (directory relative to the root, depth).
        dirs: Mutex<HashMap<i32, (String, usize)>>,
        /// A watch could not be added: the events do not cover the tree.
        incomplete: AtomicBool,
    }

    impl TreeWatch {
        /// A new, empty watch; `None` when inotify is unavailable.
        pub(crate) fn new() -> Option<TreeWatch> {
            // SAFETY: plain syscall; the descriptor is owned below.
            let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
            if fd < 0 {
                return None;
            }
            Some(TreeWatch {
                // SAFETY: `fd` is a fresh descriptor nothing else owns.
                fd: unsafe { OwnedFd::from_raw_fd(fd) },
                dirs: Mutex::new(HashMap::new()),
                incomplete: AtomicBool::new(false),
            })
        }

        /// Watches directory `dir` (`rel` from the root, at `depth`). Call
        /// before reading it, so no change after the read is missed.
        pub(crate) fn add(&self, dir: &Path, rel: &str, depth: usize) {
            let Ok(path) = CString::new(dir.as_os_str().as_bytes()) else {
                self.incomplete.store(true, Ordering::Relaxed);
                return;
            };
            // SAFETY: valid descriptor and NUL-terminated path.
            let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), path.as_ptr(), MASK) };
            if wd < 0 {
                self.incomplete.store(true, Ordering::Relaxed);
                return;
            }
            let mut dirs = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
            dirs.insert(wd, (rel.to_string(), depth));
        }

        /// How many directories are watched now.
        #[cfg(test)]
        pub(crate) fn watched_dirs(&self) -> usize {
            self.dirs.lock().unwrap_or_else(|e| e.into_inner()).len()
        }

        /// Every captured name that changed since the watches were added
        /// (or the last drain). Drains the queue.
        pub(crate) fn changes(&self, sens: bool, rules: Option<&Rules>) -> Changes {
            let mut paths = std::collections::BTreeSet::new();
            if self.drain(sens, rules, &mut |p| {
                paths.insert(p);
                true
            }) {
                Changes::Paths(paths)
            } else {
                Changes::Unknown
            }
        }

        /// Reads queued events, passing the path of each captured change to
        /// `sink` until it returns false. Returns whether the events cover
        /// the tree (false: a watch is missing, the queue overflowed or
        /// could not be read).
        fn drain(
            &self,
            sens: bool,
            rules: Option<&Rules>,
            sink: &mut dyn FnMut(String) -> bool,
        ) -> bool {
            if self.incomplete.load(Ordering::Relaxed) {
                return false;
            }
            let mut dirs = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
            // inotify_event is 16 bytes plus a name; align for the header reads.
            let mut buf = vec![0u64; 8192];
            loop {
                // SAFETY: the buffer is valid for its byte length.
                let n = unsafe {
                    libc::read(
                        self.fd.as_raw_fd(),
                        buf.as_mut_ptr().cast(),
                        buf.len() * std::mem::size_of::<u64>(),
                    )
                };
                if n < 0 {
                    let e = std::io::Error::last_os_error();
                    match e.kind() {
                        std::io::ErrorKind::WouldBlock => return true,
                        std::io::ErrorKind::Interrupted => continue,
                        _ => {
                            self.incomplete.store(true, Ordering::Relaxed);
                            return false;
                        }
                    }
                }
                // SAFETY: `n` bytes were written into the buffer.
                let bytes =
                    unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n as usize) };
                match changes_in(bytes, &mut dirs, sens, rules, sink) {
                    Batch::More => {}
                    Batch::Enough => return true,
                    Batch::Uncovered => {
                        self.incomplete.store(true, Ordering::Relaxed);
                        return false;
                    }
                }
            }
        }
    }

    /// How reading one batch of events ended.
    enum Batch {
        /// Every event was read.
        More,
        /// The sink asked to stop.
        Enough,
        /// An event the watch cannot account for.
        Uncovered,
    }

    /// Passes each captured change in a batch of raw events to `sink`.
    fn changes_in(
        mut bytes: &[u8],
        dirs: &mut HashMap<i32, (String, usize)>,
        sens: bool,
        rules: Option<&Rules>,
        sink: &mut dyn FnMut(String) -> bool,
    ) -> Batch {
        const HEADER: usize = 16;
        while bytes.len() >= HEADER {
            let word =
                |i: usize| u32::from_ne_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
            let wd = word(0) as i32;
            let mask = word(4);
            let len = word(12) as usize;
            let Some(raw_name) = bytes.get(HEADER..HEADER + len) else {
                return Batch::Uncovered;
            };
            bytes = &bytes[HEADER + len..];
            if mask & libc::IN_Q_OVERFLOW != 0 {
                return Batch::Uncovered;
            }
            if mask & libc::IN_IGNORED != 0 {
                // The watch went away with its directory (its last event;
                // the kernel may give the number to a new watch later); the
                // directory's removal or move arrives as its own event.
                dirs.remove(&wd);
                continue;
            }
            let Some((rel, depth)) = dirs.get(&wd) else {
                return Batch::Uncovered;
            };
            let name_len = raw_name
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(raw_name.len());
            let path = if name_len == 0 {
                // The watched directory itself: its mode is not captured,
                // but its removal or move is a change.
                if mask & !(libc::IN_ATTRIB | libc::IN_ISDIR) == 0 {
                    continue;
                }
                rel.clone()
            } else {
                let name = String::from_utf8_lossy(&raw_name[..name_len]);
                let content_only =
                    mask & !(libc::IN_MODIFY | libc::IN_ATTRIB | libc::IN_ISDIR) == 0;
                let is_dir = mask & libc::IN_ISDIR != 0;
                let path = if rel.is_empty() {
                    name.to_string()
                } else {
                    format!("{rel}/{name}")
                };
                // A path the ignore rules keep out is not captured: its
                // changes are none of the capture's business. An ignore
                // file always is: it changes the rules themselves, even
                // when they now ignore it.
                if !crate::ignorefile::is_rules_file(&name)
                    && rules.is_some_and(|r| crate::ignorefile::is_ignored(r, &path, is_dir))
                {
                    continue;
                }
                if ignored(*depth, rel, &name, is_dir, content_only, sens) {
                    continue;
                }
                path
            };
            if !sink(path) {
                return Batch::Enough;
            }
        }
        Batch::More
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::path::Path;

    use crate::ignorefile::Rules;

    use super::Changes;

    /// No watch on this system: captures scan the tree again.
    pub(crate) struct TreeWatch;

    impl TreeWatch {
        pub(crate) fn new() -> Option<TreeWatch> {
            None
        }

        pub(crate) fn add(&self, _dir: &Path, _rel: &str, _depth: usize) {}

        pub(crate) fn changes(&self, _sens: bool, _rules: Option<&Rules>) -> Changes {
            Changes::Unknown
        }
    }
}

pub(crate) use imp::TreeWatch;

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    use super::{Changes, TreeWatch};
    use crate::ignorefile::Rules;

    #[derive(Debug, PartialEq, Eq)]
    enum Verdict {
        Unchanged,
        Changed,
        Unknown,
    }

    impl TreeWatch {
        fn verdict(&self, sens: bool, rules: Option<&Rules>) -> Verdict {
            match self.changes(sens, rules) {
                Changes::Paths(p) if p.is_empty() => Verdict::Unchanged,
                Changes::Paths(_) => Verdict::Changed,
                Changes::Unknown => Verdict::Unknown,
            }
        }
    }

    /// A tree with a root file, a subdirectory, a sensitive file and the
    /// excluded `.git` and `.stow`, watched the way a scan watches it.
    fn watched() -> (tempfile::TempDir, TreeWatch) {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        for d in ["sub", ".git", ".stow"] {
            fs::create_dir(r.join(d)).unwrap();
        }
        for f in ["a.txt", "sub/b.txt", ".env", ".git/HEAD", ".stow/x"] {
            fs::write(r.join(f), "v1").unwrap();
        }
        let w = TreeWatch::new().unwrap();
        w.add(r, "", 0);
        w.add(&r.join("sub"), "sub", 1);
        // What a capture does meanwhile: read and stat files.
        for f in ["a.txt", "sub/b.txt"] {
            fs::read(r.join(f)).unwrap();
            fs::metadata(r.join(f)).unwrap();
        }
        (t, w)
    }

    fn verdict_after(change: impl FnOnce(&Path), sens: bool) -> Verdict {
        let (t, w) = watched();
        change(t.path());
        w.verdict(sens, None)
    }

    #[test]
    fn a_removed_directory_leaves_the_watch_list() {
        let (t, w) = watched();
        assert_eq!(w.watched_dirs(), 2);
        fs::remove_dir_all(t.path().join("sub")).unwrap();
        assert_eq!(w.verdict(false, None), Verdict::Changed);
        assert_eq!(w.watched_dirs(), 1);
        // What the kernel reports later about other directories still lands.
        fs::write(t.path().join("a.txt"), "v2").unwrap();
        assert_eq!(w.verdict(false, None), Verdict::Changed);
    }

    #[test]
    fn reading_and_excluded_names_are_no_change() {
        assert_eq!(verdict_after(|_| {}, false), Verdict::Unchanged);
        assert_eq!(
            verdict_after(|r| fs::write(r.join(".git/HEAD"), "v2").unwrap(), false),
            Verdict::Unchanged
        );
        assert_eq!(
            verdict_after(|r| fs::write(r.join(".stow/y"), "v2").unwrap(), false),
            Verdict::Unchanged
        );
        assert_eq!(
            verdict_after(|r| fs::remove_dir_all(r.join(".git")).unwrap(), false),
            Verdict::Unchanged
        );
    }

    #[test]
    fn a_directory_mode_is_a_change() {
        // Its parent's tree node records it.
        assert_eq!(
            verdict_after(
                |r| fs::set_permissions(r.join("sub"), fs::Permissions::from_mode(0o700)).unwrap(),
                false
            ),
            Verdict::Changed
        );
    }

    type Change = Box<dyn FnOnce(&Path)>;

    #[test]
    fn every_kind_of_captured_change_is_seen() {
        let changes: Vec<(&str, Change)> = vec![
            (
                "write",
                Box::new(|r| fs::write(r.join("a.txt"), "v2").unwrap()),
            ),
            (
                "append in a subdirectory",
                Box::new(|r| {
                    use std::io::Write;
                    let mut f = fs::OpenOptions::new()
                        .append(true)
                        .open(r.join("sub/b.txt"))
                        .unwrap();
                    f.write_all(b"more").unwrap();
                }),
            ),
            (
                "create",
                Box::new(|r| fs::write(r.join("sub/new.txt"), "n").unwrap()),
            ),
            (
                "delete",
                Box::new(|r| fs::remove_file(r.join("a.txt")).unwrap()),
            ),
            (
                "rename",
                Box::new(|r| fs::rename(r.join("a.txt"), r.join("c.txt")).unwrap()),
            ),
            (
                "chmod",
                Box::new(|r| {
                    fs::set_permissions(r.join("a.txt"), fs::Permissions::from_mode(0o755)).unwrap()
                }),
            ),
            (
                "new directory",
                Box::new(|r| fs::create_dir(r.join("d2")).unwrap()),
            ),
            (
                "remove a watched directory",
                Box::new(|r| fs::remove_dir_all(r.join("sub")).unwrap()),
            ),
            (
                "create a sensitive file",
                Box::new(|r| fs::write(r.join("sub/id_rsa"), "k").unwrap()),
            ),
        ];
        for (what, change) in changes {
            assert_eq!(verdict_after(change, false), Verdict::Changed, "{what}");
        }
    }

    #[test]
    fn sensitive_content_counts_only_when_captured() {
        let edit = |r: &Path| fs::write(r.join(".env"), "SECRET=2").unwrap();
        assert_eq!(verdict_after(edit, false), Verdict::Unchanged);
        assert_eq!(verdict_after(edit, true), Verdict::Changed);
    }

    #[test]
    fn changes_name_the_paths_and_what_lies_beneath_them() {
        let (t, w) = watched();
        let r = t.path();
        fs::write(r.join("sub/b.txt"), "v2").unwrap();
        fs::write(r.join("new.txt"), "n").unwrap();
        let Changes::Paths(paths) = w.changes(false, None) else {
            panic!("the watch covers the tree");
        };
        assert_eq!(
            paths.iter().map(String::as_str).collect::<Vec<_>>(),
            ["new.txt", "sub/b.txt"]
        );
        let c = Changes::Paths(paths);
        assert!(!c.untouched("sub/b.txt") && !c.untouched("new.txt"));
        assert!(c.untouched("a.txt") && c.untouched("sub/other"));
        // A drained queue holds nothing more.
        assert!(w.changes(false, None).none());
        // A removed directory touches everything beneath it.
        fs::remove_dir_all(r.join("sub")).unwrap();
        let c = w.changes(false, None);
        assert!(!c.untouched("sub/b.txt") && c.untouched("a.txt"), "{c:?}");
        assert!(!Changes::Unknown.untouched("a.txt"));
    }

    #[test]
    fn a_directory_that_cannot_be_watched_leaves_the_verdict_open() {
        let (t, w) = watched();
        w.add(&t.path().join("missing"), "missing", 1);
        assert_eq!(w.verdict(false, None), Verdict::Unknown);
    }
}
