//! Objects: round trips, keys, ranges, deletes, copies, read conditions, detached puts, checksums.

use super::*;

pub(crate) fn put_get_roundtrip(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("bk1").unwrap();
    for (i, size) in [0usize, 1, 4096, 32 * 1024, 32 * 1024 + 1, 3 << 20]
        .into_iter()
        .enumerate()
    {
        let data = body(size, i as u8);
        let mut props = ObjectProps {
            content_type: Some("text/plain".into()),
            cache_control: Some("no-cache".into()),
            ..Default::default()
        };
        props.metadata.insert("Project".into(), "stow".into());
        props.metadata.insert("RUN-ID".into(), "7".into());
        let key = format!("obj-{size}");
        let meta = s
            .put_object(
                "bk1",
                &key,
                &mut Cursor::new(&data),
                PutOptions {
                    props,
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(meta.size, size as u64);
        assert_eq!(meta.etag, md5_etag(&data));
        assert_eq!(meta.props.content_type.as_deref(), Some("text/plain"));
        let expect: BTreeMap<String, String> = [
            ("project".into(), "stow".into()),
            ("run-id".into(), "7".into()),
        ]
        .into();
        assert_eq!(meta.props.metadata, expect, "metadata keys are lower-cased");
        let head = s.head_object("bk1", &key).unwrap();
        assert_eq!(head, meta);
        let read = s.get_object("bk1", &key, None).unwrap();
        assert_eq!(read.meta, meta);
        assert_eq!(read.range, None);
        assert_eq!(read.body.len(), size as u64);
        assert_eq!(read.body.into_vec().unwrap(), data);
    }
    // Overwrite replaces bytes and generation.
    let a = put(s, "bk1", "k", b"first");
    let b = put(s, "bk1", "k", b"first");
    assert_eq!(a.etag, b.etag);
    assert_ne!(a.version, b.version, "every write is a new generation");
    assert!(b.last_modified_ns >= a.last_modified_ns);
    put(s, "bk1", "k", &body(100_000, 9));
    assert_eq!(get(s, "bk1", "k"), body(100_000, 9));
    assert_eq!(
        s.get_object("bk1", "missing", None).unwrap_err().code(),
        "no_such_key"
    );
    assert_eq!(
        s.put_object("nob", "k", &mut Cursor::new(b"x"), PutOptions::default())
            .unwrap_err()
            .code(),
        "no_such_bucket"
    );
}

pub(crate) fn keys_are_opaque_and_validated(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("bk1").unwrap();
    for k in [
        "dir/../name.txt",
        "dir/./name.txt",
        "/lead",
        "sp ace",
        "ünï",
        &"k".repeat(1024),
    ] {
        put(s, "bk1", k, k.as_bytes());
        assert_eq!(get(s, "bk1", k), k.as_bytes());
    }
    let before = s.usage().unwrap();
    for (bad, code) in [
        ("", "invalid_key"),
        ("a\0b", "invalid_key"),
        (&"k".repeat(1025), "key_too_long"),
    ] {
        let e = s.put_object("bk1", bad, &mut Cursor::new(b"x"), PutOptions::default());
        assert_eq!(e.unwrap_err().code(), code);
    }
    let mut props = ObjectProps::default();
    props.metadata.insert("k".into(), "v".repeat(3000));
    let e = s.put_object(
        "bk1",
        "m",
        &mut Cursor::new(b"x"),
        PutOptions {
            props,
            ..Default::default()
        },
    );
    assert_eq!(e.unwrap_err().code(), "metadata_too_large");
    assert_eq!(s.usage().unwrap(), before, "refusals change nothing");
    assert_eq!(keys(s, "bk1").len(), 6);
}

pub(crate) fn ranges(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("bk1").unwrap();
    put(s, "bk1", "d", b"0123456789");
    let r = |range| {
        s.get_object("bk1", "d", Some(range)).map(|o| {
            (
                o.range,
                String::from_utf8(o.body.into_vec().unwrap()).unwrap(),
            )
        })
    };
    assert_eq!(
        r(ByteRange::FromTo(0, 4)).unwrap(),
        (Some((0, 5)), "01234".into())
    );
    assert_eq!(
        r(ByteRange::Suffix(3)).unwrap(),
        (Some((7, 3)), "789".into())
    );
    assert_eq!(r(ByteRange::From(5)).unwrap().1, "56789");
    assert_eq!(
        r(ByteRange::FromTo(8, 9999)).unwrap(),
        (Some((8, 2)), "89".into())
    );
    assert_eq!(r(ByteRange::Suffix(50)).unwrap().1, "0123456789");
    for bad in [
        ByteRange::FromTo(50, 60),
        ByteRange::From(10),
        ByteRange::Suffix(0),
        ByteRange::FromTo(5, 4),
    ] {
        assert_eq!(r(bad).unwrap_err().code(), "invalid_range", "{bad:?}");
    }
    // Ranges across a large (file) body.
    let big = body(200_000, 3);
    put(s, "bk1", "big", &big);
    let got = s
        .get_object("bk1", "big", Some(ByteRange::FromTo(100_000, 150_000)))
        .unwrap();
    assert_eq!(got.body.into_vec().unwrap(), &big[100_000..=150_000]);
    put(s, "bk1", "empty", b"");
    assert_eq!(
        s.get_object("bk1", "empty", Some(ByteRange::FromTo(0, 0)))
            .unwrap_err()
            .code(),
        "invalid_range"
    );
}

pub(crate) fn deletes(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("bk1").unwrap();
    assert!(
        !s.delete_object("bk1", "absent").unwrap(),
        "absent is not an error"
    );
    put(s, "bk1", "k", &body(50_000, 1));
    assert!(s.delete_object("bk1", "k").unwrap());
    assert_eq!(s.head_object("bk1", "k").unwrap_err().code(), "no_such_key");
    assert_eq!(s.usage().unwrap(), Usage::default());
    assert_eq!(
        s.delete_object("nob", "k").unwrap_err().code(),
        "no_such_bucket"
    );
}

pub(crate) fn copies_share_bytes(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("src").unwrap();
    s.create_bucket("dst").unwrap();
    let data = body(1 << 20, 5);
    let mut props = ObjectProps {
        content_type: Some("text/csv".into()),
        ..Default::default()
    };
    props.metadata.insert("a".into(), "1".into());
    let src = s
        .put_object(
            "src",
            "k",
            &mut Cursor::new(&data),
            PutOptions {
                props,
                ..Default::default()
            },
        )
        .unwrap();
    let copy = s
        .copy_object("src", "k", "dst", "k2", CopyOptions::default())
        .unwrap();
    assert_eq!(copy.etag, src.etag);
    assert_eq!(copy.props, src.props, "COPY keeps properties");
    assert_ne!(copy.version, src.version);
    assert_eq!(
        s.usage().unwrap().bytes,
        2 * data.len() as u64,
        "copies are charged logically"
    );

    let replaced = s
        .copy_object(
            "src",
            "k",
            "dst",
            "k3",
            CopyOptions {
                replace_props: Some(ObjectProps {
                    content_type: Some("application/json".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(
        replaced.props.content_type.as_deref(),
        Some("application/json")
    );
    assert!(replaced.props.metadata.is_empty());

    // Deleting the source leaves the copies whole.
    s.delete_object("src", "k").unwrap();
    assert_eq!(get(s, "dst", "k2"), data);
    assert_eq!(get(s, "dst", "k3"), data);
    // Source conditions.
    let cond = |m: Option<&str>, n: Option<&str>| CopyOptions {
        source: ReadConditions {
            if_match: m.map(String::from),
            if_none_match: n.map(String::from),
            ..Default::default()
        },
        ..Default::default()
    };
    let etag = copy.etag.clone();
    assert!(s
        .copy_object("dst", "k2", "dst", "c1", cond(Some(&etag), None))
        .is_ok());
    assert!(s
        .copy_object("dst", "k2", "dst", "c2", cond(None, Some("\"different\"")))
        .is_ok());
    for (m, n) in [
        (None, Some("*")),
        (None, Some(etag.as_str())),
        (Some(etag.as_str()), Some(etag.as_str())),
        (Some("\"nope\""), None),
    ] {
        let e = s
            .copy_object("dst", "k2", "dst", "c3", cond(m, n))
            .unwrap_err();
        assert_eq!(e.code(), "precondition_failed");
    }
    assert_eq!(
        s.head_object("dst", "c3").unwrap_err().code(),
        "no_such_key"
    );
    assert_eq!(
        s.copy_object("dst", "missing", "dst", "x", CopyOptions::default())
            .unwrap_err()
            .code(),
        "no_such_key"
    );
    // Copy onto itself keeps the bytes.
    s.copy_object("dst", "k2", "dst", "k2", CopyOptions::default())
        .unwrap();
    assert_eq!(get(s, "dst", "k2"), data);
}

pub(crate) fn read_conditions(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("bk1").unwrap();
    let meta = put(s, "bk1", "k", b"x");
    let t = meta.last_modified_ns;
    let c = |m: Option<&str>, n: Option<&str>, ims: Option<i64>, ius: Option<i64>| {
        ReadConditions {
            if_match: m.map(String::from),
            if_none_match: n.map(String::from),
            if_modified_since_ns: ims,
            if_unmodified_since_ns: ius,
        }
        .check(&meta)
    };
    assert_eq!(c(None, None, None, None), ConditionCheck::Pass);
    assert_eq!(c(Some(&meta.etag), None, None, None), ConditionCheck::Pass);
    assert_eq!(
        c(Some("\"x\""), None, None, None),
        ConditionCheck::PreconditionFailed
    );
    assert_eq!(c(None, Some("*"), None, None), ConditionCheck::NotModified);
    assert_eq!(c(None, None, Some(t), None), ConditionCheck::NotModified);
    assert_eq!(
        c(None, None, Some(t - 2_000_000_000), None),
        ConditionCheck::Pass
    );
    assert_eq!(
        c(None, None, None, Some(t - 2_000_000_000)),
        ConditionCheck::PreconditionFailed
    );
    assert_eq!(
        c(Some(&meta.etag), None, None, Some(t - 2_000_000_000)),
        ConditionCheck::Pass,
        "If-Match wins"
    );
    assert_eq!(
        c(None, Some("\"other\""), Some(t), None),
        ConditionCheck::Pass,
        "If-None-Match wins"
    );
}

pub(crate) fn put_detached(
    s: &Store,
    b: &str,
    k: &str,
    body: &[u8],
    opts: PutOptions,
) -> Result<ObjectMeta> {
    let (tx, rx) = std::sync::mpsc::channel();
    s.put_object_detached(b, k, body.to_vec(), opts, move |r| tx.send(r).unwrap());
    rx.recv().unwrap()
}

/// A detached put stores exactly what a waiting one does, and is refused
/// for the same reasons, answered through its callback.
pub(crate) fn detached_puts(make: Make) {
    let f = make(StoreOptions {
        max_objects: Some(2),
        ..Default::default()
    });
    let s = &f.store;
    s.create_bucket("bk1").unwrap();
    let opts = || PutOptions {
        checksum_algorithm: Some(ChecksumAlgorithm::Crc32c),
        ..Default::default()
    };
    let a = put_detached(s, "bk1", "a", b"detached", opts()).unwrap();
    let b = s
        .put_object("bk1", "b", &mut Cursor::new(b"detached"), opts())
        .unwrap();
    assert_eq!((a.etag.as_str(), a.size), (b.etag.as_str(), b.size));
    assert_eq!(a.checksum, b.checksum);
    assert_eq!(s.head_object("bk1", "a").unwrap().etag, a.etag);
    assert_eq!(
        s.get_object("bk1", "a", None)
            .unwrap()
            .body
            .into_vec()
            .unwrap(),
        b"detached"
    );
    let refused = |r: Result<ObjectMeta>| r.unwrap_err().code();
    let create_only = PutOptions {
        condition: WriteCondition::IfAbsent,
        ..Default::default()
    };
    assert_eq!(
        refused(put_detached(s, "bk1", "a", b"x", create_only)),
        "precondition_failed"
    );
    assert_eq!(
        refused(put_detached(s, "bk1", "", b"x", opts())),
        s.put_object("bk1", "", &mut Cursor::new(b"x"), opts())
            .unwrap_err()
            .code()
    );
    assert_eq!(
        refused(put_detached(s, "nope", "k", b"x", opts())),
        "no_such_bucket"
    );
    assert_eq!(
        refused(put_detached(s, "bk1", "c", b"x", opts())),
        "quota_exceeded"
    );
    let bad_md5 = PutOptions {
        content_md5: Some("AAAAAAAAAAAAAAAAAAAAAA==".into()),
        ..Default::default()
    };
    assert_eq!(
        refused(put_detached(s, "bk1", "a", b"x", bad_md5)),
        "bad_digest"
    );
    assert_eq!(
        s.get_object("bk1", "a", None)
            .unwrap()
            .body
            .into_vec()
            .unwrap(),
        b"detached",
        "refusals changed nothing"
    );
    // An inline body is read from memory; a larger one from its blob.
    assert!(s.get_object("bk1", "a", None).unwrap().body.in_memory());
    s.delete_object("bk1", "b").unwrap();
    put(s, "bk1", "big", &body(SMALL_BODY_MAX + 1, 3));
    let big = s.get_object("bk1", "big", None).unwrap();
    assert!(!big.body.in_memory());
}

pub(crate) fn checksums(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("bk1").unwrap();
    let hello = b"hello world";
    for alg in ChecksumAlgorithm::ALL {
        let meta = s
            .put_object(
                "bk1",
                alg.as_str(),
                &mut Cursor::new(hello),
                PutOptions {
                    checksum_algorithm: Some(alg),
                    ..Default::default()
                },
            )
            .unwrap();
        let c = meta.checksum.unwrap();
        assert_eq!(c.algorithm, alg);
        assert_eq!(c.value, alg.digest_of(hello));
        assert_eq!(
            s.head_object("bk1", alg.as_str())
                .unwrap()
                .checksum
                .unwrap()
                .value,
            c.value
        );
    }
    // Supplied values are verified and kept.
    let meta = s
        .put_object(
            "bk1",
            "v",
            &mut Cursor::new(hello),
            PutOptions {
                expected_checksums: vec![(ChecksumAlgorithm::Crc64nvme, "jSnVw/bqjr4=".into())],
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(meta.checksum.unwrap().value, "jSnVw/bqjr4=");
    let before = s.usage().unwrap();
    let bad = |opts: PutOptions| {
        s.put_object("bk1", "bad", &mut Cursor::new(hello), opts)
            .unwrap_err()
            .code()
    };
    assert_eq!(
        bad(PutOptions {
            expected_checksums: vec![(ChecksumAlgorithm::Crc64nvme, "AAAAAAAAAAA=".into())],
            ..Default::default()
        }),
        "bad_digest"
    );
    assert_eq!(
        bad(PutOptions {
            expected_checksums: vec![(ChecksumAlgorithm::Sha256, "short".into())],
            ..Default::default()
        }),
        "invalid_checksum"
    );
    assert_eq!(
        bad(PutOptions {
            content_md5: Some("bm90LXRoZS1ib2R5".into()),
            ..Default::default()
        }),
        "invalid_digest"
    );
    assert_eq!(
        bad(PutOptions {
            content_md5: Some("1B2M2Y8AsgTpgAmY7PhCfg==".into()),
            ..Default::default()
        }),
        "bad_digest"
    );
    // Mismatch on a large body too (the staged blob is discarded).
    let e = s.put_object(
        "bk1",
        "bad",
        &mut Cursor::new(body(200_000, 1)),
        PutOptions {
            expected_checksums: vec![(ChecksumAlgorithm::Crc32, "AAAAAA==".into())],
            ..Default::default()
        },
    );
    assert_eq!(e.unwrap_err().code(), "bad_digest");
    assert_eq!(s.usage().unwrap(), before);
    assert_eq!(
        s.head_object("bk1", "bad").unwrap_err().code(),
        "no_such_key"
    );
    // Correct Content-MD5 passes.
    s.put_object(
        "bk1",
        "md5",
        &mut Cursor::new(hello),
        PutOptions {
            content_md5: Some("XrY7u+Ae7tCTyyK7j1rNww==".into()),
            ..Default::default()
        },
    )
    .unwrap();
}
