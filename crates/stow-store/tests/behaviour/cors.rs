//! A bucket's CORS rules: validated, stored whole, replaced, removed,
//! gone with their bucket and after a reset, kept across a reopen, and
//! added to a store from before CORS by the open-time migration.

use super::*;

fn rule(methods: &[&str], origins: &[&str]) -> CorsRule {
    CorsRule {
        allowed_methods: methods.iter().map(|s| s.to_string()).collect(),
        allowed_origins: origins.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn full_rule() -> CorsRule {
    CorsRule {
        id: Some("uploads".into()),
        allowed_methods: vec!["PUT".into(), "POST".into()],
        allowed_origins: vec!["http://*.example.com".into()],
        allowed_headers: vec!["*".into()],
        expose_headers: vec!["ETag".into(), "x-amz-request-id".into()],
        max_age_seconds: Some(3000),
    }
}

pub(crate) fn cors_rules(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("web").unwrap();
    s.create_bucket("other").unwrap();
    assert_eq!(s.bucket_cors("web").unwrap(), None);
    assert_eq!(s.bucket_cors("nope").unwrap_err().code(), "no_such_bucket");
    assert_eq!(
        s.set_bucket_cors("nope", Some(vec![rule(&["GET"], &["*"])]))
            .unwrap_err()
            .code(),
        "no_such_bucket"
    );

    let rules = vec![full_rule(), rule(&["GET"], &["*"])];
    s.set_bucket_cors("web", Some(rules.clone())).unwrap();
    assert_eq!(s.bucket_cors("web").unwrap(), Some(rules.clone()));
    assert_eq!(s.bucket_cors("other").unwrap(), None);

    // A refused configuration leaves the stored one as it was.
    let e = s.set_bucket_cors("web", Some(vec![rule(&["PATCH"], &["*"])]));
    assert_eq!(e.unwrap_err().code(), "invalid_cors");
    let e = s.set_bucket_cors("web", Some(vec![]));
    assert_eq!(e.unwrap_err().code(), "malformed_cors");
    assert_eq!(s.bucket_cors("web").unwrap(), Some(rules));

    // Replaced whole, then removed.
    s.set_bucket_cors("web", Some(vec![rule(&["HEAD"], &["a*"])]))
        .unwrap();
    assert_eq!(
        s.bucket_cors("web").unwrap(),
        Some(vec![rule(&["HEAD"], &["a*"])])
    );
    s.set_bucket_cors("web", None).unwrap();
    assert_eq!(s.bucket_cors("web").unwrap(), None);
    s.set_bucket_cors("web", None).unwrap();

    // A bucket deleted and made again starts without rules.
    s.set_bucket_cors("other", Some(vec![full_rule()])).unwrap();
    s.delete_bucket("other").unwrap();
    s.create_bucket("other").unwrap();
    assert_eq!(s.bucket_cors("other").unwrap(), None);

    // A reset empties everything, rules included.
    s.set_bucket_cors("web", Some(vec![full_rule()])).unwrap();
    s.reset().unwrap();
    s.create_bucket("web").unwrap();
    assert_eq!(s.bucket_cors("web").unwrap(), None);
}

#[test]
fn cors_rules_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let rules = vec![full_rule(), rule(&["GET"], &["*"])];
    {
        let s = Store::open(&data, StoreOptions::default()).unwrap();
        s.create_bucket("web").unwrap();
        s.create_bucket("plain").unwrap();
        s.set_bucket_cors("web", Some(rules.clone())).unwrap();
    }
    let s = Store::open(&data, StoreOptions::default()).unwrap();
    assert_eq!(s.bucket_cors("web").unwrap(), Some(rules));
    assert_eq!(s.bucket_cors("plain").unwrap(), None);
    s.set_bucket_cors("web", None).unwrap();
    drop(s);
    let s = Store::open(&data, StoreOptions::default()).unwrap();
    assert_eq!(s.bucket_cors("web").unwrap(), None);
    assert_eq!(s.verify().unwrap(), Vec::<String>::new());
}

#[test]
fn a_store_from_before_cors_is_migrated_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    {
        let s = Store::open(&data, StoreOptions::default()).unwrap();
        s.create_bucket("old").unwrap();
        put(&s, "old", "k", b"v");
    }
    // Make it the previous schema: no CORS column, version 2.
    {
        let conn = rusqlite::Connection::open(data.join("meta.db")).unwrap();
        conn.execute_batch("ALTER TABLE buckets DROP COLUMN cors; PRAGMA user_version = 2;")
            .unwrap();
    }
    let s = Store::open(&data, StoreOptions::default()).unwrap();
    assert_eq!(s.bucket_cors("old").unwrap(), None);
    s.set_bucket_cors("old", Some(vec![full_rule()])).unwrap();
    assert_eq!(get(&s, "old", "k"), b"v");
    drop(s);
    let s = Store::open(&data, StoreOptions::default()).unwrap();
    assert_eq!(s.bucket_cors("old").unwrap(), Some(vec![full_rule()]));
    let conn = rusqlite::Connection::open(data.join("meta.db")).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert!(version >= 4, "migrated to {version}");
}
