//! Versioned writes and deletes across a SIGKILL inside their transaction
//! (`STOW_TEST_FAULT` at `store-version-installed`, `store-version-marked`,
//! `store-version-deleted`): every acknowledged version is there with its
//! bytes, the killed operation left nothing, and blob references, files
//! and usage agree.

use std::collections::BTreeMap;
use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use stow_store::*;

const CHILD_ENV: &str = "STOW_VERSION_CRASH_DIR";
/// Large enough to live in a blob file.
const FILE_BODY: usize = 100 * 1024;
const BUCKET: &str = "versioned";

fn body(i: usize) -> Vec<u8> {
    let size = if i.is_multiple_of(2) {
        FILE_BODY
    } else {
        10 + i
    };
    vec![i as u8; size]
}

/// One acknowledged operation, as the child logs it (after it returned).
#[derive(Debug)]
enum Acked {
    Put { key: String, vid: String, i: usize },
    Marker { key: String, vid: String },
    Removed { key: String, vid: String },
}

/// Appends a line to the log and makes it durable before going on.
fn log(file: &mut std::fs::File, line: &str) {
    writeln!(file, "{line}").unwrap();
    file.sync_data().unwrap();
}

/// Run as a child by `killed_versioned_writes_lose_nothing_acknowledged`:
/// puts, deletes and version deletes in a versioned bucket, logging each
/// once it returns. Does nothing when not started that way.
#[test]
fn versioned_crash_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let s = Store::open(dir.join("data"), StoreOptions::default()).unwrap();
    let mut ack = std::fs::File::create(dir.join("acked")).unwrap();
    s.create_bucket(BUCKET).unwrap();
    s.set_bucket_versioning(BUCKET, Versioning::Enabled)
        .unwrap();
    let mut live: Vec<(String, String)> = Vec::new();
    for i in 0..60usize {
        let key = format!("k{}", i % 3);
        match i % 5 {
            3 => {
                let d = s.delete_object_version(BUCKET, &key, None).unwrap();
                let vid = d.version_id.unwrap();
                log(&mut ack, &format!("marker {key} {vid}"));
            }
            4 if !live.is_empty() => {
                let (key, vid) = live.remove(i % live.len());
                s.delete_object_version(BUCKET, &key, Some(&vid)).unwrap();
                log(&mut ack, &format!("removed {key} {vid}"));
            }
            _ => {
                let meta = s
                    .put_object(
                        BUCKET,
                        &key,
                        &mut Cursor::new(body(i)),
                        PutOptions::default(),
                    )
                    .unwrap();
                let vid = meta.version_id.unwrap();
                log(&mut ack, &format!("put {key} {vid} {i}"));
                live.push((key, vid));
            }
        }
    }
    log(&mut ack, "done");
}

fn read_log(dir: &Path) -> (Vec<Acked>, bool) {
    let text = std::fs::read_to_string(dir.join("acked")).unwrap_or_default();
    let mut out = Vec::new();
    let mut done = false;
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match f[..] {
            ["put", key, vid, i] => out.push(Acked::Put {
                key: key.into(),
                vid: vid.into(),
                i: i.parse().unwrap(),
            }),
            ["marker", key, vid] => out.push(Acked::Marker {
                key: key.into(),
                vid: vid.into(),
            }),
            ["removed", key, vid] => out.push(Acked::Removed {
                key: key.into(),
                vid: vid.into(),
            }),
            ["done"] => done = true,
            _ => panic!("torn log line {line:?}"),
        }
    }
    (out, done)
}

#[test]
fn killed_versioned_writes_lose_nothing_acknowledged() {
    let exe = std::env::current_exe().unwrap();
    for point in [
        "store-version-installed#5",
        "store-version-installed#20",
        "store-version-marked#3",
        "store-version-deleted#2",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let status = Command::new(&exe)
            .args(["--exact", "versioned_crash_child", "--nocapture"])
            .env(CHILD_ENV, tmp.path())
            .env("STOW_TEST_FAULT", point)
            .status()
            .unwrap();
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(status.signal(), Some(9), "{point}: the child was killed");
        let (acked, done) = read_log(tmp.path());
        assert!(!done && !acked.is_empty(), "{point}: killed mid-run");
        let s = Store::open(tmp.path().join("data"), StoreOptions::default()).unwrap();
        let problems = s.verify().unwrap();
        assert!(problems.is_empty(), "{point}: {problems:?}");
        // Replay the acknowledged operations into the expected versions.
        let mut expected: BTreeMap<(String, String), Option<usize>> = BTreeMap::new();
        for a in &acked {
            match a {
                Acked::Put { key, vid, i } => {
                    expected.insert((key.clone(), vid.clone()), Some(*i));
                }
                Acked::Marker { key, vid } => {
                    expected.insert((key.clone(), vid.clone()), None);
                }
                Acked::Removed { key, vid } => {
                    expected.remove(&(key.clone(), vid.clone()));
                }
            }
        }
        let listed = s
            .list_object_versions(
                BUCKET,
                &VersionQuery {
                    max_keys: 1000,
                    ..Default::default()
                },
            )
            .unwrap()
            .versions;
        // Exactly the acknowledged versions: the killed one left nothing.
        let got: BTreeMap<(String, String), bool> = listed
            .iter()
            .map(|v| ((v.key.clone(), v.version_id.clone()), v.delete_marker))
            .collect();
        let want: BTreeMap<(String, String), bool> = expected
            .iter()
            .map(|(k, i)| (k.clone(), i.is_none()))
            .collect();
        assert_eq!(got, want, "{point}");
        let mut usage = Usage::default();
        for ((key, vid), i) in &expected {
            let Some(i) = i else { continue };
            let read = s
                .get_object_version(BUCKET, key, Some(vid), None, None)
                .unwrap();
            assert_eq!(
                read.body.into_vec().unwrap(),
                body(*i),
                "{point}: {key} {vid}"
            );
            usage.bytes += body(*i).len() as u64;
            usage.objects += 1;
        }
        assert_eq!(s.usage().unwrap(), usage, "{point}");
        assert!(s.verify_contents().unwrap().is_empty(), "{point}");
        // Usable afterwards.
        s.put_object(
            BUCKET,
            "after",
            &mut Cursor::new(body(0)),
            PutOptions::default(),
        )
        .unwrap();
        assert!(s.verify().unwrap().is_empty(), "{point}");
    }
}
