//! Canned ACLs kept with buckets (`buckets.acl`, NULL = private) and
//! objects (their properties' `acl`): stored, returned, never interpreted
//! here.

use rusqlite::{params, OptionalExtension};

use crate::error::{Result, StoreError};
use crate::model::{CannedAcl, ObjectMeta};
use crate::store::Store;
use crate::{record, validate};

/// The column value of an ACL: NULL for private, so buckets from before
/// ACLs and private ones read alike.
fn column(acl: CannedAcl) -> Option<&'static str> {
    (!acl.is_private()).then(|| acl.as_str())
}

/// An ACL read back from the column; an unknown value is damage, not input.
fn from_column(name: &str, value: Option<String>) -> Result<CannedAcl> {
    match value {
        None => Ok(CannedAcl::Private),
        Some(v) => CannedAcl::parse(&v)
            .ok_or_else(|| StoreError::Corrupt(format!("bucket {name} has an unknown ACL {v:?}"))),
    }
}

impl Store {
    /// Creates a bucket with a canned ACL, or sets the ACL of the bucket
    /// that exists (as S3 does in us-east-1 for its owner), in one
    /// transaction; `false` when it already existed.
    pub fn create_bucket_with_acl(&self, name: &str, acl: CannedAcl) -> Result<bool> {
        validate::bucket_name(name)?;
        let name = name.to_string();
        self.inner.db.write(move |conn, _| {
            let created = conn.execute(
                "INSERT OR IGNORE INTO buckets (name, created_ns) VALUES (?1, ?2)",
                params![name, record::now_ns()],
            )? == 1;
            conn.execute(
                "UPDATE buckets SET acl = ?2 WHERE name = ?1",
                params![name, column(acl)],
            )?;
            Ok(created)
        })
    }

    /// A bucket's canned ACL, or `no_such_bucket`.
    pub fn bucket_acl(&self, name: &str) -> Result<CannedAcl> {
        validate::bucket_name(name)?;
        let value: Option<Option<String>> = self.inner.db.read(|conn| {
            Ok(conn
                .prepare_cached("SELECT acl FROM buckets WHERE name = ?1")?
                .query_row([name], |r| r.get(0))
                .optional()?)
        })?;
        match value {
            Some(v) => from_column(name, v),
            None => Err(StoreError::NoSuchBucket {
                bucket: name.to_string(),
            }),
        }
    }

    /// Replaces a bucket's canned ACL.
    pub fn set_bucket_acl(&self, name: &str, acl: CannedAcl) -> Result<()> {
        validate::bucket_name(name)?;
        let name = name.to_string();
        self.inner.db.write(move |conn, _| {
            let n = conn.execute(
                "UPDATE buckets SET acl = ?2 WHERE name = ?1",
                params![name, column(acl)],
            )?;
            if n == 0 {
                return Err(StoreError::NoSuchBucket { bucket: name });
            }
            Ok(())
        })
    }

    /// Replaces an object's canned ACL, leaving its bytes, ETag, time,
    /// generation and other properties as they are (S3's PutObjectAcl
    /// changes no object data).
    pub fn set_object_acl(&self, bucket: &str, key: &str, acl: CannedAcl) -> Result<ObjectMeta> {
        validate::bucket_name(bucket)?;
        validate::object_key(key)?;
        let (bucket, key) = (bucket.to_string(), key.to_string());
        self.inner.db.write(move |conn, _| {
            let b = record::bucket_id(conn, &bucket)?;
            let mut rec =
                record::load_record(conn, b, &key)?.ok_or_else(|| StoreError::NoSuchKey {
                    bucket: bucket.clone(),
                    key: key.clone(),
                })?;
            rec.props.props.acl = acl;
            // Same extents, same blobs: no reference or usage changes.
            record::store_record(conn, b, &key, &rec)?;
            Ok(rec.meta(&bucket, &key))
        })
    }
}
