//! Checkpoints: dedup, stat cache, workspace_changed, retention caps,
//! in_progress, diff, restore, delete and garbage collection.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use stow_checkpoint::{self as checkpoint, CaptureOptions, CaptureSpec, Kind};
use stow_workspace::restore::{restore, RestoreLimits};
use stow_workspace::{admin, Registry};

mod common;
use common::{blob_count, blob_file, cap, leftover_stages, setup, Ws};

#[test]
fn capture_diff_restore_linear() {
    let w = setup("");
    let root = &w.ws.root;
    let c1 = cap(&w);
    assert!(c1.checkpoint_id.starts_with("cp_") && c1.checkpoint_id.len() == 27);
    assert_eq!((c1.files, c1.bytes), (2, 10));
    fs::write(root.join("notes.txt"), "twenty bytes of note").unwrap();
    // .git, .stow and sensitive paths are excluded and reported.
    fs::create_dir_all(root.join("sub/.git")).unwrap();
    fs::write(root.join("sub/.git/HEAD"), "x").unwrap();
    fs::write(root.join(".env"), "S=1").unwrap();
    let c2 = checkpoint::capture(
        &w.reg,
        &w.ws.workspace_id,
        &CaptureOptions {
            spec: CaptureSpec {
                parent: Some(c1.checkpoint_id.clone()),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!((c2.files, c2.bytes), (3, 30));
    assert_eq!(c2.stored_bytes, 20, "unchanged files are stored once");
    assert_eq!(
        c2.parent_checkpoint_id.as_deref(),
        Some(c1.checkpoint_id.as_str())
    );
    assert_eq!(c2.excluded_sensitive_paths, vec![".env".to_string()]);
    let d = checkpoint::diff(&w.reg, &c1.checkpoint_id, &c2.checkpoint_id).unwrap();
    assert_eq!(d.changes.len(), 1);
    assert_eq!(
        (d.changes[0].path.as_str(), d.changes[0].kind),
        ("notes.txt", Kind::Added)
    );

    // Mode change and deletion.
    fs::set_permissions(root.join("seed.txt"), fs::Permissions::from_mode(0o700)).unwrap();
    fs::remove_file(root.join("nested/second.txt")).unwrap();
    let c3 = cap(&w);
    let d = checkpoint::diff(&w.reg, &c2.checkpoint_id, &c3.checkpoint_id).unwrap();
    let kinds: Vec<(&str, Kind)> = d
        .changes
        .iter()
        .map(|c| (c.path.as_str(), c.kind))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("nested/second.txt", Kind::Deleted),
            ("seed.txt", Kind::Changed)
        ]
    );

    // Restore reproduces bytes and modes as a new owned workspace.
    let r = restore(
        &w.reg,
        &c3.checkpoint_id,
        &w.dir.join("restored"),
        RestoreLimits::default(),
    )
    .unwrap();
    assert_ne!(r.workspace_id, w.ws.workspace_id);
    let rr = w.dir.join("restored");
    assert_eq!(
        fs::read(rr.join("notes.txt")).unwrap(),
        b"twenty bytes of note"
    );
    assert_eq!(
        fs::metadata(rr.join("seed.txt"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );
    assert!(!rr.join(".env").exists() && !rr.join("nested/second.txt").exists());
    assert!(w.reg.get(&r.workspace_id).unwrap().owned);
    // An existing root is refused; a narrower limit is honoured.
    assert_eq!(
        restore(&w.reg, &c3.checkpoint_id, &rr, RestoreLimits::default())
            .unwrap_err()
            .code(),
        "invalid_root"
    );
    let err = restore(
        &w.reg,
        &c3.checkpoint_id,
        &w.dir.join("small"),
        RestoreLimits {
            max_bytes: 5,
            max_files: 0,
            ..RestoreLimits::default()
        },
    )
    .unwrap_err();
    assert_eq!(err.code(), "capacity_exceeded");
    assert!(!w.dir.join("small").exists());
}

#[test]
fn restore_is_sized_by_the_checkpoint() {
    let w = setup(r#","max_bytes":100000000"#);
    // More than the 64 MiB default workspace limit.
    let big = vec![7u8; (65 << 20) as usize];
    fs::write(w.ws.root.join("big.bin"), &big).unwrap();
    let c = cap(&w);
    let r = restore(
        &w.reg,
        &c.checkpoint_id,
        &w.dir.join("r"),
        RestoreLimits::default(),
    )
    .unwrap();
    assert!(r.capabilities.max_bytes >= c.bytes);
    assert_eq!(
        fs::metadata(w.dir.join("r/big.bin")).unwrap().len(),
        big.len() as u64
    );
}

#[test]
fn edits_during_capture_are_workspace_changed() {
    let w = setup("");
    let target = w.ws.root.join("seed.txt");
    let hook = || fs::write(&target, "edited during capture").unwrap();
    let err = checkpoint::capture(
        &w.reg,
        &w.ws.workspace_id,
        &CaptureOptions {
            after_copy: Some(&hook),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(err.code(), "workspace_changed");
    assert!(err.retryable());
    assert_eq!(checkpoint::summaries(&w.reg).unwrap().len(), 0);
    // The checkpoint was staged while the tree was re-scanned; the refusal
    // removed it again.
    assert_eq!(leftover_stages(&w.reg), 0);
    // Retrying after the writer paused succeeds.
    cap(&w);
}

/// Capture with `change` run after the files were copied.
fn capture_with_change(w: &Ws, change: &(dyn Fn() + Sync)) -> stow_checkpoint::WsError {
    checkpoint::capture(
        &w.reg,
        &w.ws.workspace_id,
        &CaptureOptions {
            after_copy: Some(change),
            ..Default::default()
        },
    )
    .unwrap_err()
}

type Change<'a> = Box<dyn Fn() + Sync + 'a>;

#[test]
fn renames_new_files_and_chmods_during_capture_are_workspace_changed() {
    let w = setup("");
    let root = w.ws.root.clone();
    let changes: Vec<(&str, Change)> = vec![
        (
            "rename",
            Box::new(|| fs::rename(root.join("seed.txt"), root.join("moved.txt")).unwrap()),
        ),
        (
            "new file deep down",
            Box::new(|| fs::write(root.join("nested/late.txt"), "x").unwrap()),
        ),
        (
            "chmod",
            Box::new(|| {
                fs::set_permissions(
                    root.join("nested/second.txt"),
                    fs::Permissions::from_mode(0o600),
                )
                .unwrap()
            }),
        ),
    ];
    for (what, change) in changes {
        let err = capture_with_change(&w, &*change);
        assert_eq!(err.code(), "workspace_changed", "{what}");
        assert_eq!(checkpoint::summaries(&w.reg).unwrap().len(), 0, "{what}");
    }
    assert_eq!(leftover_stages(&w.reg), 0);
    // A quiet tree captures what the changes left.
    let c = cap(&w);
    assert_eq!(c.files, 3);
}

#[test]
fn a_hard_linked_file_written_from_outside_during_capture_is_workspace_changed() {
    // The outside name lives in a directory the capture does not watch.
    let w = setup("");
    let outside = w.dir.join("outside.txt");
    fs::hard_link(w.ws.root.join("seed.txt"), &outside).unwrap();
    let write = || {
        use std::io::Write;
        let mut f = fs::OpenOptions::new().append(true).open(&outside).unwrap();
        f.write_all(b" and more").unwrap();
    };
    let err = capture_with_change(&w, &write);
    assert_eq!(err.code(), "workspace_changed");
    let c = cap(&w);
    let m = checkpoint::load_manifest(&w.reg, &c.checkpoint_id).unwrap();
    let seed = m.files.iter().find(|f| f.path == "seed.txt").unwrap();
    assert_eq!(seed.size, "seed and more".len() as u64);
}

#[test]
fn stat_cache_sees_same_size_edits() {
    let w = setup("");
    let c1 = cap(&w);
    // Same size, new content: mtime/ctime differ, so the cache must not hide it.
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs::write(w.ws.root.join("seed.txt"), "SEED").unwrap();
    let c2 = cap(&w);
    let d = checkpoint::diff(&w.reg, &c1.checkpoint_id, &c2.checkpoint_id).unwrap();
    assert_eq!(d.changes.len(), 1);
    checkpoint::verify(&w.reg, &c2.checkpoint_id).unwrap();
}

#[test]
fn retention_caps_refuse_without_evicting() {
    let w = setup(r#","max_checkpoints":2"#);
    cap(&w);
    cap(&w);
    let err =
        checkpoint::capture(&w.reg, &w.ws.workspace_id, &CaptureOptions::default()).unwrap_err();
    assert_eq!(err.code(), "capacity_exceeded");
    assert_eq!(checkpoint::summaries(&w.reg).unwrap().len(), 2);

    let w = setup(r#","max_checkpoint_bytes":15"#);
    cap(&w);
    let err =
        checkpoint::capture(&w.reg, &w.ws.workspace_id, &CaptureOptions::default()).unwrap_err();
    assert_eq!(err.code(), "capacity_exceeded");
    // Per-capture caps.
    let err = checkpoint::capture(
        &w.reg,
        &w.ws.workspace_id,
        &CaptureOptions {
            spec: CaptureSpec {
                max_files: 1,
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(err.code(), "capacity_exceeded");
}

#[test]
fn parent_must_belong_to_the_workspace() {
    let w = setup("");
    let err = checkpoint::capture(
        &w.reg,
        &w.ws.workspace_id,
        &CaptureOptions {
            spec: CaptureSpec {
                parent: Some("cp_000000000000000000000000".into()),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(err.code(), "invalid_parent");
}

#[test]
fn concurrent_capture_is_in_progress() {
    let w = setup("");
    let (entered_tx, entered_rx) = std::sync::mpsc::channel::<()>();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let entered_tx = std::sync::Mutex::new(entered_tx);
    let release_rx = std::sync::Mutex::new(release_rx);
    let hook = || {
        entered_tx.lock().unwrap().send(()).unwrap();
        release_rx.lock().unwrap().recv().unwrap();
    };
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            checkpoint::capture(
                &w.reg,
                &w.ws.workspace_id,
                &CaptureOptions {
                    after_copy: Some(&hook),
                    ..Default::default()
                },
            )
        });
        entered_rx.recv().unwrap();
        let err = checkpoint::capture(&w.reg, &w.ws.workspace_id, &CaptureOptions::default())
            .unwrap_err();
        assert_eq!(err.code(), "in_progress");
        assert!(err.retryable());
        release_tx.send(()).unwrap();
        h.join().unwrap().unwrap();
    });
}

#[test]
fn delete_and_gc() {
    let w = setup("");
    let c1 = cap(&w);
    fs::write(w.ws.root.join("extra.txt"), "only in c2").unwrap();
    let c2 = checkpoint::capture(
        &w.reg,
        &w.ws.workspace_id,
        &CaptureOptions {
            spec: CaptureSpec {
                parent: Some(c1.checkpoint_id.clone()),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(blob_count(&w.reg), 3);
    // Refused while a child names it.
    assert_eq!(
        checkpoint::delete(&w.reg, &c1.checkpoint_id)
            .unwrap_err()
            .code(),
        "refused"
    );
    let d = checkpoint::delete(&w.reg, &c2.checkpoint_id).unwrap();
    // The payload only c2 named (c2's root tree node goes too, uncounted).
    assert_eq!((d.freed_blobs, d.freed_bytes), (1, 10));
    assert_eq!(blob_count(&w.reg), 2);
    checkpoint::verify(&w.reg, &c1.checkpoint_id).unwrap();
    assert_eq!(
        checkpoint::delete(&w.reg, &c2.checkpoint_id)
            .unwrap_err()
            .code(),
        "not_found"
    );
    // Destroy removes the workspace's checkpoints and their blobs.
    admin::destroy(&w.reg, &w.ws.workspace_id).unwrap();
    assert_eq!(checkpoint::summaries(&w.reg).unwrap().len(), 0);
    assert_eq!(blob_count(&w.reg), 0);
}

#[test]
fn teams_do_not_see_each_others_checkpoints() {
    let w = setup("");
    let c = cap(&w);
    let other = Registry::resolve(Some(&w.dir.join("reg")), Some("other")).unwrap();
    assert_eq!(
        checkpoint::diff(&other, &c.checkpoint_id, &c.checkpoint_id)
            .unwrap_err()
            .code(),
        "not_found"
    );
}

#[test]
fn restore_reports_the_identity_of_the_restored_tree() {
    let w = setup("");
    let root = &w.ws.root;
    // Names whose string order differs from the per-directory walk order
    // ("a.txt" < "a/b" as strings, but the walk visits "a/" first).
    fs::create_dir_all(root.join("a/b")).unwrap();
    fs::write(root.join("a/b/c"), "deep").unwrap();
    fs::write(root.join("a.txt"), "dot").unwrap();
    fs::write(root.join("a-b"), "dash").unwrap();
    fs::write(root.join("A"), "upper").unwrap();
    fs::write(root.join("empty"), "").unwrap();
    fs::set_permissions(root.join("a.txt"), fs::Permissions::from_mode(0o751)).unwrap();
    let c = cap(&w);
    let dst = w.dir.join("ident");
    let r = restore(&w.reg, &c.checkpoint_id, &dst, RestoreLimits::default()).unwrap();
    assert_eq!(
        r.base_identity,
        stow_checkpoint::walk::base_identity(&dst).unwrap()
    );
    assert_eq!(
        r.base_identity,
        stow_checkpoint::walk::base_identity(root).unwrap()
    );
    assert_eq!(
        fs::metadata(dst.join("a.txt"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o751
    );
}

#[test]
fn restore_refuses_a_corrupt_payload_and_leaves_nothing() {
    let w = setup("");
    let c = cap(&w);
    let m = checkpoint::load_manifest(&w.reg, &c.checkpoint_id).unwrap();
    let f = m.files.iter().find(|f| f.path == "seed.txt").unwrap();
    let blob = blob_file(&w.reg, &f.sha256);
    fs::set_permissions(&blob, fs::Permissions::from_mode(0o600)).unwrap();
    // Same size, different bytes: only the digest can tell.
    fs::write(&blob, "SEED").unwrap();
    let dst = w.dir.join("bad");
    let err = restore(&w.reg, &c.checkpoint_id, &dst, RestoreLimits::default()).unwrap_err();
    assert_eq!(err.code(), "corrupt_checkpoint");
    assert!(!dst.exists());
}

#[test]
fn a_damaged_stat_cache_only_costs_rehashing() {
    let w = setup("");
    let c1 = cap(&w);
    let cache = w
        .reg
        .state_dir()
        .join("statcache")
        .join(format!("{}.cache", w.ws.workspace_id));
    let good = fs::read(&cache).unwrap();
    // Torn (as after a crash before writeback) or overwritten with junk.
    for bad in [good[..good.len() / 2].to_vec(), vec![0u8; good.len()]] {
        fs::write(&cache, &bad).unwrap();
        let c = cap(&w);
        let d = checkpoint::diff(&w.reg, &c1.checkpoint_id, &c.checkpoint_id).unwrap();
        assert!(d.changes.is_empty());
        checkpoint::verify(&w.reg, &c.checkpoint_id).unwrap();
    }
    // The last capture rewrote a valid cache.
    assert_eq!(fs::read(&cache).unwrap().len(), good.len());
}

#[test]
fn scans_see_files_in_nested_and_sibling_directories() {
    let w = setup("");
    let root = &w.ws.root;
    for d in 0..20 {
        for f in 0..5 {
            let p = root.join(format!("t{d:02}/u{}/f{f}", d % 3));
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(&p, format!("{d}-{f}")).unwrap();
        }
    }
    fs::create_dir_all(root.join("t03/.ssh")).unwrap();
    fs::write(root.join("t03/.ssh/id"), "k").unwrap();
    fs::write(root.join("t07/u1/.env"), "S=1").unwrap();
    let c = cap(&w);
    assert_eq!(c.files, 2 + 100);
    assert_eq!(c.excluded_sensitive_paths, vec!["t03/.ssh/", "t07/u1/.env"]);
    let m = checkpoint::load_manifest(&w.reg, &c.checkpoint_id).unwrap();
    let paths: Vec<&str> = m.files.iter().map(|f| f.path.as_str()).collect();
    let mut sorted = paths.clone();
    sorted.sort();
    assert_eq!(paths, sorted);
    // A symlink anywhere is captured as a link (see tests/realtree.rs).
    std::os::unix::fs::symlink("f0", root.join("t11/u2/link")).unwrap();
    let c = checkpoint::capture(&w.reg, &w.ws.workspace_id, &CaptureOptions::default()).unwrap();
    assert_eq!((c.files, c.links), (102, 1));
}

#[test]
fn capture_and_restore_report_progress_up_to_the_total() {
    use std::sync::Mutex;
    use stow_checkpoint::progress::Progress;
    struct Seen(Mutex<Vec<(String, u64, u64)>>);
    impl Progress for Seen {
        fn update(&self, phase: &str, done: u64, total: u64) {
            self.0
                .lock()
                .unwrap()
                .push((phase.to_string(), done, total));
        }
    }
    let w = setup("");
    let seen = Seen(Mutex::new(Vec::new()));
    let c = checkpoint::capture(
        &w.reg,
        &w.ws.workspace_id,
        &CaptureOptions {
            progress: Some(&seen),
            ..Default::default()
        },
    )
    .unwrap();
    let last = seen.0.lock().unwrap().iter().max_by_key(|s| s.1).cloned();
    assert_eq!(last, Some(("capture".to_string(), 10, 10)));
    seen.0.lock().unwrap().clear();
    restore(
        &w.reg,
        &c.checkpoint_id,
        &w.dir.join("again"),
        RestoreLimits {
            progress: Some(&seen),
            ..Default::default()
        },
    )
    .unwrap();
    let updates = seen.0.lock().unwrap().clone();
    assert_eq!(updates.len(), 2);
    assert!(updates.iter().all(|(p, _, t)| p == "restore" && *t == 10));
    assert_eq!(updates.iter().map(|u| u.1).max(), Some(10));
}

#[test]
fn flat_manifests_of_earlier_versions_still_diff_restore_export_and_keep_their_blobs() {
    let w = setup("");
    let root = w.ws.root.clone();
    fs::create_dir_all(root.join("deep/er")).unwrap();
    fs::write(root.join("deep/er/x.txt"), "xx").unwrap();
    let tree = cap(&w);
    // The same checkpoint in the flat layout every earlier version wrote
    // (and import, pull and apply still write): files listed in full.
    let flat_id = "cp_0123456789abcdef01234567";
    let cps = w.reg.dir().join(".stow/checkpoints");
    let mut m = checkpoint::load_manifest(&w.reg, &tree.checkpoint_id).unwrap();
    m.id = flat_id.into();
    let mut summary: serde_json::Value = serde_json::from_slice(
        &fs::read(cps.join(&tree.checkpoint_id).join("summary.json")).unwrap(),
    )
    .unwrap();
    summary["id"] = flat_id.into();
    fs::create_dir(cps.join(flat_id)).unwrap();
    fs::write(
        cps.join(flat_id).join("manifest.json"),
        serde_json::to_vec(&m).unwrap(),
    )
    .unwrap();
    fs::write(
        cps.join(flat_id).join("summary.json"),
        serde_json::to_vec(&summary).unwrap(),
    )
    .unwrap();
    assert!(serde_json::from_slice::<serde_json::Value>(
        &fs::read(cps.join(&tree.checkpoint_id).join("manifest.json")).unwrap()
    )
    .unwrap()
    .get("tree")
    .is_some());

    // Either layout reads the same, in both directions of a diff.
    let d = checkpoint::diff(&w.reg, flat_id, &tree.checkpoint_id).unwrap();
    assert!(d.changes.is_empty(), "{:?}", d.changes);
    fs::write(root.join("deep/er/x.txt"), "changed").unwrap();
    let next = cap(&w);
    let d = checkpoint::diff(&w.reg, flat_id, &next.checkpoint_id).unwrap();
    assert_eq!(d.changes.len(), 1);
    let r = restore(
        &w.reg,
        flat_id,
        &w.dir.join("from-flat"),
        RestoreLimits::default(),
    )
    .unwrap();
    assert_eq!(fs::read(r.root.join("deep/er/x.txt")).unwrap(), b"xx");
    let out = w.dir.join("flat.tar.gz");
    stow_checkpoint::archive::export(&w.reg, flat_id, &out, &Default::default()).unwrap();
    stow_checkpoint::archive::preview(&out, Default::default()).unwrap();
    // GC keeps what the flat manifest names once the tree checkpoints go.
    checkpoint::delete(&w.reg, &next.checkpoint_id).unwrap();
    checkpoint::delete(&w.reg, &tree.checkpoint_id).unwrap();
    checkpoint::gc(&w.reg).unwrap();
    checkpoint::verify(&w.reg, flat_id).unwrap();
}
