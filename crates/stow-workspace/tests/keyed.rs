//! Keyed capture and resolution: outcomes and error objects.

use std::fs;
use std::time::Duration;

use stow_checkpoint::fsutil::FileLock;
use stow_checkpoint::keyed::{derive_id, keyed_capture, KeyedRequest};
use stow_checkpoint::CaptureSpec;
use stow_workspace::{prepare, Registry};

fn req<'a>(ws: &'a str, key: &'a str) -> KeyedRequest<'a> {
    KeyedRequest {
        spec: CaptureSpec {
            parent: None,
            max_bytes: 0,
            max_files: 0,
            include_sensitive: false,
            portable: false,
            no_ignore: false,
            message: None,
        },
        workspace_id: ws,
        request_key: key,
        resolve: false,
        timeout: Duration::from_secs(30),
        monitor: None,
    }
}

#[test]
fn keyed_capture_outcomes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    fs::create_dir(dir.join("in")).unwrap();
    fs::write(dir.join("in/a.txt"), "alpha").unwrap();
    fs::write(
        dir.join("t.json"),
        r#"{"version":1,"root":"ws","registry_dir":"reg","inputs":[{"source":"in","destination":"."}]}"#,
    )
    .unwrap();
    let p = prepare(&dir.join("t.json")).unwrap();
    let ws = p.workspace_id.as_str();
    let reg = Registry::resolve(Some(&dir.join("reg")), None).unwrap();

    // Resolution before any capture: unknown / not_found.
    let r = keyed_capture(
        &reg,
        &KeyedRequest {
            resolve: true,
            ..req(ws, "k1")
        },
    );
    let e = r.error.unwrap();
    assert_eq!(
        (
            e.code.as_str(),
            r.result.outcome.as_str(),
            e.outcome.as_str()
        ),
        ("not_found", "unknown", "unknown")
    );

    let first = keyed_capture(&reg, &req(ws, "k1"));
    assert!(first.error.is_none());
    assert_eq!(
        (first.result.outcome.as_str(), first.result.replayed),
        ("committed", false)
    );
    let cp = first.result.checkpoint.unwrap();
    assert_eq!(cp.id, derive_id(ws, "k1").0);
    assert_eq!((cp.files, cp.bytes), (1, 5));

    // The same key and options replay; nothing new is captured.
    fs::write(p.root.join("b.txt"), "changed since").unwrap();
    let again = keyed_capture(&reg, &req(ws, "k1"));
    assert_eq!(
        (again.result.outcome.as_str(), again.result.replayed),
        ("committed", true)
    );
    assert_eq!(again.result.checkpoint.unwrap().files, 1);
    assert_eq!(stow_checkpoint::summaries(&reg).unwrap().len(), 1);
    let resolved = keyed_capture(
        &reg,
        &KeyedRequest {
            resolve: true,
            ..req(ws, "k1")
        },
    );
    assert_eq!(
        (resolved.result.outcome.as_str(), resolved.result.replayed),
        ("committed", true)
    );

    // Same key, other options: request_conflict, outcome unknown.
    let conflict = keyed_capture(
        &reg,
        &KeyedRequest {
            spec: CaptureSpec {
                max_files: 7,
                ..Default::default()
            },
            ..req(ws, "k1")
        },
    );
    let e = conflict.error.unwrap();
    assert_eq!(
        (e.code.as_str(), e.outcome.as_str(), e.retryable, e.attempts),
        ("request_conflict", "unknown", false, 1)
    );

    // Validation and scope errors.
    let e = keyed_capture(&reg, &req(ws, " padded")).error.unwrap();
    assert_eq!(
        (e.code.as_str(), e.phase.as_str(), e.outcome.as_str()),
        ("invalid_request", "validate", "not_committed")
    );
    let e = keyed_capture(
        &reg,
        &KeyedRequest {
            timeout: Duration::ZERO,
            ..req(ws, "k2")
        },
    )
    .error
    .unwrap();
    assert_eq!(e.code.as_str(), "invalid_request");
    let e = keyed_capture(&reg, &req("ws_0000000000000000", "k2"))
        .error
        .unwrap();
    assert_eq!(
        (e.code.as_str(), e.phase.as_str()),
        ("invalid_scope", "lookup")
    );

    // A concurrent capture of the workspace: in_progress, retryable.
    let lock = FileLock::try_lock(
        &reg.dir()
            .join(".stow/capture-locks")
            .join(format!("{ws}.lock")),
    )
    .unwrap()
    .unwrap();
    let e = keyed_capture(&reg, &req(ws, "k2")).error.unwrap();
    assert_eq!(
        (
            e.code.as_str(),
            e.phase.as_str(),
            e.retryable,
            e.outcome.as_str()
        ),
        ("in_progress", "lock", true, "not_committed")
    );
    drop(lock);

    // A damaged payload is never replayed as committed.
    let k3 = keyed_capture(&reg, &req(ws, "k3"));
    assert!(k3.error.is_none());
    let m = stow_checkpoint::load_manifest(&reg, &k3.result.checkpoint.unwrap().id).unwrap();
    let f = m.files.iter().find(|f| f.path == "b.txt").unwrap();
    let blob = reg
        .dir()
        .join(".stow/blobs")
        .join(&f.sha256[..2])
        .join(&f.sha256);
    let mut perms = fs::metadata(&blob).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    fs::set_permissions(&blob, perms).unwrap();
    fs::write(&blob, "tampered!!!!!!").unwrap();
    let e = keyed_capture(&reg, &req(ws, "k3")).error.unwrap();
    assert_eq!(
        (e.code.as_str(), e.outcome.as_str()),
        ("corrupt_checkpoint", "unknown")
    );

    // Deleting the checkpoint deletes its receipt: resolution is unknown.
    stow_checkpoint::delete(&reg, &derive_id(ws, "k1").0).unwrap();
    let r = keyed_capture(
        &reg,
        &KeyedRequest {
            resolve: true,
            ..req(ws, "k1")
        },
    );
    assert_eq!(
        (r.error.unwrap().code.as_str(), r.result.outcome.as_str()),
        ("not_found", "unknown")
    );
}
