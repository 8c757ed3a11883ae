//! A bucket's policy document (schema 7, `buckets.policy`): kept as the
//! exact text given, replaced, removed, bounded at 20 KiB, gone with its
//! bucket and after a reset, kept across a reopen and added to an older
//! store by the open-time migration. The store never reads the document:
//! any text within the bound is kept.

use super::*;

const DOC: &str = "{ \"Statement\": [ {\"Effect\":\"Deny\", \"Principal\":\"*\",\n \"Action\":\"s3:*\",\"Resource\":\"arn:aws:s3:::bkt\"} ] }";

pub(crate) fn bucket_policies(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("bkt").unwrap();
    s.create_bucket("other").unwrap();
    assert_eq!(s.bucket_policy("bkt").unwrap(), None);
    for code in [
        s.bucket_policy("nope").unwrap_err().code(),
        s.set_bucket_policy("nope", Some(DOC.into()))
            .unwrap_err()
            .code(),
        s.set_bucket_policy("nope", None).unwrap_err().code(),
    ] {
        assert_eq!(code, "no_such_bucket");
    }

    // Kept byte for byte, replaced whole, removed; through the backend
    // trait as through the store.
    s.set_bucket_policy("bkt", Some(DOC.into())).unwrap();
    assert_eq!(s.bucket_policy("bkt").unwrap().as_deref(), Some(DOC));
    let backend: &dyn ObjectBackend = s;
    assert_eq!(backend.bucket_policy("bkt").unwrap().as_deref(), Some(DOC));
    assert_eq!(s.bucket_policy("other").unwrap(), None);
    backend.set_bucket_policy("bkt", Some("{}".into())).unwrap();
    assert_eq!(s.bucket_policy("bkt").unwrap().as_deref(), Some("{}"));

    // At most 20 KiB; a refused set changes nothing.
    let max = "x".repeat(MAX_BUCKET_POLICY_BYTES);
    s.set_bucket_policy("bkt", Some(max.clone())).unwrap();
    assert_eq!(s.bucket_policy("bkt").unwrap(), Some(max.clone()));
    let e = s
        .set_bucket_policy("bkt", Some("x".repeat(MAX_BUCKET_POLICY_BYTES + 1)))
        .unwrap_err();
    assert_eq!(e.code(), "invalid_argument");
    assert_eq!(s.bucket_policy("bkt").unwrap(), Some(max));
    s.set_bucket_policy("bkt", None).unwrap();
    assert_eq!(s.bucket_policy("bkt").unwrap(), None);
    s.set_bucket_policy("bkt", None).unwrap();

    // Other settings are untouched by it.
    s.set_bucket_tags("bkt", Some(BTreeMap::from([("a".into(), "1".into())])))
        .unwrap();
    s.set_bucket_policy("bkt", Some(DOC.into())).unwrap();
    assert!(s.bucket_tags("bkt").unwrap().is_some());
    assert_eq!(s.bucket_access("bkt").unwrap(), BucketAccess::default());

    // A bucket deleted and made again has none; nor has any after a reset.
    s.set_bucket_policy("other", Some(DOC.into())).unwrap();
    s.delete_bucket("other").unwrap();
    s.create_bucket("other").unwrap();
    assert_eq!(s.bucket_policy("other").unwrap(), None);
    s.reset().unwrap();
    s.create_bucket("bkt").unwrap();
    assert_eq!(s.bucket_policy("bkt").unwrap(), None);
}

#[test]
fn a_bucket_policy_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    {
        let s = Store::open(&data, StoreOptions::default()).unwrap();
        s.create_bucket("bkt").unwrap();
        s.set_bucket_policy("bkt", Some(DOC.into())).unwrap();
    }
    let s = Store::open(&data, StoreOptions::default()).unwrap();
    assert_eq!(s.bucket_policy("bkt").unwrap().as_deref(), Some(DOC));
    assert_eq!(s.verify().unwrap(), Vec::<String>::new());
}

#[test]
fn a_store_from_before_bucket_policies_is_migrated_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    {
        let s = Store::open(&data, StoreOptions::default()).unwrap();
        s.create_bucket("old").unwrap();
        s.set_bucket_tags("old", Some(BTreeMap::from([("a".into(), "1".into())])))
            .unwrap();
    }
    // Make it schema 6: no `buckets.policy`.
    {
        let conn = rusqlite::Connection::open(data.join("meta.db")).unwrap();
        conn.execute_batch("ALTER TABLE buckets DROP COLUMN policy; PRAGMA user_version = 6;")
            .unwrap();
    }
    let s = Store::open(&data, StoreOptions::default()).unwrap();
    assert_eq!(s.bucket_policy("old").unwrap(), None);
    assert!(s.bucket_tags("old").unwrap().is_some());
    s.set_bucket_policy("old", Some(DOC.into())).unwrap();
    drop(s);
    let s = Store::open(&data, StoreOptions::default()).unwrap();
    assert_eq!(s.bucket_policy("old").unwrap().as_deref(), Some(DOC));
    let conn = rusqlite::Connection::open(data.join("meta.db")).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert!(version >= 7, "schema {version}");
}
