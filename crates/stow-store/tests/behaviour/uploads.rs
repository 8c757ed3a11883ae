//! Multipart uploads: parts, completion, caps, refusals, checksums.

use super::*;

const MIB5: usize = 5 * 1024 * 1024;

pub(crate) fn multipart(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("bk1").unwrap();
    let mut props = ObjectProps {
        content_type: Some("application/json".into()),
        ..Default::default()
    };
    props.metadata.insert("foo".into(), "bar".into());
    let up = s
        .create_upload(
            "bk1",
            "big",
            CreateUploadOptions {
                props: props.clone(),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(up.upload_id.len(), 32);
    let p1 = vec![b'A'; MIB5];
    let p2 = b"final-part".to_vec();
    let i1 = s
        .upload_part(
            "bk1",
            "big",
            &up.upload_id,
            1,
            &mut Cursor::new(&p1),
            PartOptions::default(),
        )
        .unwrap();
    // Replace part 2 once; only the last one counts.
    s.upload_part(
        "bk1",
        "big",
        &up.upload_id,
        2,
        &mut Cursor::new(b"first try"),
        PartOptions::default(),
    )
    .unwrap();
    let i2 = s
        .upload_part(
            "bk1",
            "big",
            &up.upload_id,
            2,
            &mut Cursor::new(&p2),
            PartOptions::default(),
        )
        .unwrap();
    s.upload_part(
        "bk1",
        "big",
        &up.upload_id,
        3,
        &mut Cursor::new(b"unlisted"),
        PartOptions::default(),
    )
    .unwrap();
    assert_eq!(
        s.usage().unwrap().bytes,
        (MIB5 + 10 + 8) as u64,
        "in-flight parts count"
    );
    let uploads = s.list_uploads("bk1", "", None, None, 100).unwrap();
    assert_eq!(uploads.uploads.len(), 1);
    assert_eq!(uploads.uploads[0].upload_id, up.upload_id);
    let parts = s.list_parts("bk1", "big", &up.upload_id, 0, 2).unwrap();
    assert_eq!(
        parts
            .parts
            .iter()
            .map(|p| p.part_number)
            .collect::<Vec<_>>(),
        [1, 2]
    );
    assert!(parts.is_truncated);
    let parts = s.list_parts("bk1", "big", &up.upload_id, 2, 10).unwrap();
    assert_eq!(
        parts
            .parts
            .iter()
            .map(|p| p.part_number)
            .collect::<Vec<_>>(),
        [3]
    );
    assert!(!parts.is_truncated);

    // Uploads survive a restart.
    let mut f = f;
    let f = match f.dir.take() {
        Some(dir) => {
            let path = dir.path().join("data");
            drop(f);
            Fixture {
                store: Store::open(&path, StoreOptions::default()).unwrap(),
                dir: Some(dir),
            }
        }
        None => f,
    };
    let s = &f.store;
    let meta = s
        .complete_upload(
            "bk1",
            "big",
            &up.upload_id,
            &[
                CompletedPart {
                    part_number: 1,
                    etag: i1.etag.clone(),
                },
                CompletedPart {
                    part_number: 2,
                    etag: i2.etag.trim_matches('"').into(),
                },
            ],
            WriteCondition::Always,
        )
        .unwrap();
    assert_eq!(meta.size, (MIB5 + 10) as u64);
    assert_eq!(meta.etag, "\"3769d23f4d727b90eb9d3be85d01ce35-2\"");
    assert_eq!(meta.props, props);
    assert_eq!(meta.parts.len(), 2);
    assert_eq!(
        s.usage().unwrap(),
        Usage {
            bytes: (MIB5 + 10) as u64,
            objects: 1
        },
        "unlisted part dropped"
    );
    let mut all = p1.clone();
    all.extend_from_slice(&p2);
    assert_eq!(get(s, "bk1", "big"), all);
    let r = s
        .get_object(
            "bk1",
            "big",
            Some(ByteRange::FromTo(MIB5 as u64 - 3, MIB5 as u64 + 2)),
        )
        .unwrap();
    assert_eq!(r.body.into_vec().unwrap(), b"AAAfin");
    let part2 = s.get_object_part("bk1", "big", 2).unwrap();
    assert_eq!(part2.range, Some((MIB5 as u64, 10)));
    assert_eq!(part2.body.into_vec().unwrap(), p2);
    assert_eq!(
        s.get_object_part("bk1", "big", 3).unwrap_err().code(),
        "invalid_part"
    );
    // A simple object is one part, inline or in a blob file.
    put(s, "bk1", "small", b"tiny");
    let whole = s.get_object_part("bk1", "small", 1).unwrap();
    assert_eq!(whole.body.into_vec().unwrap(), b"tiny");
    assert_eq!(
        s.get_object_part("bk1", "small", 2).unwrap_err().code(),
        "invalid_part"
    );
    // The upload is gone, but its completion is remembered: a retry of the
    // same completion (a lost reply) answers as the first did and changes
    // nothing; another part list finds no upload.
    let listed = [
        CompletedPart {
            part_number: 1,
            etag: i1.etag.clone(),
        },
        CompletedPart {
            part_number: 2,
            etag: i2.etag.clone(),
        },
    ];
    let usage_before = s.usage().unwrap();
    let again = s
        .complete_upload("bk1", "big", &up.upload_id, &listed, WriteCondition::Always)
        .unwrap();
    assert_eq!(
        (again.etag.as_str(), again.size),
        (meta.etag.as_str(), meta.size)
    );
    assert_eq!(
        again.version, meta.version,
        "the same object, not a new one"
    );
    assert_eq!(get(s, "bk1", "big"), all);
    assert_eq!(
        s.usage().unwrap(),
        usage_before,
        "the retry changed nothing"
    );
    let e = s.complete_upload(
        "bk1",
        "big",
        &up.upload_id,
        &listed[..1],
        WriteCondition::Always,
    );
    assert_eq!(e.unwrap_err().code(), "no_such_upload", "another part list");
    let e = s.complete_upload(
        "bk1",
        "other",
        &up.upload_id,
        &listed,
        WriteCondition::Always,
    );
    assert_eq!(e.unwrap_err().code(), "no_such_upload", "another key");
    assert!(s.verify().unwrap().is_empty());
    assert!(s
        .list_uploads("bk1", "", None, None, 100)
        .unwrap()
        .uploads
        .is_empty());
    // Copy of a multipart object shares all its blobs.
    s.copy_object("bk1", "big", "bk1", "big2", CopyOptions::default())
        .unwrap();
    s.delete_object("bk1", "big").unwrap();
    assert_eq!(get(s, "bk1", "big2"), all);
}

/// In-flight multipart uploads are capped; completing or aborting one
/// makes room.
pub(crate) fn upload_cap(make: Make) {
    let f = make(StoreOptions {
        max_uploads: 3,
        ..Default::default()
    });
    let s = &f.store;
    s.create_bucket("bk1").unwrap();
    let ups: Vec<_> = (0..3)
        .map(|i| {
            s.create_upload("bk1", &format!("k{i}"), CreateUploadOptions::default())
                .unwrap()
        })
        .collect();
    let e = s.create_upload("bk1", "k3", CreateUploadOptions::default());
    assert_eq!(e.unwrap_err().code(), "quota_exceeded");
    s.abort_upload("bk1", "k0", &ups[0].upload_id).unwrap();
    let again = s
        .create_upload("bk1", "k3", CreateUploadOptions::default())
        .unwrap();
    let part = s
        .upload_part(
            "bk1",
            "k3",
            &again.upload_id,
            1,
            &mut Cursor::new(b"only part"),
            PartOptions::default(),
        )
        .unwrap()
        .etag;
    s.complete_upload(
        "bk1",
        "k3",
        &again.upload_id,
        &[CompletedPart {
            part_number: 1,
            etag: part,
        }],
        WriteCondition::Always,
    )
    .unwrap();
    s.create_upload("bk1", "k4", CreateUploadOptions::default())
        .unwrap();
}

pub(crate) fn multipart_refusals(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("bk1").unwrap();
    let up = s
        .create_upload("bk1", "k", CreateUploadOptions::default())
        .unwrap();
    let id = up.upload_id.as_str();
    let small = s
        .upload_part(
            "bk1",
            "k",
            id,
            1,
            &mut Cursor::new(b"abcd"),
            PartOptions::default(),
        )
        .unwrap();
    let last = s
        .upload_part(
            "bk1",
            "k",
            id,
            2,
            &mut Cursor::new(b"efgh"),
            PartOptions::default(),
        )
        .unwrap();
    for n in [0, 10_001, -1] {
        let e = s.upload_part(
            "bk1",
            "k",
            id,
            n,
            &mut Cursor::new(b"x"),
            PartOptions::default(),
        );
        assert_eq!(e.unwrap_err().code(), "invalid_part_number");
    }
    let e = s.upload_part(
        "bk1",
        "k",
        "nope",
        1,
        &mut Cursor::new(b"x"),
        PartOptions::default(),
    );
    assert_eq!(e.unwrap_err().code(), "no_such_upload");
    let e = s.upload_part(
        "bk1",
        "other",
        id,
        1,
        &mut Cursor::new(b"x"),
        PartOptions::default(),
    );
    assert_eq!(
        e.unwrap_err().code(),
        "no_such_upload",
        "upload ids are bound to their key"
    );
    let e = s.upload_part(
        "bk1",
        "k",
        id,
        3,
        &mut Cursor::new(b"x"),
        PartOptions {
            content_md5: Some("XrY7u+Ae7tCTyyK7j1rNww==".into()),
            ..Default::default()
        },
    );
    assert_eq!(e.unwrap_err().code(), "bad_digest");
    let p = |n: u32, e: &str| CompletedPart {
        part_number: n,
        etag: e.to_string(),
    };
    let cases: Vec<(Vec<CompletedPart>, &str)> = vec![
        (vec![], "invalid_part"),
        (
            vec![p(1, &small.etag), p(1, &small.etag)],
            "invalid_part_order",
        ),
        (
            vec![p(2, &last.etag), p(1, &small.etag)],
            "invalid_part_order",
        ),
        (
            vec![p(1, "\"00000000000000000000000000000000\"")],
            "invalid_part",
        ),
        (vec![p(1, &small.etag), p(5, &last.etag)], "invalid_part"),
        (
            vec![p(1, &small.etag), p(2, &last.etag)],
            "entity_too_small",
        ),
    ];
    let usage = s.usage().unwrap();
    for (parts, code) in cases {
        let e = s.complete_upload("bk1", "k", id, &parts, WriteCondition::Always);
        assert_eq!(e.unwrap_err().code(), code, "{parts:?}");
    }
    assert_eq!(
        s.usage().unwrap(),
        usage,
        "refused completions change nothing"
    );
    assert_eq!(s.list_parts("bk1", "k", id, 0, 100).unwrap().parts.len(), 2);
    // A single small part is a valid (last) part; create-only completion respects the condition.
    put(s, "bk1", "k", b"exists");
    let e = s.complete_upload(
        "bk1",
        "k",
        id,
        &[p(2, &last.etag)],
        WriteCondition::IfAbsent,
    );
    assert_eq!(e.unwrap_err().code(), "precondition_failed");
    s.abort_upload("bk1", "k", id).unwrap();
    assert_eq!(
        s.abort_upload("bk1", "k", id).unwrap_err().code(),
        "no_such_upload"
    );
    assert_eq!(s.usage().unwrap().bytes, 6);
    let up = s
        .create_upload("bk1", "one", CreateUploadOptions::default())
        .unwrap();
    let only = s
        .upload_part(
            "bk1",
            "one",
            &up.upload_id,
            1,
            &mut Cursor::new(b"solo"),
            PartOptions::default(),
        )
        .unwrap();
    let meta = s
        .complete_upload(
            "bk1",
            "one",
            &up.upload_id,
            &[p(1, &only.etag)],
            WriteCondition::Always,
        )
        .unwrap();
    assert!(meta.etag.ends_with("-1\""), "{}", meta.etag);
    assert_eq!(get(s, "bk1", "one"), b"solo");
}

pub(crate) fn multipart_checksums(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("bk1").unwrap();
    let p1 = body(MIB5, 1);
    let p2 = body(1000, 2);
    for kind in [ChecksumType::Composite, ChecksumType::FullObject] {
        let up = s
            .create_upload(
                "bk1",
                "k",
                CreateUploadOptions {
                    checksum_algorithm: Some(ChecksumAlgorithm::Crc32c),
                    checksum_type: Some(kind),
                    ..Default::default()
                },
            )
            .unwrap();
        let a = s
            .upload_part(
                "bk1",
                "k",
                &up.upload_id,
                1,
                &mut Cursor::new(&p1),
                PartOptions::default(),
            )
            .unwrap();
        let b = s
            .upload_part(
                "bk1",
                "k",
                &up.upload_id,
                2,
                &mut Cursor::new(&p2),
                PartOptions::default(),
            )
            .unwrap();
        assert_eq!(
            a.checksum.as_ref().map(|c| c.value.as_str()),
            Some(ChecksumAlgorithm::Crc32c.digest_of(&p1).as_str())
        );
        let meta = s
            .complete_upload(
                "bk1",
                "k",
                &up.upload_id,
                &[
                    CompletedPart {
                        part_number: 1,
                        etag: a.etag,
                    },
                    CompletedPart {
                        part_number: 2,
                        etag: b.etag,
                    },
                ],
                WriteCondition::Always,
            )
            .unwrap();
        let c = meta.checksum.unwrap();
        assert_eq!(c.kind, kind);
        let mut whole = p1.clone();
        whole.extend_from_slice(&p2);
        match kind {
            ChecksumType::FullObject => {
                assert_eq!(c.value, ChecksumAlgorithm::Crc32c.digest_of(&whole))
            }
            ChecksumType::Composite => {
                use base64::Engine as _;
                let b64 = base64::engine::general_purpose::STANDARD;
                let mut raw = b64
                    .decode(ChecksumAlgorithm::Crc32c.digest_of(&p1))
                    .unwrap();
                raw.extend(
                    b64.decode(ChecksumAlgorithm::Crc32c.digest_of(&p2))
                        .unwrap(),
                );
                assert_eq!(
                    c.value,
                    format!("{}-2", ChecksumAlgorithm::Crc32c.digest_of(&raw))
                );
            }
        }
    }
}

/// A read of a multipart object opens its parts one after another; a
/// delete committed meanwhile must not take the parts it has yet to open
/// (their files went at once, and the read ended short). Once the read is
/// done, the parts go.
pub(crate) fn a_multipart_read_outlives_a_delete(make: Make) {
    use std::io::Read as _;
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("bk1").unwrap();
    let up = s
        .create_upload("bk1", "mp", CreateUploadOptions::default())
        .unwrap();
    let parts: Vec<Vec<u8>> = [b'A', b'B', b'C'].iter().map(|&b| vec![b; MIB5]).collect();
    let listed: Vec<CompletedPart> = parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let n = i as i64 + 1;
            let info = s
                .upload_part(
                    "bk1",
                    "mp",
                    &up.upload_id,
                    n,
                    &mut Cursor::new(p),
                    PartOptions::default(),
                )
                .unwrap();
            CompletedPart {
                part_number: n as u32,
                etag: info.etag,
            }
        })
        .collect();
    s.complete_upload("bk1", "mp", &up.upload_id, &listed, WriteCondition::Always)
        .unwrap();

    let mut read = s.get_object("bk1", "mp", None).unwrap();
    let mut got = vec![0u8; 1 << 20];
    read.body.read_exact(&mut got).unwrap();
    assert!(s.delete_object("bk1", "mp").unwrap());
    // More commits: the next transactions settle what the delete freed.
    s.put_object(
        "bk1",
        "other",
        &mut Cursor::new(b"x"),
        PutOptions::default(),
    )
    .unwrap();
    // A read that stalls holds back its own parts only: another object's
    // freed blob goes at once.
    s.put_object(
        "bk1",
        "big",
        &mut Cursor::new(vec![7u8; 100_000]),
        PutOptions::default(),
    )
    .unwrap();
    s.put_object("bk1", "big", &mut Cursor::new(b"z"), PutOptions::default())
        .unwrap();
    if let Some(dir) = &f.dir {
        let files = walk_files(dir.path());
        assert!(
            files
                .iter()
                .all(|p| std::fs::metadata(p).unwrap().len() != 100_000),
            "the overwritten blob is gone while the read stalls: {files:?}"
        );
    }
    read.body.read_to_end(&mut got).unwrap();
    assert_eq!(got, parts.concat(), "the read saw every byte");
    drop(read);
    s.put_object(
        "bk1",
        "other",
        &mut Cursor::new(b"y"),
        PutOptions::default(),
    )
    .unwrap();
    assert_eq!(s.verify().unwrap(), Vec::<String>::new());
    if let Some(dir) = &f.dir {
        let files = walk_files(dir.path());
        assert!(
            files
                .iter()
                .all(|p| std::fs::metadata(p).unwrap().len() < MIB5 as u64),
            "the deleted parts' files are gone: {files:?}"
        );
    }
}

/// Every regular file under `dir`.
fn walk_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let t = e.file_type().unwrap();
        if t.is_dir() {
            out.extend(walk_files(&e.path()));
        } else if t.is_file() {
            out.push(e.path());
        }
    }
    out
}
