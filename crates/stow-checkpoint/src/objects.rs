//! The object snapshot of a portable (v2) capture: the private store's
//! buckets and objects, and the S3 properties of files.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use crate::error::{Result, WsError};
use crate::format::FileProps;
use crate::paths::is_sensitive;

/// One object read for a portable capture.
pub(super) struct SnapObject {
    pub(super) bucket: String,
    pub(super) key: String,
    pub(super) size: u64,
    pub(super) etag: String,
    pub(super) content_type: Option<String>,
    pub(super) metadata: BTreeMap<String, String>,
    pub(super) body: Vec<u8>,
}

pub(super) struct ObjectSnapshot {
    pub(super) buckets: Vec<String>,
    pub(super) objects: Vec<SnapObject>,
    pub(super) excluded: Vec<String>,
    /// S3 properties recorded for files of the primary bucket, by path.
    pub(super) file_props: HashMap<String, FileProps>,
}

pub(super) type ObjectIdentity = (String, String, u64, String);

impl ObjectSnapshot {
    pub(super) fn identity(&self) -> Vec<ObjectIdentity> {
        self.objects
            .iter()
            .map(|o| (o.bucket.clone(), o.key.clone(), o.size, o.etag.clone()))
            .collect()
    }
}

/// Reads every private-store object of a workspace (files of the primary
/// bucket are captured as files), through `owned` when this process owns
/// the view. A server in another process owns the store: capture then
/// reports `in_progress`.
pub(super) fn snapshot_objects(
    root: &Path,
    primary: &str,
    include_sensitive: bool,
    owned: Option<&crate::bucket::WorkspaceBucket>,
) -> Result<ObjectSnapshot> {
    let dir = crate::bucket::private_store_dir(root);
    let mut snap = ObjectSnapshot {
        buckets: vec![primary.to_string()],
        objects: Vec::new(),
        excluded: Vec::new(),
        file_props: HashMap::new(),
    };
    if owned.is_none() && !dir.exists() {
        return Ok(snap);
    }
    let opened;
    let view = match owned {
        Some(v) => v,
        None => {
            opened = crate::bucket::WorkspaceBucket::open(root, primary)?;
            &opened
        }
    };
    snap.file_props = view
        .file_properties()?
        .into_iter()
        .map(|(path, p)| {
            let props = FileProps {
                content_type: p.content_type,
                metadata: p.metadata,
            };
            (path, props)
        })
        .filter(|(_, p)| *p != FileProps::default())
        .collect();
    snap.buckets = view.bucket_names()?;
    if !snap.buckets.iter().any(|b| b == primary) {
        snap.buckets.push(primary.to_string());
        snap.buckets.sort();
    }
    for b in snap.buckets.clone() {
        for o in view.private_objects(&b)? {
            if crate::paths::is_reserved_path(&o.key) {
                continue;
            }
            if !include_sensitive && is_sensitive(&o.key) {
                snap.excluded.push(format!("s3://{b}/{}", o.key));
                continue;
            }
            let meta = view
                .store()
                .head_object(&b, &o.key)
                .map_err(|e| WsError::InvalidRequest(format!("object {b}/{}: {e}", o.key)))?;
            let (body, props) = view.read_bytes(&b, &o.key)?;
            snap.objects.push(SnapObject {
                bucket: b.clone(),
                key: o.key,
                size: body.len() as u64,
                etag: meta.etag,
                content_type: props.content_type,
                metadata: props.metadata,
                body,
            });
        }
    }
    Ok(snap)
}
