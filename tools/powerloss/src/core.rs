//! The state shared by the FUSE handlers and the control socket: the
//! backing directory's open objects, the durability model, and the "power
//! is off" switch.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use fuser::Errno;

use crate::error::{Context, Error, Result};
use crate::model::{list_dir, CutMode, CutStats, Model, STATE_DIR};
use crate::sys;

/// The extended attribute whose lookup means "syncfs was called on this
/// file system" (sent by the `syncfs` shim, see the README).
pub const SYNCFS_XATTR: &str = "user.powerloss.syncfs";

/// One backing object the kernel knows (looked up and not forgotten).
pub(crate) struct Node {
    pub(crate) fd: OwnedFd,
    pub(crate) lookups: u64,
}

/// An open file or directory handle.
pub(crate) enum Handle {
    File(Arc<File>),
    Dir(Vec<(u64, fuser::FileType, OsString)>),
}

/// Everything behind the one lock.
pub(crate) struct Inner {
    pub(crate) nodes: HashMap<u64, Node>,
    pub(crate) handles: HashMap<u64, Handle>,
    pub(crate) next_fh: u64,
    pub(crate) stash_seq: u64,
    pub(crate) stash: OwnedFd,
    pub(crate) model: Model,
}

/// The harness's shared state (see the module docs).
pub struct Core {
    pub(crate) backing: PathBuf,
    pub(crate) state: PathBuf,
    pub(crate) root: u64,
    dead: AtomicBool,
    inner: Mutex<Inner>,
}

/// What a mount session did and what a cut threw away.
#[derive(Clone, Copy, Debug, Default)]
pub struct CutReport {
    /// The model's counts.
    pub stats: CutStats,
    /// Files written back into the rebuilt tree.
    pub files: usize,
    /// Directories rebuilt.
    pub dirs: usize,
}

impl Core {
    /// Opens the backing directory and prepares its (empty) state
    /// directory. Refuses a backing directory whose state directory is
    /// left from a session that did not end (remove it by hand).
    pub fn open(backing: &Path) -> Result<Arc<Core>> {
        let backing = std::fs::canonicalize(backing).ctx(|| format!("{}", backing.display()))?;
        let meta = std::fs::metadata(&backing).ctx(|| format!("stat {}", backing.display()))?;
        if !meta.is_dir() {
            return Err(Error::Backing(backing, "not a directory".into()));
        }
        let state = backing.join(STATE_DIR);
        if state.exists() {
            std::fs::remove_dir_all(&state).ctx(|| format!("clear {}", state.display()))?;
        }
        let stash_dir = state.join("stash");
        std::fs::create_dir_all(&stash_dir).ctx(|| format!("mkdir {}", stash_dir.display()))?;
        let stash: OwnedFd = File::open(&stash_dir)
            .ctx(|| format!("open {}", stash_dir.display()))?
            .into();
        let root_fd: OwnedFd = sys::open_path(libc::AT_FDCWD, backing.as_os_str())
            .ctx(|| format!("open {}", backing.display()))?;
        let model = Model::new(&state.join("data"))?;
        let mut nodes = HashMap::new();
        nodes.insert(
            meta.ino(),
            Node {
                fd: root_fd,
                lookups: 1,
            },
        );
        Ok(Arc::new(Core {
            root: meta.ino(),
            backing,
            state,
            dead: AtomicBool::new(false),
            inner: Mutex::new(Inner {
                nodes,
                handles: HashMap::new(),
                next_fh: 1,
                stash_seq: 0,
                stash,
                model,
            }),
        }))
    }

    /// Whether power was cut (every request then fails with `EIO`).
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    pub(crate) fn lock(&self) -> std::result::Result<MutexGuard<'_, Inner>, Errno> {
        if self.is_dead() {
            return Err(Errno::EIO);
        }
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        // A cut may have happened while we waited for the lock.
        if self.is_dead() {
            return Err(Errno::EIO);
        }
        Ok(g)
    }

    /// The FUSE inode number of a backing one (the backing root is 1, and
    /// a backing inode 1, if any, takes the root's number).
    pub(crate) fn to_fuse(&self, b: u64) -> u64 {
        if b == self.root {
            1
        } else if b == 1 {
            self.root
        } else {
            b
        }
    }

    /// The backing inode number of a FUSE one (the same swap).
    pub(crate) fn to_backing(&self, f: u64) -> u64 {
        self.to_fuse(f)
    }

    /// Whether `name` in directory `dir` (backing) is the hidden state.
    pub(crate) fn hidden(&self, dir: u64, name: &OsStr) -> bool {
        dir == self.root && name == STATE_DIR
    }

    /// Applies everything pending (as `syncfs` does).
    pub fn sync_all(&self) -> Result<()> {
        let mut g = self
            .lock()
            .map_err(|_| Error::Control("power is off".into()))?;
        g.model.sync_all()
    }

    /// Counts of pending entry changes and data operations.
    pub fn pending(&self) -> Result<(usize, usize)> {
        let g = self
            .lock()
            .map_err(|_| Error::Control("power is off".into()))?;
        Ok(g.model.pending())
    }

    /// Cuts the power: every later request fails, the model decides what
    /// survived, and the backing directory is rewritten to exactly that.
    pub fn cut(&self, mode: CutMode) -> Result<CutReport> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if self.dead.swap(true, Ordering::SeqCst) {
            return Err(Error::Control("power is already off".into()));
        }
        let stats = g.model.cut(mode)?;
        g.handles.clear();
        let (files, dirs) =
            crate::rebuild::rebuild(&self.backing, &self.state, self.root, &g.model)?;
        Ok(CutReport { stats, files, dirs })
    }
}

impl Inner {
    /// The `O_PATH` descriptor of a known backing inode.
    pub(crate) fn fd(&self, b: u64) -> std::result::Result<i32, Errno> {
        self.nodes
            .get(&b)
            .map(|n| n.fd.as_raw_fd())
            .ok_or(Errno::ESTALE)
    }

    /// Records a directory's durable entries before its first change.
    pub(crate) fn ensure_dir(&mut self, core: &Core, dir: u64) -> std::result::Result<(), Errno> {
        if self.model.tracks_dir(dir) {
            return Ok(());
        }
        let fd = self.fd(dir)?;
        let entries = list_dir(&sys::proc_path(fd), dir == core.root).map_err(io_errno)?;
        self.model.track_dir(dir, entries);
        Ok(())
    }

    /// Starts tracking a file's bytes before its first change (its live
    /// bytes, read through `fd`, are its durable ones).
    pub(crate) fn ensure_file(&mut self, b: u64, fd: i32) -> std::result::Result<(), Errno> {
        if self.model.tracks_file(b) {
            return Ok(());
        }
        self.model
            .track_file(b, Some(&sys::proc_path(fd)))
            .map_err(model_errno)
    }

    /// Moves a name into the stash (the inode stays alive for a rebuild,
    /// and its number is not reused while the session lasts).
    pub(crate) fn stash(&mut self, dir: i32, name: &OsStr) -> std::io::Result<()> {
        self.stash_seq += 1;
        let to = OsString::from(self.stash_seq.to_string());
        sys::rename_at(dir, name, self.stash.as_raw_fd(), &to, 0)
    }

    /// Keeps a second name of an inode about to be replaced by a rename.
    pub(crate) fn stash_link(&mut self, fd: i32) -> std::io::Result<()> {
        self.stash_seq += 1;
        let to = OsString::from(self.stash_seq.to_string());
        sys::link_fd(fd, self.stash.as_raw_fd(), &to)
    }
}

/// An I/O error as the errno FUSE answers.
pub(crate) fn io_errno(e: std::io::Error) -> Errno {
    Errno::from(e)
}

/// A model error as `EIO` (logged).
pub(crate) fn model_errno(e: Error) -> Errno {
    eprintln!("powerloss: model: {e}");
    Errno::EIO
}
