//! Typed errors of the workspace engine, each with a stable machine code.

mod remote;

pub use remote::{RemoteError, RemoteFailure};
use std::path::{Path, PathBuf};

/// Everything the workspace engine can refuse or fail with.
///
/// Every variant has a stable machine code ([`WsError::code`]); the CLI and
/// MCP map codes to their wire forms.
#[derive(Debug, thiserror::Error)]
pub enum WsError {
    /// The task manifest is malformed or breaks a rule of its schema.
    #[error("invalid task manifest: {0}")]
    InvalidManifest(String),
    /// A destination, working directory or checkpoint path is not portable.
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath { path: String, reason: String },
    /// An input is a symlink, a special file, or otherwise not copyable.
    #[error("invalid input {path}: {reason}")]
    InvalidInput { path: PathBuf, reason: String },
    /// A credential-looking path was met without the explicit opt-in.
    #[error("sensitive path {path:?} refused; set {opt_in} to include it (filename check, not secret scanning)")]
    SensitivePath { path: String, opt_in: &'static str },
    /// Some other argument is malformed.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The new root is unusable (exists, or its parent is missing).
    #[error("invalid root {root}: {reason}")]
    InvalidRoot { root: PathBuf, reason: String },
    /// A byte, file, checkpoint or workspace bound would be exceeded.
    #[error("capacity exceeded: {0}")]
    CapacityExceeded(String),
    /// No such workspace, checkpoint or document.
    #[error("{0} not found")]
    NotFound(String),
    /// An adopt imported its checkpoint but could not restore it: the
    /// checkpoint stays in the registry (restore it again, or delete it).
    #[error("imported checkpoint {checkpoint_id}, but restoring it failed: {reason}")]
    PartialImport {
        checkpoint_id: String,
        reason: String,
    },
    /// A delta's preconditions do not hold on the named base.
    #[error("delta refused: the base has diverged from the delta ({0})")]
    DeltaConflict(String),
    /// A delta document is malformed or does not verify.
    #[error("delta refused: {0}")]
    InvalidDelta(String),
    /// A transfer archive breaks a rule of its format (structure, names,
    /// entry types, sizes, digests, trailer, compression).
    #[error("invalid archive: {0}")]
    InvalidArchive(String),
    /// A checkpoint (or file) with that name already exists; nothing was
    /// replaced.
    #[error("{0} already exists")]
    AlreadyExists(String),
    /// A live session owns the workspace.
    #[error("workspace {0} is in use by a live session")]
    InUse(String),
    #[error("workspace {0} is already watched by another process (`workspace watch` or `workspace serve`)")]
    AlreadyWatched(String),
    /// A process serving the workspace is at its bound of requests.
    #[error("{0}")]
    Busy(String),
    /// The operation is refused for this workspace (adopted, home, cwd, ...).
    #[error("refused: {0}")]
    Refused(String),
    /// A Git input could not be staged.
    #[error("git input {source_repo}: {reason}")]
    Git {
        source_repo: PathBuf,
        reason: String,
    },
    /// The parent checkpoint is missing or belongs to another workspace.
    #[error("invalid parent: {0}")]
    InvalidParent(String),
    /// Another capture (or rewind) of this workspace holds its lock.
    #[error("another capture or rewind of workspace {0} is in progress")]
    InProgress(String),
    /// The tree changed while a capture read it, or a rewind changed it
    /// (the message says which).
    #[error("the workspace changed: {0}")]
    WorkspaceChanged(String),
    /// A failure after the visibility point: the effect may have happened.
    #[error("outcome unknown: {0}")]
    OutcomeUnknown(String),
    /// The same request key was used with different options or meaning.
    #[error("request key was already used for a different request")]
    RequestConflict,
    /// A stored record, manifest or blob is unreadable or does not verify.
    #[error("corrupt: {0}")]
    Corrupt(String),
    /// A remote (S3 service) refused or failed; the code says how.
    #[error("remote: {0}")]
    Remote(#[from] remote::RemoteError),
    /// Something on a remote disagrees with its name or with the manifest
    /// that names it (wrong bytes, size or digest; a missing blob; a
    /// malformed manifest). Nothing was published.
    #[error("corrupt remote: {0}")]
    CorruptRemote(String),

    #[error("cancelled: {0}")]
    Cancelled(String),
    /// A file-system operation failed.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl WsError {
    /// The stable machine code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            WsError::InvalidManifest(_) => "invalid_manifest",
            WsError::InvalidPath { .. } => "invalid_path",
            WsError::InvalidInput { .. } => "invalid_input",
            WsError::SensitivePath { .. } => "sensitive_path",
            WsError::InvalidRequest(_) => "invalid_request",
            WsError::InvalidRoot { .. } => "invalid_root",
            WsError::CapacityExceeded(_) => "capacity_exceeded",
            WsError::NotFound(_) => "not_found",
            WsError::AlreadyExists(_) => "already_exists",
            WsError::InvalidArchive(_) => "invalid_archive",
            WsError::DeltaConflict(_) => "delta_conflict",
            WsError::InvalidDelta(_) => "invalid_delta",
            WsError::PartialImport { .. } => "partial_import",
            WsError::InUse(_) | WsError::AlreadyWatched(_) | WsError::Busy(_) => "in_use",
            WsError::Refused(_) => "refused",
            WsError::Git { .. } => "git_failed",
            WsError::InProgress(_) => "in_progress",
            WsError::InvalidParent(_) => "invalid_parent",
            WsError::OutcomeUnknown(_) => "outcome_unknown",
            WsError::RequestConflict => "request_conflict",
            WsError::WorkspaceChanged(_) => "workspace_changed",
            WsError::Corrupt(_) => "corrupt_checkpoint",
            WsError::Cancelled(_) => "cancelled",
            WsError::Remote(e) => e.code(),
            WsError::CorruptRemote(_) => "corrupt_remote",
            WsError::Io { source, .. } if stow_store::io_is_no_space(source) => "no_space",
            WsError::Io { .. } => "io_failure",
        }
    }

    /// Whether retrying the same request may succeed.
    pub fn retryable(&self) -> bool {
        use remote::RemoteFailure as F;
        match self {
            WsError::InProgress(_) | WsError::WorkspaceChanged(_) | WsError::Busy(_) => true,
            WsError::Remote(e) => matches!(e.kind, F::Unreachable | F::Throttled | F::Timeout),
            _ => false,
        }
    }

    pub fn io(context: impl Into<String>, source: std::io::Error) -> WsError {
        WsError::Io {
            context: context.into(),
            source,
        }
    }

    pub fn io_at(what: &str, path: &Path, source: std::io::Error) -> WsError {
        WsError::Io {
            context: format!("{what} {}", path.display()),
            source,
        }
    }
}

/// Result of workspace operations.
pub type Result<T, E = WsError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_has_one_code() {
        let e = WsError::io("write blob", std::io::Error::from_raw_os_error(28));
        assert_eq!(e.code(), "no_space");
        let e = WsError::io("write blob", std::io::Error::from_raw_os_error(5));
        assert_eq!(e.code(), "io_failure");
    }
}
