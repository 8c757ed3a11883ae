//! Model-based property test: random operation sequences run against the
//! disk store and a plain in-memory model must agree at every step.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Cursor;

use proptest::prelude::*;
use stow_store::*;

const BUCKETS: [&str; 2] = ["bucket-one", "bucket-two"];
const KEYS: [&str; 6] = ["a", "a/b", "a/c", "b", "c/d/e", "ü"];

#[derive(Debug, Clone)]
enum Op {
    CreateBucket(usize),
    DeleteBucket(usize),
    Put {
        b: usize,
        k: usize,
        size: usize,
        seed: u8,
        cond: u8,
    },
    Delete {
        b: usize,
        k: usize,
    },
    Copy {
        sb: usize,
        sk: usize,
        db: usize,
        dk: usize,
    },
    Get {
        b: usize,
        k: usize,
        from: u64,
        len: u64,
    },
    List {
        b: usize,
        prefix: usize,
        delim: bool,
        max: usize,
    },
    KeyedSave {
        b: usize,
        k: usize,
        req: u8,
        seed: u8,
    },
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    let b = 0..BUCKETS.len();
    let k = 0..KEYS.len();
    prop_oneof![
        1 => b.clone().prop_map(Op::CreateBucket),
        1 => b.clone().prop_map(Op::DeleteBucket),
        6 => (b.clone(), k.clone(), prop_oneof![Just(0usize), Just(7), Just(40_000)], any::<u8>(), 0u8..3)
            .prop_map(|(b, k, size, seed, cond)| Op::Put { b, k, size, seed, cond }),
        2 => (b.clone(), k.clone()).prop_map(|(b, k)| Op::Delete { b, k }),
        2 => (b.clone(), k.clone(), b.clone(), k.clone()).prop_map(|(sb, sk, db, dk)| Op::Copy { sb, sk, db, dk }),
        2 => (b.clone(), k.clone(), 0u64..50_000, 1u64..50_000).prop_map(|(b, k, from, len)| Op::Get { b, k, from, len }),
        2 => (b.clone(), 0usize..3, any::<bool>(), 0usize..5).prop_map(|(b, prefix, delim, max)| Op::List { b, prefix, delim, max }),
        2 => (b.clone(), k, 0u8..4, any::<u8>()).prop_map(|(b, k, req, seed)| Op::KeyedSave { b, k, req, seed }),
        1 => Just(Op::Reopen),
    ]
}

fn data(size: usize, seed: u8) -> Vec<u8> {
    (0..size)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed)
        .collect()
}

#[derive(Default)]
struct Model {
    buckets: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    /// request key → (bucket, key, body) of the committed save.
    receipts: BTreeMap<String, (String, String, Vec<u8>)>,
}

impl Model {
    fn usage(&self) -> Usage {
        let objs = self.buckets.values().flat_map(|b| b.values());
        Usage {
            bytes: objs.clone().map(|v| v.len() as u64).sum(),
            objects: objs.count() as u64,
        }
    }
}

fn code<T>(r: &Result<T>) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(e) => e.code(),
    }
}

fn run(ops: Vec<Op>) -> std::result::Result<(), TestCaseError> {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("data");
    let mut store = Some(Store::open(&path, StoreOptions::default()).unwrap());
    let mut m = Model::default();
    for op in ops {
        let s = store.as_ref().unwrap();
        match op {
            Op::CreateBucket(b) => {
                let created = s.create_bucket(BUCKETS[b]).unwrap();
                prop_assert_eq!(created, !m.buckets.contains_key(BUCKETS[b]));
                m.buckets.entry(BUCKETS[b].into()).or_default();
            }
            Op::DeleteBucket(b) => {
                let want = match m.buckets.get(BUCKETS[b]) {
                    None => "no_such_bucket",
                    Some(objs) if !objs.is_empty() => "bucket_not_empty",
                    Some(_) => "ok",
                };
                prop_assert_eq!(code(&s.delete_bucket(BUCKETS[b])), want);
                if want == "ok" {
                    m.buckets.remove(BUCKETS[b]);
                }
            }
            Op::Put {
                b,
                k,
                size,
                seed,
                cond,
            } => {
                let body = data(size, seed);
                let current = m.buckets.get(BUCKETS[b]).map(|o| o.get(KEYS[k]));
                let (condition, want) = match (cond, current) {
                    (_, None) => (WriteCondition::Always, "no_such_bucket"),
                    (0, _) => (WriteCondition::Always, "ok"),
                    (1, Some(None)) => (WriteCondition::IfAbsent, "ok"),
                    (1, Some(Some(_))) => (WriteCondition::IfAbsent, "precondition_failed"),
                    (_, Some(None)) => (WriteCondition::IfMatch("*".into()), "no_such_key"),
                    (_, Some(Some(_))) => (WriteCondition::IfMatch("*".into()), "ok"),
                };
                let r = s.put_object(
                    BUCKETS[b],
                    KEYS[k],
                    &mut Cursor::new(&body),
                    PutOptions {
                        condition,
                        ..Default::default()
                    },
                );
                prop_assert_eq!(code(&r), want);
                if want == "ok" {
                    m.buckets
                        .get_mut(BUCKETS[b])
                        .unwrap()
                        .insert(KEYS[k].into(), body);
                }
            }
            Op::Delete { b, k } => {
                let r = s.delete_object(BUCKETS[b], KEYS[k]);
                match m.buckets.get_mut(BUCKETS[b]) {
                    None => prop_assert_eq!(code(&r), "no_such_bucket"),
                    Some(objs) => prop_assert_eq!(r.unwrap(), objs.remove(KEYS[k]).is_some()),
                }
            }
            Op::Copy { sb, sk, db, dk } => {
                let r = s.copy_object(
                    BUCKETS[sb],
                    KEYS[sk],
                    BUCKETS[db],
                    KEYS[dk],
                    CopyOptions::default(),
                );
                let src = m.buckets.get(BUCKETS[sb]).map(|o| o.get(KEYS[sk]).cloned());
                let want = match (src, m.buckets.contains_key(BUCKETS[db])) {
                    (None, _) => "no_such_bucket",
                    (Some(None), _) => "no_such_key",
                    (Some(Some(_)), false) => "no_such_bucket",
                    (Some(Some(body)), true) => {
                        m.buckets
                            .get_mut(BUCKETS[db])
                            .unwrap()
                            .insert(KEYS[dk].into(), body);
                        "ok"
                    }
                };
                prop_assert_eq!(code(&r), want);
            }
            Op::Get { b, k, from, len } => {
                let r = s.get_object(
                    BUCKETS[b],
                    KEYS[k],
                    Some(ByteRange::FromTo(from, from + len - 1)),
                );
                match m.buckets.get(BUCKETS[b]).map(|o| o.get(KEYS[k])) {
                    None => prop_assert_eq!(code(&r), "no_such_bucket"),
                    Some(None) => prop_assert_eq!(code(&r), "no_such_key"),
                    Some(Some(body)) if from >= body.len() as u64 => {
                        prop_assert_eq!(code(&r), "invalid_range")
                    }
                    Some(Some(body)) => {
                        let end = (from + len).min(body.len() as u64) as usize;
                        prop_assert_eq!(
                            r.unwrap().body.into_vec().unwrap(),
                            &body[from as usize..end]
                        );
                    }
                }
            }
            Op::List {
                b,
                prefix,
                delim,
                max,
            } => {
                let prefix = ["", "a", "a/"][prefix];
                let q = ListQuery {
                    prefix: prefix.into(),
                    delimiter: delim.then(|| "/".to_string()),
                    start_after: None,
                    max_keys: max,
                };
                let r = s.list_objects(BUCKETS[b], &q);
                let Some(objs) = m.buckets.get(BUCKETS[b]) else {
                    prop_assert_eq!(code(&r), "no_such_bucket");
                    continue;
                };
                let mut entries: BTreeSet<(String, bool)> = BTreeSet::new();
                for key in objs.keys().filter(|k| k.starts_with(prefix)) {
                    match key[prefix.len()..].find('/').filter(|_| delim) {
                        Some(i) => entries.insert((key[..prefix.len() + i + 1].to_string(), true)),
                        None => entries.insert((key.clone(), false)),
                    };
                }
                let page = r.unwrap();
                let want: Vec<_> = entries.iter().take(max).cloned().collect();
                let mut got: Vec<(String, bool)> = page
                    .objects
                    .iter()
                    .map(|o| (o.key.clone(), false))
                    .collect();
                got.extend(page.common_prefixes.iter().map(|p| (p.clone(), true)));
                got.sort();
                prop_assert_eq!(got, want);
                prop_assert_eq!(page.is_truncated, max > 0 && entries.len() > max);
            }
            Op::KeyedSave { b, k, req, seed } => {
                let body = data(5, seed);
                let rk = format!("req-{req}");
                let request = SaveRequest {
                    bucket: BUCKETS[b].into(),
                    key: KEYS[k].into(),
                    props: ObjectProps::default(),
                    checksum_algorithm: None,
                    guard: SaveGuard::Replace,
                    request_key: Some(rk.clone()),
                };
                let r = s.save(request, &mut Cursor::new(&body));
                match m.receipts.get(&rk) {
                    Some((rb, rkey, rbody)) => {
                        if (rb.as_str(), rkey.as_str(), rbody) == (BUCKETS[b], KEYS[k], &body) {
                            prop_assert!(r.unwrap().replayed, "same meaning replays");
                        } else {
                            prop_assert_eq!(code(&r), "request_conflict");
                        }
                    }
                    None => match m.buckets.get_mut(BUCKETS[b]) {
                        None => prop_assert_eq!(code(&r), "no_such_bucket"),
                        Some(objs) => {
                            prop_assert!(!r.unwrap().replayed);
                            objs.insert(KEYS[k].into(), body.clone());
                            m.receipts
                                .insert(rk, (BUCKETS[b].into(), KEYS[k].into(), body));
                        }
                    },
                }
            }
            Op::Reopen => {
                drop(store.take());
                store = Some(Store::open(&path, StoreOptions::default()).unwrap());
            }
        }
    }
    // Final state: every object, usage, receipts, and internal consistency.
    let s = store.as_ref().unwrap();
    let names: Vec<String> = s
        .list_buckets()
        .unwrap()
        .into_iter()
        .map(|b| b.name)
        .collect();
    prop_assert_eq!(names, m.buckets.keys().cloned().collect::<Vec<_>>());
    for (bucket, objs) in &m.buckets {
        let q = ListQuery {
            max_keys: 1000,
            ..Default::default()
        };
        let listed: Vec<String> = s
            .list_objects(bucket, &q)
            .unwrap()
            .objects
            .into_iter()
            .map(|o| o.key)
            .collect();
        prop_assert_eq!(listed, objs.keys().cloned().collect::<Vec<_>>());
        for (key, body) in objs {
            prop_assert_eq!(
                &s.get_object(bucket, key, None)
                    .unwrap()
                    .body
                    .into_vec()
                    .unwrap(),
                body
            );
        }
    }
    prop_assert_eq!(s.usage().unwrap(), m.usage());
    for (rk, (b, k, _)) in &m.receipts {
        prop_assert!(s.resolve_save(b, k, rk).is_ok());
    }
    let problems = s.verify().unwrap();
    prop_assert!(problems.is_empty(), "{:?}", problems);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn disk_store_agrees_with_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops)?;
    }
}

/// Every object of a bucket in key order, from the store's own listing.
fn all_objects(store: &Store, bucket: &str) -> Vec<ObjectSummary> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let q = ListQuery {
            start_after: after.clone(),
            max_keys: 1000,
            ..ListQuery::default()
        };
        let page = store.list_objects(bucket, &q).expect("list");
        out.extend(page.objects);
        if !page.is_truncated {
            return out;
        }
        after = page.next_marker;
    }
}

fn short_key() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![Just("a"), Just("b"), Just("/"), Just("ü")],
        1..5,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    /// The in-memory pager (used by backends whose objects are not all in
    /// the index) pages exactly like the index scan.
    #[test]
    fn in_memory_pager_agrees_with_index_scan(
        keys in proptest::collection::btree_set(short_key(), 0..24),
        prefix in prop_oneof![Just(""), Just("a"), Just("a/"), Just("b/a")],
        delimiter in prop_oneof![Just(None), Just(Some("/")), Just(Some("a/"))],
        start_after in proptest::option::of(short_key()),
        max_keys in 0usize..6,
    ) {
        let store = Store::memory(StoreOptions::default()).expect("store");
        store.create_bucket("pager").expect("bucket");
        for k in &keys {
            store.put_object("pager", k, &mut Cursor::new(k.as_bytes()), PutOptions::default()).expect("put");
        }
        let q = ListQuery {
            prefix: prefix.to_string(),
            delimiter: delimiter.map(str::to_string),
            start_after,
            max_keys,
        };
        let want = store.list_objects("pager", &q).expect("list");
        let got = page_of_sorted(all_objects(&store, "pager"), &q).expect("page");
        prop_assert_eq!(got, want);
    }
}
