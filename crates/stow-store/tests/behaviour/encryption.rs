//! Customer-provided keys (SSE-C): objects sealed with a key open only
//! with it (whole, ranges across the 64 KiB records, parts), copies under
//! the same key share bytes and any other copy rewrites them, multipart
//! parts need the upload's key, and no plaintext reaches the disk.

use super::*;

fn key(b: u8) -> CustomerKey {
    CustomerKey::from_bytes([b; 32])
}

fn put_sealed(s: &Store, b: &str, k: &str, data: &[u8], with: &CustomerKey) -> ObjectMeta {
    let opts = PutOptions {
        encryption: Some(with.clone()),
        ..Default::default()
    };
    s.put_object(b, k, &mut Cursor::new(data), opts).unwrap()
}

fn read(
    s: &Store,
    b: &str,
    k: &str,
    range: Option<ByteRange>,
    part: Option<u32>,
    with: Option<&CustomerKey>,
) -> Result<Vec<u8>> {
    s.get_object_keyed(b, k, None, range, part, with)?
        .body
        .into_vec()
}

pub(crate) fn sealed_objects(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("sse").unwrap();
    let (a, other) = (key(1), key(2));
    // Inline (small) and file (large) bodies, sizes around the records.
    for (name, size) in [("empty", 0), ("small", 13), ("large", 3 * 65536 + 99)] {
        let data = body(size, 7);
        let meta = put_sealed(s, "sse", name, &data, &a);
        assert_eq!(meta.size, size as u64);
        // The ETag is opaque: never the plaintext's MD5; the same bytes
        // under the same key keep it, under another key it differs.
        assert_ne!(meta.etag, md5_etag(&data), "{name}");
        assert_eq!(put_sealed(s, "sse", name, &data, &a).etag, meta.etag);
        let under_other = put_sealed(s, "sse", "other-key", &data, &other);
        assert_ne!(under_other.etag, meta.etag);
        assert_eq!(read(s, "sse", name, None, None, Some(&a)).unwrap(), data);
        let missing = read(s, "sse", name, None, None, None).unwrap_err();
        assert_eq!(missing.code(), "encryption_key_missing");
        assert_eq!(
            s.get_object("sse", name, None).unwrap_err().code(),
            "encryption_key_missing"
        );
        let wrong = read(s, "sse", name, None, None, Some(&other)).unwrap_err();
        assert_eq!(wrong.code(), "wrong_encryption_key");
        assert_eq!(
            s.head_object_keyed("sse", name, None, None)
                .unwrap_err()
                .code(),
            "encryption_key_missing"
        );
        assert_eq!(
            s.head_object_keyed("sse", name, None, Some(&a))
                .unwrap()
                .etag,
            meta.etag
        );
        // Part 1 of a simple object is all of it.
        assert_eq!(read(s, "sse", name, None, Some(1), Some(&a)).unwrap(), data);
    }
    // Ranges across record boundaries.
    let data = body(3 * 65536 + 99, 7);
    for (from, to) in [
        (0u64, 0u64),
        (65530, 65545),
        (65536, 65536),
        (1, 3 * 65536 + 98),
        (131071, 196700),
    ] {
        let got = read(
            s,
            "sse",
            "large",
            Some(ByteRange::FromTo(from, to)),
            None,
            Some(&a),
        );
        assert_eq!(
            got.unwrap(),
            &data[from as usize..=to as usize],
            "{from}-{to}"
        );
    }
    let tail = read(
        s,
        "sse",
        "large",
        Some(ByteRange::Suffix(70000)),
        None,
        Some(&a),
    )
    .unwrap();
    assert_eq!(tail, &data[data.len() - 70000..]);
    // A key for a plain object is refused.
    put(s, "sse", "plain", b"plain bytes");
    assert_eq!(
        read(s, "sse", "plain", None, None, Some(&a))
            .unwrap_err()
            .code(),
        "encryption_not_applicable"
    );
    assert_eq!(
        read(s, "sse", "plain", None, None, None).unwrap(),
        b"plain bytes"
    );
    // Checksums and Content-MD5 are of the plaintext.
    let opts = PutOptions {
        encryption: Some(a.clone()),
        checksum_algorithm: Some(ChecksumAlgorithm::Sha256),
        content_md5: Some(base64_md5(b"checked")),
        ..Default::default()
    };
    let meta = s
        .put_object("sse", "checked", &mut Cursor::new(b"checked"), opts)
        .unwrap();
    let plain_sha = {
        use sha2::Digest as _;
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            sha2::Sha256::digest(b"checked"),
        )
    };
    assert_eq!(meta.checksum.unwrap().value, plain_sha);
    let bad = PutOptions {
        encryption: Some(a.clone()),
        content_md5: Some(base64_md5(b"other")),
        ..Default::default()
    };
    let e = s
        .put_object("sse", "checked", &mut Cursor::new(b"checked"), bad)
        .unwrap_err();
    assert_eq!(e.code(), "bad_digest");
    // `check` verifies sealed bytes without the key.
    assert_eq!(s.verify_contents().unwrap(), Vec::<String>::new());
}

/// A copy's SSE-S3 is its own (`CopyOptions::sse_s3`), never the
/// source's: whether it shares the source's blobs, is rewritten under a
/// customer key, or replaces the properties.
pub(crate) fn copies_take_their_own_sse_s3(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("sse").unwrap();
    let mut opts = PutOptions::default();
    opts.props.sse_s3 = true;
    s.put_object("sse", "src", &mut Cursor::new(b"bytes"), opts)
        .unwrap();
    let copy = |dst: &str, opts: CopyOptions| {
        let meta = s.copy_object("sse", "src", "sse", dst, opts).unwrap();
        let head = s.head_object("sse", dst).unwrap();
        assert_eq!(meta.props.sse_s3, head.props.sse_s3, "{dst}");
        head.props.sse_s3
    };
    assert!(!copy("shared", CopyOptions::default()));
    let on = CopyOptions {
        sse_s3: true,
        ..Default::default()
    };
    assert!(copy("shared-on", on.clone()));
    let replaced = CopyOptions {
        replace_props: Some(ObjectProps::default()),
        sse_s3: true,
        ..Default::default()
    };
    assert!(copy("replaced", replaced));
    let sealed = CopyOptions {
        encryption: Some(key(7)),
        ..Default::default()
    };
    assert!(!copy("sealed", sealed));
    assert_eq!(
        read(s, "sse", "sealed", None, None, Some(&key(7))).unwrap(),
        b"bytes"
    );
    // The source keeps its own.
    assert!(s.head_object("sse", "src").unwrap().props.sse_s3);
}

fn base64_md5(data: &[u8]) -> String {
    base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        md5::Md5::digest(data),
    )
}

pub(crate) fn sealed_copies(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("sse").unwrap();
    let (a, other) = (key(1), key(2));
    let data = body(100_000, 3);
    put_sealed(s, "sse", "src", &data, &a);
    let copy = |dst: &str, source_key: Option<&CustomerKey>, to: Option<&CustomerKey>| {
        let opts = CopyOptions {
            source_key: source_key.cloned(),
            encryption: to.cloned(),
            ..Default::default()
        };
        s.copy_object("sse", "src", "sse", dst, opts)
    };
    assert_eq!(
        copy("x", None, None).unwrap_err().code(),
        "encryption_key_missing"
    );
    assert_eq!(
        copy("x", Some(&other), Some(&a)).unwrap_err().code(),
        "wrong_encryption_key"
    );
    let before = s.usage().unwrap();
    // Same key: the blob is shared (usage counts it twice, stores it once).
    copy("same", Some(&a), Some(&a)).unwrap();
    assert_eq!(read(s, "sse", "same", None, None, Some(&a)).unwrap(), data);
    // Another key, and none: rewritten.
    copy("rekeyed", Some(&a), Some(&other)).unwrap();
    assert_eq!(
        read(s, "sse", "rekeyed", None, None, Some(&other)).unwrap(),
        data
    );
    assert_eq!(
        read(s, "sse", "rekeyed", None, None, Some(&a))
            .unwrap_err()
            .code(),
        "wrong_encryption_key"
    );
    copy("plain", Some(&a), None).unwrap();
    assert_eq!(read(s, "sse", "plain", None, None, None).unwrap(), data);
    // A plain object copied under a key is sealed.
    let opts = CopyOptions {
        encryption: Some(other.clone()),
        ..Default::default()
    };
    s.copy_object("sse", "plain", "sse", "sealed-again", opts)
        .unwrap();
    assert_eq!(
        read(s, "sse", "sealed-again", None, None, None)
            .unwrap_err()
            .code(),
        "encryption_key_missing"
    );
    assert_eq!(
        s.usage().unwrap().bytes,
        before.bytes + 4 * data.len() as u64
    );
    assert_eq!(s.verify_contents().unwrap(), Vec::<String>::new());
}

pub(crate) fn sealed_multipart(make: Make) {
    let f = make(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("sse").unwrap();
    let (a, other) = (key(1), key(2));
    let up = s
        .create_upload(
            "sse",
            "mp",
            CreateUploadOptions {
                encryption: Some(a.clone()),
                ..Default::default()
            },
        )
        .unwrap();
    let p1 = body(MIN_PART_SIZE as usize + 10, 1);
    let p2 = body(70_000, 2);
    let part = |n: i64, data: &[u8], with: Option<&CustomerKey>| {
        let opts = PartOptions {
            encryption: with.cloned(),
            ..Default::default()
        };
        s.upload_part("sse", "mp", &up.upload_id, n, &mut Cursor::new(data), opts)
    };
    assert_eq!(
        part(1, &p1, None).unwrap_err().code(),
        "encryption_key_missing"
    );
    assert_eq!(
        part(1, &p1, Some(&other)).unwrap_err().code(),
        "wrong_encryption_key"
    );
    let e1 = part(1, &p1, Some(&a)).unwrap();
    let e2 = part(2, &p2, Some(&a)).unwrap();
    // A part sent again keeps its ETag (clients list the first one);
    // under another key the ETag differs.
    assert_eq!(part(2, &p2, Some(&a)).unwrap().etag, e2.etag);
    s.check_upload_key("sse", "mp", &up.upload_id, &a).unwrap();
    assert_eq!(
        s.check_upload_key("sse", "mp", &up.upload_id, &other)
            .unwrap_err()
            .code(),
        "wrong_encryption_key"
    );
    let listed = [
        CompletedPart {
            part_number: 1,
            etag: e1.etag,
        },
        CompletedPart {
            part_number: 2,
            etag: e2.etag,
        },
    ];
    let meta = s
        .complete_upload("sse", "mp", &up.upload_id, &listed, WriteCondition::Always)
        .unwrap();
    let whole: Vec<u8> = [p1.clone(), p2.clone()].concat();
    assert_eq!(meta.size, whole.len() as u64);
    assert_eq!(read(s, "sse", "mp", None, None, Some(&a)).unwrap(), whole);
    assert_eq!(
        read(s, "sse", "mp", None, None, None).unwrap_err().code(),
        "encryption_key_missing"
    );
    assert_eq!(read(s, "sse", "mp", None, Some(2), Some(&a)).unwrap(), p2);
    // A range across the parts' boundary.
    let at = p1.len() as u64;
    let got = read(
        s,
        "sse",
        "mp",
        Some(ByteRange::FromTo(at - 5, at + 70_000)),
        None,
        Some(&a),
    )
    .unwrap();
    assert_eq!(got, &whole[at as usize - 5..]);
    // A plain upload takes no key.
    let plain = s
        .create_upload("sse", "plain", CreateUploadOptions::default())
        .unwrap();
    let opts = PartOptions {
        encryption: Some(a.clone()),
        ..Default::default()
    };
    let e = s
        .upload_part(
            "sse",
            "plain",
            &plain.upload_id,
            1,
            &mut Cursor::new(b"x"),
            opts,
        )
        .unwrap_err();
    assert_eq!(e.code(), "encryption_not_applicable");
    // A full-object checksum would need every part decrypted: refused.
    let full = CreateUploadOptions {
        encryption: Some(a.clone()),
        checksum_algorithm: Some(ChecksumAlgorithm::Crc32),
        checksum_type: Some(ChecksumType::FullObject),
        ..Default::default()
    };
    assert_eq!(
        s.create_upload("sse", "full", full).unwrap_err().code(),
        "not_implemented"
    );
    s.abort_upload("sse", "plain", &plain.upload_id).unwrap();
    assert_eq!(s.verify_contents().unwrap(), Vec::<String>::new());
}

/// Reads every file under `dir` (blobs, staging, the database and its
/// WAL) and says whether `needle` is in any of them.
fn on_disk(dir: &std::path::Path, needle: &[u8]) -> bool {
    let mut found = false;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found |= on_disk(&path, needle);
        } else if let Ok(bytes) = std::fs::read(&path) {
            found |= bytes.windows(needle.len()).any(|w| w == needle);
        }
    }
    found
}

#[test]
fn no_plaintext_reaches_the_disk() {
    let f = disk(StoreOptions::default());
    let s = &f.store;
    let dir = f.dir.as_ref().unwrap().path().join("data");
    s.create_bucket("sse").unwrap();
    let a = key(9);
    let secret = b"THE-PLAINTEXT-OF-A-CUSTOMER-ENCRYPTED-OBJECT-0123456789";
    // Inline (in the database) and file bodies, a copy under another
    // key, and a multipart part.
    put_sealed(s, "sse", "small", secret, &a);
    let large: Vec<u8> = secret.iter().copied().cycle().take(200_000).collect();
    put_sealed(s, "sse", "large", &large, &a);
    let opts = CopyOptions {
        source_key: Some(a.clone()),
        encryption: Some(key(10)),
        ..Default::default()
    };
    s.copy_object("sse", "large", "sse", "copy", opts).unwrap();
    let up = s
        .create_upload(
            "sse",
            "mp",
            CreateUploadOptions {
                encryption: Some(a.clone()),
                ..Default::default()
            },
        )
        .unwrap();
    let opts = PartOptions {
        encryption: Some(a.clone()),
        ..Default::default()
    };
    s.upload_part(
        "sse",
        "mp",
        &up.upload_id,
        1,
        &mut Cursor::new(&large),
        opts,
    )
    .unwrap();
    assert!(!on_disk(&dir, secret), "plaintext found on disk");
    // The check is real: a plain object's bytes are found.
    put(s, "sse", "plain", secret);
    assert!(on_disk(&dir, secret));
}

#[test]
fn tampered_sealed_bytes_are_detected() {
    let f = disk(StoreOptions::default());
    let s = &f.store;
    let dir = f.dir.as_ref().unwrap().path().join("data");
    s.create_bucket("sse").unwrap();
    let a = key(4);
    let data = body(300_000, 1);
    let meta = put_sealed(s, "sse", "o", &data, &a);
    // The one blob file: flip a byte in the middle of its records.
    let mut files = Vec::new();
    for shard in std::fs::read_dir(dir.join("blobs")).unwrap() {
        for f in std::fs::read_dir(shard.unwrap().path()).unwrap() {
            files.push(f.unwrap().path());
        }
    }
    assert_eq!(files.len(), 1);
    let mut bytes = std::fs::read(&files[0]).unwrap();
    bytes[150_000] ^= 0x40;
    std::fs::write(&files[0], &bytes).unwrap();
    let got = read(s, "sse", "o", None, None, Some(&a));
    assert!(got.is_err(), "a damaged record must not be returned");
    // A range that avoids the damaged record still reads.
    let first = read(
        s,
        "sse",
        "o",
        Some(ByteRange::FromTo(0, 999)),
        None,
        Some(&a),
    )
    .unwrap();
    assert_eq!(first, &data[..1000]);
    // `check` cannot decrypt; it finds a blob cut short (or grown).
    bytes[150_000] ^= 0x40;
    std::fs::write(&files[0], &bytes[..bytes.len() - 16]).unwrap();
    let problems = s.verify_contents().unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("sse/o"), "{problems:?}");
    assert!(read(s, "sse", "o", None, None, Some(&a)).is_err());
    // Put it back so the fixture's own check passes.
    std::fs::write(&files[0], &bytes).unwrap();
    assert_eq!(s.verify_contents().unwrap(), Vec::<String>::new());
    assert_eq!(read(s, "sse", "o", None, None, Some(&a)).unwrap(), data);
    let _ = meta;
}
