//! A bucket's tags, Object Ownership and public access block (schema 6)
//! and default encryption (schema 8):
//! stored whole, replaced, removed, read together with the ACL, gone with
//! their bucket and after a reset, kept across a reopen and added to an
//! older store by the open-time migration. The tags and ACL of one
//! version of an object, changed alone. A retried multipart completion in
//! a versioned bucket answering the first completion's version ID.

use super::*;

fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn block(acls: bool, ignore: bool, policy: bool, restrict: bool) -> PublicAccessBlock {
    PublicAccessBlock {
        block_public_acls: acls,
        ignore_public_acls: ignore,
        block_public_policy: policy,
        restrict_public_buckets: restrict,
    }
}

pub(crate) fn bucket_settings(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("bkt").unwrap();
    s.create_bucket("other").unwrap();
    assert_eq!(s.bucket_tags("bkt").unwrap(), None);
    assert_eq!(s.bucket_ownership("bkt").unwrap(), None);
    assert_eq!(s.public_access_block("bkt").unwrap(), None);
    assert_eq!(s.bucket_access("bkt").unwrap(), BucketAccess::default());
    for code in [
        s.bucket_tags("nope").unwrap_err().code(),
        s.set_bucket_tags("nope", Some(tags(&[("a", "1")])))
            .unwrap_err()
            .code(),
        s.set_bucket_ownership("nope", None).unwrap_err().code(),
        s.set_public_access_block("nope", None).unwrap_err().code(),
        s.bucket_access("nope").unwrap_err().code(),
    ] {
        assert_eq!(code, "no_such_bucket");
    }

    // Tags: up to 50, replaced whole, removed; a refused set changes nothing.
    let fifty: BTreeMap<String, String> = (0..50).map(|i| (format!("k{i}"), "v".into())).collect();
    s.set_bucket_tags("bkt", Some(fifty.clone())).unwrap();
    assert_eq!(s.bucket_tags("bkt").unwrap(), Some(fifty.clone()));
    let mut many = fifty.clone();
    many.insert("k50".into(), "v".into());
    let e = s.set_bucket_tags("bkt", Some(many)).unwrap_err();
    assert_eq!(e.code(), "invalid_argument");
    assert_eq!(s.bucket_tags("bkt").unwrap(), Some(fifty));
    s.set_bucket_tags("bkt", Some(tags(&[("team", "blue")])))
        .unwrap();
    assert_eq!(
        s.bucket_tags("bkt").unwrap(),
        Some(tags(&[("team", "blue")]))
    );
    assert_eq!(s.bucket_tags("other").unwrap(), None);
    s.set_bucket_tags("bkt", None).unwrap();
    assert_eq!(s.bucket_tags("bkt").unwrap(), None);

    // Ownership and the public access block, read with the ACL.
    for o in ObjectOwnership::ALL {
        s.set_bucket_ownership("bkt", Some(o)).unwrap();
        assert_eq!(s.bucket_ownership("bkt").unwrap(), Some(o));
    }
    let pab = block(true, false, true, false);
    s.set_public_access_block("bkt", Some(pab)).unwrap();
    s.set_bucket_acl("bkt", CannedAcl::PublicRead).unwrap();
    assert_eq!(
        s.bucket_access("bkt").unwrap(),
        BucketAccess {
            acl: CannedAcl::PublicRead,
            ownership: Some(ObjectOwnership::ObjectWriter),
            public_access_block: Some(pab),
        }
    );
    s.set_public_access_block("bkt", Some(block(false, true, false, true)))
        .unwrap();
    assert_eq!(
        s.public_access_block("bkt").unwrap(),
        Some(block(false, true, false, true))
    );
    assert_eq!(s.public_access_block("other").unwrap(), None);
    s.set_bucket_ownership("bkt", None).unwrap();
    s.set_public_access_block("bkt", None).unwrap();
    assert_eq!(s.bucket_ownership("bkt").unwrap(), None);
    assert_eq!(s.public_access_block("bkt").unwrap(), None);

    // A bucket deleted and made again starts without settings; so does
    // every bucket after a reset.
    s.set_bucket_tags("other", Some(tags(&[("a", "1")])))
        .unwrap();
    s.set_bucket_ownership("other", Some(ObjectOwnership::BucketOwnerEnforced))
        .unwrap();
    s.set_public_access_block("other", Some(pab)).unwrap();
    s.delete_bucket("other").unwrap();
    s.create_bucket("other").unwrap();
    assert_eq!(s.bucket_access("other").unwrap(), BucketAccess::default());
    assert_eq!(s.bucket_tags("other").unwrap(), None);
    s.set_bucket_tags("bkt", Some(tags(&[("a", "1")]))).unwrap();
    s.reset().unwrap();
    s.create_bucket("bkt").unwrap();
    assert_eq!(s.bucket_tags("bkt").unwrap(), None);
    assert_eq!(s.bucket_access("bkt").unwrap(), BucketAccess::default());
}

pub(crate) fn version_tags_and_acls(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("vbk").unwrap();
    s.set_bucket_versioning("vbk", Versioning::Enabled).unwrap();
    let v1 = put(s, "vbk", "k", b"one").version_id.unwrap();
    let v2 = put(s, "vbk", "k", b"two").version_id.unwrap();
    let before = s.head_object_version("vbk", "k", Some(&v1)).unwrap();

    // The noncurrent version alone changes; nothing else of it does.
    let m = s
        .set_version_tags("vbk", "k", Some(&v1), tags(&[("a", "1")]))
        .unwrap();
    assert_eq!(m.version_id.as_deref(), Some(v1.as_str()));
    let m = s
        .set_version_acl("vbk", "k", Some(&v1), CannedAcl::PublicRead)
        .unwrap();
    assert_eq!(m.props.tags, tags(&[("a", "1")]));
    let after = s.head_object_version("vbk", "k", Some(&v1)).unwrap();
    assert_eq!(after.props.acl, CannedAcl::PublicRead);
    assert_eq!(after.props.tags, tags(&[("a", "1")]));
    assert_eq!(
        (&after.etag, after.last_modified_ns, after.size),
        (&before.etag, before.last_modified_ns, before.size)
    );
    let current = s.head_object("vbk", "k").unwrap();
    assert_eq!(current.version_id.as_deref(), Some(v2.as_str()));
    assert!(current.props.tags.is_empty());
    assert_eq!(current.props.acl, CannedAcl::Private);
    assert_eq!(get(s, "vbk", "k"), b"two");

    // None names the latest.
    s.set_version_tags("vbk", "k", None, tags(&[("bkt", "2")]))
        .unwrap();
    assert_eq!(
        s.head_object("vbk", "k").unwrap().props.tags,
        tags(&[("bkt", "2")])
    );

    // No such version; a delete marker; a bucket without versioning.
    let e = s.set_version_tags("vbk", "k", Some(&"0".repeat(32)), BTreeMap::new());
    assert_eq!(e.unwrap_err().code(), "no_such_version");
    let marker = s
        .delete_object_version("vbk", "k", None)
        .unwrap()
        .version_id
        .unwrap();
    let e = s.set_version_acl("vbk", "k", Some(&marker), CannedAcl::Private);
    assert!(e.is_err());
    let e = s.set_version_tags("vbk", "k", None, BTreeMap::new());
    assert!(e.is_err());
    s.create_bucket("plain").unwrap();
    put(s, "plain", "k", b"x");
    s.set_version_tags("plain", "k", Some("null"), tags(&[("c", "3")]))
        .unwrap();
    assert_eq!(
        s.head_object("plain", "k").unwrap().props.tags,
        tags(&[("c", "3")])
    );
}

pub(crate) fn retried_completion_same_version(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("vbk").unwrap();
    s.set_bucket_versioning("vbk", Versioning::Enabled).unwrap();
    let up = s
        .create_upload("vbk", "big", CreateUploadOptions::default())
        .unwrap();
    let part = s
        .upload_part(
            "vbk",
            "big",
            &up.upload_id,
            1,
            &mut Cursor::new(b"only part"),
            PartOptions::default(),
        )
        .unwrap();
    let listed = [CompletedPart {
        part_number: 1,
        etag: part.etag.clone(),
    }];
    let first = s
        .complete_upload(
            "vbk",
            "big",
            &up.upload_id,
            &listed,
            WriteCondition::default(),
        )
        .unwrap();
    let vid = first.version_id.clone().expect("a version ID");
    assert_ne!(vid, "null");
    let again = s
        .complete_upload(
            "vbk",
            "big",
            &up.upload_id,
            &listed,
            WriteCondition::default(),
        )
        .unwrap();
    assert_eq!(again.version_id.as_deref(), Some(vid.as_str()));
    assert_eq!(again.etag, first.etag);
    // Still one version.
    let page = s
        .list_object_versions(
            "vbk",
            &VersionQuery {
                max_keys: 1000,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(page.versions.len(), 1);

    // Unversioned: the retry answers no version ID, as the first did.
    s.create_bucket("plain").unwrap();
    let up = s
        .create_upload("plain", "big", CreateUploadOptions::default())
        .unwrap();
    let part = s
        .upload_part(
            "plain",
            "big",
            &up.upload_id,
            1,
            &mut Cursor::new(b"only part"),
            PartOptions::default(),
        )
        .unwrap();
    let listed = [CompletedPart {
        part_number: 1,
        etag: part.etag,
    }];
    let first = s
        .complete_upload(
            "plain",
            "big",
            &up.upload_id,
            &listed,
            WriteCondition::default(),
        )
        .unwrap();
    let again = s
        .complete_upload(
            "plain",
            "big",
            &up.upload_id,
            &listed,
            WriteCondition::default(),
        )
        .unwrap();
    assert_eq!(first.version_id, None);
    assert_eq!(again.version_id, None);
}

#[test]
fn bucket_settings_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let pab = block(true, true, false, true);
    {
        let s = Store::open(&data, StoreOptions::default()).unwrap();
        s.create_bucket("bkt").unwrap();
        s.set_bucket_tags("bkt", Some(tags(&[("a", "1")]))).unwrap();
        s.set_bucket_ownership("bkt", Some(ObjectOwnership::BucketOwnerPreferred))
            .unwrap();
        s.set_public_access_block("bkt", Some(pab)).unwrap();
    }
    let s = Store::open(&data, StoreOptions::default()).unwrap();
    assert_eq!(s.bucket_tags("bkt").unwrap(), Some(tags(&[("a", "1")])));
    assert_eq!(
        s.bucket_ownership("bkt").unwrap(),
        Some(ObjectOwnership::BucketOwnerPreferred)
    );
    assert_eq!(s.public_access_block("bkt").unwrap(), Some(pab));
    assert_eq!(s.verify().unwrap(), Vec::<String>::new());
}

#[test]
fn a_store_from_before_bucket_settings_is_migrated_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    {
        let s = Store::open(&data, StoreOptions::default()).unwrap();
        s.create_bucket("old").unwrap();
        put(&s, "old", "k", b"v");
    }
    // Make it schema 4: none of schema 6's columns.
    {
        let conn = rusqlite::Connection::open(data.join("meta.db")).unwrap();
        conn.execute_batch(
            "ALTER TABLE buckets DROP COLUMN tags;
             ALTER TABLE buckets DROP COLUMN ownership;
             ALTER TABLE buckets DROP COLUMN public_access_block;
             ALTER TABLE completed_uploads DROP COLUMN version_id;
             PRAGMA user_version = 4;",
        )
        .unwrap();
    }
    let s = Store::open(&data, StoreOptions::default()).unwrap();
    assert_eq!(s.bucket_access("old").unwrap(), BucketAccess::default());
    assert_eq!(s.bucket_tags("old").unwrap(), None);
    s.set_bucket_tags("old", Some(tags(&[("a", "1")]))).unwrap();
    s.set_bucket_ownership("old", Some(ObjectOwnership::ObjectWriter))
        .unwrap();
    assert_eq!(get(&s, "old", "k"), b"v");
    drop(s);
    let s = Store::open(&data, StoreOptions::default()).unwrap();
    assert_eq!(s.bucket_tags("old").unwrap(), Some(tags(&[("a", "1")])));
    let conn = rusqlite::Connection::open(data.join("meta.db")).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert!(version >= 6, "schema {version}");
}

/// A bucket's default encryption (schema 8): set, replaced, removed, gone
/// with its bucket, kept across a reopen, and added to a schema 7 store by
/// the open-time migration.
#[test]
fn default_encryption_is_kept_and_migrated() {
    let on = DefaultEncryption {
        bucket_key_enabled: true,
    };
    let mem = Store::memory(StoreOptions::default()).unwrap();
    mem.create_bucket("mem").unwrap();
    assert_eq!(mem.bucket_encryption("mem").unwrap(), None);
    mem.set_bucket_encryption("mem", Some(on)).unwrap();
    assert_eq!(mem.bucket_encryption("mem").unwrap(), Some(on));
    mem.set_bucket_encryption("mem", Some(DefaultEncryption::default()))
        .unwrap();
    assert_eq!(
        mem.bucket_encryption("mem").unwrap(),
        Some(DefaultEncryption::default())
    );
    mem.set_bucket_encryption("mem", None).unwrap();
    assert_eq!(mem.bucket_encryption("mem").unwrap(), None);
    mem.set_bucket_encryption("mem", Some(on)).unwrap();
    mem.delete_bucket("mem").unwrap();
    assert_eq!(
        mem.bucket_encryption("mem").unwrap_err().code(),
        "no_such_bucket"
    );
    mem.create_bucket("mem").unwrap();
    assert_eq!(mem.bucket_encryption("mem").unwrap(), None);

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    {
        let s = Store::open(&data, StoreOptions::default()).unwrap();
        s.create_bucket("old").unwrap();
        s.create_bucket("kept").unwrap();
        s.set_bucket_encryption("kept", Some(on)).unwrap();
    }
    let s = Store::open(&data, StoreOptions::default()).unwrap();
    assert_eq!(s.bucket_encryption("kept").unwrap(), Some(on));
    drop(s);
    // Make it schema 7: no `buckets.encryption`.
    {
        let conn = rusqlite::Connection::open(data.join("meta.db")).unwrap();
        conn.execute_batch("ALTER TABLE buckets DROP COLUMN encryption; PRAGMA user_version = 7;")
            .unwrap();
    }
    let s = Store::open(&data, StoreOptions::default()).unwrap();
    assert_eq!(s.bucket_encryption("old").unwrap(), None);
    assert_eq!(s.bucket_encryption("kept").unwrap(), None);
    s.set_bucket_encryption("old", Some(on)).unwrap();
    drop(s);
    let s = Store::open(&data, StoreOptions::default()).unwrap();
    assert_eq!(s.bucket_encryption("old").unwrap(), Some(on));
    assert_eq!(s.verify().unwrap(), Vec::<String>::new());
    let conn = rusqlite::Connection::open(data.join("meta.db")).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert!(version >= 8, "schema {version}");
}
