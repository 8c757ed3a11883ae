//! Validation of manifests from outside (an archive, a delta's result):
//! every rule a manifest must meet before anything it names is staged.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::format::{valid_sha, CheckpointManifest};
use crate::paths::check_checkpoint_id;

/// Largest payload a manifest may name (64 TiB): sums over 100,000
/// entries stay far from overflowing.
const MAX_PAYLOAD_BYTES: u64 = 1 << 46;

/// The longest path a manifest from outside may name (Linux's PATH_MAX).
const MAX_PATH_BYTES: usize = 4096;
/// The longest name of one path segment (Linux's NAME_MAX).
const MAX_NAME_BYTES: usize = 255;

/// A path of a manifest from outside: a checkpoint path
/// ([`crate::paths::check_checkpoint_path`]) that this machine could
/// also create, so what is accepted can be restored.
fn check_outside_path(path: &str) -> std::result::Result<(), String> {
    crate::paths::check_checkpoint_path(path).map_err(|e| e.to_string())?;
    if path.len() > MAX_PATH_BYTES {
        return Err(format!(
            "a path of {} bytes is longer than {MAX_PATH_BYTES}",
            path.len()
        ));
    }
    if let Some(seg) = path.split('/').find(|s| s.len() > MAX_NAME_BYTES) {
        return Err(format!(
            "{path}: a name of {} bytes is longer than {MAX_NAME_BYTES}",
            seg.len()
        ));
    }
    Ok(())
}

/// The first of `sorted` (sorted bytewise) that lies beneath `parent`.
fn first_beneath<'a>(sorted: &[&'a str], parent: &str) -> Option<&'a str> {
    let prefix = format!("{parent}/");
    let at = sorted.partition_point(|p| *p < prefix.as_str());
    sorted.get(at).copied().filter(|p| p.starts_with(&prefix))
}

/// A manifest's directory entries: valid paths, modes of permission bits
/// only, none listed twice. Returns their paths.
pub(crate) fn check_dirs(
    dirs: &[crate::DirectoryEntry],
) -> std::result::Result<HashSet<&str>, String> {
    let mut paths: HashSet<&str> = HashSet::new();
    for d in dirs {
        check_outside_path(&d.path)?;
        if d.mode > 0o777 || !paths.insert(d.path.as_str()) {
            return Err(format!("directory {} is malformed or listed twice", d.path));
        }
    }
    Ok(paths)
}

/// Every rule a manifest from outside (an archive, a delta's base) must
/// meet before anything is staged: versions and IDs, clean unique paths
/// that never nest under one another, digests, modes, and for portable
/// manifests valid unique buckets holding the primary and valid unique
/// objects in them. Returns the reason a manifest is refused.
///
/// Long on purpose: the rules one after another, in the order a manifest
/// is read; each is a few lines, and split up they would no longer read
/// as one list.
pub(crate) fn validate_manifest(m: &CheckpointManifest) -> std::result::Result<(), String> {
    let v2_fields = m.primary_bucket.is_some() || !m.buckets.is_empty() || !m.objects.is_empty();
    match m.version {
        1 if v2_fields => return Err("a version-1 manifest holds bucket fields".into()),
        1 => {}
        2 => {}
        v => {
            return Err(format!(
                "unsupported manifest version {v} (supported: 1, 2)"
            ))
        }
    }
    check_checkpoint_id(&m.id).map_err(|e| e.to_string())?;
    if let Some(message) = &m.message {
        crate::format::check_message(message).map_err(|e| e.to_string())?;
    }
    crate::paths::check_workspace_id(&m.workspace_id).map_err(|e| e.to_string())?;
    if let Some(p) = &m.parent_id {
        check_checkpoint_id(p).map_err(|e| format!("parent: {e}"))?;
        if *p == m.id {
            return Err("the checkpoint names itself as its parent".into());
        }
    }
    if m.created.is_empty() || m.created.len() > 64 {
        return Err("the manifest's created time is malformed".into());
    }
    // One size per digest: payloads are stored (and sized) by digest.
    let mut sizes: HashMap<&str, u64> = HashMap::new();
    fn same_size<'m>(
        sizes: &mut HashMap<&'m str, u64>,
        sha: &'m str,
        size: u64,
        what: &dyn std::fmt::Display,
    ) -> std::result::Result<(), String> {
        match sizes.insert(sha, size) {
            Some(other) if other != size => Err(format!(
                "{what}: {size} bytes, but the same digest elsewhere has {other}"
            )),
            _ => Ok(()),
        }
    }
    let mut paths: Vec<&str> = Vec::with_capacity(m.files.len());
    for f in &m.files {
        check_outside_path(&f.path)?;
        if !valid_sha(&f.sha256) {
            return Err(format!("{}: sha256 is not 64 lowercase hex digits", f.path));
        }
        if f.mode > 0o777 {
            return Err(format!("{}: mode {:o} is above 0777", f.path, f.mode));
        }
        if f.size > MAX_PAYLOAD_BYTES {
            return Err(format!("{}: size {} is implausible", f.path, f.size));
        }
        if m.version == 1 && (f.content_type.is_some() || !f.metadata.is_empty()) {
            return Err(format!(
                "{}: a version-1 file entry holds S3 properties",
                f.path
            ));
        }
        same_size(&mut sizes, &f.sha256, f.size, &f.path)?;
        check_props(&f.path, f.content_type.as_deref(), &f.metadata)?;
        paths.push(&f.path);
    }
    paths.sort_unstable();
    for pair in paths.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a == b {
            return Err(format!("{a} is listed twice"));
        }
    }
    // Directories and links: valid, unique, never the same path as a
    // file, and nothing lives beneath a link (restoring it would write
    // through the link).
    let dirs = check_dirs(&m.dirs)?;
    let mut links: HashSet<&str> = HashSet::new();
    for l in &m.links {
        check_outside_path(&l.path)?;
        if l.target.is_empty() || l.target.len() > 4096 || l.target.contains('\0') {
            return Err(format!("link {}: the target is malformed", l.path));
        }
        if !links.insert(l.path.as_str()) || dirs.contains(l.path.as_str()) {
            return Err(format!("link {} is listed twice", l.path));
        }
    }
    for p in &paths {
        if dirs.contains(p) || links.contains(p) {
            return Err(format!(
                "{p} is listed as a file and as a directory or link"
            ));
        }
    }
    // Nothing lies beneath a link (restoring it would write through the
    // link) or beneath a file ("a" and "a/b"). Found by binary search in
    // the sorted entries, so a deep tree costs no more than a wide one.
    let mut all: Vec<&str> = paths
        .iter()
        .copied()
        .chain(dirs.iter().copied())
        .chain(links.iter().copied())
        .collect();
    all.sort_unstable();
    for l in &links {
        if let Some(p) = first_beneath(&all, l) {
            return Err(format!("{p} lies beneath a symbolic link"));
        }
    }
    for f in &paths {
        if first_beneath(&all, f).is_some() {
            return Err(format!("{f} is both a file and a directory"));
        }
    }
    if m.version == 2 {
        let Some(primary) = &m.primary_bucket else {
            return Err("a version-2 manifest names no primary bucket".into());
        };
        let mut buckets = HashSet::new();
        for b in &m.buckets {
            stow_store::validate::bucket_name(b).map_err(|e| e.to_string())?;
            if !buckets.insert(b.as_str()) {
                return Err(format!("bucket {b} is listed twice"));
            }
        }
        if !buckets.contains(primary.as_str()) {
            return Err(format!("the primary bucket {primary} is not listed"));
        }
        let mut keys = HashSet::new();
        for o in &m.objects {
            if !buckets.contains(o.bucket.as_str()) {
                return Err(format!(
                    "object {}/{} names an unlisted bucket",
                    o.bucket, o.key
                ));
            }
            stow_store::validate::object_key(&o.key).map_err(|e| e.to_string())?;
            if crate::paths::is_reserved_path(&o.key) {
                return Err(format!(
                    "object {}/{}: .git and .stow never travel",
                    o.bucket, o.key
                ));
            }
            if !keys.insert((o.bucket.as_str(), o.key.as_str())) {
                return Err(format!("object {}/{} is listed twice", o.bucket, o.key));
            }
            if !valid_sha(&o.sha256) {
                return Err(format!(
                    "object {}/{}: sha256 is malformed",
                    o.bucket, o.key
                ));
            }
            let what = format!("object {}/{}", o.bucket, o.key);
            if o.size > MAX_PAYLOAD_BYTES {
                return Err(format!("{what}: size {} is implausible", o.size));
            }
            same_size(&mut sizes, &o.sha256, o.size, &what)?;
            check_props(&what, o.content_type.as_deref(), &o.metadata)?;
        }
    }
    Ok(())
}

/// S3 properties as the store accepts them: a content type of at most
/// 1024 bytes without line breaks; lower-case metadata keys, at most 2 KiB
/// of keys and values together.
fn check_props(
    what: &str,
    content_type: Option<&str>,
    metadata: &BTreeMap<String, String>,
) -> std::result::Result<(), String> {
    if let Some(ct) = content_type {
        if ct.len() > 1024 || ct.contains(['\r', '\n']) {
            return Err(format!("{what}: content type is malformed"));
        }
    }
    let total: usize = metadata.iter().map(|(k, v)| k.len() + v.len()).sum();
    if total > 2048
        || metadata
            .keys()
            .any(|k| k.is_empty() || *k != k.to_lowercase())
    {
        return Err(format!("{what}: metadata is malformed"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{DirectoryEntry, FileEntry, LinkEntry, ObjectEntry};

    fn file(path: &str, size: u64, sha: &str) -> FileEntry {
        FileEntry {
            path: path.into(),
            size,
            mode: 0o644,
            sha256: sha.repeat(32),
            ..FileEntry::default()
        }
    }

    fn object(bucket: &str, key: &str, size: u64, sha: &str) -> ObjectEntry {
        ObjectEntry {
            bucket: bucket.into(),
            key: key.into(),
            size,
            sha256: sha.repeat(32),
            content_type: None,
            metadata: BTreeMap::new(),
        }
    }

    fn manifest(files: Vec<FileEntry>, objects: Vec<ObjectEntry>) -> CheckpointManifest {
        let portable = !objects.is_empty();
        CheckpointManifest {
            version: if portable { 2 } else { 1 },
            id: format!("cp_{}", "a".repeat(24)),
            workspace_id: format!("ws_{}", "b".repeat(16)),
            parent_id: None,
            created: "2026-12-01T00:00:00Z".into(),
            files,
            excluded: vec![],
            primary_bucket: portable.then(|| "main".to_string()),
            buckets: if portable {
                vec!["main".into()]
            } else {
                vec![]
            },
            objects,
            ..Default::default()
        }
    }

    #[test]
    fn manifests_from_before_links_and_directories_still_read() {
        // The shape every checkpoint had before dirs, links, skipped and
        // ignored existed.
        let old = format!(
            r#"{{"version":1,"id":"cp_{}","workspace_id":"ws_{}","created":"2026-11-29T10:00:00Z",
                "files":[{{"path":"a.txt","size":1,"mode":420,"sha256":"{}"}}],"excluded":[".env"]}}"#,
            "a".repeat(24),
            "b".repeat(16),
            "c".repeat(64)
        );
        let m: CheckpointManifest = serde_json::from_str(&old).unwrap();
        assert!(m.dirs.is_empty() && m.links.is_empty() && m.skipped.is_empty());
        assert!(m.ignored.is_none());
        assert_eq!(validate_manifest(&m), Ok(()));
        // Written again, it is the same document (nothing new appears).
        let back: serde_json::Value = serde_json::to_value(&m).unwrap();
        let orig: serde_json::Value = serde_json::from_str(&old).unwrap();
        assert_eq!(back, orig);
    }

    #[test]
    fn outside_manifests_are_refused_for_each_broken_rule() {
        let ok = manifest(
            vec![file("a.txt", 3, "ab"), file("d/b.txt", 3, "ab")],
            vec![],
        );
        assert_eq!(validate_manifest(&ok), Ok(()));
        let refused = |m: CheckpointManifest, why: &str| {
            let err = validate_manifest(&m).expect_err(why);
            assert!(err.contains(why), "{why}: {err}");
        };
        // One digest, two sizes (a size the limits never saw).
        refused(
            manifest(
                vec![file("a", 3, "ab")],
                vec![object("main", "k", u64::MAX >> 20, "ab")],
            ),
            "the same digest elsewhere",
        );
        refused(
            manifest(
                vec![],
                vec![object("main", "k", 1, "cd"), object("main", "j", 9, "cd")],
            ),
            "the same digest elsewhere",
        );
        let mut own_parent = ok.clone();
        own_parent.parent_id = Some(own_parent.id.clone());
        refused(own_parent, "its parent");
        refused(
            manifest(vec![file("a", 1 << 50, "ab")], vec![]),
            "implausible",
        );
        let mut typed = ok.clone();
        typed.files[0].content_type = Some("text/plain".into());
        refused(typed, "version-1 file entry holds S3 properties");
        refused(
            manifest(vec![], vec![object("main", ".git/config", 1, "ab")]),
            ".git and .stow never travel",
        );
        refused(
            manifest(vec![file("a", 1, "ab"), file("a/b", 1, "cd")], vec![]),
            "both a file and a directory",
        );
        refused(
            manifest(vec![file("a", 1, "ab"), file("a", 1, "ab")], vec![]),
            "twice",
        );
        let mut mode = ok.clone();
        mode.files[0].mode = 0o4755;
        refused(mode, "above 0777");
        refused(manifest(vec![file("../x", 1, "ab")], vec![]), "..");
        // A link named like a directory a later entry lands in: restoring
        // it would write through the link.
        let link = |p: &str| LinkEntry {
            path: p.into(),
            target: "/etc".into(),
        };
        let mut m = manifest(vec![file("sub/f", 1, "ab")], vec![]);
        m.links = vec![link("sub")];
        refused(m, "beneath a symbolic link");
        let mut m = manifest(vec![], vec![]);
        m.links = vec![link("a"), link("a/b")];
        refused(m, "beneath a symbolic link");
        let mut m = manifest(vec![file("a", 1, "ab")], vec![]);
        m.links = vec![link("a")];
        refused(m, "as a file and as a directory or link");
        // Nothing beneath a file, a sibling sorting between them or not.
        let mut m = manifest(vec![file("a", 1, "ab"), file("a-b", 1, "ab")], vec![]);
        m.dirs = vec![DirectoryEntry {
            path: "a/d".into(),
            mode: 0o755,
        }];
        refused(m, "both a file and a directory");
        let mut m = manifest(vec![file("a!", 1, "ab"), file("a/x", 1, "cd")], vec![]);
        m.links = vec![link("a")];
        refused(m, "beneath a symbolic link");
        // Names and paths this machine could not create.
        refused(
            manifest(vec![file(&"n".repeat(256), 1, "ab")], vec![]),
            "longer than 255",
        );
        let deep = vec!["d"; 2100].join("/");
        refused(
            manifest(vec![file(&deep, 1, "ab")], vec![]),
            "longer than 4096",
        );
        let mut m = manifest(vec![], vec![]);
        m.links = vec![LinkEntry {
            path: "l".into(),
            target: String::new(),
        }];
        refused(m, "target is malformed");
        let mut m = ok.clone();
        m.links = vec![LinkEntry {
            path: "bin/tool".into(),
            target: "../../outside/anything".into(),
        }];
        m.dirs = vec![DirectoryEntry {
            path: "empty".into(),
            mode: 0o700,
        }];
        assert_eq!(validate_manifest(&m), Ok(()), "a target is data");
    }
}
