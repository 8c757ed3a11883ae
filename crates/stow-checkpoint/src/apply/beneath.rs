//! Entries of the live tree reached from its root one directory at a
//! time, never through a link.
//!
//! A rewind acts on paths that another process may be changing. Checking
//! that every directory above a path is a real directory and then using
//! the path leaves a window: a directory swapped for a link between the
//! check and the rename would send the rename (or a removal) outside the
//! tree. Here each parent is opened component by component with
//! `O_NOFOLLOW`, and every call on the entry goes through that descriptor
//! (`renameat2`, `fstatat`, `readlinkat`, `openat`, `unlinkat`): the call
//! lands in the directory that was walked, whatever happens to its name
//! afterwards.

use std::ffi::{CString, OsString};
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// What an entry is, from its stat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
    Link,
    Other,
}

/// The parts of an entry's stat a rewind compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub kind: Kind,
    pub ino: u64,
    pub size: u64,
    /// Permission bits (`0o777`).
    pub perm: u32,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

impl Stat {
    /// The same entry, unchanged in place: inode, size and modification
    /// time.
    pub fn same_as(&self, other: &Stat) -> bool {
        self.ino == other.ino && self.size == other.size && self.mtime_ns == other.mtime_ns
    }
}

impl From<&Metadata> for Stat {
    fn from(m: &Metadata) -> Stat {
        let t = m.file_type();
        Stat {
            kind: if t.is_file() {
                Kind::File
            } else if t.is_dir() {
                Kind::Dir
            } else if t.is_symlink() {
                Kind::Link
            } else {
                Kind::Other
            },
            ino: m.ino(),
            size: m.len(),
            perm: m.permissions().mode() & 0o777,
            mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            ctime_ns: m.ctime() * 1_000_000_000 + m.ctime_nsec(),
        }
    }
}

/// An open directory: the tree's root, one below it, or the rewind's
/// stage. Opened with `O_PATH`: usable as the directory of the `*at`
/// calls, whatever its own mode.
pub(crate) struct Dir {
    fd: OwnedFd,
    /// Where it was when opened, for messages and directory flushes.
    path: PathBuf,
}

/// An entry named in an open directory.
pub(crate) struct Spot {
    pub dir: Dir,
    name: CString,
}

fn c_name(name: &[u8]) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// `openat(2)` of `name` in `dir` (`AT_FDCWD` for a path) with `flags`,
/// close-on-exec.
fn open_at(dir: RawFd, name: &CString, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: a valid NUL-terminated name; the returned descriptor is new
    // and owned by nothing else.
    let fd = check(unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC, 0) })?;
    // SAFETY: `fd` was just opened and is not owned elsewhere.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether an error means "not there, or not reachable without a link".
pub(crate) fn is_missing(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)
    )
}

impl Dir {
    /// Opens the directory at `path` (followed if it is a link: the
    /// tree's root and the stage are found through the registry, not in
    /// the tree).
    pub fn open(path: &Path) -> io::Result<Dir> {
        let name = c_name(path.as_os_str().as_bytes())?;
        Ok(Dir {
            fd: open_at(libc::AT_FDCWD, &name, libc::O_PATH | libc::O_DIRECTORY)?,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The entry `rel` (a clean relative slash path) below this
    /// directory, its parents opened one at a time without following a
    /// link; `Ok(None)` when one of them is missing or is not a
    /// directory.
    pub fn spot(&self, rel: &str) -> io::Result<Option<Spot>> {
        let (parents, name) = rel.rsplit_once('/').unwrap_or(("", rel));
        let mut dir = Dir {
            fd: self.fd.try_clone()?,
            path: self.path.clone(),
        };
        for seg in parents.split('/').filter(|s| !s.is_empty()) {
            let c = c_name(seg.as_bytes())?;
            match open_at(
                dir.fd.as_raw_fd(),
                &c,
                libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            ) {
                Ok(fd) => {
                    dir = Dir {
                        fd,
                        path: dir.path.join(seg),
                    }
                }
                Err(e) if is_missing(&e) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Ok(Some(Spot {
            dir,
            name: c_name(name.as_bytes())?,
        }))
    }

    /// The entry `name` directly in this directory (the stage's own
    /// files).
    pub fn child(&self, name: &str) -> io::Result<Spot> {
        Ok(Spot {
            dir: Dir {
                fd: self.fd.try_clone()?,
                path: self.path.clone(),
            },
            name: c_name(name.as_bytes())?,
        })
    }
}

impl Spot {
    /// Where the entry was when its directory was opened (messages).
    pub fn path(&self) -> PathBuf {
        self.dir
            .path
            .join(std::ffi::OsStr::from_bytes(self.name.as_bytes()))
    }

    /// The entry's own stat (a link is not followed); `Ok(None)` when it
    /// is not there.
    pub fn stat(&self) -> io::Result<Option<Stat>> {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: a valid descriptor and name; `st` is written in full on
        // success and read only then.
        let rc = unsafe {
            libc::fstatat(
                self.dir.fd.as_raw_fd(),
                self.name.as_ptr(),
                st.as_mut_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if let Err(e) = check(rc) {
            return if is_missing(&e) { Ok(None) } else { Err(e) };
        }
        // SAFETY: fstatat succeeded, so `st` is initialized.
        let st = unsafe { st.assume_init() };
        let kind = match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => Kind::File,
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFLNK => Kind::Link,
            _ => Kind::Other,
        };
        Ok(Some(Stat {
            kind,
            ino: st.st_ino,
            size: u64::try_from(st.st_size).unwrap_or(0),
            perm: st.st_mode & 0o777,
            mtime_ns: st.st_mtime * 1_000_000_000 + st.st_mtime_nsec,
            ctime_ns: st.st_ctime * 1_000_000_000 + st.st_ctime_nsec,
        }))
    }

    /// The target of the link here; `None` when this is not a link.
    pub fn read_link(&self) -> io::Result<Option<OsString>> {
        let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
        // SAFETY: a valid descriptor and name; `buf` is writable for its
        // whole length and the kernel writes at most that many bytes.
        let n = unsafe {
            libc::readlinkat(
                self.dir.fd.as_raw_fd(),
                self.name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EINVAL) => Ok(None),
                _ if is_missing(&e) => Ok(None),
                _ => Err(e),
            };
        }
        buf.truncate(usize::try_from(n).unwrap_or(0));
        Ok(Some(OsString::from_vec(buf)))
    }

    /// Opens the entry for reading without following a link (and
    /// without blocking on a FIFO); `O_DIRECTORY` in `extra` asks for a
    /// directory.
    pub fn open(&self, extra: libc::c_int) -> io::Result<File> {
        let fd = open_at(
            self.dir.fd.as_raw_fd(),
            &self.name,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | extra,
        )?;
        Ok(File::from(fd))
    }

    /// Renames this entry to `to` with `renameat2(2)` `flags`
    /// (`RENAME_NOREPLACE`, `RENAME_EXCHANGE` or 0).
    pub fn rename_to(&self, to: &Spot, flags: libc::c_uint) -> io::Result<()> {
        // SAFETY: valid descriptors and NUL-terminated names.
        let rc = unsafe {
            libc::renameat2(
                self.dir.fd.as_raw_fd(),
                self.name.as_ptr(),
                to.dir.fd.as_raw_fd(),
                to.name.as_ptr(),
                flags,
            )
        };
        check(rc).map(|_| ())
    }

    /// Removes the empty directory here.
    pub fn remove_dir(&self) -> io::Result<()> {
        // SAFETY: a valid descriptor and name.
        let rc = unsafe {
            libc::unlinkat(
                self.dir.fd.as_raw_fd(),
                self.name.as_ptr(),
                libc::AT_REMOVEDIR,
            )
        };
        check(rc).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spot_never_goes_through_a_link_and_stays_with_its_directory() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("tree");
        let outside = t.path().join("outside");
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(root.join("src/a"), "tree").unwrap();
        std::fs::write(outside.join("a"), "outside").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("out")).unwrap();
        let dir = Dir::open(&root).unwrap();

        // A link above the entry: not reachable.
        assert!(dir.spot("out/a").unwrap().is_none());
        assert!(dir.spot("src/a/b").unwrap().is_none());
        // A link as the entry itself: its own stat, its target.
        let link = dir.spot("out").unwrap().unwrap();
        assert_eq!(link.stat().unwrap().unwrap().kind, Kind::Link);
        assert_eq!(link.read_link().unwrap().unwrap(), outside.as_os_str());

        // The directory is swapped for a link after the walk: the entry
        // still names the file in the directory that was walked.
        let a = dir.spot("src/a").unwrap().unwrap();
        std::fs::rename(root.join("src"), root.join("moved")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("src")).unwrap();
        let before = a.stat().unwrap().unwrap();
        assert_eq!((before.kind, before.size), (Kind::File, 4));
        let b = dir.child("b").unwrap();
        a.rename_to(&b, libc::RENAME_NOREPLACE).unwrap();
        assert_eq!(std::fs::read_to_string(root.join("b")).unwrap(), "tree");
        assert_eq!(
            std::fs::read_to_string(outside.join("a")).unwrap(),
            "outside"
        );
        assert!(a.stat().unwrap().is_none());
        assert!(a.read_link().unwrap().is_none());
        let src = dir.spot("src").unwrap().unwrap();
        assert!(src.open(libc::O_DIRECTORY).is_err());
        let moved = dir.spot("moved").unwrap().unwrap();
        moved.remove_dir().unwrap();
        assert!(!root.join("moved").exists());
    }
}
