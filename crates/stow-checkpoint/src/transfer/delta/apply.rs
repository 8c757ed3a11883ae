//! Applying a delta: every precondition checked on the base, then the
//! new checkpoint published on top of it.

use std::collections::BTreeMap;
use std::path::Path;

use super::check::check_document;
use super::*;
use crate::error::{Result, WsError};
use crate::fsutil::{create_private_dir, now_rfc3339, random_hex};
use crate::registry::Registry;
use crate::Origin;
use crate::{
    admit, blob_ok, discard, load_manifest, publish, stage_bytes, summaries, validate_manifest,
    CheckpointManifest, CheckpointResult, DirectoryEntry, FileEntry, Kind, LinkEntry, ObjectEntry,
    Payload, RetentionCaps, Summary,
};

/// Checks every precondition on `base` and returns the target manifest's
/// files, buckets and objects; nothing is written.
fn replay(doc: &DeltaDocument, base: &CheckpointManifest) -> Result<Replayed> {
    let mut files: BTreeMap<String, FileEntry> = base
        .files
        .iter()
        .map(|f| (f.path.clone(), f.clone()))
        .collect();
    for c in &doc.changes {
        let have = files.get(&c.path);
        let holds = match c.kind {
            Kind::Added => have.is_none(),
            Kind::Changed | Kind::Deleted => have == c.from.as_ref(),
        };
        if !holds {
            let why = match (c.kind, have) {
                (Kind::Added, _) => "to be added, but the base has it",
                (_, None) => "to be changed or deleted, but the base lacks it",
                _ => "recorded differently in the base",
            };
            return Err(WsError::DeltaConflict(format!("{}: {why}", c.path)));
        }
        match &c.to {
            Some(to) => files.insert(c.path.clone(), to.clone()),
            None => files.remove(&c.path),
        };
    }
    let mut buckets: Vec<String> = base.buckets.clone();
    for c in &doc.bucket_changes {
        let at = buckets.iter().position(|b| *b == c.bucket);
        match (c.kind, at) {
            (Kind::Added, None) => buckets.push(c.bucket.clone()),
            (Kind::Deleted, Some(i)) => {
                buckets.remove(i);
            }
            _ => {
                return Err(WsError::DeltaConflict(format!(
                    "bucket {}: not as the delta expects",
                    c.bucket
                )))
            }
        }
    }
    buckets.sort();
    let mut objects: BTreeMap<(String, String), ObjectEntry> = base
        .objects
        .iter()
        .map(|o| ((o.bucket.clone(), o.key.clone()), o.clone()))
        .collect();
    for c in &doc.object_changes {
        let k = (c.bucket.clone(), c.key.clone());
        let have = objects.get(&k);
        let holds = match c.kind {
            Kind::Added => have.is_none(),
            Kind::Changed | Kind::Deleted => have == c.from.as_ref(),
        };
        if !holds {
            return Err(WsError::DeltaConflict(format!(
                "object {}/{}: not as the delta expects",
                c.bucket, c.key
            )));
        }
        match &c.to {
            Some(to) => objects.insert(k, to.clone()),
            None => objects.remove(&k),
        };
    }
    let mut links: BTreeMap<String, String> = base
        .links
        .iter()
        .map(|l| (l.path.clone(), l.target.clone()))
        .collect();
    for c in &doc.link_changes {
        let have = links.get(&c.path);
        let holds = match c.kind {
            Kind::Added => have.is_none(),
            Kind::Changed | Kind::Deleted => have == c.from.as_ref(),
        };
        if !holds {
            return Err(WsError::DeltaConflict(format!(
                "link {}: not as the delta expects",
                c.path
            )));
        }
        match &c.to {
            Some(t) => links.insert(c.path.clone(), t.clone()),
            None => links.remove(&c.path),
        };
    }
    Ok(Replayed {
        files: files.into_values().collect(),
        buckets,
        objects: objects.into_values().collect(),
        links: links
            .into_iter()
            .map(|(path, target)| LinkEntry { path, target })
            .collect(),
        dirs: doc.dirs.clone().unwrap_or_else(|| base.dirs.clone()),
    })
}

/// The target manifest's contents a delta rebuilds on its base.
struct Replayed {
    files: Vec<FileEntry>,
    buckets: Vec<String>,
    objects: Vec<ObjectEntry>,
    links: Vec<LinkEntry>,
    dirs: Vec<DirectoryEntry>,
}

/// Applies delta `path` to checkpoint `base`, publishing a new checkpoint
/// whose parent is the base (the base is never changed). Applying twice
/// gives two checkpoints.
///
/// Long because the preconditions, the new manifest and its publication
/// happen under one registry lock, in that order.
pub fn apply(
    registry: &Registry,
    path: &Path,
    base: &str,
    opts: &ApplyOptions,
) -> Result<CheckpointResult> {
    let doc = read_document(path, opts.expect_sha256.as_deref())?;
    let (file_bodies, object_bodies) = check_document(&doc)?;
    if let Some(p) = first_sensitive(&doc.changes, &doc.link_changes, &doc.object_changes) {
        if !(opts.include_sensitive && doc.include_sensitive) {
            return Err(WsError::SensitivePath {
                path: p.to_string(),
                opt_in: "--include-sensitive (on both delta and apply)",
            });
        }
    }
    // Held until publication: GC (which clears `tmp/`) waits, and the base
    // cannot be deleted between the checks and the publication.
    registry.ensure()?;
    let _lock = registry.lock()?;
    let b = load_manifest(registry, base)?;
    if b.workspace_id != doc.workspace_id {
        return Err(WsError::DeltaConflict(format!(
            "the base {base} belongs to workspace {}, the delta to {}",
            b.workspace_id, doc.workspace_id
        )));
    }
    if b.version != doc.version {
        return Err(WsError::DeltaConflict(format!(
            "a version-{} delta cannot apply to a version-{} checkpoint",
            doc.version, b.version
        )));
    }
    let Replayed {
        files,
        buckets,
        objects,
        links,
        dirs,
    } = replay(&doc, &b)?;
    let id = format!("cp_{}", random_hex(12));
    let m = CheckpointManifest {
        version: b.version,
        id: id.clone(),
        workspace_id: b.workspace_id.clone(),
        parent_id: Some(b.id.clone()),
        created: now_rfc3339(),
        files,
        excluded: b.excluded.clone(),
        primary_bucket: b.primary_bucket.clone(),
        buckets,
        objects,
        dirs,
        links,
        skipped: b.skipped.clone(),
        ignored: b.ignored.clone(),
        message: doc.message.clone(),
    };
    validate_manifest(&m).map_err(|e| WsError::DeltaConflict(format!("the result: {e}")))?;
    // Every payload the new checkpoint keeps from the base must be there.
    for f in &m.files {
        if !file_bodies.contains_key(&f.path) && !blob_ok(registry, &f.sha256, f.size) {
            return Err(WsError::Corrupt(format!(
                "payload of {} in the base is missing",
                f.path
            )));
        }
    }
    for o in &m.objects {
        if !object_bodies.contains_key(&o.sha256) && !blob_ok(registry, &o.sha256, o.size) {
            return Err(WsError::Corrupt(format!(
                "payload of object {}/{} in the base is missing",
                o.bucket, o.key
            )));
        }
    }
    let bytes: u64 =
        m.files.iter().map(|f| f.size).sum::<u64>() + m.objects.iter().map(|o| o.size).sum::<u64>();
    let caps = registry
        .get(&m.workspace_id)
        .map(|r| RetentionCaps::of(&r))
        .unwrap_or_default();
    admit(
        registry,
        &m.workspace_id,
        caps,
        bytes,
        &summaries(registry)?,
    )?;
    let tmp = registry.state_dir().join("tmp");
    create_private_dir(&tmp)?;
    let mut staged: Vec<(Payload, u64)> = Vec::new();
    let stage_all = |staged: &mut Vec<(Payload, u64)>| -> Result<()> {
        for body in file_bodies.values().chain(object_bodies.values()) {
            let p = stage_bytes(registry, &tmp, &body.bytes)?;
            staged.push((p, body.bytes.len() as u64));
        }
        Ok(())
    };
    let summary = Summary {
        version: 1,
        id: id.clone(),
        workspace_id: m.workspace_id.clone(),
        parent_id: m.parent_id.clone(),
        created: m.created.clone(),
        files: m.files.len() as u64,
        bytes,
        message: m.message.clone(),
        origin: Some(Origin::Apply),
    };
    let published = stage_all(&mut staged).and_then(|()| {
        let refs: Vec<(&Payload, u64)> = staged.iter().map(|(p, n)| (p, *n)).collect();
        publish(registry, &id, &refs, &m, &summary)
    });
    let stored_bytes = match published {
        Ok(n) => n,
        Err(e) => {
            let payloads: Vec<Payload> = staged.into_iter().map(|(p, _)| p).collect();
            discard(&payloads);
            return Err(e);
        }
    };
    Ok(CheckpointResult::of(&m, stored_bytes))
}
