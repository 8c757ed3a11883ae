//! Attached workspaces: `status` against the head, the history a capture
//! continues, git-ignored paths left out, and `detach`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use proptest::prelude::*;
use stow_checkpoint::status::{status, status_monitored, StatusChange, StatusKind};
use stow_checkpoint::{self as checkpoint, history, CaptureOptions, CaptureSpec, TreeMonitor};
use stow_workspace::attach::{attach, detach, AttachOptions};
use stow_workspace::Registry;

struct Attached {
    _tmp: tempfile::TempDir,
    root: std::path::PathBuf,
    reg: Registry,
    id: String,
}

fn attached() -> Attached {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("proj");
    fs::create_dir_all(root.join("src/deep")).unwrap();
    fs::create_dir_all(root.join("target/debug")).unwrap();
    fs::write(root.join("src/a.txt"), "a").unwrap();
    fs::write(root.join("src/deep/b.txt"), "b").unwrap();
    fs::write(root.join("target/debug/out"), "built").unwrap();
    fs::write(root.join(".gitignore"), "target/\n*.log\n").unwrap();
    fs::write(root.join("run.log"), "log").unwrap();
    let reg = Registry::resolve(Some(&tmp.path().join("reg")), None).unwrap();
    let opts = AttachOptions {
        root: root.clone(),
        ..Default::default()
    };
    let ws = attach(&reg, &opts).unwrap();
    Attached {
        root: ws.root.clone(),
        _tmp: tmp,
        reg,
        id: ws.workspace_id,
    }
}

fn capture(a: &Attached, message: &str) -> String {
    capture_with(a, message, None)
}

fn capture_with(a: &Attached, message: &str, monitor: Option<&TreeMonitor>) -> String {
    let opts = CaptureOptions {
        spec: CaptureSpec {
            message: Some(message.into()),
            ..Default::default()
        },
        monitor,
        ..Default::default()
    };
    checkpoint::capture(&a.reg, &a.id, &opts)
        .unwrap()
        .checkpoint_id
}

#[test]
fn captures_continue_from_the_head_and_leave_out_what_git_ignores() {
    let a = attached();
    assert_eq!(
        fs::read_to_string(a.root.join(".stow/.gitignore")).unwrap(),
        "*\n"
    );
    let first = capture(&a, "first");
    let m = checkpoint::load_manifest(&a.reg, &first).unwrap();
    let paths: Vec<&str> = m.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, [".gitignore", "src/a.txt", "src/deep/b.txt"]);
    assert_eq!(m.message.as_deref(), Some("first"));
    assert_eq!(m.parent_id, None);
    fs::write(a.root.join("src/a.txt"), "a2").unwrap();
    let second = capture(&a, "second");
    let m2 = checkpoint::load_manifest(&a.reg, &second).unwrap();
    assert_eq!(m2.parent_id.as_deref(), Some(first.as_str()));
    let log = history::log(&a.reg, &a.id, 10, None).unwrap();
    let ids: Vec<&str> = log
        .checkpoints
        .iter()
        .map(|e| e.checkpoint_id.as_str())
        .collect();
    assert_eq!(ids, [second.as_str(), first.as_str()]);
    assert_eq!(log.head.as_deref(), Some(second.as_str()));
    assert!(log.checkpoints[0].head && !log.checkpoints[1].head);
    // One page at a time.
    let page = history::log(&a.reg, &a.id, 1, None).unwrap();
    assert_eq!(page.checkpoints[0].checkpoint_id, second);
    let next = history::log(&a.reg, &a.id, 1, page.next_cursor.as_deref()).unwrap();
    assert_eq!(next.checkpoints[0].checkpoint_id, first);
    assert!(next.next_cursor.is_none());
}

#[test]
fn a_capture_equal_to_the_head_keeps_the_monitors_nodes_and_stat_cache() {
    // A monitored capture that finds the tree as the head has it commits
    // nothing (a rewind's clean-tree undo). What the monitor kept must
    // survive it: found by measuring, the next capture re-read the stat
    // cache file and rebuilt every node.
    let a = attached();
    let monitor = TreeMonitor::new();
    let head = capture_with(&a, "first", Some(&monitor));
    let kept = monitor
        .kept_reuse()
        .expect("a monitored capture keeps its state");
    assert!(kept.nodes >= 3 && kept.stat_cache, "{kept:?}");
    fs::write(a.root.join("src/a.txt"), "edited").unwrap();
    fs::write(a.root.join("src/a.txt"), "a").unwrap();
    let opts = CaptureOptions {
        same_as: Some(head.clone()),
        monitor: Some(&monitor),
        ..Default::default()
    };
    let same = checkpoint::capture(&a.reg, &a.id, &opts)
        .unwrap()
        .checkpoint_id;
    assert_eq!(same, head, "nothing changed: the head is the capture");
    assert_eq!(monitor.kept_reuse(), Some(kept));
    // And the next capture, after a real change, is right.
    fs::write(a.root.join("src/deep/b.txt"), "b2").unwrap();
    let next = capture_with(&a, "next", Some(&monitor));
    assert_ne!(next, head);
    let st = status(&a.reg, &a.id, None).unwrap();
    assert!(st.changes.is_empty(), "{:?}", st.changes);
}

#[test]
fn detach_forgets_the_workspace_and_nothing_else() {
    let a = attached();
    capture(&a, "one");
    let r = detach(&a.reg, &a.id, false).unwrap();
    assert_eq!(r.deleted_checkpoints, 1);
    assert!(!a.root.join(".stow").exists());
    assert_eq!(fs::read_to_string(a.root.join("src/a.txt")).unwrap(), "a");
    assert_eq!(
        fs::read_to_string(a.root.join("target/debug/out")).unwrap(),
        "built"
    );
    assert_eq!(a.reg.get(&a.id).unwrap_err().code(), "not_found");
    assert!(checkpoint::summaries(&a.reg).unwrap().is_empty());
}

/// One edit of the random sequences below.
#[derive(Debug, Clone)]
enum Edit {
    Write(u8, u8),
    Remove(u8),
    Chmod(u8),
    Link(u8),
    /// `rm -r src/deep`.
    RemoveDeep,
    /// A new directory with a file in it.
    NewDir(u8),
    /// A sensitive file (plain captures leave it out).
    Sensitive(u8),
    Capture,
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (0u8..6, any::<u8>()).prop_map(|(f, b)| Edit::Write(f, b)),
        (0u8..6).prop_map(Edit::Remove),
        (0u8..6).prop_map(Edit::Chmod),
        (0u8..6).prop_map(Edit::Link),
        Just(Edit::RemoveDeep),
        (0u8..3).prop_map(Edit::NewDir),
        any::<u8>().prop_map(Edit::Sensitive),
        Just(Edit::Capture),
    ]
}

fn name(root: &Path, f: u8) -> std::path::PathBuf {
    root.join(if f.is_multiple_of(2) {
        "src"
    } else {
        "src/deep"
    })
    .join(format!("f{f}"))
}

fn apply(root: &Path, e: &Edit) {
    match e {
        Edit::Write(f, b) => {
            let p = name(root, *f);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            let _ = fs::remove_file(&p);
            fs::write(&p, vec![*b; 1 + *b as usize]).unwrap();
        }
        Edit::Remove(f) => {
            let _ = fs::remove_file(name(root, *f));
        }
        Edit::Chmod(f) => {
            let p = name(root, *f);
            if let Ok(m) = fs::symlink_metadata(&p) {
                if m.is_file() {
                    let mode = m.permissions().mode() ^ 0o100;
                    fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
                }
            }
        }
        Edit::Link(f) => {
            let p = name(root, *f);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            let _ = fs::remove_file(&p);
            std::os::unix::fs::symlink("../elsewhere", &p).unwrap();
        }
        Edit::RemoveDeep => {
            let _ = fs::remove_dir_all(root.join("src/deep"));
        }
        Edit::NewDir(d) => {
            let dir = root.join(format!("src/new{d}/inner"));
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("x.txt"), format!("new {d}")).unwrap();
        }
        Edit::Sensitive(b) => {
            fs::write(root.join("src/.env"), vec![*b; 3]).unwrap();
        }
        Edit::Capture => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// `status` always reports what `diff` reports between the head and a
    /// capture taken at that moment, and a status through a monitor (kept
    /// by the captures and by the statuses themselves) the same.
    #[test]
    fn status_equals_diff_of_the_head_against_a_fresh_capture(
        edits in proptest::collection::vec(edit(), 1..12),
        monitored_captures in any::<bool>(),
    ) {
        let a = attached();
        let monitor = TreeMonitor::new();
        let via = monitored_captures.then_some(&monitor);
        capture_with(&a, "start", via);
        for (step, e) in edits.iter().enumerate() {
            apply(&a.root, e);
            if matches!(e, Edit::Capture) {
                capture_with(&a, &format!("step {step}"), via);
                continue;
            }
            let head = history::head(&a.reg, &a.id).unwrap().unwrap();
            let st = status(&a.reg, &a.id, None).unwrap();
            prop_assert_eq!(&st.checkpoint_id, &head);
            let watched = status_monitored(&a.reg, &a.id, None, Some(&monitor)).unwrap();
            prop_assert_eq!(&watched.changes, &st.changes, "step {}: {:?} (monitored)", step, e);
            prop_assert_eq!(&watched.links, &st.links);
            let now = capture_with(&a, &format!("probe {step}"), via);
            let d = checkpoint::diff(&a.reg, &head, &now).unwrap();
            let as_diff: Vec<checkpoint::Change> =
                st.changes.iter().map(StatusChange::to_diff).collect();
            prop_assert_eq!(&as_diff, &d.changes, "step {}: {:?}", step, e);
            // The finer kinds agree with the two sides.
            for c in &st.changes {
                let same_bytes = |f: &checkpoint::FileEntry, t: &checkpoint::FileEntry| {
                    (&f.sha256, f.size) == (&t.sha256, t.size)
                };
                let fits = match (c.kind, &c.from, &c.to) {
                    (StatusKind::Added, None, Some(_)) | (StatusKind::Deleted, Some(_), None) => true,
                    (StatusKind::Modified, Some(f), Some(t)) => !same_bytes(f, t),
                    (StatusKind::ModeChanged, Some(f), Some(t)) => same_bytes(f, t) && f.mode != t.mode,
                    (StatusKind::TypeChanged, from, to) => {
                        from.is_some() != to.is_some()
                            && st.links.iter().any(|l| l.path == c.path)
                    }
                    _ => false,
                };
                prop_assert!(fits, "step {}: {:?}", step, c);
            }
            prop_assert_eq!(&st.links, &d.links.unwrap_or_default());
            prop_assert_eq!(st.clean, st.changes.is_empty() && st.links.is_empty());
            // The probe moved the head: status against it is clean.
            prop_assert!(status(&a.reg, &a.id, None).unwrap().clean);
            prop_assert!(status_monitored(&a.reg, &a.id, None, Some(&monitor)).unwrap().clean);
        }
    }
}

#[test]
fn detach_waits_for_a_running_watch() {
    let a = attached();
    let service = stow_checkpoint::watch_service::WatchService::start(&a.reg, &a.id).unwrap();
    let e = detach(&a.reg, &a.id, false).unwrap_err();
    assert_eq!(e.code(), "in_use");
    assert!(a.root.join(".stow/workspace.json").exists());
    drop(service);
    detach(&a.reg, &a.id, false).unwrap();
    assert!(!a.root.join(".stow").exists());
}
