//! The workspace bucket view (D4) and portable (v2) checkpoints.

use std::fs;

use stow_store::ObjectProps;
use stow_workspace::bucket::WorkspaceBucket;
use stow_workspace::checkpoint::{self, CaptureOptions};
use stow_workspace::restore::{restore, RestoreLimits};
use stow_workspace::{prepare, Registry};

fn portable() -> CaptureOptions<'static> {
    CaptureOptions {
        portable: true,
        ..Default::default()
    }
}

#[test]
fn bucket_view_and_portable_checkpoints() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    fs::create_dir(dir.join("in")).unwrap();
    fs::write(dir.join("in/seed.txt"), "seed").unwrap();
    fs::write(
        dir.join("t.json"),
        r#"{"version":1,"root":"ws","registry_dir":"reg","inputs":[{"source":"in","destination":"."}]}"#,
    )
    .unwrap();
    let p = prepare(&dir.join("t.json")).unwrap();
    let reg = Registry::resolve(Some(&dir.join("reg")), None).unwrap();
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
        ("third", "added")
    );
    let objs: Vec<(String, &str)> = d
        .objects
        .unwrap()
        .into_iter()
        .map(|o| (o.key, o.kind))
        .collect();
    // Sorted by bucket, then key.
    assert_eq!(
        objs,
        vec![
            ("x/y.txt".to_string(), "changed"),
            ("odd:key".to_string(), "deleted")
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
