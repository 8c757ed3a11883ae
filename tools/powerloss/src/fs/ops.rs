//! The `fuser::Filesystem` methods: each calls one helper of
//! [`PowerlossFs`] and turns its result into the reply.

use std::ffi::OsStr;
use std::path::Path;
use std::time::SystemTime;

use fuser::{
    AccessFlags, BsdFileFlags, Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};

use super::{is_syncfs, PowerlossFs, TTL};
use crate::core::{io_errno, model_errno, Handle};
use crate::model::Kind;
use crate::sys;

macro_rules! done {
    ($reply:ident, $r:expr, |$v:pat_param| $ok:expr) => {
        match $r {
            Ok($v) => $ok,
            Err(e) => $reply.error(e),
        }
    };
}

impl Filesystem for PowerlossFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = self.core.lock().and_then(|mut g| {
            let p = self.core.to_backing(parent.0);
            self.lookup_in(&mut g, p, name)
        });
        done!(reply, r, |a| reply.entry(&TTL, &a, Generation(0)));
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if ino.0 == 1 {
            return;
        }
        if let Ok(mut g) = self.core.lock() {
            let b = self.core.to_backing(ino.0);
            let gone = g.nodes.get_mut(&b).is_some_and(|n| {
                n.lookups = n.lookups.saturating_sub(nlookup);
                n.lookups == 0
            });
            if gone {
                g.nodes.remove(&b);
            }
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        done!(reply, self.getattr_of(ino.0), |a| reply.attr(&TTL, &a));
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let r = self.set_attr(ino.0, mode, uid, gid, size, atime, mtime);
        done!(reply, r, |a| reply.attr(&TTL, &a));
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let r = self
            .core
            .lock()
            .and_then(|g| g.fd(self.core.to_backing(ino.0)))
            .and_then(|fd| sys::readlink_fd(fd).map_err(io_errno));
        done!(reply, r, |t| reply.data(&t));
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let kind = crate::model::kind_of_mode(mode);
        let r = self.make(parent.0, name, kind, |p| {
            sys::mknod_at(p, name, mode & !umask, rdev)
        });
        done!(reply, r, |a| reply.entry(&TTL, &a, Generation(0)));
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let r = self.make(parent.0, name, Kind::Dir, |p| {
            sys::mkdir_at(p, name, mode & !umask)
        });
        done!(reply, r, |a| reply.entry(&TTL, &a, Generation(0)));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        done!(reply, self.remove(parent.0, name, false), |()| reply.ok());
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        done!(reply, self.remove(parent.0, name, true), |()| reply.ok());
    }

    fn symlink(
        &self,
        _req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let r = self.make(parent.0, link_name, Kind::Symlink, |p| {
            sys::symlink_at(target.as_os_str(), p, link_name)
        });
        done!(reply, r, |a| reply.entry(&TTL, &a, Generation(0)));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = self.rename_entry(parent.0, name, newparent.0, newname, flags.bits());
        done!(reply, r, |()| reply.ok());
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = self.link_entry(ino.0, newparent.0, newname);
        done!(reply, r, |a| reply.entry(&TTL, &a, Generation(0)));
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = self.open_file(ino.0, flags.0);
        done!(reply, r, |fh| reply
            .opened(FileHandle(fh), FopenFlags::empty()));
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let r = self.file(fh).and_then(|f| {
            let mut buf = vec![0u8; size as usize];
            let mut got = 0;
            while got < buf.len() {
                match std::os::unix::fs::FileExt::read_at(&*f, &mut buf[got..], offset + got as u64)
                {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(io_errno(e)),
                }
            }
            buf.truncate(got);
            Ok(buf)
        });
        done!(reply, r, |b| reply.data(&b));
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = self.write_at(ino.0, fh, offset, data);
        done!(reply, r, |n| reply.written(n));
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if let Ok(mut g) = self.core.lock() {
            g.handles.remove(&fh.0);
        }
        reply.ok();
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _ds: bool, reply: ReplyEmpty) {
        done!(reply, self.sync(ino.0, false), |()| reply.ok());
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        done!(reply, self.list(ino.0), |fh| reply
            .opened(FileHandle(fh), FopenFlags::empty()));
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let g = match self.core.lock() {
            Ok(g) => g,
            Err(e) => return reply.error(e),
        };
        let Some(Handle::Dir(entries)) = g.handles.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), i as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        if let Ok(mut g) = self.core.lock() {
            g.handles.remove(&fh.0);
        }
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _ds: bool,
        reply: ReplyEmpty,
    ) {
        done!(reply, self.sync(ino.0, true), |()| reply.ok());
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let r = sys::cname(self.core.backing.as_os_str())
            .map_err(io_errno)
            .and_then(|c| {
                // SAFETY: zeroed statvfs is a valid out-parameter.
                let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
                // SAFETY: valid C string and out-pointer.
                if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
                    return Err(io_errno(std::io::Error::last_os_error()));
                }
                Ok(s)
            });
        done!(reply, r, |s| reply.statfs(
            s.f_blocks,
            s.f_bfree,
            s.f_bavail,
            s.f_files,
            s.f_ffree,
            s.f_bsize as u32,
            s.f_namemax as u32,
            s.f_frsize as u32,
        ));
    }

    fn getxattr(&self, _req: &Request, _ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        if !is_syncfs(name) {
            return reply.error(Errno::ENODATA);
        }
        let r = self
            .core
            .lock()
            .and_then(|mut g| g.model.sync_all().map_err(model_errno));
        match r {
            Ok(()) if size == 0 => reply.size(0),
            Ok(()) => reply.data(&[]),
            Err(e) => reply.error(e),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::from_i32(libc::EOPNOTSUPP));
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
        if size == 0 {
            reply.size(0)
        } else {
            reply.data(&[])
        }
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENODATA);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        match self.core.lock() {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = self.create_file(parent.0, name, mode & !umask, flags);
        done!(reply, r, |(a, fh)| reply.created(
            &TTL,
            &a,
            Generation(0),
            FileHandle(fh),
            FopenFlags::empty()
        ));
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if mode != 0 {
            return reply.error(Errno::from_i32(libc::EOPNOTSUPP));
        }
        let r = self.core.lock().and_then(|mut g| {
            let file = match g.handles.get(&fh.0) {
                Some(Handle::File(f)) => std::sync::Arc::clone(f),
                _ => return Err(Errno::EBADF),
            };
            let b = self.core.to_backing(ino.0);
            g.ensure_file(b, std::os::fd::AsRawFd::as_raw_fd(&*file))?;
            let len = file.metadata().map_err(io_errno)?.len();
            let end = offset.saturating_add(length);
            if end > len {
                file.set_len(end).map_err(io_errno)?;
                g.model.set_len(b, end).map_err(model_errno)?;
            }
            Ok(())
        });
        done!(reply, r, |()| reply.ok());
    }
}
