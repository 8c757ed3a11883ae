//! S3 Object Lock: a bucket's lock configuration (`buckets.object_lock`,
//! JSON; NULL = object lock not enabled) and a version's retention and
//! legal hold (kept in its properties, [`ObjectProps::lock`], so they move
//! with the version between `objects` and `versions`), and the rules a
//! write, a retention change and a delete follow inside their transaction.
//!
//! A version is *locked* while its legal hold is on or its retention date
//! is in the future; COMPLIANCE retention binds everyone, GOVERNANCE
//! everyone who does not ask to bypass it. Lock only exists in buckets
//! created with it, which are always versioned (never suspended), so an
//! overwrite or a delete without a version ID never removes a version.
//!
//! [`ObjectProps::lock`]: crate::ObjectProps

use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};

/// Nanoseconds in a day, and in a year of retention (365 days).
const DAY_NS: i64 = 86_400 * 1_000_000_000;

/// A retention mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum LockMode {
    /// Shortened or removed only with the bypass (S3's
    /// `x-amz-bypass-governance-retention: true`).
    Governance,
    /// Never shortened or removed until it expires; only extended.
    Compliance,
}

impl LockMode {
    /// S3's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Governance => "GOVERNANCE",
            Self::Compliance => "COMPLIANCE",
        }
    }

    /// Parses S3's spelling (exact).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "GOVERNANCE" => Some(Self::Governance),
            "COMPLIANCE" => Some(Self::Compliance),
            _ => None,
        }
    }
}

/// A version's retention: its mode and the instant it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    pub mode: LockMode,
    /// Nanoseconds since the Unix epoch.
    pub until_ns: i64,
}

/// A version's object lock state. On a write, what the request asked for
/// (empty: the bucket's default retention applies).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectLock {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<Retention>,
    /// `None`: never set (S3 then has no legal hold to show).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub legal_hold: Option<bool>,
}

impl ObjectLock {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.retention.is_none() && self.legal_hold.is_none()
    }

    /// Why this version cannot be deleted at `now_ns` (`None`: it can).
    pub fn refusal(&self, now_ns: i64, bypass_governance: bool) -> Option<&'static str> {
        if self.legal_hold == Some(true) {
            return Some("the version is under a legal hold");
        }
        match self.retention {
            Some(r) if r.until_ns > now_ns => match r.mode {
                LockMode::Compliance => Some("the version is under COMPLIANCE retention"),
                LockMode::Governance if !bypass_governance => {
                    Some("the version is under GOVERNANCE retention")
                }
                LockMode::Governance => None,
            },
            _ => None,
        }
    }
}

/// How long a bucket's default retention lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RetentionPeriod {
    Days(u32),
    /// Years of 365 days.
    Years(u32),
}

impl RetentionPeriod {
    fn nanos(self) -> i64 {
        match self {
            Self::Days(d) => i64::from(d).saturating_mul(DAY_NS),
            Self::Years(y) => i64::from(y).saturating_mul(365 * DAY_NS),
        }
    }
}

/// The retention every new version of a bucket gets when its write names
/// none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefaultRetention {
    pub mode: LockMode,
    pub period: RetentionPeriod,
}

/// A bucket's object lock configuration (S3's ObjectLockConfiguration with
/// `ObjectLockEnabled: Enabled`): a bucket has one exactly when it was
/// created with object lock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_retention: Option<DefaultRetention>,
}

/// The fields of a PutObjectLockConfiguration document, as sent.
#[derive(Debug, Clone, Default)]
pub struct LockConfigFields<'a> {
    /// `ObjectLockEnabled` (must be `Enabled`).
    pub enabled: Option<&'a str>,
    /// `Some` when the document has a `Rule`.
    pub rule: Option<RuleFields<'a>>,
}

/// The fields of a `Rule`'s `DefaultRetention`, as sent (`None` for the
/// retention itself when the rule has none).
#[derive(Debug, Clone, Default)]
pub struct RuleFields<'a> {
    pub has_retention: bool,
    pub mode: Option<&'a str>,
    pub days: Option<i32>,
    pub years: Option<i32>,
}

/// Validates a PutObjectLockConfiguration document as S3 does: not
/// `Enabled`, a rule without a retention or a mode, an unknown mode, both
/// days and years or neither are `malformed_lock_configuration`; a period
/// that is not positive is `invalid_retention_period`.
pub fn validate_lock_config(fields: &LockConfigFields<'_>) -> Result<LockConfig> {
    let malformed = |reason: &str| StoreError::MalformedLockConfiguration {
        reason: reason.to_string(),
    };
    if fields.enabled != Some("Enabled") {
        return Err(malformed("ObjectLockEnabled must be Enabled"));
    }
    let Some(rule) = &fields.rule else {
        return Ok(LockConfig::default());
    };
    if !rule.has_retention {
        return Err(malformed("a Rule needs a DefaultRetention"));
    }
    let mode = rule
        .mode
        .ok_or_else(|| malformed("a DefaultRetention needs a Mode"))?;
    let mode =
        LockMode::parse(mode).ok_or_else(|| malformed("Mode must be GOVERNANCE or COMPLIANCE"))?;
    let (value, make): (i32, fn(u32) -> RetentionPeriod) = match (rule.days, rule.years) {
        (Some(d), None) => (d, RetentionPeriod::Days),
        (None, Some(y)) => (y, RetentionPeriod::Years),
        _ => {
            return Err(malformed(
                "a DefaultRetention needs Days or Years, not both",
            ))
        }
    };
    let period = u32::try_from(value)
        .ok()
        .filter(|v| *v > 0)
        .map(make)
        .ok_or(StoreError::InvalidRetentionPeriod)?;
    Ok(LockConfig {
        default_retention: Some(DefaultRetention { mode, period }),
    })
}

/// Reads `buckets.object_lock`.
pub(crate) fn from_column(bucket: &str, value: Option<String>) -> Result<Option<LockConfig>> {
    value
        .map(|v| {
            serde_json::from_str(&v).map_err(|e| {
                StoreError::Corrupt(format!("bucket {bucket} has a bad object lock column: {e}"))
            })
        })
        .transpose()
}

/// Writes `buckets.object_lock`.
pub(crate) fn to_column(config: &LockConfig) -> Result<String> {
    serde_json::to_string(config)
        .map_err(|e| StoreError::Corrupt(format!("cannot encode object lock: {e}")))
}

/// The lock a new version gets, given what its write asked for and its
/// bucket's configuration: asking anything of a bucket without lock is
/// `object_lock_not_enabled`; a retention date must be in the future
/// (`invalid_argument`); without one, the bucket's default retention
/// applies from `now_ns`.
pub(crate) fn on_write(
    config: Option<LockConfig>,
    lock: &mut ObjectLock,
    now_ns: i64,
) -> Result<()> {
    let Some(config) = config else {
        if lock.is_empty() {
            return Ok(());
        }
        return Err(StoreError::ObjectLockNotEnabled);
    };
    check_future(lock.retention, now_ns)?;
    if lock.retention.is_none() {
        lock.retention = config.default_retention.map(|d| Retention {
            mode: d.mode,
            until_ns: now_ns.saturating_add(d.period.nanos()),
        });
    }
    Ok(())
}

fn check_future(retention: Option<Retention>, now_ns: i64) -> Result<()> {
    match retention {
        Some(r) if r.until_ns <= now_ns => Err(StoreError::InvalidArgument {
            reason: "The retain until date must be in the future!".into(),
        }),
        _ => Ok(()),
    }
}

/// Whether `old` may become `new` at `now_ns`: a retention in force may
/// be extended in its own mode; shortening, removing it or changing its
/// mode needs the bypass for GOVERNANCE (as AWS answers, even towards
/// COMPLIANCE) and is never allowed for COMPLIANCE (`object_locked`). A
/// new date must be in the future.
pub(crate) fn change_retention(
    old: Option<Retention>,
    new: Option<Retention>,
    now_ns: i64,
    bypass_governance: bool,
) -> Result<()> {
    check_future(new, now_ns)?;
    let Some(old) = old.filter(|o| o.until_ns > now_ns) else {
        return Ok(());
    };
    let extends = new.is_some_and(|n| n.until_ns >= old.until_ns && n.mode == old.mode);
    if extends {
        return Ok(());
    }
    match old.mode {
        LockMode::Governance if bypass_governance => Ok(()),
        LockMode::Governance => Err(StoreError::ObjectLocked {
            reason: "GOVERNANCE retention is shortened or removed only with the bypass".into(),
        }),
        LockMode::Compliance => Err(StoreError::ObjectLocked {
            reason: "COMPLIANCE retention can only be extended".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ret(mode: LockMode, until_ns: i64) -> Option<Retention> {
        Some(Retention { mode, until_ns })
    }

    #[test]
    fn retention_changes_follow_the_mode() {
        use LockMode::*;
        let now = 1_000;
        assert!(change_retention(ret(Governance, 2000), ret(Governance, 3000), now, false).is_ok());
        assert!(
            change_retention(ret(Governance, 2000), ret(Governance, 1500), now, false).is_err()
        );
        assert!(change_retention(ret(Governance, 2000), ret(Governance, 1500), now, true).is_ok());
        assert!(change_retention(ret(Governance, 2000), None, now, true).is_ok());
        assert!(
            change_retention(ret(Governance, 2000), ret(Compliance, 2000), now, false).is_err()
        );
        assert!(change_retention(ret(Governance, 2000), ret(Compliance, 2000), now, true).is_ok());
        assert!(change_retention(ret(Compliance, 2000), ret(Compliance, 3000), now, false).is_ok());
        for bypass in [false, true] {
            for new in [None, ret(Compliance, 1500), ret(Governance, 3000)] {
                let e = change_retention(ret(Compliance, 2000), new, now, bypass).unwrap_err();
                assert_eq!(e.code(), "object_locked");
            }
        }
        // Expired retention binds nothing; a new date must be ahead.
        assert!(change_retention(ret(Compliance, 500), None, now, false).is_ok());
        let e = change_retention(None, ret(Governance, 900), now, false).unwrap_err();
        assert_eq!(e.code(), "invalid_argument");
    }

    #[test]
    fn configurations_are_validated_as_s3_does() {
        let rule = |mode, days, years| LockConfigFields {
            enabled: Some("Enabled"),
            rule: Some(RuleFields {
                has_retention: true,
                mode,
                days,
                years,
            }),
        };
        let ok = validate_lock_config(&rule(Some("COMPLIANCE"), None, Some(2))).unwrap();
        assert_eq!(
            ok.default_retention.map(|d| d.period),
            Some(RetentionPeriod::Years(2))
        );
        for (fields, code) in [
            (LockConfigFields::default(), "malformed_lock_configuration"),
            (
                rule(Some("abc"), Some(1), None),
                "malformed_lock_configuration",
            ),
            (rule(None, Some(1), None), "malformed_lock_configuration"),
            (
                rule(Some("GOVERNANCE"), Some(1), Some(1)),
                "malformed_lock_configuration",
            ),
            (
                rule(Some("GOVERNANCE"), None, None),
                "malformed_lock_configuration",
            ),
            (
                rule(Some("GOVERNANCE"), Some(0), None),
                "invalid_retention_period",
            ),
            (
                rule(Some("GOVERNANCE"), None, Some(-1)),
                "invalid_retention_period",
            ),
        ] {
            assert_eq!(
                validate_lock_config(&fields).unwrap_err().code(),
                code,
                "{fields:?}"
            );
        }
    }
}
