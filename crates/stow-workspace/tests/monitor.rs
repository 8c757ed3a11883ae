//! The monitored capture (a long-lived server's watch kept between
//! captures) against the tree itself: random edit sequences, and after each
//! one a monitored checkpoint, an unmonitored one and a fresh walk of the
//! tree must all agree.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use stow_checkpoint::{
    self as checkpoint, CaptureOptions, CaptureSpec, CheckpointManifest, TreeMonitor,
};
use stow_workspace::{prepare, Registry, WorkspaceResult};

struct Ws {
    _tmp: tempfile::TempDir,
    reg: Registry,
    ws: WorkspaceResult,
}

fn setup() -> Ws {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    fs::create_dir_all(dir.join("in/a/b")).unwrap();
    fs::write(dir.join("in/a/b/seed.txt"), "seed").unwrap();
    fs::write(dir.join("in/top.txt"), "top").unwrap();
    let m = dir.join("task.json");
    fs::write(
        &m,
        r#"{"version":1,"root":"ws","registry_dir":"reg","inputs":[{"source":"in","destination":"."}]}"#,
    )
    .unwrap();
    let ws = prepare(&m).unwrap();
    let reg = Registry::resolve(Some(&dir.join("reg")), None).unwrap();
    Ws { _tmp: tmp, reg, ws }
}

/// A small deterministic generator (xorshift64*), so a failure replays
/// from its printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// What the tree holds, walked directly: files (size, mode, SHA-256) and
/// directories (mode), by slash path.
#[derive(Debug, PartialEq, Eq)]
struct Truth {
    files: BTreeMap<String, (u64, u32, String)>,
    dirs: BTreeMap<String, u32>,
}

fn walk(root: &Path) -> Truth {
    fn go(root: &Path, dir: &Path, t: &mut Truth) {
        for e in fs::read_dir(dir).unwrap().flatten() {
            let path = e.path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if rel == ".stow" {
                continue;
            }
            let meta = fs::symlink_metadata(&path).unwrap();
            let mode = meta.permissions().mode() & 0o777;
            if meta.is_dir() {
                t.dirs.insert(rel, mode);
                go(root, &path, t);
            } else {
                let bytes = fs::read(&path).unwrap();
                let sha = format!("{:x}", Sha256::digest(&bytes));
                t.files.insert(rel, (bytes.len() as u64, mode, sha));
            }
        }
    }
    let mut t = Truth {
        files: BTreeMap::new(),
        dirs: BTreeMap::new(),
    };
    go(root, root, &mut t);
    t
}

fn truth_of(m: &CheckpointManifest) -> Truth {
    Truth {
        files: m
            .files
            .iter()
            .map(|f| (f.path.clone(), (f.size, f.mode, f.sha256.clone())))
            .collect(),
        dirs: m.dirs.iter().map(|d| (d.path.clone(), d.mode)).collect(),
    }
}

/// Every file and directory under `root` (not the root, not `.stow`).
fn entries(root: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let t = walk(root);
    (
        t.files.keys().map(|p| root.join(p)).collect(),
        t.dirs.keys().map(|p| root.join(p)).collect(),
    )
}

/// One random edit of the tree; returns what it did.
fn edit(root: &Path, rng: &mut Rng, step: usize) -> String {
    let (files, dirs) = entries(root);
    let pick_dir = |rng: &mut Rng| {
        if dirs.is_empty() || rng.below(4) == 0 {
            root.to_path_buf()
        } else {
            dirs[rng.below(dirs.len())].clone()
        }
    };
    let name = format!("n{step}");
    match rng.below(10) {
        0 | 1 => {
            let d = pick_dir(rng);
            let p = d.join(format!("{name}.txt"));
            fs::write(&p, format!("new file {step}")).unwrap();
            format!("create {}", p.display())
        }
        2 if !files.is_empty() => {
            // Same size, mtime put back: only ctime and the bytes differ.
            let p = &files[rng.below(files.len())];
            let meta = fs::metadata(p).unwrap();
            let mut bytes = fs::read(p).unwrap();
            if let Some(b) = bytes.first_mut() {
                *b = b.wrapping_add(1);
            } else {
                bytes.push(b'x');
            }
            fs::write(p, &bytes).unwrap();
            let f = fs::File::options().write(true).open(p).unwrap();
            f.set_modified(meta.modified().unwrap()).unwrap();
            format!("modify in place {}", p.display())
        }
        3 if !files.is_empty() => {
            let p = &files[rng.below(files.len())];
            let to = pick_dir(rng).join(format!("{name}.moved"));
            fs::rename(p, &to).unwrap();
            format!("rename {} -> {}", p.display(), to.display())
        }
        4 if !files.is_empty() => {
            let p = &files[rng.below(files.len())];
            fs::remove_file(p).unwrap();
            format!("delete {}", p.display())
        }
        5 if !files.is_empty() => {
            let p = &files[rng.below(files.len())];
            let mode = if rng.below(2) == 0 { 0o755 } else { 0o600 };
            fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
            format!("chmod {mode:o} {}", p.display())
        }
        6 if !files.is_empty() => {
            let p = &files[rng.below(files.len())];
            fs::remove_file(p).unwrap();
            fs::create_dir(p).unwrap();
            fs::write(p.join("inside.txt"), format!("was a file {step}")).unwrap();
            format!("replace file by directory {}", p.display())
        }
        7 if !dirs.is_empty() => {
            let d = &dirs[rng.below(dirs.len())];
            let to = pick_dir(rng).join(&name);
            if to.starts_with(d) {
                fs::remove_dir_all(d).unwrap();
                return format!("remove directory {}", d.display());
            }
            fs::rename(d, &to).unwrap();
            format!("move directory {} -> {}", d.display(), to.display())
        }
        8 => {
            let d = pick_dir(rng).join(&name).join("deeper");
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("leaf.txt"), format!("leaf {step}")).unwrap();
            format!("create nested {}", d.display())
        }
        _ if !dirs.is_empty() => {
            let d = &dirs[rng.below(dirs.len())];
            fs::remove_dir_all(d).unwrap();
            fs::write(d, format!("was a directory {step}")).unwrap();
            format!("replace directory by file {}", d.display())
        }
        _ => {
            fs::write(root.join(format!("{name}.txt")), "fallback").unwrap();
            "create at the root".into()
        }
    }
}

fn capture(w: &Ws, monitor: Option<&TreeMonitor>) -> CheckpointManifest {
    capture_as(w, monitor, false)
}

fn capture_as(w: &Ws, monitor: Option<&TreeMonitor>, portable: bool) -> CheckpointManifest {
    let c = checkpoint::capture(
        &w.reg,
        &w.ws.workspace_id,
        &CaptureOptions {
            spec: CaptureSpec {
                portable,
                ..Default::default()
            },
            monitor,
            ..Default::default()
        },
    )
    .unwrap();
    checkpoint::load_manifest(&w.reg, &c.checkpoint_id).unwrap()
}

#[test]
fn monitored_checkpoints_equal_a_fresh_walk_after_random_edits() {
    // Portable captures (the MCP profile's) on one seed: their nodes hold
    // S3 properties too.
    for (seed, portable) in [
        (0x5eed_0001u64, false),
        (0x5eed_0002, false),
        (0x5eed_0003, false),
        (0x5eed_0004, true),
    ] {
        let w = setup();
        let root = w.ws.root.clone();
        let monitor = TreeMonitor::new();
        let mut rng = Rng(seed);
        let mut log = Vec::new();
        for step in 0..40 {
            for _ in 0..=rng.below(3) {
                log.push(edit(&root, &mut rng, step));
            }
            let truth = walk(&root);
            let watched = capture_as(&w, Some(&monitor), portable);
            assert!(monitor.is_watching(), "seed {seed:#x} step {step}");
            assert_eq!(
                truth_of(&watched),
                truth,
                "seed {seed:#x} step {step}: the monitored capture differs from the tree; edits: {log:#?}"
            );
            // Every few steps an unmonitored capture too: it rewrites the stat
            // cache behind the monitor's back.
            if step % 5 == 4 {
                let plain = capture_as(&w, None, portable);
                assert_eq!(truth_of(&plain), truth, "seed {seed:#x} step {step}");
            }
        }
    }
}

#[test]
fn a_change_during_a_monitored_capture_is_refused_and_seen_by_the_next() {
    let w = setup();
    let root = w.ws.root.clone();
    let monitor = TreeMonitor::new();
    capture(&w, Some(&monitor));
    let target = root.join("a/b/seed.txt");
    let change = || fs::write(&target, "changed during the capture").unwrap();
    fs::write(root.join("top.txt"), "edited before").unwrap();
    let err = checkpoint::capture(
        &w.reg,
        &w.ws.workspace_id,
        &CaptureOptions {
            monitor: Some(&monitor),
            after_copy: Some(&change),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(err.code(), "workspace_changed");
    // Both edits are in the next monitored checkpoint.
    let m = capture(&w, Some(&monitor));
    assert_eq!(truth_of(&m), walk(&root));
    let seed = m.files.iter().find(|f| f.path == "a/b/seed.txt").unwrap();
    assert_eq!(seed.size, "changed during the capture".len() as u64);
}

/// Through the watch service (what `workspace watch` hosts and a CLI
/// capture reaches over its socket): the same agreement with the tree, and
/// the service's monitor is the one keeping the watch.
#[test]
fn checkpoints_through_a_watch_service_equal_a_fresh_walk() {
    use stow_checkpoint::watch_service::{self, CaptureRequest, WatchReply, WatchService};
    let w = setup();
    let root = w.ws.root.clone();
    let service = WatchService::start(&w.reg, &w.ws.workspace_id).unwrap();
    assert!(service.socket_path().exists());
    let mut rng = Rng(0x5eed_0005);
    let mut log = Vec::new();
    let req = CaptureRequest {
        workspace_id: w.ws.workspace_id.clone(),
        ..Default::default()
    };
    for step in 0..30 {
        for _ in 0..=rng.below(3) {
            log.push(edit(&root, &mut rng, step));
        }
        let truth = walk(&root);
        let WatchReply::Captured { result } = watch_service::capture(&w.reg, &req, None) else {
            panic!("step {step}: not captured");
        };
        assert!(
            service.is_watching(),
            "step {step}: the service keeps no watch"
        );
        let id = &result.checkpoint_id;
        let m = checkpoint::load_manifest(&w.reg, id).unwrap();
        assert_eq!(truth_of(&m), truth, "step {step}; edits: {log:#?}");
    }
}

/// A regression found by the soak: a monitor reused the node of a
/// directory whose only checkpoint had been deleted (and its node
/// collected), publishing a checkpoint that named a missing node.
#[test]
fn a_deleted_checkpoints_nodes_are_never_reused() {
    let w = setup();
    let root = w.ws.root.clone();
    let monitor = TreeMonitor::new();
    capture(&w, Some(&monitor));
    fs::create_dir_all(root.join("fresh/inner")).unwrap();
    fs::write(
        root.join("fresh/inner/new.txt"),
        "only in the deleted checkpoint",
    )
    .unwrap();
    let only = checkpoint::capture(
        &w.reg,
        &w.ws.workspace_id,
        &CaptureOptions {
            monitor: Some(&monitor),
            ..Default::default()
        },
    )
    .unwrap();
    // Deleting it collects the nodes of fresh/ and fresh/inner.
    let deleted = checkpoint::delete(&w.reg, &only.checkpoint_id).unwrap();
    assert!(deleted.freed_blobs >= 1);
    // A change elsewhere: fresh/ is unchanged, so its node would be reused.
    fs::write(root.join("top.txt"), "edited").unwrap();
    let m = capture(&w, Some(&monitor));
    assert_eq!(truth_of(&m), walk(&root));
    let check = checkpoint::check(&w.reg, false).unwrap();
    assert!(check.damaged.is_empty(), "{:?}", check.damaged);
}
