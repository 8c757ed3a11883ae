//! Conditional writes and the create-only race.

use super::*;

pub(crate) fn conditional_writes(make: Make) {
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

pub(crate) fn create_only_race(make: Make) {
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
