//! Server-side encryption with customer-provided keys (S3's SSE-C).
//!
//! The store never keeps a customer's key. An object written with one
//! keeps a [`KeyRecord`] in its properties: a random salt and
//! SHA-256(label ‖ salt ‖ key), enough to tell the same key from another
//! and useless for finding it. Its bytes are kept as *sealed* blobs:
//!
//! ```text
//! header:  "STOWSC1\0" (8 bytes) ‖ blob salt (16 random bytes)
//! records: for each 64 KiB chunk i of the plaintext (the last may be
//!          shorter; an empty body has one empty chunk):
//!          AES-256-GCM(blob key, nonce = i as u64 BE ‖ last as u32 BE,
//!                      aad = header) = ciphertext ‖ 16-byte tag
//! blob key = SHA-256("stow-s3 sse-c blob v1" ‖ blob salt ‖ customer key)
//! ```
//!
//! Each blob has its own key (its own salt), so a nonce never repeats
//! under one key. The nonce names the chunk's place and whether it is the
//! last, so reordered, dropped or truncated records fail authentication.
//! A ranged read decrypts only the chunks it needs. A sealed blob is
//! written through the same stage, fsync and rename as any body; only
//! ciphertext reaches the disk or the database.

use std::io::{self, Read, Seek, SeekFrom};

use aes_gcm::aead::{AeadInOut, KeyInit};
use aes_gcm::Aes256Gcm;
use base64::Engine as _;
use md5::Digest as _;
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::checksum::{BodyDigests, BodyHasher};
use crate::error::{Result, StoreError};

/// Plaintext bytes per sealed record.
pub(crate) const CHUNK: usize = 64 * 1024;
/// Bytes of a sealed blob's header.
pub(crate) const HEADER: usize = 24;
const MAGIC: &[u8; 8] = b"STOWSC1\0";
const TAG: usize = 16;
const BLOB_LABEL: &[u8] = b"stow-s3 sse-c blob v1";
const CHECK_LABEL: &[u8] = b"stow-s3 sse-c check v1";
const ETAG_LABEL: &[u8] = b"stow-s3 sse-c etag v1";

/// A customer-provided AES-256 key (S3's
/// `x-amz-server-side-encryption-customer-*` headers), checked against its
/// MD5. Held only for the request; never stored or printed.
#[derive(Clone)]
pub struct CustomerKey {
    key: [u8; 32],
    md5: String,
}

impl std::fmt::Debug for CustomerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CustomerKey")
            .field("md5", &self.md5)
            .finish_non_exhaustive()
    }
}

impl Drop for CustomerKey {
    fn drop(&mut self) {
        // Best effort: the key does not outlive the request in this copy.
        self.key.iter_mut().for_each(|b| *b = 0);
    }
}

/// The one algorithm S3 offers for customer keys.
pub const CUSTOMER_KEY_ALGORITHM: &str = "AES256";

impl CustomerKey {
    /// The key of a request's three headers: `None` when none is given;
    /// `invalid_encryption_key` when one is missing, the algorithm is not
    /// `AES256`, the key is not 32 bytes of base64, or the MD5 is not the
    /// key's.
    pub fn from_headers(
        algorithm: Option<&str>,
        key: Option<&str>,
        key_md5: Option<&str>,
    ) -> Result<Option<CustomerKey>> {
        let bad = |reason: &str| StoreError::InvalidEncryptionKey {
            reason: reason.to_string(),
        };
        if algorithm.is_none() && key.is_none() && key_md5.is_none() {
            return Ok(None);
        }
        match algorithm {
            None => {
                return Err(bad(
                    "Requests specifying Server Side Encryption with Customer provided keys must provide a valid encryption algorithm.",
                ))
            }
            Some(a) if a != CUSTOMER_KEY_ALGORITHM => {
                return Err(bad("The encryption algorithm must be AES256."))
            }
            Some(_) => {}
        }
        let key = key.ok_or_else(|| {
            bad("Requests specifying Server Side Encryption with Customer provided keys must provide an appropriate secret key.")
        })?;
        let raw = base64::engine::general_purpose::STANDARD
            .decode(key.trim())
            .ok()
            .and_then(|k| <[u8; 32]>::try_from(k.as_slice()).ok())
            .ok_or_else(|| bad("The secret key was invalid for the specified algorithm."))?;
        let md5 = key_md5.ok_or_else(|| {
            bad("Requests specifying Server Side Encryption with Customer provided keys must provide the client calculated MD5 of the secret key.")
        })?;
        let want = base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(raw));
        if md5.trim() != want {
            return Err(bad(
                "The calculated MD5 hash of the key did not match the hash that was provided.",
            ));
        }
        Ok(Some(CustomerKey {
            key: raw,
            md5: want,
        }))
    }

    /// A key from its raw bytes (tests and tools).
    pub fn from_bytes(key: [u8; 32]) -> CustomerKey {
        let md5 = base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(key));
        CustomerKey { key, md5 }
    }

    /// The base64 MD5 of the key, as S3 echoes it.
    pub fn key_md5(&self) -> &str {
        &self.md5
    }

    /// A fresh record of this key for a new object or upload.
    pub(crate) fn record(&self) -> KeyRecord {
        let salt: [u8; 16] = rand::random();
        KeyRecord {
            algorithm: CUSTOMER_KEY_ALGORITHM.to_string(),
            salt: crate::hex(&salt),
            check: crate::hex(&self.check(&salt)),
        }
    }

    /// The digest a sealed body's ETag stands for: derived from the key
    /// and the plaintext's MD5, so the same bytes under the same key keep
    /// one ETag (a part sent again matches its first ETag), while without
    /// the key it tells nothing about the plaintext.
    pub(crate) fn etag_digest(&self, plain_md5: &[u8; 16]) -> [u8; 16] {
        let full = self.derive(ETAG_LABEL, plain_md5);
        let mut out = [0u8; 16];
        out.copy_from_slice(&full[..16]);
        out
    }

    fn check(&self, salt: &[u8]) -> [u8; 32] {
        self.derive(CHECK_LABEL, salt)
    }

    fn derive(&self, label: &[u8], salt: &[u8]) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(label);
        h.update(salt);
        h.update(self.key);
        h.finalize().into()
    }
}

/// What an object (or an upload) keeps of its customer key: a salted
/// digest, never the key or its MD5.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct KeyRecord {
    /// Always `AES256`.
    pub algorithm: String,
    /// 16 random bytes, hex.
    pub salt: String,
    /// SHA-256(label ‖ salt ‖ key), hex.
    pub check: String,
}

impl KeyRecord {
    /// Whether `key` is the key this record was made from.
    pub fn matches(&self, key: &CustomerKey) -> bool {
        let Some(salt) = crate::unhex(&self.salt) else {
            return false;
        };
        let got = crate::hex(&key.check(&salt));
        // Constant time over the digest's hex: no early exit.
        got.len() == self.check.len()
            && got
                .bytes()
                .zip(self.check.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

/// Checks the key a request gave against what the object keeps: a sealed
/// object needs its own key, a plain one takes none.
pub(crate) fn check_key(record: Option<&KeyRecord>, given: Option<&CustomerKey>) -> Result<()> {
    match (record, given) {
        (None, None) => Ok(()),
        (Some(_), None) => Err(StoreError::EncryptionKeyMissing),
        (None, Some(_)) => Err(StoreError::EncryptionNotApplicable),
        (Some(r), Some(k)) if r.matches(k) => Ok(()),
        (Some(_), Some(_)) => Err(StoreError::WrongEncryptionKey),
    }
}

/// Bytes a sealed blob of `plain` plaintext bytes takes.
pub(crate) fn sealed_len(plain: u64) -> u64 {
    HEADER as u64 + chunks(plain) * TAG as u64 + plain
}

fn chunks(plain: u64) -> u64 {
    plain.div_ceil(CHUNK as u64).max(1)
}

fn nonce(index: u64, last: bool) -> aes_gcm::Nonce<aes_gcm::aead::consts::U12> {
    let mut n = [0u8; 12];
    n[..8].copy_from_slice(&index.to_be_bytes());
    n[8..].copy_from_slice(&u32::from(last).to_be_bytes());
    n.into()
}

fn cipher(key: &CustomerKey, header: &[u8; HEADER]) -> Aes256Gcm {
    let blob_key = key.derive(BLOB_LABEL, &header[MAGIC.len()..]);
    Aes256Gcm::new(&blob_key.into())
}

/// A reader that seals the plaintext it reads from `inner` into records,
/// hashing the plaintext on the way (the object's digests are of what the
/// client sent).
pub(crate) struct Sealer<'a> {
    inner: &'a mut dyn Read,
    cipher: Aes256Gcm,
    header: [u8; HEADER],
    hasher: BodyHasher,
    /// Sealed bytes not yet handed out.
    out: Vec<u8>,
    out_pos: usize,
    /// The next chunk's plaintext, read ahead by one byte-run so the last
    /// chunk is known as the last.
    next: Vec<u8>,
    index: u64,
    done: bool,
}

impl<'a> Sealer<'a> {
    /// Seals `inner` with a fresh blob salt under `key`.
    pub fn new(inner: &'a mut dyn Read, key: &CustomerKey, hasher: BodyHasher) -> Self {
        let mut header = [0u8; HEADER];
        header[..MAGIC.len()].copy_from_slice(MAGIC);
        header[MAGIC.len()..].copy_from_slice(&rand::random::<[u8; 16]>());
        Sealer {
            inner,
            cipher: cipher(key, &header),
            header,
            hasher,
            out: header.to_vec(),
            out_pos: 0,
            next: Vec::new(),
            index: 0,
            done: false,
        }
    }

    /// The plaintext's digests (call once the sealed stream has ended).
    pub fn finish(self) -> BodyDigests {
        self.hasher.finish()
    }

    fn fill(&mut self, buf: &mut Vec<u8>) -> io::Result<()> {
        while buf.len() < CHUNK {
            let start = buf.len();
            buf.resize(CHUNK, 0);
            match self.inner.read(&mut buf[start..]) {
                Ok(0) => {
                    buf.truncate(start);
                    return Ok(());
                }
                Ok(n) => buf.truncate(start + n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => buf.truncate(start),
                Err(e) => {
                    buf.truncate(start);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Seals the next chunk into `out`; `false` once every chunk is out.
    fn seal_next(&mut self) -> io::Result<bool> {
        if self.done {
            return Ok(false);
        }
        let mut chunk = std::mem::take(&mut self.next);
        if self.index == 0 && chunk.is_empty() {
            self.fill(&mut chunk)?;
        }
        // Read ahead: the chunk is the last when nothing follows it.
        let mut ahead = Vec::with_capacity(CHUNK);
        if chunk.len() == CHUNK {
            self.fill(&mut ahead)?;
        }
        let last = ahead.is_empty();
        self.hasher.update(&chunk);
        self.cipher
            .encrypt_in_place(&nonce(self.index, last), &self.header, &mut chunk)
            .map_err(|_| io::Error::other("cannot seal a chunk"))?;
        self.out = chunk;
        self.out_pos = 0;
        self.next = ahead;
        self.index += 1;
        self.done = last;
        Ok(true)
    }
}

impl Read for Sealer<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.out_pos < self.out.len() {
                let n = buf.len().min(self.out.len() - self.out_pos);
                buf[..n].copy_from_slice(&self.out[self.out_pos..self.out_pos + n]);
                self.out_pos += n;
                return Ok(n);
            }
            if !self.seal_next()? {
                return Ok(0);
            }
        }
    }
}

/// Whether `head` (a blob's first bytes) starts a sealed blob's header.
pub(crate) fn is_sealed_header(head: &[u8]) -> bool {
    head.len() >= HEADER && &head[..MAGIC.len()] == MAGIC
}

/// Reads `take` plaintext bytes from `from` of a sealed blob whose
/// plaintext is `plain` bytes long, decrypting only the chunks needed.
pub(crate) struct Opener<R> {
    inner: R,
    key: CustomerKey,
    cipher: Option<Aes256Gcm>,
    header: [u8; HEADER],
    plain: u64,
    from: u64,
    left: u64,
    index: u64,
    buf: Vec<u8>,
    pos: usize,
}

impl<R: Read + Seek> Opener<R> {
    /// A reader of `take` bytes from `from` of the blob in `inner`.
    pub fn new(inner: R, key: CustomerKey, plain: u64, from: u64, take: u64) -> Self {
        Opener {
            inner,
            key,
            cipher: None,
            header: [0; HEADER],
            plain,
            from,
            left: take,
            index: from / CHUNK as u64,
            buf: Vec::new(),
            pos: 0,
        }
    }

    /// Plaintext bytes still to come.
    pub fn left(&self) -> u64 {
        self.left
    }

    fn open_next(&mut self) -> io::Result<()> {
        let damaged = || {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "the stored bytes of an object encrypted with a customer key fail authentication (damaged on disk)",
            )
        };
        if self.cipher.is_none() {
            self.inner.seek(SeekFrom::Start(0))?;
            self.inner
                .read_exact(&mut self.header)
                .map_err(|_| damaged())?;
            if &self.header[..MAGIC.len()] != MAGIC {
                return Err(damaged());
            }
            self.cipher = Some(cipher(&self.key, &self.header));
            let at = HEADER as u64 + self.index * (CHUNK + TAG) as u64;
            self.inner.seek(SeekFrom::Start(at))?;
        }
        let n = chunks(self.plain);
        if self.index >= n {
            return Err(damaged());
        }
        let last = self.index + 1 == n;
        let len = if last {
            self.plain - self.index * CHUNK as u64
        } else {
            CHUNK as u64
        } as usize;
        let mut sealed = vec![0u8; len + TAG];
        self.inner.read_exact(&mut sealed).map_err(|_| damaged())?;
        let Some(cipher) = &self.cipher else {
            return Err(damaged());
        };
        cipher
            .decrypt_in_place(&nonce(self.index, last), &self.header, &mut sealed)
            .map_err(|_| damaged())?;
        let skip = if self.index == self.from / CHUNK as u64 {
            (self.from % CHUNK as u64) as usize
        } else {
            0
        };
        self.buf = sealed;
        self.pos = skip.min(self.buf.len());
        self.index += 1;
        Ok(())
    }
}

impl<R: Read + Seek> Read for Opener<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 || out.is_empty() {
            return Ok(0);
        }
        if self.pos >= self.buf.len() {
            self.open_next()?;
        }
        let n = out
            .len()
            .min(self.buf.len() - self.pos)
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        self.left -= n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> CustomerKey {
        CustomerKey::from_bytes([b; 32])
    }

    fn seal(plain: &[u8], k: &CustomerKey) -> (Vec<u8>, BodyDigests) {
        let mut src = plain;
        let mut s = Sealer::new(&mut src, k, BodyHasher::new(&[], false));
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        (out, s.finish())
    }

    fn open(
        sealed: &[u8],
        k: &CustomerKey,
        plain: u64,
        from: u64,
        take: u64,
    ) -> io::Result<Vec<u8>> {
        let mut o = Opener::new(io::Cursor::new(sealed), k.clone(), plain, from, take);
        let mut out = Vec::new();
        o.read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn round_trips_and_ranges_across_chunks() {
        let k = key(7);
        for size in [0usize, 1, 13, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17] {
            let plain: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
            let (sealed, digests) = seal(&plain, &k);
            assert_eq!(sealed.len() as u64, sealed_len(size as u64), "size {size}");
            assert_eq!(digests.size, size as u64);
            assert_eq!(digests.md5, <[u8; 16]>::from(md5::Md5::digest(&plain)));
            assert_eq!(
                open(&sealed, &k, size as u64, 0, size as u64).unwrap(),
                plain
            );
            for (from, take) in [(1, 5), (CHUNK - 3, 7), (CHUNK, 1), (CHUNK + 2, 2 * CHUNK)] {
                let (from, take) = (from as u64, take as u64);
                if from + take <= size as u64 {
                    let got = open(&sealed, &k, size as u64, from, take).unwrap();
                    assert_eq!(got, &plain[from as usize..(from + take) as usize]);
                }
            }
        }
    }

    #[test]
    fn plaintext_is_not_in_the_sealed_bytes() {
        let plain = b"a secret sentence that must never reach the disk ".repeat(5000);
        let (sealed, _) = seal(&plain, &key(1));
        assert!(!sealed.windows(32).any(|w| w == &plain[..32]));
    }

    #[test]
    fn a_wrong_key_or_tampering_fails() {
        let k = key(3);
        let plain = vec![9u8; 2 * CHUNK + 5];
        let (sealed, _) = seal(&plain, &k);
        let n = plain.len() as u64;
        assert!(open(&sealed, &key(4), n, 0, n).is_err());
        let mut flipped = sealed.clone();
        flipped[HEADER + 100] ^= 1;
        assert!(open(&flipped, &k, n, 0, n).is_err());
        // Two whole records swapped: each fails its index.
        let rec = CHUNK + TAG;
        let mut swapped = sealed.clone();
        let (a, b) = swapped[HEADER..HEADER + 2 * rec].split_at_mut(rec);
        a.swap_with_slice(b);
        assert!(open(&swapped, &k, n, 0, n).is_err());
        // Truncated to whole records: the new last one is not marked last.
        let cut = &sealed[..HEADER + 2 * rec];
        assert!(open(cut, &k, 2 * CHUNK as u64, 0, 2 * CHUNK as u64).is_err());
        assert!(open(&sealed[..sealed.len() - 1], &k, n, 0, n).is_err());
    }

    #[test]
    fn headers_are_checked() {
        let md5 = |k: &[u8]| base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(k));
        let b64 = |k: &[u8]| base64::engine::general_purpose::STANDARD.encode(k);
        let raw = [5u8; 32];
        assert!(CustomerKey::from_headers(None, None, None)
            .unwrap()
            .is_none());
        let ok = CustomerKey::from_headers(Some("AES256"), Some(&b64(&raw)), Some(&md5(&raw)));
        assert_eq!(ok.unwrap().unwrap().key_md5(), md5(&raw));
        for (a, k, m) in [
            (None, Some(b64(&raw)), Some(md5(&raw))),
            (Some("AES128"), Some(b64(&raw)), Some(md5(&raw))),
            (Some("AES256"), None, Some(md5(&raw))),
            (Some("AES256"), Some(b64(&raw)), None),
            (Some("AES256"), Some(b64(&raw)), Some(md5(&[6u8; 32]))),
            (Some("AES256"), Some(b64(&[5u8; 16])), Some(md5(&[5u8; 16]))),
        ] {
            let e = CustomerKey::from_headers(a, k.as_deref(), m.as_deref()).unwrap_err();
            assert_eq!(e.code(), "invalid_encryption_key");
        }
    }

    #[test]
    fn a_record_tells_keys_apart_and_holds_neither_key_nor_md5() {
        let k = key(8);
        let r = k.record();
        assert!(r.matches(&k));
        assert!(!r.matches(&key(9)));
        let json = serde_json::to_string(&r).unwrap();
        assert!(!json.contains(&crate::hex(&[8u8; 32])));
        assert!(!json.contains(k.key_md5()));
        assert_ne!(k.record().salt, r.salt);
    }
}
