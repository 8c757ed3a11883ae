//! Checkpoints of trees as agents leave them: symbolic links (relative,
//! absolute, to directories, dangling, `node_modules/.bin` and venv
//! style), sockets and FIFOs, empty directories with their modes.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use stow_checkpoint::archive::{self, ExportOptions, ImportOptions};
use stow_checkpoint::delta::{self, ApplyOptions, DeltaOptions};
use stow_checkpoint::{self as checkpoint, CaptureOptions, CaptureSpec, Kind};
use stow_workspace::restore::{restore, RestoreLimits};
use stow_workspace::{prepare, Registry};

/// What a tree holds, without following links: files (mode, bytes),
/// directories (mode), links (target), anything else (its kind).
fn listing(root: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, d: &Path, out: &mut BTreeMap<String, String>) {
        let mut entries: Vec<_> = fs::read_dir(d).unwrap().map(|e| e.unwrap()).collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if rel == ".stow" {
                continue;
            }
            let meta = fs::symlink_metadata(&p).unwrap();
            let mode = meta.permissions().mode() & 0o777;
            let ft = meta.file_type();
            let v = if ft.is_symlink() {
                format!("link -> {}", fs::read_link(&p).unwrap().display())
            } else if ft.is_dir() {
                walk(root, &p, out);
                format!("dir {mode:o}")
            } else if ft.is_file() {
                format!("file {mode:o} {:?}", fs::read(&p).unwrap())
            } else {
                "special".to_string()
            };
            out.insert(rel, v);
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// A workspace left as `npm install`, `python -m venv` and a dev server
/// leave one.
fn agent_tree(dir: &Path) -> (stow_workspace::WorkspaceResult, Registry, PathBuf) {
    fs::create_dir_all(dir.join("in")).unwrap();
    fs::write(dir.join("in/package.json"), "{}").unwrap();
    fs::write(
        dir.join("t.json"),
        r#"{"version":1,"root":"ws","registry_dir":"reg","inputs":[{"source":"in","destination":"."}]}"#,
    )
    .unwrap();
    let p = prepare(&dir.join("t.json")).unwrap();
    let r = p.root.clone();
    fs::create_dir_all(r.join("node_modules/tool/bin")).unwrap();
    fs::write(
        r.join("node_modules/tool/bin/cli.js"),
        "#!/usr/bin/env node\n",
    )
    .unwrap();
    fs::create_dir_all(r.join("node_modules/.bin")).unwrap();
    symlink("../tool/bin/cli.js", r.join("node_modules/.bin/tool")).unwrap();
    fs::create_dir_all(r.join(".venv/bin")).unwrap();
    symlink("/usr/bin/python3", r.join(".venv/bin/python")).unwrap();
    symlink("python", r.join(".venv/bin/python3")).unwrap();
    symlink("node_modules/tool", r.join("tool-dir")).unwrap();
    symlink("/etc", r.join("etc-link")).unwrap();
    symlink("../../outside", r.join("escape")).unwrap();
    symlink("does/not/exist", r.join("dangling")).unwrap();
    fs::create_dir(r.join("logs")).unwrap();
    fs::create_dir(r.join("build")).unwrap();
    fs::set_permissions(r.join("build"), fs::Permissions::from_mode(0o700)).unwrap();
    fs::create_dir_all(r.join("ro/inner")).unwrap();
    fs::write(r.join("ro/inner/f.txt"), "read only dir").unwrap();
    fs::set_permissions(r.join("ro"), fs::Permissions::from_mode(0o555)).unwrap();
    mkfifo(&r.join("pipe"));
    let _sock = std::os::unix::net::UnixListener::bind(r.join("dev.sock")).unwrap();
    let reg = Registry::resolve(Some(&dir.join("reg")), None).unwrap();
    (p, reg, r)
}

#[test]
fn links_specials_and_empty_directories_are_captured_and_restored() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (p, reg, root) = agent_tree(dir);
    let c = checkpoint::capture(&reg, &p.workspace_id, &CaptureOptions::default()).unwrap();
    assert_eq!(c.links, 7);
    let skipped: Vec<(&str, &str)> = c
        .skipped
        .iter()
        .map(|s| (s.path.as_str(), s.reason.as_str()))
        .collect();
    assert_eq!(
        skipped,
        vec![
            ("dev.sock", "a socket is not captured"),
            ("pipe", "a FIFO is not captured")
        ]
    );
    // The links were recorded, never followed: /etc's files are not here.
    let m = checkpoint::verify(&reg, &c.checkpoint_id).unwrap();
    assert!(m.files.iter().all(|f| !f.path.starts_with("etc-link")));
    assert!(m.dirs.iter().any(|d| d.path == "logs"));

    // Restore: every byte, mode and link target, nothing outside the root.
    let parent_before = listing(dir);
    let back = dir.join("back");
    restore(&reg, &c.checkpoint_id, &back, RestoreLimits::default()).unwrap();
    let mut want = listing(&root);
    want.remove("dev.sock");
    want.remove("pipe");
    assert_eq!(listing(&back), want);
    let mut parent_after = listing(dir);
    parent_after.retain(|k, _| !k.starts_with("back") && !k.starts_with("reg"));
    let mut parent_before = parent_before;
    parent_before.retain(|k, _| !k.starts_with("reg"));
    assert_eq!(
        parent_after, parent_before,
        "restore wrote outside its root"
    );
    assert!(!dir.join("outside").exists());

    // Diff: a retargeted, an added and a removed link.
    fs::remove_file(root.join("dangling")).unwrap();
    fs::remove_file(root.join("node_modules/.bin/tool")).unwrap();
    symlink("../tool/bin/other.js", root.join("node_modules/.bin/tool")).unwrap();
    symlink("logs", root.join("logs-link")).unwrap();
    let c2 = checkpoint::capture(&reg, &p.workspace_id, &CaptureOptions::default()).unwrap();
    let d = checkpoint::diff(&reg, &c.checkpoint_id, &c2.checkpoint_id).unwrap();
    let links: Vec<(&str, Kind)> = d
        .links
        .as_ref()
        .unwrap()
        .iter()
        .map(|l| (l.path.as_str(), l.kind))
        .collect();
    assert_eq!(
        links,
        vec![
            ("dangling", Kind::Deleted),
            ("logs-link", Kind::Added),
            ("node_modules/.bin/tool", Kind::Changed)
        ]
    );
    assert!(d.changes.is_empty());

    // A delta carries link changes; applied, it equals the target.
    let doc = dir.join("d.json");
    delta::delta(
        &reg,
        &c.checkpoint_id,
        &c2.checkpoint_id,
        &doc,
        DeltaOptions::default(),
    )
    .unwrap();
    let a = delta::apply(&reg, &doc, &c.checkpoint_id, &ApplyOptions::default()).unwrap();
    let am = checkpoint::load_manifest(&reg, &a.checkpoint_id).unwrap();
    let tm = checkpoint::load_manifest(&reg, &c2.checkpoint_id).unwrap();
    assert_eq!((am.links, am.dirs), (tm.links.clone(), tm.dirs.clone()));

    // Archives carry links as manifest entries (no tar symlink entries).
    let out = dir.join("a.tar.gz");
    archive::export(&reg, &c2.checkpoint_id, &out, &ExportOptions::default()).unwrap();
    let gz = flate2::read::MultiGzDecoder::new(fs::File::open(&out).unwrap());
    for e in tar::Archive::new(gz).entries().unwrap() {
        assert!(e.unwrap().header().entry_type().is_file());
    }
    let reg2 = Registry::resolve(Some(&dir.join("reg2")), None).unwrap();
    archive::import(&reg2, &out, &ImportOptions::default()).unwrap();
    let back2 = dir.join("back2");
    restore(&reg2, &c2.checkpoint_id, &back2, RestoreLimits::default()).unwrap();
    let mut want = listing(&root);
    want.remove("dev.sock");
    want.remove("pipe");
    assert_eq!(listing(&back2), want);
    fs::set_permissions(root.join("ro"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(back.join("ro"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(back2.join("ro"), fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn stowignore_keeps_paths_out_and_no_ignore_captures_them() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (p, reg, root) = agent_tree(dir);
    fs::write(
        root.join(".stowignore"),
        "# build output and logs\nbuild/\n*.log\n!keep.log\nnode_modules/\n",
    )
    .unwrap();
    fs::write(root.join("run.log"), "noise").unwrap();
    fs::write(root.join("keep.log"), "kept").unwrap();
    fs::write(root.join("build/out.o"), "obj").unwrap();
    let c = checkpoint::capture(&reg, &p.workspace_id, &CaptureOptions::default()).unwrap();
    let ignored = c.ignored.clone().unwrap();
    assert_eq!(
        ignored.paths,
        vec!["build/", "node_modules/", "run.log"],
        "{ignored:?}"
    );
    assert_eq!(ignored.count, 3);
    let m = checkpoint::load_manifest(&reg, &c.checkpoint_id).unwrap();
    let has = |p: &str| m.files.iter().any(|f| f.path == p);
    assert!(has("keep.log") && has(".stowignore") && !has("run.log"));
    assert!(!has("node_modules/tool/bin/cli.js") && !has("build/out.o"));
    // A log appended during the capture is not a change of the capture.
    let busy = || fs::write(root.join("run.log"), "more noise").unwrap();
    checkpoint::capture(
        &reg,
        &p.workspace_id,
        &CaptureOptions {
            after_copy: Some(&busy),
            ..Default::default()
        },
    )
    .unwrap();
    // --no-ignore captures everything.
    let all = checkpoint::capture(
        &reg,
        &p.workspace_id,
        &CaptureOptions {
            spec: CaptureSpec {
                no_ignore: true,
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .unwrap();
    assert!(all.ignored.is_none());
    let m = checkpoint::load_manifest(&reg, &all.checkpoint_id).unwrap();
    assert!(m.files.iter().any(|f| f.path == "build/out.o"));
    assert!(m.files.iter().any(|f| f.path == "run.log"));
    fs::set_permissions(root.join("ro"), fs::Permissions::from_mode(0o755)).unwrap();
    // An ignore file that is not a regular file is refused, never skipped.
    fs::remove_file(root.join(".stowignore")).unwrap();
    fs::create_dir(root.join(".stowignore")).unwrap();
    let err = checkpoint::capture(&reg, &p.workspace_id, &CaptureOptions::default()).unwrap_err();
    assert_eq!(err.code(), "invalid_request", "{err}");
}
