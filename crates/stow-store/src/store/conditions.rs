//! Write conditions (`If-Match`, `If-None-Match` on writes) and read
//! conditions, with the store's errors.

use crate::error::{no_such_key, Result, StoreError};
use crate::model::*;
use crate::record::{self, Record};

pub(crate) fn check_write_condition(
    cond: &WriteCondition,
    old: Option<&Record>,
    bucket: &str,
    key: &str,
) -> Result<()> {
    cond.check(old.map(|o| o.etag.as_str()), bucket, key)
}

impl WriteCondition {
    /// Checks the condition against the ETag of the object now at
    /// `bucket/key` (`None` when there is none), with the store's errors:
    /// `precondition_failed`, or `no_such_key` for `If-Match` on nothing.
    pub fn check(&self, current_etag: Option<&str>, bucket: &str, key: &str) -> Result<()> {
        match (self, current_etag) {
            (WriteCondition::Always, _) | (WriteCondition::IfAbsent, None) => Ok(()),
            (WriteCondition::IfAbsent, Some(_)) => Err(StoreError::PreconditionFailed {
                reason: "the object already exists",
            }),
            (WriteCondition::IfMatch(_), None) => Err(no_such_key(bucket, key)),
            (WriteCondition::IfMatch(tag), Some(etag)) => {
                if record::etag_matches(tag, etag) {
                    Ok(())
                } else {
                    Err(StoreError::PreconditionFailed {
                        reason: "the object's ETag does not match",
                    })
                }
            }
        }
    }
}

/// The result of evaluating HTTP read conditions against an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionCheck {
    Pass,
    /// 304: `If-None-Match` matched or `If-Modified-Since` was not exceeded.
    NotModified,
    /// 412: `If-Match` or `If-Unmodified-Since` failed.
    PreconditionFailed,
}

impl ReadConditions {
    /// Evaluates the conditions with S3's precedence: a passing `If-Match`
    /// overrides `If-Unmodified-Since`, a failing `If-None-Match` overrides
    /// `If-Modified-Since`. Times compare at whole seconds.
    pub fn check(&self, meta: &ObjectMeta) -> ConditionCheck {
        let secs = |ns: i64| ns.div_euclid(1_000_000_000);
        let modified = secs(meta.last_modified_ns);
        if let Some(tag) = &self.if_match {
            if !record::etag_matches(tag, &meta.etag) {
                return ConditionCheck::PreconditionFailed;
            }
        } else if let Some(t) = self.if_unmodified_since_ns {
            if modified > secs(t) {
                return ConditionCheck::PreconditionFailed;
            }
        }
        if let Some(tag) = &self.if_none_match {
            if record::etag_matches(tag, &meta.etag) {
                return ConditionCheck::NotModified;
            }
        } else if let Some(t) = self.if_modified_since_ns {
            if modified <= secs(t) {
                return ConditionCheck::NotModified;
            }
        }
        ConditionCheck::Pass
    }
}
