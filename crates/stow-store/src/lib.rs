//! The stow-s3 object store.
//!
//! Buckets of objects with S3 semantics, guarded (compare-and-save) writes,
//! durable idempotent save receipts, multipart uploads and quotas, over two
//! backends with one behaviour contract: a disk store ([`Store::open`]) and a
//! memory store ([`Store::memory`]).
//!
//! # Durability
//!
//! Metadata lives in SQLite (WAL, `synchronous=FULL`); bodies larger than a
//! few KiB live in immutable blob files that are fsynced before the
//! transaction naming them commits. Every mutation — its condition check,
//! record, blob references, usage counters and receipt — commits in one
//! transaction, so after a crash either all of it is there or none of it.
//! Concurrent writers share commits (group commit).
//!
//! This crate knows nothing about HTTP, JSON-RPC or the CLI.

mod acl;
mod backend;
mod blobs;
mod checksum;
mod completed;
mod cors;
mod db;
mod encryption;
mod error;
pub mod fault;
mod guarded;
mod integrity;
mod joined;
mod lifecycle;
mod list;
mod lock;
mod locked;
mod model;
mod record;
mod settings;
mod store;
pub mod validate;
mod versioned;
mod versions;

pub use backend::{no_customer_keys, ObjectBackend};
pub use blobs::sync_dir;
pub use checksum::{decode_content_md5, Checksum, ChecksumAlgorithm, ChecksumType};
pub use cors::{validate_cors, CorsRule, CORS_METHODS, MAX_CORS_ID_BYTES, MAX_CORS_RULES};
pub use encryption::{CustomerKey, CUSTOMER_KEY_ALGORITHM};
pub use error::{io_is_no_space, Result, StoreError};
pub use guarded::{Observation, SaveCondition, SaveGuard, SaveRequest, Saved};
pub use joined::{JoinTicket, Joined, JoinedUpload};
pub use lifecycle::{
    validate_lifecycle, DayLength, Expiration, ExpiryReport, FilterAnd, FilterTag, LifecycleConfig,
    LifecycleFilter, LifecycleRule, NoncurrentExpiration, ObjectExpiration, RuleStatus, Transition,
    MAX_LIFECYCLE_ID_CHARS, MAX_LIFECYCLE_RULES, TRANSITION_CLASSES,
};
pub use list::page_of_sorted;
pub use lock::{
    validate_lock_config, DefaultRetention, LockConfig, LockConfigFields, LockMode, ObjectLock,
    Retention, RetentionPeriod, RuleFields,
};
pub use model::*;
pub use settings::{
    BucketAccess, DefaultEncryption, ObjectOwnership, PublicAccessBlock, MAX_BUCKET_POLICY_BYTES,
    MAX_BUCKET_TAGS,
};
pub use store::{
    ConditionCheck, ObjectBody, ObjectRead, ReceivedBody, ResetReport, Store, LOCK_FILE,
    MIN_PART_SIZE, SMALL_BODY_MAX, VERIFIED_READ_LIMIT,
};

/// Lowercase hex of bytes: the one encoding of digests and IDs every
/// crate of the project uses.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// Bytes of a hex string, or `None` if it is not hex.
pub(crate) fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}
