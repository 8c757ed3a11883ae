//! Lifecycle on disk: rules kept across a reopen and added to an older
//! store by the open-time migration; expiry killed (SIGKILL, fault point
//! `store-lifecycle-batch`) inside its third transaction leaves the first
//! two committed and nothing half-done, and the next run finishes it.

use std::io::Cursor;
use std::path::PathBuf;
use std::process::Command;

use stow_store::*;

const CHILD_ENV: &str = "STOW_LIFECYCLE_CRASH_DIR";
const BUCKET: &str = "aging";
const KEYS: usize = 3;
const VERSIONS: usize = 100;

fn rules() -> LifecycleConfig {
    LifecycleConfig {
        rules: vec![LifecycleRule {
            id: Some("nc".into()),
            status: RuleStatus::Enabled,
            prefix: Some(String::new()),
            filter: None,
            expiration: None,
            noncurrent_expiration: Some(NoncurrentExpiration {
                noncurrent_days: Some(1),
                newer_noncurrent_versions: None,
            }),
            abort_upload_days: None,
            transitions: Vec::new(),
            noncurrent_transitions: Vec::new(),
        }],
        transition_minimum_size: None,
    }
}

fn later() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    now + 60 * 1_000_000_000
}

fn versions(s: &Store) -> usize {
    s.list_object_versions(
        BUCKET,
        &VersionQuery {
            max_keys: 10_000,
            ..Default::default()
        },
    )
    .unwrap()
    .versions
    .len()
}

/// Run as a child by `expiry_killed_mid_run_is_finished_by_the_next`:
/// builds the bucket, then expires (killed by the fault point). Does
/// nothing when not started that way.
#[test]
fn lifecycle_crash_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let s = Store::open(dir.join("data"), StoreOptions::default()).unwrap();
    s.create_bucket(BUCKET).unwrap();
    s.set_bucket_versioning(BUCKET, Versioning::Enabled)
        .unwrap();
    for k in 0..KEYS {
        for v in 0..VERSIONS {
            let body = vec![v as u8; 100 + v];
            s.put_object(
                BUCKET,
                &format!("k{k}"),
                &mut Cursor::new(body),
                PutOptions::default(),
            )
            .unwrap();
        }
    }
    s.set_bucket_lifecycle(BUCKET, Some(rules())).unwrap();
    std::fs::write(dir.join("built"), b"").unwrap();
    s.expire_due(later(), DayLength::Seconds(1)).unwrap();
    std::fs::write(dir.join("done"), b"").unwrap();
}

#[test]
fn expiry_killed_mid_run_is_finished_by_the_next() {
    let exe = std::env::current_exe().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let status = Command::new(&exe)
        .args(["--exact", "lifecycle_crash_child", "--nocapture"])
        .env(CHILD_ENV, tmp.path())
        .env("STOW_TEST_FAULT", "store-lifecycle-batch#3")
        .status()
        .unwrap();
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(status.signal(), Some(9), "the child was killed");
    assert!(tmp.path().join("built").exists() && !tmp.path().join("done").exists());
    let s = Store::open(tmp.path().join("data"), StoreOptions::default()).unwrap();
    assert!(s.verify().unwrap().is_empty());
    // Two transactions of 64 deletions committed; the third left nothing.
    assert_eq!(versions(&s), KEYS * VERSIONS - 2 * 64);
    assert_eq!(s.bucket_lifecycle(BUCKET).unwrap(), Some(rules()));
    let r = s.expire_due(later(), DayLength::Seconds(1)).unwrap();
    assert_eq!(
        r.noncurrent_deleted as usize,
        KEYS * (VERSIONS - 1) - 2 * 64
    );
    assert_eq!(versions(&s), KEYS);
    for k in 0..KEYS {
        let read = s.get_object(BUCKET, &format!("k{k}"), None).unwrap();
        assert_eq!(read.body.into_vec().unwrap(), vec![99u8; 199]);
    }
    assert!(s.verify().unwrap().is_empty());
    assert!(s.verify_contents().unwrap().is_empty());
}

#[test]
fn a_store_from_before_lifecycle_is_migrated_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    {
        let s = Store::open(&data, StoreOptions::default()).unwrap();
        s.create_bucket("old").unwrap();
    }
    // Make it schema 4: no lifecycle column.
    {
        let conn = rusqlite::Connection::open(data.join("meta.db")).unwrap();
        conn.execute_batch("ALTER TABLE buckets DROP COLUMN lifecycle; PRAGMA user_version = 4;")
            .unwrap();
    }
    let s = Store::open(&data, StoreOptions::default()).unwrap();
    assert_eq!(s.bucket_lifecycle("old").unwrap(), None);
    s.set_bucket_lifecycle("old", Some(rules())).unwrap();
    drop(s);
    let s = Store::open(&data, StoreOptions::default()).unwrap();
    assert_eq!(s.bucket_lifecycle("old").unwrap(), Some(rules()));
}
