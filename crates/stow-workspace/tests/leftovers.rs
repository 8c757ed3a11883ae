//! What a refused, cancelled or killed operation leaves: nothing
//! half-made, and what it verified kept for the retry (captures past their
//! deadline, staging directories, refused captures' progress, files that
//! vanish mid-capture, killed exports).

use std::fs;
use std::path::Path;

use stow_checkpoint::{self as checkpoint, CaptureOptions};
use stow_workspace::restore::{restore, RestoreLimits};

mod common;
use common::{blob_count, cap, leftover_stages, setup, Ws};

/// A capture whose 30 ms deadline passes while it copies.
fn capture_past_its_deadline(w: &Ws) -> stow_checkpoint::WsError {
    let late = || std::thread::sleep(std::time::Duration::from_millis(60));
    checkpoint::capture(
        &w.reg,
        &w.ws.workspace_id,
        &CaptureOptions {
            deadline: Some(std::time::Instant::now() + std::time::Duration::from_millis(30)),
            after_copy: Some(&late),
            ..Default::default()
        },
    )
    .unwrap_err()
}

#[test]
fn a_capture_past_its_deadline_is_cancelled_and_publishes_nothing() {
    let w = setup("");
    fs::write(w.ws.root.join("fresh.txt"), "new bytes to stage").unwrap();
    let err = capture_past_its_deadline(&w);
    assert_eq!(err.code(), "cancelled");
    assert!(checkpoint::summaries(&w.reg).unwrap().is_empty());
    let state = w.reg.dir().join(".stow");
    assert!(!state.join("blobs").exists() || blob_count(&w.reg) == 0);
    let staged = fs::read_dir(state.join("tmp")).map_or(0, |d| d.count());
    assert_eq!(staged, 0, "staged payloads were discarded");
    assert_eq!(leftover_stages(&w.reg), 0);
    // Without a deadline the same capture commits.
    assert_eq!(cap(&w).files, 3);
}

#[test]
fn staging_directories_go_with_their_capture_and_gc_clears_a_crashed_one() {
    // Enough new files that each producing thread stages into a directory
    // of its own.
    let w = setup("");
    for i in 0..200 {
        let d = w.ws.root.join(format!("many/d{}", i % 9));
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join(format!("f{i}.txt")), format!("payload {i}")).unwrap();
    }
    let tmp = w.reg.dir().join(".stow/tmp");
    let err = capture_past_its_deadline(&w);
    assert_eq!(err.code(), "cancelled");
    assert_eq!(
        fs::read_dir(&tmp).unwrap().count(),
        0,
        "a cancelled capture left staging behind"
    );
    assert_eq!(cap(&w).files, 202);
    assert_eq!(
        fs::read_dir(&tmp).unwrap().count(),
        0,
        "a capture left staging behind"
    );
    // What a killed capture leaves: a staging directory with a staged file.
    fs::create_dir_all(tmp.join("0123abcd.1")).unwrap();
    fs::write(tmp.join("0123abcd.1/5f2e"), "half").unwrap();
    checkpoint::gc(&w.reg).unwrap();
    assert_eq!(
        fs::read_dir(&tmp).unwrap().count(),
        0,
        "gc left a crashed capture's staging"
    );
}

/// Records the total of the last capture progress report: the bytes the
/// capture had to read (files the stat cache could not vouch for).
struct CopyTotal(std::sync::Mutex<Option<u64>>);

impl stow_checkpoint::progress::Progress for CopyTotal {
    fn update(&self, phase: &str, _done: u64, total: u64) {
        if phase == "capture" {
            *self.0.lock().unwrap() = Some(total);
        }
    }
}

#[test]
fn a_refused_capture_keeps_its_progress() {
    let w = setup("");
    let root = w.ws.root.clone();
    // A fresh workspace of 40 files, 1,000 bytes each, besides the two seeds.
    fs::create_dir_all(root.join("many")).unwrap();
    for i in 0..40 {
        fs::write(
            root.join(format!("many/f{i:02}")),
            vec![b'a' + i as u8; 1000],
        )
        .unwrap();
    }
    let log = root.join("many/f39");
    let seen = CopyTotal(std::sync::Mutex::new(None));
    // Two kinds of refusal: a file that grows while the capture copies
    // (seen by the copy, or by the watch afterwards) and one that changes
    // after everything was copied.
    let grow = || {
        use std::io::Write;
        let mut f = fs::OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(b"+").unwrap();
    };
    let first_report = std::sync::Once::new();
    struct GrowOnce<'a>(&'a std::sync::Once, &'a (dyn Fn() + Sync), &'a CopyTotal);
    impl stow_checkpoint::progress::Progress for GrowOnce<'_> {
        fn update(&self, phase: &str, done: u64, total: u64) {
            self.0.call_once(self.1);
            self.2.update(phase, done, total);
        }
    }
    let during = GrowOnce(&first_report, &grow, &seen);
    let err = checkpoint::capture(
        &w.reg,
        &w.ws.workspace_id,
        &CaptureOptions {
            progress: Some(&during),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(err.code(), "workspace_changed");
    assert_eq!(seen.0.lock().unwrap().take(), Some(40 * 1000 + 10));
    assert_eq!(checkpoint::summaries(&w.reg).unwrap().len(), 0);
    assert_eq!(leftover_stages(&w.reg), 0);
    // Every file but the one that grew is a complete blob already.
    assert!(blob_count(&w.reg) >= 41, "{}", blob_count(&w.reg));

    // The retry reads only the file that changed; then a change after the
    // copy is refused, and the next retry again reads only that file.
    let err = capture_with_change_seen(&w, &grow, &seen);
    assert_eq!(err.code(), "workspace_changed");
    assert_eq!(seen.0.lock().unwrap().take(), Some(1001));
    let again = checkpoint::capture(
        &w.reg,
        &w.ws.workspace_id,
        &CaptureOptions {
            progress: Some(&seen),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(seen.0.lock().unwrap().take(), Some(1002));
    assert_eq!(again.files, 42);
    // What the kept progress produced is the tree as it is now.
    let r = restore(
        &w.reg,
        &again.checkpoint_id,
        &w.dir.join("back"),
        RestoreLimits::default(),
    )
    .unwrap();
    for i in 0..39 {
        let name = format!("many/f{i:02}");
        assert_eq!(
            fs::read(r.root.join(&name)).unwrap(),
            vec![b'a' + i as u8; 1000]
        );
    }
    assert_eq!(fs::read(r.root.join("many/f39")).unwrap().len(), 1002);
    // GC removes what no checkpoint names: here, the grown file's
    // intermediate versions.
    let before = blob_count(&w.reg);
    checkpoint::gc(&w.reg).unwrap();
    assert!(blob_count(&w.reg) < before);
    checkpoint::verify(&w.reg, &again.checkpoint_id).unwrap();
}

fn capture_with_change_seen(
    w: &Ws,
    change: &(dyn Fn() + Sync),
    seen: &CopyTotal,
) -> stow_checkpoint::WsError {
    checkpoint::capture(
        &w.reg,
        &w.ws.workspace_id,
        &CaptureOptions {
            after_copy: Some(change),
            progress: Some(seen),
            ..Default::default()
        },
    )
    .unwrap_err()
}

#[test]
fn a_file_deleted_before_it_is_copied_is_workspace_changed_not_an_io_failure() {
    let w = setup("");
    let root = w.ws.root.clone();
    fs::create_dir_all(root.join("many")).unwrap();
    for i in 0..200 {
        fs::write(root.join(format!("many/f{i:03}")), vec![b'x'; 2000]).unwrap();
    }
    let victim = root.join("many/f199");
    let once = std::sync::Once::new();
    struct DeleteOnce<'a>(&'a std::sync::Once, &'a Path);
    impl stow_checkpoint::progress::Progress for DeleteOnce<'_> {
        fn update(&self, _: &str, _: u64, _: u64) {
            self.0.call_once(|| fs::remove_file(self.1).unwrap());
        }
    }
    let del = DeleteOnce(&once, &victim);
    let err = checkpoint::capture(
        &w.reg,
        &w.ws.workspace_id,
        &CaptureOptions {
            progress: Some(&del),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(err.code(), "workspace_changed", "{err}");
    assert!(err.retryable());
    assert_eq!(cap(&w).files, 201);
}

#[test]
fn an_export_killed_midway_leaves_a_temp_file_the_next_export_removes() {
    let w = setup("");
    let c = cap(&w);
    let out_dir = w.dir.join("out");
    fs::create_dir(&out_dir).unwrap();
    // What a killed export leaves: its hidden temp archive, unlocked.
    let stale = out_dir.join(".cp.tar.gz.stow-export-abcdef012345");
    fs::write(&stale, b"half an archive").unwrap();
    let f = fs::File::options().write(true).open(&stale).unwrap();
    f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(60))
        .unwrap();
    drop(f);
    // One being written right now (fresh) is left alone.
    let fresh = out_dir.join(".cp.tar.gz.stow-export-0123456789ab");
    fs::write(&fresh, b"being written").unwrap();
    stow_checkpoint::archive::export(
        &w.reg,
        &c.checkpoint_id,
        &out_dir.join("cp.tar.gz"),
        &Default::default(),
    )
    .unwrap();
    assert!(!stale.exists());
    assert!(fresh.exists());
    let mut names: Vec<String> = fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, [".cp.tar.gz.stow-export-0123456789ab", "cp.tar.gz"]);
}

/// A killed bundle export leaves its stage directory and an unheld lock
/// file: the next export under the root removes them, and leaves alone a
/// stage whose export is still running (its lock held).
#[test]
fn a_killed_bundle_export_s_stage_goes_with_the_next_export() {
    use stow_checkpoint::fsutil::FileLock;
    use stow_workspace::bundle::export_bundle;
    let w = setup("");
    let cp = cap(&w).checkpoint_id;
    let root = w.dir.join("exports");
    fs::create_dir(&root).unwrap();
    // Killed mid-export: a stage with a partial archive, its lock unheld;
    // and one killed after its lock file but before its directory.
    fs::create_dir(root.join(".stow-bundle-00000000dead0001")).unwrap();
    fs::write(
        root.join(".stow-bundle-00000000dead0001/checkpoint.tar.gz"),
        b"partial",
    )
    .unwrap();
    fs::write(root.join(".stow-bundle-00000000dead0001.lock"), b"").unwrap();
    fs::write(root.join(".stow-bundle-00000000dead0002.lock"), b"").unwrap();
    // Running: its lock held.
    fs::create_dir(root.join(".stow-bundle-00000000a11ve001")).unwrap();
    let live = FileLock::try_lock(&root.join(".stow-bundle-00000000a11ve001.lock"))
        .unwrap()
        .unwrap();

    let exported = export_bundle(&w.reg, &w.ws.workspace_id, &cp, &root, "b1").unwrap();
    assert_eq!(exported.path, root.join("b1"));
    let mut left: Vec<String> = fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            ".stow-bundle-00000000a11ve001",
            ".stow-bundle-00000000a11ve001.lock",
            "b1"
        ]
    );
    let mut inside: Vec<String> = fs::read_dir(root.join("b1"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    inside.sort();
    assert_eq!(inside, ["checkpoint.tar.gz", "handoff.json"]);
    drop(live);
}
