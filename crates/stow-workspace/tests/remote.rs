//! Push and pull against the in-memory remote (`stow_checkpoint::remote::memory`): the engine's rules (what is
//! sent, what is trusted, what is refused) without a network.

use std::fs;
use std::path::Path;
use std::sync::atomic::Ordering;

use stow_checkpoint::remote::memory::MemoryRemote;
use stow_checkpoint::remote::*;
use stow_checkpoint::{capture, CaptureOptions, CaptureSpec, Registry};
use stow_workspace::restore::{restore, RestoreLimits};
use stow_workspace::WorkspaceResult;

/// A prepared workspace with nested files, its registry and a checkpoint.
fn workspace(dir: &Path) -> (WorkspaceResult, Registry, String) {
    fs::create_dir_all(dir.join("in/a/b")).unwrap();
    fs::write(dir.join("in/top.txt"), "top").unwrap();
    fs::write(dir.join("in/a/b/deep.bin"), vec![5u8; 90_000]).unwrap();
    fs::write(dir.join("in/a/same1"), "dup").unwrap();
    fs::write(dir.join("in/a/same2"), "dup").unwrap();
    prepared(dir)
}

/// The workspace prepared from `dir/in`, its registry and a checkpoint.
fn prepared(dir: &Path) -> (WorkspaceResult, Registry, String) {
    fs::write(
        dir.join("t.json"),
        r#"{"version":1,"root":"ws","registry_dir":"reg","inputs":[{"source":"in","destination":"."}]}"#,
    )
    .unwrap();
    let p = stow_workspace::prepare(&dir.join("t.json")).unwrap();
    let reg = Registry::resolve(Some(&dir.join("reg")), None).unwrap();
    let cp = capture(&reg, &p.workspace_id, &CaptureOptions::default())
        .unwrap()
        .checkpoint_id;
    (p, reg, cp)
}

fn child(reg: &Registry, p: &WorkspaceResult, parent: &str) -> String {
    fs::write(Path::new(&p.root).join("new.txt"), "new file").unwrap();
    fs::write(Path::new(&p.root).join("top.txt"), "changed").unwrap();
    let opts = CaptureOptions {
        spec: CaptureSpec {
            parent: Some(parent.to_string()),
            ..Default::default()
        },
        ..CaptureOptions::default()
    };
    capture(reg, &p.workspace_id, &opts).unwrap().checkpoint_id
}

fn other_registry(dir: &Path) -> Registry {
    Registry::resolve(Some(&dir.join("reg-b")), None).unwrap()
}

#[test]
fn push_then_pull_into_another_registry_restores_every_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let (p, reg, cp) = workspace(tmp.path());
    let remote = MemoryRemote::default();
    let pushed = push(&reg, &cp, &remote, &PushOptions::default()).unwrap();
    // Four files, three distinct payloads ("dup" twice).
    assert_eq!((pushed.uploaded_blobs, pushed.skipped_blobs), (3, 0));
    assert_eq!(pushed.uploaded_bytes, 3 + 90_000 + 3);
    assert_eq!(remote.keys("blobs/").len(), 3);
    assert_eq!(
        remote.keys("checkpoints/"),
        vec![format!("checkpoints/{cp}.json")]
    );

    let b = other_registry(tmp.path());
    let pulled = pull(&b, &cp, &remote, &PullOptions::default()).unwrap();
    assert_eq!((pulled.downloaded_blobs, pulled.local_blobs), (3, 0));
    assert_eq!(pulled.checkpoint.checkpoint_id, cp);
    let root = tmp.path().join("restored");
    restore(&b, &cp, &root, RestoreLimits::default()).unwrap();
    for rel in ["top.txt", "a/b/deep.bin", "a/same1", "a/same2"] {
        assert_eq!(
            fs::read(root.join(rel)).unwrap(),
            fs::read(Path::new(&p.root).join(rel)).unwrap(),
            "{rel}"
        );
    }
    // A second pull of the same checkpoint is refused and changes nothing.
    let again = pull(&b, &cp, &remote, &PullOptions::default()).unwrap_err();
    assert_eq!(again.code(), "already_exists");

    let listed = remote_list(&remote).unwrap();
    assert_eq!(listed.checkpoints.len(), 1);
    assert_eq!(
        listed.checkpoints[0].workspace_id.as_deref(),
        Some(p.workspace_id.as_str())
    );
    assert_eq!(listed.checkpoints[0].files, Some(4));
}

#[test]
fn a_child_push_sends_only_the_changed_blobs_and_a_repush_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (p, reg, cp) = workspace(tmp.path());
    let remote = MemoryRemote::default();
    push(&reg, &cp, &remote, &PushOptions::default()).unwrap();
    let kid = child(&reg, &p, &cp);
    let pushed = push(&reg, &kid, &remote, &PushOptions::default()).unwrap();
    assert_eq!(pushed.uploaded_blobs, 2, "new.txt and the changed top.txt");
    assert_eq!(pushed.uploaded_bytes, 8 + 7);
    assert_eq!(pushed.skipped_blobs, 2);
    let creates = remote.creates.load(Ordering::SeqCst);
    let again = push(&reg, &kid, &remote, &PushOptions::default()).unwrap();
    assert_eq!(again.manifest, "already_present");
    assert_eq!(again.uploaded_blobs, 0);
    assert_eq!(remote.creates.load(Ordering::SeqCst), creates);

    // Pulling the child where the parent is already present downloads only
    // what is new.
    let b = other_registry(tmp.path());
    pull(&b, &cp, &remote, &PullOptions::default()).unwrap();
    let pulled = pull(&b, &kid, &remote, &PullOptions::default()).unwrap();
    assert_eq!((pulled.downloaded_blobs, pulled.local_blobs), (2, 2));
}

#[test]
fn an_interrupted_push_leaves_no_checkpoint_and_the_rerun_sends_nothing_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let (_p, reg, cp) = workspace(tmp.path());
    let remote = MemoryRemote::default();
    *remote.fail_after.lock().unwrap() = Some(1);
    let err = push(&reg, &cp, &remote, &PushOptions::default()).unwrap_err();
    assert_eq!(err.code(), "remote_unreachable");
    assert!(err.retryable());
    assert!(remote.keys("checkpoints/").is_empty());
    let b = other_registry(tmp.path());
    assert_eq!(
        pull(&b, &cp, &remote, &PullOptions::default())
            .unwrap_err()
            .code(),
        "not_found"
    );
    assert!(!b.state_dir().join("checkpoints").join(&cp).exists());
    let sent_before = remote.keys("blobs/").len();
    assert_eq!(sent_before, 1);
    *remote.fail_after.lock().unwrap() = None;
    let rerun = push(&reg, &cp, &remote, &PushOptions::default()).unwrap();
    assert_eq!(rerun.uploaded_blobs as usize, 3 - sent_before);
    assert_eq!(rerun.skipped_blobs as usize, sent_before);
    pull(&b, &cp, &remote, &PullOptions::default()).unwrap();
}

#[test]
fn tampered_or_missing_remote_blobs_are_refused_and_nothing_is_published() {
    let tmp = tempfile::tempdir().unwrap();
    let (_p, reg, cp) = workspace(tmp.path());
    let remote = MemoryRemote::default();
    push(&reg, &cp, &remote, &PushOptions::default()).unwrap();
    let b = other_registry(tmp.path());
    let blobs = remote.keys("blobs/");
    let victim = blobs
        .iter()
        .find(|k| remote.objects.lock().unwrap()[*k].0.len() == 90_000)
        .unwrap()
        .clone();
    let good = remote.objects.lock().unwrap()[&victim].0.clone();

    // Same size, different bytes.
    let mut bad = good.clone();
    bad[100] ^= 1;
    remote.overwrite(&victim, bad);
    let err = pull(&b, &cp, &remote, &PullOptions::default()).unwrap_err();
    assert_eq!(err.code(), "corrupt_remote", "{err}");
    // Truncated, and too long.
    remote.overwrite(&victim, good[..500].to_vec());
    assert_eq!(
        pull(&b, &cp, &remote, &PullOptions::default())
            .unwrap_err()
            .code(),
        "corrupt_remote"
    );
    let mut long = good.clone();
    long.push(0);
    remote.overwrite(&victim, long);
    assert_eq!(
        pull(&b, &cp, &remote, &PullOptions::default())
            .unwrap_err()
            .code(),
        "corrupt_remote"
    );
    // Missing.
    remote.objects.lock().unwrap().remove(&victim);
    assert_eq!(
        pull(&b, &cp, &remote, &PullOptions::default())
            .unwrap_err()
            .code(),
        "corrupt_remote"
    );
    // A push onto a wrong-sized blob is refused too, never "skipped".
    remote.overwrite(&victim, good[..10].to_vec());
    let tmp2 = tempfile::tempdir().unwrap();
    let (_p2, reg2, cp2) = workspace(tmp2.path());
    assert_eq!(
        push(&reg2, &cp2, &remote, &PushOptions::default())
            .unwrap_err()
            .code(),
        "corrupt_remote"
    );

    assert!(!b.state_dir().join("checkpoints").join(&cp).exists());
    let staged = fs::read_dir(b.state_dir().join("tmp"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(staged, 0, "nothing staged is left behind");

    // A malformed or misnamed manifest is a corrupt remote as well.
    remote.overwrite(&victim, good);
    let key = format!("checkpoints/{cp}.json");
    let doc = remote.objects.lock().unwrap()[&key].0.clone();
    remote.overwrite(&key, b"{not json".to_vec());
    assert_eq!(
        pull(&b, &cp, &remote, &PullOptions::default())
            .unwrap_err()
            .code(),
        "corrupt_remote"
    );
    remote.overwrite(&key, doc);
    pull(&b, &cp, &remote, &PullOptions::default()).unwrap();
}

#[test]
fn a_different_checkpoint_under_the_same_id_is_refused_on_push() {
    let tmp = tempfile::tempdir().unwrap();
    let (_p, reg, cp) = workspace(tmp.path());
    let remote = MemoryRemote::default();
    push(&reg, &cp, &remote, &PushOptions::default()).unwrap();
    let key = format!("checkpoints/{cp}.json");
    let doc = String::from_utf8(remote.objects.lock().unwrap()[&key].0.clone()).unwrap();
    let edited = doc.replacen("\"created\":\"", "\"created\":\"1", 1);
    assert_ne!(doc, edited);
    remote.overwrite(&key, edited.into_bytes());
    let err = push(&reg, &cp, &remote, &PushOptions::default()).unwrap_err();
    assert!(
        matches!(err.code(), "already_exists" | "corrupt_remote"),
        "{err}"
    );
}

#[test]
fn concurrent_pushes_of_overlapping_checkpoints_both_succeed() {
    let tmp = tempfile::tempdir().unwrap();
    let (p, reg, cp) = workspace(tmp.path());
    let kid = child(&reg, &p, &cp);
    let remote = MemoryRemote::default();
    std::thread::scope(|s| {
        let a = s.spawn(|| push(&reg, &cp, &remote, &PushOptions::default()));
        let b = s.spawn(|| push(&reg, &kid, &remote, &PushOptions::default()));
        a.join().unwrap().unwrap();
        b.join().unwrap().unwrap();
    });
    let b = other_registry(tmp.path());
    pull(&b, &cp, &remote, &PullOptions::default()).unwrap();
    pull(&b, &kid, &remote, &PullOptions::default()).unwrap();
    stow_checkpoint::verify(&b, &kid).unwrap();
}

#[test]
fn s3_urls_split_into_bucket_and_prefix() {
    assert_eq!(
        parse_s3_url("s3://team-cps").unwrap(),
        ("team-cps".into(), "".into())
    );
    assert_eq!(
        parse_s3_url("s3://team-cps/a/b/").unwrap(),
        ("team-cps".into(), "a/b".into())
    );
    for bad in [
        "team-cps",
        "http://x/y",
        "s3://",
        "s3://ab",
        "s3://Upper",
        "s3://-lead",
        "s3://b_ucket",
        "s3://bucket/a//b",
        "s3://bucket/a/../b",
        "s3://bucket/./b",
        "s3://bucket/a\nb",
    ] {
        assert!(parse_s3_url(bad).is_err(), "{bad} accepted");
    }
}

#[test]
fn sensitive_checkpoints_need_the_opt_in_to_leave() {
    let tmp = tempfile::tempdir().unwrap();
    let (p, reg, _cp) = workspace(tmp.path());
    fs::write(Path::new(&p.root).join(".env"), "TOKEN=1").unwrap();
    let opts = CaptureOptions {
        spec: CaptureSpec {
            include_sensitive: true,
            ..Default::default()
        },
        ..CaptureOptions::default()
    };
    let cp = capture(&reg, &p.workspace_id, &opts).unwrap().checkpoint_id;
    let remote = MemoryRemote::default();
    let err = push(&reg, &cp, &remote, &PushOptions::default()).unwrap_err();
    assert_eq!(err.code(), "sensitive_path");
    assert!(remote.keys("").is_empty(), "nothing was sent");
    let allowed = PushOptions {
        include_sensitive: true,
        ..PushOptions::default()
    };
    push(&reg, &cp, &remote, &allowed).unwrap();
    let b = other_registry(tmp.path());
    assert_eq!(
        pull(&b, &cp, &remote, &PullOptions::default())
            .unwrap_err()
            .code(),
        "sensitive_path"
    );
    let pulled = PullOptions {
        include_sensitive: true,
        ..PullOptions::default()
    };
    pull(&b, &cp, &remote, &pulled).unwrap();
}

/// Hands out the one shared in-memory remote, whatever the spec says.
struct SharedConnector(std::sync::Arc<MemoryRemote>);

struct SharedRemote(std::sync::Arc<MemoryRemote>);

impl RemoteStore for SharedRemote {
    fn url(&self) -> String {
        self.0.url()
    }
    fn head(&self, key: &str) -> Result<Option<RemoteObject>, RemoteError> {
        self.0.head(key)
    }
    fn get(&self, key: &str) -> Result<Option<Box<dyn std::io::Read + Send>>, RemoteError> {
        self.0.get(key)
    }
    fn create(&self, key: &str, body: Body, sha256: &str) -> Result<Created, RemoteError> {
        self.0.create(key, body, sha256)
    }
    fn list_at_most(
        &self,
        prefix: &str,
        most: usize,
    ) -> Result<Option<Vec<(String, u64)>>, RemoteError> {
        self.0.list_at_most(prefix, most)
    }
}

impl Connector for SharedConnector {
    fn connect(&self, _: &RemoteSpec) -> Result<Box<dyn RemoteStore>, RemoteError> {
        Ok(Box::new(SharedRemote(std::sync::Arc::clone(&self.0))))
    }
}

/// Every file under `dir`, with its bytes.
fn tree(dir: &Path) -> std::collections::BTreeMap<std::path::PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_path_buf();
                out.insert(rel, fs::read(&p).unwrap());
            }
        }
    }
    out
}

#[test]
fn adopting_from_a_remote_reuses_a_held_checkpoint_only_when_the_remote_manifest_is_the_same() {
    use stow_workspace::handoff::{adopt, AdoptOptions};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (p, reg, cp) = workspace(dir);
    let memory = std::sync::Arc::new(MemoryRemote::default());
    push(&reg, &cp, memory.as_ref(), &PushOptions::default()).unwrap();
    let doc = dir.join("handoff.json");
    fs::write(
        &doc,
        serde_json::to_vec(&serde_json::json!({
            "version": 2, "workspace_id": p.workspace_id, "checkpoint_id": cp,
            "remote": {"url": "s3://memory/test"},
        }))
        .unwrap(),
    )
    .unwrap();
    let connector = SharedConnector(std::sync::Arc::clone(&memory));
    let opts = AdoptOptions {
        connector: Some(&connector),
        ..Default::default()
    };
    let held = (
        tree(&reg.state_dir().join("checkpoints")),
        tree(&reg.state_dir().join("blobs")),
    );
    let remote_before = memory.keys("");

    // The registry that pushed it adopts it back: reused and restored.
    let adopted = adopt(Some(&dir.join("reg")), None, &doc, &dir.join("a1"), &opts).unwrap();
    assert_ne!(adopted.workspace_id, p.workspace_id);
    for rel in ["top.txt", "a/b/deep.bin", "a/same1"] {
        assert_eq!(
            fs::read(dir.join("a1").join(rel)).unwrap(),
            fs::read(Path::new(&p.root).join(rel)).unwrap(),
            "{rel}"
        );
    }
    let now = (
        tree(&reg.state_dir().join("checkpoints")),
        tree(&reg.state_dir().join("blobs")),
    );
    assert_eq!(now, held, "nothing written twice");
    assert_eq!(memory.keys(""), remote_before);

    // The remote's manifest under that ID says something else: refused.
    let key = format!("checkpoints/{cp}.json");
    let mut doc_on_remote: serde_json::Value = {
        let mut r = memory.get(&key).unwrap().unwrap();
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut r, &mut bytes).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    };
    let created = &mut doc_on_remote["manifest"]["created"];
    assert!(created.is_string());
    *created = "2001-02-03T04:05:06Z".into();
    memory.overwrite(&key, serde_json::to_vec(&doc_on_remote).unwrap());
    let err = adopt(Some(&dir.join("reg")), None, &doc, &dir.join("a2"), &opts).unwrap_err();
    assert_eq!(err.code(), "already_exists", "{err}");
    assert!(!dir.join("a2").exists());

    // A remote without it cannot vouch for the held one.
    let empty = SharedConnector(std::sync::Arc::new(MemoryRemote::default()));
    let opts = AdoptOptions {
        connector: Some(&empty),
        ..Default::default()
    };
    let err = adopt(Some(&dir.join("reg")), None, &doc, &dir.join("a3"), &opts).unwrap_err();
    assert_eq!(err.code(), "not_found", "{err}");
    assert!(!dir.join("a3").exists());
    let now = (
        tree(&reg.state_dir().join("checkpoints")),
        tree(&reg.state_dir().join("blobs")),
    );
    assert_eq!(now, held);
}

/// Many unknown blobs are looked up with one listing of `blobs/`; on a
/// remote holding far more blobs than the push asks about, the listing
/// stops early and each blob gets a HEAD instead (a shared remote's whole
/// listing was read, and held, for any push of over 256 new payloads).
#[test]
fn a_push_lists_the_remote_s_blobs_only_while_that_is_cheaper() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    fs::create_dir_all(dir.join("in")).unwrap();
    for i in 0..300 {
        fs::write(dir.join(format!("in/f{i:03}")), format!("payload {i}")).unwrap();
    }
    let (_, reg, cp) = prepared(dir);

    // A remote with a few other blobs: one listing, no HEAD of a blob.
    let small = MemoryRemote::default();
    small.overwrite("blobs/0000", b"other".to_vec());
    let pushed = push(&reg, &cp, &small, &PushOptions::default()).unwrap();
    assert_eq!(pushed.uploaded_blobs, 300);
    assert_eq!(small.lists.load(Ordering::Relaxed), 1);
    assert_eq!(small.heads.load(Ordering::Relaxed), 0);

    // A remote holding more than 64 blobs per unknown one: the listing
    // gives up, and every blob is asked about by itself.
    let big = MemoryRemote::default();
    {
        let mut objects = big.objects.lock().unwrap();
        for i in 0..300 * 64 + 1 {
            objects.insert(format!("blobs/other{i:06}"), (Vec::new(), String::new()));
        }
    }
    let pushed = push(&reg, &cp, &big, &PushOptions::default()).unwrap();
    assert_eq!(pushed.uploaded_blobs, 300);
    assert_eq!(big.lists.load(Ordering::Relaxed), 1);
    assert!(big.heads.load(Ordering::Relaxed) >= 300);
    let after = MemoryRemote::default();
    push(&reg, &cp, &after, &PushOptions::default()).unwrap();
    // Both remotes now hold every payload.
    for remote in [&small, &big] {
        let held = remote.keys("blobs/");
        assert!(after.keys("blobs/").iter().all(|k| held.contains(k)));
    }
}
