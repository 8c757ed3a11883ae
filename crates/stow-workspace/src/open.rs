//! Opening a registered workspace for a session: the checks and the claim
//! that `resume` and `workspace serve` (and, next, the MCP workspace
//! profile) share, and the prepare-shaped description they answer with.

use std::fs;
use std::path::PathBuf;

use crate::describe::{capabilities, RegistryBound, WorkspaceResult};
use crate::identity::{claim_session, read_identity};
use stow_checkpoint::bucket::{ViewQuota, WorkspaceBucket};
use stow_checkpoint::fsutil::{now_rfc3339, FileLock};
use stow_checkpoint::registry::{authority_names, min_bound, Record, Registry, POLICY_VERSION};
use stow_checkpoint::{Result, WsError};

/// A registered workspace whose session this process holds.
pub struct Claimed {
    /// The workspace's registry record.
    pub record: Record,
    /// The checked working directory (absolute, inside the root).
    pub working_directory: PathBuf,
    /// The session lock: the workspace is this process's until it drops.
    pub session: FileLock,
}

/// Claims workspace `id` of `registry`: refused with `in_use` while
/// another session holds it, `refused` when its directory belongs to
/// another workspace or its working directory is missing or outside it.
pub fn claim(registry: &Registry, id: &str) -> Result<Claimed> {
    let record = {
        let _lock = registry.lock()?;
        registry.get(id)?
    };
    claim_record(record)
}

fn claim_record(record: Record) -> Result<Claimed> {
    let session = claim_session(&record.dir, &record.id)?;
    let ident = read_identity(&record.dir)?;
    if ident.workspace_id != record.id {
        return Err(WsError::Refused(format!(
            "{} belongs to workspace {}",
            record.dir.display(),
            ident.workspace_id
        )));
    }
    let working_directory = checked_working_directory(&record)?;
    Ok(Claimed {
        record,
        working_directory,
        session,
    })
}

/// The working directory of a workspace, refused when it is missing or
/// outside the root (after resolving symlinks).
fn checked_working_directory(rec: &Record) -> Result<PathBuf> {
    let root_c = fs::canonicalize(&rec.dir).map_err(|e| WsError::io_at("resolve", &rec.dir, e))?;
    let wd = rec
        .working_directory
        .clone()
        .unwrap_or_else(|| rec.dir.clone());
    let wd_ok = fs::canonicalize(&wd)
        .map(|w| w.starts_with(&root_c) && w.is_dir())
        .unwrap_or(false);
    if !wd_ok {
        return Err(WsError::Refused(format!(
            "working directory {} is missing or outside the workspace",
            wd.display()
        )));
    }
    Ok(wd)
}

/// The prepare-shaped description of a registered workspace (what
/// `resume` answers and `workspace serve` announces). Its `base_identity`
/// is the one the workspace was prepared or restored with (what it is
/// based on), so describing costs the same whatever the tree holds.
pub(crate) fn describe(
    registry: &Registry,
    rec: &Record,
    working_directory: PathBuf,
    checkpoint_id: Option<&str>,
    report_team: bool,
) -> Result<WorkspaceResult> {
    let bound = min_bound(0, registry.policy()?.max_workspaces);
    let count = registry.count()?;
    Ok(WorkspaceResult {
        version: 1,
        workspace_id: rec.id.clone(),
        root: rec.dir.clone(),
        working_directory,
        bucket: rec.bucket.clone(),
        registry_dir: Some(registry.dir().to_path_buf()),
        team: if report_team {
            registry.team().map(str::to_string)
        } else {
            None
        },
        seeded_bytes: 0,
        seeded_objects: 0,
        // Recorded at prepare or restore: opening never walks the tree
        // (workspaces from before it was recorded are walked once here).
        base_identity: match read_identity(&rec.dir)?.base_identity {
            Some(b) => b,
            None => stow_checkpoint::walk::base_identity(&rec.dir)?,
        },
        repositories: Vec::new(),
        checkpoint_id: checkpoint_id.map(str::to_string),
        capabilities: capabilities(rec, RegistryBound::new(bound, count)),
        authority: authority_names(rec.authority_mask),
    })
}

/// Resumes a workspace: refuses while a live owner holds it, validates the
/// working directory, refreshes `last_used` (never `created`). The claim
/// ends when this returns (the CLI process exits).
pub fn resume(
    registry: &Registry,
    id: &str,
    checkpoint_id: Option<&str>,
    report_team: bool,
) -> Result<WorkspaceResult> {
    let _lock = registry.lock()?;
    let rec = registry.get(id)?;
    if rec.policy_version != POLICY_VERSION {
        return Err(WsError::Refused(format!(
            "workspace {id} was registered under an older policy; reopen it explicitly or recreate it"
        )));
    }
    if let Some(cp) = checkpoint_id {
        stow_checkpoint::check_belongs(registry, cp, &rec.id).map_err(|_| {
            WsError::InvalidRequest("handoff checkpoint belongs to a different workspace".into())
        })?;
    }
    let claimed = claim_record(rec)?;
    let mut rec = claimed.record;
    rec.last_used = now_rfc3339();
    registry.put(&rec)?;
    describe(
        registry,
        &rec,
        claimed.working_directory,
        checkpoint_id,
        report_team,
    )
}

/// A registered workspace claimed for serving its bucket view.
pub struct ServedWorkspace {
    /// The workspace's registry record.
    pub record: Record,
    /// The view, holding the workspace's session for its lifetime.
    pub view: WorkspaceBucket,
    /// The quotas the view enforces.
    pub quota: ViewQuota,
    /// The workspace described as `prepare` and `resume` describe it.
    pub description: WorkspaceResult,
}

/// Claims workspace `id` of `registry` (refused with `in_use` while another
/// session holds it) and opens its bucket view; the claim lasts as long as
/// the view.
///
/// `max_bytes`/`max_objects` narrow the workspace's quotas (0 keeps them);
/// a value above them is refused before anything is claimed.
pub fn serve_workspace(
    registry: &Registry,
    id: &str,
    max_bytes: u64,
    max_objects: u64,
) -> Result<ServedWorkspace> {
    let record = {
        let _lock = registry.lock()?;
        registry.get(id)?
    };
    let quota = ViewQuota::narrowed(&record, max_bytes, max_objects)?;
    // A rewind interrupted part way is finished before the tree and its
    // objects are served (it needs the store this server is about to own).
    stow_checkpoint::rewind::finish_pending(registry, id)?;
    let claimed = claim_record(record)?;
    let record = claimed.record;
    let description = describe(registry, &record, claimed.working_directory, None, true)?;
    let mut view = WorkspaceBucket::open_with_quota(&record.dir, &record.bucket, Some(quota))?;
    view.hold_session(claimed.session);
    Ok(ServedWorkspace {
        record,
        view,
        quota,
        description,
    })
}
