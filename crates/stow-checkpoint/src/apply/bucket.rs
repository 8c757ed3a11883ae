//! A portable checkpoint's bucket view, rewound after its files: the
//! private objects (keys outside the file view, other buckets), the
//! buckets, and the files' S3 properties made the target's.
//!
//! Each object is compared first with what the undo checkpoint recorded
//! (its bytes hashed): one written since is left alone and reported as a
//! conflict; a replacement is written only if the object is still the one
//! read (`If-Match` its ETag, or `If-None-Match` for a new key), so an S3
//! write racing the rewind is never overwritten. An object already as the
//! target has it counts as done, so finishing an interrupted rewind runs
//! the same comparison again.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;

use sha2::{Digest, Sha256};
use stow_store::{ObjectProps, PutOptions, StoreError, WriteCondition};

use super::steps::{Applied, Conflict};
use crate::blobs::open_verified;
use crate::bucket::WorkspaceBucket;
use crate::error::{Result, WsError};
use crate::format::{object_as_file, CheckpointManifest, ObjectEntry};
use crate::fsutil::hex;
use crate::registry::{Record, Registry};
use crate::stored::load_manifest;

/// An object as the store holds it now: its SHA-256 and ETag.
struct Current {
    sha256: String,
    etag: String,
    props: ObjectProps,
}

fn props_of(o: &ObjectEntry) -> ObjectProps {
    ObjectProps {
        content_type: o.content_type.clone(),
        metadata: o.metadata.clone(),
        ..Default::default()
    }
}

fn store_error(what: &str, e: StoreError) -> WsError {
    WsError::InvalidRequest(format!("{what}: {e}"))
}

fn current(view: &WorkspaceBucket, bucket: &str, key: &str) -> Result<Option<Current>> {
    let mut read = match view.store().get_object(bucket, key, None) {
        Ok(r) => r,
        Err(StoreError::NoSuchKey { .. } | StoreError::NoSuchBucket { .. }) => return Ok(None),
        Err(e) => return Err(store_error(&format!("read object {bucket}/{key}"), e)),
    };
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let n = read
            .body
            .read(&mut buf)
            .map_err(|e| WsError::io(format!("read object {bucket}/{key}"), e))?;
        if n == 0 {
            break;
        }
        h.update(buf.get(..n).unwrap_or_default());
    }
    Ok(Some(Current {
        sha256: hex(&h.finalize()),
        etag: read.meta.etag.clone(),
        props: read.meta.props.clone(),
    }))
}

/// Whether `now` is the object `entry` records (bytes and properties).
fn is(now: Option<&Current>, entry: Option<&ObjectEntry>) -> bool {
    match (now, entry) {
        (None, None) => true,
        (Some(c), Some(o)) => {
            c.sha256 == o.sha256
                && c.props.content_type == o.content_type
                && c.props.metadata == o.metadata
        }
        _ => false,
    }
}

/// Makes the bucket view of `rec` what checkpoint `target` holds, where it
/// is what `undo` holds; through `owned` when this process owns the view.
pub(crate) fn rewind_bucket(
    registry: &Registry,
    rec: &Record,
    undo: &str,
    target: &str,
    applied: &mut Applied,
    owned: Option<&WorkspaceBucket>,
) -> Result<()> {
    let was = load_manifest(registry, undo)?;
    let want = load_manifest(registry, target)?;
    let opened;
    let view = match owned {
        Some(v) => v,
        None => {
            opened = WorkspaceBucket::open(&rec.dir, &rec.bucket)?;
            &opened
        }
    };
    for b in &want.buckets {
        view.ensure_bucket(b)?;
    }
    objects(registry, view, &was, &want, applied)?;
    // Buckets the target does not hold go once empty (what is left in one
    // was written since, and stays).
    let keep: BTreeSet<&String> = want.buckets.iter().collect();
    for b in was.buckets.iter().filter(|b| !keep.contains(b)) {
        if *b != rec.bucket {
            let _ = view.store().delete_bucket(b);
        }
    }
    // A file's properties hold while its bytes are the ones they were
    // recorded with: set the target's where they differ from the undo's.
    let before: BTreeMap<&str, ObjectProps> = was
        .files
        .iter()
        .map(|f| (f.path.as_str(), file_props(f)))
        .collect();
    for f in &want.files {
        let props = file_props(f);
        if before.get(f.path.as_str()) != Some(&props) {
            match view.restore_file_properties(&f.path, props) {
                Ok(()) | Err(WsError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

fn file_props(f: &crate::format::FileEntry) -> ObjectProps {
    ObjectProps {
        content_type: f.content_type.clone(),
        metadata: f.metadata.clone(),
        ..Default::default()
    }
}

fn objects(
    registry: &Registry,
    view: &WorkspaceBucket,
    was: &CheckpointManifest,
    want: &CheckpointManifest,
    applied: &mut Applied,
) -> Result<()> {
    let by_key = |m: &CheckpointManifest| -> BTreeMap<(String, String), ObjectEntry> {
        m.objects
            .iter()
            .map(|o| ((o.bucket.clone(), o.key.clone()), o.clone()))
            .collect()
    };
    let (before, after) = (by_key(was), by_key(want));
    let keys: BTreeSet<&(String, String)> = before.keys().chain(after.keys()).collect();
    for k in keys {
        let (b, w) = (before.get(k), after.get(k));
        if b == w {
            continue;
        }
        let (bucket, key) = (k.0.as_str(), k.1.as_str());
        let now = current(view, bucket, key)?;
        if is(now.as_ref(), w) {
            continue;
        }
        let name = format!("{bucket}/{key}");
        if !is(now.as_ref(), b) {
            applied.conflicts.push(Conflict {
                path: name,
                reason: "object changed since the undo checkpoint; left as it is".into(),
            });
            continue;
        }
        let done = match w {
            Some(o) => {
                let mut body = open_verified(registry, &object_as_file(o))?;
                let condition = match &now {
                    Some(c) => WriteCondition::IfMatch(c.etag.clone()),
                    None => WriteCondition::IfAbsent,
                };
                let opts = PutOptions {
                    props: props_of(o),
                    condition,
                    ..Default::default()
                };
                match view.store().put_object(bucket, key, &mut body, opts) {
                    Ok(_) => true,
                    Err(StoreError::PreconditionFailed { .. } | StoreError::Conflict) => false,
                    Err(e) => return Err(store_error(&format!("write object {name}"), e)),
                }
            }
            None => {
                view.store()
                    .delete_object(bucket, key)
                    .map_err(|e| store_error(&format!("delete object {name}"), e))?;
                true
            }
        };
        match (done, w) {
            (true, Some(_)) => applied.written += 1,
            (true, None) => applied.deleted += 1,
            (false, _) => applied.conflicts.push(Conflict {
                path: name,
                reason: "object written while the rewind replaced it; left as written".into(),
            }),
        }
    }
    Ok(())
}
