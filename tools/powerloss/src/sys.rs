//! Thin wrappers over the `*at` system calls the passthrough uses: every
//! backing object is reached through an `O_PATH` descriptor of its
//! directory or itself, so renames never invalidate what we hold.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// A name as a C string (a NUL inside is `EINVAL`).
pub fn cname(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// The `/proc/self/fd/N` path of a descriptor (opens what it names).
pub fn proc_path(fd: RawFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{fd}"))
}

/// `openat(dir, name, O_PATH | O_NOFOLLOW)`.
pub fn open_path(dir: RawFd, name: &OsStr) -> io::Result<OwnedFd> {
    let c = cname(name)?;
    // SAFETY: a valid C string and descriptor; the result is a new fd we own.
    let fd = check(unsafe {
        libc::openat(
            dir,
            c.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: fd was just returned by openat.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fstatat(fd, "", AT_EMPTY_PATH)`: the object an `O_PATH` fd names.
pub fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor, empty C string, valid out-pointer.
    check(unsafe {
        libc::fstatat(
            fd,
            c"".as_ptr(),
            &mut st,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(st)
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`.
pub fn lstat_at(dir: RawFd, name: &OsStr) -> io::Result<libc::stat> {
    let c = cname(name)?;
    // SAFETY: as above.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor, C string and out-pointer.
    check(unsafe { libc::fstatat(dir, c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) })?;
    Ok(st)
}

/// `mkdirat`.
pub fn mkdir_at(dir: RawFd, name: &OsStr, mode: u32) -> io::Result<()> {
    let c = cname(name)?;
    // SAFETY: valid descriptor and C string.
    check(unsafe { libc::mkdirat(dir, c.as_ptr(), mode as libc::mode_t) }).map(drop)
}

/// `mknodat`.
pub fn mknod_at(dir: RawFd, name: &OsStr, mode: u32, rdev: u32) -> io::Result<()> {
    let c = cname(name)?;
    // SAFETY: valid descriptor and C string.
    check(unsafe {
        libc::mknodat(
            dir,
            c.as_ptr(),
            mode as libc::mode_t,
            libc::dev_t::from(rdev),
        )
    })
    .map(drop)
}

/// `symlinkat(target, dir, name)`.
pub fn symlink_at(target: &OsStr, dir: RawFd, name: &OsStr) -> io::Result<()> {
    let (t, c) = (cname(target)?, cname(name)?);
    // SAFETY: valid C strings and descriptor.
    check(unsafe { libc::symlinkat(t.as_ptr(), dir, c.as_ptr()) }).map(drop)
}

/// `linkat(AT_EMPTY_PATH)`-free hard link of an `O_PATH` fd, through its
/// `/proc/self/fd` path (follows that one magic link only).
pub fn link_fd(fd: RawFd, dir: RawFd, name: &OsStr) -> io::Result<()> {
    let src = cname(proc_path(fd).as_os_str())?;
    let c = cname(name)?;
    // SAFETY: valid C strings and descriptors.
    check(unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            src.as_ptr(),
            dir,
            c.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    })
    .map(drop)
}

/// `renameat2`.
pub fn rename_at(
    from_dir: RawFd,
    from: &OsStr,
    to_dir: RawFd,
    to: &OsStr,
    flags: u32,
) -> io::Result<()> {
    let (f, t) = (cname(from)?, cname(to)?);
    // SAFETY: valid C strings and descriptors.
    check(unsafe { libc::renameat2(from_dir, f.as_ptr(), to_dir, t.as_ptr(), flags) }).map(drop)
}

/// `readlinkat(fd, "")` of an `O_PATH` fd of a symbolic link.
pub fn readlink_fd(fd: RawFd) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: valid descriptor, empty C string, buffer of the given length.
    let n = unsafe {
        libc::readlinkat(
            fd,
            c"".as_ptr(),
            buf.as_mut_ptr().cast::<libc::c_char>(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// `fchmodat` / `fchownat` / `utimensat` through the `/proc/self/fd` path.
pub fn chmod_fd(fd: RawFd, mode: u32) -> io::Result<()> {
    let p = cname(proc_path(fd).as_os_str())?;
    // SAFETY: valid C string.
    check(unsafe { libc::chmod(p.as_ptr(), mode as libc::mode_t) }).map(drop)
}

/// `lchown`-like ownership change of what an `O_PATH` fd names.
pub fn chown_fd(fd: RawFd, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
    let uid = uid.unwrap_or(u32::MAX);
    let gid = gid.unwrap_or(u32::MAX);
    // SAFETY: valid descriptor and empty C string.
    check(unsafe {
        libc::fchownat(
            fd,
            c"".as_ptr(),
            uid,
            gid,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(drop)
}

/// Sets access and modification times (`None` leaves one unchanged).
pub fn utimes_fd(
    fd: RawFd,
    atime: Option<libc::timespec>,
    mtime: Option<libc::timespec>,
) -> io::Result<()> {
    let omit = libc::timespec {
        tv_sec: 0,
        tv_nsec: libc::UTIME_OMIT,
    };
    let times = [atime.unwrap_or(omit), mtime.unwrap_or(omit)];
    let p = cname(proc_path(fd).as_os_str())?;
    // SAFETY: valid C string and two timespecs.
    check(unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), times.as_ptr(), 0) }).map(drop)
}
