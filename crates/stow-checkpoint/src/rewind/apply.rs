//! Running a rewind's plan against the live tree.
//!
//! Every step first compares the path with what the undo checkpoint
//! recorded there (`was`): through the stat cache the undo capture left
//! (stat identity and size), else by hashing. A path that differs was
//! written after the undo capture, by someone else: it is left alone and
//! reported as a conflict. New bytes come from files staged (and fsynced)
//! in the workspace's own `.stow/rewind/<run>/` before the first change,
//! renamed into place without replacing anything. A file that is replaced
//! or removed is first renamed aside into that directory, checked again
//! there (a write between the check and the rename shows), and only
//! deleted at the end, once checked a last time: a writer that still had
//! it open and wrote to it gets its file back, and a conflict.

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, Metadata};
use std::io::ErrorKind;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::plan::{Entry, Step};
use crate::error::{Result, WsError};
use crate::format::FileEntry;
use crate::fsutil::{fsync_dir, hash_file, hex, rename_exchange, rename_noreplace};
use crate::materialize::copy_verified;
use crate::parallel::{for_each_in_dir_runs, worker_threads};
use crate::progress::Progress;
use crate::registry::Registry;
use crate::statcache::{CacheEntry, StatCache};

/// A path a rewind left alone because it changed after the undo capture
/// (or could not be put in place), and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conflict {
    pub path: String,
    pub reason: String,
}

/// What the steps did.
#[derive(Debug, Default)]
pub(crate) struct Applied {
    /// Files and links written, and files whose mode was set.
    pub written: u64,
    /// Files and links removed (directories are not counted, as `status`
    /// does not list them).
    pub deleted: u64,
    pub conflicts: Vec<Conflict>,
}

/// A file moved aside, with its stat once there.
struct Aside {
    path: PathBuf,
    rel: String,
    ino: u64,
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
}

/// Runs steps against the tree at `root`.
pub(crate) struct Applier<'a> {
    registry: &'a Registry,
    root: &'a Path,
    /// `root/.stow/rewind/<run>`: staged files (`new-<n>`), files moved
    /// aside (`old-<n>`).
    stage: PathBuf,
    /// The undo capture's stat cache, by path.
    cache: HashMap<String, CacheEntry>,
    cache_scan_start: i64,
    /// Finishing a journal: a step whose path already holds what it wants
    /// is done, and staged files are made again when missing.
    recovering: bool,
    asides: Vec<Aside>,
    touched: BTreeSet<PathBuf>,
    pub(crate) applied: Applied,
}

fn mtime_ns(m: &Metadata) -> i64 {
    m.mtime() * 1_000_000_000 + m.mtime_nsec()
}

fn ctime_ns(m: &Metadata) -> i64 {
    m.ctime() * 1_000_000_000 + m.ctime_nsec()
}

impl<'a> Applier<'a> {
    pub(crate) fn new(
        registry: &'a Registry,
        root: &'a Path,
        stage: PathBuf,
        cache: StatCache,
        recovering: bool,
    ) -> Applier<'a> {
        Applier {
            registry,
            root,
            stage,
            cache_scan_start: cache.scan_start_ns,
            cache: cache
                .entries
                .into_iter()
                .map(|e| (e.path.to_string(), e))
                .collect(),
            recovering,
            asides: Vec::new(),
            touched: BTreeSet::new(),
            applied: Applied::default(),
        }
    }

    fn staged(&self, n: usize) -> PathBuf {
        self.stage.join(format!("new-{n}"))
    }

    fn aside_path(&self, n: usize) -> PathBuf {
        self.stage.join(format!("old-{n}"))
    }

    /// Stages the new bytes of every install (files copied from their
    /// verified blobs and fsynced, links made), then flushes the stage
    /// directory. Touches nothing outside it. The copies run on a few
    /// threads: their flushes then share the file system's journal
    /// commits instead of waiting for one each.
    pub(crate) fn stage_all(&self, steps: &[Step], progress: Option<&dyn Progress>) -> Result<()> {
        let installs: Vec<(usize, &Entry, &str)> = steps
            .iter()
            .enumerate()
            .filter_map(|(n, s)| match s {
                Step::Install { want, path, .. } => Some((n, want, path.as_str())),
                _ => None,
            })
            .collect();
        let size = |e: &Entry| match e {
            Entry::File { size, .. } => *size,
            _ => 0,
        };
        let total: u64 = installs.iter().map(|(_, w, _)| size(w)).sum();
        let done = AtomicU64::new(0);
        for_each_in_dir_runs(
            &installs,
            |(_, _, path)| path,
            worker_threads(installs.len()),
            || vec![0u8; 256 << 10],
            |buf, (n, want, _)| {
                self.stage_one(*n, want, buf)?;
                if let Some(p) = progress {
                    let so_far = done.fetch_add(size(want), Ordering::Relaxed) + size(want);
                    p.update("rewind", so_far, total);
                }
                Ok(())
            },
        )?;
        fsync_dir(&self.stage)
    }

    fn stage_one(&self, n: usize, want: &Entry, buf: &mut [u8]) -> Result<()> {
        let at = self.staged(n);
        let _ = fs::remove_file(&at);
        match want {
            Entry::File {
                sha256, size, mode, ..
            } => {
                let entry = FileEntry {
                    path: format!("new-{n}"),
                    size: *size,
                    mode: *mode,
                    sha256: sha256.clone(),
                    content_type: None,
                    metadata: Default::default(),
                };
                let out = copy_verified(self.registry, &entry, &self.stage, buf)?;
                out.sync_all().map_err(|e| WsError::io_at("flush", &at, e))
            }
            Entry::Link { target } => std::os::unix::fs::symlink(target, &at)
                .map_err(|e| WsError::io_at("create link", &at, e)),
            Entry::Absent | Entry::Dir { .. } => Ok(()),
        }
    }

    fn conflict(&mut self, path: &str, reason: impl Into<String>) {
        self.applied.conflicts.push(Conflict {
            path: path.to_string(),
            reason: reason.into(),
        });
    }

    /// Whether every directory above `rel` is a directory (not a link) in
    /// the tree now: a step never acts through a link. Looked at for every
    /// step, never remembered: a directory swapped for a link during the
    /// rewind stops the steps below it (a stat per level and step).
    fn parents_are_dirs(&self, rel: &str) -> bool {
        rel.match_indices('/').all(|(i, _)| {
            fs::symlink_metadata(self.root.join(&rel[..i])).is_ok_and(|m| m.file_type().is_dir())
        })
    }

    /// Whether the entry at `rel` (stat `meta`) is what `e` describes.
    fn holds(&self, rel: &str, meta: &Metadata, e: &Entry) -> Result<bool> {
        let at = self.root.join(rel);
        Ok(match e {
            Entry::Absent => false,
            Entry::Dir { .. } => meta.file_type().is_dir(),
            Entry::Link { target } => {
                meta.file_type().is_symlink()
                    && fs::read_link(&at).is_ok_and(|t| t.as_os_str() == target.as_str())
            }
            Entry::File { sha256, size, mode } => {
                if !meta.file_type().is_file()
                    || meta.len() != *size
                    || meta.permissions().mode() & 0o777 != *mode
                {
                    return Ok(false);
                }
                let vouched = self.cache.get(rel).is_some_and(|c| {
                    c.ino == meta.ino()
                        && c.size == meta.len()
                        && c.mtime_ns == mtime_ns(meta)
                        && c.ctime_ns == ctime_ns(meta)
                        && c.mtime_ns < self.cache_scan_start
                        && hex(&c.sha256) == *sha256
                });
                vouched || hash_file(&at)?.as_deref() == Some(sha256.as_str())
            }
        })
    }

    /// Whether `rel` is absent (`Ok(None)`) or its stat.
    fn lstat(&self, rel: &str) -> Result<Option<Metadata>> {
        let at = self.root.join(rel);
        match fs::symlink_metadata(&at) {
            Ok(m) => Ok(Some(m)),
            Err(e) if matches!(e.kind(), ErrorKind::NotFound) => Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => Ok(None),
            Err(e) => Err(WsError::io_at("stat", &at, e)),
        }
    }

    /// Moves `rel` (just checked, stat `before`) aside as `old-<n>`;
    /// `false` (and a conflict) when it changed between the check and the
    /// move (it is put back).
    fn move_aside(&mut self, n: usize, rel: &str, before: &Metadata) -> Result<bool> {
        let at = self.root.join(rel);
        let aside = self.aside_path(n);
        if let Err(e) = fs::rename(&at, &aside) {
            if e.kind() == ErrorKind::NotFound {
                // Removed meanwhile by someone else: nothing to move.
                return Ok(true);
            }
            return Err(WsError::io_at("move aside", &at, e));
        }
        self.touched.insert(parent_of(&at));
        crate::fault::point("rewind.moved_aside");
        let after = fs::symlink_metadata(&aside).map_err(|e| WsError::io_at("stat", &aside, e))?;
        let same = after.ino() == before.ino()
            && after.len() == before.len()
            && mtime_ns(&after) == mtime_ns(before);
        if !same {
            let back = rename_noreplace(&aside, &at);
            self.conflict(
                rel,
                match back {
                    Ok(()) => "written while the rewind replaced it; left as written".to_string(),
                    Err(_) => format!(
                        "written while the rewind replaced it; kept at {}",
                        aside.display()
                    ),
                },
            );
            return Ok(false);
        }
        self.asides.push(Aside {
            path: aside,
            rel: rel.to_string(),
            ino: after.ino(),
            size: after.len(),
            mtime_ns: mtime_ns(&after),
            ctime_ns: ctime_ns(&after),
        });
        Ok(true)
    }

    /// Runs step `n`. A failure at its path (permissions, a mount point,
    /// an immutable file) is that path's conflict, not the rewind's end:
    /// the journal must always be finishable.
    pub(crate) fn run(&mut self, n: usize, step: &Step) {
        if let Err(e) = self.run_step(n, step) {
            self.conflict(step.path(), format!("could not be changed: {e}"));
        }
    }

    fn run_step(&mut self, n: usize, step: &Step) -> Result<()> {
        let rel = step.path();
        if !self.parents_are_dirs(rel) {
            self.conflict(rel, "a directory above it is missing or was replaced");
            return Ok(());
        }
        match step {
            Step::Remove { was, .. } => {
                let Some(meta) = self.lstat(rel)? else {
                    return Ok(());
                };
                if !self.holds(rel, &meta, was)? {
                    self.conflict(rel, "changed since the undo checkpoint; left as it is");
                    return Ok(());
                }
                if self.move_aside(n, rel, &meta)? {
                    self.applied.deleted += 1;
                }
            }
            Step::RemoveDir { .. } => {
                let at = self.root.join(rel);
                // A directory still holding what the capture rules leave
                // out (or something new), or gone already, is left as it is.
                if fs::remove_dir(&at).is_ok() {
                    self.touched.insert(parent_of(&at));
                }
            }
            Step::MakeDir { was, mode, .. } => self.make_dir(n, rel, was, *mode)?,
            Step::Install { was, want, .. } => self.install(n, rel, was, want)?,
            Step::Chmod { was, mode, .. } => self.chmod_file(rel, was, *mode)?,
            Step::DirMode { mode, .. } => {
                let at = self.root.join(rel);
                if let Ok(f) = fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
                    .open(&at)
                {
                    f.set_permissions(fs::Permissions::from_mode(*mode))
                        .map_err(|e| WsError::io_at("chmod", &at, e))?;
                }
            }
        }
        Ok(())
    }

    /// Puts `want` (a file or link, staged as `new-<n>`) at `rel`. Where
    /// something is there already (`was`, of any kind; a directory emptied
    /// by earlier steps) the two are exchanged in one rename, so the path
    /// never goes missing; what was there, now at `new-<n>`, is checked
    /// once more and deleted at the end (or exchanged back: a conflict).
    fn install(&mut self, n: usize, rel: &str, was: &Entry, want: &Entry) -> Result<()> {
        let staged = self.staged(n);
        let now = self.lstat(rel)?;
        if let Some(meta) = &now {
            if self.recovering && self.holds(rel, meta, want)? {
                return Ok(());
            }
        }
        if self.recovering && fs::symlink_metadata(&staged).is_err() {
            let mut buf = vec![0u8; 256 << 10];
            self.stage_one(n, want, &mut buf)?;
        }
        if self.replace(rel, was, now.as_ref(), &staged)? {
            self.applied.written += 1;
        }
        Ok(())
    }

    /// Makes directory `rel`: a new one, or (`was` a file or link) one
    /// made in the stage and exchanged with what is there.
    fn make_dir(&mut self, n: usize, rel: &str, was: &Entry, mode: u32) -> Result<()> {
        let now = self.lstat(rel)?;
        if now.as_ref().is_some_and(|m| m.file_type().is_dir()) {
            if *was != Entry::Absent && !self.recovering {
                self.conflict(rel, "changed since the undo checkpoint; left as it is");
            }
            return Ok(());
        }
        // Made in the stage with its mode and renamed into place, so it
        // appears as the checkpoint has it (a mode that keeps its owner
        // from writing into it is set by the `DirMode` step, once filled).
        let staged = self.staged(n);
        let _ = fs::remove_dir(&staged);
        let initial = if mode & 0o300 == 0o300 { mode } else { 0o700 };
        fs::DirBuilder::new()
            .mode_private()
            .create(&staged)
            .and_then(|()| fs::set_permissions(&staged, fs::Permissions::from_mode(initial)))
            .map_err(|e| WsError::io_at("create directory", &staged, e))?;
        if now.is_none() {
            let at = self.root.join(rel);
            return match rename_noreplace(&staged, &at) {
                Ok(()) => {
                    self.touched.insert(parent_of(&at));
                    Ok(())
                }
                // Made meanwhile by someone else: a directory is a directory.
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    let _ = fs::remove_dir(&staged);
                    if !self.lstat(rel)?.is_some_and(|m| m.file_type().is_dir()) {
                        self.conflict(rel, "something else is where a directory belongs");
                    }
                    Ok(())
                }
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ENOENT)) => {
                    let _ = fs::remove_dir(&staged);
                    self.conflict(rel, "a directory above it is missing or was replaced");
                    Ok(())
                }
                Err(e) => Err(WsError::io_at("create directory", &at, e)),
            };
        }
        self.replace(rel, was, now.as_ref(), &staged)?;
        Ok(())
    }

    /// Puts the staged entry at `rel` where the tree holds `now` (checked
    /// against `was` first); `true` when it is in place.
    fn replace(
        &mut self,
        rel: &str,
        was: &Entry,
        now: Option<&Metadata>,
        staged: &Path,
    ) -> Result<bool> {
        let at = self.root.join(rel);
        let Some(meta) = now else {
            // Nothing there: a rename that never replaces (a path created
            // meanwhile is someone else's).
            return match rename_noreplace(staged, &at) {
                Ok(()) => {
                    self.touched.insert(parent_of(&at));
                    Ok(true)
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    self.conflict(rel, "created while the rewind ran; left as it is");
                    Ok(false)
                }
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ENOENT)) => {
                    self.conflict(rel, "a directory above it is missing or was replaced");
                    Ok(false)
                }
                Err(e) => Err(WsError::io_at("install", &at, e)),
            };
        };
        let expected = match was {
            // An emptied directory is what the undo checkpoint recorded
            // less what earlier steps removed.
            Entry::Dir { .. } => meta.file_type().is_dir(),
            Entry::Absent => false,
            _ => self.holds(rel, meta, was)?,
        };
        if !expected {
            self.conflict(rel, "changed since the undo checkpoint; left as it is");
            return Ok(false);
        }
        rename_exchange(staged, &at).map_err(|e| WsError::io_at("install", &at, e))?;
        self.touched.insert(parent_of(&at));
        crate::fault::point("rewind.exchanged");
        // What was at the path is now at `staged`: the one checked?
        let old = fs::symlink_metadata(staged).map_err(|e| WsError::io_at("stat", staged, e))?;
        let same =
            old.ino() == meta.ino() && old.len() == meta.len() && mtime_ns(&old) == mtime_ns(meta);
        let kept = if !same {
            Err("written while the rewind replaced it; left as written")
        } else if old.file_type().is_dir() {
            // Still holding what the capture rules leave out, or
            // something new: not ours to delete.
            fs::remove_dir(staged).map_err(|_| "a directory with other contents is in the way")
        } else {
            self.asides.push(Aside {
                path: staged.to_path_buf(),
                rel: rel.to_string(),
                ino: old.ino(),
                size: old.len(),
                mtime_ns: mtime_ns(&old),
                ctime_ns: ctime_ns(&old),
            });
            Ok(())
        };
        if let Err(reason) = kept {
            rename_exchange(staged, &at).map_err(|e| WsError::io_at("put back", &at, e))?;
            self.conflict(rel, reason);
            return Ok(false);
        }
        Ok(true)
    }

    fn chmod_file(&mut self, rel: &str, was: &Entry, mode: u32) -> Result<()> {
        let at = self.root.join(rel);
        // Opened without following a link, and checked through the open
        // descriptor: the mode lands on the file that was checked.
        let f = match fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&at)
        {
            Ok(f) => f,
            Err(_) => {
                self.conflict(rel, "changed since the undo checkpoint; left as it is");
                return Ok(());
            }
        };
        let meta = f.metadata().map_err(|e| WsError::io_at("stat", &at, e))?;
        if meta.permissions().mode() & 0o777 == mode && self.recovering {
            return Ok(());
        }
        if !self.holds(rel, &meta, was)? {
            self.conflict(rel, "changed since the undo checkpoint; left as it is");
            return Ok(());
        }
        f.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(|e| WsError::io_at("chmod", &at, e))?;
        self.applied.written += 1;
        Ok(())
    }

    /// Checks every file moved aside a last time and deletes it; one
    /// written to after it was moved goes back to its path (the writer's
    /// bytes win, reported as a conflict). In recovery the files moved
    /// aside by the interrupted run are checked against what they were
    /// (`steps`) instead.
    pub(crate) fn finish(&mut self, steps: &[Step]) -> Result<()> {
        for a in std::mem::take(&mut self.asides) {
            let unchanged = fs::symlink_metadata(&a.path).is_ok_and(|m| {
                m.ino() == a.ino
                    && m.len() == a.size
                    && mtime_ns(&m) == a.mtime_ns
                    && ctime_ns(&m) == a.ctime_ns
            });
            if unchanged {
                remove_entry(&a.path)?;
            } else {
                self.put_back(&a.path, &a.rel);
            }
        }
        if self.recovering {
            // What the interrupted run left in the stage: a file moved
            // aside (`old-<n>`), or what an exchange took out of the tree
            // (`new-<n>`, else still the staged entry). Deleted when it is
            // what the undo checkpoint or the target holds there; put back
            // when someone wrote to it.
            for (n, step) in steps.iter().enumerate() {
                let (left, known) = match step {
                    Step::Remove { was, .. } => (self.aside_path(n), vec![was]),
                    Step::Install { was, want, .. } => (self.staged(n), vec![was, want]),
                    Step::MakeDir { was, .. } => (self.staged(n), vec![was]),
                    _ => continue,
                };
                let Ok(meta) = fs::symlink_metadata(&left) else {
                    continue;
                };
                if meta.file_type().is_dir() {
                    // An emptied directory, or the one staged: never ours
                    // when it holds anything.
                    if fs::remove_dir(&left).is_err() {
                        self.put_back(&left, step.path());
                    }
                    continue;
                }
                let mut ours = false;
                for e in known {
                    ours = ours || self.holds_at(&left, &meta, e)?;
                }
                if ours {
                    remove_entry(&left)?;
                } else {
                    self.put_back(&left, step.path());
                }
            }
        }
        // In parallel, as the staged files were (a directory removed since
        // needs no flush).
        let dirs: Vec<PathBuf> = std::mem::take(&mut self.touched)
            .into_iter()
            .filter(|d| d.is_dir())
            .collect();
        for_each_in_dir_runs(
            &dirs,
            |d| d.to_str().unwrap_or_default(),
            worker_threads(dirs.len()),
            || (),
            |(), d| fsync_dir(d),
        )
    }

    /// [`Self::holds`] for a file outside the tree (one moved aside).
    fn holds_at(&self, at: &Path, meta: &Metadata, e: &Entry) -> Result<bool> {
        Ok(match e {
            Entry::File { sha256, size, .. } => {
                meta.file_type().is_file()
                    && meta.len() == *size
                    && hash_file(at)?.as_deref() == Some(sha256.as_str())
            }
            Entry::Link { target } => {
                fs::read_link(at).is_ok_and(|t| t.as_os_str() == target.as_str())
            }
            Entry::Absent | Entry::Dir { .. } => false,
        })
    }

    /// A file moved aside that someone wrote to: back to `rel` (replacing
    /// what the rewind put there), or kept in the stage when that fails.
    fn put_back(&mut self, aside: &Path, rel: &str) {
        let at = self.root.join(rel);
        let reason = match fs::rename(aside, &at) {
            Ok(()) => {
                self.touched.insert(parent_of(&at));
                "written while the rewind replaced it; the written file was put back".to_string()
            }
            Err(_) => format!(
                "written while the rewind replaced it; kept at {}",
                aside.display()
            ),
        };
        self.conflict(rel, reason);
    }
}

trait PrivateMode {
    fn mode_private(&mut self) -> &mut Self;
}

impl PrivateMode for fs::DirBuilder {
    /// Made private; the plan's `DirMode` step sets the recorded mode
    /// once the directory is filled.
    fn mode_private(&mut self) -> &mut Self {
        use std::os::unix::fs::DirBuilderExt;
        self.mode(0o700)
    }
}

fn parent_of(p: &Path) -> PathBuf {
    p.parent().map(Path::to_path_buf).unwrap_or_default()
}

fn remove_entry(p: &Path) -> Result<()> {
    match fs::remove_file(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(WsError::io_at("remove", p, e)),
    }
}
