//! The per-workspace stat cache: for each file of the last capture, the
//! stat fields it was captured with and its SHA-256, so an unchanged file
//! is not read again.
//!
//! A compact binary file rather than JSON: an incremental capture of a
//! large tree spends most of its CPU on scanning, and parsing and writing
//! a JSON map of every file was a large share of the rest.
//!
//! ```text
//! magic (16 bytes) | SHA-256 of the body (32) | body
//! body: scan_start_ns i64 | count u64 | count × entry
//!       | node_count u64 | node_count × sha256 (32)
//! entry: path_len u32 | path | size u64 | mode u32 | mtime_ns i64 |
//!        ctime_ns i64 | ino u64 | sha256 (32 raw bytes)
//! ```
//!
//! The nodes are the tree nodes (see `checkpoint::tree`) the last capture
//! named: they are in the blob store, so the next capture need not look.
//! A cache of the first version (magic ending `\x01`) has no node list.
//!
//! Integers are little-endian; entries are in path order. The file is
//! written without fsync (temp + rename): after a crash it may be old, new,
//! torn or empty. The body digest turns a torn or foreign file into "no
//! cache", which only costs re-hashing.

use std::fs;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::fsutil::{random_hex, FileStamp};
use crate::scan::Scanned;

const MAGIC: &[u8; 16] = b"stow-statcache\x00\x02";
/// The first version, without the node list: still read.
const MAGIC_V1: &[u8; 16] = b"stow-statcache\x00\x01";

/// One cached file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CacheEntry {
    /// Shared with the scan the entry was made from: a capture of a large
    /// tree copies 100,000 entries, not their names.
    pub path: std::sync::Arc<str>,
    pub size: u64,
    pub mode: u32,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
    pub sha256: [u8; 32],
}

/// A decoded stat cache.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct StatCache {
    /// When the scan that produced the entries started; an entry whose mtime
    /// is not older than this is "racily clean" (git's rule) and re-hashed.
    pub scan_start_ns: i64,
    /// Sorted by path (byte order), unique.
    pub entries: Vec<CacheEntry>,
    /// Tree nodes known to be in the blob store.
    pub nodes: Vec<[u8; 32]>,
}

impl StatCache {
    /// Reads the cache at `path`; missing, torn or foreign files give an
    /// empty cache.
    pub fn load(path: &Path) -> StatCache {
        fs::read(path)
            .ok()
            .and_then(|b| Self::decode(&b))
            .unwrap_or_default()
    }

    /// Writes bytes from [`StatCache::encode`] to `path` (temp file in the
    /// same directory, then rename) and returns the written file's stamp.
    /// Failures are ignored: the cache is only an optimisation.
    pub fn write_encoded(path: &Path, bytes: &[u8]) -> Option<FileStamp> {
        let dir = path.parent()?;
        crate::fsutil::create_private_dir(dir).ok()?;
        let tmp = dir.join(format!(".tmp-{}", random_hex(8)));
        let written = fs::write(&tmp, bytes).ok().and_then(|()| {
            let stamp = FileStamp::of(&tmp)?;
            fs::rename(&tmp, path).ok()?;
            Some(stamp)
        });
        if written.is_none() {
            let _ = fs::remove_file(&tmp);
        }
        written
    }

    /// The file bytes of this cache.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(16 + self.entries.len() * 128);
        body.extend_from_slice(&self.scan_start_ns.to_le_bytes());
        body.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        for e in &self.entries {
            body.extend_from_slice(&(e.path.len() as u32).to_le_bytes());
            body.extend_from_slice(e.path.as_bytes());
            body.extend_from_slice(&e.size.to_le_bytes());
            body.extend_from_slice(&e.mode.to_le_bytes());
            body.extend_from_slice(&e.mtime_ns.to_le_bytes());
            body.extend_from_slice(&e.ctime_ns.to_le_bytes());
            body.extend_from_slice(&e.ino.to_le_bytes());
            body.extend_from_slice(&e.sha256);
        }
        body.extend_from_slice(&(self.nodes.len() as u64).to_le_bytes());
        for n in &self.nodes {
            body.extend_from_slice(n);
        }
        let mut out = Vec::with_capacity(MAGIC.len() + 32 + body.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&Sha256::digest(&body));
        out.extend_from_slice(&body);
        out
    }

    /// Decodes file bytes; `None` unless the magic, digest and every entry
    /// check out and the entries are strictly sorted by path.
    pub fn decode(bytes: &[u8]) -> Option<StatCache> {
        let mut h = Header::parse(bytes)?;
        let mut entries: Vec<CacheEntry> = Vec::with_capacity(h.count);
        for _ in 0..h.count {
            let e = StoredEntry::read(&mut h.rest)?;
            if entries.last().is_some_and(|p| &*p.path >= e.path) {
                return None;
            }
            entries.push(CacheEntry {
                path: e.path.into(),
                size: e.size,
                mode: e.mode,
                mtime_ns: e.mtime_ns,
                ctime_ns: e.ctime_ns,
                ino: e.ino,
                sha256: e.sha256,
            });
        }
        let mut r = h.rest;
        let mut nodes = Vec::new();
        if h.with_nodes {
            let n = usize::try_from(u64::from_le_bytes(r.array()?)).ok()?;
            if n > r.0.len() / 32 {
                return None;
            }
            nodes.reserve(n);
            for _ in 0..n {
                nodes.push(r.array()?);
            }
        }
        if !r.0.is_empty() {
            return None;
        }
        Some(StatCache {
            scan_start_ns: h.scan_start_ns,
            entries,
            nodes,
        })
    }
}

/// A cache file's header, checked: the magic and the body's digest.
struct Header<'a> {
    with_nodes: bool,
    scan_start_ns: i64,
    /// Bounded by the body's length (each entry takes at least 68 bytes).
    count: usize,
    /// The body after the header: the entries, then the nodes.
    rest: Reader<'a>,
}

impl<'a> Header<'a> {
    fn parse(bytes: &'a [u8]) -> Option<Header<'a>> {
        let (rest, with_nodes) = match bytes.strip_prefix(MAGIC.as_slice()) {
            Some(rest) => (rest, true),
            None => (bytes.strip_prefix(MAGIC_V1.as_slice())?, false),
        };
        let (digest, body) = split(rest, 32)?;
        if Sha256::digest(body).as_slice() != digest {
            return None;
        }
        let mut r = Reader(body);
        let scan_start_ns = i64::from_le_bytes(r.array()?);
        let count = usize::try_from(u64::from_le_bytes(r.array()?)).ok()?;
        // Bound the allocation by the input, not by a count field.
        if count > body.len() / 68 {
            return None;
        }
        Some(Header {
            with_nodes,
            scan_start_ns,
            count,
            rest: r,
        })
    }
}

/// One entry as the file holds it, its path borrowed from the bytes.
struct StoredEntry<'a> {
    path: &'a str,
    size: u64,
    mode: u32,
    mtime_ns: i64,
    ctime_ns: i64,
    ino: u64,
    sha256: [u8; 32],
}

impl<'a> StoredEntry<'a> {
    fn read(r: &mut Reader<'a>) -> Option<StoredEntry<'a>> {
        let len = u32::from_le_bytes(r.array()?) as usize;
        Some(StoredEntry {
            path: std::str::from_utf8(r.take(len)?).ok()?,
            size: u64::from_le_bytes(r.array()?),
            mode: u32::from_le_bytes(r.array()?),
            mtime_ns: i64::from_le_bytes(r.array()?),
            ctime_ns: i64::from_le_bytes(r.array()?),
            ino: u64::from_le_bytes(r.array()?),
            sha256: r.array()?,
        })
    }

    /// Whether this entry vouches for file `f`: the same stat fields, and
    /// not racily clean (written no earlier than the cached scan began).
    fn vouches(&self, scan_start_ns: i64, f: &Scanned) -> bool {
        self.size == f.size
            && self.mode == f.mode
            && self.mtime_ns == f.mtime_ns
            && self.ctime_ns == f.ctime_ns
            && self.ino == f.ino
            && f.mtime_ns < scan_start_ns
    }
}

impl CacheEntry {
    fn stored(&self) -> StoredEntry<'_> {
        StoredEntry {
            path: &self.path,
            size: self.size,
            mode: self.mode,
            mtime_ns: self.mtime_ns,
            ctime_ns: self.ctime_ns,
            ino: self.ino,
            sha256: self.sha256,
        }
    }
}

/// A stat cache file read and checked but not decoded: a status needs
/// only the digests of the files it scanned, found in one pass over the
/// bytes, without building an entry (and a name) for each of the cache's
/// files as [`StatCache::decode`] does.
pub(crate) struct CacheFile {
    bytes: Vec<u8>,
    scan_start_ns: i64,
    count: usize,
    /// Where the entries start in `bytes` (past the checked header).
    entries_at: usize,
}

impl CacheFile {
    /// Reads the cache at `path`; `None` when it is missing, torn or
    /// foreign (its digest is checked here).
    pub(crate) fn read(path: &Path) -> Option<CacheFile> {
        let bytes = fs::read(path).ok()?;
        let h = Header::parse(&bytes)?;
        let (scan_start_ns, count) = (h.scan_start_ns, h.count);
        let entries_at = bytes.len() - h.rest.0.len();
        Some(CacheFile {
            bytes,
            scan_start_ns,
            count,
            entries_at,
        })
    }

    /// The cached digests of `files` (sorted by path), as
    /// [`cached_digests`] finds them in a decoded cache; an entry out of
    /// order or unreadable makes the whole cache vouch for nothing.
    pub(crate) fn cached_digests<'a>(
        &self,
        files: impl ExactSizeIterator<Item = &'a Scanned>,
    ) -> Vec<Option<[u8; 32]>> {
        let n = files.len();
        self.merged(files).unwrap_or_else(|| vec![None; n])
    }

    fn merged<'a>(
        &self,
        files: impl Iterator<Item = &'a Scanned>,
    ) -> Option<Vec<Option<[u8; 32]>>> {
        let mut r = Reader(self.bytes.get(self.entries_at..)?);
        let mut left = self.count;
        let mut next = || -> Option<Option<StoredEntry<'_>>> {
            if left == 0 {
                return Some(None);
            }
            left -= 1;
            StoredEntry::read(&mut r).map(Some)
        };
        let mut current = next()?;
        // One slot per file, sized once: a status of a large tree fills
        // 100,000 of them, and growing would copy them into fresh pages.
        let mut out = Vec::with_capacity(files.size_hint().0);
        for f in files {
            while let Some(e) = current.as_ref().filter(|e| e.path < &*f.path) {
                let last = e.path;
                current = next()?;
                if current.as_ref().is_some_and(|c| c.path <= last) {
                    return None;
                }
            }
            out.push(
                current
                    .as_ref()
                    .filter(|e| e.path == &*f.path && e.vouches(self.scan_start_ns, f))
                    .map(|e| e.sha256),
            );
        }
        Some(out)
    }
}

fn split(b: &[u8], n: usize) -> Option<(&[u8], &[u8])> {
    (b.len() >= n).then(|| b.split_at(n))
}

/// A cursor over the body.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, tail) = split(self.0, n)?;
        self.0 = tail;
        Some(head)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }
}

/// The 32 bytes of a 64-digit lowercase hex SHA-256.
pub(crate) fn unhex32(s: &str) -> Option<[u8; 32]> {
    fn digit(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    let b = s.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = digit(b[2 * i])? << 4 | digit(b[2 * i + 1])?;
    }
    Some(out)
}

/// Cached digests for a sorted scan: both lists are in path order, so one
/// merge pass matches them without building a map.
pub(crate) fn cached_digests<'a>(
    cache: &StatCache,
    files: impl IntoIterator<Item = &'a Scanned>,
) -> Vec<Option<[u8; 32]>> {
    let mut entries = cache.entries.iter().peekable();
    files
        .into_iter()
        .map(|f| {
            // A cache this process made shares the scan's names: equal
            // pointers spare comparing the strings.
            let c = match entries.next_if(|c| std::sync::Arc::ptr_eq(&c.path, &f.path)) {
                Some(c) => c,
                None => {
                    while entries.next_if(|c| c.path < f.path).is_some() {}
                    entries.next_if(|c| c.path == f.path)?
                }
            };
            vouches(cache, c, f).then_some(c.sha256)
        })
        .collect()
}

/// The cached digest of one file (a few files of a large scan: found by
/// binary search rather than a pass over the whole cache).
pub(crate) fn cached_digest(cache: &StatCache, f: &Scanned) -> Option<[u8; 32]> {
    let i = cache
        .entries
        .binary_search_by(|c| c.path.as_ref().cmp(f.path.as_ref()))
        .ok()?;
    let c = cache.entries.get(i)?;
    vouches(cache, c, f).then_some(c.sha256)
}

/// Whether cache entry `c` vouches for file `f` (see
/// [`StoredEntry::vouches`]).
fn vouches(cache: &StatCache, c: &CacheEntry, f: &Scanned) -> bool {
    c.stored().vouches(cache.scan_start_ns, f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StatCache {
        StatCache {
            scan_start_ns: 1_700_000_000_123_456_789,
            entries: vec![
                CacheEntry {
                    path: "a/b.txt".into(),
                    size: 5,
                    mode: 0o644,
                    mtime_ns: 1,
                    ctime_ns: 2,
                    ino: 3,
                    sha256: [7; 32],
                },
                CacheEntry {
                    path: "z".into(),
                    size: 0,
                    mode: 0o600,
                    mtime_ns: -1,
                    ctime_ns: i64::MAX,
                    ino: u64::MAX,
                    sha256: [0xab; 32],
                },
            ],
            nodes: vec![[1; 32], [2; 32]],
        }
    }

    #[test]
    fn round_trip() {
        let c = sample();
        assert_eq!(StatCache::decode(&c.encode()), Some(c));
        let empty = StatCache::default();
        assert_eq!(StatCache::decode(&empty.encode()), Some(empty));
    }

    #[test]
    fn a_first_version_cache_reads_without_nodes() {
        let mut c = sample();
        let bytes = c.encode();
        // The v1 body is the v2 body without the node list.
        let body = &bytes[48..bytes.len() - 8 - 64];
        let mut v1 = MAGIC_V1.to_vec();
        v1.extend_from_slice(&Sha256::digest(body));
        v1.extend_from_slice(body);
        c.nodes.clear();
        assert_eq!(StatCache::decode(&v1), Some(c));
    }

    #[test]
    fn torn_or_altered_files_are_no_cache() {
        let bytes = sample().encode();
        for cut in 0..bytes.len() {
            assert_eq!(StatCache::decode(&bytes[..cut]), None, "cut at {cut}");
        }
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(StatCache::decode(&flipped), None);
        assert_eq!(StatCache::decode(&vec![0u8; bytes.len()]), None);
        assert_eq!(
            StatCache::decode(b"{\"scan_start_ns\":0,\"entries\":{}}"),
            None
        );
    }

    fn scanned(path: &str, size: u64, mtime_ns: i64) -> Scanned {
        Scanned {
            path: path.into(),
            size,
            mode: 0o644,
            mtime_ns,
            ctime_ns: 2,
            ino: 3,
            nlink: 1,
        }
    }

    /// The one-pass digests of a cache file equal those of the decoded
    /// cache, for every file and for a subset; a damaged file vouches for
    /// nothing.
    #[test]
    fn a_cache_file_vouches_as_the_decoded_cache_does() {
        let entry = |path: &str, size: u64, mtime_ns: i64, sha: u8| CacheEntry {
            path: path.into(),
            size,
            mode: 0o644,
            mtime_ns,
            ctime_ns: 2,
            ino: 3,
            sha256: [sha; 32],
        };
        let cache = StatCache {
            scan_start_ns: 100,
            entries: vec![
                entry("a", 1, 10, 1),
                entry("b/c", 2, 10, 2),
                entry("b/d", 3, 10, 3),
                entry("e", 4, 100, 4), // racily clean: written as the scan began
                entry("g", 5, 10, 5),
            ],
            nodes: Vec::new(),
        };
        let files = vec![
            scanned("a", 1, 10),   // vouched
            scanned("b/a", 9, 10), // not in the cache
            scanned("b/c", 7, 10), // size changed
            scanned("b/d", 3, 10), // vouched
            scanned("e", 4, 100),  // racy
            scanned("f", 1, 10),   // not in the cache
            scanned("g", 5, 10),   // vouched
            scanned("h", 5, 10),   // past the last entry
        ];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.cache");
        std::fs::write(&path, cache.encode()).unwrap();
        let file = CacheFile::read(&path).unwrap();
        let want = cached_digests(&cache, &files);
        assert_eq!(
            want.iter().map(Option::is_some).collect::<Vec<_>>(),
            [true, false, false, true, false, false, true, false]
        );
        assert_eq!(file.cached_digests(files.iter()), want);
        let some = [0usize, 3, 6];
        assert_eq!(
            file.cached_digests(some.iter().map(|&i| &files[i])),
            some.iter()
                .map(|&i| cached_digest(&cache, &files[i]))
                .collect::<Vec<_>>()
        );
        // Damaged or missing: nothing is vouched for.
        let mut bytes = cache.encode();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        assert!(CacheFile::read(&path).is_none());
        assert!(CacheFile::read(&dir.path().join("none")).is_none());
    }

    #[test]
    fn hex_digests() {
        let h = "00ff10a0".repeat(8);
        let b = unhex32(&h).unwrap();
        assert_eq!(crate::fsutil::hex(&b), h);
        assert_eq!(unhex32(&h[..62]), None);
        assert_eq!(unhex32(&h.to_uppercase()), None);
    }
}
