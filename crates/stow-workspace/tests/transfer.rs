//! Transfer of portable checkpoints (bucket objects travel in archives and
//! deltas), and properties of the archive reader and the delta decoder:
//! random corruption never panics and never leaves anything in a registry.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use stow_checkpoint::archive::{self, ArchiveLimits, ExportOptions, ImportOptions};
use stow_checkpoint::bucket::WorkspaceBucket;
use stow_checkpoint::delta::{self, ApplyOptions, DeltaOptions};
use stow_checkpoint::{self as checkpoint, CaptureOptions, CaptureSpec};
use stow_store::ObjectProps;
use stow_workspace::restore::{restore, RestoreLimits};
use stow_workspace::{prepare, Registry, WorkspaceResult};

fn workspace(dir: &Path) -> (WorkspaceResult, Registry) {
    fs::create_dir_all(dir.join("in/sub")).unwrap();
    fs::write(dir.join("in/seed.txt"), "seed").unwrap();
    fs::write(dir.join("in/sub/data.bin"), vec![7u8; 70_000]).unwrap();
    fs::write(
        dir.join("t.json"),
        r#"{"version":1,"root":"ws","registry_dir":"reg","inputs":[{"source":"in","destination":"."}]}"#,
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

fn typed(ct: &str) -> ObjectProps {
    ObjectProps {
        content_type: Some(ct.into()),
        metadata: BTreeMap::from([("origin".to_string(), "test".to_string())]),
        ..Default::default()
    }
}

/// Every path under `dir` with its bytes, or a marker for directories.
fn listing(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(d: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        let Ok(rd) = fs::read_dir(d) else { return };
        for e in rd.flatten() {
            let p = e.path();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                out.insert(p.clone(), b"<dir>".to_vec());
                walk(&p, out);
            } else if ft.is_file() {
                // Lock files are opened, never written; their presence is
                // what matters.
                out.insert(p.clone(), fs::read(&p).unwrap_or_default());
            } else {
                out.insert(p, b"<other>".to_vec());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, &mut out);
    out
}

#[test]
fn portable_checkpoints_travel_with_their_objects() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (p, reg) = workspace(dir);
    let b = p.bucket.as_str();
    {
        let view = WorkspaceBucket::open(&p.root, b).unwrap();
        view.put_bytes(b, "odd:key", b"colon", typed("text/x-odd"))
            .unwrap();
        view.ensure_bucket("extra").unwrap();
        view.ensure_bucket("empty").unwrap();
        view.put_bytes("extra", "x/y.txt", b"extra bytes", typed("text/plain"))
            .unwrap();
        // Two objects with one body: one payload entry in the archive.
        view.put_bytes("extra", "same", b"extra bytes", ObjectProps::default())
            .unwrap();
        view.put_bytes(b, "docs/typed.csv", b"a,b\n", typed("text/csv"))
            .unwrap();
    }
    let c1 = checkpoint::capture(&reg, &p.workspace_id, &portable()).unwrap();
    let out = dir.join("cp.tar.gz");
    let e = archive::export(&reg, &c1.checkpoint_id, &out, &ExportOptions::default()).unwrap();
    assert_eq!(e.files, 3);
    let pv = archive::preview(&out, ArchiveLimits::default()).unwrap();
    assert_eq!(pv.format_version, 2);
    assert_eq!(pv.primary_bucket.as_deref(), Some(b));
    let keys: Vec<(String, String)> = pv
        .objects
        .unwrap()
        .into_iter()
        .map(|o| (o.bucket, o.key))
        .collect();
    assert_eq!(
        keys,
        vec![
            ("extra".into(), "same".into()),
            ("extra".into(), "x/y.txt".into()),
            (b.to_string(), "odd:key".into()),
        ]
    );
    let mut names = Vec::new();
    let gz = flate2::read::MultiGzDecoder::new(fs::File::open(&out).unwrap());
    for entry in tar::Archive::new(gz).entries().unwrap() {
        names.push(entry.unwrap().path().unwrap().display().to_string());
    }
    assert_eq!(
        names.iter().filter(|n| n.starts_with("objects/")).count(),
        2
    );

    // Into another registry, then a new root: files, objects, buckets and
    // properties as captured.
    let reg2 = Registry::resolve(Some(&dir.join("reg2")), None).unwrap();
    let imported = archive::import(&reg2, &out, &ImportOptions::default()).unwrap();
    assert_eq!(imported.checkpoint_id, c1.checkpoint_id);
    assert_eq!(imported.objects, Some(3));
    let r = restore(
        &reg2,
        &c1.checkpoint_id,
        &dir.join("restored"),
        RestoreLimits::default(),
    )
    .unwrap();
    assert_eq!(r.bucket, b);
    let view = WorkspaceBucket::open(&r.root, b).unwrap();
    assert_eq!(
        view.bucket_names().unwrap(),
        vec!["empty".to_string(), "extra".into(), b.to_string()]
    );
    let (body, props) = view.read_bytes(b, "odd:key").unwrap();
    assert_eq!(
        (body.as_slice(), props.content_type.as_deref()),
        (&b"colon"[..], Some("text/x-odd"))
    );
    assert_eq!(
        props.metadata.get("origin").map(String::as_str),
        Some("test")
    );
    assert_eq!(view.read_bytes("extra", "same").unwrap().0, b"extra bytes");
    let (csv, props) = view.read_bytes(b, "docs/typed.csv").unwrap();
    assert_eq!(
        (csv.as_slice(), props.content_type.as_deref()),
        (&b"a,b\n"[..], Some("text/csv"))
    );
    assert_eq!(
        fs::read(r.root.join("sub/data.bin")).unwrap(),
        vec![7u8; 70_000]
    );
}

#[test]
fn portable_deltas_carry_object_and_bucket_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (p, reg) = workspace(dir);
    let b = p.bucket.as_str();
    {
        let view = WorkspaceBucket::open(&p.root, b).unwrap();
        view.ensure_bucket("extra").unwrap();
        view.put_bytes("extra", "keep", b"kept", ObjectProps::default())
            .unwrap();
        view.put_bytes("extra", "change", b"v1", ObjectProps::default())
            .unwrap();
        view.put_bytes("extra", "drop", b"gone soon", ObjectProps::default())
            .unwrap();
    }
    let base = checkpoint::capture(&reg, &p.workspace_id, &portable()).unwrap();
    {
        let view = WorkspaceBucket::open(&p.root, b).unwrap();
        view.put_bytes("extra", "change", b"v2 longer", typed("text/plain"))
            .unwrap();
        view.remove("extra", "drop").unwrap();
        view.ensure_bucket("later").unwrap();
        view.put_bytes("later", "new", b"new object", ObjectProps::default())
            .unwrap();
        view.put_bytes(b, "odd:key", b"colon", ObjectProps::default())
            .unwrap();
    }
    fs::write(p.root.join("seed.txt"), "seed, edited").unwrap();
    fs::remove_file(p.root.join("sub/data.bin")).unwrap();
    let target = checkpoint::capture(&reg, &p.workspace_id, &portable()).unwrap();
    let doc = dir.join("d.json");
    let d = delta::delta(
        &reg,
        &base.checkpoint_id,
        &target.checkpoint_id,
        &doc,
        DeltaOptions::default(),
    )
    .unwrap();
    assert_eq!(d.version, 2);
    assert_eq!((d.files, d.objects), (2, Some(4)));
    let decoded = delta::read_document(&doc, Some(&d.sha256)).unwrap();
    assert_eq!(decoded.bucket_changes.len(), 1);
    let applied = delta::apply(
        &reg,
        &doc,
        &base.checkpoint_id,
        &ApplyOptions {
            expect_sha256: Some(d.sha256.clone()),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        applied.parent_checkpoint_id.as_deref(),
        Some(base.checkpoint_id.as_str())
    );
    let diff = checkpoint::diff(&reg, &applied.checkpoint_id, &target.checkpoint_id).unwrap();
    assert!(diff.changes.is_empty(), "{:?}", diff.changes);
    assert_eq!(diff.objects.as_deref(), Some(&[][..]));
    assert_eq!(diff.buckets.as_deref(), Some(&[][..]));
    let a = checkpoint::verify(&reg, &applied.checkpoint_id).unwrap();
    let t = checkpoint::load_manifest(&reg, &target.checkpoint_id).unwrap();
    assert_eq!(a.objects, t.objects);
    assert_eq!(a.files, t.files);
    // The base has diverged from a delta recorded against the target.
    let back = dir.join("back.json");
    delta::delta(
        &reg,
        &target.checkpoint_id,
        &base.checkpoint_id,
        &back,
        DeltaOptions::default(),
    )
    .unwrap();
    let before = listing(&dir.join("reg"));
    let err = delta::apply(&reg, &back, &base.checkpoint_id, &ApplyOptions::default()).unwrap_err();
    assert_eq!(err.code(), "delta_conflict", "{err}");
    assert_eq!(before, listing(&dir.join("reg")));
}

/// A registry with one exported checkpoint and a delta from its parent.
struct Fixture {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    reg: Registry,
    archive: Vec<u8>,
    base: String,
    delta: Vec<u8>,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let (p, reg) = workspace(&dir);
    let base = checkpoint::capture(&reg, &p.workspace_id, &CaptureOptions::default()).unwrap();
    fs::write(p.root.join("new.txt"), "a new file").unwrap();
    fs::write(p.root.join("seed.txt"), "changed").unwrap();
    let target = checkpoint::capture(&reg, &p.workspace_id, &CaptureOptions::default()).unwrap();
    let out = dir.join("a.tar.gz");
    archive::export(&reg, &target.checkpoint_id, &out, &ExportOptions::default()).unwrap();
    let d = dir.join("d.json");
    delta::delta(
        &reg,
        &base.checkpoint_id,
        &target.checkpoint_id,
        &d,
        DeltaOptions::default(),
    )
    .unwrap();
    Fixture {
        archive: fs::read(&out).unwrap(),
        delta: fs::read(&d).unwrap(),
        dir,
        reg,
        _tmp: tmp,
        base: base.checkpoint_id,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    /// Flipped bytes or a cut anywhere in a valid archive: preview and
    /// import refuse cleanly (or, when the damage hit bytes gzip ignores,
    /// import the very same checkpoint); a refused import leaves the
    /// registry exactly as it was.
    #[test]
    fn corrupt_archives_never_panic_or_leave_anything(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 0..4),
        cut in proptest::option::of(any::<prop::sample::Index>()),
    ) {
        let f = fixture();
        let mut bytes = f.archive.clone();
        for (at, x) in &flips {
            let i = at.index(bytes.len());
            bytes[i] ^= x;
        }
        if let Some(c) = cut {
            bytes.truncate(c.index(bytes.len()));
        }
        let path = f.dir.join("hostile.tar.gz");
        fs::write(&path, &bytes).unwrap();
        let reg2 = Registry::resolve(Some(&f.dir.join("reg2")), None).unwrap();
        let before = listing(&f.dir.join("reg2"));
        let preview = archive::preview(&path, ArchiveLimits::default());
        match archive::import(&reg2, &path, &ImportOptions::default()) {
            Ok(r) => {
                prop_assert!(preview.is_ok());
                let m = checkpoint::verify(&reg2, &r.checkpoint_id).unwrap();
                let orig = checkpoint::load_manifest(&f.reg, &r.checkpoint_id).unwrap();
                prop_assert_eq!(m.files, orig.files);
            }
            Err(e) => {
                prop_assert!(
                    ["invalid_archive", "capacity_exceeded", "sensitive_path"].contains(&e.code()),
                    "{}", e
                );
                prop_assert!(preview.is_err());
                // Only the lock file and empty state directories may appear.
                let after: Vec<PathBuf> = listing(&f.dir.join("reg2"))
                    .into_iter()
                    .filter(|(p, v)| !before.contains_key(p) && v.as_slice() != b"<dir>")
                    .map(|(p, _)| p)
                    .filter(|p| !p.ends_with("registry.lock"))
                    .collect();
                prop_assert!(after.is_empty(), "left behind: {:?}", after);
            }
        }
    }

    /// The same for delta documents: a damaged document is refused before
    /// anything is written, or (when the damage left it valid JSON with a
    /// consistent meaning) applies to a checkpoint that verifies.
    #[test]
    fn corrupt_deltas_never_panic_or_leave_anything(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
    ) {
        let f = fixture();
        let mut bytes = f.delta.clone();
        for (at, x) in &flips {
            let i = at.index(bytes.len());
            bytes[i] ^= x;
        }
        let path = f.dir.join("hostile.json");
        fs::write(&path, &bytes).unwrap();
        let before = listing(&f.dir.join("reg"));
        match delta::apply(&f.reg, &path, &f.base, &ApplyOptions::default()) {
            Ok(r) => {
                checkpoint::verify(&f.reg, &r.checkpoint_id).unwrap();
            }
            Err(_) => {
                prop_assert_eq!(before, listing(&f.dir.join("reg")));
            }
        }
    }
}

#[test]
fn an_adopt_whose_restore_fails_reports_partial_import_and_keeps_the_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (p, reg) = workspace(dir);
    let c = checkpoint::capture(&reg, &p.workspace_id, &CaptureOptions::default()).unwrap();
    let out = dir.join("out");
    fs::create_dir(&out).unwrap();
    stow_workspace::handoff::handoff(
        &reg,
        &p.workspace_id,
        Some(&c.checkpoint_id),
        Some(&out.join("cp.tar.gz")),
        Some(&out.join("handoff.json")),
    )
    .unwrap();
    // The receiving registry is at its standing bound of one workspace:
    // the import is admitted (checkpoints are not bounded), the restore is
    // not.
    fs::create_dir_all(dir.join("other/in")).unwrap();
    fs::write(dir.join("other/in/x.txt"), "x").unwrap();
    fs::write(
        dir.join("other/t.json"),
        r#"{"version":1,"root":"ws","registry_dir":"reg","inputs":[{"source":"in","destination":"."}]}"#,
    )
    .unwrap();
    prepare(&dir.join("other/t.json")).unwrap();
    let reg2 = Registry::resolve(Some(&dir.join("other/reg")), None).unwrap();
    stow_workspace::admin::policy_set(
        &reg2,
        stow_workspace::admin::PolicyUpdate {
            max_workspaces: Some(1),
            ..Default::default()
        },
    )
    .unwrap();
    let err = stow_workspace::handoff::adopt(
        Some(&dir.join("other/reg")),
        None,
        &out.join("handoff.json"),
        &dir.join("adopted"),
        &Default::default(),
    )
    .unwrap_err();
    assert_eq!(err.code(), "partial_import", "{err}");
    assert!(!dir.join("adopted").exists());
    checkpoint::verify(&reg2, &c.checkpoint_id).unwrap();
}

/// Every file under `dir`, with its bytes (for "nothing was written").
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.insert(
                    p.strip_prefix(dir).unwrap().to_path_buf(),
                    fs::read(&p).unwrap(),
                );
            }
        }
    }
    out
}

/// A copy of the archive `from` whose manifest says something else
/// (another creation time) under the same checkpoint ID, written to `to`.
fn with_another_manifest(from: &Path, to: &Path) {
    use std::io::Read as _;
    let gz = flate2::read::GzDecoder::new(fs::File::open(from).unwrap());
    let mut input = tar::Archive::new(gz);
    let out = flate2::write::GzEncoder::new(fs::File::create(to).unwrap(), Default::default());
    let mut builder = tar::Builder::new(out);
    for entry in input.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().to_string_lossy().into_owned();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        if name == "manifest.json" {
            let mut doc: serde_json::Value = serde_json::from_slice(&data).unwrap();
            let created = &mut doc["manifest"]["created"];
            assert!(created.is_string() && *created != "2001-02-03T04:05:06Z");
            *created = "2001-02-03T04:05:06Z".into();
            data = serde_json::to_vec(&doc).unwrap();
        }
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        builder.append_data(&mut h, &name, &data[..]).unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap();
}

#[test]
fn adopting_a_checkpoint_the_registry_holds_reuses_it_when_the_manifest_is_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (p, reg) = workspace(dir);
    let c = checkpoint::capture(&reg, &p.workspace_id, &CaptureOptions::default()).unwrap();
    let out = dir.join("out");
    fs::create_dir(&out).unwrap();
    let handoff = out.join("handoff.json");
    stow_workspace::handoff::handoff(
        &reg,
        &p.workspace_id,
        Some(&c.checkpoint_id),
        Some(&out.join("cp.tar.gz")),
        Some(&handoff),
    )
    .unwrap();
    let checkpoints = reg.state_dir().join("checkpoints");
    let blobs = reg.state_dir().join("blobs");
    let before = (tree(&checkpoints), tree(&blobs));

    // The same registry adopts its own handoff: the checkpoint is reused
    // (nothing written to the checkpoints or blobs) and restored.
    let adopted = stow_workspace::handoff::adopt(
        Some(&dir.join("reg")),
        None,
        &handoff,
        &dir.join("adopted"),
        &Default::default(),
    )
    .unwrap();
    assert_ne!(adopted.workspace_id, p.workspace_id);
    assert_eq!(fs::read(dir.join("adopted/seed.txt")).unwrap(), b"seed");
    assert_eq!(
        fs::read(dir.join("adopted/sub/data.bin")).unwrap(),
        vec![7u8; 70_000]
    );
    assert_eq!((tree(&checkpoints), tree(&blobs)), before);
    checkpoint::verify(&reg, &c.checkpoint_id).unwrap();

    // A plain import still refuses an ID the registry holds.
    let err = archive::import(&reg, &out.join("cp.tar.gz"), &ImportOptions::default()).unwrap_err();
    assert_eq!(err.code(), "already_exists", "{err}");

    // A different manifest under the same ID is refused, before anything
    // is created.
    let tampered = out.join("tampered.tar.gz");
    with_another_manifest(&out.join("cp.tar.gz"), &tampered);
    let (sha, bytes) = archive::file_sha256(&tampered).unwrap();
    let mut doc: serde_json::Value = serde_json::from_slice(&fs::read(&handoff).unwrap()).unwrap();
    doc["archive"]["path"] = "tampered.tar.gz".into();
    doc["archive"]["sha256"] = sha.into();
    doc["archive"]["bytes"] = bytes.into();
    let tampered_doc = out.join("tampered.json");
    fs::write(&tampered_doc, serde_json::to_vec(&doc).unwrap()).unwrap();
    let err = stow_workspace::handoff::adopt(
        Some(&dir.join("reg")),
        None,
        &tampered_doc,
        &dir.join("adopted-2"),
        &Default::default(),
    )
    .unwrap_err();
    assert_eq!(err.code(), "already_exists", "{err}");
    assert!(!dir.join("adopted-2").exists());
    assert_eq!((tree(&checkpoints), tree(&blobs)), before);
    // The tampered archive is itself well formed: only the ID clash
    // refuses it (a registry without that checkpoint imports it).
    let (_, other) = workspace(&dir.join("fresh"));
    archive::import(&other, &tampered, &ImportOptions::default()).unwrap();
}
