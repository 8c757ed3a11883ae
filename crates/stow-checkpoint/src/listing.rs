//! Reading one directory for a scan: its entries listed with `getdents64`
//! into a buffer on the stack (names borrowed, types from the listing), and
//! each entry stat'ed with `statx` relative to the open directory.
//!
//! A scan of a large tree does this for every entry, so what it costs per
//! entry is kept to the entry's slash path: `std::fs::read_dir` allocates
//! each entry's name twice (the entry's own copy and `file_name`'s).

use std::ffi::OsStr;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RawDir, Statx, StatxFlags};

/// What a listed entry is (the listing's type; one the listing cannot
/// tell is stat'ed once to find out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryKind {
    File,
    Dir,
    Link,
    Socket,
    Fifo,
    Device,
}

impl EntryKind {
    fn of(t: FileType) -> Option<EntryKind> {
        Some(match t {
            FileType::RegularFile => EntryKind::File,
            FileType::Directory => EntryKind::Dir,
            FileType::Symlink => EntryKind::Link,
            FileType::Socket => EntryKind::Socket,
            FileType::Fifo => EntryKind::Fifo,
            FileType::CharacterDevice | FileType::BlockDevice => EntryKind::Device,
            FileType::Unknown => return None,
        })
    }
}

/// One entry of a listed directory.
pub(crate) struct Listed {
    /// Its slash path from the root; a name that is not UTF-8 appears
    /// escaped (see [`escape_name`]).
    pub(crate) child: String,
    pub(crate) kind: EntryKind,
    /// Where the name starts in `child`.
    leaf_at: usize,
    /// The name's bytes when they are not UTF-8 (then `child` differs).
    raw: Option<Box<[u8]>>,
}

impl Listed {
    /// Whether the name is UTF-8 (a checkpoint can hold only such names).
    pub(crate) fn is_utf8(&self) -> bool {
        self.raw.is_none()
    }

    /// The entry's name as the directory holds it.
    fn name(&self) -> &[u8] {
        match &self.raw {
            Some(raw) => raw,
            None => self
                .child
                .as_bytes()
                .get(self.leaf_at..)
                .unwrap_or_default(),
        }
    }
}

/// A directory open for a scan.
pub(crate) struct OpenDir<'a> {
    fd: OwnedFd,
    path: &'a Path,
}

/// The stat fields a scan keeps.
#[derive(Debug)]
pub(crate) struct EntryStat {
    pub(crate) kind: Option<EntryKind>,
    pub(crate) size: u64,
    pub(crate) mode: u32,
    pub(crate) mtime_ns: i64,
    pub(crate) ctime_ns: i64,
    pub(crate) ino: u64,
    pub(crate) nlink: u64,
}

impl EntryStat {
    fn of(s: &Statx) -> EntryStat {
        let ns = |t: rustix::fs::StatxTimestamp| t.tv_sec * 1_000_000_000 + i64::from(t.tv_nsec);
        EntryStat {
            kind: EntryKind::of(FileType::from_raw_mode(u32::from(s.stx_mode))),
            size: s.stx_size,
            mode: u32::from(s.stx_mode) & 0o777,
            mtime_ns: ns(s.stx_mtime),
            ctime_ns: ns(s.stx_ctime),
            ino: s.stx_ino,
            nlink: u64::from(s.stx_nlink),
        }
    }
}

/// Lists directory `dir` (slash path `rel` from the root): every entry but
/// `.`, `..` and those `keep` refuses (given the name), with its slash path
/// and type.
pub(crate) fn list<'a>(
    dir: &'a Path,
    rel: &str,
    keep: impl Fn(&str) -> bool,
) -> io::Result<(OpenDir<'a>, Vec<Listed>)> {
    let fd = rustix::fs::openat(
        rustix::fs::CWD,
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let open = OpenDir { fd, path: dir };
    let mut buf = [MaybeUninit::<u8>::uninit(); 16 * 1024];
    let mut raw = RawDir::new(&open.fd, &mut buf);
    let mut listed = Vec::new();
    while let Some(entry) = raw.next() {
        let entry = entry?;
        let bytes = entry.file_name().to_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        let (name, raw_name) = match std::str::from_utf8(bytes) {
            Ok(name) => (std::borrow::Cow::Borrowed(name), None),
            Err(_) => (
                std::borrow::Cow::Owned(escape_name(bytes)),
                Some(bytes.into()),
            ),
        };
        if !keep(&name) {
            continue;
        }
        let leaf_at = if rel.is_empty() { 0 } else { rel.len() + 1 };
        let mut child = String::with_capacity(leaf_at + name.len());
        if !rel.is_empty() {
            child.push_str(rel);
            child.push('/');
        }
        child.push_str(&name);
        let known = EntryKind::of(entry.file_type());
        let mut item = Listed {
            child,
            kind: known.unwrap_or(EntryKind::File),
            leaf_at,
            raw: raw_name,
        };
        if known.is_none() {
            // The file system does not say in its listing: ask once.
            match open.stat(&item)?.kind {
                Some(kind) => item.kind = kind,
                None => continue,
            }
        }
        listed.push(item);
    }
    Ok((open, listed))
}

/// A name that is not UTF-8, as text: its valid runs as they are (a `\`
/// as `\x5C`), each other byte as `\xHH`. Distinct names stay distinct,
/// and none can be a captured path (those never hold a `\`).
pub(crate) fn escape_name(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' {
                out.push_str("\\x5C");
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02X}"));
        }
    }
    out
}

impl OpenDir<'_> {
    /// The entry's stat, not following a link.
    pub(crate) fn stat(&self, e: &Listed) -> io::Result<EntryStat> {
        let s = rustix::fs::statx(
            &self.fd,
            e.name(),
            AtFlags::SYMLINK_NOFOLLOW,
            StatxFlags::BASIC_STATS,
        )?;
        Ok(EntryStat::of(&s))
    }

    /// A link entry's target.
    pub(crate) fn read_link(&self, e: &Listed) -> io::Result<String> {
        let target = rustix::fs::readlinkat(&self.fd, e.name(), Vec::new())?;
        Ok(String::from_utf8_lossy(target.as_bytes()).into_owned())
    }

    /// The entry's absolute path.
    pub(crate) fn path_of(&self, e: &Listed) -> PathBuf {
        self.path.join(OsStr::from_bytes(e.name()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind comes from the listing; a name that is not UTF-8 is
    /// stat'ed and read by its own bytes (its slash path is lossy); `keep`
    /// leaves names out.
    #[test]
    fn lists_kinds_and_stats_by_the_real_name() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::write(d.join("f.txt"), b"12345").unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        std::os::unix::fs::symlink("f.txt", d.join("ln")).unwrap();
        std::fs::write(d.join("skip.me"), b"").unwrap();
        let odd = OsStr::from_bytes(b"bad\xffname");
        std::fs::write(d.join(odd), b"xy").unwrap();
        let c = std::ffi::CString::new(d.join("pipe").as_os_str().as_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);

        let (open, mut listed) = list(d, "top", |n| n != "skip.me").unwrap();
        listed.sort_by(|a, b| a.child.cmp(&b.child));
        let kinds: Vec<(&str, EntryKind)> =
            listed.iter().map(|l| (l.child.as_str(), l.kind)).collect();
        assert_eq!(
            kinds,
            [
                ("top/bad\\xFFname", EntryKind::File),
                ("top/f.txt", EntryKind::File),
                ("top/ln", EntryKind::Link),
                ("top/pipe", EntryKind::Fifo),
                ("top/sub", EntryKind::Dir),
            ]
        );
        assert!(!listed[0].is_utf8() && listed[1].is_utf8());
        let st = open.stat(&listed[0]).unwrap();
        assert_eq!((st.kind, st.size), (Some(EntryKind::File), 2));
        assert_eq!(open.path_of(&listed[0]), d.join(odd));
        let st = open.stat(&listed[1]).unwrap();
        assert_eq!((st.size, st.nlink), (5, 1));
        assert_eq!(open.read_link(&listed[2]).unwrap(), "f.txt");
        assert_eq!(open.stat(&listed[2]).unwrap().kind, Some(EntryKind::Link));
        assert_eq!(
            escape_name(b"a\\b\xfe\xffc\xc3\xa9"),
            "a\\x5Cb\\xFE\\xFFc\u{e9}"
        );
        // Gone since the listing: the stat says so.
        std::fs::remove_file(d.join("f.txt")).unwrap();
        assert_eq!(
            open.stat(&listed[1]).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }
}
