//! Guarded saves, keyed receipts and their retention.

use super::*;

pub(crate) fn save_req(key: &str, guard: SaveGuard, rk: Option<&str>) -> SaveRequest {
    SaveRequest {
        bucket: "files".into(),
        key: key.into(),
        props: ObjectProps::default(),
        checksum_algorithm: None,
        guard,
        request_key: rk.map(String::from),
    }
}

pub(crate) fn guarded_saves(make: Make) {
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

pub(crate) fn keyed_save_receipts(make: Make) {
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

pub(crate) fn receipt_retention(make: Make) {
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
