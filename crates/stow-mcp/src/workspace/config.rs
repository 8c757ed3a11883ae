//! The workspace profile's launch settings, validated before anything is
//! served: an absolute existing registry, a registered workspace, a
//! positive deadline and bounds, existing transfer roots.

use std::path::{Path, PathBuf};
use std::time::Duration;

use stow_checkpoint::Registry;

/// Default per-capture and archive byte bound.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;
/// Default per-capture and archive file bound.
pub const DEFAULT_MAX_FILES: u64 = 100_000;

/// Flags of the workspace profile, as given (validated by
/// [`WorkspaceConfig::validate`]).
#[derive(Debug, Clone, Default)]
pub struct WorkspaceConfig {
    pub registry_dir: String,
    pub workspace_id: String,
    pub team: Option<String>,
    /// A duration such as `30s`; must be positive.
    pub timeout: Option<String>,
    pub max_bytes: Option<i64>,
    pub max_files: Option<i64>,
    pub export_root: Option<String>,
    pub adopt_root: Option<String>,
}

/// Validated settings of the workspace profile.
#[derive(Debug, Clone)]
pub struct WorkspaceSettings {
    pub registry: Registry,
    pub workspace_id: String,
    pub timeout: Duration,
    pub max_bytes: u64,
    pub max_files: u64,
    /// Canonical export root (symlinks resolved once, at startup).
    pub export_root: Option<PathBuf>,
    pub adopt_root: Option<PathBuf>,
}

/// Why the workspace profile refuses to start.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct WorkspaceConfigError(pub String);

fn refuse<T>(msg: impl Into<String>) -> Result<T, WorkspaceConfigError> {
    Err(WorkspaceConfigError(msg.into()))
}

fn root(flag: &str, dir: &Option<String>) -> Result<Option<PathBuf>, WorkspaceConfigError> {
    let Some(dir) = dir else { return Ok(None) };
    match std::fs::canonicalize(dir) {
        Ok(p) if p.is_dir() => Ok(Some(p)),
        _ => refuse(format!("{flag} {dir} must be an existing directory")),
    }
}

impl WorkspaceConfig {
    /// Checks every setting; nothing is created.
    pub fn validate(&self) -> Result<WorkspaceSettings, WorkspaceConfigError> {
        let reg = Path::new(&self.registry_dir);
        if self.registry_dir.is_empty() || !reg.is_absolute() {
            return refuse("--registry-dir must be an absolute path");
        }
        if !reg.is_dir() {
            return refuse(format!(
                "--registry-dir {} is not an existing directory",
                reg.display()
            ));
        }
        if self.workspace_id.is_empty() {
            return refuse("--workspace-id is required");
        }
        let timeout = match self.timeout.as_deref().map(humantime::parse_duration) {
            None => return refuse("--timeout is required (for example 30s)"),
            Some(Err(e)) => return refuse(format!("--timeout: {e}")),
            Some(Ok(d)) if d.is_zero() => return refuse("--timeout must be positive"),
            Some(Ok(d)) => d,
        };
        let bound = |flag: &str, v: Option<i64>, default: u64| match v {
            None => Ok(default),
            Some(n) if n > 0 => Ok(n as u64),
            Some(n) => refuse(format!("{flag} must be positive, not {n}")),
        };
        let max_bytes = bound("--max-bytes", self.max_bytes, DEFAULT_MAX_BYTES)?;
        let max_files = bound("--max-files", self.max_files, DEFAULT_MAX_FILES)?;
        if self.adopt_root.is_some() && self.export_root.is_none() {
            return refuse("--adopt-root needs --export-root (adoption reads bundles from it)");
        }
        let export_root = root("--export-root", &self.export_root)?;
        let adopt_root = root("--adopt-root", &self.adopt_root)?;
        let registry = Registry::resolve(Some(reg), self.team.as_deref())
            .map_err(|e| WorkspaceConfigError(e.to_string()))?;
        if let Err(e) = registry.get(&self.workspace_id) {
            return refuse(format!("--workspace-id: {e}"));
        }
        Ok(WorkspaceSettings {
            registry,
            workspace_id: self.workspace_id.clone(),
            timeout,
            max_bytes,
            max_files,
            export_root,
            adopt_root,
        })
    }
}
