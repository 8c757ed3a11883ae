//! Canned ACLs kept with buckets and objects: set, read back, carried by
//! uploads, never copied from a copy's source, durable across a reopen,
//! and a store from before ACLs migrated at open.

use std::io::Cursor;

use stow_store::*;

fn put(s: &Store, bucket: &str, key: &str, acl: CannedAcl) -> ObjectMeta {
    s.put_object(
        bucket,
        key,
        &mut Cursor::new(b"body".to_vec()),
        PutOptions {
            props: ObjectProps {
                acl,
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .unwrap()
}

fn every_acl_round_trips(s: &Store) {
    for (i, acl) in CannedAcl::ALL.into_iter().enumerate() {
        let bucket = format!("acl-{i}");
        assert!(s.create_bucket_with_acl(&bucket, acl).unwrap());
        assert_eq!(s.bucket_acl(&bucket).unwrap(), acl);
        let meta = put(s, &bucket, "k", acl);
        assert_eq!(meta.props.acl, acl);
        assert_eq!(s.head_object(&bucket, "k").unwrap().props.acl, acl);
    }
    // Changing an object's ACL changes nothing else.
    let before = s.head_object("acl-0", "k").unwrap();
    let after = s
        .set_object_acl("acl-0", "k", CannedAcl::PublicRead)
        .unwrap();
    assert_eq!(after.props.acl, CannedAcl::PublicRead);
    assert_eq!(
        (
            &after.etag,
            after.last_modified_ns,
            &after.version,
            after.size
        ),
        (
            &before.etag,
            before.last_modified_ns,
            &before.version,
            before.size
        )
    );
    // A bucket's ACL, set and reset; creating an existing bucket sets it.
    s.set_bucket_acl("acl-1", CannedAcl::AuthenticatedRead)
        .unwrap();
    assert_eq!(s.bucket_acl("acl-1").unwrap(), CannedAcl::AuthenticatedRead);
    assert!(!s
        .create_bucket_with_acl("acl-1", CannedAcl::Private)
        .unwrap());
    assert_eq!(s.bucket_acl("acl-1").unwrap(), CannedAcl::Private);
    // A copy takes its own ACL, never the source's.
    let copy = s
        .copy_object("acl-1", "k", "acl-1", "copy", CopyOptions::default())
        .unwrap();
    assert_eq!(copy.props.acl, CannedAcl::Private);
    let copy = s
        .copy_object(
            "acl-0",
            "k",
            "acl-1",
            "copy2",
            CopyOptions {
                acl: CannedAcl::PublicReadWrite,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(copy.props.acl, CannedAcl::PublicReadWrite);
    // A multipart object takes the upload's ACL.
    let up = s
        .create_upload(
            "acl-1",
            "mp",
            CreateUploadOptions {
                props: ObjectProps {
                    acl: CannedAcl::PublicRead,
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .unwrap();
    let part = s
        .upload_part(
            "acl-1",
            "mp",
            &up.upload_id,
            1,
            &mut Cursor::new(b"x".to_vec()),
            PartOptions::default(),
        )
        .unwrap();
    let done = s
        .complete_upload(
            "acl-1",
            "mp",
            &up.upload_id,
            &[CompletedPart {
                part_number: 1,
                etag: part.etag,
            }],
            WriteCondition::Always,
        )
        .unwrap();
    assert_eq!(done.props.acl, CannedAcl::PublicRead);
    // Missing things are the usual errors.
    assert_eq!(s.bucket_acl("nope").unwrap_err().code(), "no_such_bucket");
    assert_eq!(
        s.set_bucket_acl("nope", CannedAcl::PublicRead)
            .unwrap_err()
            .code(),
        "no_such_bucket"
    );
    assert_eq!(
        s.set_object_acl("acl-1", "nope", CannedAcl::PublicRead)
            .unwrap_err()
            .code(),
        "no_such_key"
    );
}

#[test]
fn acls_in_memory() {
    every_acl_round_trips(&Store::memory(StoreOptions::default()).unwrap());
}

#[test]
fn acls_on_disk_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    {
        let s = Store::open(&data, StoreOptions::default()).unwrap();
        every_acl_round_trips(&s);
    }
    let s = Store::open(&data, StoreOptions::default()).unwrap();
    assert_eq!(s.bucket_acl("acl-2").unwrap(), CannedAcl::PublicReadWrite);
    assert_eq!(s.bucket_acl("acl-1").unwrap(), CannedAcl::Private);
    assert_eq!(
        s.head_object("acl-0", "k").unwrap().props.acl,
        CannedAcl::PublicRead
    );
    assert_eq!(
        s.head_object("acl-3", "k").unwrap().props.acl,
        CannedAcl::AuthenticatedRead
    );
    assert_eq!(s.verify().unwrap(), Vec::<String>::new());
}

#[test]
fn a_store_from_before_acls_is_migrated_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    {
        let s = Store::open(&data, StoreOptions::default()).unwrap();
        s.create_bucket("old").unwrap();
        put(&s, "old", "k", CannedAcl::Private);
    }
    // Make it the previous schema: no ACL column, version 0.
    {
        let conn = rusqlite::Connection::open(data.join("meta.db")).unwrap();
        conn.execute_batch("ALTER TABLE buckets DROP COLUMN acl; PRAGMA user_version = 0;")
            .unwrap();
    }
    let s = Store::open(&data, StoreOptions::default()).unwrap();
    assert_eq!(s.bucket_acl("old").unwrap(), CannedAcl::Private);
    s.set_bucket_acl("old", CannedAcl::PublicRead).unwrap();
    assert_eq!(
        s.head_object("old", "k").unwrap().props.acl,
        CannedAcl::Private
    );
    drop(s);
    let s = Store::open(&data, StoreOptions::default()).unwrap();
    assert_eq!(s.bucket_acl("old").unwrap(), CannedAcl::PublicRead);
    let conn = rusqlite::Connection::open(data.join("meta.db")).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert!(version >= 4, "migrated to {version}");
}
