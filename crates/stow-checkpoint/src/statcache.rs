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
        let count = u64::from_le_bytes(r.array()?);
        // Each entry takes at least 68 bytes: bound the allocation by the
        // input, not by a count field.
        let count = usize::try_from(count).ok()?;
        if count > body.len() / 68 {
            return None;
        }
        let mut entries: Vec<CacheEntry> = Vec::with_capacity(count);
        for _ in 0..count {
            let len = u32::from_le_bytes(r.array()?) as usize;
            let path = std::str::from_utf8(r.take(len)?).ok()?;
            if entries.last().is_some_and(|p| &*p.path >= path) {
                return None;
            }
            entries.push(CacheEntry {
                path: path.into(),
                size: u64::from_le_bytes(r.array()?),
                mode: u32::from_le_bytes(r.array()?),
                mtime_ns: i64::from_le_bytes(r.array()?),
                ctime_ns: i64::from_le_bytes(r.array()?),
                ino: u64::from_le_bytes(r.array()?),
                sha256: r.array()?,
            });
        }
        let mut nodes = Vec::new();
        if with_nodes {
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
            scan_start_ns,
            entries,
            nodes,
        })
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

/// Whether cache entry `c` vouches for file `f`: the same stat fields,
/// and not racily clean (written no earlier than the cached scan began).
fn vouches(cache: &StatCache, c: &CacheEntry, f: &Scanned) -> bool {
    c.size == f.size
        && c.mode == f.mode
        && c.mtime_ns == f.mtime_ns
        && c.ctime_ns == f.ctime_ns
        && c.ino == f.ino
        && f.mtime_ns < cache.scan_start_ns
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

    #[test]
    fn hex_digests() {
        let h = "00ff10a0".repeat(8);
        let b = unhex32(&h).unwrap();
        assert_eq!(crate::fsutil::hex(&b), h);
        assert_eq!(unhex32(&h[..62]), None);
        assert_eq!(unhex32(&h.to_uppercase()), None);
    }
}
