//! S3 lifecycle: a bucket's rules (`buckets.lifecycle`, JSON; NULL = none),
//! validated as S3's PutBucketLifecycleConfiguration validates them, and
//! what they mean: which versions and uploads are due (`eval`), the
//! background expiry that removes them (`expire`), and the store's API
//! (`api`).
//!
//! **Days.** S3 counts a rule's days from the object's modification time
//! (a noncurrent version's from the moment it became noncurrent, an
//! upload's from its initiation) and rounds the result up to the next
//! midnight UTC ([`DayLength::Utc`]). For tests, `serve
//! --lifecycle-day-seconds N` makes a day N seconds counted from that same
//! instant, with no rounding ([`DayLength::Seconds`]). The
//! `x-amz-expiration` a response carries always states S3's date (real
//! days, next midnight), as Ceph's debug interval leaves it too: the flag
//! changes when the server expires, not what it tells clients.
//!
//! **Locks.** Expiry deletes only through the store's ordinary delete
//! paths, without the governance bypass: a version under retention or a
//! legal hold is never removed. Expiring a current version in a versioned
//! bucket writes a delete marker, which removes nothing (as on S3, it is
//! allowed over a locked version).
//!
//! **Transitions** (and noncurrent transitions) are validated, stored and
//! returned; stow-s3 has one storage class, so they move nothing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};

mod api;
pub(crate) mod eval;
mod expire;

pub use expire::ExpiryReport;

/// The most rules one configuration holds (S3's limit).
pub const MAX_LIFECYCLE_RULES: usize = 1000;
/// The longest rule ID, in characters (S3's limit).
pub const MAX_LIFECYCLE_ID_CHARS: usize = 255;
/// The most noncurrent versions `NewerNoncurrentVersions` may keep.
pub const MAX_NEWER_NONCURRENT: i64 = 100;
/// The storage classes a transition may name (S3's).
pub const TRANSITION_CLASSES: [&str; 6] = [
    "GLACIER",
    "STANDARD_IA",
    "ONEZONE_IA",
    "INTELLIGENT_TIERING",
    "DEEP_ARCHIVE",
    "GLACIER_IR",
];
/// The values `TransitionDefaultMinimumObjectSize` may take.
pub const TRANSITION_MINIMUM_SIZES: [&str; 2] =
    ["all_storage_classes_128K", "varies_by_storage_class"];

const SECOND_NS: i64 = 1_000_000_000;
const DAY_SECONDS: i64 = 86_400;

/// How long a lifecycle "day" is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DayLength {
    /// S3's: 24 hours, the due time rounded up to the next midnight UTC.
    #[default]
    Utc,
    /// A day of this many seconds, counted from the start instant, not
    /// rounded (for tests).
    Seconds(u64),
}

impl DayLength {
    /// The instant (ns since the epoch) `days` days after `from_ns`.
    pub fn after(self, from_ns: i64, days: i64) -> i64 {
        match self {
            DayLength::Utc => {
                let day_ns = DAY_SECONDS * SECOND_NS;
                let start_day = from_ns.div_euclid(day_ns);
                start_day
                    .saturating_add(days.saturating_add(1))
                    .saturating_mul(day_ns)
            }
            DayLength::Seconds(n) => {
                let n = i64::try_from(n).unwrap_or(i64::MAX);
                from_ns.saturating_add(days.saturating_mul(n).saturating_mul(SECOND_NS))
            }
        }
    }
}

/// A rule's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RuleStatus {
    Enabled,
    Disabled,
}

impl RuleStatus {
    /// Parses S3's spelling (exact): anything else is
    /// `malformed_lifecycle`, as S3 answers.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "Enabled" => Ok(Self::Enabled),
            "Disabled" => Ok(Self::Disabled),
            _ => Err(malformed(format!(
                "Status must be Enabled or Disabled, not {s:?}"
            ))),
        }
    }

    /// S3's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Enabled => "Enabled",
            Self::Disabled => "Disabled",
        }
    }
}

/// A tag a filter asks for (key and value, both as sent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilterTag {
    pub key: String,
    pub value: String,
}

/// The predicates of a filter's `And` (all must hold).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilterAnd {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<FilterTag>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_greater_than: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_less_than: Option<i64>,
}

/// A rule's `Filter`, as sent: at most one of its members (an empty
/// filter matches everything).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecycleFilter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<FilterTag>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_greater_than: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_less_than: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub and: Option<FilterAnd>,
}

/// A rule's `Expiration`: exactly one of its members.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expiration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days: Option<i64>,
    /// Midnight UTC, in nanoseconds since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date_ns: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expired_object_delete_marker: Option<bool>,
}

/// A rule's `NoncurrentVersionExpiration`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoncurrentExpiration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noncurrent_days: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newer_noncurrent_versions: Option<i64>,
}

/// A `Transition` or `NoncurrentVersionTransition` (stored, no effect).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    /// `Days` (a transition) or `NoncurrentDays` (a noncurrent one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days: Option<i64>,
    /// Midnight UTC, in nanoseconds (transitions only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date_ns: Option<i64>,
    /// Noncurrent transitions only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newer_noncurrent_versions: Option<i64>,
    pub storage_class: String,
}

/// One lifecycle rule, as S3's PutBucketLifecycleConfiguration takes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecycleRule {
    /// The rule's ID; one is made up when the request names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub status: RuleStatus,
    /// The rule-level `Prefix` (S3's older form of a filter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<LifecycleFilter>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration: Option<Expiration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noncurrent_expiration: Option<NoncurrentExpiration>,
    /// `AbortIncompleteMultipartUpload`'s `DaysAfterInitiation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort_upload_days: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transitions: Vec<Transition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub noncurrent_transitions: Vec<Transition>,
}

/// A bucket's lifecycle configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecycleConfig {
    pub rules: Vec<LifecycleRule>,
    /// `TransitionDefaultMinimumObjectSize`, as sent (stored, no effect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transition_minimum_size: Option<String>,
}

/// When a current version expires by its bucket's rules, and by which
/// (S3's `x-amz-expiration`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectExpiration {
    /// Nanoseconds since the epoch (a midnight UTC).
    pub at_ns: i64,
    pub rule_id: String,
}

fn malformed(reason: String) -> StoreError {
    StoreError::MalformedLifecycle { reason }
}

fn invalid(reason: impl Into<String>) -> StoreError {
    StoreError::InvalidArgument {
        reason: reason.into(),
    }
}

/// Checks a whole configuration as S3 does, and gives every rule without
/// an ID one: 1 to [`MAX_LIFECYCLE_RULES`] rules; IDs of at most
/// [`MAX_LIFECYCLE_ID_CHARS`] characters, unique; each rule with exactly
/// one of a rule-level prefix or a filter, a filter with at most one
/// member, at least one action, positive days and dates at midnight UTC.
/// Refusals: `malformed_lifecycle` (S3's MalformedXML), `invalid_argument`
/// (InvalidArgument) and `invalid_lifecycle` (InvalidRequest).
pub fn validate_lifecycle(config: &mut LifecycleConfig) -> Result<()> {
    if config.rules.is_empty() {
        return Err(malformed(
            "a lifecycle configuration holds at least one Rule".into(),
        ));
    }
    if config.rules.len() > MAX_LIFECYCLE_RULES {
        return Err(malformed(format!(
            "a lifecycle configuration holds at most {MAX_LIFECYCLE_RULES} rules; this one has {}",
            config.rules.len()
        )));
    }
    if let Some(size) = &config.transition_minimum_size {
        if !TRANSITION_MINIMUM_SIZES.contains(&size.as_str()) {
            return Err(invalid(format!(
                "TransitionDefaultMinimumObjectSize must be one of {TRANSITION_MINIMUM_SIZES:?}"
            )));
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for rule in &mut config.rules {
        validate_rule(rule)?;
        let id = rule.id.get_or_insert_with(new_rule_id);
        if !seen.insert(id.clone()) {
            return Err(invalid(
                "Rule ID must be unique. Found same ID for more than one rule",
            ));
        }
    }
    Ok(())
}

/// An ID for a rule sent without one (S3 makes one up too).
fn new_rule_id() -> String {
    crate::hex(&rand::random::<[u8; 16]>())
}

fn validate_rule(rule: &LifecycleRule) -> Result<()> {
    if let Some(id) = &rule.id {
        if id.chars().count() > MAX_LIFECYCLE_ID_CHARS {
            return Err(invalid(format!(
                "ID length should not exceed allowed limit of {MAX_LIFECYCLE_ID_CHARS}"
            )));
        }
    }
    match (&rule.prefix, &rule.filter) {
        (Some(_), Some(_)) => {
            return Err(malformed(
                "a Rule has either a Prefix or a Filter, not both".into(),
            ))
        }
        (None, None) => return Err(malformed("a Rule needs a Filter or a Prefix".into())),
        (None, Some(f)) => validate_filter(f)?,
        (Some(_), None) => {}
    }
    let has_tags = rule
        .filter
        .as_ref()
        .is_some_and(|f| f.tag.is_some() || f.and.as_ref().is_some_and(|a| !a.tags.is_empty()));
    let no_action = rule.expiration.is_none()
        && rule.noncurrent_expiration.is_none()
        && rule.abort_upload_days.is_none()
        && rule.transitions.is_empty()
        && rule.noncurrent_transitions.is_empty();
    if no_action {
        return Err(StoreError::InvalidLifecycle {
            reason: "At least one action needs to be specified in a rule".into(),
        });
    }
    if let Some(e) = &rule.expiration {
        validate_expiration(e, has_tags)?;
    }
    if let Some(n) = &rule.noncurrent_expiration {
        validate_noncurrent(n)?;
    }
    if let Some(days) = rule.abort_upload_days {
        if days <= 0 {
            return Err(invalid(
                "'DaysAfterInitiation' for AbortIncompleteMultipartUpload action must be a positive integer",
            ));
        }
        if has_tags {
            return Err(invalid(
                "AbortIncompleteMultipartUpload cannot be specified with Tags.",
            ));
        }
    }
    for t in &rule.transitions {
        validate_transition(t, false)?;
    }
    for t in &rule.noncurrent_transitions {
        validate_transition(t, true)?;
    }
    Ok(())
}

fn validate_filter(f: &LifecycleFilter) -> Result<()> {
    let members = [
        f.prefix.is_some(),
        f.tag.is_some(),
        f.size_greater_than.is_some(),
        f.size_less_than.is_some(),
        f.and.is_some(),
    ];
    if members.iter().filter(|m| **m).count() > 1 {
        return Err(malformed(
            "a Filter holds one of Prefix, Tag, ObjectSizeGreaterThan, ObjectSizeLessThan or \
             And; use And to combine them"
                .into(),
        ));
    }
    if let Some(tag) = &f.tag {
        validate_tag(tag)?;
    }
    check_sizes(f.size_greater_than, f.size_less_than)?;
    if let Some(and) = &f.and {
        let predicates = usize::from(and.prefix.is_some())
            + and.tags.len()
            + usize::from(and.size_greater_than.is_some())
            + usize::from(and.size_less_than.is_some());
        if predicates < 2 {
            return Err(malformed(
                "an And combines two or more of Prefix, Tag, ObjectSizeGreaterThan and \
                 ObjectSizeLessThan"
                    .into(),
            ));
        }
        let mut keys = std::collections::BTreeSet::new();
        for tag in &and.tags {
            validate_tag(tag)?;
            if !keys.insert(tag.key.as_str()) {
                return Err(invalid("Duplicate Tag Keys are not allowed."));
            }
        }
        check_sizes(and.size_greater_than, and.size_less_than)?;
    }
    Ok(())
}

fn validate_tag(tag: &FilterTag) -> Result<()> {
    if tag.key.is_empty() || tag.key.chars().count() > 128 {
        return Err(invalid("a filter's tag key must be 1 to 128 characters"));
    }
    if tag.value.chars().count() > 256 {
        return Err(invalid(
            "a filter's tag value must be at most 256 characters",
        ));
    }
    Ok(())
}

fn check_sizes(greater: Option<i64>, less: Option<i64>) -> Result<()> {
    if greater.is_some_and(|g| g < 0) || less.is_some_and(|l| l <= 0) {
        return Err(invalid(
            "ObjectSizeGreaterThan must not be negative and ObjectSizeLessThan must be positive",
        ));
    }
    if let (Some(g), Some(l)) = (greater, less) {
        if g >= l {
            return Err(invalid(
                "ObjectSizeGreaterThan must be less than ObjectSizeLessThan",
            ));
        }
    }
    Ok(())
}

fn validate_expiration(e: &Expiration, has_tags: bool) -> Result<()> {
    let set = [
        e.days.is_some(),
        e.date_ns.is_some(),
        e.expired_object_delete_marker.is_some(),
    ];
    match set.iter().filter(|s| **s).count() {
        0 => {
            return Err(malformed(
                "an Expiration needs Days, Date or ExpiredObjectDeleteMarker".into(),
            ))
        }
        1 => {}
        _ => {
            return Err(malformed(
                "an Expiration holds one of Days, Date or ExpiredObjectDeleteMarker".into(),
            ))
        }
    }
    if e.days.is_some_and(|d| d <= 0) {
        return Err(invalid(
            "'Days' for Expiration action must be a positive integer",
        ));
    }
    if let Some(date) = e.date_ns {
        check_midnight(date)?;
    }
    if e.expired_object_delete_marker.is_some() && has_tags {
        return Err(invalid(
            "ExpiredObjectDeleteMarker cannot be specified with a tag filter",
        ));
    }
    Ok(())
}

fn check_midnight(date_ns: i64) -> Result<()> {
    if date_ns.rem_euclid(DAY_SECONDS * SECOND_NS) != 0 {
        return Err(invalid("'Date' must be at midnight GMT"));
    }
    Ok(())
}

fn validate_noncurrent(n: &NoncurrentExpiration) -> Result<()> {
    if n.noncurrent_days.is_none() && n.newer_noncurrent_versions.is_none() {
        return Err(malformed(
            "a NoncurrentVersionExpiration needs NoncurrentDays".into(),
        ));
    }
    if n.noncurrent_days.is_some_and(|d| d <= 0) {
        return Err(invalid(
            "'NoncurrentDays' for NoncurrentVersionExpiration action must be a positive integer",
        ));
    }
    if n.newer_noncurrent_versions
        .is_some_and(|v| !(1..=MAX_NEWER_NONCURRENT).contains(&v))
    {
        return Err(invalid(format!(
            "'NewerNoncurrentVersions' must be 1 to {MAX_NEWER_NONCURRENT}"
        )));
    }
    Ok(())
}

fn validate_transition(t: &Transition, noncurrent: bool) -> Result<()> {
    if !TRANSITION_CLASSES.contains(&t.storage_class.as_str()) {
        return Err(malformed(format!(
            "a transition's StorageClass must be one of {TRANSITION_CLASSES:?}"
        )));
    }
    match (t.days, t.date_ns) {
        (Some(_), Some(_)) | (None, None) if !noncurrent => {
            return Err(malformed(
                "a Transition needs Days or Date, not both".into(),
            ))
        }
        (None, _) if noncurrent => {
            return Err(malformed(
                "a NoncurrentVersionTransition needs NoncurrentDays".into(),
            ))
        }
        _ => {}
    }
    if t.days.is_some_and(|d| d < 0) {
        return Err(invalid("'Days' for a transition must not be negative"));
    }
    if let Some(date) = t.date_ns {
        check_midnight(date)?;
    }
    Ok(())
}

/// Reads `buckets.lifecycle`.
pub(crate) fn from_column(bucket: &str, value: Option<String>) -> Result<Option<LifecycleConfig>> {
    value
        .map(|v| {
            serde_json::from_str(&v).map_err(|e| {
                StoreError::Corrupt(format!(
                    "bucket {bucket} has unreadable lifecycle rules: {e}"
                ))
            })
        })
        .transpose()
}

/// A version or upload as the rules see it: `size` and `tags` are `None`
/// for a delete marker or an upload (which have neither).
pub(crate) struct Subject<'a> {
    pub key: &'a str,
    pub size: Option<u64>,
    pub tags: Option<&'a BTreeMap<String, String>>,
}

#[cfg(test)]
mod tests;
