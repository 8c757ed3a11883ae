//! Lifecycle: rules stored, validated and removed; expiry of current
//! versions (removed, or hidden behind a delete marker), noncurrent
//! versions, lone delete markers and incomplete uploads, in transactions of
//! a bounded size; locked versions never removed.

use super::*;

const S: i64 = 1_000_000_000;
/// A 10-second day: `expire_due` is called with instants ahead of now.
const DAY: DayLength = DayLength::Seconds(10);

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

fn rule(id: &str, prefix: &str) -> LifecycleRule {
    LifecycleRule {
        id: Some(id.into()),
        status: RuleStatus::Enabled,
        prefix: Some(prefix.into()),
        filter: None,
        expiration: None,
        noncurrent_expiration: None,
        abort_upload_days: None,
        transitions: Vec::new(),
        noncurrent_transitions: Vec::new(),
    }
}

fn expire(id: &str, prefix: &str, days: i64) -> LifecycleRule {
    LifecycleRule {
        expiration: Some(Expiration {
            days: Some(days),
            ..Default::default()
        }),
        ..rule(id, prefix)
    }
}

fn noncurrent(id: &str, prefix: &str, days: i64, keep: Option<i64>) -> LifecycleRule {
    LifecycleRule {
        noncurrent_expiration: Some(NoncurrentExpiration {
            noncurrent_days: Some(days),
            newer_noncurrent_versions: keep,
        }),
        ..rule(id, prefix)
    }
}

fn set(s: &Store, b: &str, rules: Vec<LifecycleRule>) {
    s.set_bucket_lifecycle(
        b,
        Some(LifecycleConfig {
            rules,
            transition_minimum_size: None,
        }),
    )
    .unwrap();
}

fn keys(s: &Store, b: &str) -> Vec<String> {
    s.list_objects(
        b,
        &ListQuery {
            max_keys: 1000,
            ..Default::default()
        },
    )
    .unwrap()
    .objects
    .into_iter()
    .map(|o| o.key)
    .collect()
}

fn versions(s: &Store, b: &str) -> Vec<(String, bool)> {
    s.list_object_versions(
        b,
        &VersionQuery {
            max_keys: 10_000,
            ..Default::default()
        },
    )
    .unwrap()
    .versions
    .into_iter()
    .map(|v| (v.key, v.delete_marker))
    .collect()
}

pub(crate) fn lifecycle_rules(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("lcb").unwrap();
    assert_eq!(s.bucket_lifecycle("lcb").unwrap(), None);
    assert_eq!(
        s.bucket_lifecycle("nope").unwrap_err().code(),
        "no_such_bucket"
    );
    let mut unnamed = expire("x", "logs/", 3);
    unnamed.id = None;
    let stored = s
        .set_bucket_lifecycle(
            "lcb",
            Some(LifecycleConfig {
                rules: vec![expire("a", "tmp/", 1), unnamed],
                transition_minimum_size: Some("varies_by_storage_class".into()),
            }),
        )
        .unwrap()
        .unwrap();
    let got = s.bucket_lifecycle("lcb").unwrap().unwrap();
    assert_eq!(got, stored);
    assert_eq!(got.rules[0].id.as_deref(), Some("a"));
    assert!(got.rules[1].id.is_some(), "an unnamed rule gets an ID");
    // A refused configuration changes nothing.
    let bad = LifecycleConfig {
        rules: vec![expire("a", "x/", 1), expire("a", "y/", 1)],
        transition_minimum_size: None,
    };
    assert_eq!(
        s.set_bucket_lifecycle("lcb", Some(bad)).unwrap_err().code(),
        "invalid_argument"
    );
    assert_eq!(s.bucket_lifecycle("lcb").unwrap().unwrap(), stored);
    assert_eq!(
        s.set_bucket_lifecycle("nope", None).unwrap_err().code(),
        "no_such_bucket"
    );
    // The header's date: S3 days, whatever the server's day length.
    let m = put(s, "lcb", "tmp/a", b"1");
    let e = s.object_expiration(&m).unwrap().unwrap();
    assert_eq!(e.rule_id, "a");
    let day_ns = 86_400 * S;
    assert_eq!(e.at_ns % day_ns, 0);
    assert!(e.at_ns > m.last_modified_ns + day_ns && e.at_ns <= m.last_modified_ns + 2 * day_ns);
    assert_eq!(
        s.object_expiration(&put(s, "lcb", "other", b"1")).unwrap(),
        None
    );
    s.set_bucket_lifecycle("lcb", None).unwrap();
    assert_eq!(s.bucket_lifecycle("lcb").unwrap(), None);
    assert_eq!(s.object_expiration(&m).unwrap(), None);
}

pub(crate) fn lifecycle_expires_current_versions(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("plain").unwrap();
    for k in ["tmp/a", "tmp/b", "keep/c"] {
        put(s, "plain", k, b"data");
    }
    let tagged = PutOptions {
        props: ObjectProps {
            tags: [("class".to_string(), "scratch".to_string())].into(),
            ..Default::default()
        },
        ..Default::default()
    };
    s.put_object("plain", "t/tagged", &mut Cursor::new(b"x"), tagged)
        .unwrap();
    put(s, "plain", "t/untagged", b"x");
    put(s, "plain", "big/x", &body(3000, 1));
    put(s, "plain", "big/y", &body(10, 1));
    let mut by_tag = rule("tag", "");
    by_tag.prefix = None;
    by_tag.filter = Some(LifecycleFilter {
        tag: Some(FilterTag {
            key: "class".into(),
            value: "scratch".into(),
        }),
        ..Default::default()
    });
    by_tag.expiration = Some(Expiration {
        days: Some(1),
        ..Default::default()
    });
    let mut by_size = rule("size", "");
    by_size.prefix = None;
    by_size.filter = Some(LifecycleFilter {
        and: Some(FilterAnd {
            prefix: Some("big/".into()),
            size_greater_than: Some(2000),
            ..Default::default()
        }),
        ..Default::default()
    });
    by_size.expiration = by_tag.expiration.clone();
    let mut disabled = expire("off", "keep/", 1);
    disabled.status = RuleStatus::Disabled;
    set(
        s,
        "plain",
        vec![expire("tmp", "tmp/", 2), by_tag, by_size, disabled],
    );
    // Not due yet: nothing happens.
    let r = s.expire_due(now() + 5 * S, DAY).unwrap();
    assert!(r.is_empty(), "{r:?}");
    let r = s.expire_due(now() + 15 * S, DAY).unwrap();
    assert_eq!(r.expired, 2, "{r:?}");
    assert_eq!(
        keys(s, "plain"),
        ["big/y", "keep/c", "t/untagged", "tmp/a", "tmp/b"]
    );
    let r = s.expire_due(now() + 25 * S, DAY).unwrap();
    assert_eq!(r.expired, 2);
    assert_eq!(keys(s, "plain"), ["big/y", "keep/c", "t/untagged"]);
    assert!(s.expire_due(now() + 25 * S, DAY).unwrap().is_empty());
    // A date in the past expires everything it selects at once.
    let mut dated = rule("dated", "keep/");
    dated.expiration = Some(Expiration {
        date_ns: Some(86_400 * S * 10_000),
        ..Default::default()
    });
    set(s, "plain", vec![dated]);
    assert_eq!(s.expire_due(now(), DayLength::Utc).unwrap().expired, 1);
    assert_eq!(keys(s, "plain"), ["big/y", "t/untagged"]);
    // Usage follows.
    assert_eq!(s.usage().unwrap().objects, 2);
}

pub(crate) fn lifecycle_expires_versions(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("ver").unwrap();
    s.set_bucket_versioning("ver", Versioning::Enabled).unwrap();
    for i in 0..10 {
        put(s, "ver", "many", format!("v{i}").as_bytes());
    }
    put(s, "ver", "cur/a", b"1");
    put(s, "ver", "gone", b"1");
    s.delete_object_version("ver", "gone", None).unwrap();
    put(s, "ver", "keep", b"1");
    s.delete_object_version("ver", "keep", None).unwrap();
    let mut markers = rule("markers", "gone");
    markers.expiration = Some(Expiration {
        expired_object_delete_marker: Some(true),
        ..Default::default()
    });
    set(
        s,
        "ver",
        vec![
            noncurrent("nc", "many", 1, Some(5)),
            noncurrent("nc-gone", "gone", 1, None),
            markers,
            expire("cur", "cur/", 1),
        ],
    );
    let r = s.expire_due(now() + 15 * S, DAY).unwrap();
    // many: 9 noncurrent, the 5 newest kept; gone: its version and then its
    // lone marker; cur/a: a marker written over it.
    assert_eq!(
        (r.noncurrent_deleted, r.markers_removed, r.expired),
        (5, 1, 1),
        "{r:?}"
    );
    let v = versions(s, "ver");
    assert_eq!(v.iter().filter(|(k, _)| k == "many").count(), 6);
    assert!(!v.iter().any(|(k, _)| k == "gone"));
    assert_eq!(
        v.iter()
            .filter(|(k, _)| k == "cur/a")
            .cloned()
            .collect::<Vec<_>>(),
        [("cur/a".to_string(), true), ("cur/a".to_string(), false)]
    );
    assert_eq!(v.iter().filter(|(k, _)| k == "keep").count(), 2);
    assert_eq!(
        s.head_object("ver", "cur/a").unwrap_err().code(),
        "no_such_key"
    );
    assert_eq!(get(s, "ver", "many"), b"v9");
    // Nothing more is due at the same instant.
    assert!(s.expire_due(now() + 15 * S, DAY).unwrap().is_empty());
}

pub(crate) fn lifecycle_aborts_uploads(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("ups").unwrap();
    let old = s
        .create_upload("ups", "tmp/a", CreateUploadOptions::default())
        .unwrap();
    s.upload_part(
        "ups",
        "tmp/a",
        &old.upload_id,
        1,
        &mut Cursor::new(body(1000, 2)),
        PartOptions::default(),
    )
    .unwrap();
    let kept = s
        .create_upload("ups", "keep/b", CreateUploadOptions::default())
        .unwrap();
    let mut abort = rule("abort", "tmp/");
    abort.abort_upload_days = Some(2);
    set(s, "ups", vec![abort]);
    assert_eq!(
        s.expire_due(now() + 15 * S, DAY).unwrap().uploads_aborted,
        0
    );
    assert_eq!(
        s.expire_due(now() + 25 * S, DAY).unwrap().uploads_aborted,
        1
    );
    let left = s.list_uploads("ups", "", None, None, 100).unwrap().uploads;
    assert_eq!(
        left.iter().map(|u| u.upload_id.clone()).collect::<Vec<_>>(),
        [kept.upload_id]
    );
    assert_eq!(s.usage().unwrap().bytes, 0, "the part's bytes were freed");
}

pub(crate) fn lifecycle_never_removes_locked_versions(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket_with_lock("vault", CannedAcl::Private)
        .unwrap();
    let held = put(s, "vault", "held", b"old");
    s.set_object_legal_hold("vault", "held", held.version_id.as_deref(), true)
        .unwrap();
    put(s, "vault", "held", b"new");
    let retained = put(s, "vault", "kept", b"old");
    s.set_object_retention(
        "vault",
        "kept",
        retained.version_id.as_deref(),
        Some(Retention {
            mode: LockMode::Compliance,
            until_ns: now() + 3600 * S,
        }),
        false,
    )
    .unwrap();
    put(s, "vault", "kept", b"new");
    // GOVERNANCE yields to the bypass, which expiry never asks for.
    let governed = put(s, "vault", "gov", b"old");
    s.set_object_retention(
        "vault",
        "gov",
        governed.version_id.as_deref(),
        Some(Retention {
            mode: LockMode::Governance,
            until_ns: now() + 3600 * S,
        }),
        false,
    )
    .unwrap();
    put(s, "vault", "gov", b"new");
    let free = put(s, "vault", "free", b"old");
    put(s, "vault", "free", b"new");
    set(
        s,
        "vault",
        vec![noncurrent("nc", "", 1, None), expire("cur", "", 100)],
    );
    let r = s.expire_due(now() + 15 * S, DAY).unwrap();
    assert_eq!((r.noncurrent_deleted, r.locked), (1, 3), "{r:?}");
    for (key, v) in [("held", &held), ("kept", &retained), ("gov", &governed)] {
        let read = s
            .get_object_version("vault", key, v.version_id.as_deref(), None, None)
            .unwrap();
        assert_eq!(read.body.into_vec().unwrap(), b"old");
    }
    assert_eq!(
        s.head_object_version("vault", "free", free.version_id.as_deref())
            .unwrap_err()
            .code(),
        "no_such_version"
    );
    // Expiring a locked current version only writes a delete marker over
    // it: the version itself stays.
    let r = s.expire_due(now() + 2000 * S, DAY).unwrap();
    assert!(r.expired >= 3, "{r:?}");
    let read = s
        .get_object_version("vault", "held", held.version_id.as_deref(), None, None)
        .unwrap();
    assert_eq!(read.body.into_vec().unwrap(), b"old");
}

/// More due versions than one transaction deletes, and more rows than one
/// page of the scan (a key's versions never split between pages).
pub(crate) fn lifecycle_expires_in_batches(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("big").unwrap();
    s.set_bucket_versioning("big", Versioning::Enabled).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut n = 0;
    for k in 0..40 {
        for v in 0..30 {
            let tx = tx.clone();
            s.put_object_detached(
                "big",
                &format!("k{k:02}"),
                format!("{v}").into_bytes(),
                PutOptions::default(),
                move |r| {
                    let _ = tx.send(r.map(|_| ()));
                },
            );
            n += 1;
        }
    }
    for _ in 0..n {
        rx.recv().unwrap().unwrap();
    }
    set(s, "big", vec![noncurrent("nc", "", 1, None)]);
    let r = s.expire_due(now() + 15 * S, DAY).unwrap();
    assert_eq!(r.noncurrent_deleted, 40 * 29, "{r:?}");
    assert_eq!(versions(s, "big").len(), 40);
    assert_eq!(s.usage().unwrap().objects, 40);
}
