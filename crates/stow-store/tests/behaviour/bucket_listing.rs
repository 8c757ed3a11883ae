//! Buckets and listing.

use super::*;

pub(crate) fn buckets(make: Make) {
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

pub(crate) fn listing(make: Make) {
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

pub(crate) fn listing_pages_cover_everything(make: Make) {
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
