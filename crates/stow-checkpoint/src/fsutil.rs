//! Small durable file-system helpers: atomic replace, directory fsync,
//! advisory locks, timestamps, random identifiers.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::RngCore;

use crate::error::{Result, WsError};

/// Fsyncs a directory so a rename or create inside it survives a crash.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    stow_store::sync_dir(dir).map_err(|e| WsError::io_at("fsync directory", dir, e))
}

/// Creates a directory (and parents) with mode 0700.
pub fn create_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| WsError::io_at("create directory", dir, e))
}

/// [`create_private_dir`] for a directory that will hold durable files:
/// each directory it makes has its name fsynced into its parent, so a
/// file later fsynced into it does not vanish with the directory's own
/// entry at a power cut. An existing directory costs one `stat`.
pub fn create_durable_private_dir(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut made = Vec::new();
    let mut at = Some(dir);
    while let Some(d) = at.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        made.push(d);
        at = d.parent();
    }
    create_private_dir(dir)?;
    // Outermost first: each new name durable in a durable parent.
    for d in made.iter().rev() {
        if let Some(parent) = d.parent().filter(|p| !p.as_os_str().is_empty()) {
            fsync_dir(parent)?;
        }
    }
    Ok(())
}

/// Creates the directories of the clean relative slash path `rel` under
/// `root` with `mode` (before the umask), one component at a time, never
/// through a symbolic link: a component that exists must be a real
/// directory. `root` itself must exist.
pub fn create_dirs_within(root: &Path, rel: &str, mode: u32) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let mut dir = root.to_path_buf();
    for seg in rel.split('/').filter(|s| !s.is_empty()) {
        dir.push(seg);
        match fs::DirBuilder::new().mode(mode).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let meta =
                    fs::symlink_metadata(&dir).map_err(|e| WsError::io_at("stat", &dir, e))?;
                if !meta.file_type().is_dir() {
                    return Err(WsError::InvalidInput {
                        path: dir,
                        reason: "exists and is not a directory (symbolic links are never followed)"
                            .into(),
                    });
                }
            }
            Err(e) => return Err(WsError::io_at("create directory", &dir, e)),
        }
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically: temp file in the same directory,
/// fsync, rename over `path`, fsync the directory. A crash leaves either the
/// old or the new content, never a torn file.
pub fn atomic_write(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let (dir, tmp) = write_temp(path, bytes, mode)?;
    if let Err(e) = fs::rename(&tmp, path) {
        let _ = fs::remove_file(&tmp);
        return Err(WsError::io_at("write", path, e));
    }
    fsync_dir(dir)
}

/// Writes `bytes` to a new fsynced temp file beside `path`; returns the
/// directory and the temp file (removed again on failure).
fn write_temp<'p>(path: &'p Path, bytes: &[u8], mode: u32) -> Result<(&'p Path, PathBuf)> {
    let dir = path
        .parent()
        .ok_or_else(|| WsError::InvalidRequest(format!("{} has no parent", path.display())))?;
    let tmp = dir.join(format!(".tmp-{}", random_hex(8)));
    let write = || -> std::io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    };
    if let Err(e) = write() {
        let _ = fs::remove_file(&tmp);
        return Err(WsError::io_at("write", path, e));
    }
    Ok((dir, tmp))
}

/// Swaps the entries at `a` and `b` in one step (both must exist; either
/// may be a directory): a reader of either name sees the old entry or the
/// new one, never none.
pub fn rename_exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    renameat2(a, b, libc::RENAME_EXCHANGE)
}

/// Renames `from` to `to` unless `to` exists (a directory included):
/// `AlreadyExists` then, and nothing moves.
pub fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    renameat2(from, to, libc::RENAME_NOREPLACE)
}

/// `renameat2(2)` on two paths with `flags`.
fn renameat2(from: &Path, to: &Path, flags: libc::c_uint) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
    };
    let (from, to) = (c(from)?, c(to)?);
    // SAFETY: two valid NUL-terminated paths; no memory is shared.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            flags,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Gives the complete, fsynced file `tmp` the name `target` without ever
/// replacing a file there (a hard link fails on an existing name), then
/// removes `tmp` and flushes the directory. `tmp` is removed either way.
pub fn link_new(tmp: &Path, target: &Path) -> Result<()> {
    let linked = fs::hard_link(tmp, target);
    let _ = fs::remove_file(tmp);
    match linked {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(WsError::AlreadyExists(target.display().to_string()))
        }
        Err(e) => return Err(WsError::io_at("publish", target, e)),
    }
    match target.parent() {
        Some(dir) => fsync_dir(dir),
        None => Ok(()),
    }
}

/// Writes a new file `path` (never replacing one) with `bytes`: a temp
/// file beside it, fsynced, then [`link_new`].
pub fn write_new_file(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    if fs::symlink_metadata(path).is_ok() {
        return Err(WsError::AlreadyExists(path.display().to_string()));
    }
    let (_, tmp) = write_temp(path, bytes, mode)?;
    link_new(&tmp, path)
}

/// An exclusive advisory lock (`flock`), released on drop or process death.
#[derive(Debug)]
pub struct FileLock {
    _file: File,
}

impl FileLock {
    /// Tries to take the lock without waiting; `Ok(None)` when another
    /// holder has it.
    pub fn try_lock(path: &Path) -> Result<Option<FileLock>> {
        Self::take(path, true)
    }

    /// Takes the lock, waiting for other holders.
    pub fn lock(path: &Path) -> Result<FileLock> {
        Self::take(path, false)?
            .ok_or_else(|| WsError::InvalidRequest("lock unexpectedly busy".into()))
    }

    /// [`FileLock::try_lock`] of a lock file that exists, never creating
    /// one; `Ok(None)` also when it is gone.
    pub fn try_lock_existing(path: &Path) -> Result<Option<FileLock>> {
        let file = match OpenOptions::new().read(true).write(true).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(WsError::io_at("open lock", path, e)),
        };
        Self::flock(file, path, true)
    }

    /// Whether the locked file is still the one at `path` (not removed, or
    /// replaced by another file, since it was opened).
    pub fn is_at(&self, path: &Path) -> bool {
        use std::os::unix::fs::MetadataExt;
        match (self._file.metadata(), fs::symlink_metadata(path)) {
            (Ok(held), Ok(there)) => held.dev() == there.dev() && held.ino() == there.ino(),
            _ => false,
        }
    }

    fn take(path: &Path, nonblocking: bool) -> Result<Option<FileLock>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(|e| WsError::io_at("open lock", path, e))?;
        Self::flock(file, path, nonblocking)
    }

    fn flock(file: File, path: &Path, nonblocking: bool) -> Result<Option<FileLock>> {
        let mut op = libc::LOCK_EX;
        if nonblocking {
            op |= libc::LOCK_NB;
        }
        loop {
            // SAFETY: flock on a descriptor we own; no memory is involved.
            let rc = unsafe { libc::flock(file.as_raw_fd(), op) };
            if rc == 0 {
                return Ok(Some(FileLock { _file: file }));
            }
            let err = std::io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EWOULDBLOCK) => return Ok(None),
                _ => return Err(WsError::io_at("lock", path, err)),
            }
        }
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // Unlock explicitly: a child forked by another thread may still hold
        // a copy of the descriptor (until its exec closes it), and closing
        // ours alone would leave the lock held by that copy.
        // SAFETY: flock on a descriptor we own.
        unsafe {
            libc::flock(self._file.as_raw_fd(), libc::LOCK_UN);
        }
    }
}

/// Lowercase hex of `n` random bytes.
pub fn random_hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    rand::rng().fill_bytes(&mut buf);
    hex(&buf)
}

/// Lowercase hex of bytes (the store's encoding, shared).
pub use stow_store::hex;

/// Now, as RFC 3339 UTC with nanoseconds.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_nanos(SystemTime::now()).to_string()
}

/// Seconds since the epoch of an RFC 3339 timestamp.
pub fn parse_time(s: &str) -> Option<i64> {
    let t = humantime::parse_rfc3339_weak(s).ok()?;
    Some(t.duration_since(UNIX_EPOCH).ok()?.as_secs() as i64)
}

/// RFC 3339 UTC with whole seconds of an epoch-seconds value.
pub fn format_secs(secs: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_secs(secs.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Seconds since the epoch, now.
pub fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Makes `p` absolute against the current directory, lexically cleaned
/// (no `.` or `..` components), without resolving symlinks.
pub fn absolute(p: &Path) -> Result<PathBuf> {
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| WsError::io("current directory", e))?
            .join(p)
    };
    Ok(clean(&joined))
}

/// Lexically cleans an absolute path.
pub fn clean(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// SHA-256 of a regular file, never through a link (`None`: not there or
/// not a regular file any more).
pub(crate) fn hash_file(path: &Path) -> Result<Option<String>> {
    let mut f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOENT | libc::ELOOP | libc::ENOTDIR)
            ) =>
        {
            return Ok(None)
        }
        Err(e) => return Err(WsError::io_at("read", path, e)),
    };
    hash_open_file(&mut f, path)
}

/// SHA-256 of the regular file open as `f` (`path` for messages); `None`
/// when it is not a regular file.
pub(crate) fn hash_open_file(f: &mut std::fs::File, path: &Path) -> Result<Option<String>> {
    if !f
        .metadata()
        .map_err(|e| WsError::io_at("stat", path, e))?
        .file_type()
        .is_file()
    {
        return Ok(None);
    }
    let mut h = <sha2::Sha256 as sha2::Digest>::new();
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let n = match std::io::Read::read(f, &mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(WsError::io_at("read", path, e)),
        };
        if n == 0 {
            break;
        }
        sha2::Digest::update(&mut h, buf.get(..n).unwrap_or_default());
    }
    Ok(Some(hex(&sha2::Digest::finalize(h))))
}
/// Identifies one written version of a file (a stat cache, an ignore
/// file): a rename installs a new inode, so a rewrite by anyone (or a
/// removal) changes the stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileStamp {
    ino: u64,
    size: u64,
    mtime_ns: i64,
}

impl FileStamp {
    /// The stamp of the file at `path` now (`None`: no such file).
    pub(crate) fn of(path: &Path) -> Option<FileStamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::symlink_metadata(path).ok()?;
        Some(FileStamp {
            ino: m.ino(),
            size: m.len(),
            mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
        })
    }
}

/// Flushes the whole file system holding `dir` (one flush instead of one
/// fsync per file; what `cp -a && sync` pays too).
pub fn syncfs(dir: &Path) -> Result<()> {
    let f = File::open(dir).map_err(|e| WsError::io_at("open", dir, e))?;
    // SAFETY: syncfs on a descriptor we own.
    if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
        return Err(WsError::io_at(
            "syncfs",
            dir,
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}
