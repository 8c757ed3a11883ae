//! `Store::reset`: emptying a store atomically, on disk and in memory,
//! under concurrent writers, and across a SIGKILL at each of its fault
//! points (`STOW_TEST_FAULT`).

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use stow_store::*;

/// Large enough to live in a blob file, not inline.
const FILE_BODY: usize = 100 * 1024;

fn put(s: &Store, bucket: &str, key: &str, body: &[u8]) -> ObjectMeta {
    s.put_object(bucket, key, &mut Cursor::new(body), PutOptions::default())
        .unwrap()
}

fn read(s: &Store, bucket: &str, key: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut r = s.get_object(bucket, key, None).unwrap();
    std::io::copy(&mut r.body, &mut out).unwrap();
    out
}

/// Opens the store at `dir` again after its `Store` was dropped. A sibling
/// test here spawns child processes, which share this process's lock file
/// between fork and exec; the drop unlocks explicitly, so this open never
/// sees the store locked.
fn reopen(dir: &Path) -> Store {
    Store::open(dir, StoreOptions::default()).unwrap()
}

/// Two buckets, an inline and a file object, an upload with a part, a
/// keyed save (its receipt).
fn fill(s: &Store) {
    s.create_bucket("alpha").unwrap();
    s.create_bucket("beta").unwrap();
    put(s, "alpha", "small", b"hello");
    put(s, "alpha", "large", &vec![7u8; FILE_BODY]);
    let up = s
        .create_upload("beta", "parts", CreateUploadOptions::default())
        .unwrap();
    s.upload_part(
        "beta",
        "parts",
        &up.upload_id,
        1,
        &mut Cursor::new(vec![3u8; FILE_BODY]),
        PartOptions::default(),
    )
    .unwrap();
    s.save(
        SaveRequest {
            bucket: "beta".into(),
            key: "saved".into(),
            props: ObjectProps::default(),
            checksum_algorithm: None,
            guard: SaveGuard::Replace,
            request_key: Some("rk-1".into()),
        },
        &mut Cursor::new(b"kept".to_vec()),
    )
    .unwrap();
}

/// The store holds nothing, and every counter says so.
fn assert_empty(s: &Store) {
    assert!(s.list_buckets().unwrap().is_empty());
    assert_eq!(s.usage().unwrap(), Usage::default());
    assert!(s.list_receipts(None, 10).unwrap().is_empty());
    let problems = s.verify().unwrap();
    assert!(problems.is_empty(), "{problems:?}");
}

/// The blob directories (`blobs`, `blobs-*`) in a data directory.
fn blob_dirs(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("blobs"))
        .collect();
    v.sort();
    v
}

/// Waits for the background sweep to leave one blob directory.
fn wait_swept(dir: &Path) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let dirs = blob_dirs(dir);
        if dirs.len() == 1 || Instant::now() > deadline {
            return dirs;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn files_under(dir: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        n += if p.is_dir() { files_under(&p) } else { 1 };
    }
    n
}

#[test]
fn reset_empties_a_disk_store_and_it_stays_usable() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Store::open(tmp.path(), StoreOptions::default()).unwrap();
    fill(&s);
    assert_eq!(blob_dirs(tmp.path()), ["blobs"]);
    let report = s.reset().unwrap();
    assert_eq!(
        report,
        ResetReport {
            buckets: 2,
            objects: 3,
            bytes: 5 + FILE_BODY as u64 + FILE_BODY as u64 + 4,
            uploads: 1,
            receipts: 1,
        }
    );
    assert_empty(&s);
    assert_eq!(
        s.resolve_save("beta", "saved", "rk-1").unwrap_err().code(),
        "not_found",
        "the receipt is gone"
    );
    let dirs = wait_swept(tmp.path());
    assert_eq!(dirs.len(), 1, "the old blob directory is swept: {dirs:?}");
    assert!(dirs[0].starts_with("blobs-"));
    assert_eq!(files_under(&tmp.path().join("tmp")), 0);

    // The same names work again, file bodies in the fresh directory.
    fill(&s);
    assert_eq!(read(&s, "alpha", "large"), vec![7u8; FILE_BODY]);
    assert!(s.verify().unwrap().is_empty());
    drop(s);
    let s = reopen(tmp.path());
    assert_eq!(read(&s, "alpha", "large"), vec![7u8; FILE_BODY]);
    assert_eq!(s.list_buckets().unwrap().len(), 2);
    s.reset().unwrap();
    drop(s);
    let s = reopen(tmp.path());
    assert_empty(&s);
    assert_eq!(wait_swept(tmp.path()).len(), 1);
}

/// With every body inline there is no body file to sweep: the reset is the
/// transaction alone and the blob directory stays.
#[test]
fn a_store_without_body_files_keeps_its_blob_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Store::open(tmp.path(), StoreOptions::default()).unwrap();
    s.create_bucket("small").unwrap();
    put(&s, "small", "a", b"inline");
    assert_eq!(s.reset().unwrap().objects, 1);
    assert_empty(&s);
    assert_eq!(blob_dirs(tmp.path()), ["blobs"]);
    // A file body later still switches.
    s.create_bucket("large").unwrap();
    put(&s, "large", "b", &vec![1u8; FILE_BODY]);
    s.reset().unwrap();
    assert_empty(&s);
    let dirs = wait_swept(tmp.path());
    assert!(dirs.len() == 1 && dirs[0].starts_with("blobs-"), "{dirs:?}");
    drop(s);
    let s = reopen(tmp.path());
    assert_empty(&s);
}

#[test]
fn reset_empties_a_memory_store() {
    let s = Store::memory(StoreOptions::default()).unwrap();
    fill(&s);
    assert_eq!(s.reset().unwrap().objects, 3);
    assert_empty(&s);
    fill(&s);
    assert_eq!(read(&s, "alpha", "large"), vec![7u8; FILE_BODY]);
    assert!(s.verify().unwrap().is_empty());
    // An empty store resets to itself.
    s.reset().unwrap();
    assert_eq!(s.reset().unwrap(), ResetReport::default());
    assert_empty(&s);
}

/// Writers racing resets (some in the same commit batch) leave a
/// consistent store: every object listed reads back whole, and no body
/// file is left that no row names.
#[test]
fn resets_racing_writers_leave_a_consistent_store() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Store::open(tmp.path(), StoreOptions::default()).unwrap();
    let writers: Vec<_> = (0..4)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..60 {
                    let bucket = format!("race-{t}");
                    let _ = s.create_bucket(&bucket);
                    let size = if i % 2 == 0 { 10 } else { FILE_BODY };
                    // A reset may remove the bucket between the two calls.
                    let _ = s.put_object(
                        &bucket,
                        &format!("k{i}"),
                        &mut Cursor::new(vec![t as u8; size]),
                        PutOptions::default(),
                    );
                }
            })
        })
        .collect();
    for _ in 0..15 {
        s.reset().unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    for w in writers {
        w.join().unwrap();
    }
    let problems = s.verify().unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    for b in s.list_buckets().unwrap() {
        let page = s.list_objects(&b.name, &ListQuery::default()).unwrap();
        for o in page.objects {
            let body = read(&s, &b.name, &o.key);
            assert_eq!(body.len() as u64, o.size);
        }
    }
    drop(s);
    let s = reopen(tmp.path());
    assert!(s.verify().unwrap().is_empty());
    assert_eq!(wait_swept(tmp.path()).len(), 1);
}

// ---- crash -----------------------------------------------------------------

const CHILD_ENV: &str = "STOW_RESET_CHILD_DIR";

/// Run as a child by `a_killed_reset_leaves_the_old_store_or_an_empty_one`:
/// fills the store, then resets it with `STOW_TEST_FAULT` armed. Does
/// nothing when not started that way.
#[test]
fn reset_crash_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let s = Store::open(PathBuf::from(dir), StoreOptions::default()).unwrap();
    fill(&s);
    // More shards, so a sweep has several to remove.
    for i in 0..8u8 {
        put(&s, "alpha", &format!("file-{i}"), &vec![i; FILE_BODY]);
    }
    s.reset().unwrap();
    // The sweep runs in the background; give its fault point time to fire.
    std::thread::sleep(Duration::from_secs(5));
}

#[test]
fn a_killed_reset_leaves_the_old_store_or_an_empty_one() {
    let exe = std::env::current_exe().unwrap();
    for (point, emptied) in [
        ("store-reset-emptied", false),
        ("store-reset-committed", true),
        ("store-reset-switched", true),
        ("store-reset-sweeping", true),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let status = Command::new(&exe)
            .args(["--exact", "reset_crash_child", "--nocapture"])
            .env(CHILD_ENV, tmp.path())
            .env("STOW_TEST_FAULT", point)
            .status()
            .unwrap();
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(status.signal(), Some(9), "{point}: the child was killed");
        let s = Store::open(tmp.path(), StoreOptions::default()).unwrap();
        let problems = s.verify().unwrap();
        assert!(problems.is_empty(), "{point}: {problems:?}");
        if emptied {
            assert_empty(&s);
        } else {
            assert_eq!(s.list_buckets().unwrap().len(), 2, "{point}");
            assert_eq!(read(&s, "alpha", "large"), vec![7u8; FILE_BODY]);
            assert_eq!(read(&s, "alpha", "file-5"), vec![5u8; FILE_BODY]);
            assert_eq!(s.usage().unwrap().objects, 11);
            assert_eq!(s.list_receipts(None, 10).unwrap().len(), 1);
        }
        let dirs = wait_swept(tmp.path());
        assert_eq!(dirs.len(), 1, "{point}: leftovers swept at open: {dirs:?}");
        assert_eq!(dirs[0] == "blobs", !emptied, "{point}: {dirs:?}");
        assert_eq!(files_under(&tmp.path().join("tmp")), 0, "{point}");
        // Usable afterwards either way.
        s.create_bucket("after").unwrap();
        put(&s, "after", "k", &vec![1u8; FILE_BODY]);
        assert!(s.verify().unwrap().is_empty(), "{point}");
        let s = Arc::new(s);
        assert_eq!(read(&s, "after", "k").len(), FILE_BODY);
    }
}
