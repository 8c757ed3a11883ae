//! How a remote operation fails: a kind with a stable code. It lives with
//! the crate's error type, which holds it, so that the engine's every
//! module can name it without importing the transfer layer.

/// How a remote operation failed (the stable codes of [`RemoteError`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteFailure {
    /// Credentials are missing, unknown or refused (401/403).
    Auth,
    /// The remote's bucket does not exist.
    NoSuchBucket,
    /// The endpoint could not be reached (DNS, connection, TLS).
    Unreachable,
    /// The service kept answering 503 SlowDown past the retries.
    Throttled,
    /// The overall deadline (`--timeout`) passed.
    Timeout,
    /// Any other refusal or failure of the service.
    Failed,
}

/// A failure talking to a remote, with a stable code.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct RemoteError {
    pub kind: RemoteFailure,
    pub message: String,
}

impl RemoteError {
    pub fn new(kind: RemoteFailure, message: impl Into<String>) -> RemoteError {
        RemoteError {
            kind,
            message: message.into(),
        }
    }

    /// The stable machine code.
    pub fn code(&self) -> &'static str {
        match self.kind {
            RemoteFailure::Auth => "remote_auth",
            RemoteFailure::NoSuchBucket => "remote_no_bucket",
            RemoteFailure::Unreachable => "remote_unreachable",
            RemoteFailure::Throttled => "remote_throttled",
            RemoteFailure::Timeout => "remote_timeout",
            RemoteFailure::Failed => "remote_failed",
        }
    }
}
