//! SIGKILL crash tests of checkpoints: capture and delete, and the two
//! other ways a checkpoint is published, import and delta apply.
//!
//! `sigkill_during_capture_and_delete` re-executes this test binary as a
//! child running `crash_child` (a no-op unless `STOW_WS_CRASH_CHILD` is set).
//! The child edits files of a prepared workspace, captures checkpoints and
//! deletes old ones (garbage-collecting their blobs) in a loop. The parent
//! kills it with SIGKILL after a random delay, then checks that every listed
//! checkpoint verifies (every payload present with its size and SHA-256) and
//! restores into a new root with exactly the recorded bytes and modes, and
//! that a later capture and delete still work. State accumulates across
//! iterations.
//!
//! A SIGKILL keeps the page cache, so this checks atomicity of publication
//! and the GC rules, not power-loss durability.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use sha2::{Digest, Sha256};
use stow_checkpoint::archive::{self, ExportOptions, ImportOptions};
use stow_checkpoint::delta::{self, ApplyOptions, DeltaOptions};
use stow_checkpoint::{self as checkpoint, CaptureOptions};
use stow_workspace::restore::{restore, RestoreLimits};
use stow_workspace::{prepare, Registry};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Runs child test `name` of this binary (`marker` set, seed `seed`) and
/// kills it with SIGKILL after `after_ms`: no destructors, no cleanup.
fn run_and_kill(name: &str, marker: (&str, &PathBuf), seed: u64, after_ms: u64) {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(marker.0, marker.1)
        .env("STOW_WS_CRASH_SEED", seed.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(after_ms));
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn crash_child() {
    let Ok(dir) = std::env::var("STOW_WS_CRASH_CHILD") else {
        return;
    };
    let dir = PathBuf::from(dir);
    let ws = fs::read_to_string(dir.join("ws_id")).unwrap();
    let reg = Registry::resolve(Some(&dir.join("reg")), None).unwrap();
    let root = dir.join("ws");
    let seed: u64 = std::env::var("STOW_WS_CRASH_SEED")
        .unwrap()
        .parse()
        .unwrap();
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0.. {
        for _ in 0..5 {
            let n = next() % 40;
            let size = (next() % (256 << 10)) as usize;
            let byte = (next() % 251) as u8;
            fs::write(root.join(format!("f{n}.bin")), vec![byte; size]).unwrap();
            let mode = if next() % 2 == 0 { 0o644 } else { 0o755 };
            fs::set_permissions(
                root.join(format!("f{n}.bin")),
                fs::Permissions::from_mode(mode),
            )
            .unwrap();
        }
        match checkpoint::capture(&reg, &ws, &CaptureOptions::default()) {
            Ok(c) => println!("captured {} {round}", c.checkpoint_id),
            Err(e) => println!("capture failed {e}"),
        }
        let all = checkpoint::summaries(&reg).unwrap();
        if all.len() > 4 {
            let victim = &all[(next() % all.len() as u64) as usize];
            match checkpoint::delete(&reg, &victim.id) {
                Ok(_) => println!("deleted {}", victim.id),
                Err(e) => println!("delete failed {e}"),
            }
        }
    }
}

#[test]
fn sigkill_during_capture_and_delete() {
    if std::env::var("STOW_WS_CRASH_CHILD").is_ok() {
        return;
    }
    let iters: u64 = std::env::var("STOW_WS_CRASH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    fs::create_dir(dir.join("in")).unwrap();
    fs::write(dir.join("in/base.txt"), "base").unwrap();
    fs::write(
        dir.join("task.json"),
        r#"{"version":1,"root":"ws","registry_dir":"reg","inputs":[{"source":"in","destination":"."}]}"#,
    )
    .unwrap();
    let ws = prepare(&dir.join("task.json")).unwrap();
    fs::write(dir.join("ws_id"), &ws.workspace_id).unwrap();
    let reg = Registry::resolve(Some(&dir.join("reg")), None).unwrap();
    let mut restored = 0;
    let mut seen = 0;
    for i in 0..iters {
        run_and_kill(
            "crash_child",
            ("STOW_WS_CRASH_CHILD", &dir),
            i * 7919 + 17,
            150 + (i * 137) % 900,
        );

        for s in checkpoint::summaries(&reg).unwrap() {
            seen += 1;
            let m = checkpoint::verify(&reg, &s.id)
                .unwrap_or_else(|e| panic!("iteration {i}: checkpoint {} is broken: {e}", s.id));
            let target = dir.join(format!("restored-{restored}"));
            restored += 1;
            restore(&reg, &s.id, &target, RestoreLimits::default()).unwrap();
            for f in &m.files {
                let p = target.join(&f.path);
                let bytes = fs::read(&p).unwrap();
                assert_eq!(hex(&Sha256::digest(&bytes)), f.sha256, "{}", f.path);
                assert_eq!(
                    fs::metadata(&p).unwrap().permissions().mode() & 0o777,
                    f.mode
                );
            }
            fs::remove_dir_all(&target).unwrap();
        }
        // The store still works: capture, then delete it (running GC).
        let c = checkpoint::capture(&reg, &ws.workspace_id, &CaptureOptions::default()).unwrap();
        checkpoint::verify(&reg, &c.checkpoint_id).unwrap();
        checkpoint::delete(&reg, &c.checkpoint_id).unwrap();
        for s in checkpoint::summaries(&reg).unwrap() {
            checkpoint::verify(&reg, &s.id).unwrap();
        }
    }
    assert!(seen > 0, "the child never published a checkpoint");
    eprintln!("verified and restored {seen} checkpoints across {iters} kills");
}

/// Child of `sigkill_during_import_and_apply`: imports the fixture's
/// archive into a fresh registry per round and applies its delta to the
/// base, forever.
#[test]
fn transfer_crash_child() {
    let Ok(dir) = std::env::var("STOW_WS_TRANSFER_CHILD") else {
        return;
    };
    let dir = PathBuf::from(dir);
    let reg = Registry::resolve(Some(&dir.join("reg")), None).unwrap();
    let base = fs::read_to_string(dir.join("base_id")).unwrap();
    let start: u64 = std::env::var("STOW_WS_CRASH_SEED")
        .unwrap()
        .parse()
        .unwrap();
    for round in start.. {
        let into = Registry::resolve(Some(&dir.join(format!("imports/{round}"))), None).unwrap();
        let _ = archive::import(&into, &dir.join("a.tar.gz"), &ImportOptions::default());
        let _ = delta::apply(&reg, &dir.join("d.json"), &base, &ApplyOptions::default());
    }
}

#[test]
fn sigkill_during_import_and_apply() {
    if std::env::var("STOW_WS_TRANSFER_CHILD").is_ok() {
        return;
    }
    let iters: u64 = std::env::var("STOW_WS_CRASH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    fs::create_dir(dir.join("in")).unwrap();
    // Enough payloads that a kill lands inside staging, naming or publication.
    for i in 0..120 {
        fs::write(
            dir.join(format!("in/f{i}.bin")),
            vec![i as u8; 20_000 + i * 512],
        )
        .unwrap();
    }
    fs::write(
        dir.join("task.json"),
        r#"{"version":1,"root":"ws","registry_dir":"reg","inputs":[{"source":"in","destination":"."}]}"#,
    )
    .unwrap();
    let ws = prepare(&dir.join("task.json")).unwrap();
    let reg = Registry::resolve(Some(&dir.join("reg")), None).unwrap();
    let base = checkpoint::capture(&reg, &ws.workspace_id, &CaptureOptions::default()).unwrap();
    for i in 0..30 {
        fs::write(
            ws.root.join(format!("f{i}.bin")),
            vec![255 - i as u8; 9_000],
        )
        .unwrap();
    }
    let target = checkpoint::capture(&reg, &ws.workspace_id, &CaptureOptions::default()).unwrap();
    archive::export(
        &reg,
        &target.checkpoint_id,
        &dir.join("a.tar.gz"),
        &ExportOptions::default(),
    )
    .unwrap();
    delta::delta(
        &reg,
        &base.checkpoint_id,
        &target.checkpoint_id,
        &dir.join("d.json"),
        DeltaOptions::default(),
    )
    .unwrap();
    fs::write(dir.join("base_id"), &base.checkpoint_id).unwrap();
    let want = checkpoint::load_manifest(&reg, &target.checkpoint_id).unwrap();
    let (mut whole, mut empty, mut applied) = (0, 0, 0);
    for i in 0..iters {
        run_and_kill(
            "transfer_crash_child",
            ("STOW_WS_TRANSFER_CHILD", &dir),
            i * 1000,
            120 + (i * 173) % 700,
        );
        // Each import registry holds the whole checkpoint or none of it.
        for e in fs::read_dir(dir.join("imports"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let into = Registry::resolve(Some(&e.path()), None).unwrap();
            match checkpoint::summaries(&into).unwrap().as_slice() {
                [] => empty += 1,
                [s] => {
                    let m = checkpoint::verify(&into, &s.id).unwrap();
                    assert_eq!(m.files, want.files, "iteration {i}: partial import");
                    whole += 1;
                }
                more => panic!("iteration {i}: {} checkpoints from one import", more.len()),
            }
            // A retry completes it, whatever the kill left.
            let again = archive::import(&into, &dir.join("a.tar.gz"), &ImportOptions::default());
            assert!(
                again.is_ok() || again.as_ref().is_err_and(|e| e.code() == "already_exists"),
                "{again:?}"
            );
            fs::remove_dir_all(e.path()).unwrap();
        }
        // Every applied checkpoint is whole and equals the target's files.
        for s in checkpoint::summaries(&reg).unwrap() {
            let m = checkpoint::verify(&reg, &s.id)
                .unwrap_or_else(|e| panic!("iteration {i}: checkpoint {} is broken: {e}", s.id));
            if s.id != base.checkpoint_id && s.id != target.checkpoint_id {
                assert_eq!(m.files, want.files);
                applied += 1;
            }
        }
        for s in checkpoint::summaries(&reg).unwrap() {
            if s.id != base.checkpoint_id && s.id != target.checkpoint_id {
                checkpoint::delete(&reg, &s.id).unwrap();
            }
        }
    }
    assert!(
        whole + applied > 0,
        "the child never finished an import or apply"
    );
    eprintln!("{iters} kills: {whole} whole imports, {empty} empty, {applied} applies verified");
}
