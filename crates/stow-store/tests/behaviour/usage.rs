//! Quotas, and usage held outside the store.

use super::*;

pub(crate) fn quotas(make: Make) {
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

/// Usage held outside the store (a view's files) shares the quotas with
/// the store's objects, checked in the same write transactions.
pub(crate) fn outside_usage_counts_against_quotas(make: Make) {
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
