//! `restore`: a checkpoint into a new root, as a new owned workspace sized
//! by the checkpoint (no hidden cap).

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use stow_store::{ObjectProps, PutOptions};

use crate::describe::{capabilities, RegistryBound, WorkspaceResult};
use crate::identity::{
    claim_session, new_workspace_id, record_base_identity, registry_base, write_identity, Identity,
};
use crate::manifest::{check_new_root, DEFAULT_MAX_BYTES, DEFAULT_MAX_OBJECTS};
use stow_checkpoint::bucket::WorkspaceBucket;
use stow_checkpoint::fsutil::{absolute, now_rfc3339, random_hex};
use stow_checkpoint::registry::{
    authority_names, min_bound, Record, Registry, POLICY_VERSION, READ_WRITE_MASK,
};
use stow_checkpoint::{
    load_manifest, materialize, object_as_file, open_verified, CheckpointManifest,
};
use stow_checkpoint::{Result, WsError};

/// Optional narrowing limits of a restore (0 = sized by the checkpoint).
#[derive(Clone, Copy, Default)]
pub struct RestoreLimits<'a> {
    pub max_bytes: u64,
    pub max_files: u64,
    /// Receives bytes restored so far.
    pub progress: Option<&'a dyn stow_checkpoint::progress::Progress>,
}

/// Restores checkpoint `id` into the new directory `root`.
pub fn restore(
    registry: &Registry,
    id: &str,
    root: &Path,
    limits: RestoreLimits<'_>,
) -> Result<WorkspaceResult> {
    restore_as(registry, id, root, limits, true)
}

/// [`restore`]; `owned: false` marks the new workspace adopted (its
/// directory is never deleted by destroy or collect).
pub(crate) fn restore_as(
    registry: &Registry,
    id: &str,
    root: &Path,
    limits: RestoreLimits<'_>,
    owned: bool,
) -> Result<WorkspaceResult> {
    let root = absolute(root)?;
    check_new_root(&root)?;
    crate::identity::check_root_apart(registry, &root)?;
    // The registry lock keeps garbage collection away from the blobs while
    // they are copied.
    let _lock = registry.lock()?;
    let m = load_manifest(registry, id)?;
    let bytes: u64 =
        m.files.iter().map(|f| f.size).sum::<u64>() + m.objects.iter().map(|o| o.size).sum::<u64>();
    let files = (m.files.len() + m.objects.len()) as u64;
    if limits.max_bytes > 0 && bytes > limits.max_bytes {
        return Err(WsError::CapacityExceeded(format!(
            "checkpoint holds {bytes} bytes, over the limit of {}",
            limits.max_bytes
        )));
    }
    if limits.max_files > 0 && files > limits.max_files {
        return Err(WsError::CapacityExceeded(format!(
            "checkpoint holds {files} files, over the limit of {}",
            limits.max_files
        )));
    }
    let bound = registry.policy()?.max_workspaces;
    let count = registry.count()?;
    if bound > 0 && count >= bound {
        return Err(WsError::CapacityExceeded(format!(
            "the registry holds {count} workspaces, at its bound of {bound}"
        )));
    }
    // The source workspace's retention caps carry over when it is known.
    let source = registry.get(&m.workspace_id).ok();
    let ws = new_workspace_id();
    // A portable checkpoint keeps its primary bucket name (renaming refused).
    let bucket = m
        .primary_bucket
        .clone()
        .unwrap_or_else(|| format!("stow-workspace-{}", random_hex(8)));
    fs::DirBuilder::new()
        .mode(0o755)
        .create(&root)
        .map_err(|e| WsError::io_at("create root", &root, e))?;
    let created = now_rfc3339();
    let rec = Record {
        id: ws.clone(),
        dir: root.clone(),
        working_directory: Some(root.clone()),
        bucket: bucket.clone(),
        created: created.clone(),
        last_used: created.clone(),
        ttl_seconds: source.as_ref().map(|s| s.ttl_seconds).unwrap_or(0),
        policy_version: POLICY_VERSION,
        authority_mask: READ_WRITE_MASK,
        max_bytes: min_or(limits.max_bytes, DEFAULT_MAX_BYTES.max(bytes)),
        max_objects: min_or(limits.max_files, DEFAULT_MAX_OBJECTS.max(files)),
        max_checkpoint_bytes: source.as_ref().map(|s| s.max_checkpoint_bytes).unwrap_or(0),
        max_checkpoints: source.as_ref().map(|s| s.max_checkpoints).unwrap_or(0),
        owned,
        gitignore: false,
        attached: false,
    };
    let run = || -> Result<WorkspaceResult> {
        write_identity(
            &root,
            &Identity {
                version: 1,
                workspace_id: ws.clone(),
                bucket: bucket.clone(),
                created: created.clone(),
                owned,
                base_identity: None,
                registry_dir: registry_base(registry),
                team: registry.team().map(str::to_string),
            },
        )?;
        let _session = claim_session(&root, &ws)?;
        let base_identity = materialize(registry, &m, &root, limits.progress)?;
        record_base_identity(&root, &base_identity)?;
        if m.version == 2 {
            restore_bucket_view(registry, &m, &root, &bucket)?;
        }
        registry.put(&rec)?;
        // The new workspace's tree is the checkpoint's.
        stow_checkpoint::history::set_head(registry, &ws, &m.id)?;
        Ok(WorkspaceResult {
            version: 1,
            workspace_id: ws.clone(),
            root: root.clone(),
            working_directory: root.clone(),
            bucket: bucket.clone(),
            registry_dir: Some(registry.dir().to_path_buf()),
            team: registry.team().map(str::to_string),
            seeded_bytes: bytes,
            seeded_objects: files,
            base_identity,
            repositories: Vec::new(),
            checkpoint_id: Some(id.to_string()),
            capabilities: capabilities(&rec, RegistryBound::new(bound, count + 1)),
            authority: authority_names(rec.authority_mask),
        })
    };
    match run() {
        Ok(r) => Ok(r),
        Err(e) => {
            let _ = fs::remove_dir_all(&root);
            let _ = registry.remove(&ws);
            Err(e)
        }
    }
}

/// A portable checkpoint's side of a restore: the private store's buckets
/// and objects (streamed from verified blobs), and the S3 properties its
/// files were written with.
fn restore_bucket_view(
    registry: &Registry,
    m: &CheckpointManifest,
    root: &Path,
    bucket: &str,
) -> Result<()> {
    let view = WorkspaceBucket::open(root, bucket)?;
    for b in &m.buckets {
        view.ensure_bucket(b)?;
    }
    for f in &m.files {
        if f.content_type.is_some() || !f.metadata.is_empty() {
            let props = ObjectProps {
                content_type: f.content_type.clone(),
                metadata: f.metadata.clone(),
                ..Default::default()
            };
            view.restore_file_properties(&f.path, props)?;
        }
    }
    for o in &m.objects {
        // Streamed: an object may be as large as the bounds allow.
        let mut body = open_verified(registry, &object_as_file(o))?;
        let props = ObjectProps {
            content_type: o.content_type.clone(),
            metadata: o.metadata.clone(),
            ..Default::default()
        };
        view.store()
            .put_object(
                &o.bucket,
                &o.key,
                &mut body,
                PutOptions {
                    props,
                    ..Default::default()
                },
            )
            .map_err(|e| {
                WsError::InvalidRequest(format!("restore object {}/{}: {e}", o.bucket, o.key))
            })?;
    }
    Ok(())
}

fn min_or(narrow: u64, sized: u64) -> u64 {
    min_bound(narrow, sized)
}
