//! The store's behaviour contract, run against both backends.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::sync::{Arc, Barrier};

use md5::Digest as _;
use stow_store::*;

/// A store plus whatever keeps it alive (the temporary directory).
struct Fixture {
    store: Store,
    dir: Option<tempfile::TempDir>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let problems = self.store.verify().expect("verify runs");
        if !std::thread::panicking() {
            assert!(problems.is_empty(), "store inconsistent: {problems:?}");
        }
    }
}

fn disk(opts: StoreOptions) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    Fixture {
        store: Store::open(dir.path().join("data"), opts).unwrap(),
        dir: Some(dir),
    }
}

fn memory(opts: StoreOptions) -> Fixture {
    Fixture {
        store: Store::memory(opts).unwrap(),
        dir: None,
    }
}

macro_rules! behaviour {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn disk() {
                super::$name(super::disk);
            }
            #[test]
            fn memory() {
                super::$name(super::memory);
            }
        }
    )*};
}

behaviour!(
    buckets,
    put_get_roundtrip,
    keys_are_opaque_and_validated,
    ranges,
    deletes,
    copies_share_bytes,
    listing,
    listing_pages_cover_everything,
    conditional_writes,
    create_only_race,
    checksums,
    guarded_saves,
    keyed_save_receipts,
    receipt_retention,
    multipart,
    multipart_refusals,
    multipart_checksums,
    quotas,
    outside_usage_counts_against_quotas,
    detached_puts,
    upload_cap,
    read_conditions,
);

type Make = fn(StoreOptions) -> Fixture;

fn put(s: &Store, b: &str, k: &str, body: &[u8]) -> ObjectMeta {
    s.put_object(b, k, &mut Cursor::new(body), PutOptions::default())
        .unwrap()
}

fn get(s: &Store, b: &str, k: &str) -> Vec<u8> {
    s.get_object(b, k, None).unwrap().body.into_vec().unwrap()
}

fn body(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn md5_etag(data: &[u8]) -> String {
    let d = md5::Md5::digest(data);
    format!(
        "\"{}\"",
        d.iter().map(|b| format!("{b:02x}")).collect::<String>()
    )
}

fn keys(s: &Store, b: &str) -> Vec<String> {
    let q = ListQuery {
        max_keys: 100_000,
        ..Default::default()
    };
    s.list_objects(b, &q)
        .unwrap()
        .objects
        .into_iter()
        .map(|o| o.key)
        .collect()
}

fn buckets(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    assert!(s.create_bucket("zeta").unwrap());
    assert!(!s.create_bucket("zeta").unwrap(), "create is idempotent");
    assert!(s.create_bucket("alpha").unwrap());
    let names: Vec<_> = s
        .list_buckets()
        .unwrap()
        .into_iter()
        .map(|b| b.name)
        .collect();
    assert_eq!(names, ["alpha", "zeta"]);
    assert_eq!(s.head_bucket("alpha").unwrap().name, "alpha");
    assert_eq!(s.head_bucket("nope").unwrap_err().code(), "no_such_bucket");
    for bad in ["A", "ab", "Bad_Name", "-abc", "a..b", "10.0.0.1"] {
        assert_eq!(
            s.create_bucket(bad).unwrap_err().code(),
            "invalid_bucket_name"
        );
    }
    assert_eq!(
        s.list_buckets().unwrap().len(),
        2,
        "refusals create nothing"
    );

    put(s, "alpha", "k", b"x");
    assert_eq!(
        s.delete_bucket("alpha").unwrap_err().code(),
        "bucket_not_empty"
    );
    s.delete_object("alpha", "k").unwrap();
    // Only in-progress uploads: the bucket goes, and the uploads with it
    // (their parts freed).
    let up = s
        .create_upload("alpha", "k", CreateUploadOptions::default())
        .unwrap();
    s.upload_part(
        "alpha",
        "k",
        &up.upload_id,
        1,
        &mut std::io::Cursor::new(vec![7u8; 4096]),
        Default::default(),
    )
    .unwrap();
    assert_eq!(s.usage().unwrap().bytes, 4096, "parts are charged");
    s.delete_bucket("alpha").unwrap();
    assert_eq!(s.usage().unwrap().bytes, 0, "and freed with the bucket");
    assert!(s.verify().unwrap().is_empty());
    s.create_bucket("alpha").unwrap();
    assert!(s
        .list_uploads("alpha", "", None, None, 1000)
        .unwrap()
        .uploads
        .is_empty());
    assert_eq!(
        s.abort_upload("alpha", "k", &up.upload_id)
            .unwrap_err()
            .code(),
        "no_such_upload"
    );
    s.delete_bucket("alpha").unwrap();
    assert_eq!(
        s.delete_bucket("alpha").unwrap_err().code(),
        "no_such_bucket"
    );
    assert_eq!(s.head_bucket("alpha").unwrap_err().code(), "no_such_bucket");
}

fn put_get_roundtrip(make: Make) {
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

fn keys_are_opaque_and_validated(make: Make) {
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

fn ranges(make: Make) {
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

fn deletes(make: Make) {
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

fn copies_share_bytes(make: Make) {
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

fn listing(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("bk1").unwrap();
    for k in [
        "a/1", "a/./two", "a/3", "b/1", "b/2/x", "root.txt", "z", "é",
    ] {
        put(s, "bk1", k, b"x");
    }
    let q = |prefix: &str, delim: Option<&str>, after: Option<&str>, max: usize| {
        s.list_objects(
            "bk1",
            &ListQuery {
                prefix: prefix.into(),
                delimiter: delim.map(String::from),
                start_after: after.map(String::from),
                max_keys: max,
            },
        )
        .unwrap()
    };
    let names = |p: &ListPage| p.objects.iter().map(|o| o.key.clone()).collect::<Vec<_>>();
    let p = q("a/", None, None, 2);
    assert_eq!(names(&p), ["a/./two", "a/1"], "byte order: '.' < '1'");
    assert!(p.is_truncated);
    assert_eq!(p.next_marker.as_deref(), Some("a/1"));
    let p = q("a/", None, Some("a/1"), 2);
    assert_eq!(names(&p), ["a/3"]);
    assert!(!p.is_truncated);

    let p = q("", Some("/"), None, 2);
    assert_eq!(p.common_prefixes, ["a/", "b/"]);
    assert!(p.objects.is_empty());
    assert!(p.is_truncated);
    let p = q("", Some("/"), p.next_marker.as_deref(), 10);
    assert_eq!(names(&p), ["root.txt", "z", "é"]);
    assert!(p.common_prefixes.is_empty());
    assert!(!p.is_truncated);

    let p = q("b/", Some("/"), None, 10);
    assert_eq!(names(&p), ["b/1"]);
    assert_eq!(p.common_prefixes, ["b/2/"]);

    let p = q("", None, None, 0);
    assert!(p.objects.is_empty() && !p.is_truncated);
    let p = q("nothing", None, None, 10);
    assert!(p.objects.is_empty());
    assert_eq!(
        s.list_objects("nob", &ListQuery::default())
            .unwrap_err()
            .code(),
        "no_such_bucket"
    );
}

fn listing_pages_cover_everything(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("bk1").unwrap();
    let mut all = Vec::new();
    for i in 0..300 {
        let k = format!("d{}/f{:03}", i % 7, i);
        put(s, "bk1", &k, b"");
        all.push(k);
    }
    for extra in ["d1", "d1/", "d10/x", "top"] {
        put(s, "bk1", extra, b"");
        all.push(extra.to_string());
    }
    all.sort();
    for delim in [None, Some("/")] {
        for max in [1, 7, 1000] {
            let mut seen = Vec::new();
            let mut after: Option<String> = None;
            loop {
                let page = s
                    .list_objects(
                        "bk1",
                        &ListQuery {
                            prefix: String::new(),
                            delimiter: delim.map(String::from),
                            start_after: after.clone(),
                            max_keys: max,
                        },
                    )
                    .unwrap();
                assert!(page.objects.len() + page.common_prefixes.len() <= max);
                seen.extend(page.objects.iter().map(|o| o.key.clone()));
                seen.extend(page.common_prefixes.iter().cloned());
                if !page.is_truncated {
                    break;
                }
                after = page.next_marker.clone();
            }
            seen.sort();
            let want: Vec<String> = match delim {
                None => all.clone(),
                Some(_) => {
                    let mut w: Vec<String> = all
                        .iter()
                        .map(|k| match k.find('/') {
                            Some(i) => k[..=i].to_string(),
                            None => k.clone(),
                        })
                        .collect();
                    w.dedup();
                    w.sort();
                    w.dedup();
                    w
                }
            };
            assert_eq!(seen, want, "delim {delim:?} max {max}");
        }
    }
}

fn conditional_writes(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("bk1").unwrap();
    let with = |c: WriteCondition| PutOptions {
        condition: c,
        ..Default::default()
    };
    let first = s
        .put_object(
            "bk1",
            "k",
            &mut Cursor::new(b"one"),
            with(WriteCondition::IfAbsent),
        )
        .unwrap();
    let e = s.put_object(
        "bk1",
        "k",
        &mut Cursor::new(b"two"),
        with(WriteCondition::IfAbsent),
    );
    assert_eq!(e.unwrap_err().code(), "precondition_failed");
    assert_eq!(get(s, "bk1", "k"), b"one");
    let e = s.put_object(
        "bk1",
        "k",
        &mut Cursor::new(b"two"),
        with(WriteCondition::IfMatch("\"abc\"".into())),
    );
    assert_eq!(e.unwrap_err().code(), "precondition_failed");
    let second = s
        .put_object(
            "bk1",
            "k",
            &mut Cursor::new(b"two"),
            with(WriteCondition::IfMatch(first.etag.trim_matches('"').into())),
        )
        .unwrap();
    s.put_object(
        "bk1",
        "k",
        &mut Cursor::new(b"three"),
        with(WriteCondition::IfMatch("*".into())),
    )
    .unwrap();
    let e = s.put_object(
        "bk1",
        "k",
        &mut Cursor::new(b"four"),
        with(WriteCondition::IfMatch(second.etag)),
    );
    assert_eq!(e.unwrap_err().code(), "precondition_failed");
    let e = s.put_object(
        "bk1",
        "new",
        &mut Cursor::new(b"x"),
        with(WriteCondition::IfMatch("*".into())),
    );
    assert_eq!(e.unwrap_err().code(), "no_such_key");
    assert_eq!(get(s, "bk1", "k"), b"three");
    // A large body refused by its condition leaves no staged blob behind (verify on drop).
    let e = s.put_object(
        "bk1",
        "k",
        &mut Cursor::new(body(100_000, 1)),
        with(WriteCondition::IfAbsent),
    );
    assert_eq!(e.unwrap_err().code(), "precondition_failed");
}

fn create_only_race(make: Make) {
    let f = make(StoreOptions::default());
    let s = f.store.clone();
    s.create_bucket("race").unwrap();
    let threads = 32;
    let keys = 8;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let s = s.clone();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                let mut won = Vec::new();
                for k in 0..keys {
                    let size = if t % 2 == 0 { 16 } else { 40_000 };
                    let r = s.put_object(
                        "race",
                        &format!("key-{k}"),
                        &mut Cursor::new(body(size, t as u8)),
                        PutOptions {
                            condition: WriteCondition::IfAbsent,
                            ..Default::default()
                        },
                    );
                    match r {
                        Ok(_) => won.push((k, t)),
                        Err(e) => assert_eq!(e.code(), "precondition_failed"),
                    }
                }
                won
            })
        })
        .collect();
    let mut winners: Vec<(usize, usize)> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    winners.sort();
    assert_eq!(
        winners.len(),
        keys,
        "exactly one winner per key: {winners:?}"
    );
    for (k, t) in winners {
        let size = if t % 2 == 0 { 16 } else { 40_000 };
        assert_eq!(get(&s, "race", &format!("key-{k}")), body(size, t as u8));
    }
    assert_eq!(s.usage().unwrap().objects, keys as u64);
}

fn checksums(make: Make) {
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

fn save_req(key: &str, guard: SaveGuard, rk: Option<&str>) -> SaveRequest {
    SaveRequest {
        bucket: "files".into(),
        key: key.into(),
        props: ObjectProps::default(),
        checksum_algorithm: None,
        guard,
        request_key: rk.map(String::from),
    }
}

fn guarded_saves(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    assert_eq!(
        s.read_for_save("files", "k", 1 << 16).unwrap_err().code(),
        "no_such_bucket"
    );
    s.create_bucket("files").unwrap();
    let obs = s.read_for_save("files", "k", 1 << 16).unwrap();
    assert!(obs.object.is_none() && obs.condition.observed_absent());
    let saved = s
        .save(
            save_req("k", SaveGuard::Observed(obs.condition.clone()), None),
            &mut Cursor::new(b"v1"),
        )
        .unwrap();
    assert!(!saved.replayed);
    // The absence observation no longer holds.
    let e = s.save(
        save_req("k", SaveGuard::Observed(obs.condition), None),
        &mut Cursor::new(b"v2"),
    );
    assert_eq!(e.unwrap_err().code(), "conflict");

    // Same-bytes rewrite, metadata-only change, A→B→A, delete+recreate all invalidate.
    type Mutation = fn(&Store);
    let mutations: [Mutation; 4] = [
        |s| {
            put(s, "files", "k", b"v1");
        },
        |s| {
            let mut props = ObjectProps::default();
            props.metadata.insert("m".into(), "1".into());
            s.put_object(
                "files",
                "k",
                &mut Cursor::new(b"v1"),
                PutOptions {
                    props,
                    ..Default::default()
                },
            )
            .unwrap();
        },
        |s| {
            put(s, "files", "k", b"B");
            put(s, "files", "k", b"v1");
        },
        |s| {
            s.delete_object("files", "k").unwrap();
            put(s, "files", "k", b"v1");
        },
    ];
    for m in mutations {
        let obs = s.read_for_save("files", "k", 1 << 16).unwrap();
        assert_eq!(obs.body, b"v1");
        m(s);
        let e = s.save(
            save_req("k", SaveGuard::Observed(obs.condition), None),
            &mut Cursor::new(b"x"),
        );
        assert_eq!(e.unwrap_err().code(), "conflict");
        put(s, "files", "k", b"v1");
    }
    // Two savers with one observation: exactly one commits.
    let obs = s.read_for_save("files", "k", 1 << 16).unwrap();
    let results: Vec<_> = (0..2)
        .map(|i| {
            let s = s.clone();
            let c = obs.condition.clone();
            std::thread::spawn(move || {
                s.save(
                    save_req("k", SaveGuard::Observed(c), None),
                    &mut Cursor::new(vec![i]),
                )
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1);
    assert_eq!(
        results
            .iter()
            .filter(|r| matches!(r, Err(StoreError::Conflict)))
            .count(),
        1
    );

    // Conditions are bound to the exact key and to this store instance.
    let obs = s.read_for_save("files", "k", 1 << 16).unwrap();
    let e = s.save(
        save_req("other", SaveGuard::Observed(obs.condition.clone()), None),
        &mut Cursor::new(b"x"),
    );
    assert_eq!(e.unwrap_err().code(), "invalid_condition");
    let other = Store::memory(StoreOptions::default()).unwrap();
    other.create_bucket("files").unwrap();
    let e = other.save(
        save_req("k", SaveGuard::Observed(obs.condition), None),
        &mut Cursor::new(b"x"),
    );
    assert_eq!(e.unwrap_err().code(), "invalid_condition");
    // Too large to observe.
    put(s, "files", "big", &body(70_000, 1));
    assert_eq!(
        s.read_for_save("files", "big", 65_536).unwrap_err().code(),
        "too_large"
    );
    let obs = s.read_for_save("files", "big", 1 << 20).unwrap();
    assert_eq!(obs.body, body(70_000, 1));
}

fn keyed_save_receipts(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("files").unwrap();
    let first = s
        .save(
            save_req("k", SaveGuard::Replace, Some("req-1")),
            &mut Cursor::new(b"one"),
        )
        .unwrap();
    assert!(!first.replayed);
    // A later write, then a retry of req-1: replayed, later contents untouched.
    put(s, "files", "k", b"later");
    let again = s
        .save(
            save_req("k", SaveGuard::Replace, Some("req-1")),
            &mut Cursor::new(b"one"),
        )
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.object, first.object);
    assert_eq!(get(s, "files", "k"), b"later");
    // Same key, different meaning.
    for (key, data) in [("k", &b"two"[..]), ("other", &b"one"[..])] {
        let e = s.save(
            save_req(key, SaveGuard::Replace, Some("req-1")),
            &mut Cursor::new(data),
        );
        assert_eq!(e.unwrap_err().code(), "request_conflict");
    }
    let obs = s.read_for_save("files", "k", 1 << 16).unwrap();
    let e = s.save(
        save_req("k", SaveGuard::Observed(obs.condition), Some("req-1")),
        &mut Cursor::new(b"one"),
    );
    assert_eq!(
        e.unwrap_err().code(),
        "request_conflict",
        "the guard is part of the meaning"
    );
    // Resolution.
    assert_eq!(s.resolve_save("files", "k", "req-1").unwrap(), first.object);
    assert_eq!(
        s.resolve_save("files", "k", "req-2").unwrap_err().code(),
        "not_found"
    );
    assert_eq!(
        s.resolve_save("files", "other", "req-1")
            .unwrap_err()
            .code(),
        "request_conflict"
    );
    assert_eq!(
        s.resolve_save("files", "k", " bad").unwrap_err().code(),
        "invalid_argument"
    );
    // A refused guarded save leaves no receipt.
    let obs = s.read_for_save("files", "k", 1 << 16).unwrap();
    put(s, "files", "k", b"moved on");
    let e = s.save(
        save_req("k", SaveGuard::Observed(obs.condition), Some("req-3")),
        &mut Cursor::new(b"x"),
    );
    assert_eq!(e.unwrap_err().code(), "conflict");
    assert_eq!(
        s.resolve_save("files", "k", "req-3").unwrap_err().code(),
        "not_found"
    );
    // Receipts hold metadata, and deleting the object keeps them.
    s.delete_object("files", "k").unwrap();
    assert_eq!(
        s.resolve_save("files", "k", "req-1").unwrap().etag,
        md5_etag(b"one")
    );
    let listed = s.list_receipts(None, 10).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].request_key, "req-1");

    // Receipts survive a restart of a disk store.
    let mut f = f;
    if let Some(dir) = f.dir.take() {
        let path = dir.path().join("data");
        let e = Store::open(&path, StoreOptions::default()).unwrap_err();
        assert_eq!(e.code(), "store_locked");
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        drop(f);
        let s = Store::open(&path, StoreOptions::default()).unwrap();
        assert_eq!(s.resolve_save("files", "k", "req-1").unwrap(), first.object);
        let again = s
            .save(
                save_req("k", SaveGuard::Replace, Some("req-1")),
                &mut Cursor::new(b"one"),
            )
            .unwrap();
        assert!(again.replayed, "replace saves replay across restarts");
        assert!(s.verify().unwrap().is_empty());
    }
}

fn receipt_retention(make: Make) {
    let f = make(StoreOptions {
        max_receipts: 3,
        max_receipt_entry_bytes: 2048,
        ..Default::default()
    });
    let s = &f.store;
    s.create_bucket("files").unwrap();
    for i in 0..3 {
        s.save(
            save_req(&format!("k{i}"), SaveGuard::Replace, Some(&format!("r{i}"))),
            &mut Cursor::new(b"x"),
        )
        .unwrap();
    }
    let usage = s.usage().unwrap();
    let e = s.save(
        save_req("k9", SaveGuard::Replace, Some("r9")),
        &mut Cursor::new(b"x"),
    );
    assert_eq!(e.unwrap_err().code(), "retention_full");
    assert_eq!(
        s.head_object("files", "k9").unwrap_err().code(),
        "no_such_key",
        "nothing written"
    );
    assert_eq!(s.usage().unwrap(), usage);
    // Deleting objects does not free receipts; retiring does.
    s.delete_object("files", "k0").unwrap();
    let e = s.save(
        save_req("k9", SaveGuard::Replace, Some("r9")),
        &mut Cursor::new(b"x"),
    );
    assert_eq!(e.unwrap_err().code(), "retention_full");
    assert_eq!(s.retire_receipts(&["r0".into(), "nope".into()]).unwrap(), 1);
    s.save(
        save_req("k9", SaveGuard::Replace, Some("r9")),
        &mut Cursor::new(b"x"),
    )
    .unwrap();
    assert_eq!(s.receipt_usage().unwrap().0, 3);
    // An entry too large for the journal.
    s.retire_receipts(&["r1".into()]).unwrap();
    let mut req = save_req("k8", SaveGuard::Replace, Some("r8"));
    req.props.metadata.insert("big".into(), "v".repeat(2000));
    let e = s.save(req, &mut Cursor::new(b"x"));
    assert_eq!(e.unwrap_err().code(), "retention_full");
    assert_eq!(
        s.head_object("files", "k8").unwrap_err().code(),
        "no_such_key"
    );
}

const MIB5: usize = 5 * 1024 * 1024;

fn multipart(make: Make) {
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
fn upload_cap(make: Make) {
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

fn multipart_refusals(make: Make) {
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
        (vec![p(1, &small.etag), p(1, &small.etag)], "invalid_part"),
        (vec![p(2, &last.etag), p(1, &small.etag)], "invalid_part"),
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

fn multipart_checksums(make: Make) {
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

fn put_detached(s: &Store, b: &str, k: &str, body: &[u8], opts: PutOptions) -> Result<ObjectMeta> {
    let (tx, rx) = std::sync::mpsc::channel();
    s.put_object_detached(b, k, body.to_vec(), opts, move |r| tx.send(r).unwrap());
    rx.recv().unwrap()
}

/// A detached put stores exactly what a waiting one does, and is refused
/// for the same reasons, answered through its callback.
fn detached_puts(make: Make) {
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

/// Usage held outside the store (a view's files) shares the quotas with
/// the store's objects, checked in the same write transactions.
fn outside_usage_counts_against_quotas(make: Make) {
    let f = make(StoreOptions {
        max_bytes: Some(10_000),
        max_objects: Some(4),
        ..Default::default()
    });
    let s = &f.store;
    s.create_bucket("bk1").unwrap();
    s.set_outside_usage(Usage {
        bytes: 8_000,
        objects: 2,
    })
    .unwrap();
    let e = s.put_object(
        "bk1",
        "big",
        &mut Cursor::new(body(3_000, 1)),
        PutOptions::default(),
    );
    assert_eq!(e.unwrap_err().code(), "quota_exceeded");
    put(s, "bk1", "a", &body(1_500, 1));
    assert_eq!(s.usage().unwrap().bytes, 1_500, "own usage only");
    // A checked charge sees the store's objects; a refused one changes nothing.
    let e = s.charge_outside(600, 1);
    assert_eq!(e.unwrap_err().code(), "quota_exceeded");
    assert_eq!(
        s.outside_usage(),
        Usage {
            bytes: 8_000,
            objects: 2
        }
    );
    s.charge_outside(500, 1).unwrap();
    let e = s.put_object("bk1", "b", &mut Cursor::new(b"x"), PutOptions::default());
    assert_eq!(
        e.unwrap_err().code(),
        "quota_exceeded",
        "objects: 1 + 3 = 4"
    );
    // Shrinking is always allowed, and so is an adjustment (moved bytes).
    s.charge_outside(-8_500, -3).unwrap();
    s.adjust_outside(20_000, 10).unwrap();
    assert_eq!(
        s.outside_usage(),
        Usage {
            bytes: 20_000,
            objects: 10
        }
    );
    // Deleting from the store is allowed while over the limit.
    s.delete_object("bk1", "a").unwrap();
    s.set_outside_usage(Usage::default()).unwrap();

    // Racing charges and puts never pass the limit together.
    let s = Arc::new(s.clone());
    let go = Arc::new(Barrier::new(16));
    let handles: Vec<_> = (0..16)
        .map(|i| {
            let (s, go) = (Arc::clone(&s), Arc::clone(&go));
            std::thread::spawn(move || {
                go.wait();
                if i % 2 == 0 {
                    s.charge_outside(2_000, 1).is_ok()
                } else {
                    s.put_object(
                        "bk1",
                        &format!("r{i}"),
                        &mut Cursor::new(body(2_000, i)),
                        PutOptions::default(),
                    )
                    .is_ok()
                }
            })
        })
        .collect();
    let passed = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(|ok| *ok)
        .count();
    let total = s.usage().unwrap().bytes + s.outside_usage().bytes;
    assert_eq!(passed, 4, "4 objects fit the object quota");
    assert_eq!(total, 8_000);
}

fn quotas(make: Make) {
    let f = make(StoreOptions {
        max_bytes: Some(100_000),
        max_objects: Some(3),
        ..Default::default()
    });
    let s = &f.store;
    s.create_bucket("bk1").unwrap();
    put(s, "bk1", "a", &body(60_000, 1));
    let e = s.put_object(
        "bk1",
        "b",
        &mut Cursor::new(body(50_000, 2)),
        PutOptions::default(),
    );
    assert_eq!(e.unwrap_err().code(), "quota_exceeded");
    // Overwrites net out the old size.
    put(s, "bk1", "a", &body(90_000, 3));
    put(s, "bk1", "a", &body(10, 3));
    put(s, "bk1", "b", b"1");
    put(s, "bk1", "c", b"2");
    let e = s.put_object("bk1", "d", &mut Cursor::new(b"3"), PutOptions::default());
    assert_eq!(e.unwrap_err().code(), "quota_exceeded");
    let e = s.copy_object("bk1", "a", "bk1", "d", CopyOptions::default());
    assert_eq!(e.unwrap_err().code(), "quota_exceeded");
    let e = s.save(
        SaveRequest {
            bucket: "bk1".into(),
            ..save_req("d", SaveGuard::Replace, Some("q1"))
        },
        &mut Cursor::new(b"x"),
    );
    assert_eq!(e.unwrap_err().code(), "quota_exceeded");
    assert_eq!(
        s.receipt_usage().unwrap().0,
        0,
        "no receipt for a refused save"
    );
    assert_eq!(
        s.usage().unwrap(),
        Usage {
            bytes: 12,
            objects: 3
        }
    );
    // In-flight parts count against the byte quota.
    let up = s
        .create_upload("bk1", "a", CreateUploadOptions::default())
        .unwrap();
    let e = s.upload_part(
        "bk1",
        "a",
        &up.upload_id,
        1,
        &mut Cursor::new(body(100_000, 1)),
        PartOptions::default(),
    );
    assert_eq!(e.unwrap_err().code(), "quota_exceeded");
    s.upload_part(
        "bk1",
        "a",
        &up.upload_id,
        1,
        &mut Cursor::new(body(1000, 1)),
        PartOptions::default(),
    )
    .unwrap();
    assert_eq!(s.usage().unwrap().bytes, 1012);
    s.abort_upload("bk1", "a", &up.upload_id).unwrap();
    assert_eq!(
        s.usage().unwrap(),
        Usage {
            bytes: 12,
            objects: 3
        }
    );
}

fn read_conditions(make: Make) {
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

/// A whole small object is checked against its ETag as it is read: bytes
/// damaged on disk end the body with an error instead of being served;
/// larger ones and ranges are left to `check` (`verify_contents`).
#[test]
fn a_damaged_small_blob_reads_as_an_error_not_as_wrong_bytes() {
    let f = disk(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("bkt").unwrap();
    let small = body(100 * 1024, 3);
    let large = body(VERIFIED_READ_LIMIT as usize + 4096, 4);
    put(s, "bkt", "small", &small);
    put(s, "bkt", "large", &large);
    assert_eq!(get(s, "bkt", "small"), small);
    // Flip one byte in each blob file (the only two files under blobs/).
    let mut files = Vec::new();
    let mut dirs = vec![f.dir.as_ref().unwrap().path().join("data/blobs")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                dirs.push(e.path());
            } else {
                files.push(e.path());
            }
        }
    }
    assert_eq!(files.len(), 2);
    for p in &files {
        let mut perms = std::fs::metadata(p).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
        std::fs::set_permissions(p, perms).unwrap();
        let mut bytes = std::fs::read(p).unwrap();
        bytes[1000] ^= 1;
        std::fs::write(p, bytes).unwrap();
    }
    let err = s
        .get_object("bkt", "small", None)
        .unwrap()
        .body
        .into_vec()
        .unwrap_err();
    assert!(err.to_string().contains("ETag"), "{err}");
    // A range is served as stored, and the large body is not checked on
    // read: verify_contents names both.
    let r = s
        .get_object("bkt", "small", Some(ByteRange::FromTo(0, 9)))
        .unwrap()
        .body
        .into_vec()
        .unwrap();
    assert_eq!(r, small[..10]);
    assert_ne!(get(s, "bkt", "large"), large);
    let damaged = s.verify_contents().unwrap();
    assert_eq!(damaged.len(), 2, "{damaged:?}");
    // Put back, so the fixture's own check passes.
    for p in &files {
        let mut bytes = std::fs::read(p).unwrap();
        bytes[1000] ^= 1;
        std::fs::write(p, bytes).unwrap();
    }
    assert_eq!(get(s, "bkt", "small"), small);
}
