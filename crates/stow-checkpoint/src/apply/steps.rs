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
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::beneath::{self, Dir, Kind, Spot, Stat};
use super::plan::{Entry, Step};
use crate::error::{Result, WsError};
use crate::format::FileEntry;
use crate::fsutil::{create_private_dir, fsync_dir, hash_file, hash_open_file, hex};
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

/// A file moved aside (to `path`, from `rel`), with its stat once there.
struct Aside {
    path: PathBuf,
    rel: String,
    stat: Stat,
}

/// Runs steps against the tree at `root`.
pub(crate) struct Applier<'a> {
    registry: &'a Registry,
    /// The tree's root: every path of a step is reached from it one
    /// directory at a time, never through a link ([`beneath`]).
    root: Dir,
    /// `root/.stow/rewind/<run>`: staged files (`new-<n>`), files moved
    /// aside (`old-<n>`).
    stage: Dir,
    /// The undo capture's stat cache, by path.
    cache: HashMap<String, CacheEntry>,
    cache_scan_start: i64,
    /// Finishing a journal: a step whose path already holds what it wants
    /// is done, and staged files are made again when missing.
    recovering: bool,
    asides: Vec<Aside>,
    touched: BTreeSet<PathBuf>,
    pub(crate) applied: Applied,
    /// A written file that could be kept neither at its path nor in
    /// `.stow/kept` is still in the stage: the rewind must stop before the
    /// stage goes (the next command finishing the journal tries again).
    pub(crate) stage_must_stay: Option<WsError>,
}

/// What a step found in the way of a directory above its path.
const PARENT_REPLACED: &str = "a directory above it is missing or was replaced";
/// What a step found at its path when it differs from the undo capture.
const CHANGED: &str = "changed since the undo checkpoint; left as it is";

impl<'a> Applier<'a> {
    pub(crate) fn new(
        registry: &'a Registry,
        root: &Path,
        stage: &Path,
        cache: StatCache,
        recovering: bool,
    ) -> Result<Applier<'a>> {
        Ok(Applier {
            registry,
            root: Dir::open(root).map_err(|e| WsError::io_at("open", root, e))?,
            stage: Dir::open(stage).map_err(|e| WsError::io_at("open", stage, e))?,
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
            stage_must_stay: None,
        })
    }

    fn staged_name(n: usize) -> String {
        format!("new-{n}")
    }

    fn staged(&self, n: usize) -> PathBuf {
        self.stage.path().join(Self::staged_name(n))
    }

    fn aside_name(n: usize) -> String {
        format!("old-{n}")
    }

    fn aside_path(&self, n: usize) -> PathBuf {
        self.stage.path().join(Self::aside_name(n))
    }

    /// The stage's entry `name`.
    fn in_stage(&self, name: &str) -> Result<Spot> {
        self.stage
            .child(name)
            .map_err(|e| WsError::io_at("open", self.stage.path(), e))
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
        fsync_dir(self.stage.path())
    }

    /// Stages install `n`'s new entry as `new-<n>`. A file is copied under
    /// a temporary name, flushed, then renamed: a `new-<n>` that exists is
    /// always whole, so finishing a journal (after a kill, or a power cut
    /// that took the stage) can trust it, and copies again only what is
    /// missing.
    fn stage_one(&self, n: usize, want: &Entry, buf: &mut [u8]) -> Result<()> {
        let at = self.staged(n);
        let _ = fs::remove_file(&at);
        match want {
            Entry::File {
                sha256, size, mode, ..
            } => {
                let part = format!("part-{n}");
                let entry = FileEntry {
                    path: part.clone(),
                    size: *size,
                    mode: *mode,
                    sha256: sha256.clone(),
                    content_type: None,
                    metadata: Default::default(),
                };
                let part = self.stage.path().join(part);
                let _ = fs::remove_file(&part);
                let out = copy_verified(self.registry, &entry, self.stage.path(), buf)?;
                out.sync_all()
                    .map_err(|e| WsError::io_at("flush", &part, e))?;
                fs::rename(&part, &at).map_err(|e| WsError::io_at("stage", &at, e))
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

    /// The tree's entry `rel`, its directories opened from the root one at
    /// a time, never through a link; `None` when one of them is missing or
    /// is not a directory (a link included). Opened for every step, never
    /// remembered: a directory swapped for a link during the rewind stops
    /// the steps below it, and a swap after the walk does not redirect the
    /// step (it acts in the directory that was walked).
    fn spot(&self, rel: &str) -> Result<Option<Spot>> {
        self.root
            .spot(rel)
            .map_err(|e| WsError::io_at("open", &self.root.path().join(rel), e))
    }

    /// Whether the entry at `spot` (stat `st`, path `rel` in the tree) is
    /// what `e` describes.
    fn holds(&self, rel: &str, spot: &Spot, st: &Stat, e: &Entry) -> Result<bool> {
        Ok(match e {
            Entry::Absent => false,
            Entry::Dir { .. } => st.kind == Kind::Dir,
            Entry::Link { target } => {
                st.kind == Kind::Link
                    && spot
                        .read_link()
                        .is_ok_and(|t| t.is_some_and(|t| t == target.as_str()))
            }
            Entry::File { sha256, size, mode } => {
                if st.kind != Kind::File || st.size != *size || st.perm != *mode {
                    return Ok(false);
                }
                let vouched = self.cache.get(rel).is_some_and(|c| {
                    c.ino == st.ino
                        && c.size == st.size
                        && c.mtime_ns == st.mtime_ns
                        && c.ctime_ns == st.ctime_ns
                        && c.mtime_ns < self.cache_scan_start
                        && hex(&c.sha256) == *sha256
                });
                vouched || hash_spot(spot)?.as_deref() == Some(sha256.as_str())
            }
        })
    }

    /// The stat of the entry at `spot` (`None`: absent).
    fn stat(spot: &Spot) -> Result<Option<Stat>> {
        spot.stat()
            .map_err(|e| WsError::io_at("stat", &spot.path(), e))
    }

    /// Moves the entry at `spot` (`rel`, just checked, stat `before`)
    /// aside as `old-<n>`; `false` (and a conflict) when it changed
    /// between the check and the move (it is put back).
    fn move_aside(&mut self, n: usize, rel: &str, spot: &Spot, before: &Stat) -> Result<bool> {
        let aside = self.in_stage(&Self::aside_name(n))?;
        if let Err(e) = spot.rename_to(&aside, 0) {
            if e.kind() == ErrorKind::NotFound {
                // Removed meanwhile by someone else: nothing to move.
                return Ok(true);
            }
            return Err(WsError::io_at("move aside", &spot.path(), e));
        }
        self.touched.insert(spot.dir.path().to_path_buf());
        crate::fault::point("rewind.moved_aside");
        let after = Self::stat(&aside)?.unwrap_or(Stat { ino: 0, ..*before });
        if !after.same_as(before) {
            let reason = match aside.rename_to(spot, libc::RENAME_NOREPLACE) {
                Ok(()) => "written while the rewind replaced it; left as written".to_string(),
                Err(_) => match self.keep(&Self::aside_name(n)) {
                    Ok(reason) => reason,
                    Err(e) => {
                        // Not this path's conflict alone: the stage holds
                        // the bytes, so it must outlive this run.
                        self.stage_must_stay.get_or_insert(e);
                        format!(
                            "written while the rewind replaced it; still at {}",
                            aside.path().display()
                        )
                    }
                },
            };
            self.conflict(rel, reason);
            return Ok(false);
        }
        self.asides.push(Aside {
            path: aside.path(),
            rel: rel.to_string(),
            stat: after,
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
        let Some(spot) = self.spot(rel)? else {
            self.conflict(rel, PARENT_REPLACED);
            return Ok(());
        };
        crate::fault::point("rewind.step_opened");
        match step {
            Step::Remove { was, .. } => {
                let Some(st) = Self::stat(&spot)? else {
                    return Ok(());
                };
                if !self.holds(rel, &spot, &st, was)? {
                    self.conflict(rel, CHANGED);
                    return Ok(());
                }
                if self.move_aside(n, rel, &spot, &st)? {
                    self.applied.deleted += 1;
                }
            }
            Step::RemoveDir { .. } => {
                // A directory still holding what the capture rules leave
                // out (or something new), or gone already, is left as it is.
                if spot.remove_dir().is_ok() {
                    self.touched.insert(spot.dir.path().to_path_buf());
                }
            }
            Step::MakeDir { was, mode, .. } => self.make_dir(n, rel, &spot, was, *mode)?,
            Step::Install { was, want, .. } => self.install(n, rel, &spot, was, want)?,
            Step::Chmod { was, mode, .. } => self.chmod_file(rel, &spot, was, *mode)?,
            Step::DirMode { mode, .. } => {
                if let Ok(f) = spot.open(libc::O_DIRECTORY) {
                    f.set_permissions(fs::Permissions::from_mode(*mode))
                        .map_err(|e| WsError::io_at("chmod", &spot.path(), e))?;
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
    fn install(
        &mut self,
        n: usize,
        rel: &str,
        spot: &Spot,
        was: &Entry,
        want: &Entry,
    ) -> Result<()> {
        let staged = self.in_stage(&Self::staged_name(n))?;
        let now = Self::stat(spot)?;
        if let Some(st) = &now {
            if self.recovering && self.holds(rel, spot, st, want)? {
                return Ok(());
            }
        }
        if self.recovering && Self::stat(&staged)?.is_none() {
            let mut buf = vec![0u8; 256 << 10];
            self.stage_one(n, want, &mut buf)?;
        }
        if self.replace(rel, spot, was, now.as_ref(), &staged)? {
            self.applied.written += 1;
        }
        Ok(())
    }

    /// Makes directory `rel`: a new one, or (`was` a file or link) one
    /// made in the stage and exchanged with what is there.
    fn make_dir(&mut self, n: usize, rel: &str, spot: &Spot, was: &Entry, mode: u32) -> Result<()> {
        let now = Self::stat(spot)?;
        if now.is_some_and(|st| st.kind == Kind::Dir) {
            if *was != Entry::Absent && !self.recovering {
                self.conflict(rel, CHANGED);
            }
            return Ok(());
        }
        // Made in the stage with its mode and renamed into place, so it
        // appears as the checkpoint has it (a mode that keeps its owner
        // from writing into it is set by the `DirMode` step, once filled).
        let staged_path = self.staged(n);
        let _ = fs::remove_dir(&staged_path);
        let initial = if mode & 0o300 == 0o300 { mode } else { 0o700 };
        fs::DirBuilder::new()
            .mode_private()
            .create(&staged_path)
            .and_then(|()| fs::set_permissions(&staged_path, fs::Permissions::from_mode(initial)))
            .map_err(|e| WsError::io_at("create directory", &staged_path, e))?;
        let staged = self.in_stage(&Self::staged_name(n))?;
        if now.is_none() {
            return match staged.rename_to(spot, libc::RENAME_NOREPLACE) {
                Ok(()) => {
                    self.touched.insert(spot.dir.path().to_path_buf());
                    Ok(())
                }
                // Made meanwhile by someone else: a directory is a directory.
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    let _ = fs::remove_dir(&staged_path);
                    if !Self::stat(spot)?.is_some_and(|st| st.kind == Kind::Dir) {
                        self.conflict(rel, "something else is where a directory belongs");
                    }
                    Ok(())
                }
                Err(e) if beneath::is_missing(&e) => {
                    let _ = fs::remove_dir(&staged_path);
                    self.conflict(rel, PARENT_REPLACED);
                    Ok(())
                }
                Err(e) => Err(WsError::io_at("create directory", &spot.path(), e)),
            };
        }
        self.replace(rel, spot, was, now.as_ref(), &staged)?;
        Ok(())
    }

    /// Puts the staged entry at `spot` (`rel`) where the tree holds `now`
    /// (checked against `was` first); `true` when it is in place.
    fn replace(
        &mut self,
        rel: &str,
        spot: &Spot,
        was: &Entry,
        now: Option<&Stat>,
        staged: &Spot,
    ) -> Result<bool> {
        let Some(st) = now else {
            // Nothing there: a rename that never replaces (a path created
            // meanwhile is someone else's).
            return match staged.rename_to(spot, libc::RENAME_NOREPLACE) {
                Ok(()) => {
                    self.touched.insert(spot.dir.path().to_path_buf());
                    Ok(true)
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    self.conflict(rel, "created while the rewind ran; left as it is");
                    Ok(false)
                }
                Err(e) if beneath::is_missing(&e) => {
                    self.conflict(rel, PARENT_REPLACED);
                    Ok(false)
                }
                Err(e) => Err(WsError::io_at("install", &spot.path(), e)),
            };
        };
        let expected = match was {
            // An emptied directory is what the undo checkpoint recorded
            // less what earlier steps removed.
            Entry::Dir { .. } => st.kind == Kind::Dir,
            Entry::Absent => false,
            _ => self.holds(rel, spot, st, was)?,
        };
        if !expected {
            self.conflict(rel, CHANGED);
            return Ok(false);
        }
        staged
            .rename_to(spot, libc::RENAME_EXCHANGE)
            .map_err(|e| WsError::io_at("install", &spot.path(), e))?;
        self.touched.insert(spot.dir.path().to_path_buf());
        crate::fault::point("rewind.exchanged");
        // What was at the path is now at `staged`: the one checked?
        let old = Self::stat(staged)?;
        let kept = match old {
            Some(old) if old.same_as(st) => {
                if old.kind == Kind::Dir {
                    // Still holding what the capture rules leave out, or
                    // something new: not ours to delete.
                    staged
                        .remove_dir()
                        .map_err(|_| "a directory with other contents is in the way")
                } else {
                    self.asides.push(Aside {
                        path: staged.path(),
                        rel: rel.to_string(),
                        stat: old,
                    });
                    Ok(())
                }
            }
            _ => Err("written while the rewind replaced it; left as written"),
        };
        if let Err(reason) = kept {
            staged
                .rename_to(spot, libc::RENAME_EXCHANGE)
                .map_err(|e| WsError::io_at("put back", &spot.path(), e))?;
            self.conflict(rel, reason);
            return Ok(false);
        }
        Ok(true)
    }

    /// Flushes the modes the closing `DirMode` steps set (a chmod is the
    /// directory's own metadata, not its parent's entry).
    pub(crate) fn flush_dir_modes(&self, steps: &[Step]) -> Result<()> {
        for step in steps {
            if let Step::DirMode { path, .. } = step {
                let dir = self.root.path().join(path);
                if dir.is_dir() {
                    fsync_dir(&dir)?;
                }
            }
        }
        Ok(())
    }

    fn chmod_file(&mut self, rel: &str, spot: &Spot, was: &Entry, mode: u32) -> Result<()> {
        // Opened without following a link, and checked through the open
        // descriptor: the mode lands on the file that was checked.
        let Ok(f) = spot.open(0) else {
            self.conflict(rel, CHANGED);
            return Ok(());
        };
        let st = Stat::from(
            &f.metadata()
                .map_err(|e| WsError::io_at("stat", &spot.path(), e))?,
        );
        if st.perm == mode && self.recovering {
            return Ok(());
        }
        if !self.holds(rel, spot, &st, was)? {
            self.conflict(rel, CHANGED);
            return Ok(());
        }
        f.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(|e| WsError::io_at("chmod", &spot.path(), e))?;
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
                let now = Stat::from(&m);
                now.same_as(&a.stat) && now.ctime_ns == a.stat.ctime_ns
            });
            if unchanged {
                remove_entry(&a.path)?;
            } else {
                self.put_back(&a.path, &a.rel)?;
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
                        self.put_back(&left, step.path())?;
                    }
                    continue;
                }
                let mut ours = false;
                for e in known {
                    ours = ours || holds_at(&left, &meta, e)?;
                }
                if ours {
                    remove_entry(&left)?;
                } else {
                    self.put_back(&left, step.path())?;
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

    /// A file moved aside that someone wrote to: back to `rel` (replacing
    /// what the rewind put there, never through a link), or kept (see
    /// [`Applier::keep`]) when that fails, as it does when the rewind
    /// removed its directory.
    fn put_back(&mut self, aside: &Path, rel: &str) -> Result<()> {
        let name = aside
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let back = || -> std::io::Result<PathBuf> {
            let to = self
                .root
                .spot(rel)?
                .ok_or_else(|| std::io::Error::from(ErrorKind::NotFound))?;
            self.stage.child(name)?.rename_to(&to, 0)?;
            Ok(to.dir.path().to_path_buf())
        };
        let reason = match back() {
            Ok(dir) => {
                self.touched.insert(dir);
                "written while the rewind replaced it; the written file was put back".to_string()
            }
            Err(_) => self.keep(name)?,
        };
        self.conflict(rel, reason);
        Ok(())
    }

    /// Moves the stage's entry `name` (a file someone wrote to that cannot
    /// go back to its path) to `<root>/.stow/kept/<run>/`, out of the
    /// stage, which goes when the rewind ends; the new names are flushed
    /// with the directories this run touched, before the stage is removed.
    /// Returns the conflict's reason, which says where it is. An error
    /// (the bytes stay in the stage) stops the rewind before the stage is
    /// removed: the next command finishing the journal tries again.
    fn keep(&mut self, name: &str) -> Result<String> {
        let run = self.stage.path().file_name().unwrap_or_default();
        let kept_root = super::kept_root(self.root.path());
        let kept = kept_root.join(run);
        create_private_dir(&kept)?;
        let to = kept.join(name);
        fs::rename(self.stage.path().join(name), &to)
            .map_err(|e| WsError::io_at("keep", &to, e))?;
        let stow = kept_root.parent().map(Path::to_path_buf);
        self.touched
            .extend([kept, kept_root].into_iter().chain(stow));
        Ok(format!(
            "written while the rewind replaced it; kept at {}",
            to.display()
        ))
    }
}

/// SHA-256 of the regular file at `spot`, opened without following a
/// link (`None`: not there, or not a regular file).
fn hash_spot(spot: &Spot) -> Result<Option<String>> {
    let mut f = match spot.open(0) {
        Ok(f) => f,
        Err(e) if beneath::is_missing(&e) => return Ok(None),
        Err(e) => return Err(WsError::io_at("read", &spot.path(), e)),
    };
    hash_open_file(&mut f, &spot.path())
}

/// Whether the file at `at` in the stage (one moved aside, stat `meta`)
/// is what `e` describes.
fn holds_at(at: &Path, meta: &Metadata, e: &Entry) -> Result<bool> {
    Ok(match e {
        Entry::File { sha256, size, .. } => {
            meta.file_type().is_file()
                && meta.len() == *size
                && hash_file(at)?.as_deref() == Some(sha256.as_str())
        }
        Entry::Link { target } => fs::read_link(at).is_ok_and(|t| t.as_os_str() == target.as_str()),
        Entry::Absent | Entry::Dir { .. } => false,
    })
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

fn remove_entry(p: &Path) -> Result<()> {
    match fs::remove_file(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(WsError::io_at("remove", p, e)),
    }
}
