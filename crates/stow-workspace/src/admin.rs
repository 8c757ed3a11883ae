//! Registry verbs: list, destroy, collect, prune, policy.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::identity::{is_live, read_identity};
use stow_checkpoint::fsutil::{format_secs, now_secs, parse_time};
use stow_checkpoint::registry::{Policy, Record, Registry};
use stow_checkpoint::{Result, WsError};

/// One row of `list`.
#[derive(Debug, Clone, Serialize)]
pub struct ListEntry {
    pub id: String,
    pub dir: PathBuf,
    pub bucket: String,
    pub created: String,
    pub last_used: String,
    pub age_seconds: i64,
    pub idle_seconds: i64,
    pub ttl_seconds: u64,
    pub expires_in_seconds: i64,
    pub has_ttl: bool,
    pub owned: bool,
    pub readable: bool,
}

/// The result of `list`.
#[derive(Debug, Clone, Serialize)]
pub struct ListResult {
    pub version: u32,
    pub registry_dir: PathBuf,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    pub count: usize,
    pub results: Vec<ListEntry>,
}

/// Lists every record of the partition, most idle first. Read-only.
pub fn list(registry: &Registry) -> Result<ListResult> {
    let now = now_secs();
    let mut results: Vec<ListEntry> = registry
        .records()?
        .into_iter()
        .map(|r| {
            let created = parse_time(&r.created).unwrap_or(now);
            let last = parse_time(&r.last_used).unwrap_or(created);
            let idle = now - last;
            ListEntry {
                readable: r.dir.is_dir(),
                id: r.id,
                dir: r.dir,
                bucket: r.bucket,
                created: format_secs(created),
                last_used: format_secs(last),
                age_seconds: now - created,
                idle_seconds: idle,
                ttl_seconds: r.ttl_seconds,
                expires_in_seconds: if r.ttl_seconds > 0 {
                    r.ttl_seconds as i64 - idle
                } else {
                    0
                },
                has_ttl: r.ttl_seconds > 0,
                owned: r.owned,
            }
        })
        .collect();
    // Records come in ID order; a stable sort keeps it among equals.
    results.sort_by_key(|r| std::cmp::Reverse(r.idle_seconds));
    Ok(ListResult {
        version: 1,
        registry_dir: registry.dir().to_path_buf(),
        team: registry.team().map(str::to_string),
        count: results.len(),
        results,
    })
}

/// The result of `destroy`.
#[derive(Debug, Clone, Serialize)]
pub struct DestroyResult {
    pub version: u32,
    pub workspace_id: String,
    pub destroyed: bool,
}

fn canonical(p: &Path) -> Option<PathBuf> {
    fs::canonicalize(p).ok()
}

/// Refuses roots that must never be deleted: the user's home, the process's
/// current directory, or an ancestor of either.
fn check_deletable(root: &Path) -> Result<()> {
    let Some(root_c) = canonical(root) else {
        return Ok(());
    };
    let mut guarded = Vec::new();
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        guarded.extend(canonical(Path::new(&home)));
    }
    if let Ok(cwd) = std::env::current_dir() {
        guarded.extend(canonical(&cwd));
    }
    for g in guarded {
        if g.starts_with(&root_c) {
            return Err(WsError::Refused(format!(
                "{} is the home or current directory, or an ancestor of one",
                root.display()
            )));
        }
    }
    Ok(())
}

/// Why a record may not be destroyed now, as the refusal to answer with,
/// or `None` when it may. Caller holds the registry lock.
fn destroy_blocker(rec: &Record) -> Result<Option<WsError>> {
    if !rec.owned {
        return Ok(Some(WsError::Refused(format!(
            "workspace {} was adopted, not created by stow; remove {} yourself",
            rec.id,
            rec.dir.display()
        ))));
    }
    if is_live(&rec.dir)? {
        return Ok(Some(WsError::InUse(rec.id.clone())));
    }
    Ok(None)
}

fn remove_owned(registry: &Registry, rec: &Record) -> Result<()> {
    check_deletable(&rec.dir)?;
    if rec.dir.exists() {
        let ident = read_identity(&rec.dir)?;
        if ident.workspace_id != rec.id {
            return Err(WsError::Refused(format!(
                "{} belongs to workspace {}, not {}",
                rec.dir.display(),
                ident.workspace_id,
                rec.id
            )));
        }
        fs::remove_dir_all(&rec.dir).map_err(|e| WsError::io_at("remove", &rec.dir, e))?;
    }
    stow_checkpoint::delete_workspace_checkpoints(registry, &rec.id)?;
    registry.remove(&rec.id)
}

/// Destroys an owned, idle workspace: its directory, its checkpoints and its
/// record.
pub fn destroy(registry: &Registry, id: &str) -> Result<DestroyResult> {
    let _lock = registry.lock()?;
    let rec = registry.get(id)?;
    if let Some(refusal) = destroy_blocker(&rec)? {
        return Err(refusal);
    }
    remove_owned(registry, &rec)?;
    Ok(DestroyResult {
        version: 1,
        workspace_id: id.to_string(),
        destroyed: true,
    })
}

/// One row of `collect` and `prune`.
#[derive(Debug, Clone, Serialize)]
pub struct SweepEntry {
    pub id: String,
    pub dir: PathBuf,
    pub removed: bool,
    pub reason: String,
}

/// The result of `collect`.
#[derive(Debug, Clone, Serialize)]
pub struct CollectResult {
    pub version: u32,
    pub results: Vec<SweepEntry>,
}

/// Destroys expired workspaces: never a live, adopted, TTL-less or unexpired
/// one.
pub fn collect(registry: &Registry) -> Result<CollectResult> {
    let mut results = Vec::new();
    if !registry.dir().exists() {
        return Ok(CollectResult {
            version: 1,
            results,
        });
    }
    let _lock = registry.lock()?;
    let now = now_secs();
    for rec in registry.records()? {
        let reason = match classify(&rec, now) {
            Ok(r) => r,
            Err(e) => format!("unreadable: {e}"),
        };
        let mut removed = false;
        let reason = if reason == "expired" {
            match remove_owned(registry, &rec) {
                Ok(()) => {
                    removed = true;
                    reason
                }
                Err(e) => format!("unreadable: {e}"),
            }
        } else {
            reason
        };
        results.push(SweepEntry {
            id: rec.id,
            dir: rec.dir,
            removed,
            reason,
        });
    }
    Ok(CollectResult {
        version: 1,
        results,
    })
}

fn classify(rec: &Record, now: i64) -> Result<String> {
    if is_live(&rec.dir)? {
        return Ok("in-use".into());
    }
    if !rec.owned {
        return Ok("adopted".into());
    }
    if rec.ttl_seconds == 0 {
        return Ok("no-ttl".into());
    }
    let last = parse_time(&rec.last_used).unwrap_or(0);
    if now - last < rec.ttl_seconds as i64 {
        return Ok("not-expired".into());
    }
    Ok("expired".into())
}

/// The result of `prune`.
#[derive(Debug, Clone, Serialize)]
pub struct PruneResult {
    pub version: u32,
    pub count: usize,
    pub removed: usize,
    pub results: Vec<SweepEntry>,
}

/// Forgets records whose directory is gone (never deletes user data);
/// adopted records are kept unless `include_adopted`.
pub fn prune(registry: &Registry, include_adopted: bool) -> Result<PruneResult> {
    let mut results = Vec::new();
    if !registry.dir().exists() {
        return Ok(PruneResult {
            version: 1,
            count: 0,
            removed: 0,
            results,
        });
    }
    let _lock = registry.lock()?;
    for rec in registry.records()? {
        let (removed, reason) = match fs::symlink_metadata(&rec.dir) {
            Ok(_) => (false, "present".to_string()),
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                (false, format!("unreadable: {e}"))
            }
            Err(_) if !rec.owned && !include_adopted => (false, "gone-adopted".to_string()),
            Err(_) => {
                let forgot = stow_checkpoint::delete_workspace_checkpoints(registry, &rec.id)
                    .and_then(|()| registry.remove(&rec.id));
                match forgot {
                    Ok(()) if rec.owned => (true, "pruned".to_string()),
                    Ok(()) => (true, "pruned-adopted".to_string()),
                    Err(e) => (false, format!("unreadable: {e}")),
                }
            }
        };
        results.push(SweepEntry {
            id: rec.id,
            dir: rec.dir,
            removed,
            reason,
        });
    }
    Ok(PruneResult {
        version: 1,
        count: results.len(),
        removed: results.iter().filter(|r| r.removed).count(),
        results,
    })
}

/// The result of `policy show|set`.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyResult {
    pub version: u32,
    pub registry_dir: PathBuf,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    pub policy: Policy,
    pub usage: PolicyUsage,
}

/// Current usage the policy bounds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PolicyUsage {
    pub workspaces: u64,
    pub checkpoints: u64,
    pub checkpoint_bytes: u64,
}

fn usage(registry: &Registry) -> Result<PolicyUsage> {
    let (checkpoints, checkpoint_bytes) = stow_checkpoint::registry_usage(registry)?;
    Ok(PolicyUsage {
        workspaces: registry.count()?,
        checkpoints,
        checkpoint_bytes,
    })
}

/// Shows the standing policy and current usage.
pub fn policy_show(registry: &Registry) -> Result<PolicyResult> {
    Ok(PolicyResult {
        version: 1,
        registry_dir: registry.dir().to_path_buf(),
        team: registry.team().map(str::to_string),
        policy: registry.policy()?,
        usage: usage(registry)?,
    })
}

/// Changes of a `policy set`; `None` keeps the current value.
#[derive(Debug, Clone, Copy, Default)]
pub struct PolicyUpdate {
    pub max_workspaces: Option<u64>,
    pub max_checkpoints: Option<u64>,
    pub max_checkpoint_bytes: Option<u64>,
}

/// Sets the standing policy, refusing one current usage already exceeds.
pub fn policy_set(registry: &Registry, update: PolicyUpdate) -> Result<PolicyResult> {
    let _lock = registry.lock()?;
    let mut p = registry.policy()?;
    p.version = 1;
    if let Some(v) = update.max_workspaces {
        p.max_workspaces = v;
    }
    if let Some(v) = update.max_checkpoints {
        p.max_checkpoints = v;
    }
    if let Some(v) = update.max_checkpoint_bytes {
        p.max_checkpoint_bytes = v;
    }
    let u = usage(registry)?;
    let over = |limit: u64, have: u64| limit > 0 && have > limit;
    if over(p.max_workspaces, u.workspaces)
        || over(p.max_checkpoints, u.checkpoints)
        || over(p.max_checkpoint_bytes, u.checkpoint_bytes)
    {
        return Err(WsError::CapacityExceeded(format!(
            "current usage ({} workspaces, {} checkpoints, {} checkpoint bytes) already exceeds the requested policy",
            u.workspaces, u.checkpoints, u.checkpoint_bytes
        )));
    }
    registry.put_policy(&p)?;
    Ok(PolicyResult {
        version: 1,
        registry_dir: registry.dir().to_path_buf(),
        team: registry.team().map(str::to_string),
        policy: p,
        usage: u,
    })
}
