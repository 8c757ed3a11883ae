//! What a configuration means for one key's versions or one upload: which
//! rules match, when each is due, and what expiry does now. Pure: the
//! expiry job (`expire`) reads the rows and acts; the read paths ask for a
//! current version's `x-amz-expiration`.

use std::collections::BTreeMap;

use super::{DayLength, LifecycleConfig, LifecycleRule, ObjectExpiration, RuleStatus, Subject};

impl LifecycleRule {
    fn enabled(&self) -> bool {
        self.status == RuleStatus::Enabled
    }

    fn id_or_empty(&self) -> &str {
        self.id.as_deref().unwrap_or("")
    }

    /// Whether the rule's filter (or rule-level prefix) selects `s`. A
    /// subject without tags (a delete marker, an upload) never matches a
    /// tag filter; one without a size (the same) passes size filters.
    pub(crate) fn matches(&self, s: &Subject<'_>) -> bool {
        let Some(f) = &self.filter else {
            return self.prefix.as_deref().is_none_or(|p| s.key.starts_with(p));
        };
        let and = f.and.clone().unwrap_or_default();
        let prefixes = [f.prefix.as_deref(), and.prefix.as_deref()];
        if prefixes.iter().flatten().any(|p| !s.key.starts_with(p)) {
            return false;
        }
        let wanted = f.tag.iter().chain(and.tags.iter());
        for tag in wanted {
            let has = s
                .tags
                .is_some_and(|t| t.get(&tag.key).is_some_and(|v| *v == tag.value));
            if !has {
                return false;
            }
        }
        if let Some(size) = s.size {
            let greater = [f.size_greater_than, and.size_greater_than];
            if greater.iter().flatten().any(|g| size as i64 <= *g) {
                return false;
            }
            let less = [f.size_less_than, and.size_less_than];
            if less.iter().flatten().any(|l| size as i64 >= *l) {
                return false;
            }
        }
        true
    }

    /// When this rule's `Expiration` (Days or Date) expires a version
    /// modified at `modified_ns`.
    fn expires_at(&self, modified_ns: i64, day: DayLength) -> Option<i64> {
        let e = self.expiration.as_ref()?;
        match (e.days, e.date_ns) {
            (Some(days), _) => Some(day.after(modified_ns, days)),
            (None, Some(date)) => Some(date),
            (None, None) => None,
        }
    }
}

impl LifecycleConfig {
    fn enabled(&self) -> impl Iterator<Item = &LifecycleRule> {
        self.rules.iter().filter(|r| r.enabled())
    }

    /// The `x-amz-expiration` of a current version: the earliest instant
    /// an enabled rule's Days (in S3's days) or Date expires it, and that
    /// rule's ID; `None` when no rule expires it.
    pub fn expiration_of(
        &self,
        key: &str,
        size: u64,
        tags: &BTreeMap<String, String>,
        modified_ns: i64,
    ) -> Option<ObjectExpiration> {
        let s = Subject {
            key,
            size: Some(size),
            tags: Some(tags),
        };
        self.enabled()
            .filter(|r| r.matches(&s))
            .filter_map(|r| {
                let at = r.expires_at(modified_ns, DayLength::Utc)?;
                Some(ObjectExpiration {
                    at_ns: at,
                    rule_id: r.id_or_empty().to_string(),
                })
            })
            .min_by_key(|e| e.at_ns)
    }

    /// When an upload of `key` initiated at `initiated_ns` is aborted by an
    /// enabled rule's AbortIncompleteMultipartUpload (in S3's days), and
    /// by which (S3's `x-amz-abort-date` and `x-amz-abort-rule-id`).
    pub fn abort_of(&self, key: &str, initiated_ns: i64) -> Option<ObjectExpiration> {
        let s = Subject {
            key,
            size: None,
            tags: None,
        };
        self.enabled()
            .filter(|r| r.matches(&s))
            .filter_map(|r| {
                let days = r.abort_upload_days?;
                Some(ObjectExpiration {
                    at_ns: DayLength::Utc.after(initiated_ns, days),
                    rule_id: r.id_or_empty().to_string(),
                })
            })
            .min_by_key(|e| e.at_ns)
    }

    /// Whether an upload of `key` initiated at `initiated_ns` is due to be
    /// aborted at `now_ns` (`AbortIncompleteMultipartUpload`).
    pub(crate) fn upload_due(
        &self,
        key: &str,
        initiated_ns: i64,
        now_ns: i64,
        day: DayLength,
    ) -> bool {
        let s = Subject {
            key,
            size: None,
            tags: None,
        };
        self.enabled().any(|r| {
            r.abort_upload_days
                .is_some_and(|d| day.after(initiated_ns, d) <= now_ns)
                && r.matches(&s)
        })
    }
}

/// One version of a key as expiry sees it.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub seq: i64,
    pub vid: Option<String>,
    pub marker: bool,
    /// The key's current version (its `objects` row).
    pub current: bool,
    pub size: u64,
    pub modified_ns: i64,
    pub tags: BTreeMap<String, String>,
    /// Under retention or a legal hold at the time of planning.
    pub locked: bool,
}

impl Row {
    fn subject<'a>(&'a self, key: &'a str) -> Subject<'a> {
        if self.marker {
            Subject {
                key,
                size: None,
                tags: None,
            }
        } else {
            Subject {
                key,
                size: Some(self.size),
                tags: Some(&self.tags),
            }
        }
    }
}

/// What expiry does to one version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// Expire the current version: removed in an unversioned bucket, a
    /// delete marker written over it in a versioned one.
    ExpireCurrent,
    /// Delete a noncurrent version or a lone delete marker for good.
    Delete { seq: i64, vid: Option<String> },
}

/// The actions due on one key, in the order to take them.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    pub actions: Vec<Action>,
    /// Versions due but kept because they are locked.
    pub locked: u64,
}

/// Plans expiry of one key from its versions, newest first (`rows[0]` is
/// the latest: the current version or a delete marker):
///
/// - the current version, when an enabled rule's Days or Date is due;
/// - each noncurrent version (delete markers included) whose rule's
///   NoncurrentDays have passed since it became noncurrent (its successor's
///   modification) and that has at least NewerNoncurrentVersions newer
///   noncurrent versions; a locked one is counted, never planned;
/// - a latest delete marker left alone (every other version planned for
///   deletion, or none), when a rule has ExpiredObjectDeleteMarker or its
///   Days (from the marker's time) or Date are due.
pub(crate) fn plan_key(
    config: &LifecycleConfig,
    key: &str,
    rows: &[Row],
    now_ns: i64,
    day: DayLength,
) -> Plan {
    let mut plan = Plan::default();
    let Some(top) = rows.first() else {
        return plan;
    };
    let rules: Vec<&LifecycleRule> = config.enabled().collect();
    if top.current && !top.marker {
        let s = top.subject(key);
        let due = rules.iter().any(|r| {
            r.expires_at(top.modified_ns, day)
                .is_some_and(|at| at <= now_ns)
                && r.matches(&s)
        });
        if due {
            plan.actions.push(Action::ExpireCurrent);
        }
    }
    let mut all_others_go = true;
    for (i, row) in rows.iter().enumerate().skip(1) {
        let since = rows[i - 1].modified_ns;
        let newer = (i - 1) as i64;
        let s = row.subject(key);
        let due = rules.iter().any(|r| {
            let Some(n) = &r.noncurrent_expiration else {
                return false;
            };
            n.noncurrent_days
                .is_none_or(|d| day.after(since, d) <= now_ns)
                && n.newer_noncurrent_versions.is_none_or(|keep| newer >= keep)
                && r.matches(&s)
        });
        match (due, row.locked) {
            (true, false) => plan.actions.push(Action::Delete {
                seq: row.seq,
                vid: row.vid.clone(),
            }),
            (true, true) => {
                plan.locked += 1;
                all_others_go = false;
            }
            (false, _) => all_others_go = false,
        }
    }
    if top.marker && all_others_go {
        let s = top.subject(key);
        let due = rules.iter().any(|r| {
            let Some(e) = &r.expiration else {
                return false;
            };
            let at = if e.expired_object_delete_marker == Some(true) {
                Some(i64::MIN)
            } else {
                r.expires_at(top.modified_ns, day)
            };
            at.is_some_and(|at| at <= now_ns) && r.matches(&s)
        });
        if due {
            plan.actions.push(Action::Delete {
                seq: top.seq,
                vid: top.vid.clone(),
            });
        }
    }
    plan
}
