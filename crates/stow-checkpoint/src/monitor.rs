//! A watch kept over a workspace tree between captures, for a long-lived
//! server (the MCP workspace profile): a capture then reads only the
//! directories that changed since the last one, instead of the whole tree
//! (git's file-system monitor, built in).
//!
//! After a capture (committed or refused for a change) the monitor keeps
//! its inotify watch, the scan, the stat cache and each directory's tree
//! node. The next capture drains the watch's events: the directories they
//! name are read again (`scan::rescan`), every other directory is the scan
//! it had, and its node is reused unless something beneath it changed.
//! Anything the events cannot vouch for — a queue overflow, a watch that
//! could not be added, changed capture options, a changed `.stowignore`, a
//! stat cache another process rewrote — drops the kept state, and the
//! capture scans the whole tree as a capture without a monitor does.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::bucket::WorkspaceBucket;
use crate::format::FileProps;
use crate::fsutil::FileStamp;
use crate::ignorefile::Rules;
use crate::scan::{restat, Scan};
use crate::statcache::StatCache;
use crate::watch::{Changes, TreeWatch};

/// The state a monitor keeps between two captures of one workspace.
/// Create one per workspace a server serves and pass it to every capture
/// of that workspace ([`CaptureOptions::monitor`](crate::CaptureOptions)).
#[derive(Default)]
pub struct TreeMonitor {
    kept: Mutex<Option<Kept>>,
    /// The workspace's bucket view when this process owns it (`workspace
    /// serve`): captures and rewinds then read and write the private
    /// objects through it, as the store admits one owner at a time.
    view: Option<Arc<WorkspaceBucket>>,
}

impl TreeMonitor {
    /// A monitor with nothing kept yet: the first capture scans the tree.
    pub fn new() -> TreeMonitor {
        TreeMonitor::default()
    }

    /// A monitor of a process that owns the workspace's bucket view.
    pub fn owning(view: Arc<WorkspaceBucket>) -> TreeMonitor {
        TreeMonitor {
            view: Some(view),
            ..TreeMonitor::default()
        }
    }

    /// The bucket view this process owns, if it does.
    pub(crate) fn view(&self) -> Option<&WorkspaceBucket> {
        self.view.as_deref()
    }

    /// Whether a capture left its watch here: the next capture (with the
    /// same options) starts from what it kept rather than a full scan.
    pub fn is_watching(&self) -> bool {
        self.kept
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// What the next capture may start from, in numbers: the directory
    /// nodes kept (reused for directories nothing changed in) and whether
    /// a stat cache is kept (else it is read from disk again and every
    /// node rebuilt). `None` when nothing is kept.
    pub fn kept_reuse(&self) -> Option<KeptReuse> {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.as_ref().map(|k| KeptReuse {
            nodes: k.nodes.len(),
            stat_cache: k.cache.is_some(),
        })
    }

    /// Takes the kept state for a capture with these options, if any.
    pub(super) fn take(&self, key: CaptureKey) -> Option<Kept> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.take().filter(|k| k.key == key)
    }

    /// Keeps `state` for the next capture.
    pub(super) fn keep(&self, state: Kept) {
        *self.kept.lock().unwrap_or_else(|e| e.into_inner()) = Some(state);
    }

    /// Takes the kept state if its options pass `fits`; otherwise it
    /// stays for the captures it was kept for.
    pub(super) fn take_if(&self, fits: impl FnOnce(&CaptureKey) -> bool) -> Option<Kept> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.as_ref().is_some_and(|k| fits(&k.key)) {
            kept.take()
        } else {
            None
        }
    }

    /// Keeps `state` unless something newer was kept meanwhile (a capture
    /// that ran while a status held the state read the tree after it).
    pub(super) fn keep_if_empty(&self, state: Kept) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.is_none() {
            *kept = Some(state);
        }
    }
}

/// What a monitor keeps for the next capture ([`TreeMonitor::kept_reuse`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeptReuse {
    /// Directory nodes kept.
    pub nodes: usize,
    /// Whether the stat cache is kept in memory.
    pub stat_cache: bool,
}

/// The capture options a kept scan depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CaptureKey {
    pub include_sensitive: bool,
    pub no_ignore: bool,
    /// Portable nodes hold S3 properties; plain ones do not.
    pub portable: bool,
}

/// What one capture leaves for the next.
pub(super) struct Kept {
    pub key: CaptureKey,
    /// Watches every directory of `scan` since before it was read.
    pub watch: TreeWatch,
    pub scan: Scan,
    /// Changes seen after `scan` was taken (by a refused capture's check).
    pub pending: BTreeSet<String>,
    /// The stat cache as written, and the file's stamp when written: a
    /// different stamp means someone else rewrote (or GC removed) it.
    pub cache: Option<(StatCache, FileStamp)>,
    /// Each directory's tree node in the last committed capture.
    pub nodes: HashMap<String, [u8; 32]>,
    /// The files' S3 properties in the last committed capture.
    pub props: HashMap<String, FileProps>,
    /// Files hashed since the stat cache file was last written.
    pub unwritten: u64,
    /// The exclude file's stamp under the rules the scan was read by.
    pub exclude: crate::ignorefile::ExcludeStamps,
}

/// A kept scan brought up to date: the tree as it is now, and the paths
/// that changed since the kept nodes were built.
pub(super) struct Refreshed {
    pub watch: TreeWatch,
    pub scan: Scan,
    pub changed: BTreeSet<String>,
    /// The kept stat cache, with the stamp of the (maybe older) cache
    /// file it stands for.
    pub cache: Option<(StatCache, FileStamp)>,
    pub nodes: HashMap<String, [u8; 32]>,
    pub props: HashMap<String, FileProps>,
    pub unwritten: u64,
}

impl Kept {
    /// Brings the kept scan up to date from the watch's events, or `None`
    /// when they cannot vouch for it (the caller scans the whole tree).
    pub(super) fn refresh(
        self,
        root: &Path,
        ignore: Option<&Rules>,
        cache_file: &Path,
    ) -> Option<Refreshed> {
        // `.git` is not watched: its exclude file is compared instead.
        if ignore.map(Rules::exclude_stamp).unwrap_or_default() != self.exclude {
            return None;
        }
        let Changes::Paths(mut changed) = self.watch.changes(self.key.include_sensitive, ignore)
        else {
            return None;
        };
        changed.extend(self.pending);
        // The rules themselves changed (a nested `.gitignore` rules its
        // whole subtree), or the root went away.
        let git_ignore = format!("/{}", crate::ignorefile::GIT_IGNORE_FILE);
        if changed.contains("")
            || changed.contains(crate::ignorefile::IGNORE_FILE)
            || changed.contains(crate::ignorefile::GIT_IGNORE_FILE)
            || changed.iter().any(|p| p.ends_with(&git_ignore))
        {
            return None;
        }
        // A hard-linked file can change through a name the watch does not
        // cover.
        for f in self.scan.files.iter().filter(|f| f.nlink > 1) {
            if restat(root, f).as_ref() != Some(f) {
                changed.insert(f.path.to_string());
            }
        }
        let scan = crate::scan::rescan(
            root,
            self.scan,
            &changed,
            self.key.include_sensitive,
            ignore,
            &self.watch,
        )
        .ok()?;
        // Someone else rewrote the cache file, or GC removed it: the kept
        // cache may name blobs that are gone, and so may the kept nodes (a
        // `checkpoint-delete` collects the nodes only its checkpoint
        // named). GC removes every stat cache before it deletes a blob, so
        // a cache file still as this monitor left it vouches for both.
        let cache = self
            .cache
            .filter(|(_, stamp)| FileStamp::of(cache_file).as_ref() == Some(stamp));
        let nodes = if cache.is_some() {
            self.nodes
        } else {
            HashMap::new()
        };
        Some(Refreshed {
            watch: self.watch,
            scan,
            changed,
            cache,
            nodes,
            props: self.props,
            unwritten: self.unwritten,
        })
    }
}

/// The directories whose kept node a set of changed paths rules out: a
/// directory at or above a change (its listing or a child node changed),
/// or beneath a changed path (replaced with it). Built once per capture,
/// so asking costs the directory's depth, not the number of changes.
pub(super) struct ChangedDirs<'a> {
    changed: &'a BTreeSet<String>,
    at_or_above: std::collections::HashSet<&'a str>,
}

impl<'a> ChangedDirs<'a> {
    pub(super) fn new(changed: &'a BTreeSet<String>) -> ChangedDirs<'a> {
        let mut at_or_above = std::collections::HashSet::new();
        for c in changed {
            let mut p = c.strip_suffix('/').unwrap_or(c);
            at_or_above.insert(p);
            while let Some((parent, _)) = p.rsplit_once('/') {
                at_or_above.insert(parent);
                p = parent;
            }
            at_or_above.insert("");
        }
        ChangedDirs {
            changed,
            at_or_above,
        }
    }

    /// Whether directory `dir`'s node may be reused.
    pub(super) fn node_unchanged(&self, dir: &str) -> bool {
        if self.at_or_above.contains(dir) || self.changed.contains("") {
            return false;
        }
        let mut p = dir;
        loop {
            if self.changed.contains(p) {
                return false;
            }
            match p.rsplit_once('/') {
                Some((parent, _)) => p = parent,
                None => return true,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ChangedDirs;
    use crate::scan::parent_dir;
    use std::collections::BTreeSet;

    /// Whether `path` is `dir` or lies beneath it (`dir` "" is the root).
    fn within(path: &str, dir: &str) -> bool {
        dir.is_empty()
            || path
                .strip_prefix(dir)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }

    /// The rule, said directly: no change at or beneath the directory, none
    /// above it, and none whose parent it is.
    fn by_definition(dir: &str, changed: &BTreeSet<String>) -> bool {
        !changed
            .iter()
            .any(|c| within(c, dir) || within(dir, c) || parent_dir(c) == dir)
    }

    #[test]
    fn changed_dirs_agree_with_the_rule() {
        let dirs = ["", "a", "a/b", "a/b/c", "a-b", "ab", "x", "x/y", "x/y/z"];
        let sets: [&[&str]; 7] = [
            &[],
            &["a/b/f.txt"],
            &["a/b"],
            &["x/y/"],
            &["a-b/q", "x"],
            &["ab/c/d/e"],
            &["top.txt"],
        ];
        for set in sets {
            let changed: BTreeSet<String> = set.iter().map(|s| s.to_string()).collect();
            let fast = ChangedDirs::new(&changed);
            for dir in dirs {
                assert_eq!(
                    fast.node_unchanged(dir),
                    by_definition(dir, &changed),
                    "{dir:?} with {set:?}"
                );
            }
        }
    }
}
