//! Prepare: every manifest rejection (each asserting that
//! nothing was created), git inputs, limits and registry bounds.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use stow_workspace::{admin, handoff, open, prepare, Registry};

/// Every path under `dir` with its bytes (files) or a marker (dirs/links).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    fn walk(d: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        let Ok(rd) = fs::read_dir(d) else { return };
        for e in rd.flatten() {
            let p = e.path();
            let m = fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                out.insert(p.clone(), b"<dir>".to_vec());
                walk(&p, out);
            } else if m.is_file() {
                out.insert(p.clone(), fs::read(&p).unwrap());
            } else {
                out.insert(
                    p.clone(),
                    format!("<other {:o}>", m.permissions().mode()).into_bytes(),
                );
            }
        }
    }
    walk(dir, &mut out);
    out
}

struct Fixture {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        fs::create_dir_all(dir.join("in/nested")).unwrap();
        fs::write(dir.join("in/seed.txt"), "seed").unwrap();
        fs::write(dir.join("in/nested/second.txt"), "second").unwrap();
        fs::write(dir.join("notes.md"), "notes").unwrap();
        Fixture { _tmp: tmp, dir }
    }

    fn manifest(&self, json: &str) -> PathBuf {
        let p = self.dir.join("task.json");
        fs::write(&p, json).unwrap();
        p
    }

    /// Prepares `json`, expects refusal with `code`, and checks that nothing
    /// under the fixture changed.
    fn refused(&self, json: &str, code: &str) -> String {
        let m = self.manifest(json);
        let before = snapshot(&self.dir);
        let err = prepare(&m).expect_err(json);
        assert_eq!(err.code(), code, "{json}: {err}");
        assert_eq!(
            before,
            snapshot(&self.dir),
            "prepare left something behind: {json}"
        );
        err.to_string()
    }
}

fn base(extra: &str) -> String {
    format!(
        r#"{{"version":1,"root":"ws","registry_dir":"reg","inputs":[{{"source":"in","destination":"."}}]{extra}}}"#
    )
}

#[test]
fn prepares_and_reports() {
    let f = Fixture::new();
    let m = f.manifest(&base(r#","team":"platform","working_directory":"work","max_checkpoints":3,"max_checkpoint_bytes":100,"max_workspaces":2"#));
    let r = prepare(&m).unwrap();
    assert!(r.workspace_id.starts_with("ws_") && r.workspace_id.len() == 19);
    assert_eq!(r.root, f.dir.join("ws"));
    assert_eq!(r.working_directory, f.dir.join("ws/work"));
    assert!(r.working_directory.is_dir());
    assert_eq!(
        r.registry_dir.as_deref(),
        Some(f.dir.join("reg/teams/platform").as_path())
    );
    assert_eq!(r.team.as_deref(), Some("platform"));
    assert_eq!((r.seeded_bytes, r.seeded_objects), (10, 2));
    assert_eq!(
        fs::read(f.dir.join("ws/nested/second.txt")).unwrap(),
        b"second"
    );
    assert!(r.base_identity.starts_with("sha256:") && r.base_identity.len() == 71);
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(
        v["capabilities"]["checkpoint_limits"],
        serde_json::json!({"max_bytes":100,"max_count":3})
    );
    assert_eq!(
        v["capabilities"]["registry_bound"],
        serde_json::json!({"limit":2,"count":1,"remaining":1})
    );
    // With no bound, `remaining` is null (the spec's one exception to
    // omitting absent members).
    let unbounded = serde_json::to_value(stow_workspace::RegistryBound::new(0, 4)).unwrap();
    assert_eq!(
        unbounded,
        serde_json::json!({"limit":0,"count":4,"remaining":null})
    );
    assert_eq!(v["capabilities"]["upstream"], false);
    assert!(v["authority"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a == "workspace.capture"));
    // Teams are invisible to each other and to the root.
    let root_reg = Registry::resolve(Some(&f.dir.join("reg")), None).unwrap();
    assert_eq!(admin::list(&root_reg).unwrap().count, 0);
    let other = Registry::resolve(Some(&f.dir.join("reg")), Some("other")).unwrap();
    assert_eq!(admin::list(&other).unwrap().count, 0);
    let team = Registry::resolve(Some(&f.dir.join("reg")), Some("platform")).unwrap();
    assert_eq!(admin::list(&team).unwrap().count, 1);
}

#[test]
fn rejects_malformed_manifests() {
    let f = Fixture::new();
    f.refused(&base(r#","surprise":1"#), "invalid_manifest");
    f.refused(&format!("{} {{}}", base("")), "invalid_manifest");
    f.refused(
        &base("").replace(r#""version":1"#, r#""version":2"#),
        "invalid_manifest",
    );
    f.refused(
        r#"{"root":"ws","inputs":[{"source":"in"}]}"#,
        "invalid_manifest",
    );
    f.refused(
        r#"{"version":1,"inputs":[{"source":"in"}]}"#,
        "invalid_manifest",
    );
    f.refused(
        r#"{"version":1,"root":"ws","registry_dir":"reg"}"#,
        "invalid_manifest",
    );
    f.refused(&base(r#","max_bytes":-1"#), "invalid_manifest");
    f.refused(&base(r#","ttl_seconds":-5"#), "invalid_manifest");
    f.refused(&base(r#","root":"again""#), "invalid_manifest"); // duplicate field
    f.refused(
        r#"{"version":1,"root":"ws","inputs":[{"source":"in","destination":".","extra":true}]}"#,
        "invalid_manifest",
    );
    f.refused(&base(r#","team":"../escape""#), "invalid_request");
    f.refused(&base(r#","bucket":"Bad_Bucket""#), "invalid_manifest");
}

#[test]
fn rejects_bad_roots() {
    let f = Fixture::new();
    fs::create_dir(f.dir.join("exists")).unwrap();
    f.refused(
        &base("").replace(r#""root":"ws""#, r#""root":"exists""#),
        "invalid_root",
    );
    f.refused(
        &base("").replace(r#""root":"ws""#, r#""root":"missing/ws""#),
        "invalid_root",
    );
    f.refused(
        &base("").replace(r#""root":"ws""#, r#""root":".""#),
        "invalid_root",
    );
    std::os::unix::fs::symlink("nowhere", f.dir.join("dangling")).unwrap();
    f.refused(
        &base("").replace(r#""root":"ws""#, r#""root":"dangling""#),
        "invalid_root",
    );
}

fn with_input(src: &str, dest: &str) -> String {
    format!(
        r#"{{"version":1,"root":"ws","registry_dir":"reg","inputs":[{{"source":"{src}","destination":"{dest}"}}]}}"#
    )
}

#[test]
fn rejects_bad_destinations() {
    let f = Fixture::new();
    for dest in [
        "/abs/x",
        "../x",
        "a/../../x",
        "a\\\\b",
        ".stow",
        ".STOW/x",
        "CON",
        "x/nul.txt",
        "com3.log",
        "a:b",
        "a?b",
        "a*b",
        "a|b",
        "a<b",
        "a\\\"b",
        "trailing.",
        "trailing ",
        "ctl\\u0001",
    ] {
        f.refused(&with_input("notes.md", dest), "invalid_path");
    }
    // Working directory follows the same rules.
    f.refused(&base(r#","working_directory":"../out""#), "invalid_path");
    // Duplicate file destinations, and a file that is also a parent.
    f.refused(
        r#"{"version":1,"root":"ws","registry_dir":"reg","inputs":[{"source":"notes.md","destination":"a.md"},{"source":"in/seed.txt","destination":"a.md"}]}"#,
        "invalid_path",
    );
    f.refused(
        r#"{"version":1,"root":"ws","registry_dir":"reg","inputs":[{"source":"notes.md","destination":"seed.txt"},{"source":"in","destination":"."}]}"#,
        "invalid_path",
    );
    f.refused(
        r#"{"version":1,"root":"ws","registry_dir":"reg","inputs":[{"source":"notes.md","destination":"a"},{"source":"in/seed.txt","destination":"a/b"}]}"#,
        "invalid_path",
    );
    // A non-portable name inside a directory input.
    fs::create_dir(f.dir.join("odd")).unwrap();
    fs::write(f.dir.join("odd/aux.txt"), "x").unwrap();
    f.refused(&with_input("odd", "odd"), "invalid_path");
    // A .stow directory copied to the root.
    fs::create_dir_all(f.dir.join("hasstow/.stow")).unwrap();
    fs::write(f.dir.join("hasstow/.stow/x"), "x").unwrap();
    f.refused(&with_input("hasstow", "."), "invalid_path");
}

#[test]
fn rejects_symlinks_and_special_files() {
    let f = Fixture::new();
    std::os::unix::fs::symlink("notes.md", f.dir.join("link.md")).unwrap();
    f.refused(&with_input("link.md", "x.md"), "invalid_input");
    fs::create_dir(f.dir.join("d")).unwrap();
    std::os::unix::fs::symlink("../notes.md", f.dir.join("d/inner")).unwrap();
    f.refused(&with_input("d", "d"), "invalid_input");
    let fifo = f.dir.join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo on a valid NUL-terminated path.
    assert_eq!(unsafe { libc_mkfifo(c.as_ptr(), 0o600) }, 0);
    f.refused(&with_input("fifo", "fifo"), "invalid_input");
    f.refused(&with_input("missing.txt", "x"), "io_failure");
}

extern "C" {
    #[link_name = "mkfifo"]
    fn libc_mkfifo(path: *const std::os::raw::c_char, mode: u32) -> i32;
}

#[test]
fn sensitive_inputs_need_opt_in() {
    let f = Fixture::new();
    fs::write(f.dir.join(".env"), "SECRET=1").unwrap();
    f.refused(&with_input(".env", "config.txt"), "sensitive_path");
    f.refused(&with_input("notes.md", "x/.npmrc"), "sensitive_path");
    fs::create_dir_all(f.dir.join("home/.ssh")).unwrap();
    fs::write(f.dir.join("home/.ssh/config"), "Host x").unwrap();
    f.refused(&with_input("home", "home"), "sensitive_path");
    fs::write(f.dir.join("tls.pem"), "pem").unwrap();
    f.refused(&with_input("tls.pem", "tls.pem"), "sensitive_path");
    let m = f.manifest(
        r#"{"version":1,"root":"ws","registry_dir":"reg","include_sensitive_inputs":true,"inputs":[{"source":".env","destination":".env"}]}"#,
    );
    prepare(&m).unwrap();
    assert_eq!(fs::read(f.dir.join("ws/.env")).unwrap(), b"SECRET=1");
}

#[test]
fn limits_are_checked_before_creation() {
    let f = Fixture::new();
    f.refused(&base(r#","max_bytes":5"#), "capacity_exceeded");
    f.refused(&base(r#","max_objects":1"#), "capacity_exceeded");
    // max_workspaces: at capacity nothing is created.
    let m = f.manifest(&base(r#","max_workspaces":1"#));
    prepare(&m).unwrap();
    let second = base(r#","max_workspaces":1"#).replace(r#""root":"ws""#, r#""root":"ws2""#);
    let msg = f.refused(&second, "capacity_exceeded");
    assert!(msg.contains("prune") && msg.contains("collect"), "{msg}");
    // The standing policy bound applies too (the smaller wins).
    let reg = Registry::resolve(Some(&f.dir.join("reg")), None).unwrap();
    admin::policy_set(
        &reg,
        admin::PolicyUpdate {
            max_workspaces: Some(1),
            ..Default::default()
        },
    )
    .unwrap();
    let third = base(r#","max_workspaces":5"#).replace(r#""root":"ws""#, r#""root":"ws3""#);
    f.refused(&third, "capacity_exceeded");
    // A policy below current usage is refused.
    fs::create_dir(f.dir.join("other")).unwrap();
    let err = admin::policy_set(
        &Registry::resolve(Some(&f.dir.join("reg")), None).unwrap(),
        admin::PolicyUpdate {
            max_workspaces: Some(0),
            max_checkpoints: None,
            max_checkpoint_bytes: None,
        },
    );
    assert!(err.is_ok());
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `base_identity` as the README defines it, computed here without
/// the library: regular files in lexical order per directory, root-level
/// `.stow` and `.git` anywhere skipped; path, NUL, bytes, NUL.
fn reference_identity(root: &Path) -> String {
    use sha2::{Digest, Sha256};
    fn walk(dir: &Path, rel: &str, depth: usize, h: &mut Sha256) {
        let mut names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        for name in names {
            let n = name.to_str().unwrap();
            if n.eq_ignore_ascii_case(".git") || (depth == 0 && n.eq_ignore_ascii_case(".stow")) {
                continue;
            }
            let path = dir.join(&name);
            let child = if rel.is_empty() {
                n.to_string()
            } else {
                format!("{rel}/{n}")
            };
            let meta = fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                walk(&path, &child, depth + 1, h);
            } else if meta.is_file() {
                h.update(child.as_bytes());
                h.update([0u8]);
                h.update(fs::read(&path).unwrap());
                h.update([0u8]);
            }
        }
    }
    let mut h = Sha256::new();
    walk(root, "", 0, &mut h);
    format!("sha256:{:x}", h.finalize())
}

#[test]
fn the_identity_and_totals_counted_while_copying_are_the_trees() {
    // A Git checkout, inputs landing inside it and beside it, many files
    // over many directories, and names whose walk order differs from a
    // plain sort of whole paths ("a/x" before "a.txt", "a-b" after "a").
    let f = Fixture::new();
    let src = f.dir.join("proj");
    fs::create_dir_all(src.join("lib")).unwrap();
    git(&src, &["init", "-q"]);
    fs::write(src.join("lib/b.rs"), "fn b() {}").unwrap();
    fs::write(src.join("z.txt"), "zed").unwrap();
    git(&src, &["add", "-A"]);
    git(&src, &["commit", "-qm", "first"]);
    let many = f.dir.join("many");
    for i in 0..300 {
        let d = many.join(format!("d{}/s{}", i % 13, i % 5));
        fs::create_dir_all(&d).unwrap();
        fs::write(
            d.join(format!("f{i}.dat")),
            format!("payload {i}").repeat(i % 50 + 1),
        )
        .unwrap();
    }
    for name in ["a/x", "a.txt", "a-b/y", "A/upper"] {
        let p = many.join(name);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, name).unwrap();
    }
    let m = f.manifest(
        r#"{"version":1,"root":"ws","registry_dir":"reg",
            "repositories":[{"source":"proj","destination":"repo","ref":"HEAD"}],
            "inputs":[{"source":"notes.md","destination":"repo/TASK.md"},
                      {"source":"many","destination":"tree"},
                      {"source":"in","destination":"."}]}"#,
    );
    let r = prepare(&m).unwrap();
    assert_eq!(r.base_identity, reference_identity(&r.root));
    assert_eq!(
        r.base_identity,
        stow_checkpoint::walk::base_identity(&r.root).unwrap()
    );
    // The totals are counted as the tree is made (the checkout, .git
    // included, then each copy): they equal a walk of the result.
    assert_eq!(
        (r.seeded_bytes, r.seeded_objects),
        stow_checkpoint::walk::seeded_totals(&r.root, 0).unwrap()
    );
}

#[test]
fn git_inputs_are_detached_shallow_and_leave_the_source_untouched() {
    let f = Fixture::new();
    let src = f.dir.join("proj");
    fs::create_dir(&src).unwrap();
    git(&src, &["init", "-q"]);
    fs::write(src.join("a.txt"), "one").unwrap();
    git(&src, &["add", "-A"]);
    git(&src, &["commit", "-qm", "first"]);
    fs::write(src.join("a.txt"), "two").unwrap();
    fs::create_dir(src.join("lib")).unwrap();
    fs::write(src.join("lib/b.rs"), "fn b() {}").unwrap();
    git(&src, &["add", "-A"]);
    git(&src, &["commit", "-qm", "second"]);
    let head = git(&src, &["rev-parse", "HEAD"]);
    // Uncommitted and untracked changes must not travel.
    fs::write(src.join("a.txt"), "dirty").unwrap();
    fs::write(src.join("untracked.txt"), "u").unwrap();
    let before = snapshot(&src);
    let m = f.manifest(
        r#"{"version":1,"root":"ws","registry_dir":"reg","working_directory":"repo",
            "repositories":[{"source":"proj","destination":"repo","ref":"refs/heads/main"}],
            "inputs":[{"source":"notes.md","destination":"repo/TASK.md"}]}"#,
    );
    let r = prepare(&m).unwrap();
    assert_eq!(before, snapshot(&src), "the source repository changed");
    assert_eq!(r.repositories.len(), 1);
    assert_eq!(r.repositories[0].commit, head);
    assert_eq!(r.repositories[0].destination, "repo");
    assert_eq!(r.repositories[0].reference, "refs/heads/main");
    let repo = f.dir.join("ws/repo");
    assert_eq!(fs::read(repo.join("a.txt")).unwrap(), b"two");
    assert_eq!(fs::read(repo.join("lib/b.rs")).unwrap(), b"fn b() {}");
    assert_eq!(fs::read(repo.join("TASK.md")).unwrap(), b"notes");
    assert!(!repo.join("untracked.txt").exists());
    assert!(!repo.join(".git/FETCH_HEAD").exists());
    assert!(repo.join(".git/shallow").exists());
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head);
    assert_eq!(git(&repo, &["remote"]), "");
    assert_eq!(git(&repo, &["rev-parse", "--abbrev-ref", "HEAD"]), "HEAD");
    assert_eq!(git(&repo, &["rev-list", "--count", "HEAD"]), "1");
    // Seeded totals include the shallow Git metadata.
    assert!(r.seeded_objects > 3);

    // Seeded bytes include the shallow .git: a bound the tree fits but the
    // checkout does not is refused after staging, and everything this call
    // created is removed again.
    let tree_bytes = 3 + 9 + 5; // a.txt, lib/b.rs, TASK.md
    f.refused(
        &format!(
            r#"{{"version":1,"root":"ws2","registry_dir":"reg2","max_bytes":{},
                "repositories":[{{"source":"proj","destination":"repo","ref":"HEAD"}}],
                "inputs":[{{"source":"notes.md","destination":"repo/TASK.md"}}]}}"#,
            tree_bytes + 10
        ),
        "capacity_exceeded",
    );
    assert_eq!(before, snapshot(&src), "the source repository changed");

    // A missing ref, a bad ref, and a symlink in the tree are refused
    // before anything is created.
    f.refused(
        r#"{"version":1,"root":"ws2","registry_dir":"reg","repositories":[{"source":"proj","destination":"repo"}]}"#,
        "git_failed",
    );
    f.refused(
        r#"{"version":1,"root":"ws2","registry_dir":"reg","repositories":[{"source":"proj","destination":"repo","ref":"no-such-ref"}]}"#,
        "git_failed",
    );
    std::os::unix::fs::symlink("a.txt", src.join("link")).unwrap();
    fs::write(src.join(".env"), "S=1").unwrap();
    git(&src, &["add", "link"]);
    git(&src, &["commit", "-qm", "link"]);
    f.refused(
        r#"{"version":1,"root":"ws2","registry_dir":"reg","repositories":[{"source":"proj","destination":"repo","ref":"HEAD"}]}"#,
        "invalid_input",
    );
    git(&src, &["rm", "-q", "--cached", "link"]);
    git(&src, &["add", "-f", ".env"]);
    git(&src, &["commit", "-qm", "env"]);
    f.refused(
        r#"{"version":1,"root":"ws2","registry_dir":"reg","repositories":[{"source":"proj","destination":"repo","ref":"HEAD"}]}"#,
        "sensitive_path",
    );
}

#[test]
fn destroy_resume_handoff_collect_prune() {
    let f = Fixture::new();
    let m = f.manifest(&base(r#","ttl_seconds":1"#));
    let r = prepare(&m).unwrap();
    let reg = Registry::resolve(Some(&f.dir.join("reg")), None).unwrap();
    // Resume refuses while a live owner holds the workspace.
    let held = stow_workspace::claim_session(&r.root, &r.workspace_id).unwrap();
    assert_eq!(
        open::resume(&reg, &r.workspace_id, None, true)
            .unwrap_err()
            .code(),
        "in_use"
    );
    assert_eq!(
        admin::destroy(&reg, &r.workspace_id).unwrap_err().code(),
        "in_use"
    );
    let c = admin::collect(&reg).unwrap();
    assert_eq!(c.results[0].reason, "in-use");
    // Handoff works while it is live.
    let doc = f.dir.join("handoff.json");
    handoff::handoff(&reg, &r.workspace_id, None, None, Some(&doc)).unwrap();
    assert_eq!(
        fs::metadata(&doc).unwrap().permissions().mode() & 0o777,
        0o600
    );
    drop(held);
    let before = reg.get(&r.workspace_id).unwrap();
    let resumed = handoff::resume_handoff(&doc).unwrap();
    assert_eq!(resumed.workspace_id, r.workspace_id);
    assert_eq!(reg.get(&r.workspace_id).unwrap().created, before.created);
    // TTL collection.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let c = admin::collect(&reg).unwrap();
    assert_eq!(
        (c.results[0].removed, c.results[0].reason.as_str()),
        (true, "expired")
    );
    assert!(!r.root.exists());
    // Prune forgets records whose directory is gone.
    let m = f.manifest(&base(""));
    let r2 = prepare(&m).unwrap();
    let p = admin::prune(&reg, false).unwrap();
    assert_eq!((p.count, p.removed), (1, 0));
    fs::remove_dir_all(&r2.root).unwrap();
    let p = admin::prune(&reg, false).unwrap();
    assert_eq!((p.removed, p.results[0].reason.as_str()), (1, "pruned"));
    // Destroy never removes a home or cwd ancestor.
    let r3 = prepare(&m).unwrap();
    fs::create_dir(r3.root.join("sub")).unwrap();
    let home = std::env::var_os("HOME");
    std::env::set_var("HOME", r3.root.join("sub"));
    let err = admin::destroy(&reg, &r3.workspace_id).unwrap_err();
    match home {
        Some(h) => std::env::set_var("HOME", h),
        None => std::env::remove_var("HOME"),
    }
    assert_eq!(err.code(), "refused");
    assert!(r3.root.exists());
}

#[test]
fn adopted_workspaces_are_never_deleted() {
    let f = Fixture::new();
    let m = f.manifest(&base(r#","ttl_seconds":1"#));
    let r = prepare(&m).unwrap();
    let reg = Registry::resolve(Some(&f.dir.join("reg")), None).unwrap();
    // Mark the record adopted (as `adopt` will), with an expired TTL.
    let mut rec = reg.get(&r.workspace_id).unwrap();
    rec.owned = false;
    rec.last_used = "2000-01-01T00:00:00Z".into();
    reg.put(&rec).unwrap();
    assert_eq!(
        admin::destroy(&reg, &r.workspace_id).unwrap_err().code(),
        "refused"
    );
    let c = admin::collect(&reg).unwrap();
    assert_eq!(
        (c.results[0].removed, c.results[0].reason.as_str()),
        (false, "adopted")
    );
    assert!(r.root.exists());
    fs::remove_dir_all(&r.root).unwrap();
    let p = admin::prune(&reg, false).unwrap();
    assert_eq!(
        (p.removed, p.results[0].reason.as_str()),
        (0, "gone-adopted")
    );
    let p = admin::prune(&reg, true).unwrap();
    assert_eq!(
        (p.removed, p.results[0].reason.as_str()),
        (1, "pruned-adopted")
    );
    assert_eq!(admin::list(&reg).unwrap().count, 0);
}

/// Mode bits of a path (without the file type).
fn mode_of(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn file_inputs_at_depth_create_their_parents() {
    let f = Fixture::new();
    // Depth 1 and depth 3, each alone.
    for (i, dest) in ["docs/notes.md", "a/b/c/notes.md"].iter().enumerate() {
        let root = format!("alone{i}");
        let m = f.manifest(&format!(
            r#"{{"version":1,"root":"{root}","registry_dir":"reg","inputs":[{{"source":"notes.md","destination":"{dest}"}}]}}"#
        ));
        let r = prepare(&m).unwrap();
        assert_eq!(fs::read(r.root.join(dest)).unwrap(), b"notes", "{dest}");
        assert_eq!((r.seeded_bytes, r.seeded_objects), (5, 1));
        // Every created parent has the mode directory inputs get.
        let mut dir = Path::new(dest).parent();
        while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
            let expected = mode_of(&f.dir.join("in")) & 0o755;
            assert_eq!(mode_of(&r.root.join(d)), expected, "{}", d.display());
            dir = d.parent();
        }
    }
    // Beside directory inputs: into a directory an input also creates, into
    // a new one, and at depth 3 under a directory input's subdirectory.
    let m = f.manifest(
        r#"{"version":1,"root":"beside","registry_dir":"reg","inputs":[
            {"source":"in","destination":"data"},
            {"source":"notes.md","destination":"data/nested/NOTES.md"},
            {"source":"notes.md","destination":"docs/notes.md"},
            {"source":"notes.md","destination":"data/x/y/z.md"}]}"#,
    );
    let r = prepare(&m).unwrap();
    for (p, want) in [
        ("data/seed.txt", &b"seed"[..]),
        ("data/nested/second.txt", b"second"),
        ("data/nested/NOTES.md", b"notes"),
        ("docs/notes.md", b"notes"),
        ("data/x/y/z.md", b"notes"),
    ] {
        assert_eq!(fs::read(r.root.join(p)).unwrap(), want, "{p}");
    }
    assert_eq!(r.seeded_objects, 5);
    // A sensitive nested destination with the opt-in.
    fs::write(f.dir.join("creds"), "[default]").unwrap();
    let m = f.manifest(
        r#"{"version":1,"root":"sens","registry_dir":"reg","include_sensitive_inputs":true,"inputs":[{"source":"creds","destination":".aws/credentials"}]}"#,
    );
    let r = prepare(&m).unwrap();
    assert_eq!(
        fs::read(r.root.join(".aws/credentials")).unwrap(),
        b"[default]"
    );
}

#[test]
fn the_seed_manifest_without_its_repository_prepares() {
    // Seed 002's example, minus the `repositories` entry: the file input's
    // parent `repo/` exists only because prepare creates it.
    let f = Fixture::new();
    fs::create_dir_all(f.dir.join("tasks")).unwrap();
    fs::create_dir_all(f.dir.join("m/fixtures/sub")).unwrap();
    fs::write(f.dir.join("m/task-notes.md"), "# task").unwrap();
    fs::write(f.dir.join("m/fixtures/sub/case.json"), "{}").unwrap();
    let m = f.dir.join("m/task.json");
    fs::write(
        &m,
        r#"{
          "version": 1,
          "root": "../tasks/fix-parser",
          "working_directory": "repo",
          "inputs": [
            { "source": "./task-notes.md", "destination": "repo/TASK.md" },
            { "source": "./fixtures", "destination": "repo/testdata" }
          ],
          "max_bytes": 67108864,
          "max_objects": 10000,
          "max_checkpoint_bytes": 536870912,
          "max_checkpoints": 20,
          "max_workspaces": 100,
          "ttl_seconds": 604800,
          "registry_dir": "../stow-registry",
          "team": "platform",
          "include_sensitive_inputs": false
        }"#,
    )
    .unwrap();
    let r = prepare(&m).unwrap();
    let root = f.dir.join("tasks/fix-parser");
    assert_eq!(r.root, root);
    assert_eq!(r.working_directory, root.join("repo"));
    assert_eq!(fs::read(root.join("repo/TASK.md")).unwrap(), b"# task");
    assert_eq!(
        fs::read(root.join("repo/testdata/sub/case.json")).unwrap(),
        b"{}"
    );
    assert_eq!((r.seeded_bytes, r.seeded_objects), (8, 2));
    assert_eq!(r.team.as_deref(), Some("platform"));
}

#[test]
fn opening_reports_the_recorded_base_without_walking_the_tree() {
    let f = Fixture::new();
    let r = prepare(&f.manifest(&base(""))).unwrap();
    let reg = Registry::resolve(Some(&f.dir.join("reg")), None).unwrap();
    // The agent edits the tree; a resume describes what the workspace is
    // based on (prepare's tree), not the tree now.
    fs::write(r.root.join("seed.txt"), "edited").unwrap();
    let resumed = open::resume(&reg, &r.workspace_id, None, true).unwrap();
    assert_eq!(resumed.base_identity, r.base_identity);
    assert_ne!(
        stow_checkpoint::walk::base_identity(&r.root).unwrap(),
        r.base_identity
    );
}
