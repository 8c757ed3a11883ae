//! Object Lock on the wire: Put/GetObjectLockConfiguration,
//! Put/GetObjectRetention, Put/GetObjectLegalHold, and the
//! `x-amz-object-lock-*` headers of writes (PutObject, CopyObject,
//! CreateMultipartUpload) and reads (GET, HEAD). The rules (default
//! retention, GOVERNANCE and its bypass, COMPLIANCE, legal holds, deletes
//! refused) are the backend's; this module converts.

use std::time::{Duration, UNIX_EPOCH};

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};
use stow_store as store;
use stow_store::{LockMode, ObjectLock, Retention};

use super::{blocking, StowS3};

fn to_ns(t: &Timestamp) -> i64 {
    let odt: time::OffsetDateTime = t.clone().into();
    odt.unix_timestamp_nanos() as i64
}

fn to_timestamp(ns: i64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_nanos(ns.max(0) as u64))
}

/// The lock a write asks for with its `x-amz-object-lock-*` headers: a
/// mode needs a date and a date a mode (InvalidArgument), as on AWS.
pub(super) fn lock_of(
    mode: Option<&ObjectLockMode>,
    until: Option<&Timestamp>,
    hold: Option<&ObjectLockLegalHoldStatus>,
) -> S3Result<ObjectLock> {
    let retention = match (mode, until) {
        (None, None) => None,
        (Some(mode), Some(until)) => Some(Retention {
            mode: LockMode::parse(mode.as_str())
                .ok_or_else(|| s3_error!(InvalidArgument, "Unknown wormMode directive."))?,
            until_ns: to_ns(until),
        }),
        _ => {
            return Err(s3_error!(
            InvalidArgument,
            "x-amz-object-lock-retain-until-date and x-amz-object-lock-mode must both be supplied"
        ))
        }
    };
    let legal_hold = hold.map(|h| hold_of(h.as_str())).transpose()?;
    Ok(ObjectLock {
        retention,
        legal_hold,
    })
}

fn hold_of(s: &str) -> S3Result<bool> {
    match s {
        ObjectLockLegalHoldStatus::ON => Ok(true),
        ObjectLockLegalHoldStatus::OFF => Ok(false),
        _ => Err(s3_error!(
            InvalidArgument,
            "Legal Hold must be either of 'ON' or 'OFF'"
        )),
    }
}

/// The `x-amz-object-lock-*` answer fields of a version (GET, HEAD).
pub(super) struct LockHeaders {
    pub mode: Option<ObjectLockMode>,
    pub until: Option<Timestamp>,
    pub hold: Option<ObjectLockLegalHoldStatus>,
}

impl LockHeaders {
    /// What a version's lock says in headers.
    pub(super) fn of(lock: &ObjectLock) -> Self {
        LockHeaders {
            mode: lock
                .retention
                .map(|r| ObjectLockMode::from(r.mode.as_str().to_string())),
            until: lock.retention.map(|r| to_timestamp(r.until_ns)),
            hold: lock.legal_hold.map(hold_status),
        }
    }
}

fn hold_status(on: bool) -> ObjectLockLegalHoldStatus {
    let s = if on {
        ObjectLockLegalHoldStatus::ON
    } else {
        ObjectLockLegalHoldStatus::OFF
    };
    ObjectLockLegalHoldStatus::from(s.to_string())
}

pub(super) async fn put_object_lock_configuration(
    svc: &StowS3,
    req: S3Request<PutObjectLockConfigurationInput>,
) -> S3Result<S3Response<PutObjectLockConfigurationOutput>> {
    svc.writable()?;
    let input = req.input;
    let Some(config) = input.object_lock_configuration else {
        return Err(s3_error!(
            MalformedXML,
            "The XML you provided was not well-formed or did not validate against our published schema"
        ));
    };
    let rule = config.rule.as_ref().map(|r| {
        let d = r.default_retention.as_ref();
        store::RuleFields {
            has_retention: d.is_some(),
            mode: d.and_then(|d| d.mode.as_ref()).map(|m| m.as_str()),
            days: d.and_then(|d| d.days),
            years: d.and_then(|d| d.years),
        }
    });
    let fields = store::LockConfigFields {
        enabled: config.object_lock_enabled.as_ref().map(|e| e.as_str()),
        rule,
    };
    let config = store::validate_lock_config(&fields).map_err(crate::errors::to_s3)?;
    let store = svc.store.clone();
    let bucket = input.bucket;
    blocking(move || store.set_bucket_object_lock(&bucket, config)).await?;
    Ok(S3Response::new(PutObjectLockConfigurationOutput::default()))
}

pub(super) async fn get_object_lock_configuration(
    svc: &StowS3,
    req: S3Request<GetObjectLockConfigurationInput>,
) -> S3Result<S3Response<GetObjectLockConfigurationOutput>> {
    let bucket = req.input.bucket;
    let config = svc
        .point_read(move |store| store.bucket_object_lock(&bucket))
        .await?;
    let Some(config) = config else {
        return Err(s3_error!(
            ObjectLockConfigurationNotFoundError,
            "Object Lock configuration does not exist for this bucket"
        ));
    };
    let rule = config.default_retention.map(|d| {
        let (days, years) = match d.period {
            store::RetentionPeriod::Days(n) => (Some(n as i32), None),
            store::RetentionPeriod::Years(n) => (None, Some(n as i32)),
        };
        ObjectLockRule {
            default_retention: Some(DefaultRetention {
                mode: Some(ObjectLockRetentionMode::from(d.mode.as_str().to_string())),
                days,
                years,
            }),
        }
    });
    Ok(S3Response::new(GetObjectLockConfigurationOutput {
        object_lock_configuration: Some(ObjectLockConfiguration {
            object_lock_enabled: Some(ObjectLockEnabled::from(
                ObjectLockEnabled::ENABLED.to_string(),
            )),
            rule,
        }),
    }))
}

pub(super) async fn put_object_retention(
    svc: &StowS3,
    req: S3Request<PutObjectRetentionInput>,
) -> S3Result<S3Response<PutObjectRetentionOutput>> {
    svc.writable()?;
    let input = req.input;
    let retention = input.retention.unwrap_or_default();
    let retention = match (retention.mode, retention.retain_until_date) {
        (None, None) => None,
        (Some(mode), Some(until)) => Some(Retention {
            mode: LockMode::parse(mode.as_str())
                .ok_or_else(|| s3_error!(MalformedXML, "Mode must be GOVERNANCE or COMPLIANCE"))?,
            until_ns: to_ns(&until),
        }),
        _ => {
            return Err(s3_error!(
                MalformedXML,
                "a Retention needs both Mode and RetainUntilDate"
            ))
        }
    };
    let bypass = input.bypass_governance_retention.unwrap_or(false);
    let store = svc.store.clone();
    let (bucket, key, version) = (input.bucket, input.key, input.version_id);
    blocking(move || {
        store.set_object_retention(&bucket, &key, version.as_deref(), retention, bypass)
    })
    .await?;
    Ok(S3Response::new(PutObjectRetentionOutput::default()))
}

pub(super) async fn get_object_retention(
    svc: &StowS3,
    req: S3Request<GetObjectRetentionInput>,
) -> S3Result<S3Response<GetObjectRetentionOutput>> {
    let input = req.input;
    let (bucket, key, version) = (input.bucket, input.key, input.version_id);
    let lock = svc
        .point_read(move |store| store.object_lock(&bucket, &key, version.as_deref()))
        .await?;
    let Some(r) = lock.retention else {
        return Err(s3_error!(
            NoSuchObjectLockConfiguration,
            "The specified object does not have a ObjectLock configuration"
        ));
    };
    Ok(S3Response::new(GetObjectRetentionOutput {
        retention: Some(ObjectLockRetention {
            mode: Some(ObjectLockRetentionMode::from(r.mode.as_str().to_string())),
            retain_until_date: Some(to_timestamp(r.until_ns)),
        }),
    }))
}

pub(super) async fn put_object_legal_hold(
    svc: &StowS3,
    req: S3Request<PutObjectLegalHoldInput>,
) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
    svc.writable()?;
    let input = req.input;
    let status = input.legal_hold.and_then(|h| h.status).ok_or_else(|| {
        s3_error!(
            MalformedXML,
            "The XML you provided was not well-formed or did not validate against our published schema"
        )
    })?;
    let on = match status.as_str() {
        ObjectLockLegalHoldStatus::ON => true,
        ObjectLockLegalHoldStatus::OFF => false,
        _ => return Err(s3_error!(MalformedXML, "Status must be ON or OFF")),
    };
    let store = svc.store.clone();
    let (bucket, key, version) = (input.bucket, input.key, input.version_id);
    blocking(move || store.set_object_legal_hold(&bucket, &key, version.as_deref(), on)).await?;
    Ok(S3Response::new(PutObjectLegalHoldOutput::default()))
}

pub(super) async fn get_object_legal_hold(
    svc: &StowS3,
    req: S3Request<GetObjectLegalHoldInput>,
) -> S3Result<S3Response<GetObjectLegalHoldOutput>> {
    let input = req.input;
    let (bucket, key, version) = (input.bucket, input.key, input.version_id);
    let lock = svc
        .point_read(move |store| store.object_lock(&bucket, &key, version.as_deref()))
        .await?;
    let Some(on) = lock.legal_hold else {
        return Err(s3_error!(
            NoSuchObjectLockConfiguration,
            "The specified object does not have a ObjectLock configuration"
        ));
    };
    Ok(S3Response::new(GetObjectLegalHoldOutput {
        legal_hold: Some(ObjectLockLegalHold {
            status: Some(hold_status(on)),
        }),
    }))
}
