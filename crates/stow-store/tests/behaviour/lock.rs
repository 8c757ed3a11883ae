//! Object lock: buckets created with it (versioned for good), the default
//! retention given to new versions, per-version retention (GOVERNANCE
//! with the bypass, COMPLIANCE never shortened or removed), legal holds,
//! deletes of locked versions refused in the deleting transaction, and the
//! configuration kept across a reopen and added by the open-time migration.

use super::*;

const DAY: i64 = 86_400 * 1_000_000_000;

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

fn ret(mode: LockMode, until_ns: i64) -> Option<Retention> {
    Some(Retention { mode, until_ns })
}

fn put_locked(s: &Store, b: &str, k: &str, lock: ObjectLock) -> Result<ObjectMeta> {
    let opts = PutOptions {
        props: ObjectProps {
            lock,
            ..Default::default()
        },
        ..Default::default()
    };
    s.put_object(b, k, &mut Cursor::new(b"locked"), opts)
}

fn vid(m: &ObjectMeta) -> String {
    m.version_id.clone().unwrap()
}

pub(crate) fn lock_buckets(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    assert!(s
        .create_bucket_with_lock("vault", CannedAcl::Private)
        .unwrap());
    assert!(!s
        .create_bucket_with_lock("vault", CannedAcl::Private)
        .unwrap());
    s.create_bucket("plain").unwrap();
    assert_eq!(s.bucket_versioning("vault").unwrap(), Versioning::Enabled);
    assert_eq!(
        s.bucket_object_lock("vault").unwrap(),
        Some(LockConfig::default())
    );
    assert_eq!(s.bucket_object_lock("plain").unwrap(), None);
    let code = |r: Result<()>| r.unwrap_err().code();
    assert_eq!(
        code(s.set_bucket_versioning("vault", Versioning::Suspended)),
        "invalid_bucket_state"
    );
    s.set_bucket_versioning("vault", Versioning::Enabled)
        .unwrap();
    let config = LockConfig {
        default_retention: Some(DefaultRetention {
            mode: LockMode::Governance,
            period: RetentionPeriod::Days(2),
        }),
    };
    assert_eq!(
        code(s.set_bucket_object_lock("plain", config)),
        "invalid_bucket_state"
    );
    s.create_bucket("later").unwrap();
    s.set_bucket_versioning("later", Versioning::Suspended)
        .unwrap();
    assert_eq!(
        code(s.set_bucket_object_lock("later", config)),
        "invalid_bucket_state"
    );
    // A bucket whose versioning is enabled takes object lock, for good.
    s.set_bucket_versioning("later", Versioning::Enabled)
        .unwrap();
    s.set_bucket_object_lock("later", config).unwrap();
    assert_eq!(s.bucket_object_lock("later").unwrap(), Some(config));
    assert_eq!(
        code(s.set_bucket_versioning("later", Versioning::Suspended)),
        "invalid_bucket_state"
    );
    s.set_bucket_object_lock("vault", config).unwrap();
    assert_eq!(s.bucket_object_lock("vault").unwrap(), Some(config));

    // New versions take the default; a write that names a retention keeps it.
    let before = now();
    let m = put(s, "vault", "a", b"one");
    let lock = s.object_lock("vault", "a", None).unwrap();
    assert_eq!(m.props.lock, lock);
    let r = lock.retention.unwrap();
    assert_eq!(r.mode, LockMode::Governance);
    assert!(r.until_ns >= before + 2 * DAY && r.until_ns <= now() + 2 * DAY);
    assert_eq!(lock.legal_hold, None);
    let asked = ObjectLock {
        retention: ret(LockMode::Compliance, now() + DAY),
        legal_hold: Some(true),
    };
    let m2 = put_locked(s, "vault", "b", asked).unwrap();
    assert_eq!(s.object_lock("vault", "b", Some(&vid(&m2))).unwrap(), asked);

    // Lock asked of a bucket without it, or a date in the past.
    let e = put_locked(s, "plain", "k", asked).unwrap_err();
    assert_eq!(e.code(), "object_lock_not_enabled");
    let past = ObjectLock {
        retention: ret(LockMode::Governance, now() - DAY),
        legal_hold: None,
    };
    assert_eq!(
        put_locked(s, "vault", "c", past).unwrap_err().code(),
        "invalid_argument"
    );
    let upload = CreateUploadOptions {
        props: ObjectProps {
            lock: asked,
            ..Default::default()
        },
        ..Default::default()
    };
    let e = s.create_upload("plain", "k", upload).unwrap_err();
    assert_eq!(e.code(), "object_lock_not_enabled");
    assert_eq!(
        s.object_lock("plain", "k", None).unwrap_err().code(),
        "object_lock_not_enabled"
    );
    assert_eq!(
        s.set_object_legal_hold("plain", "k", None, true)
            .unwrap_err()
            .code(),
        "object_lock_not_enabled"
    );

    // A copy never takes the source's lock: the destination's default.
    let copied = s
        .copy_object("vault", "b", "vault", "copy", CopyOptions::default())
        .unwrap();
    assert_eq!(copied.props.lock.legal_hold, None);
    assert_eq!(
        copied.props.lock.retention.unwrap().mode,
        LockMode::Governance
    );
    let plain_copy = s
        .copy_object("vault", "b", "plain", "copy", CopyOptions::default())
        .unwrap();
    assert!(plain_copy.props.lock.is_empty());
    let e = s
        .copy_object(
            "vault",
            "b",
            "plain",
            "copy2",
            CopyOptions {
                lock: asked,
                ..Default::default()
            },
        )
        .unwrap_err();
    assert_eq!(e.code(), "object_lock_not_enabled");
}

pub(crate) fn lock_retention_rules(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket_with_lock("vault", CannedAcl::Private)
        .unwrap();
    let gov = put_locked(
        s,
        "vault",
        "gov",
        ObjectLock {
            retention: ret(LockMode::Governance, now() + 2 * DAY),
            legal_hold: None,
        },
    )
    .unwrap();
    let g = vid(&gov);
    let code = |r: Result<ObjectMeta>| r.unwrap_err().code();
    // GOVERNANCE: extended freely, shortened or removed only with the bypass.
    s.set_object_retention(
        "vault",
        "gov",
        Some(&g),
        ret(LockMode::Governance, now() + 3 * DAY),
        false,
    )
    .unwrap();
    assert_eq!(
        code(s.set_object_retention(
            "vault",
            "gov",
            Some(&g),
            ret(LockMode::Governance, now() + DAY),
            false
        )),
        "object_locked"
    );
    assert_eq!(
        code(s.set_object_retention("vault", "gov", Some(&g), None, false)),
        "object_locked"
    );
    s.set_object_retention(
        "vault",
        "gov",
        Some(&g),
        ret(LockMode::Governance, now() + DAY),
        true,
    )
    .unwrap();
    assert_eq!(
        s.object_lock("vault", "gov", Some(&g))
            .unwrap()
            .retention
            .unwrap()
            .mode,
        LockMode::Governance
    );
    s.set_object_retention("vault", "gov", Some(&g), None, true)
        .unwrap();
    assert_eq!(
        s.object_lock("vault", "gov", Some(&g)).unwrap().retention,
        None
    );

    // COMPLIANCE: only extended, bypass or not.
    let comp = put_locked(
        s,
        "vault",
        "comp",
        ObjectLock {
            retention: ret(LockMode::Compliance, now() + 2 * DAY),
            legal_hold: None,
        },
    )
    .unwrap();
    let c = vid(&comp);
    for bypass in [false, true] {
        for new in [
            None,
            ret(LockMode::Compliance, now() + DAY),
            ret(LockMode::Governance, now() + 5 * DAY),
        ] {
            assert_eq!(
                code(s.set_object_retention("vault", "comp", Some(&c), new, bypass)),
                "object_locked"
            );
        }
    }
    let longer = ret(LockMode::Compliance, now() + 4 * DAY);
    s.set_object_retention("vault", "comp", Some(&c), longer, false)
        .unwrap();
    assert_eq!(
        s.object_lock("vault", "comp", None).unwrap().retention,
        longer
    );
    // Changing the lock changes no data.
    let after = s.head_object("vault", "comp").unwrap();
    assert_eq!((after.etag, after.version), (comp.etag, comp.version));

    // A noncurrent version's retention is changed by its ID.
    put(s, "vault", "comp", b"newer");
    s.set_object_retention(
        "vault",
        "comp",
        Some(&c),
        ret(LockMode::Compliance, now() + 9 * DAY),
        false,
    )
    .unwrap();
    let kept = s
        .object_lock("vault", "comp", Some(&c))
        .unwrap()
        .retention
        .unwrap();
    assert!(kept.until_ns > now() + 8 * DAY);
    assert!(s
        .object_lock("vault", "comp", None)
        .unwrap()
        .retention
        .is_none());
    assert_eq!(
        code(s.set_object_legal_hold(
            "vault",
            "comp",
            Some("0000000000000001ffffffffffffffff"),
            true
        )),
        "no_such_version"
    );
}

pub(crate) fn lock_refuses_deletes(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket_with_lock("vault", CannedAcl::Private)
        .unwrap();
    let lock = |mode, days: i64| ObjectLock {
        retention: ret(mode, now() + days * DAY),
        legal_hold: None,
    };
    let gov = vid(&put_locked(s, "vault", "gov", lock(LockMode::Governance, 1)).unwrap());
    let comp = vid(&put_locked(s, "vault", "comp", lock(LockMode::Compliance, 1)).unwrap());
    let free = vid(&put(s, "vault", "free", b"x"));
    let held = vid(&put_locked(
        s,
        "vault",
        "held",
        ObjectLock {
            retention: None,
            legal_hold: Some(true),
        },
    )
    .unwrap());
    let del = |k: &str, v: &str, bypass: bool| {
        s.delete_object_version_bypassing("vault", k, Some(v), bypass)
    };
    assert_eq!(del("gov", &gov, false).unwrap_err().code(), "object_locked");
    assert_eq!(
        s.delete_object_version("vault", "gov", Some(&gov))
            .unwrap_err()
            .code(),
        "object_locked"
    );
    for bypass in [false, true] {
        assert_eq!(
            del("comp", &comp, bypass).unwrap_err().code(),
            "object_locked"
        );
        assert_eq!(
            del("held", &held, bypass).unwrap_err().code(),
            "object_locked"
        );
    }
    // A delete without a version ID only adds a marker; the versions stay.
    let marker = s.delete_object_version("vault", "comp", None).unwrap();
    assert!(marker.delete_marker);
    assert!(s.delete_object("vault", "gov").unwrap());
    assert_eq!(
        del("comp", &comp, true).unwrap_err().code(),
        "object_locked"
    );
    s.delete_object_version("vault", "comp", marker.version_id.as_deref())
        .unwrap();
    assert_eq!(get(s, "vault", "comp"), b"locked");
    // Overwrites make new versions; the locked one stays.
    put(s, "vault", "comp", b"newer");
    let kept = s.object_lock("vault", "comp", Some(&comp)).unwrap();
    assert_eq!(kept.retention.map(|r| r.mode), Some(LockMode::Compliance));
    // A bucket holding versions is not empty.
    assert_eq!(
        s.delete_bucket("vault").unwrap_err().code(),
        "bucket_not_empty"
    );

    // Allowed: the bypass for GOVERNANCE, a lifted hold, an unlocked version.
    assert!(del("gov", &gov, true).unwrap().existed);
    s.set_object_legal_hold("vault", "held", Some(&held), false)
        .unwrap();
    assert_eq!(
        s.object_lock("vault", "held", Some(&held))
            .unwrap()
            .legal_hold,
        Some(false)
    );
    assert!(del("held", &held, false).unwrap().existed);
    assert!(del("free", &free, false).unwrap().existed);
    assert_eq!(
        s.head_object_version("vault", "comp", Some(&comp))
            .unwrap()
            .version_id,
        Some(comp.clone())
    );
}

#[test]
fn object_lock_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = LockConfig {
        default_retention: Some(DefaultRetention {
            mode: LockMode::Compliance,
            period: RetentionPeriod::Years(1),
        }),
    };
    let v = {
        let s = Store::open(&data, StoreOptions::default()).unwrap();
        s.create_bucket_with_lock("vault", CannedAcl::Private)
            .unwrap();
        s.set_bucket_object_lock("vault", config).unwrap();
        let v = vid(&put(&s, "vault", "k", b"v"));
        s.set_object_legal_hold("vault", "k", Some(&v), true)
            .unwrap();
        v
    };
    let s = Store::open(&data, StoreOptions::default()).unwrap();
    assert_eq!(s.bucket_object_lock("vault").unwrap(), Some(config));
    let lock = s.object_lock("vault", "k", Some(&v)).unwrap();
    assert_eq!(lock.legal_hold, Some(true));
    assert_eq!(lock.retention.unwrap().mode, LockMode::Compliance);
    let e = s.delete_object_version_bypassing("vault", "k", Some(&v), true);
    assert_eq!(e.unwrap_err().code(), "object_locked");
    assert_eq!(s.verify().unwrap(), Vec::<String>::new());
}

#[test]
fn a_store_from_before_object_lock_is_migrated_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    {
        let s = Store::open(&data, StoreOptions::default()).unwrap();
        s.create_bucket("old").unwrap();
        put(&s, "old", "k", b"v");
    }
    // Make it the previous schema: no object lock column, version 3.
    {
        let conn = rusqlite::Connection::open(data.join("meta.db")).unwrap();
        conn.execute_batch("ALTER TABLE buckets DROP COLUMN object_lock; PRAGMA user_version = 3;")
            .unwrap();
    }
    let s = Store::open(&data, StoreOptions::default()).unwrap();
    assert_eq!(s.bucket_object_lock("old").unwrap(), None);
    assert_eq!(get(&s, "old", "k"), b"v");
    s.create_bucket_with_lock("vault", CannedAcl::Private)
        .unwrap();
    put(&s, "vault", "k", b"w");
    drop(s);
    let s = Store::open(&data, StoreOptions::default()).unwrap();
    assert_eq!(
        s.bucket_object_lock("vault").unwrap(),
        Some(LockConfig::default())
    );
    let conn = rusqlite::Connection::open(data.join("meta.db")).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert!(version >= 4, "migrated to {version}");
}
