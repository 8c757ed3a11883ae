//! The workspace bucket view (ARCHITECTURE.md, "Workspace view writes") and portable (v2) checkpoints.

use std::fs;
use std::io::Read as _;
use std::path::Path;

use stow_checkpoint::bucket::{ViewQuota, WorkspaceBucket, RECOUNT_AFTER};
use stow_checkpoint::{self as checkpoint, CaptureOptions, CaptureSpec, Kind};
use stow_store::{ObjectBackend, ObjectProps, PutOptions};
use stow_workspace::open::serve_workspace;
use stow_workspace::restore::{restore, RestoreLimits};
use stow_workspace::{prepare, Registry, WorkspaceResult};

/// Prepares workspace `ws` under `dir` from one file, `seed.txt`, with
/// `extra` manifest members (`,"name":value…`), registered in `dir/reg`.
fn seeded_workspace(dir: &Path, seed: &[u8], extra: &str) -> (WorkspaceResult, Registry) {
    fs::create_dir(dir.join("in")).unwrap();
    fs::write(dir.join("in/seed.txt"), seed).unwrap();
    fs::write(
        dir.join("t.json"),
        format!(
            r#"{{"version":1,"root":"ws","registry_dir":"reg"{extra},"inputs":[{{"source":"in","destination":"."}}]}}"#
        ),
    )
    .unwrap();
    let p = prepare(&dir.join("t.json")).unwrap();
    let reg = Registry::resolve(Some(&dir.join("reg")), None).unwrap();
    (p, reg)
}

fn portable() -> CaptureOptions<'static> {
    CaptureOptions {
        spec: CaptureSpec {
            portable: true,
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn bucket_view_and_portable_checkpoints() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (p, reg) = seeded_workspace(dir, b"seed", "");
    let ws = p.workspace_id.as_str();
    {
        let view = WorkspaceBucket::open(&p.root, &p.bucket).unwrap();
        // A portable key of the primary bucket is a real file.
        view.put_bytes(&p.bucket, "docs/a.txt", b"hello", ObjectProps::default())
            .unwrap();
        assert_eq!(fs::read(p.root.join("docs/a.txt")).unwrap(), b"hello");
        // A non-portable key and another bucket live in the private store.
        view.put_bytes(&p.bucket, "odd:key", b"colon", ObjectProps::default())
            .unwrap();
        assert!(!p.root.join("odd:key").exists());
        view.ensure_bucket("extra").unwrap();
        let props = ObjectProps {
            content_type: Some("text/plain".into()),
            ..Default::default()
        };
        view.put_bytes("extra", "x/y.txt", b"extra bytes", props)
            .unwrap();
        let keys: Vec<String> = view
            .list_view(&p.bucket)
            .unwrap()
            .into_iter()
            .map(|o| o.key)
            .collect();
        assert_eq!(keys, vec!["docs/a.txt", "odd:key", "seed.txt"]);
        assert_eq!(view.read_bytes(&p.bucket, "seed.txt").unwrap().0, b"seed");
        assert_eq!(
            view.read_bytes("extra", "x/y.txt")
                .unwrap()
                .1
                .content_type
                .as_deref(),
            Some("text/plain")
        );
        // While the view owns the private store, a portable capture waits its turn.
        let err = checkpoint::capture(&reg, ws, &portable()).unwrap_err();
        assert_eq!(err.code(), "in_progress");
    }
    let c1 = checkpoint::capture(&reg, ws, &portable()).unwrap();
    assert_eq!((c1.files, c1.objects), (2, Some(2)));
    let m1 = checkpoint::load_manifest(&reg, &c1.checkpoint_id).unwrap();
    assert_eq!(m1.version, 2);
    assert_eq!(m1.primary_bucket.as_deref(), Some(p.bucket.as_str()));
    let mut expected = vec!["extra".to_string(), p.bucket.clone()];
    expected.sort();
    assert_eq!(m1.buckets, expected);

    {
        let view = WorkspaceBucket::open(&p.root, &p.bucket).unwrap();
        view.put_bytes("extra", "x/y.txt", b"changed", ObjectProps::default())
            .unwrap();
        view.ensure_bucket("third").unwrap();
        view.remove(&p.bucket, "odd:key").unwrap();
    }
    let c2 = checkpoint::capture(&reg, ws, &portable()).unwrap();
    let d = checkpoint::diff(&reg, &c1.checkpoint_id, &c2.checkpoint_id).unwrap();
    assert!(d.changes.is_empty());
    let buckets = d.buckets.unwrap();
    assert_eq!(
        (buckets[0].bucket.as_str(), buckets[0].kind),
        ("third", Kind::Added)
    );
    let objs: Vec<(String, Kind)> = d
        .objects
        .unwrap()
        .into_iter()
        .map(|o| (o.key, o.kind))
        .collect();
    // Sorted by bucket, then key.
    assert_eq!(
        objs,
        vec![
            ("x/y.txt".to_string(), Kind::Changed),
            ("odd:key".to_string(), Kind::Deleted)
        ]
    );

    // Restore brings files, buckets and objects back under the same primary.
    let r = restore(
        &reg,
        &c1.checkpoint_id,
        &dir.join("restored"),
        RestoreLimits::default(),
    )
    .unwrap();
    assert_eq!(r.bucket, p.bucket);
    let view = WorkspaceBucket::open(&dir.join("restored"), &r.bucket).unwrap();
    assert_eq!(fs::read(dir.join("restored/docs/a.txt")).unwrap(), b"hello");
    assert_eq!(view.read_bytes(&p.bucket, "odd:key").unwrap().0, b"colon");
    let (body, props) = view.read_bytes("extra", "x/y.txt").unwrap();
    assert_eq!(
        (body.as_slice(), props.content_type.as_deref()),
        (&b"extra bytes"[..], Some("text/plain"))
    );
    drop(view);

    // Garbage collection keeps every payload a retained checkpoint needs.
    checkpoint::delete(&reg, &c2.checkpoint_id).unwrap();
    checkpoint::verify(&reg, &c1.checkpoint_id).unwrap();
}

fn put(view: &WorkspaceBucket, bucket: &str, key: &str, body: &[u8]) -> Result<(), String> {
    ObjectBackend::put_object(view, bucket, key, &mut &body[..], PutOptions::default())
        .map(|_| ())
        .map_err(|e| e.code().to_string())
}

/// Files and private objects share the served workspace's quotas; a
/// refused write leaves nothing behind, removals free room, and files the
/// agent writes directly are counted again once the count is stale.
#[test]
fn served_view_enforces_the_workspace_quotas() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (p, reg) = seeded_workspace(dir, &[b's'; 1000], r#","max_bytes":10000,"max_objects":4"#);
    let ws = p.workspace_id.as_str();

    // A server may narrow the quotas, never widen them; a refusal claims nothing.
    let err = serve_workspace(&reg, ws, 20_000, 0).err().unwrap();
    assert_eq!(err.code(), "invalid_request");
    let served = serve_workspace(&reg, ws, 0, 3).unwrap();
    assert_eq!(
        served.quota,
        ViewQuota {
            max_bytes: 10_000,
            max_objects: 3
        }
    );
    let view = &served.view;
    let b = p.bucket.as_str();
    let usage = |v: &WorkspaceBucket| ObjectBackend::usage(v).unwrap();
    assert_eq!((usage(view).bytes, usage(view).objects), (1000, 1));

    put(view, b, "a.txt", &[b'a'; 6000]).unwrap();
    // Bytes: 1000 + 6000 + 4000 > 10000, as a file and as a private object.
    assert_eq!(
        put(view, b, "b.txt", &[b'b'; 4000]),
        Err("quota_exceeded".into())
    );
    assert_eq!(
        put(view, b, "odd:key", &[b'b'; 4000]),
        Err("quota_exceeded".into())
    );
    assert!(!p.root.join("b.txt").exists());
    let stray: Vec<_> = fs::read_dir(&p.root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != ".stow" && n != "seed.txt" && n != "a.txt")
        .collect();
    assert!(stray.is_empty(), "nothing half-written: {stray:?}");
    // A body far over the room left is refused without being received whole.
    let mut endless = std::io::repeat(b'x').take(1 << 30);
    let e = ObjectBackend::put_object(view, b, "huge.bin", &mut endless, PutOptions::default());
    assert_eq!(e.unwrap_err().code(), "quota_exceeded");
    assert!(endless.limit() > (1 << 29), "stopped early");
    // An overwrite counts only its growth.
    put(view, b, "a.txt", &[b'a'; 8000]).unwrap();
    // Objects: seed, a.txt, odd:key = 3; a fourth is refused.
    put(view, b, "odd:key", b"x").unwrap();
    assert_eq!(put(view, b, "c.txt", b"c"), Err("quota_exceeded".into()));
    assert_eq!(usage(view).objects, 3);
    // Removing frees room at once.
    ObjectBackend::delete_object(view, b, "a.txt").unwrap();
    assert_eq!((usage(view).bytes, usage(view).objects), (1001, 2));
    put(view, b, "c.txt", &[b'c'; 5000]).unwrap();

    ObjectBackend::delete_object(view, b, "odd:key").unwrap();
    assert_eq!((usage(view).bytes, usage(view).objects), (6000, 2));

    // The agent grows a file directly; the next write after the count went
    // stale sees it (counted: 6000 + 600 fits; real: 9500 + 600 does not).
    fs::write(p.root.join("c.txt"), vec![0u8; 8500]).unwrap();
    std::thread::sleep(RECOUNT_AFTER + std::time::Duration::from_millis(100));
    assert_eq!(
        put(view, b, "d.txt", &[b'd'; 600]),
        Err("quota_exceeded".into())
    );
    assert_eq!((usage(view).bytes, usage(view).objects), (9500, 2));
    ObjectBackend::delete_object(view, b, "c.txt").unwrap();
    put(view, b, "d.txt", &[b'd'; 600]).unwrap();
    drop(served);

    // Views opened for checkpoints and restores have no quota.
    let view = WorkspaceBucket::open(&p.root, &p.bucket).unwrap();
    put(&view, b, "e.txt", &[b'e'; 20_000]).unwrap();
}

/// A portable checkpoint keeps the S3 properties of files written through
/// the view while the file is unchanged since, and a restore gives them back.
#[test]
fn portable_checkpoints_keep_file_properties() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (p, reg) = seeded_workspace(dir, b"seed", "");
    let b = p.bucket.as_str();
    let typed = |ct: &str, meta: &[(&str, &str)]| ObjectProps {
        content_type: Some(ct.into()),
        metadata: meta
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    {
        let view = WorkspaceBucket::open(&p.root, b).unwrap();
        view.put_bytes(
            b,
            "out/report.json",
            b"{}",
            typed("application/json", &[("team", "a")]),
        )
        .unwrap();
        view.put_bytes(b, "stale.txt", b"x", typed("text/plain", &[]))
            .unwrap();
    }
    // Changed behind the view: its recorded properties no longer hold.
    fs::write(p.root.join("stale.txt"), "rewritten by the agent").unwrap();
    let c = checkpoint::capture(&reg, &p.workspace_id, &portable()).unwrap();
    let m = checkpoint::load_manifest(&reg, &c.checkpoint_id).unwrap();
    let entry = |path: &str| m.files.iter().find(|f| f.path == path).unwrap().clone();
    let report = entry("out/report.json");
    assert_eq!(report.content_type.as_deref(), Some("application/json"));
    assert_eq!(report.metadata.get("team").map(String::as_str), Some("a"));
    assert_eq!(entry("stale.txt").content_type, None);
    assert_eq!(entry("seed.txt").content_type, None);

    let r = restore(
        &reg,
        &c.checkpoint_id,
        &dir.join("restored"),
        RestoreLimits::default(),
    )
    .unwrap();
    let view = WorkspaceBucket::open(&dir.join("restored"), &r.bucket).unwrap();
    let head = ObjectBackend::head_object(&view, &r.bucket, "out/report.json").unwrap();
    assert_eq!(head.props.content_type.as_deref(), Some("application/json"));
    assert_eq!(
        head.props.metadata.get("team").map(String::as_str),
        Some("a")
    );
    assert_eq!(
        head.etag, "\"99914b932bd37a50b983c5e7c90ae93b\"",
        "the MD5 of {{}}"
    );
    let stale = ObjectBackend::head_object(&view, &r.bucket, "stale.txt").unwrap();
    assert_eq!(stale.props.content_type, None);
}

// ---- a kill during a file key's multipart completion ---------------------

const FAULT_CHILD: &str = "STOW_WS_BUCKET_FAULT_CHILD";
const BIG: usize = stow_store::MIN_PART_SIZE as usize;

fn fault_quota() -> Option<ViewQuota> {
    Some(ViewQuota {
        max_bytes: 1 << 30,
        max_objects: 1000,
    })
}

fn joined_bytes() -> Vec<u8> {
    let mut all = vec![b'A'; BIG];
    all.extend_from_slice(b"tail");
    all
}

/// The child of `a_kill_during_a_file_keys_multipart_completion_leaves_no_object`
/// (a no-op unless `STOW_WS_BUCKET_FAULT_CHILD` names its directory):
/// uploads `big.bin` in two parts, records the upload, and completes it;
/// the fault point armed by the parent kills it on the way.
#[test]
fn fault_child() {
    let Ok(dir) = std::env::var(FAULT_CHILD) else {
        return;
    };
    let dir = Path::new(&dir);
    let view = WorkspaceBucket::open_with_quota(&dir.join("root"), "wsb", fault_quota()).unwrap();
    let up = ObjectBackend::create_upload(&view, "wsb", "big.bin", Default::default()).unwrap();
    let mut listed = Vec::new();
    for (n, body) in [(1, vec![b'A'; BIG]), (2, b"tail".to_vec())] {
        let info = ObjectBackend::upload_part(
            &view,
            "wsb",
            "big.bin",
            &up.upload_id,
            n,
            &mut &body[..],
            Default::default(),
        )
        .unwrap();
        listed.push(format!("{n} {}", info.etag));
    }
    fs::write(
        dir.join("upload"),
        format!("{}\n{}", up.upload_id, listed.join("\n")),
    )
    .unwrap();
    ObjectBackend::complete_upload_checked(
        &view,
        "wsb",
        "big.bin",
        &up.upload_id,
        &parts_of(&listed),
        stow_store::WriteCondition::Always,
        None,
    )
    .unwrap();
}

fn parts_of(lines: &[String]) -> Vec<stow_store::CompletedPart> {
    lines
        .iter()
        .map(|l| {
            let (n, etag) = l.split_once(' ').unwrap();
            stow_store::CompletedPart {
                part_number: n.parse().unwrap(),
                etag: etag.to_string(),
            }
        })
        .collect()
}

/// Bytes of the in-flight uploads' parts of the primary bucket.
fn parts_bytes(view: &WorkspaceBucket) -> u64 {
    let uploads = ObjectBackend::list_uploads(view, "wsb", "", None, None, 100).unwrap();
    uploads
        .uploads
        .iter()
        .map(|u| {
            ObjectBackend::list_parts(view, "wsb", &u.key, &u.upload_id, 0, 100)
                .unwrap()
                .parts
                .iter()
                .map(|p| p.size)
                .sum::<u64>()
        })
        .sum()
}

/// Usage is what is stored: the tree's files, the in-flight parts, and no
/// private object.
fn assert_usage_is_what_is_stored(view: &WorkspaceBucket, root: &Path) {
    assert_eq!(
        view.private_objects("wsb").unwrap(),
        [],
        "no leftover object"
    );
    let files = view.list_view("wsb").unwrap();
    let tree: u64 = files.iter().map(|o| o.size).sum();
    for f in &files {
        assert_eq!(fs::metadata(root.join(&f.key)).unwrap().len(), f.size);
    }
    let usage = ObjectBackend::usage(view).unwrap();
    assert_eq!(
        (usage.bytes, usage.objects),
        (tree + parts_bytes(view), files.len() as u64)
    );
}

/// A file key's multipart completion killed between its steps (the parts
/// joined into a staged file; the file renamed into place) leaves no
/// private-store object behind, usage equal to what is stored, and the
/// upload in flight, which a retry completes; a retry after that answers
/// as the completion did.
#[test]
fn a_kill_during_a_file_keys_multipart_completion_leaves_no_object() {
    use std::os::unix::process::ExitStatusExt;

    for (point, file_after_kill) in [
        ("bucket-complete-joined", b"old".to_vec()),
        ("bucket-complete-installed", joined_bytes()),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        fs::create_dir(&root).unwrap();
        fs::write(root.join("seed.txt"), b"seed").unwrap();
        fs::write(root.join("big.bin"), b"old").unwrap();

        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "fault_child", "--nocapture", "--test-threads=1"])
            .env(FAULT_CHILD, tmp.path())
            .env(stow_checkpoint::fault::VAR, point)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert_eq!(
            status.signal(),
            Some(9),
            "{point}: killed at the fault point"
        );

        let view = WorkspaceBucket::open_with_quota(&root, "wsb", fault_quota()).unwrap();
        assert_eq!(
            fs::read(root.join("big.bin")).unwrap(),
            file_after_kill,
            "{point}"
        );
        assert_usage_is_what_is_stored(&view, &root);
        assert_eq!(
            parts_bytes(&view),
            BIG as u64 + 4,
            "{point}: the upload is in flight"
        );

        // The client's retry completes it.
        let saved = fs::read_to_string(tmp.path().join("upload")).unwrap();
        let mut lines = saved.lines().map(str::to_string);
        let upload_id = lines.next().unwrap();
        let listed = parts_of(&lines.collect::<Vec<_>>());
        let complete = || {
            ObjectBackend::complete_upload_checked(
                &view,
                "wsb",
                "big.bin",
                &upload_id,
                &listed,
                stow_store::WriteCondition::Always,
                None,
            )
        };
        let done = complete().unwrap();
        assert!(done.etag.ends_with("-2\""), "{}", done.etag);
        assert_eq!(fs::read(root.join("big.bin")).unwrap(), joined_bytes());
        assert_eq!(parts_bytes(&view), 0);
        assert_usage_is_what_is_stored(&view, &root);
        let head = ObjectBackend::head_object(&view, "wsb", "big.bin").unwrap();
        assert_eq!(
            (head.etag.as_str(), head.parts.len()),
            (done.etag.as_str(), 2)
        );

        // A retry after it (a lost reply) answers the same, changing nothing.
        let again = complete().unwrap();
        assert_eq!(again.etag, done.etag);
        assert_usage_is_what_is_stored(&view, &root);
        drop(view);

        // Reopened: still nothing left over.
        let view = WorkspaceBucket::open_with_quota(&root, "wsb", fault_quota()).unwrap();
        assert_usage_is_what_is_stored(&view, &root);
    }
}

/// A private object a file shadows (as a crash between an older version's
/// two completion steps left one) is dropped at open; one at a path that
/// holds no file is a visible object and stays.
#[test]
fn open_drops_private_objects_shadowed_by_files() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let view = WorkspaceBucket::open_with_quota(root, "wsb", fault_quota()).unwrap();
    fs::create_dir(root.join("d")).unwrap();
    // Written while `d` is a directory: private objects.
    put(&view, "wsb", "d", b"private d").unwrap();
    view.store()
        .put_object("wsb", "f.txt", &mut &b"leftover"[..], PutOptions::default())
        .unwrap();
    fs::write(root.join("f.txt"), b"the file").unwrap();
    drop(view);

    let view = WorkspaceBucket::open_with_quota(root, "wsb", fault_quota()).unwrap();
    let private: Vec<String> = view
        .private_objects("wsb")
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert_eq!(private, ["d"]);
    assert_eq!(view.read_bytes("wsb", "f.txt").unwrap().0, b"the file");
    assert_eq!(view.read_bytes("wsb", "d").unwrap().0, b"private d");
    let usage = ObjectBackend::usage(&view).unwrap();
    assert_eq!((usage.bytes, usage.objects), (8 + 9, 2));
}
