use super::eval::{plan_key, Action, Row};
use super::*;

const DAY_NS: i64 = DAY_SECONDS * SECOND_NS;

fn rule(id: &str) -> LifecycleRule {
    LifecycleRule {
        id: Some(id.into()),
        status: RuleStatus::Enabled,
        prefix: Some(String::new()),
        filter: None,
        expiration: None,
        noncurrent_expiration: None,
        abort_upload_days: None,
        transitions: Vec::new(),
        noncurrent_transitions: Vec::new(),
    }
}

fn expire_days(id: &str, days: i64) -> LifecycleRule {
    LifecycleRule {
        expiration: Some(Expiration {
            days: Some(days),
            ..Default::default()
        }),
        ..rule(id)
    }
}

fn config(rules: Vec<LifecycleRule>) -> LifecycleConfig {
    LifecycleConfig {
        rules,
        transition_minimum_size: None,
    }
}

fn code(rules: Vec<LifecycleRule>) -> &'static str {
    validate_lifecycle(&mut config(rules)).unwrap_err().code()
}

#[test]
fn days_are_s3_days_or_test_seconds() {
    // 2024-01-01T10:00:00Z plus one day: the next midnight after 01-02T10:00.
    let t = 1_704_103_200 * SECOND_NS;
    assert_eq!(DayLength::Utc.after(t, 1), 1_704_240_000 * SECOND_NS);
    // A time at midnight still rounds up to the next one.
    let midnight = 1_704_067_200 * SECOND_NS;
    assert_eq!(DayLength::Utc.after(midnight, 1), midnight + 2 * DAY_NS);
    assert_eq!(DayLength::Seconds(2).after(t, 3), t + 6 * SECOND_NS);
    assert_eq!(DayLength::Seconds(u64::MAX).after(t, 3), i64::MAX);
}

#[test]
fn validation_follows_s3() {
    assert!(validate_lifecycle(&mut config(vec![expire_days("a", 1)])).is_ok());
    assert_eq!(code(vec![]), "malformed_lifecycle");
    assert_eq!(
        code(vec![expire_days(&"i".repeat(256), 1)]),
        "invalid_argument"
    );
    assert!(validate_lifecycle(&mut config(vec![expire_days(&"i".repeat(255), 1)])).is_ok());
    assert_eq!(
        code(vec![expire_days("a", 1), expire_days("a", 2)]),
        "invalid_argument"
    );
    assert_eq!(code(vec![expire_days("a", 0)]), "invalid_argument");
    assert_eq!(code(vec![rule("no-action")]), "invalid_lifecycle");
    // Prefix and filter: one of them, never both.
    let mut both = expire_days("a", 1);
    both.filter = Some(LifecycleFilter::default());
    assert_eq!(code(vec![both.clone()]), "malformed_lifecycle");
    both.prefix = None;
    assert!(validate_lifecycle(&mut config(vec![both.clone()])).is_ok());
    both.filter = None;
    assert_eq!(code(vec![both]), "malformed_lifecycle");
    // A filter holds one member; And combines.
    let mut f = expire_days("a", 1);
    f.prefix = None;
    f.filter = Some(LifecycleFilter {
        prefix: Some("p/".into()),
        size_greater_than: Some(10),
        ..Default::default()
    });
    assert_eq!(code(vec![f.clone()]), "malformed_lifecycle");
    f.filter = Some(LifecycleFilter {
        and: Some(FilterAnd {
            prefix: Some("p/".into()),
            size_greater_than: Some(10),
            size_less_than: Some(5),
            ..Default::default()
        }),
        ..Default::default()
    });
    assert_eq!(code(vec![f.clone()]), "invalid_argument");
    // An And of one predicate is refused (S3 wants two or more).
    f.filter = Some(LifecycleFilter {
        and: Some(FilterAnd {
            prefix: Some("p/".into()),
            ..Default::default()
        }),
        ..Default::default()
    });
    assert_eq!(code(vec![f.clone()]), "malformed_lifecycle");
    // Dates at midnight UTC only; one of Days, Date, the marker flag.
    let mut d = rule("d");
    d.expiration = Some(Expiration {
        date_ns: Some(DAY_NS * 19_000 + SECOND_NS),
        ..Default::default()
    });
    assert_eq!(code(vec![d.clone()]), "invalid_argument");
    d.expiration = Some(Expiration {
        date_ns: Some(DAY_NS * 19_000),
        days: Some(3),
        ..Default::default()
    });
    assert_eq!(code(vec![d.clone()]), "malformed_lifecycle");
    d.expiration = Some(Expiration::default());
    assert_eq!(code(vec![d]), "malformed_lifecycle");
    // Abort and marker flags refuse tag filters.
    let mut t = rule("t");
    t.prefix = None;
    t.filter = Some(LifecycleFilter {
        tag: Some(FilterTag {
            key: "k".into(),
            value: "v".into(),
        }),
        ..Default::default()
    });
    t.abort_upload_days = Some(2);
    assert_eq!(code(vec![t]), "invalid_argument");
    // Transitions are checked too.
    let mut tr = rule("tr");
    tr.transitions = vec![Transition {
        days: Some(30),
        storage_class: "GLACIER".into(),
        ..Default::default()
    }];
    assert!(validate_lifecycle(&mut config(vec![tr.clone()])).is_ok());
    tr.transitions[0].storage_class = "PLATINUM".into();
    assert_eq!(code(vec![tr.clone()]), "malformed_lifecycle");
    tr.transitions[0] = Transition {
        date_ns: Some(1000),
        storage_class: "GLACIER".into(),
        ..Default::default()
    };
    assert_eq!(code(vec![tr]), "invalid_argument");
    assert_eq!(
        RuleStatus::parse("enabled").unwrap_err().code(),
        "malformed_lifecycle"
    );
}

#[test]
fn rules_without_an_id_get_one() {
    let mut c = config(vec![expire_days("x", 1), expire_days("y", 1)]);
    c.rules[1].id = None;
    validate_lifecycle(&mut c).unwrap();
    let id = c.rules[1].id.clone().unwrap();
    assert!(!id.is_empty() && id != "x");
}

fn row(seq: i64, modified_s: i64) -> Row {
    Row {
        seq,
        vid: Some(format!("{seq:032x}")),
        marker: false,
        current: false,
        size: 10,
        modified_ns: modified_s * SECOND_NS,
        tags: Default::default(),
        locked: false,
    }
}

#[test]
fn plans_follow_the_rules() {
    let day = DayLength::Seconds(10);
    let now = 1_000 * SECOND_NS;
    // Current version due after one 10 s day.
    let c = config(vec![expire_days("r", 1)]);
    let mut cur = row(5, 985);
    cur.current = true;
    assert_eq!(
        plan_key(&c, "k", &[cur.clone()], now, day).actions,
        [Action::ExpireCurrent]
    );
    cur.modified_ns = 995 * SECOND_NS;
    assert!(plan_key(&c, "k", &[cur.clone()], now, day)
        .actions
        .is_empty());
    // Disabled rules do nothing.
    let mut off = c.clone();
    off.rules[0].status = RuleStatus::Disabled;
    cur.modified_ns = 0;
    assert!(plan_key(&off, "k", &[cur.clone()], now, day)
        .actions
        .is_empty());

    // Noncurrent: days since the successor's write, and the newest kept.
    let mut nc = rule("nc");
    nc.noncurrent_expiration = Some(NoncurrentExpiration {
        noncurrent_days: Some(1),
        newer_noncurrent_versions: Some(2),
    });
    let c = config(vec![nc]);
    let mut rows: Vec<Row> = (0..6).map(|i| row(10 - i, 900 - i)).collect();
    rows[0].current = true;
    let plan = plan_key(&c, "k", &rows, now, day);
    let deleted: Vec<i64> = plan
        .actions
        .iter()
        .map(|a| match a {
            Action::Delete { seq, .. } => *seq,
            Action::ExpireCurrent => -1,
        })
        .collect();
    // rows 1 and 2 are the two newest noncurrent versions: kept.
    assert_eq!(deleted, [7, 6, 5]);
    // A locked one is counted, never planned.
    rows[4].locked = true;
    let plan = plan_key(&c, "k", &rows, now, day);
    assert_eq!(plan.locked, 1);
    assert_eq!(plan.actions.len(), 2);

    // A lone delete marker goes with ExpiredObjectDeleteMarker; one with
    // versions behind it stays unless they all go in the same plan.
    let mut dm = rule("dm");
    dm.expiration = Some(Expiration {
        expired_object_delete_marker: Some(true),
        ..Default::default()
    });
    let mut marker = row(9, 999);
    marker.marker = true;
    let c = config(vec![dm.clone()]);
    assert_eq!(
        plan_key(&c, "k", &[marker.clone()], now, day).actions.len(),
        1
    );
    assert!(plan_key(&c, "k", &[marker.clone(), row(8, 1)], now, day)
        .actions
        .is_empty());
    let mut nc = rule("nc");
    nc.noncurrent_expiration = Some(NoncurrentExpiration {
        noncurrent_days: Some(1),
        newer_noncurrent_versions: None,
    });
    let c = config(vec![dm, nc]);
    let mut marker_old = marker.clone();
    marker_old.modified_ns = 900 * SECOND_NS;
    let plan = plan_key(&c, "k", &[marker_old, row(8, 1)], now, day);
    assert_eq!(
        plan.actions,
        [
            Action::Delete {
                seq: 8,
                vid: Some(format!("{:032x}", 8))
            },
            Action::Delete {
                seq: 9,
                vid: Some(format!("{:032x}", 9))
            }
        ]
    );
}

#[test]
fn filters_select_by_prefix_tags_and_size() {
    let mut r = expire_days("f", 1);
    r.prefix = None;
    r.filter = Some(LifecycleFilter {
        and: Some(FilterAnd {
            prefix: Some("logs/".into()),
            tags: vec![FilterTag {
                key: "t".into(),
                value: "1".into(),
            }],
            size_greater_than: Some(100),
            size_less_than: Some(1000),
        }),
        ..Default::default()
    });
    let c = config(vec![r]);
    let tags: BTreeMap<String, String> = [("t".to_string(), "1".to_string())].into();
    let other: BTreeMap<String, String> = [("t".to_string(), "2".to_string())].into();
    let m = 1_704_103_200 * SECOND_NS;
    let e = c.expiration_of("logs/a", 500, &tags, m).unwrap();
    assert_eq!(
        (e.at_ns, e.rule_id.as_str()),
        (1_704_240_000 * SECOND_NS, "f")
    );
    assert!(c.expiration_of("data/a", 500, &tags, m).is_none());
    assert!(c.expiration_of("logs/a", 500, &other, m).is_none());
    assert!(c.expiration_of("logs/a", 100, &tags, m).is_none());
    assert!(c.expiration_of("logs/a", 1000, &tags, m).is_none());
    // The earliest of several rules names the header.
    let mut early = expire_days("early", 1);
    early.prefix = Some("logs/".into());
    let c = config(vec![expire_days("late", 30), early]);
    assert_eq!(
        c.expiration_of("logs/x", 1, &tags, m).unwrap().rule_id,
        "early"
    );
    assert_eq!(
        c.expiration_of("img/x", 1, &tags, m).unwrap().rule_id,
        "late"
    );
    // Uploads: their rule's days after initiation, S3's days.
    let mut abort = rule("abort");
    abort.prefix = Some("up/".into());
    abort.abort_upload_days = Some(2);
    let c = config(vec![abort, expire_days("exp", 1)]);
    let e = c.abort_of("up/a", m).unwrap();
    assert_eq!(
        (e.at_ns, e.rule_id.as_str()),
        (1_704_326_400 * SECOND_NS, "abort")
    );
    assert!(c.abort_of("other", m).is_none());
}
