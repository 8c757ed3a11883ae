//! The workspace profile (`stow-s3 mcp --registry-dir R --workspace-id W
//! --timeout D`): checkpoints of one workspace and handoff bundles for an
//! agent host. Tool names, descriptions and schemas are `workspace_tools.json`'s,
//! verbatim; every storage decision is `stow-workspace`'s.

mod config;
mod envelope;
mod rewind;
pub(crate) mod server;
mod tools;

use std::sync::Arc;
use std::time::Duration;

pub use config::{WorkspaceConfig, WorkspaceConfigError, WorkspaceSettings};
pub use server::{WorkspaceServer, GUIDE_URI};
pub use tools::WorkspaceCore;

use crate::ServeError;

/// Runs the workspace profile on stdin/stdout until stdin closes or SIGINT
/// or SIGTERM arrives. Settings are validated before anything is served;
/// closing never touches the workspace or its checkpoints.
pub fn serve_workspace_profile(config: &WorkspaceConfig) -> Result<(), ServeError> {
    let settings = config.validate().map_err(|e| ServeError::Workspace(e.0))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    let server = WorkspaceServer::new(Arc::new(WorkspaceCore::new(settings)))?;
    let result = runtime.block_on(crate::serve_until_closed(server));
    runtime.shutdown_timeout(Duration::from_millis(200));
    result
}
