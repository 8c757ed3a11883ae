//! Public data types of the store API.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::checksum::{Checksum, ChecksumAlgorithm, ChecksumType};
use crate::encryption::CustomerKey;
use crate::lock::ObjectLock;

/// Caller-controlled properties of an object, fixed at write time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectProps {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// User metadata; keys are lower-cased on write.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_encoding: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_disposition: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_language: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
    /// Object tags (S3 tagging: at most 10; keys up to 128 and values up
    /// to 256 characters).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// The object's canned ACL (S3's `x-amz-acl`); `private` is not
    /// written, so records from before ACLs read as private.
    #[serde(default, skip_serializing_if = "CannedAcl::is_private")]
    pub acl: CannedAcl,
    /// The version's object lock (retention, legal hold). On a write, what
    /// the request asked for; an empty one takes the bucket's default
    /// retention. Changed only through the store's object lock calls.
    #[serde(default, skip_serializing_if = "ObjectLock::is_empty")]
    pub lock: ObjectLock,
    /// The writer asked for server-managed encryption (S3's SSE-S3,
    /// `x-amz-server-side-encryption: AES256`). Kept and answered, as
    /// clients compare it with what they asked for; the store does not
    /// encrypt these bytes (SECURITY.md). Not written when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub sse_s3: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A canned ACL (S3's `x-amz-acl` values that grant beyond the owner),
/// kept with a bucket or an object. The store keeps it; what it allows is
/// the protocol server's decision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CannedAcl {
    /// The owner alone (FULL_CONTROL).
    #[default]
    Private,
    /// The owner, and READ for everyone (anonymous requests included).
    PublicRead,
    /// The owner, and READ and WRITE for everyone.
    PublicReadWrite,
    /// The owner, and READ for every authenticated requester.
    AuthenticatedRead,
}

impl CannedAcl {
    /// Every canned ACL the store keeps.
    pub const ALL: [CannedAcl; 4] = [
        Self::Private,
        Self::PublicRead,
        Self::PublicReadWrite,
        Self::AuthenticatedRead,
    ];

    /// S3's spelling (`public-read`…).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Private => "private",
            Self::PublicRead => "public-read",
            Self::PublicReadWrite => "public-read-write",
            Self::AuthenticatedRead => "authenticated-read",
        }
    }

    /// Parses S3's spelling (exact, as S3 does).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.as_str() == s)
    }

    /// Whether this is `private` (the default).
    pub fn is_private(&self) -> bool {
        *self == Self::Private
    }

    /// Whether anyone, signed or not, may read.
    pub fn public_read(self) -> bool {
        matches!(self, Self::PublicRead | Self::PublicReadWrite)
    }
}

/// Size and checksum of one part of a multipart object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartSummary {
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
}

/// Everything known about a stored object except its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    pub bucket: String,
    pub key: String,
    pub size: u64,
    /// Quoted MD5 hex, or `"<md5 of part md5s>-N"` for multipart objects.
    pub etag: String,
    /// Nanoseconds since the Unix epoch.
    pub last_modified_ns: i64,
    /// Generation: 32 hex chars, new on every write (even same bytes).
    pub version: String,
    /// The S3 version ID: `None` in a bucket that never had versioning,
    /// `"null"` for the null version, else the ID of this version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_id: Option<String>,
    #[serde(flatten)]
    pub props: ObjectProps,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<Checksum>,
    /// One entry per part for multipart objects; empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<PartSummary>,
}

/// A condition on the current state of a key, checked atomically with the write.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum WriteCondition {
    /// Unconditional.
    #[default]
    Always,
    /// `If-None-Match: *`: create only.
    IfAbsent,
    /// `If-Match: <etag>` (quotes optional), or `*` for "exists".
    IfMatch(String),
}

/// Checksums that arrive only after the body (HTTP trailers): called once
/// the body has been read, and verified like the expected ones. The
/// algorithm must also be requested up front so it is computed.
pub struct TrailingChecksums(pub Box<dyn FnOnce() -> Vec<(ChecksumAlgorithm, String)> + Send>);

impl std::fmt::Debug for TrailingChecksums {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TrailingChecksums")
    }
}

/// Options of a plain (S3-style) put.
#[derive(Debug, Default)]
pub struct PutOptions {
    pub props: ObjectProps,
    /// Algorithm whose checksum is computed and kept with the object.
    pub checksum_algorithm: Option<ChecksumAlgorithm>,
    /// Checksums the caller supplied (base64); verified, and the first is kept
    /// when no algorithm is requested.
    pub expected_checksums: Vec<(ChecksumAlgorithm, String)>,
    /// Base64 Content-MD5 to verify.
    pub content_md5: Option<String>,
    /// Checksums known only once the body has been read.
    pub trailing_checksums: Option<TrailingChecksums>,
    pub condition: WriteCondition,
    /// Seals the bytes with this customer key (SSE-C); reads then need it.
    pub encryption: Option<CustomerKey>,
}

/// Options of a copy.
#[derive(Debug, Clone, Default)]
pub struct CopyOptions {
    /// `Some` replaces the properties (S3's `REPLACE` directive).
    pub replace_props: Option<ObjectProps>,
    /// Condition on the destination.
    pub condition: WriteCondition,
    /// Conditions on the source (`x-amz-copy-source-if-*`).
    pub source: ReadConditions,
    /// The copy's canned ACL: never the source's (as in S3), private unless
    /// the request names one.
    pub acl: CannedAcl,
    /// The source's version to copy (`"null"` for the null version);
    /// `None` copies the latest.
    pub source_version: Option<String>,
    /// The copy's object lock: never the source's (as in S3); empty takes
    /// the destination bucket's default retention.
    pub lock: ObjectLock,
    /// The copy's SSE-S3: never the source's (as in S3, the request's
    /// setting, else the destination bucket's default).
    pub sse_s3: bool,
    /// The source's customer key (SSE-C), needed when it was written with
    /// one.
    pub source_key: Option<CustomerKey>,
    /// The copy's customer key (SSE-C): the copy is sealed with it. A copy
    /// under the source's own key shares its bytes; any other change of
    /// key (or to or from none) rewrites them.
    pub encryption: Option<CustomerKey>,
}

/// HTTP-style conditions on a read (or a copy source).
#[derive(Debug, Clone, Default)]
pub struct ReadConditions {
    pub if_match: Option<String>,
    pub if_none_match: Option<String>,
    /// Nanoseconds since the epoch.
    pub if_modified_since_ns: Option<i64>,
    pub if_unmodified_since_ns: Option<i64>,
}

/// A byte range request, as in an HTTP `Range: bytes=` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteRange {
    /// `first-last`, inclusive; `last` is clamped to the object.
    FromTo(u64, u64),
    /// `first-`.
    From(u64),
    /// `-n`: the last `n` bytes.
    Suffix(u64),
}

impl ByteRange {
    /// Resolves the range against an object size to `(offset, length)`.
    pub fn resolve(self, size: u64) -> Option<(u64, u64)> {
        match self {
            ByteRange::FromTo(a, b) if a <= b && a < size => Some((a, b.min(size - 1) - a + 1)),
            ByteRange::From(a) if a < size => Some((a, size - a)),
            ByteRange::Suffix(n) if n > 0 && size > 0 => {
                let n = n.min(size);
                Some((size - n, n))
            }
            _ => None,
        }
    }
}

/// A listing request.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    pub prefix: String,
    pub delimiter: Option<String>,
    /// Return entries strictly after this key (a start-after, marker or
    /// decoded continuation token).
    pub start_after: Option<String>,
    /// At most this many keys plus common prefixes (0 returns none).
    pub max_keys: usize,
}

/// One object in a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ObjectSummary {
    pub key: String,
    pub size: u64,
    pub etag: String,
    pub last_modified_ns: i64,
}

/// One page of a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ListPage {
    pub objects: Vec<ObjectSummary>,
    pub common_prefixes: Vec<String>,
    pub is_truncated: bool,
    /// The last key or common prefix returned, to continue after.
    pub next_marker: Option<String>,
}

/// A bucket and when it was created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BucketInfo {
    pub name: String,
    pub created_ns: i64,
}

/// Logical usage: bytes of objects and in-flight parts, and object count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub bytes: u64,
    pub objects: u64,
}

/// Limits of a store, fixed at open.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Bytes of objects plus in-flight parts.
    pub max_bytes: Option<u64>,
    pub max_objects: Option<u64>,
    pub max_receipts: u64,
    pub max_receipt_bytes: u64,
    pub max_receipt_entry_bytes: u64,
    /// Multipart uploads in flight at once (created, not yet completed or
    /// aborted); one more is refused with `quota_exceeded`.
    pub max_uploads: u64,
    /// SQLite page cache per database connection. Small caches cost little:
    /// the operating system caches the file too.
    pub db_cache_bytes: u64,
    /// Bytes a disk store keeps allocated in `space.reserve` and gives back
    /// when a delete (object, bucket, upload abort) cannot commit on a full
    /// disk, so a full store can still be emptied. 0 keeps none (and
    /// removes a reserve an earlier open left).
    pub space_reserve_bytes: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            max_bytes: None,
            max_objects: None,
            max_receipts: 1024,
            max_receipt_bytes: 8 << 20,
            max_receipt_entry_bytes: 64 << 10,
            max_uploads: 1024,
            db_cache_bytes: 8 << 20,
            space_reserve_bytes: 0,
        }
    }
}

/// Options fixed when a multipart upload is created.
#[derive(Debug, Clone, Default)]
pub struct CreateUploadOptions {
    pub props: ObjectProps,
    pub checksum_algorithm: Option<ChecksumAlgorithm>,
    /// Defaults to composite when an algorithm is set.
    pub checksum_type: Option<ChecksumType>,
    /// The upload's customer key (SSE-C): every part must be sent with it.
    pub encryption: Option<CustomerKey>,
}

/// Options of one part upload.
#[derive(Debug, Default)]
pub struct PartOptions {
    pub content_md5: Option<String>,
    pub expected_checksums: Vec<(ChecksumAlgorithm, String)>,
    /// Algorithm to compute for this part (also used for trailing checksums).
    pub checksum_algorithm: Option<ChecksumAlgorithm>,
    /// Checksums known only once the body has been read.
    pub trailing_checksums: Option<TrailingChecksums>,
    /// The part's customer key (SSE-C): the upload's own key.
    pub encryption: Option<CustomerKey>,
}

/// An in-flight multipart upload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UploadInfo {
    pub upload_id: String,
    pub key: String,
    pub initiated_ns: i64,
}

/// One uploaded part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartInfo {
    pub part_number: u32,
    pub size: u64,
    pub etag: String,
    pub last_modified_ns: i64,
    /// The part's checksum: of the upload's algorithm when it has one (kept
    /// for the object's checksum), else of the algorithm the part upload
    /// asked for (reported, not kept).
    pub checksum: Option<Checksum>,
    /// Whether the upload asked for SSE-S3, answered with each of its parts
    /// as AWS does. Not written when false.
    #[serde(skip_serializing_if = "is_false")]
    pub sse_s3: bool,
}

/// A page of parts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PartsPage {
    pub parts: Vec<PartInfo>,
    pub is_truncated: bool,
    pub next_part_number_marker: Option<u32>,
}

/// A page of in-flight uploads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UploadsPage {
    pub uploads: Vec<UploadInfo>,
    pub is_truncated: bool,
    pub next_key_marker: Option<String>,
    pub next_upload_id_marker: Option<String>,
}

/// A part named in a completion request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletedPart {
    pub part_number: u32,
    /// Quotes optional.
    pub etag: String,
}

/// A durable save receipt: metadata only, never bodies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Receipt {
    pub request_key: String,
    pub bucket: String,
    pub key: String,
    /// Object metadata at commit.
    pub object: ObjectMeta,
    pub created_ns: i64,
}

/// A bucket's versioning state, as S3 has it: never enabled, enabled, or
/// suspended (a bucket once enabled is never unversioned again).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Versioning {
    /// Never enabled: a write replaces the object, a delete removes it.
    #[default]
    Unversioned,
    /// Every write adds a version with its own ID; a delete without a
    /// version ID adds a delete marker.
    Enabled,
    /// Writes and deletes without a version ID replace the `null` version;
    /// other versions stay.
    Suspended,
}

impl Versioning {
    /// The column value in `buckets.versioning`.
    pub(crate) fn column(self) -> i64 {
        match self {
            Self::Unversioned => 0,
            Self::Enabled => 1,
            Self::Suspended => 2,
        }
    }

    /// The state a column value stands for, `None` if it is unknown.
    pub(crate) fn from_column(v: i64) -> Option<Self> {
        match v {
            0 => Some(Self::Unversioned),
            1 => Some(Self::Enabled),
            2 => Some(Self::Suspended),
            _ => None,
        }
    }
}

/// What a delete did (S3's `x-amz-delete-marker`, `x-amz-version-id`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Deleted {
    /// The version the delete created (a delete marker) or removed; `None`
    /// in a bucket that never had versioning.
    pub version_id: Option<String>,
    /// The delete created a delete marker, or removed one.
    pub delete_marker: bool,
    /// Something was there to delete (a plain delete in a versioned bucket
    /// always adds a marker, so it is always true there).
    pub existed: bool,
}

/// A ListObjectVersions request.
#[derive(Debug, Clone, Default)]
pub struct VersionQuery {
    pub prefix: String,
    pub delimiter: Option<String>,
    /// Start after this key (after all its versions unless
    /// `version_id_marker` names one of them).
    pub key_marker: Option<String>,
    /// Start after this version of `key_marker` (`"null"` for the null
    /// version); needs `key_marker`.
    pub version_id_marker: Option<String>,
    /// At most this many versions, delete markers and common prefixes.
    pub max_keys: usize,
}

/// One version (or delete marker) in a ListObjectVersions page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VersionEntry {
    pub key: String,
    /// `"null"` for the null version.
    pub version_id: String,
    pub is_latest: bool,
    pub delete_marker: bool,
    pub size: u64,
    /// Empty for a delete marker.
    pub etag: String,
    pub last_modified_ns: i64,
}

/// One page of ListObjectVersions: keys in byte order, each key's
/// versions newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VersionPage {
    pub versions: Vec<VersionEntry>,
    pub common_prefixes: Vec<String>,
    pub is_truncated: bool,
    pub next_key_marker: Option<String>,
    pub next_version_id_marker: Option<String>,
}
