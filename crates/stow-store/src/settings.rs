//! A bucket's tags, object ownership setting and public access block
//! (schema 6: `buckets.tags`, `buckets.ownership`,
//! `buckets.public_access_block`; NULL = none set), its policy document
//! (schema 7: `buckets.policy`, the client's bytes as text; NULL = none),
//! its default encryption (schema 8: `buckets.encryption`; NULL = none),
//! and the tags and ACL of one version of an object. The store keeps and returns them; what
//! they allow (and S3's wire rules for them) is the protocol server's
//! decision. Tags are checked only against the bounds the store keeps
//! ([`crate::validate::check_tags`]).

use std::collections::BTreeMap;

use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};
use crate::model::{CannedAcl, ObjectMeta, ObjectProps};
use crate::store::Store;
use crate::validate;
use crate::versions::{self, VersionRef};

/// Most tags a bucket carries (S3's limit; an object carries at most
/// [`validate::MAX_TAGS`]).
pub const MAX_BUCKET_TAGS: usize = 50;

/// Largest bucket policy document kept, in bytes (S3's limit, 20 KiB).
pub const MAX_BUCKET_POLICY_BYTES: usize = 20 * 1024;

/// A bucket's default encryption (S3's PutBucketEncryption): the
/// server-managed kind (SSE-S3, `AES256`) is the one kept; writes that
/// name no encryption of their own get it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefaultEncryption {
    /// S3's `BucketKeyEnabled`, kept and answered as set.
    pub bucket_key_enabled: bool,
}

/// A bucket's Object Ownership setting (S3's OwnershipControls rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ObjectOwnership {
    /// ACLs are disabled: only private (bucket-owner-full-control) ACLs
    /// may be set, and ACLs grant nothing.
    BucketOwnerEnforced,
    /// ACLs are enabled; objects uploaded with bucket-owner-full-control
    /// belong to the bucket owner.
    BucketOwnerPreferred,
    /// ACLs are enabled; the writer owns what it uploads.
    ObjectWriter,
}

impl ObjectOwnership {
    /// Every setting.
    pub const ALL: [ObjectOwnership; 3] = [
        Self::BucketOwnerEnforced,
        Self::BucketOwnerPreferred,
        Self::ObjectWriter,
    ];

    /// S3's name of the setting.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BucketOwnerEnforced => "BucketOwnerEnforced",
            Self::BucketOwnerPreferred => "BucketOwnerPreferred",
            Self::ObjectWriter => "ObjectWriter",
        }
    }

    /// The setting S3 names `s`.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == s)
    }

    /// Whether ACLs are disabled (BucketOwnerEnforced).
    pub fn acls_disabled(self) -> bool {
        self == Self::BucketOwnerEnforced
    }
}

/// A bucket's public access block (S3's PublicAccessBlockConfiguration).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicAccessBlock {
    /// Requests that set a public ACL are refused.
    pub block_public_acls: bool,
    /// Public ACLs grant nothing.
    pub ignore_public_acls: bool,
    /// Public bucket policies are refused.
    pub block_public_policy: bool,
    /// The bucket grants nothing to anyone but its owner (public ACLs and
    /// public policies alike).
    pub restrict_public_buckets: bool,
}

/// What decides who may reach a bucket, read at once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BucketAccess {
    /// The bucket's canned ACL.
    pub acl: CannedAcl,
    /// Its Object Ownership setting (`None`: none set; ACLs enabled).
    pub ownership: Option<ObjectOwnership>,
    /// Its public access block (`None`: none set).
    pub public_access_block: Option<PublicAccessBlock>,
}

/// The bucket columns kept as JSON here.
#[derive(Clone, Copy)]
enum Column {
    Tags,
    Ownership,
    PublicAccessBlock,
    Policy,
    Encryption,
}

impl Column {
    fn name(self) -> &'static str {
        match self {
            Column::Tags => "tags",
            Column::Ownership => "ownership",
            Column::PublicAccessBlock => "public_access_block",
            Column::Policy => "policy",
            Column::Encryption => "encryption",
        }
    }
}

fn decode<T: serde::de::DeserializeOwned>(
    bucket: &str,
    column: Column,
    value: Option<String>,
) -> Result<Option<T>> {
    value
        .map(|json| {
            serde_json::from_str(&json).map_err(|e| {
                StoreError::Corrupt(format!(
                    "bucket {bucket} has an unreadable {}: {e}",
                    column.name()
                ))
            })
        })
        .transpose()
}

fn encode<T: Serialize>(value: Option<&T>) -> Result<Option<String>> {
    value
        .map(|v| {
            serde_json::to_string(v)
                .map_err(|e| StoreError::Corrupt(format!("cannot encode a bucket setting: {e}")))
        })
        .transpose()
}

/// Checks a bucket's tags against the bounds the store keeps: at most
/// [`MAX_BUCKET_TAGS`], each as [`validate::check_tags`] checks an
/// object's.
fn check_bucket_tags(tags: &BTreeMap<String, String>) -> Result<()> {
    if tags.len() > MAX_BUCKET_TAGS {
        return Err(StoreError::InvalidArgument {
            reason: format!(
                "{} tags; a bucket carries at most {MAX_BUCKET_TAGS}",
                tags.len()
            ),
        });
    }
    // Each tag as an object's (the count aside).
    for (k, v) in tags {
        validate::check_tags(&BTreeMap::from([(k.clone(), v.clone())]))?;
    }
    Ok(())
}

impl Store {
    /// One bucket column's value, or `no_such_bucket`.
    fn bucket_column(&self, bucket: &str, column: Column) -> Result<Option<String>> {
        validate::bucket_name(bucket)?;
        let sql = format!("SELECT {} FROM buckets WHERE name = ?1", column.name());
        let value: Option<Option<String>> = self.inner.db.read(|conn| {
            Ok(conn
                .prepare_cached(&sql)?
                .query_row([bucket], |r| r.get(0))
                .optional()?)
        })?;
        value.ok_or_else(|| StoreError::NoSuchBucket {
            bucket: bucket.to_string(),
        })
    }

    /// Replaces one bucket column's value in one transaction.
    fn set_bucket_column(&self, bucket: &str, column: Column, value: Option<String>) -> Result<()> {
        validate::bucket_name(bucket)?;
        let bucket = bucket.to_string();
        let sql = format!("UPDATE buckets SET {} = ?2 WHERE name = ?1", column.name());
        self.inner.db.write(move |conn, _| {
            let n = conn.prepare_cached(&sql)?.execute(params![bucket, value])?;
            if n == 0 {
                return Err(StoreError::NoSuchBucket { bucket });
            }
            Ok(())
        })
    }

    /// A bucket's tags (`None`: it has none), or `no_such_bucket`.
    pub fn bucket_tags(&self, bucket: &str) -> Result<Option<BTreeMap<String, String>>> {
        let value = self.bucket_column(bucket, Column::Tags)?;
        decode(bucket, Column::Tags, value)
    }

    /// Replaces a bucket's tags (`Some`, at most [`MAX_BUCKET_TAGS`]) or
    /// removes them (`None`).
    pub fn set_bucket_tags(
        &self,
        bucket: &str,
        tags: Option<BTreeMap<String, String>>,
    ) -> Result<()> {
        if let Some(tags) = &tags {
            check_bucket_tags(tags)?;
        }
        self.set_bucket_column(bucket, Column::Tags, encode(tags.as_ref())?)
    }

    /// A bucket's Object Ownership setting (`None`: none set).
    pub fn bucket_ownership(&self, bucket: &str) -> Result<Option<ObjectOwnership>> {
        let value = self.bucket_column(bucket, Column::Ownership)?;
        decode(bucket, Column::Ownership, value)
    }

    /// Sets (`Some`) or removes (`None`) a bucket's Object Ownership.
    pub fn set_bucket_ownership(
        &self,
        bucket: &str,
        ownership: Option<ObjectOwnership>,
    ) -> Result<()> {
        self.set_bucket_column(bucket, Column::Ownership, encode(ownership.as_ref())?)
    }

    /// A bucket's public access block (`None`: none set).
    pub fn public_access_block(&self, bucket: &str) -> Result<Option<PublicAccessBlock>> {
        let value = self.bucket_column(bucket, Column::PublicAccessBlock)?;
        decode(bucket, Column::PublicAccessBlock, value)
    }

    /// Sets (`Some`) or removes (`None`) a bucket's public access block.
    pub fn set_public_access_block(
        &self,
        bucket: &str,
        block: Option<PublicAccessBlock>,
    ) -> Result<()> {
        self.set_bucket_column(bucket, Column::PublicAccessBlock, encode(block.as_ref())?)
    }

    /// A bucket's policy document as it was set (`None`: none), or
    /// `no_such_bucket`.
    pub fn bucket_policy(&self, bucket: &str) -> Result<Option<String>> {
        self.bucket_column(bucket, Column::Policy)
    }

    /// Sets (`Some`, at most [`MAX_BUCKET_POLICY_BYTES`]) or removes
    /// (`None`) a bucket's policy document. The store keeps the text as
    /// given; it checks its size only (what it says is not its business).
    pub fn set_bucket_policy(&self, bucket: &str, policy: Option<String>) -> Result<()> {
        if let Some(p) = &policy {
            if p.len() > MAX_BUCKET_POLICY_BYTES {
                return Err(StoreError::InvalidArgument {
                    reason: format!(
                        "a bucket policy of {} bytes; at most {MAX_BUCKET_POLICY_BYTES} are kept",
                        p.len()
                    ),
                });
            }
        }
        self.set_bucket_column(bucket, Column::Policy, policy)
    }

    /// A bucket's default encryption (`None`: none set), or
    /// `no_such_bucket`.
    pub fn bucket_encryption(&self, bucket: &str) -> Result<Option<DefaultEncryption>> {
        let value = self.bucket_column(bucket, Column::Encryption)?;
        decode(bucket, Column::Encryption, value)
    }

    /// Sets (`Some`) or removes (`None`) a bucket's default encryption.
    pub fn set_bucket_encryption(
        &self,
        bucket: &str,
        encryption: Option<DefaultEncryption>,
    ) -> Result<()> {
        self.set_bucket_column(bucket, Column::Encryption, encode(encryption.as_ref())?)
    }

    /// A bucket's ACL, Object Ownership and public access block, read in
    /// one go, or `no_such_bucket`.
    pub fn bucket_access(&self, bucket: &str) -> Result<BucketAccess> {
        validate::bucket_name(bucket)?;
        type Row = (Option<String>, Option<String>, Option<String>);
        let row: Option<Row> = self.inner.db.read(|conn| {
            Ok(conn
                .prepare_cached(
                    "SELECT acl, ownership, public_access_block FROM buckets WHERE name = ?1",
                )?
                .query_row([bucket], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()?)
        })?;
        let Some((acl, ownership, block)) = row else {
            return Err(StoreError::NoSuchBucket {
                bucket: bucket.to_string(),
            });
        };
        let acl = match acl {
            None => CannedAcl::Private,
            Some(v) => CannedAcl::parse(&v).ok_or_else(|| {
                StoreError::Corrupt(format!("bucket {bucket} has an unknown ACL {v:?}"))
            })?,
        };
        Ok(BucketAccess {
            acl,
            ownership: decode(bucket, Column::Ownership, ownership)?,
            public_access_block: decode(bucket, Column::PublicAccessBlock, block)?,
        })
    }

    /// Replaces the tags of one version of an object (`None`: the latest;
    /// `"null"`: the null version), leaving its bytes, ETag, time and other
    /// properties as they are.
    pub fn set_version_tags(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        tags: BTreeMap<String, String>,
    ) -> Result<ObjectMeta> {
        validate::check_tags(&tags)?;
        self.change_version_props(bucket, key, version, move |p| p.tags = tags)
    }

    /// Replaces the canned ACL of one version of an object (as
    /// [`Store::set_version_tags`]).
    pub fn set_version_acl(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        acl: CannedAcl,
    ) -> Result<ObjectMeta> {
        self.change_version_props(bucket, key, version, move |p| p.acl = acl)
    }

    /// Changes a version's properties in one transaction (same extents,
    /// same blobs: no reference or usage changes). A delete marker, or no
    /// such version, is refused as a read of it is.
    fn change_version_props(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        change: impl FnOnce(&mut ObjectProps) + Send + 'static,
    ) -> Result<ObjectMeta> {
        validate::bucket_name(bucket)?;
        validate::object_key(key)?;
        let version = version.map(VersionRef::parse).transpose()?;
        let (bucket, key) = (bucket.to_string(), key.to_string());
        self.inner.db.write(move |conn, _| {
            let b = versions::bucket(conn, &bucket)?;
            let mut rec = versions::lookup(conn, b, &bucket, &key, version.as_ref())?;
            change(&mut rec.props.props);
            versions::store_props(conn, b.id, &key, &rec)?;
            Ok(versions::meta_in(&rec, b, &bucket, &key))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ownership_names_round_trip() {
        for o in ObjectOwnership::ALL {
            assert_eq!(ObjectOwnership::parse(o.as_str()), Some(o));
        }
        assert_eq!(ObjectOwnership::parse("bucketownerenforced"), None);
        assert!(ObjectOwnership::BucketOwnerEnforced.acls_disabled());
        assert!(!ObjectOwnership::ObjectWriter.acls_disabled());
    }

    #[test]
    fn bucket_tags_are_bounded() {
        let tags = |n: usize| -> BTreeMap<String, String> {
            (0..n).map(|i| (format!("k{i}"), "v".to_string())).collect()
        };
        assert!(check_bucket_tags(&tags(50)).is_ok());
        assert_eq!(
            check_bucket_tags(&tags(51)).unwrap_err().code(),
            "invalid_argument"
        );
        let long = BTreeMap::from([("k".repeat(129), String::new())]);
        assert!(check_bucket_tags(&long).is_err());
    }
}
