//! The FUSE passthrough: every request is carried out on the backing
//! directory at once (what processes see is always live), and the model
//! is told first what the change is, so it can keep the durable state.

use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FileHandle, FileType, INodeNo};

use crate::core::{io_errno, model_errno, Core, Handle, Inner, Node, SYNCFS_XATTR};
use crate::model::{kind_of_mode, Entry, Kind};
use crate::sys;

/// How long the kernel may cache entries and attributes (every change
/// goes through us, so the cache stays right).
const TTL: Duration = Duration::from_secs(1);

type R<T> = std::result::Result<T, Errno>;

/// The FUSE file system over a [`Core`].
pub struct PowerlossFs {
    core: Arc<Core>,
}

impl PowerlossFs {
    /// A file system serving `core`'s backing directory.
    pub fn new(core: Arc<Core>) -> Self {
        PowerlossFs { core }
    }

    fn attr(&self, st: &libc::stat) -> FileAttr {
        let t = |s: i64, ns: i64| {
            if s >= 0 {
                UNIX_EPOCH + Duration::new(s as u64, ns as u32)
            } else {
                UNIX_EPOCH
            }
        };
        FileAttr {
            ino: INodeNo(self.core.to_fuse(st.st_ino)),
            size: st.st_size as u64,
            blocks: st.st_blocks as u64,
            atime: t(st.st_atime, st.st_atime_nsec),
            mtime: t(st.st_mtime, st.st_mtime_nsec),
            ctime: t(st.st_ctime, st.st_ctime_nsec),
            crtime: t(st.st_ctime, st.st_ctime_nsec),
            kind: file_type(st.st_mode),
            perm: (st.st_mode & 0o7777) as u16,
            nlink: st.st_nlink as u32,
            uid: st.st_uid,
            gid: st.st_gid,
            rdev: st.st_rdev as u32,
            blksize: st.st_blksize as u32,
            flags: 0,
        }
    }

    /// Looks `name` up in `parent` (backing) and counts a kernel reference.
    fn lookup_in(&self, g: &mut Inner, parent: u64, name: &OsStr) -> R<FileAttr> {
        if self.core.hidden(parent, name) {
            return Err(Errno::ENOENT);
        }
        let fd = sys::open_path(g.fd(parent)?, name).map_err(io_errno)?;
        let st = sys::fstat(fd.as_raw_fd()).map_err(io_errno)?;
        g.nodes
            .entry(st.st_ino)
            .and_modify(|n| n.lookups += 1)
            .or_insert(Node { fd, lookups: 1 });
        Ok(self.attr(&st))
    }

    fn getattr_of(&self, ino: u64) -> R<FileAttr> {
        let g = self.core.lock()?;
        let st = sys::fstat(g.fd(self.core.to_backing(ino))?).map_err(io_errno)?;
        Ok(self.attr(&st))
    }

    fn new_handle(g: &mut Inner, h: Handle) -> u64 {
        let fh = g.next_fh;
        g.next_fh += 1;
        g.handles.insert(fh, h);
        fh
    }

    fn file(&self, fh: FileHandle) -> R<Arc<File>> {
        let g = self.core.lock()?;
        match g.handles.get(&fh.0) {
            Some(Handle::File(f)) => Ok(Arc::clone(f)),
            _ => Err(Errno::EBADF),
        }
    }

    fn open_file(&self, ino: u64, flags: i32) -> R<u64> {
        let mut g = self.core.lock()?;
        let b = self.core.to_backing(ino);
        let fd = g.fd(b)?;
        let writes = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let trunc = writes && flags & libc::O_TRUNC != 0;
        if trunc {
            g.ensure_file(b, fd)?;
        }
        let file = reopen(fd, flags)?;
        if trunc {
            g.model.set_len(b, 0).map_err(model_errno)?;
        }
        Ok(Self::new_handle(&mut g, Handle::File(Arc::new(file))))
    }

    fn create_file(&self, parent: u64, name: &OsStr, mode: u32, flags: i32) -> R<(FileAttr, u64)> {
        let mut g = self.core.lock()?;
        let p = self.core.to_backing(parent);
        if self.core.hidden(p, name) {
            return Err(Errno::EACCES);
        }
        g.ensure_dir(&self.core, p)?;
        let pfd = g.fd(p)?;
        let c = sys::cname(name).map_err(io_errno)?;
        let base = (flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | libc::O_APPEND))
            | libc::O_CLOEXEC;
        // SAFETY: valid descriptor and C string; the fd is owned below.
        let fd = unsafe {
            libc::openat(
                pfd,
                c.as_ptr(),
                base | libc::O_CREAT | libc::O_EXCL,
                mode as libc::c_uint,
            )
        };
        let file = if fd >= 0 {
            // SAFETY: just returned by openat.
            let file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            let st = sys::fstat(file.as_raw_fd()).map_err(io_errno)?;
            g.model.track_file(st.st_ino, None).map_err(model_errno)?;
            g.model.record(vec![(
                p,
                name.to_os_string(),
                Some(Entry {
                    ino: st.st_ino,
                    kind: Kind::File,
                }),
            )]);
            file
        } else {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) || flags & libc::O_EXCL != 0 {
                return Err(io_errno(e));
            }
            drop(g);
            let attr = {
                let mut g = self.core.lock()?;
                self.lookup_in(&mut g, p, name)?
            };
            let fh = self.open_file(attr.ino.0, flags)?;
            return Ok((attr, fh));
        };
        let attr = self.lookup_in(&mut g, p, name)?;
        let fh = Self::new_handle(&mut g, Handle::File(Arc::new(file)));
        Ok((attr, fh))
    }

    /// mkdir, mknod and symlink: makes the entry, records it, looks it up.
    fn make(
        &self,
        parent: u64,
        name: &OsStr,
        kind: Kind,
        mk: impl FnOnce(i32) -> std::io::Result<()>,
    ) -> R<FileAttr> {
        let mut g = self.core.lock()?;
        let p = self.core.to_backing(parent);
        if self.core.hidden(p, name) {
            return Err(Errno::EACCES);
        }
        g.ensure_dir(&self.core, p)?;
        mk(g.fd(p)?).map_err(io_errno)?;
        let attr = self.lookup_in(&mut g, p, name)?;
        let b = self.core.to_backing(attr.ino.0);
        match kind {
            Kind::Dir => g.model.track_dir(b, Default::default()),
            Kind::File => g.model.track_file(b, None).map_err(model_errno)?,
            Kind::Symlink | Kind::Other => {}
        }
        g.model
            .record(vec![(p, name.to_os_string(), Some(Entry { ino: b, kind }))]);
        Ok(attr)
    }

    fn remove(&self, parent: u64, name: &OsStr, dir: bool) -> R<()> {
        let mut g = self.core.lock()?;
        let p = self.core.to_backing(parent);
        if self.core.hidden(p, name) {
            return Err(Errno::EACCES);
        }
        let pfd = g.fd(p)?;
        let st = sys::lstat_at(pfd, name).map_err(io_errno)?;
        let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
        match (dir, is_dir) {
            (false, true) => return Err(Errno::EISDIR),
            (true, false) => return Err(Errno::ENOTDIR),
            (true, true) => {
                let child = sys::open_path(pfd, name).map_err(io_errno)?;
                let path = sys::proc_path(child.as_raw_fd());
                let mut it = std::fs::read_dir(path).map_err(io_errno)?;
                if it.next().is_some() {
                    return Err(Errno::ENOTEMPTY);
                }
            }
            (false, false) => {}
        }
        g.ensure_dir(&self.core, p)?;
        g.stash(pfd, name).map_err(io_errno)?;
        g.model.record(vec![(p, name.to_os_string(), None)]);
        Ok(())
    }

    fn rename_entry(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
    ) -> R<()> {
        let mut g = self.core.lock()?;
        let (p, np) = (
            self.core.to_backing(parent),
            self.core.to_backing(newparent),
        );
        if self.core.hidden(p, name) || self.core.hidden(np, newname) {
            return Err(Errno::EACCES);
        }
        g.ensure_dir(&self.core, p)?;
        g.ensure_dir(&self.core, np)?;
        let (pfd, npfd) = (g.fd(p)?, g.fd(np)?);
        let src = sys::lstat_at(pfd, name).map_err(io_errno)?;
        let dst = sys::lstat_at(npfd, newname).ok();
        let entry = |st: &libc::stat| Entry {
            ino: st.st_ino,
            kind: kind_of_mode(st.st_mode),
        };
        let exchange = flags & libc::RENAME_EXCHANGE != 0;
        if let (Some(d), false) = (&dst, exchange) {
            if d.st_ino == src.st_ino {
                // Two names of one inode: rename does nothing.
                return sys::rename_at(pfd, name, npfd, newname, flags).map_err(io_errno);
            }
            if flags & libc::RENAME_NOREPLACE != 0 {
                return Err(Errno::EEXIST);
            }
            if d.st_mode & libc::S_IFMT == libc::S_IFDIR {
                g.ensure_dir(&self.core, d.st_ino).ok();
            } else {
                let victim = sys::open_path(npfd, newname).map_err(io_errno)?;
                g.stash_link(victim.as_raw_fd()).map_err(io_errno)?;
            }
        }
        sys::rename_at(pfd, name, npfd, newname, flags).map_err(io_errno)?;
        let updates = match (exchange, dst) {
            (true, Some(d)) => vec![
                (p, name.to_os_string(), Some(entry(&d))),
                (np, newname.to_os_string(), Some(entry(&src))),
            ],
            _ => vec![
                (p, name.to_os_string(), None),
                (np, newname.to_os_string(), Some(entry(&src))),
            ],
        };
        g.model.record(updates);
        Ok(())
    }

    fn link_entry(&self, ino: u64, newparent: u64, newname: &OsStr) -> R<FileAttr> {
        let mut g = self.core.lock()?;
        let (b, np) = (self.core.to_backing(ino), self.core.to_backing(newparent));
        if self.core.hidden(np, newname) {
            return Err(Errno::EACCES);
        }
        g.ensure_dir(&self.core, np)?;
        sys::link_fd(g.fd(b)?, g.fd(np)?, newname).map_err(io_errno)?;
        let attr = self.lookup_in(&mut g, np, newname)?;
        let kind = kind_of_mode(libc::S_IFREG);
        g.model.record(vec![(
            np,
            newname.to_os_string(),
            Some(Entry { ino: b, kind }),
        )]);
        Ok(attr)
    }

    fn write_at(&self, ino: u64, fh: FileHandle, off: u64, data: &[u8]) -> R<u32> {
        let mut g = self.core.lock()?;
        let file = match g.handles.get(&fh.0) {
            Some(Handle::File(f)) => Arc::clone(f),
            _ => return Err(Errno::EBADF),
        };
        let b = self.core.to_backing(ino);
        g.ensure_file(b, file.as_raw_fd())?;
        file.write_all_at(data, off).map_err(io_errno)?;
        g.model.write(b, off, data).map_err(model_errno)?;
        Ok(data.len() as u32)
    }

    #[allow(clippy::too_many_arguments)]
    fn set_attr(
        &self,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<fuser::TimeOrNow>,
        mtime: Option<fuser::TimeOrNow>,
    ) -> R<FileAttr> {
        {
            let mut g = self.core.lock()?;
            let b = self.core.to_backing(ino);
            let fd = g.fd(b)?;
            if let Some(len) = size {
                g.ensure_file(b, fd)?;
                let f = OpenOptions::new()
                    .write(true)
                    .open(sys::proc_path(fd))
                    .map_err(io_errno)?;
                f.set_len(len).map_err(io_errno)?;
                g.model.set_len(b, len).map_err(model_errno)?;
            }
            if let Some(m) = mode {
                sys::chmod_fd(fd, m).map_err(io_errno)?;
            }
            if uid.is_some() || gid.is_some() {
                sys::chown_fd(fd, uid, gid).map_err(io_errno)?;
            }
            if atime.is_some() || mtime.is_some() {
                sys::utimes_fd(fd, atime.map(timespec), mtime.map(timespec)).map_err(io_errno)?;
            }
        }
        self.getattr_of(ino)
    }

    fn list(&self, ino: u64) -> R<u64> {
        let mut g = self.core.lock()?;
        let b = self.core.to_backing(ino);
        let fd = g.fd(b)?;
        let mut entries = vec![
            (ino, FileType::Directory, OsString::from(".")),
            (ino, FileType::Directory, OsString::from("..")),
        ];
        let listed =
            crate::model::list_dir(&sys::proc_path(fd), b == self.core.root).map_err(io_errno)?;
        for (name, e) in listed {
            let t = match e.kind {
                Kind::File => FileType::RegularFile,
                Kind::Dir => FileType::Directory,
                Kind::Symlink => FileType::Symlink,
                Kind::Other => FileType::RegularFile,
            };
            entries.push((self.core.to_fuse(e.ino), t, name));
        }
        Ok(Self::new_handle(&mut g, Handle::Dir(entries)))
    }

    fn sync(&self, ino: u64, dir: bool) -> R<()> {
        let mut g = self.core.lock()?;
        let b = self.core.to_backing(ino);
        if dir {
            g.model.fsync_dir(b);
            Ok(())
        } else {
            g.model.fsync_file(b).map_err(model_errno)
        }
    }
}

/// Opens what an `O_PATH` fd names for I/O with the caller's flags
/// (creation, append and direct I/O stripped: offsets come from the kernel;
/// `O_NOFOLLOW` too: the kernel resolved the name, and the `/proc` path is a
/// link by nature).
fn reopen(fd: i32, flags: i32) -> R<File> {
    let strip = libc::O_CREAT
        | libc::O_NOFOLLOW
        | libc::O_EXCL
        | libc::O_NOCTTY
        | libc::O_APPEND
        | libc::O_DIRECT
        | libc::O_ACCMODE;
    let mut o = OpenOptions::new();
    match flags & libc::O_ACCMODE {
        libc::O_RDONLY => o.read(true),
        libc::O_WRONLY => o.write(true),
        _ => o.read(true).write(true),
    };
    o.custom_flags(flags & !strip);
    o.open(sys::proc_path(fd)).map_err(io_errno)
}

fn timespec(t: fuser::TimeOrNow) -> libc::timespec {
    match t {
        fuser::TimeOrNow::Now => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        fuser::TimeOrNow::SpecificTime(t) => {
            let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
            libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: libc::c_long::from(d.subsec_nanos() as i32),
            }
        }
    }
}

fn file_type(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

mod ops;

/// Whether an extended attribute name is the syncfs signal.
fn is_syncfs(name: &OsStr) -> bool {
    name.as_bytes() == SYNCFS_XATTR.as_bytes()
}
