//! Bodies: one received and verified before a commit, and an object's
//! bytes as a reader (inline, a blob's range, or a multipart object's
//! pieces).

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension};

use crate::blobs::{BlobHolds, BlobId, BlobReader, BlobStore, ReadPin, Staged};
use crate::checksum::Checksum;
use crate::encryption::{CustomerKey, KeyRecord, Opener};
use crate::error::{Result, StoreError};
use crate::model::*;
use crate::record::Extent;

/// A verified body not stored as an object (see [`Store::receive`]).
pub struct ReceivedBody {
    /// Bytes received.
    pub size: u64,
    /// The quoted MD5 ETag of the bytes.
    pub etag: String,
    /// The full-object checksum kept for the body, if one was asked for.
    pub checksum: Option<Checksum>,
    /// The properties of the request, normalized.
    pub props: ObjectProps,
    pub(super) staged: Staged,
    /// The record of the customer key the bytes were sealed with (SSE-C).
    pub(super) sealed: Option<KeyRecord>,
}

impl std::fmt::Debug for ReceivedBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceivedBody")
            .field("size", &self.size)
            .field("etag", &self.etag)
            .finish_non_exhaustive()
    }
}

impl ReceivedBody {
    /// Moves the bytes to `path` as a durable file with permission bits
    /// `mode`, atomically replacing what is there; the parent directory
    /// must exist. Large bodies are renamed, not copied.
    pub fn persist_as(self, path: &Path, mode: u32) -> Result<()> {
        if self.sealed.is_some() {
            // A file tree keeps plaintext: a sealed body never goes there.
            return Err(StoreError::NotImplemented {
                reason: "an object encrypted with a customer key cannot be kept as a plain file"
                    .into(),
            });
        }
        self.staged.persist_as(path, mode).map_err(StoreError::from)
    }
}

/// An object opened for reading: its metadata and a reader over its bytes.
#[derive(Debug)]
pub struct ObjectRead {
    pub meta: ObjectMeta,
    /// `(offset, length)` when a range or part was requested.
    pub range: Option<(u64, u64)>,
    pub body: ObjectBody,
}

enum Piece {
    Inline(Vec<u8>),
    /// A file blob not yet opened, with the offset to start at and bytes to take.
    Blob(BlobId, u64, u64),
    Open(io::Take<BlobReader>),
    File(io::Take<File>),
    /// A sealed blob (SSE-C) not yet opened: id, plaintext size, offset
    /// and bytes to take.
    SealedBlob(BlobId, u64, u64, u64),
    /// A sealed body being decrypted.
    Sealed(Box<Opener<BlobReader>>),
}

/// The MD5 a single-part ETag (`"<32 hex>"`) stands for; `None` for a
/// multipart ETag (`…-N`).
pub(super) fn plain_etag_md5(etag: &str) -> Option<[u8; 16]> {
    let hex = etag.strip_prefix('"')?.strip_suffix('"')?;
    if hex.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Streams an object's bytes (or a range of them) across its blobs.
pub struct ObjectBody {
    blobs: Option<Arc<BlobStore>>,
    /// The customer key of a sealed body (SSE-C).
    key: Option<CustomerKey>,
    pieces: std::collections::VecDeque<Piece>,
    len: u64,
    /// A whole small object is checked against its ETag as it is read: the
    /// end of the body is an error, not wrong bytes, when they differ.
    verify: Option<(md5::Md5, [u8; 16])>,
    /// Keeps the blobs of pieces not yet opened from being deleted.
    holds: Option<BlobHolds>,
}

/// Whole single-part objects up to this size are MD5-checked on every read
/// (about 0.4 ms of CPU at the limit; larger bodies are left to
/// `stow-s3 check`, which reads everything).
pub const VERIFIED_READ_LIMIT: u64 = 256 * 1024;

impl std::fmt::Debug for ObjectBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectBody")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl ObjectBody {
    /// A reader of `len` bytes from `offset` of the body made of
    /// `extents`; `key` opens a sealed body (SSE-C), whose key the caller
    /// has checked against the object's record. `pin`, taken before the
    /// snapshot `conn` reads began, is held while pieces wait to be opened.
    pub(crate) fn plan(
        conn: &Connection,
        blobs: &Arc<BlobStore>,
        extents: &[Extent],
        (offset, len): (u64, u64),
        key: Option<&CustomerKey>,
        pin: ReadPin,
    ) -> Result<Self> {
        let mut pieces = std::collections::VecDeque::new();
        let mut data = conn.prepare_cached("SELECT data FROM blobs WHERE id = ?1")?;
        let mut start = 0u64;
        let end = offset + len;
        for e in extents {
            let (lo, hi) = (start, start + e.size);
            start = hi;
            if hi <= offset || lo >= end || e.size == 0 {
                continue;
            }
            let from = offset.max(lo) - lo;
            let take = end.min(hi) - lo - from;
            let inline: Option<Vec<u8>> = data
                .query_row([e.blob.0], |r| r.get(0))
                .optional()?
                .ok_or_else(|| StoreError::Corrupt(format!("blob {} is missing", e.blob.0)))?;
            pieces.push_back(match (inline, key) {
                (Some(bytes), None) => {
                    Piece::Inline(bytes[from as usize..(from + take) as usize].to_vec())
                }
                (None, None) => Piece::Blob(e.blob, from, take),
                (Some(bytes), Some(k)) => {
                    // Decrypted now: an inline body is small, and a body
                    // in memory is read without waiting on the disk.
                    let reader = BlobReader::Memory(io::Cursor::new(Arc::from(bytes)));
                    let mut opened = Opener::new(reader, k.clone(), e.size, from, take);
                    let mut plain = Vec::with_capacity(take as usize);
                    opened
                        .read_to_end(&mut plain)
                        .map_err(|err| StoreError::Corrupt(format!("blob {}: {err}", e.blob.0)))?;
                    Piece::Inline(plain)
                }
                (None, Some(_)) => Piece::SealedBlob(e.blob, e.size, from, take),
            });
        }
        // A simple object's one blob is opened inside the read snapshot, so
        // a concurrent overwrite cannot take it away mid-read.
        if pieces.len() == 1 {
            match (pieces.front(), key) {
                (Some(Piece::Blob(id, from, take)), _) => {
                    let opened = open_at(blobs, *id, *from, *take)?;
                    pieces[0] = Piece::Open(opened);
                }
                (Some(Piece::SealedBlob(id, plain, from, take)), Some(k)) => {
                    let opened = Opener::new(blobs.open(*id)?, k.clone(), *plain, *from, *take);
                    pieces[0] = Piece::Sealed(Box::new(opened));
                }
                _ => {}
            }
        }
        let unopened: Vec<BlobId> = pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Blob(id, ..) | Piece::SealedBlob(id, ..) => Some(*id),
                _ => None,
            })
            .collect();
        Ok(ObjectBody {
            blobs: Some(Arc::clone(blobs)),
            key: key.cloned(),
            pieces,
            len,
            verify: None,
            holds: (!unopened.is_empty()).then(|| pin.hold(unopened)),
        })
    }

    /// Checks the bytes read against `md5` (the whole body's digest).
    pub(crate) fn verified(mut self, md5: [u8; 16]) -> Self {
        use md5::Digest as _;
        self.verify = Some((md5::Md5::new(), md5));
        self
    }

    /// A body of `len` bytes of `file` from `offset`, for backends whose
    /// objects are plain files.
    pub fn from_file(mut file: File, offset: u64, len: u64) -> io::Result<Self> {
        file.seek(SeekFrom::Start(offset))?;
        Ok(ObjectBody {
            blobs: None,
            key: None,
            pieces: std::collections::VecDeque::from([Piece::File(file.take(len))]),
            len,
            verify: None,
            holds: None,
        })
    }

    /// Number of bytes this body yields.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether this body yields no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the bytes are already in memory (bodies stored inline), so
    /// reading them never waits on the disk.
    pub fn in_memory(&self) -> bool {
        self.pieces.iter().all(|p| matches!(p, Piece::Inline(_)))
    }

    /// Reads the whole body into memory (for small objects and tests).
    pub fn into_vec(mut self) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(self.len as usize);
        self.read_to_end(&mut out)?;
        Ok(out)
    }
}

fn open_at(blobs: &BlobStore, id: BlobId, from: u64, take: u64) -> Result<io::Take<BlobReader>> {
    let mut r = blobs.open(id)?;
    if from > 0 {
        r.seek(SeekFrom::Start(from))?;
    }
    Ok(r.take(take))
}

impl Read for ObjectBody {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.read_pieces(buf)?;
        if let Some((hasher, want)) = &mut self.verify {
            use md5::Digest as _;
            if n > 0 {
                hasher.update(&buf[..n]);
            } else if !buf.is_empty() {
                let got: [u8; 16] = std::mem::take(hasher).finalize().into();
                let want = *want;
                self.verify = None;
                if got != want {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "the stored bytes do not match the object's ETag (damaged on disk)",
                    ));
                }
            }
        }
        Ok(n)
    }
}

impl ObjectBody {
    fn read_pieces(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let Some(front) = self.pieces.front_mut() else {
                return Ok(0);
            };
            let n = match front {
                Piece::Inline(bytes) => {
                    let n = buf.len().min(bytes.len());
                    buf[..n].copy_from_slice(&bytes[..n]);
                    bytes.drain(..n);
                    n
                }
                Piece::Blob(id, from, take) => {
                    let Some(blobs) = &self.blobs else {
                        return Err(io::Error::other("blob body without a blob store"));
                    };
                    let id = *id;
                    let opened = open_at(blobs, id, *from, *take)
                        .map_err(|e| io::Error::other(e.to_string()))?;
                    *front = Piece::Open(opened);
                    if let Some(holds) = &mut self.holds {
                        holds.release(id);
                    }
                    continue;
                }
                Piece::SealedBlob(id, plain, from, take) => {
                    let (Some(blobs), Some(key)) = (&self.blobs, &self.key) else {
                        return Err(io::Error::other("sealed body without its key"));
                    };
                    let reader = blobs
                        .open(*id)
                        .map_err(|e| io::Error::other(e.to_string()))?;
                    let (id, opened) =
                        (*id, Opener::new(reader, key.clone(), *plain, *from, *take));
                    *front = Piece::Sealed(Box::new(opened));
                    if let Some(holds) = &mut self.holds {
                        holds.release(id);
                    }
                    continue;
                }
                Piece::Open(r) => r.read(buf)?,
                Piece::File(r) => r.read(buf)?,
                Piece::Sealed(r) => r.read(buf)?,
            };
            if n == 0 && !buf.is_empty() {
                let left = match front {
                    Piece::Open(r) => r.limit(),
                    Piece::File(r) => r.limit(),
                    Piece::Sealed(r) => r.left(),
                    _ => 0,
                };
                if left > 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "body is shorter than its record",
                    ));
                }
                self.pieces.pop_front();
                continue;
            }
            return Ok(n);
        }
    }
}
