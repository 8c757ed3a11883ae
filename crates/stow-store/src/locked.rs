//! The object lock API of [`Store`]: buckets created with object lock,
//! their configuration, and a version's retention and legal hold. The
//! rules live in `lock.rs`; this module validates, opens the transaction
//! and finds the version.

use rusqlite::{params, Connection};

use crate::error::{Result, StoreError};
use crate::lock::{self, LockConfig, ObjectLock, Retention};
use crate::model::{CannedAcl, ObjectMeta, Versioning};
use crate::record::{self, Record};
use crate::store::Store;
use crate::validate;
use crate::versions::{self, Bucket, VersionRef};

impl Store {
    /// Creates a bucket with object lock enabled (and so versioning
    /// enabled, for good) and a canned ACL; `false` when a bucket of that
    /// name already exists (left as it is).
    pub fn create_bucket_with_lock(&self, name: &str, acl: CannedAcl) -> Result<bool> {
        validate::bucket_name(name)?;
        let name = name.to_string();
        let config = lock::to_column(&LockConfig::default())?;
        self.inner.db.write(move |conn, _| {
            let n = conn.execute(
                "INSERT OR IGNORE INTO buckets (name, created_ns, acl, versioning, object_lock)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    name,
                    record::now_ns(),
                    (!acl.is_private()).then(|| acl.as_str()),
                    Versioning::Enabled.column(),
                    config
                ],
            )?;
            Ok(n == 1)
        })
    }

    /// A bucket's object lock configuration; `None` when it was created
    /// without object lock.
    pub fn bucket_object_lock(&self, bucket: &str) -> Result<Option<LockConfig>> {
        validate::bucket_name(bucket)?;
        self.inner
            .db
            .read(|conn| Ok(versions::bucket(conn, bucket)?.lock))
    }

    /// Replaces the object lock configuration (the default retention) of a
    /// bucket with object lock, or enables object lock on a bucket whose
    /// versioning is enabled (as AWS does; it then cannot be suspended);
    /// an unversioned or suspended bucket is `invalid_bucket_state`.
    /// Versions already written keep their lock.
    pub fn set_bucket_object_lock(&self, bucket: &str, config: LockConfig) -> Result<()> {
        validate::bucket_name(bucket)?;
        let bucket = bucket.to_string();
        let column = lock::to_column(&config)?;
        self.inner.db.write(move |conn, _| {
            let b = versions::bucket(conn, &bucket)?;
            if b.lock.is_none() && b.state != Versioning::Enabled {
                return Err(StoreError::InvalidBucketState {
                    reason: "Versioning must be 'Enabled' on the bucket to apply a Object Lock \
                             configuration"
                        .into(),
                });
            }
            conn.prepare_cached("UPDATE buckets SET object_lock = ?2 WHERE id = ?1")?
                .execute(params![b.id, column])?;
            Ok(())
        })
    }

    /// The object lock of a version (`None`: the latest; `"null"`: the
    /// null version): `object_lock_not_enabled` in a bucket without it,
    /// else as [`Store::head_object_version`] finds the version.
    pub fn object_lock(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
    ) -> Result<ObjectLock> {
        validate::bucket_name(bucket)?;
        validate::object_key(key)?;
        let version = version.map(VersionRef::parse).transpose()?;
        self.inner.db.read(|conn| {
            let (_, rec) = locked_version(conn, bucket, key, version.as_ref())?;
            Ok(rec.props.props.lock)
        })
    }

    /// Sets (`Some`) or removes (`None`) a version's retention. Extending
    /// is always allowed; shortening or removing a retention in force needs
    /// `bypass_governance` under GOVERNANCE and is refused under
    /// COMPLIANCE (`object_locked`); a date must be in the future.
    pub fn set_object_retention(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        retention: Option<Retention>,
        bypass_governance: bool,
    ) -> Result<ObjectMeta> {
        self.change_lock(bucket, key, version, move |lock| {
            lock::change_retention(
                lock.retention,
                retention,
                record::now_ns(),
                bypass_governance,
            )?;
            lock.retention = retention;
            Ok(())
        })
    }

    /// Puts a legal hold on a version (`true`) or takes it off.
    pub fn set_object_legal_hold(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        on: bool,
    ) -> Result<ObjectMeta> {
        self.change_lock(bucket, key, version, move |lock| {
            lock.legal_hold = Some(on);
            Ok(())
        })
    }

    /// Changes a version's lock in one transaction (its bytes, ETag, time
    /// and other properties unchanged).
    fn change_lock(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        change: impl FnOnce(&mut ObjectLock) -> Result<()> + Send + 'static,
    ) -> Result<ObjectMeta> {
        validate::bucket_name(bucket)?;
        validate::object_key(key)?;
        let version = version.map(VersionRef::parse).transpose()?;
        let (bucket, key) = (bucket.to_string(), key.to_string());
        self.inner.db.write(move |conn, _| {
            let (b, mut rec) = locked_version(conn, &bucket, &key, version.as_ref())?;
            change(&mut rec.props.props.lock)?;
            versions::store_props(conn, b.id, &key, &rec)?;
            Ok(versions::meta_in(&rec, b, &bucket, &key))
        })
    }
}

/// The bucket and the version named, in a bucket with object lock.
fn locked_version(
    conn: &Connection,
    bucket: &str,
    key: &str,
    version: Option<&VersionRef>,
) -> Result<(Bucket, Record)> {
    let b = versions::bucket(conn, bucket)?;
    if b.lock.is_none() {
        return Err(StoreError::ObjectLockNotEnabled);
    }
    let rec = versions::lookup(conn, b, bucket, key, version)?;
    Ok((b, rec))
}
