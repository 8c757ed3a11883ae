//! Typed errors of the object store, each with a stable machine code.

use std::path::PathBuf;

/// Everything the store can refuse or fail with.
///
/// Every variant has a stable machine code ([`StoreError::code`]); protocol
/// crates map codes to their wire forms in one place each.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another process (or another handle in this process) owns the directory.
    #[error("data directory {dir} is already in use by another stow-s3 process")]
    StoreLocked { dir: PathBuf },
    /// The directory holds no store (and was not created).
    #[error("{dir} is not a stow-s3 data directory")]
    NoSuchStore { dir: PathBuf },
    /// A customer-provided key's headers are incomplete or inconsistent
    /// (SSE-C: the algorithm is not `AES256`, the key is not 32 bytes of
    /// base64, its MD5 does not match, one header is missing).
    #[error("{reason}")]
    InvalidEncryptionKey { reason: String },
    /// The object (or upload) was written with a customer-provided key and
    /// the request gave none.
    #[error("The object was stored using a form of Server Side Encryption. The correct parameters must be provided to retrieve the object.")]
    EncryptionKeyMissing,
    /// The request gave a customer-provided key for an object (or upload)
    /// written without one.
    #[error("The encryption parameters are not applicable to this object.")]
    EncryptionNotApplicable,
    /// The request's customer-provided key is not the one the object (or
    /// upload) was written with.
    #[error("The provided customer key does not match the key the object was encrypted with.")]
    WrongEncryptionKey,
    /// The bucket name breaks S3's bucket naming rules.
    #[error("invalid bucket name {name:?}: {reason}")]
    InvalidBucketName { name: String, reason: &'static str },
    /// The object key is empty, contains NUL, or is otherwise unusable.
    #[error("invalid object key: {reason}")]
    InvalidKey { reason: &'static str },
    /// The object key is longer than [`crate::validate::MAX_KEY_BYTES`].
    #[error("invalid object key: key is {len} bytes; the limit is {limit}")]
    KeyTooLong { len: usize, limit: usize },
    /// User metadata or another object property is malformed, or a system
    /// property is too long.
    #[error("invalid metadata: {reason}")]
    InvalidMetadata { reason: String },
    /// The user metadata (keys and values together) is larger than
    /// [`crate::validate::MAX_METADATA_BYTES`].
    #[error("invalid metadata: user metadata is {size} bytes; the limit is {limit}")]
    MetadataTooLarge { size: usize, limit: usize },
    /// Some other argument is malformed.
    #[error("invalid argument: {reason}")]
    InvalidArgument { reason: String },
    /// A CORS rule breaks one of S3's rules (a method, a wildcard, an ID).
    #[error("{reason}")]
    InvalidCors { reason: String },
    /// A CORS configuration has no rules, too many, or a rule without an
    /// origin or a method.
    #[error("malformed CORS configuration: {reason}")]
    MalformedCors { reason: String },
    /// A lifecycle configuration is malformed (S3's MalformedXML: no
    /// rules, a status other than Enabled/Disabled, a rule with both or
    /// neither of a prefix and a filter, a filter or expiration with more
    /// than one member).
    #[error("malformed lifecycle configuration: {reason}")]
    MalformedLifecycle { reason: String },
    /// A lifecycle rule S3 refuses as an invalid request (a rule without
    /// any action).
    #[error("{reason}")]
    InvalidLifecycle { reason: String },
    /// An object lock configuration is malformed (S3: not `Enabled`, a
    /// rule without a retention, a mode S3 does not know, both days and
    /// years or neither).
    #[error("malformed object lock configuration: {reason}")]
    MalformedLockConfiguration { reason: String },
    /// A default retention period that is not a positive number of days or
    /// years.
    #[error("Default retention period must be a positive integer value")]
    InvalidRetentionPeriod,
    /// Retention or a legal hold was asked of a bucket created without
    /// object lock.
    #[error("Bucket is missing Object Lock Configuration")]
    ObjectLockNotEnabled,
    /// The bucket is in a state that refuses the change (object lock on a
    /// bucket created without it, suspending a bucket with object lock).
    #[error("{reason}")]
    InvalidBucketState { reason: String },
    /// A version is under retention or a legal hold: it cannot be deleted,
    /// nor its retention shortened or removed (GOVERNANCE without the
    /// bypass, COMPLIANCE ever).
    #[error("Access Denied because object protected by object lock: {reason}")]
    ObjectLocked { reason: String },
    #[error("bucket {bucket} does not exist")]
    NoSuchBucket { bucket: String },
    #[error("object {key:?} does not exist in bucket {bucket}")]
    NoSuchKey { bucket: String, key: String },
    /// The key's latest version is a delete marker (S3 answers 404 with
    /// `x-amz-delete-marker: true` and the marker's version ID).
    #[error(
        "object {key:?} does not exist in bucket {bucket}: its latest version is a delete marker"
    )]
    KeyDeleted {
        bucket: String,
        key: String,
        version_id: String,
    },
    /// No version with this ID exists for the key.
    #[error("version {version_id} of object {key:?} does not exist in bucket {bucket}")]
    NoSuchVersion {
        bucket: String,
        key: String,
        version_id: String,
    },
    /// The version named is a delete marker, which has no data to read
    /// (S3 answers 405).
    #[error("version {version_id} of object {key:?} in bucket {bucket} is a delete marker")]
    DeleteMarkerVersion {
        bucket: String,
        key: String,
        version_id: String,
    },
    /// A version ID that no version of ours can have.
    #[error("invalid version id {version_id:?}")]
    InvalidVersionId { version_id: String },
    /// The backend does not offer this operation (a workspace's bucket view
    /// keeps no versions).
    #[error("not implemented: {reason}")]
    NotImplemented { reason: String },
    #[error("bucket {bucket} is not empty")]
    BucketNotEmpty { bucket: String },
    /// A conditional write (If-None-Match / If-Match) did not hold.
    #[error("precondition failed: {reason}")]
    PreconditionFailed { reason: &'static str },
    /// A guarded save's observation no longer matches the stored object.
    #[error("the object changed since it was observed")]
    Conflict,
    /// A save condition from another store instance, bucket or key.
    #[error("invalid save condition: {reason}")]
    InvalidCondition { reason: &'static str },
    /// A request key was reused for a request with a different meaning.
    #[error("request key was already used for a different request")]
    RequestConflict,
    /// The receipt journal is full (or the entry is too large).
    #[error("save receipt journal is full: {reason}")]
    RetentionFull { reason: String },
    /// A byte or object quota would be exceeded.
    #[error("quota exceeded: {reason}")]
    QuotaExceeded { reason: String },
    /// No receipt is retained for this request key.
    #[error("no receipt is retained for this request key")]
    ReceiptNotFound,
    #[error("requested range is not satisfiable for an object of {size} bytes")]
    InvalidRange { size: u64 },
    /// A supplied digest (Content-MD5 or checksum) is not well formed.
    #[error("invalid digest: {reason}")]
    InvalidDigest { reason: String },
    /// A supplied `x-amz-checksum-*` value is not a digest of its algorithm
    /// (not base64, or the wrong length). Kept apart from
    /// [`StoreError::InvalidDigest`] (a malformed Content-MD5) because S3
    /// answers the two differently.
    #[error("invalid checksum: {reason}")]
    InvalidChecksum { reason: String },
    /// A supplied digest does not match the received bytes.
    #[error("digest mismatch: {reason}")]
    BadDigest { reason: String },
    /// A body exceeds a caller-supplied size bound.
    #[error("object of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge { size: u64, limit: u64 },
    #[error("multipart upload {upload_id} does not exist")]
    NoSuchUpload { upload_id: String },
    /// Part list of a completion is empty, unknown or mismatched.
    #[error("invalid part: {reason}")]
    InvalidPart { reason: String },
    /// Part list of a completion is not in ascending part-number order, or
    /// names a part number twice.
    #[error("the list of parts was not in ascending order; parts must be ordered by part number, each once")]
    InvalidPartOrder,
    /// A non-final part is below the 5 MiB minimum.
    #[error("part {part_number} is {size} bytes; every part but the last must be at least 5 MiB")]
    EntityTooSmall { part_number: u32, size: u64 },
    #[error("invalid part number {0}: must be 1..=10000")]
    InvalidPartNumber(i64),
    /// On-disk state is inconsistent (never expected; reported, not repaired).
    #[error("store is corrupt: {0}")]
    Corrupt(String),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("database error: {0}")]
    Db(#[from] rusqlite::Error),
}

impl StoreError {
    /// The stable machine code of this error.
    pub fn code(&self) -> &'static str {
        use StoreError::*;
        match self {
            StoreLocked { .. } => "store_locked",
            NoSuchStore { .. } => "no_such_store",
            InvalidEncryptionKey { .. } => "invalid_encryption_key",
            EncryptionKeyMissing => "encryption_key_missing",
            EncryptionNotApplicable => "encryption_not_applicable",
            WrongEncryptionKey => "wrong_encryption_key",
            InvalidBucketName { .. } => "invalid_bucket_name",
            InvalidKey { .. } => "invalid_key",
            KeyTooLong { .. } => "key_too_long",
            InvalidMetadata { .. } => "invalid_metadata",
            MetadataTooLarge { .. } => "metadata_too_large",
            InvalidArgument { .. } => "invalid_argument",
            InvalidCors { .. } => "invalid_cors",
            MalformedCors { .. } => "malformed_cors",
            MalformedLifecycle { .. } => "malformed_lifecycle",
            InvalidLifecycle { .. } => "invalid_lifecycle",
            MalformedLockConfiguration { .. } => "malformed_lock_configuration",
            ObjectLockNotEnabled => "object_lock_not_enabled",
            InvalidRetentionPeriod => "invalid_retention_period",
            InvalidBucketState { .. } => "invalid_bucket_state",
            ObjectLocked { .. } => "object_locked",
            NoSuchBucket { .. } => "no_such_bucket",
            NoSuchKey { .. } | KeyDeleted { .. } => "no_such_key",
            NoSuchVersion { .. } => "no_such_version",
            DeleteMarkerVersion { .. } => "delete_marker",
            InvalidVersionId { .. } => "invalid_version_id",
            NotImplemented { .. } => "not_implemented",
            BucketNotEmpty { .. } => "bucket_not_empty",
            PreconditionFailed { .. } => "precondition_failed",
            Conflict => "conflict",
            InvalidCondition { .. } => "invalid_condition",
            RequestConflict => "request_conflict",
            RetentionFull { .. } => "retention_full",
            QuotaExceeded { .. } => "quota_exceeded",
            ReceiptNotFound => "not_found",
            InvalidRange { .. } => "invalid_range",
            InvalidDigest { .. } => "invalid_digest",
            InvalidChecksum { .. } => "invalid_checksum",
            BadDigest { .. } => "bad_digest",
            TooLarge { .. } => "too_large",
            NoSuchUpload { .. } => "no_such_upload",
            InvalidPart { .. } => "invalid_part",
            InvalidPartOrder => "invalid_part_order",
            EntityTooSmall { .. } => "entity_too_small",
            InvalidPartNumber(_) => "invalid_part_number",
            Corrupt(_) => "corrupt",
            _ if self.is_no_space() => "no_space",
            Io(_) => "io",
            Db(_) => "io",
        }
    }

    /// Whether the disk (or the user's quota on it) is full: `ENOSPC` or
    /// `EDQUOT` from a file write, `SQLITE_FULL` from the database. Nothing
    /// was committed; the same request succeeds once space is freed.
    pub fn is_no_space(&self) -> bool {
        match self {
            StoreError::Io(e) => io_is_no_space(e),
            StoreError::Db(rusqlite::Error::SqliteFailure(e, _)) => {
                e.code == rusqlite::ErrorCode::DiskFull
            }
            _ => false,
        }
    }
}

/// The refusal of a read or condition that names an absent key.
pub(crate) fn no_such_key(bucket: &str, key: &str) -> StoreError {
    StoreError::NoSuchKey {
        bucket: bucket.to_string(),
        key: key.to_string(),
    }
}

/// Whether an I/O error means the disk or the quota is full.
pub fn io_is_no_space(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

/// Shorthand for results of store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_has_one_code() {
        let full = StoreError::Io(std::io::Error::from_raw_os_error(28)); // ENOSPC
        assert_eq!(full.code(), "no_space");
        let quota = StoreError::Io(std::io::Error::from_raw_os_error(122)); // EDQUOT
        assert_eq!(quota.code(), "no_space");
        let db = StoreError::Db(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            None,
        ));
        assert_eq!(db.code(), "no_space");
        assert_eq!(StoreError::Io(std::io::Error::other("x")).code(), "io");
    }
}
