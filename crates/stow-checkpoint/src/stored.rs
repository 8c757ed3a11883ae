//! Checkpoints as stored: reading a published `manifest.json` in either
//! layout — the flat one (every checkpoint before tree manifests, and what
//! import, pull and apply write) or the tree one (`tree`, expanded here
//! through `tree::load_tree`) — into one [`CheckpointManifest`]. Kept apart
//! from `format` (the types) so that `tree` (which builds from those types)
//! and `format` never import each other.

use serde::Deserialize;

use crate::error::{Result, WsError};
use crate::format::{
    load_json, valid_sha, CheckpointManifest, DirectoryEntry, FileEntry, Ignored, LinkEntry,
    ObjectEntry, SkippedEntry,
};
use crate::layout::checkpoints_dir;
use crate::paths::check_checkpoint_id;
use crate::registry::Registry;

/// `manifest.json` as stored: either layout. The flat one (every
/// checkpoint before tree manifests, and what import, pull and apply
/// write) lists `files` (and `dirs`, `links`, `skipped`); the tree one
/// names its root node in `tree`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredManifest {
    version: u32,
    id: String,
    workspace_id: String,
    #[serde(default)]
    parent_id: Option<String>,
    created: String,
    #[serde(default)]
    files: Option<Vec<FileEntry>>,
    #[serde(default)]
    tree: Option<String>,
    #[serde(default)]
    excluded: Vec<String>,
    #[serde(default)]
    primary_bucket: Option<String>,
    #[serde(default)]
    buckets: Vec<String>,
    #[serde(default)]
    objects: Vec<ObjectEntry>,
    #[serde(default)]
    dirs: Vec<DirectoryEntry>,
    #[serde(default)]
    links: Vec<LinkEntry>,
    #[serde(default)]
    skipped: Vec<SkippedEntry>,
    #[serde(default)]
    ignored: Option<Ignored>,
    #[serde(default)]
    message: Option<String>,
}

/// A checkpoint's manifest version (2: portable) and the root tree node
/// it names (`None` for the flat layout), without expanding the tree.
pub(crate) fn layout(registry: &Registry, id: &str) -> Result<(u32, Option<String>)> {
    check_checkpoint_id(id)?;
    let s: StoredManifest = load_json(&checkpoints_dir(registry).join(id).join("manifest.json"))?;
    Ok((s.version, s.tree))
}

/// Loads a published checkpoint manifest (either layout).
pub fn load_manifest(registry: &Registry, id: &str) -> Result<CheckpointManifest> {
    Ok(load_manifest_with_nodes(registry, id)?.0)
}

/// Loads a published checkpoint manifest and the digests of the tree
/// nodes it is stored in (none for the flat layout): the blobs it names
/// besides its payloads.
pub(crate) fn load_manifest_with_nodes(
    registry: &Registry,
    id: &str,
) -> Result<(CheckpointManifest, Vec<String>)> {
    check_checkpoint_id(id)?;
    let dir = checkpoints_dir(registry).join(id);
    if !dir.is_dir() {
        return Err(WsError::NotFound(format!("checkpoint {id}")));
    }
    let s: StoredManifest = load_json(&dir.join("manifest.json"))?;
    let mismatch = || WsError::Corrupt(format!("checkpoint {id} manifest does not match"));
    let (files, dirs, links, skipped, nodes) = match (s.files, s.tree) {
        (Some(files), None) => (files, s.dirs, s.links, s.skipped, Vec::new()),
        (None, Some(root)) if s.dirs.is_empty() && s.links.is_empty() && s.skipped.is_empty() => {
            let t = crate::tree::load_tree(registry, &root)?;
            (t.files, t.dirs, t.links, t.skipped, t.nodes)
        }
        _ => return Err(mismatch()),
    };
    let m = CheckpointManifest {
        version: s.version,
        id: s.id,
        workspace_id: s.workspace_id,
        parent_id: s.parent_id,
        created: s.created,
        files,
        excluded: s.excluded,
        primary_bucket: s.primary_bucket,
        buckets: s.buckets,
        objects: s.objects,
        dirs,
        links,
        skipped,
        ignored: s.ignored,
        message: s.message,
    };
    let v2_fields = m.primary_bucket.is_some() || !m.buckets.is_empty() || !m.objects.is_empty();
    let consistent = match m.version {
        1 => !v2_fields,
        2 => m.primary_bucket.is_some(),
        _ => false,
    };
    let digests_ok = m
        .files
        .iter()
        .map(|f| &f.sha256)
        .chain(m.objects.iter().map(|o| &o.sha256))
        .all(|d| valid_sha(d));
    let modes_ok = m.files.iter().all(|f| f.mode <= 0o777);
    if m.id != id || !consistent || !digests_ok || !modes_ok {
        return Err(mismatch());
    }
    Ok((m, nodes))
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};
    use std::fs;

    use super::*;
    use crate::blobs::blob_path;
    use crate::format::*;
    use crate::fsutil::hex;
    use crate::scan::{Scan, Scanned};
    use crate::tree;

    #[test]
    fn a_tree_manifest_loads_as_the_flat_manifest_it_stands_for() {
        let files = vec![
            Scanned::for_test("a.txt", 3),
            Scanned::for_test("d/b \"q\".bin", 0),
        ];
        let produced: Vec<[u8; 32]> = vec![[0xab; 32], [0xcd; 32]];
        let object = ObjectEntry {
            bucket: "other".into(),
            key: "k:1".into(),
            size: 5,
            sha256: "ef".repeat(32),
            content_type: Some("text/plain".into()),
            metadata: BTreeMap::from([("m".into(), "v".into())]),
        };
        let excluded = vec![".env".to_string()];
        let dirs = vec![
            DirectoryEntry {
                path: "bin".into(),
                mode: 0o755,
            },
            DirectoryEntry {
                path: "d".into(),
                mode: 0o700,
            },
        ];
        let links = vec![LinkEntry {
            path: "bin/tool".into(),
            target: "../node_modules/x/\"q\".js".into(),
        }];
        let skipped = vec![SkippedEntry {
            path: "dev.sock".into(),
            reason: "a socket is not captured".into(),
        }];
        let ignored = Ignored::of(&["build/".to_string(), "x.log".to_string()]);
        let buckets = vec!["main".to_string(), "other".to_string()];
        // A portable capture keeps S3 properties of files (here: both kinds
        // on one file, a content type alone on the other).
        let file_props = HashMap::from([
            (
                "a.txt".to_string(),
                FileProps {
                    content_type: Some("text/csv".into()),
                    metadata: BTreeMap::from([("k".into(), "v \"q\"".into())]),
                },
            ),
            (
                "d/b \"q\".bin".to_string(),
                FileProps {
                    content_type: Some("application/x-b".into()),
                    metadata: BTreeMap::new(),
                },
            ),
        ]);
        let scan = Scan {
            files: files.clone(),
            dirs: dirs.clone(),
            links: links.clone(),
            skipped: skipped.clone(),
            ..Scan::default()
        };
        for (n, (parent, portable)) in [(None, false), (Some("cp_parent"), true)]
            .into_iter()
            .enumerate()
        {
            let t = tempfile::tempdir().unwrap();
            let registry = Registry::resolve(Some(t.path()), None).unwrap();
            let id = format!("cp_{n:024}");
            let built =
                tree::build(&scan, &produced, portable.then_some(&file_props), &|_| None).unwrap();
            for (sha, bytes) in &built.nodes {
                let p = blob_path(&registry, &hex(sha));
                fs::create_dir_all(p.parent().unwrap()).unwrap();
                fs::write(p, bytes).unwrap();
            }
            let objects = if portable {
                vec![object.clone()]
            } else {
                vec![]
            };
            let root = hex(&built.root);
            let view = ManifestView {
                version: if portable { 2 } else { 1 },
                id: &id,
                workspace_id: "ws_y",
                parent_id: parent,
                created: "2026-11-30T00:00:00Z",
                tree: &root,
                excluded: &excluded,
                primary_bucket: portable.then_some("main"),
                buckets: if portable { &buckets } else { &[] },
                objects: &objects,
                ignored: ignored.as_ref(),
                message: None,
            };
            let dir = checkpoints_dir(&registry).join(&id);
            fs::create_dir_all(&dir).unwrap();
            fs::write(
                dir.join("manifest.json"),
                erased::Ser::bytes(&view).unwrap(),
            )
            .unwrap();
            let owned = CheckpointManifest {
                version: view.version,
                id: id.clone(),
                workspace_id: "ws_y".into(),
                parent_id: parent.map(str::to_string),
                created: "2026-11-30T00:00:00Z".into(),
                files: files
                    .iter()
                    .zip(&produced)
                    .map(|(f, p)| {
                        let props = file_props
                            .get(&*f.path)
                            .filter(|_| portable)
                            .cloned()
                            .unwrap_or_default();
                        FileEntry {
                            path: f.path.to_string(),
                            size: f.size,
                            mode: f.mode,
                            sha256: hex(p),
                            content_type: props.content_type,
                            metadata: props.metadata,
                        }
                    })
                    .collect(),
                excluded: excluded.clone(),
                primary_bucket: portable.then(|| "main".to_string()),
                buckets: if portable { buckets.clone() } else { vec![] },
                objects: objects.clone(),
                dirs: dirs.clone(),
                links: links.clone(),
                skipped: skipped.clone(),
                ignored: ignored.clone(),
                message: None,
            };
            let (loaded, nodes) = load_manifest_with_nodes(&registry, &id).unwrap();
            let enc = |v: &dyn erased::Ser| String::from_utf8(v.bytes().unwrap()).unwrap();
            assert_eq!(enc(&loaded), enc(&owned));
            assert_eq!(nodes.len(), built.nodes.len());

            // A node that is missing or altered makes the checkpoint corrupt.
            let p = blob_path(&registry, &hex(&built.nodes[0].0));
            let mut bytes = fs::read(&p).unwrap();
            *bytes.last_mut().unwrap() ^= 1;
            fs::write(&p, &bytes).unwrap();
            assert!(matches!(
                load_manifest(&registry, &id),
                Err(WsError::Corrupt(_))
            ));
            fs::remove_file(&p).unwrap();
            assert!(matches!(
                load_manifest(&registry, &id),
                Err(WsError::Corrupt(_))
            ));
        }
    }
}
