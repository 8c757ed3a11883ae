//! The lifecycle API of [`Store`]: a bucket's rules, stored whole in
//! `buckets.lifecycle`, and the `x-amz-expiration` of a current version.

use rusqlite::{params, Connection, OptionalExtension};

use super::{from_column, validate_lifecycle, LifecycleConfig};
use crate::error::{Result, StoreError};
use std::sync::atomic::Ordering;

use super::ObjectExpiration;
use crate::model::ObjectMeta;
use crate::store::Store;
use crate::validate;

/// A bucket's lifecycle configuration, by its row id.
pub(crate) fn load(conn: &Connection, id: i64, name: &str) -> Result<Option<LifecycleConfig>> {
    let value: Option<String> = conn
        .prepare_cached("SELECT lifecycle FROM buckets WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?
        .flatten();
    from_column(name, value)
}

/// `Inner::lifecycle_seen`: not yet known whether any bucket has rules.
const SEEN_UNKNOWN: u8 = 0;
/// No bucket has rules (until one is given some).
const SEEN_NONE: u8 = 1;
/// Some bucket may have rules.
const SEEN_SOME: u8 = 2;

impl Store {
    /// A bucket's lifecycle configuration (`None`: it has none), or
    /// `no_such_bucket`.
    pub fn bucket_lifecycle(&self, bucket: &str) -> Result<Option<LifecycleConfig>> {
        validate::bucket_name(bucket)?;
        let value: Option<Option<String>> = self.inner.db.read(|conn| {
            Ok(conn
                .prepare_cached("SELECT lifecycle FROM buckets WHERE name = ?1")?
                .query_row([bucket], |r| r.get(0))
                .optional()?)
        })?;
        let Some(value) = value else {
            return Err(StoreError::NoSuchBucket {
                bucket: bucket.to_string(),
            });
        };
        from_column(bucket, value)
    }

    /// Replaces a bucket's lifecycle configuration (validated by
    /// [`validate_lifecycle`], which names every unnamed rule) or removes
    /// it (`None`), in one transaction. Returns what is now stored.
    pub fn set_bucket_lifecycle(
        &self,
        bucket: &str,
        config: Option<LifecycleConfig>,
    ) -> Result<Option<LifecycleConfig>> {
        validate::bucket_name(bucket)?;
        let (config, json) = match config {
            Some(mut config) => {
                validate_lifecycle(&mut config)?;
                let json = serde_json::to_string(&config).map_err(|e| {
                    StoreError::Corrupt(format!("cannot encode lifecycle rules: {e}"))
                })?;
                (Some(config), Some(json))
            }
            None => (None, None),
        };
        let bucket = bucket.to_string();
        if config.is_some() {
            self.inner
                .lifecycle_seen
                .store(SEEN_SOME, Ordering::Release);
        }
        self.inner.db.write(move |conn, _| {
            let n = conn.execute(
                "UPDATE buckets SET lifecycle = ?2 WHERE name = ?1",
                params![bucket, json],
            )?;
            if n == 0 {
                return Err(StoreError::NoSuchBucket { bucket });
            }
            Ok(())
        })?;
        Ok(config)
    }

    /// When the rules of `meta`'s bucket expire it, taken as the current
    /// version of its key (S3's `x-amz-expiration`: real days, rounded up
    /// to midnight UTC); `None` when no rule does. Costs nothing while no
    /// bucket of the store has rules.
    pub fn object_expiration(&self, meta: &ObjectMeta) -> Result<Option<ObjectExpiration>> {
        Ok(self.rules_if_any(&meta.bucket)?.and_then(|config| {
            config.expiration_of(
                &meta.key,
                meta.size,
                &meta.props.tags,
                meta.last_modified_ns,
            )
        }))
    }

    /// When the bucket's rules abort an upload of `key` initiated at
    /// `initiated_ns` (S3's `x-amz-abort-date`, in S3's days), and by
    /// which rule; `None` when none does.
    pub fn upload_abort(
        &self,
        bucket: &str,
        key: &str,
        initiated_ns: i64,
    ) -> Result<Option<ObjectExpiration>> {
        Ok(self
            .rules_if_any(bucket)?
            .and_then(|config| config.abort_of(key, initiated_ns)))
    }

    /// A bucket's rules, skipping the read while no bucket has any.
    fn rules_if_any(&self, bucket: &str) -> Result<Option<LifecycleConfig>> {
        let seen = &self.inner.lifecycle_seen;
        if seen.load(Ordering::Acquire) == SEEN_UNKNOWN {
            let any: bool = self.inner.db.read(|conn| {
                Ok(conn
                    .prepare_cached(
                        "SELECT EXISTS (SELECT 1 FROM buckets WHERE lifecycle IS NOT NULL)",
                    )?
                    .query_row([], |r| r.get(0))?)
            })?;
            let _ = seen.compare_exchange(
                SEEN_UNKNOWN,
                if any { SEEN_SOME } else { SEEN_NONE },
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
        if seen.load(Ordering::Acquire) == SEEN_NONE {
            return Ok(None);
        }
        self.bucket_lifecycle(bucket)
    }
}
