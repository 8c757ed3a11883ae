//! Versioning: bucket states, version IDs, delete markers, the null
//! version, ListObjectVersions paging, usage over every version, on both
//! backends (the model of random operations: `versioning_model.rs`).

use std::io::Cursor;

use stow_store::*;

#[path = "common/mod.rs"]
mod common;
use common::*;

on_both_backends!(
    enabled_keeps_every_version,
    delete_markers,
    deleting_versions_promotes_the_next,
    suspended_writes_the_null_version,
    objects_from_before_are_the_null_version,
    copies_and_completions_make_versions,
    listing_pages_and_prefixes,
    buckets_with_versions_are_not_empty,
    quotas_count_every_version,
    conditions_see_the_latest,
    version_ids_are_checked,
);

fn put(s: &Store, b: &str, k: &str, body: &[u8]) -> ObjectMeta {
    s.put_object(b, k, &mut Cursor::new(body), PutOptions::default())
        .unwrap()
}

fn read(s: &Store, b: &str, k: &str, v: Option<&str>) -> Result<Vec<u8>> {
    s.get_object_version(b, k, v, None, None)?.body.into_vec()
}

fn versioned(s: &Store, b: &str) {
    s.create_bucket(b).unwrap();
    s.set_bucket_versioning(b, Versioning::Enabled).unwrap();
}

fn all_versions(s: &Store, b: &str) -> Vec<VersionEntry> {
    let q = VersionQuery {
        max_keys: 100_000,
        ..Default::default()
    };
    s.list_object_versions(b, &q).unwrap().versions
}

/// Large enough to live in a blob file.
const FILE_BODY: usize = 100 * 1024;

fn enabled_keeps_every_version(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("vbk").unwrap();
    assert_eq!(s.bucket_versioning("vbk").unwrap(), Versioning::Unversioned);
    s.set_bucket_versioning("vbk", Versioning::Enabled).unwrap();
    assert_eq!(s.bucket_versioning("vbk").unwrap(), Versioning::Enabled);
    let v1 = put(s, "vbk", "k", b"one");
    let v2 = put(s, "vbk", "k", &vec![2u8; FILE_BODY]);
    let (id1, id2) = (v1.version_id.unwrap(), v2.version_id.unwrap());
    assert_ne!(id1, id2);
    assert_eq!(read(s, "vbk", "k", None).unwrap(), vec![2u8; FILE_BODY]);
    assert_eq!(read(s, "vbk", "k", Some(&id1)).unwrap(), b"one");
    assert_eq!(read(s, "vbk", "k", Some(&id2)).unwrap().len(), FILE_BODY);
    let head = s.head_object_version("vbk", "k", Some(&id1)).unwrap();
    assert_eq!((head.size, head.version_id.as_deref()), (3, Some(&*id1)));
    assert_eq!(
        s.head_object("vbk", "k").unwrap().version_id,
        Some(id2.clone())
    );
    // A range of an old version.
    let r = s
        .get_object_version("vbk", "k", Some(&id1), Some(ByteRange::From(1)), None)
        .unwrap();
    assert_eq!(r.body.into_vec().unwrap(), b"ne");
    let listed = all_versions(s, "vbk");
    let ids: Vec<(&str, bool)> = listed
        .iter()
        .map(|v| (v.version_id.as_str(), v.is_latest))
        .collect();
    assert_eq!(ids, [(&*id2, true), (&*id1, false)]);
    assert_eq!(
        s.usage().unwrap(),
        Usage {
            bytes: 3 + FILE_BODY as u64,
            objects: 2
        }
    );
    // The plain listing shows the key once.
    let page = s
        .list_objects(
            "vbk",
            &ListQuery {
                max_keys: 10,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(page.objects.len(), 1);
    assert_eq!(page.objects[0].size, FILE_BODY as u64);
    // Once versioned, never unversioned again; suspending is fine.
    assert!(matches!(
        s.set_bucket_versioning("vbk", Versioning::Unversioned),
        Err(StoreError::InvalidArgument { .. })
    ));
    s.set_bucket_versioning("vbk", Versioning::Suspended)
        .unwrap();
    assert_eq!(s.bucket_versioning("vbk").unwrap(), Versioning::Suspended);
}

fn delete_markers(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    versioned(s, "vbk");
    let v1 = put(s, "vbk", "k", b"one").version_id.unwrap();
    let d = s.delete_object_version("vbk", "k", None).unwrap();
    assert!(d.delete_marker && d.existed);
    let marker = d.version_id.unwrap();
    assert_ne!(marker, v1);
    match read(s, "vbk", "k", None) {
        Err(StoreError::KeyDeleted { version_id, .. }) => assert_eq!(version_id, marker),
        other => panic!("expected KeyDeleted, got {other:?}"),
    }
    assert_eq!(
        s.head_object("vbk", "k").unwrap_err().code(),
        "no_such_key",
        "a deleted key is absent"
    );
    assert!(matches!(
        s.head_object_version("vbk", "k", Some(&marker)),
        Err(StoreError::DeleteMarkerVersion { .. })
    ));
    assert_eq!(read(s, "vbk", "k", Some(&v1)).unwrap(), b"one");
    let listed = all_versions(s, "vbk");
    assert_eq!(listed.len(), 2);
    assert!(listed[0].delete_marker && listed[0].is_latest);
    assert_eq!(listed[0].version_id, marker);
    assert!(!listed[1].delete_marker && !listed[1].is_latest);
    let page = s
        .list_objects(
            "vbk",
            &ListQuery {
                max_keys: 10,
                ..Default::default()
            },
        )
        .unwrap();
    assert!(page.objects.is_empty());
    // A marker costs nothing in usage; the old version still counts.
    assert_eq!(
        s.usage().unwrap(),
        Usage {
            bytes: 3,
            objects: 1
        }
    );
    // A second plain delete stacks another marker.
    let d2 = s.delete_object_version("vbk", "k", None).unwrap();
    assert_ne!(d2.version_id.as_deref(), Some(&*marker));
    assert_eq!(all_versions(s, "vbk").len(), 3);
    // Deleting both markers brings the object back.
    for m in [d2.version_id.unwrap(), marker] {
        let gone = s.delete_object_version("vbk", "k", Some(&m)).unwrap();
        assert!(gone.delete_marker && gone.existed);
    }
    assert_eq!(read(s, "vbk", "k", None).unwrap(), b"one");
    assert_eq!(all_versions(s, "vbk").len(), 1);
    assert!(all_versions(s, "vbk")[0].is_latest);
    // The plain API's delete adds a marker too.
    assert!(s.delete_object("vbk", "k").unwrap());
    assert_eq!(read(s, "vbk", "k", None).unwrap_err().code(), "no_such_key");
    // A delete of a key that never existed still adds a marker (as S3).
    let d = s.delete_object_version("vbk", "never", None).unwrap();
    assert!(d.delete_marker);
    assert_eq!(all_versions(s, "vbk").len(), 3);
}

fn deleting_versions_promotes_the_next(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    versioned(s, "vbk");
    let ids: Vec<String> = (0..3u8)
        .map(|i| put(s, "vbk", "k", &vec![i; FILE_BODY]).version_id.unwrap())
        .collect();
    // The current version goes: the one before it is current again.
    let d = s.delete_object_version("vbk", "k", Some(&ids[2])).unwrap();
    assert!(d.existed && !d.delete_marker);
    assert_eq!(read(s, "vbk", "k", None).unwrap(), vec![1u8; FILE_BODY]);
    assert_eq!(
        s.head_object("vbk", "k").unwrap().version_id.as_deref(),
        Some(&*ids[1])
    );
    // A noncurrent version goes: nothing else changes.
    s.delete_object_version("vbk", "k", Some(&ids[0])).unwrap();
    assert_eq!(read(s, "vbk", "k", None).unwrap(), vec![1u8; FILE_BODY]);
    assert!(matches!(
        read(s, "vbk", "k", Some(&ids[0])),
        Err(StoreError::NoSuchVersion { .. })
    ));
    // Deleting it again deletes nothing, and is no error.
    let again = s.delete_object_version("vbk", "k", Some(&ids[0])).unwrap();
    assert!(!again.existed);
    assert_eq!(
        s.usage().unwrap(),
        Usage {
            bytes: FILE_BODY as u64,
            objects: 1
        }
    );
    s.delete_object_version("vbk", "k", Some(&ids[1])).unwrap();
    assert!(all_versions(s, "vbk").is_empty());
    assert_eq!(s.usage().unwrap(), Usage::default());
    assert!(matches!(
        read(s, "vbk", "k", None),
        Err(StoreError::NoSuchKey { .. })
    ));
}

fn suspended_writes_the_null_version(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    versioned(s, "vbk");
    let v1 = put(s, "vbk", "k", b"enabled").version_id.unwrap();
    s.set_bucket_versioning("vbk", Versioning::Suspended)
        .unwrap();
    let n = put(s, "vbk", "k", b"null-1");
    assert_eq!(n.version_id.as_deref(), Some("null"));
    // Another put replaces the null version; v1 stays.
    put(s, "vbk", "k", b"null-22");
    let listed = all_versions(s, "vbk");
    let ids: Vec<&str> = listed.iter().map(|v| v.version_id.as_str()).collect();
    assert_eq!(ids, ["null", &*v1]);
    assert_eq!(read(s, "vbk", "k", Some("null")).unwrap(), b"null-22");
    assert_eq!(
        s.usage().unwrap(),
        Usage {
            bytes: 7 + 7,
            objects: 2
        }
    );
    // A delete writes a null delete marker, replacing the null version.
    let d = s.delete_object_version("vbk", "k", None).unwrap();
    assert_eq!(
        (d.version_id.as_deref(), d.delete_marker),
        (Some("null"), true)
    );
    let listed = all_versions(s, "vbk");
    assert_eq!(listed.len(), 2);
    assert!(listed[0].delete_marker && listed[0].version_id == "null");
    assert_eq!(
        s.usage().unwrap(),
        Usage {
            bytes: 7,
            objects: 1
        }
    );
    // Enabled again: a new version goes on top; the null marker stays below.
    s.set_bucket_versioning("vbk", Versioning::Enabled).unwrap();
    let v3 = put(s, "vbk", "k", b"three").version_id.unwrap();
    let ids: Vec<String> = all_versions(s, "vbk")
        .into_iter()
        .map(|v| v.version_id)
        .collect();
    assert_eq!(ids, [v3, "null".into(), v1]);
    // Suspended again, a put replaces the null marker, not v3.
    s.set_bucket_versioning("vbk", Versioning::Suspended)
        .unwrap();
    put(s, "vbk", "k", b"null-again");
    let listed = all_versions(s, "vbk");
    assert_eq!(listed.len(), 3);
    assert_eq!(listed[0].version_id, "null");
    assert!(!listed.iter().any(|v| v.delete_marker));
}

fn objects_from_before_are_the_null_version(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("vbk").unwrap();
    let before = put(s, "vbk", "k", b"before");
    assert_eq!(before.version_id, None, "an unversioned bucket has no IDs");
    let d = s.delete_object_version("vbk", "gone", None).unwrap();
    assert_eq!(d, Deleted::default());
    s.set_bucket_versioning("vbk", Versioning::Enabled).unwrap();
    assert_eq!(
        s.head_object("vbk", "k").unwrap().version_id.as_deref(),
        Some("null")
    );
    let v = put(s, "vbk", "k", b"after").version_id.unwrap();
    assert_eq!(read(s, "vbk", "k", Some("null")).unwrap(), b"before");
    let ids: Vec<String> = all_versions(s, "vbk")
        .into_iter()
        .map(|v| v.version_id)
        .collect();
    assert_eq!(ids, [v, "null".to_string()]);
    s.delete_object_version("vbk", "k", Some("null")).unwrap();
    assert_eq!(all_versions(s, "vbk").len(), 1);
}

fn copies_and_completions_make_versions(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    versioned(s, "vbk");
    let old = put(s, "vbk", "src", &vec![1u8; FILE_BODY])
        .version_id
        .unwrap();
    put(s, "vbk", "src", b"newer");
    // A copy of the old version, by ID: shares its blob (no new bytes on disk).
    let copy = s
        .copy_object(
            "vbk",
            "src",
            "vbk",
            "dst",
            CopyOptions {
                source_version: Some(old.clone()),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(copy.version_id.is_some());
    assert_eq!(read(s, "vbk", "dst", None).unwrap(), vec![1u8; FILE_BODY]);
    // A copy of a delete marker's key is no_such_key; of the marker, refused.
    let marker = s
        .delete_object_version("vbk", "src", None)
        .unwrap()
        .version_id
        .unwrap();
    let err = s
        .copy_object("vbk", "src", "vbk", "x", CopyOptions::default())
        .unwrap_err();
    assert_eq!(err.code(), "no_such_key");
    let err = s
        .copy_object(
            "vbk",
            "src",
            "vbk",
            "x",
            CopyOptions {
                source_version: Some(marker),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(matches!(err, StoreError::DeleteMarkerVersion { .. }));
    // A completion over an existing object keeps the old one as a version.
    let up = s
        .create_upload("vbk", "dst", CreateUploadOptions::default())
        .unwrap();
    let part = s
        .upload_part(
            "vbk",
            "dst",
            &up.upload_id,
            1,
            &mut Cursor::new(b"part".to_vec()),
            PartOptions::default(),
        )
        .unwrap();
    let done = s
        .complete_upload(
            "vbk",
            "dst",
            &up.upload_id,
            &[CompletedPart {
                part_number: 1,
                etag: part.etag,
            }],
            WriteCondition::Always,
        )
        .unwrap();
    assert!(done.version_id.is_some());
    assert_eq!(read(s, "vbk", "dst", None).unwrap(), b"part");
    let dst: Vec<_> = all_versions(s, "vbk")
        .into_iter()
        .filter(|v| v.key == "dst")
        .collect();
    assert_eq!(dst.len(), 2);
    assert_eq!(
        read(s, "vbk", "dst", Some(&dst[1].version_id)).unwrap(),
        vec![1u8; FILE_BODY]
    );
    // Usage: every version, the shared blob counted per version.
    assert_eq!(
        s.usage().unwrap(),
        Usage {
            bytes: 2 * FILE_BODY as u64 + 5 + 4,
            objects: 4
        }
    );
}

fn listing_pages_and_prefixes(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    versioned(s, "vbk");
    let keys = ["a", "a/1", "a/2", "b", "b/x/1", "c"];
    for (i, k) in keys.iter().enumerate() {
        for n in 0..=(i % 3) {
            put(s, "vbk", k, format!("{k}{n}").as_bytes());
        }
        if i.is_multiple_of(2) {
            s.delete_object_version("vbk", k, None).unwrap();
        }
    }
    let everything = all_versions(s, "vbk");
    // Keys in order, each key newest first, exactly one latest per key.
    for w in everything.windows(2) {
        assert!(w[0].key <= w[1].key);
        if w[0].key == w[1].key {
            assert!(!w[1].is_latest);
            assert!(w[0].last_modified_ns >= w[1].last_modified_ns);
        } else {
            assert!(w[1].is_latest);
        }
    }
    assert!(everything[0].is_latest);
    // Every page size covers the same listing, through both markers.
    for max in 1..=5 {
        let mut got = Vec::new();
        let mut q = VersionQuery {
            max_keys: max,
            ..Default::default()
        };
        loop {
            let page = s.list_object_versions("vbk", &q).unwrap();
            assert!(page.versions.len() <= max);
            got.extend(page.versions);
            if !page.is_truncated {
                break;
            }
            q.key_marker = page.next_key_marker;
            q.version_id_marker = page.next_version_id_marker;
        }
        assert_eq!(got, everything, "pages of {max}");
    }
    // Prefix and delimiter, paged: common prefixes once each.
    let mut seen_prefixes = Vec::new();
    let mut seen = Vec::new();
    let mut q = VersionQuery {
        delimiter: Some("/".into()),
        max_keys: 2,
        ..Default::default()
    };
    loop {
        let page = s.list_object_versions("vbk", &q).unwrap();
        seen_prefixes.extend(page.common_prefixes);
        seen.extend(page.versions.into_iter().map(|v| v.key));
        if !page.is_truncated {
            break;
        }
        q.key_marker = page.next_key_marker;
        q.version_id_marker = page.next_version_id_marker;
    }
    assert_eq!(seen_prefixes, ["a/", "b/"]);
    seen.dedup();
    assert_eq!(seen, ["a", "b", "c"]);
    let q = VersionQuery {
        prefix: "a/".into(),
        max_keys: 100,
        ..Default::default()
    };
    let under: Vec<String> = s
        .list_object_versions("vbk", &q)
        .unwrap()
        .versions
        .into_iter()
        .map(|v| v.key)
        .collect();
    assert_eq!(under, ["a/1", "a/1", "a/2", "a/2", "a/2", "a/2"]);
    // A version marker whose version is gone still resumes in place.
    let a2: Vec<_> = everything.iter().filter(|v| v.key == "a/2").collect();
    s.delete_object_version("vbk", "a/2", Some(&a2[1].version_id))
        .unwrap();
    let q = VersionQuery {
        key_marker: Some("a/2".into()),
        version_id_marker: Some(a2[1].version_id.clone()),
        max_keys: 1,
        ..Default::default()
    };
    let page = s.list_object_versions("vbk", &q).unwrap();
    assert_eq!(page.versions[0].version_id, a2[2].version_id);
    // The key's latest version deleted between two pages: the one before
    // it, current now, is still listed after the marker.
    let ids: Vec<String> = (0..3u8)
        .map(|i| put(s, "vbk", "z", &[i]).version_id.unwrap())
        .collect();
    let q = VersionQuery {
        prefix: "z".into(),
        max_keys: 1,
        ..Default::default()
    };
    let first = s.list_object_versions("vbk", &q).unwrap();
    assert_eq!(first.versions[0].version_id, ids[2]);
    s.delete_object_version("vbk", "z", Some(&ids[2])).unwrap();
    let q = VersionQuery {
        key_marker: first.next_key_marker,
        version_id_marker: first.next_version_id_marker,
        ..q
    };
    let rest = s.list_object_versions("vbk", &VersionQuery { max_keys: 10, ..q });
    let rest: Vec<(String, bool)> = rest
        .unwrap()
        .versions
        .into_iter()
        .map(|v| (v.version_id, v.is_latest))
        .collect();
    assert_eq!(rest, [(ids[1].clone(), true), (ids[0].clone(), false)]);
    // A version marker without a key marker is refused.
    let q = VersionQuery {
        version_id_marker: Some("null".into()),
        max_keys: 1,
        ..Default::default()
    };
    assert!(s.list_object_versions("vbk", &q).is_err());
}

fn buckets_with_versions_are_not_empty(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    versioned(s, "vbk");
    let v = put(s, "vbk", "k", b"x").version_id.unwrap();
    let m = s
        .delete_object_version("vbk", "k", None)
        .unwrap()
        .version_id
        .unwrap();
    assert!(matches!(
        s.delete_bucket("vbk"),
        Err(StoreError::BucketNotEmpty { .. })
    ));
    s.delete_object_version("vbk", "k", Some(&v)).unwrap();
    assert!(
        matches!(
            s.delete_bucket("vbk"),
            Err(StoreError::BucketNotEmpty { .. }),
        ),
        "a lone delete marker keeps the bucket"
    );
    s.delete_object_version("vbk", "k", Some(&m)).unwrap();
    s.delete_bucket("vbk").unwrap();
}

fn quotas_count_every_version(make: Make) {
    let f = make(StoreOptions {
        max_bytes: Some(10),
        max_objects: Some(3),
        ..Default::default()
    });
    let s = &f.store;
    versioned(s, "vbk");
    put(s, "vbk", "k", b"1234");
    put(s, "vbk", "k", b"1234");
    // An overwrite adds bytes now: 8 + 4 > 10.
    let err = s
        .put_object("vbk", "k", &mut Cursor::new(b"1234"), PutOptions::default())
        .unwrap_err();
    assert_eq!(err.code(), "quota_exceeded");
    // Delete markers cost nothing, so a delete always works.
    s.delete_object_version("vbk", "k", None).unwrap();
    put(s, "vbk", "j", b"1");
    let err = s
        .put_object("vbk", "j", &mut Cursor::new(b"1"), PutOptions::default())
        .unwrap_err();
    assert_eq!(err.code(), "quota_exceeded", "object count: three versions");
    // Suspended: a put that replaces the null version is checked on its net growth.
    s.set_bucket_versioning("vbk", Versioning::Suspended)
        .unwrap();
    let err = s
        .put_object("vbk", "n", &mut Cursor::new(b"1"), PutOptions::default())
        .unwrap_err();
    assert_eq!(err.code(), "quota_exceeded");
}

fn conditions_see_the_latest(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    versioned(s, "vbk");
    let first = put(s, "vbk", "k", b"x");
    s.delete_object_version("vbk", "k", None).unwrap();
    // The latest version is a marker: create-only succeeds, If-Match is 404.
    let if_match = PutOptions {
        condition: WriteCondition::IfMatch(first.etag.clone()),
        ..Default::default()
    };
    let err = s
        .put_object("vbk", "k", &mut Cursor::new(b"y"), if_match)
        .unwrap_err();
    assert_eq!(err.code(), "no_such_key");
    let create = PutOptions {
        condition: WriteCondition::IfAbsent,
        ..Default::default()
    };
    s.put_object("vbk", "k", &mut Cursor::new(b"y"), create)
        .unwrap();
    let again = PutOptions {
        condition: WriteCondition::IfAbsent,
        ..Default::default()
    };
    let err = s
        .put_object("vbk", "k", &mut Cursor::new(b"z"), again)
        .unwrap_err();
    assert_eq!(err.code(), "precondition_failed");
    assert_eq!(all_versions(s, "vbk").len(), 3);
    // A guarded save keeps the version it replaces.
    let seen = s.read_for_save("vbk", "k", 1024).unwrap();
    let req = SaveRequest {
        bucket: "vbk".into(),
        key: "k".into(),
        props: ObjectProps::default(),
        checksum_algorithm: None,
        guard: SaveGuard::Observed(seen.condition),
        request_key: None,
    };
    let saved = s.save(req, &mut Cursor::new(b"saved".to_vec())).unwrap();
    assert!(saved.object.version_id.is_some());
    assert_eq!(all_versions(s, "vbk").len(), 4);
}

fn version_ids_are_checked(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    versioned(s, "vbk");
    let id = put(s, "vbk", "k", b"x").version_id.unwrap();
    for bad in ["", "xyz", "NULL", &id.to_uppercase()] {
        assert!(
            matches!(
                read(s, "vbk", "k", Some(bad)),
                Err(StoreError::InvalidVersionId { .. })
            ),
            "{bad:?}"
        );
        assert_eq!(
            s.delete_object_version("vbk", "k", Some(bad))
                .unwrap_err()
                .code(),
            "invalid_version_id"
        );
    }
    // Well formed but another key's, or none at all.
    put(s, "vbk", "other", b"y");
    assert!(matches!(
        read(s, "vbk", "other", Some(&id)),
        Err(StoreError::NoSuchVersion { .. })
    ));
    assert!(matches!(
        read(s, "vbk", "k", Some("null")),
        Err(StoreError::NoSuchVersion { .. })
    ));
}

// ---- schema -------------------------------------------------------------------

#[test]
fn a_store_from_before_versioning_is_migrated_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    {
        let s = Store::open(&data, StoreOptions::default()).unwrap();
        s.create_bucket("old").unwrap();
        put(&s, "old", "k", b"kept");
    }
    // Make it schema version 1: no versioning columns, no versions table.
    {
        let conn = rusqlite::Connection::open(data.join("meta.db")).unwrap();
        conn.execute_batch(
            "DROP INDEX versions_null; DROP TABLE versions;
             ALTER TABLE buckets DROP COLUMN versioning;
             ALTER TABLE objects DROP COLUMN vid; ALTER TABLE objects DROP COLUMN seq;
             PRAGMA user_version = 1;",
        )
        .unwrap();
    }
    let s = Store::open(&data, StoreOptions::default()).unwrap();
    assert_eq!(s.bucket_versioning("old").unwrap(), Versioning::Unversioned);
    assert_eq!(read(&s, "old", "k", None).unwrap(), b"kept");
    s.set_bucket_versioning("old", Versioning::Enabled).unwrap();
    let v = put(&s, "old", "k", b"new").version_id.unwrap();
    assert_eq!(read(&s, "old", "k", Some("null")).unwrap(), b"kept");
    assert!(s.verify().unwrap().is_empty());
    drop(s);
    let s = Store::open(&data, StoreOptions::default()).unwrap();
    assert_eq!(read(&s, "old", "k", Some(&v)).unwrap(), b"new");
    assert_eq!(all_versions(&s, "old").len(), 2);
    let conn = rusqlite::Connection::open(data.join("meta.db")).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert!(version >= 4, "migrated to {version}");
}

#[test]
fn versions_survive_a_reopen_and_a_reset_clears_them() {
    let dir = tempfile::tempdir().unwrap();
    let (v1, v2);
    {
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        versioned(&s, "vbk");
        v1 = put(&s, "vbk", "k", &vec![1u8; FILE_BODY])
            .version_id
            .unwrap();
        v2 = s
            .delete_object_version("vbk", "k", None)
            .unwrap()
            .version_id
            .unwrap();
    }
    let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
    assert_eq!(s.bucket_versioning("vbk").unwrap(), Versioning::Enabled);
    assert_eq!(
        read(&s, "vbk", "k", Some(&v1)).unwrap(),
        vec![1u8; FILE_BODY]
    );
    assert!(matches!(
        s.head_object_version("vbk", "k", None),
        Err(StoreError::KeyDeleted { ref version_id, .. }) if *version_id == v2
    ));
    let report = s.reset().unwrap();
    assert_eq!(report.objects, 1);
    assert!(s.verify().unwrap().is_empty());
    s.create_bucket("vbk").unwrap();
    assert_eq!(s.bucket_versioning("vbk").unwrap(), Versioning::Unversioned);
    assert!(all_versions(&s, "vbk").is_empty());
}
