//! Joined uploads (`Store::join_upload`, `Store::finish_joined`): an
//! upload completed into a file outside the store, never into an object.

use std::fs;
use std::io::Cursor;

use stow_store::*;

const PART: usize = MIN_PART_SIZE as usize;

/// A disk store with bucket `bk1` and one upload of `key` with two parts
/// (5 MiB of `A`, then `tail`), and the parts' completion list.
fn uploaded(dir: &std::path::Path, key: &str) -> (Store, UploadInfo, Vec<CompletedPart>) {
    let s = Store::open(dir.join("data"), StoreOptions::default()).unwrap();
    s.create_bucket("bk1").unwrap();
    let props = ObjectProps {
        content_type: Some("text/x-joined".into()),
        ..Default::default()
    };
    let up = s
        .create_upload(
            "bk1",
            key,
            CreateUploadOptions {
                props,
                ..Default::default()
            },
        )
        .unwrap();
    let mut listed = Vec::new();
    for (n, body) in [(1, vec![b'A'; PART]), (2, b"tail".to_vec())] {
        let info = s
            .upload_part(
                "bk1",
                key,
                &up.upload_id,
                n,
                &mut Cursor::new(body),
                PartOptions::default(),
            )
            .unwrap();
        listed.push(CompletedPart {
            part_number: n as u32,
            etag: info.etag,
        });
    }
    (s, up, listed)
}

fn expected_bytes() -> Vec<u8> {
    let mut all = vec![b'A'; PART];
    all.extend_from_slice(b"tail");
    all
}

#[test]
fn a_joined_upload_becomes_a_file_and_never_an_object() {
    let tmp = tempfile::tempdir().unwrap();
    let (s, up, listed) = uploaded(tmp.path(), "k");
    let parts = s.usage().unwrap();
    assert_eq!((parts.bytes, parts.objects), (PART as u64 + 4, 0));

    let Joined::Staged(joined) = s
        .join_upload("bk1", "k", &up.upload_id, &listed, None)
        .unwrap()
    else {
        panic!("a fresh upload is staged, not replayed");
    };
    // The store is unchanged: no object, the upload in flight, same usage.
    assert!(matches!(
        s.head_object("bk1", "k"),
        Err(StoreError::NoSuchKey { .. })
    ));
    assert_eq!(
        s.list_uploads("bk1", "", None, None, 10)
            .unwrap()
            .uploads
            .len(),
        1
    );
    assert_eq!(s.usage().unwrap(), parts);
    assert_eq!(joined.meta.size, PART as u64 + 4);
    assert!(joined.meta.etag.ends_with("-2\""), "{}", joined.meta.etag);
    assert_eq!(
        joined.meta.props.content_type.as_deref(),
        Some("text/x-joined")
    );
    assert_eq!(joined.meta.parts.len(), 2);

    let etag = joined.meta.etag.clone();
    let out = tmp.path().join("file");
    joined.body.persist_as(&out, 0o640).unwrap();
    assert_eq!(fs::read(&out).unwrap(), expected_bytes());
    s.finish_joined(joined.ticket).unwrap();
    assert!(s
        .list_uploads("bk1", "", None, None, 10)
        .unwrap()
        .uploads
        .is_empty());
    assert_eq!(s.usage().unwrap(), Usage::default());
    assert!(s
        .list_objects(
            "bk1",
            &ListQuery {
                max_keys: 10,
                ..Default::default()
            }
        )
        .unwrap()
        .objects
        .is_empty());
    assert!(s.verify().unwrap().is_empty());

    // A retry answers as the first completion did; another part list, or
    // the store's own completion with other parts, finds no upload.
    match s
        .join_upload("bk1", "k", &up.upload_id, &listed, None)
        .unwrap()
    {
        Joined::Replayed(meta) => assert_eq!(meta.etag, etag),
        Joined::Staged(_) => panic!("a finished upload is replayed"),
    }
    let again = s.complete_upload("bk1", "k", &up.upload_id, &listed, WriteCondition::Always);
    assert_eq!(again.unwrap().etag, etag);
    let e = s.join_upload("bk1", "k", &up.upload_id, &listed[..1], None);
    assert!(matches!(e, Err(StoreError::NoSuchUpload { .. })));
    // The replay recorded no object either.
    assert!(s.head_object("bk1", "k").is_err());
}

/// The joined object is the one the store's own completion makes (same
/// ETag, size and parts); a join dropped unfinished changes nothing.
#[test]
fn a_join_matches_the_stores_completion_and_an_unfinished_one_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (s, up, listed) = uploaded(tmp.path(), "k");
    let Joined::Staged(joined) = s
        .join_upload("bk1", "k", &up.upload_id, &listed, None)
        .unwrap()
    else {
        panic!("staged");
    };
    let meta = joined.meta.clone();
    drop(joined);
    assert_eq!(
        s.list_uploads("bk1", "", None, None, 10)
            .unwrap()
            .uploads
            .len(),
        1
    );
    let done = s
        .complete_upload("bk1", "k", &up.upload_id, &listed, WriteCondition::Always)
        .unwrap();
    assert_eq!(
        (done.etag, done.size, done.parts),
        (meta.etag, meta.size, meta.parts)
    );
    let read = s
        .get_object("bk1", "k", None)
        .unwrap()
        .body
        .into_vec()
        .unwrap();
    assert_eq!(read, expected_bytes());
    assert!(s.verify().unwrap().is_empty());
}

#[test]
fn a_join_is_refused_like_a_completion() {
    let tmp = tempfile::tempdir().unwrap();
    let (s, up, listed) = uploaded(tmp.path(), "k");
    let bad_etag = [CompletedPart {
        part_number: 1,
        etag: "\"00000000000000000000000000000000\"".into(),
    }];
    let e = s.join_upload("bk1", "k", &up.upload_id, &bad_etag, None);
    assert!(matches!(e, Err(StoreError::InvalidPart { .. })), "{e:?}");
    let reversed = [listed[1].clone(), listed[0].clone()];
    let e = s.join_upload("bk1", "k", &up.upload_id, &reversed, None);
    assert!(matches!(e, Err(StoreError::InvalidPartOrder)), "{e:?}");
    let e = s.join_upload("bk1", "k", "f00d", &listed, None);
    assert!(matches!(e, Err(StoreError::NoSuchUpload { .. })), "{e:?}");
    let e = s.join_upload(
        "bk1",
        "k",
        &up.upload_id,
        &listed,
        Some((ChecksumAlgorithm::Crc32, "AAAAAA==".into())),
    );
    assert!(matches!(e, Err(StoreError::BadDigest { .. })), "{e:?}");
    // Nothing changed: the upload still completes.
    assert_eq!(s.usage().unwrap().bytes, PART as u64 + 4);
    s.complete_upload("bk1", "k", &up.upload_id, &listed, WriteCondition::Always)
        .unwrap();
}
