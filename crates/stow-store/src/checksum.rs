//! Content digests: the MD5 behind ETags and the five S3 checksum algorithms.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use md5::Digest as _;
use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};

/// The S3 checksum algorithms the store computes, verifies and keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum ChecksumAlgorithm {
    Crc32,
    Crc32c,
    Crc64nvme,
    Sha1,
    Sha256,
}

impl ChecksumAlgorithm {
    /// Every algorithm, in a fixed order.
    pub const ALL: [ChecksumAlgorithm; 5] = [
        Self::Crc32,
        Self::Crc32c,
        Self::Crc64nvme,
        Self::Sha1,
        Self::Sha256,
    ];

    /// S3's spelling (`CRC32`, `CRC64NVME`, `SHA256`…).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Crc32 => "CRC32",
            Self::Crc32c => "CRC32C",
            Self::Crc64nvme => "CRC64NVME",
            Self::Sha1 => "SHA1",
            Self::Sha256 => "SHA256",
        }
    }

    /// Parses S3's spelling, case-insensitively.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|a| a.as_str().eq_ignore_ascii_case(s))
    }

    /// Length of the raw digest in bytes.
    pub fn digest_len(self) -> usize {
        match self {
            Self::Crc32 | Self::Crc32c => 4,
            Self::Crc64nvme => 8,
            Self::Sha1 => 20,
            Self::Sha256 => 32,
        }
    }

    /// Decodes a base64 checksum value, refusing malformed or wrong-length ones.
    pub fn decode(self, value: &str) -> Result<Vec<u8>> {
        let raw = B64.decode(value).map_err(|_| StoreError::InvalidChecksum {
            reason: format!("{} checksum is not valid base64", self.as_str()),
        })?;
        if raw.len() != self.digest_len() {
            return Err(StoreError::InvalidChecksum {
                reason: format!(
                    "{} checksum must be {} bytes",
                    self.as_str(),
                    self.digest_len()
                ),
            });
        }
        Ok(raw)
    }

    /// Digest of `data` in one go, base64-encoded.
    pub fn digest_of(self, data: &[u8]) -> String {
        let mut h = AlgHasher::new(self);
        h.update(data);
        h.finish_base64()
    }
}

/// Whether a multipart object's checksum covers the whole object or is a
/// checksum of the part checksums.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ChecksumType {
    FullObject,
    Composite,
}

/// A checksum kept with an object or part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checksum {
    pub algorithm: ChecksumAlgorithm,
    /// Base64 of the big-endian digest; composite values end in `-N`.
    pub value: String,
    #[serde(rename = "type")]
    pub kind: ChecksumType,
}

enum AlgHasher {
    Crc32(crc32fast::Hasher),
    Crc32c(u32),
    Crc64(crc64fast_nvme::Digest),
    Sha1(sha1::Sha1),
    Sha256(sha2::Sha256),
}

impl AlgHasher {
    fn new(alg: ChecksumAlgorithm) -> Self {
        match alg {
            ChecksumAlgorithm::Crc32 => Self::Crc32(crc32fast::Hasher::new()),
            ChecksumAlgorithm::Crc32c => Self::Crc32c(0),
            ChecksumAlgorithm::Crc64nvme => Self::Crc64(crc64fast_nvme::Digest::new()),
            ChecksumAlgorithm::Sha1 => Self::Sha1(sha1::Sha1::new()),
            ChecksumAlgorithm::Sha256 => Self::Sha256(sha2::Sha256::new()),
        }
    }

    fn update(&mut self, data: &[u8]) {
        match self {
            Self::Crc32(h) => h.update(data),
            Self::Crc32c(c) => *c = crc32c::crc32c_append(*c, data),
            Self::Crc64(h) => h.write(data),
            Self::Sha1(h) => h.update(data),
            Self::Sha256(h) => h.update(data),
        }
    }

    fn finish(self) -> Vec<u8> {
        match self {
            Self::Crc32(h) => h.finalize().to_be_bytes().to_vec(),
            Self::Crc32c(c) => c.to_be_bytes().to_vec(),
            Self::Crc64(h) => h.sum64().to_be_bytes().to_vec(),
            Self::Sha1(h) => h.finalize().to_vec(),
            Self::Sha256(h) => h.finalize().to_vec(),
        }
    }

    fn finish_base64(self) -> String {
        B64.encode(self.finish())
    }
}

/// Hashes a body once while it streams: MD5 always (for the ETag), plus any
/// requested checksum algorithms and, for keyed saves, a SHA-256.
pub(crate) struct BodyHasher {
    md5: md5::Md5,
    algs: Vec<(ChecksumAlgorithm, AlgHasher)>,
    sha256: Option<sha2::Sha256>,
    size: u64,
}

/// What [`BodyHasher`] computed.
pub(crate) struct BodyDigests {
    pub md5: [u8; 16],
    pub checksums: Vec<(ChecksumAlgorithm, Vec<u8>)>,
    pub sha256: Option<[u8; 32]>,
    pub size: u64,
}

impl BodyHasher {
    pub fn new(algs: &[ChecksumAlgorithm], want_sha256: bool) -> Self {
        let mut list: Vec<(ChecksumAlgorithm, AlgHasher)> = Vec::new();
        for &a in algs {
            if !list.iter().any(|(b, _)| *b == a) {
                list.push((a, AlgHasher::new(a)));
            }
        }
        Self {
            md5: md5::Md5::new(),
            algs: list,
            sha256: want_sha256.then(sha2::Sha256::new),
            size: 0,
        }
    }

    pub fn update(&mut self, data: &[u8]) {
        self.md5.update(data);
        for (_, h) in &mut self.algs {
            h.update(data);
        }
        if let Some(h) = &mut self.sha256 {
            h.update(data);
        }
        self.size += data.len() as u64;
    }

    pub fn finish(self) -> BodyDigests {
        BodyDigests {
            md5: self.md5.finalize().into(),
            checksums: self
                .algs
                .into_iter()
                .map(|(a, h)| (a, h.finish()))
                .collect(),
            sha256: self.sha256.map(|h| h.finalize().into()),
            size: self.size,
        }
    }
}

impl BodyDigests {
    pub fn get(&self, alg: ChecksumAlgorithm) -> Option<&[u8]> {
        self.checksums
            .iter()
            .find(|(a, _)| *a == alg)
            .map(|(_, v)| v.as_slice())
    }
}

/// Quoted lowercase-hex MD5, S3's ETag form.
pub(crate) fn etag_of_md5(md5: &[u8]) -> String {
    format!("\"{}\"", crate::hex(md5))
}

/// Decodes a base64 Content-MD5 header value.
pub fn decode_content_md5(value: &str) -> Result<[u8; 16]> {
    let raw = B64
        .decode(value.trim())
        .map_err(|_| StoreError::InvalidDigest {
            reason: "Content-MD5 is not valid base64".into(),
        })?;
    raw.try_into().map_err(|_| StoreError::InvalidDigest {
        reason: "Content-MD5 must be 16 bytes".into(),
    })
}

/// Composite multipart checksum: the digest of the concatenated raw part
/// digests, suffixed with `-N`.
pub(crate) fn composite(alg: ChecksumAlgorithm, part_digests: &[Vec<u8>]) -> String {
    let mut h = AlgHasher::new(alg);
    for d in part_digests {
        h.update(d);
    }
    format!("{}-{}", h.finish_base64(), part_digests.len())
}

/// Base64-encodes raw digest bytes.
pub(crate) fn b64(raw: &[u8]) -> String {
    B64.encode(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Reference values pinned by S3's own documentation and the conformance corpus.
    #[test]
    fn known_vectors() {
        let d = |a: ChecksumAlgorithm, s: &str| a.digest_of(s.as_bytes());
        assert_eq!(d(ChecksumAlgorithm::Crc32, "checksum body"), "RL7+RQ==");
        assert_eq!(
            d(ChecksumAlgorithm::Crc64nvme, "hello world"),
            "jSnVw/bqjr4="
        );
        assert_eq!(d(ChecksumAlgorithm::Crc32c, "hello world"), "yZRlqg==");
        assert_eq!(
            d(ChecksumAlgorithm::Sha1, "hello world"),
            "Kq5sNclPz7QV2+lfQIuc6R7oRu0="
        );
        assert_eq!(
            d(ChecksumAlgorithm::Sha256, "hello world"),
            "uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek="
        );
    }

    #[test]
    fn streaming_equals_one_shot() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut h = BodyHasher::new(&ChecksumAlgorithm::ALL, true);
        for chunk in data.chunks(777) {
            h.update(chunk);
        }
        let out = h.finish();
        assert_eq!(out.size, data.len() as u64);
        for a in ChecksumAlgorithm::ALL {
            assert_eq!(b64(out.get(a).unwrap()), a.digest_of(&data));
        }
    }

    #[test]
    fn decode_refuses_bad_values() {
        assert_eq!(
            ChecksumAlgorithm::Crc32.decode("!!").unwrap_err().code(),
            "invalid_checksum"
        );
        assert_eq!(
            ChecksumAlgorithm::Crc32
                .decode("AAAAAAAAAAA=")
                .unwrap_err()
                .code(),
            "invalid_checksum"
        );
        assert_eq!(
            decode_content_md5("abc").unwrap_err().code(),
            "invalid_digest"
        );
        assert!(decode_content_md5("XrY7u+Ae7tCTyyK7j1rNww==").is_ok());
        assert_eq!(
            ChecksumAlgorithm::parse("crc64nvme"),
            Some(ChecksumAlgorithm::Crc64nvme)
        );
    }
}
