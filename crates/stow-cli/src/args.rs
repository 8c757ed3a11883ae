//! Argument groups several verbs share: which registry partition (and
//! workspace) a verb acts on, and the transfer verbs' bounds.

use std::path::PathBuf;

use clap::Args;
use stow_checkpoint::archive::ArchiveLimits;
use stow_checkpoint::{Registry, WsError};

use crate::CliError;

/// Registry selection shared by every registry-scoped verb.
#[derive(Args, Clone, Default)]
pub struct RegistryArgs {
    /// Registry root (default: $XDG_CONFIG_HOME/stow-s3/workspaces).
    #[arg(long)]
    pub(crate) registry_dir: Option<PathBuf>,
    /// Team partition (<registry-dir>/teams/<team>).
    #[arg(long)]
    pub(crate) team: Option<String>,
}

impl RegistryArgs {
    pub(crate) fn open(&self) -> Result<Registry, WsError> {
        Registry::resolve(self.registry_dir.as_deref(), self.team.as_deref())
    }

    /// The workspace a verb acts on and its partition: `--id` when given,
    /// else the workspace holding the current directory (the nearest
    /// ancestor with a workspace identity), whose identity names its
    /// registry and team unless `--registry-dir`/`--team` say otherwise.
    pub(crate) fn workspace(&self, id: Option<String>) -> Result<(String, Registry), CliError> {
        if let Some(id) = id {
            return Ok((id, self.open()?));
        }
        let cwd = std::env::current_dir()
            .map_err(|e| CliError::new("io_failure", format!("current directory: {e}")))?;
        let Some((_, ident)) = stow_workspace::find_workspace(&cwd) else {
            return Err(CliError::usage(format!(
                "no --id given and no workspace at or above {}; run `stow-s3 workspace attach` \
                 there to make it one, or pass --id",
                cwd.display()
            )));
        };
        let registry = if self.registry_dir.is_some() || self.team.is_some() {
            self.open()?
        } else {
            Registry::resolve(ident.registry_dir.as_deref(), ident.team.as_deref())?
        };
        Ok((ident.workspace_id, registry))
    }
}

/// Bounds and the sensitive-path opt-in of the transfer verbs.
#[derive(Args, Clone, Default)]
pub struct TransferArgs {
    /// Payload byte bound (default 1 GiB).
    #[arg(long, default_value_t = 0)]
    max_bytes: u64,
    /// Payload count bound (default 100,000).
    #[arg(long, default_value_t = 0)]
    max_files: u64,
    /// Allow sensitive-looking paths (.env, keys, credentials).
    #[arg(long)]
    pub(crate) include_sensitive: bool,
}

impl TransferArgs {
    pub(crate) fn limits(&self) -> ArchiveLimits {
        ArchiveLimits {
            max_bytes: self.max_bytes,
            max_files: self.max_files,
        }
    }
}
