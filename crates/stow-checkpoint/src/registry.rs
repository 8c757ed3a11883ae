//! The workspace registry: a directory of small JSON records, partitioned by
//! team (`<registry>/teams/<team>`). Records are written atomically
//! (temp + fsync + rename + directory fsync). Mutations take the registry
//! lock `<R>/.stow/registry.lock`.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, WsError};
use crate::fsutil::{absolute, atomic_write, create_private_dir, FileLock};
use crate::paths::{check_team, check_workspace_id};

/// The policy version resume requires of a record.
pub const POLICY_VERSION: u32 = 1;
/// Authority bit mask of local ReadWrite (everything except
/// environment.destroy/promote and upstream access).
pub const READ_WRITE_MASK: u32 = 1279;

/// Operation names in authority-bit order.
const AUTHORITY_BITS: &[&str] = &[
    "object.read",
    "object.write",
    "object.delete",
    "object.list",
    "bucket.create",
    "bucket.delete",
    "bucket.list",
    "environment.reset",
    "environment.destroy",
    "environment.promote",
    "workspace.capture",
    "upstream.read",
    "upstream.write",
];

/// The sorted operation names an authority mask permits.
pub fn authority_names(mask: u32) -> Vec<String> {
    let mut names: Vec<String> = AUTHORITY_BITS
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, n)| n.to_string())
        .collect();
    names.sort();
    names
}

/// One registry record.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Record {
    pub id: String,
    /// Absolute workspace root.
    pub dir: PathBuf,
    /// Absolute working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_directory: Option<PathBuf>,
    pub bucket: String,
    /// RFC 3339 creation time (never rewritten by resume).
    pub created: String,
    /// RFC 3339 time of last use (TTL is measured from here).
    pub last_used: String,
    #[serde(default)]
    pub ttl_seconds: u64,
    pub policy_version: u32,
    pub authority_mask: u32,
    pub max_bytes: u64,
    pub max_objects: u64,
    #[serde(default)]
    pub max_checkpoint_bytes: u64,
    #[serde(default)]
    pub max_checkpoints: u64,
    /// Stow created the directory (only owned workspaces are ever deleted).
    pub owned: bool,
    /// Captures also leave out what git ignores in the tree (attached
    /// workspaces, unless attached with `--no-gitignore`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gitignore: bool,
    /// An existing directory registered in place (`workspace attach`):
    /// its captures continue its history from the head by default.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub attached: bool,
}

/// Standing registry policy (0 = unlimited).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    pub version: u32,
    pub max_workspaces: u64,
    pub max_checkpoints: u64,
    pub max_checkpoint_bytes: u64,
}

/// The default registry root: `$XDG_CONFIG_HOME/stow-s3/workspaces`, else
/// `$HOME/.config/stow-s3/workspaces`.
pub fn default_registry_root() -> Result<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(x).join("stow-s3").join("workspaces"));
    }
    let home = std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            WsError::InvalidRequest("no registry directory given and HOME is not set".into())
        })?;
    Ok(PathBuf::from(home)
        .join(".config")
        .join("stow-s3")
        .join("workspaces"))
}

/// A resolved registry partition.
#[derive(Debug, Clone)]
pub struct Registry {
    dir: PathBuf,
    team: Option<String>,
}

impl Registry {
    /// Resolves `base` (default registry if `None`) and an optional team into
    /// a partition. Creates nothing.
    pub fn resolve(base: Option<&Path>, team: Option<&str>) -> Result<Registry> {
        let base = match base {
            Some(b) if !b.as_os_str().is_empty() => absolute(b)?,
            _ => absolute(&default_registry_root()?)?,
        };
        let team = team.filter(|t| !t.is_empty()).map(str::to_string);
        let dir = match &team {
            Some(t) => {
                check_team(t)?;
                base.join("teams").join(t)
            }
            None => base,
        };
        Ok(Registry { dir, team })
    }

    /// Opens an already partition-resolved directory (from a handoff document).
    pub fn at(dir: &Path, team: Option<&str>) -> Result<Registry> {
        Ok(Registry {
            dir: absolute(dir)?,
            team: team.filter(|t| !t.is_empty()).map(str::to_string),
        })
    }

    /// The partition directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The team, if any.
    pub fn team(&self) -> Option<&str> {
        self.team.as_deref()
    }

    /// The private state directory of this partition.
    pub fn state_dir(&self) -> PathBuf {
        self.dir.join(".stow")
    }

    /// Creates the partition and its state directory (0700).
    pub fn ensure(&self) -> Result<()> {
        create_private_dir(&self.state_dir())
    }

    /// Takes the registry mutation lock (waits for other holders).
    pub fn lock(&self) -> Result<FileLock> {
        self.ensure()?;
        FileLock::lock(&self.state_dir().join("registry.lock"))
    }

    fn record_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Every readable record, in ID order. Skips subdirectories, non-JSON
    /// files, undecodable records and records whose id is not the file name.
    /// A missing partition has no records (and is not created).
    pub fn records(&self) -> Result<Vec<Record>> {
        let rd = match fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(WsError::io_at("read registry", &self.dir, e)),
        };
        let mut out = Vec::new();
        for entry in rd {
            let entry = entry.map_err(|e| WsError::io_at("read registry", &self.dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(id) = name.strip_suffix(".json") else {
                continue;
            };
            if check_workspace_id(id).is_err() || !entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            if let Ok(rec) = self.get(id) {
                out.push(rec);
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// Number of records (records, not directories: dead entries count).
    pub fn count(&self) -> Result<u64> {
        Ok(self.records()?.len() as u64)
    }

    /// One record by ID.
    pub fn get(&self, id: &str) -> Result<Record> {
        check_workspace_id(id)?;
        let path = self.record_path(id);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(WsError::NotFound(format!(
                    "workspace {id} in registry {}",
                    self.dir.display()
                )))
            }
            Err(e) => return Err(WsError::io_at("read record", &path, e)),
        };
        let rec: Record = serde_json::from_slice(&bytes)
            .map_err(|e| WsError::Corrupt(format!("record {}: {e}", path.display())))?;
        if rec.id != id {
            return Err(WsError::Corrupt(format!(
                "record {} names workspace {}",
                path.display(),
                rec.id
            )));
        }
        Ok(rec)
    }

    /// Writes a record atomically.
    pub fn put(&self, rec: &Record) -> Result<()> {
        check_workspace_id(&rec.id)?;
        self.ensure()?;
        let bytes = serde_json::to_vec_pretty(rec)
            .map_err(|e| WsError::InvalidRequest(format!("encode record: {e}")))?;
        atomic_write(&self.record_path(&rec.id), &bytes, 0o600)
    }

    /// Removes a record (absent is fine) and fsyncs the directory.
    pub fn remove(&self, id: &str) -> Result<()> {
        check_workspace_id(id)?;
        let path = self.record_path(id);
        match fs::remove_file(&path) {
            Ok(()) => crate::fsutil::fsync_dir(&self.dir),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(WsError::io_at("remove record", &path, e)),
        }
    }

    /// The standing policy (default: everything unlimited).
    pub fn policy(&self) -> Result<Policy> {
        let path = self.state_dir().join("policy.json");
        match fs::read(&path) {
            Ok(bytes) => {
                let p: Policy = serde_json::from_slice(&bytes)
                    .map_err(|e| WsError::Corrupt(format!("policy {}: {e}", path.display())))?;
                if p.version != 1 {
                    return Err(WsError::Corrupt(format!(
                        "policy {} has unsupported version {}",
                        path.display(),
                        p.version
                    )));
                }
                Ok(p)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Policy {
                version: 1,
                ..Policy::default()
            }),
            Err(e) => Err(WsError::io_at("read policy", &path, e)),
        }
    }

    /// Writes the standing policy. The caller holds the registry lock and has
    /// checked current usage.
    pub fn put_policy(&self, p: &Policy) -> Result<()> {
        self.ensure()?;
        let bytes = serde_json::to_vec_pretty(p)
            .map_err(|e| WsError::InvalidRequest(format!("encode policy: {e}")))?;
        atomic_write(&self.state_dir().join("policy.json"), &bytes, 0o600)
    }
}

/// The smaller of two bounds where 0 means unlimited.
pub fn min_bound(a: u64, b: u64) -> u64 {
    match (a, b) {
        (0, x) | (x, 0) => x,
        (x, y) => x.min(y),
    }
}
