//! The harness's one error type.

use std::io;
use std::path::PathBuf;

/// What can go wrong in the harness (mounting, the model, a rebuild, the
/// control socket).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O call failed; `what` names the call and its path.
    #[error("{what}: {source}")]
    Io {
        /// The call and its path.
        what: String,
        /// The OS error.
        source: io::Error,
    },
    /// The backing directory is unusable (not a directory, already in use).
    #[error("backing directory {0}: {1}")]
    Backing(PathBuf, String),
    /// The control socket answered something unexpected.
    #[error("control: {0}")]
    Control(String),
}

impl Error {
    /// Wraps an I/O error with the call that failed.
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

/// The harness's result type.
pub type Result<T> = std::result::Result<T, Error>;

/// Adds a description to an I/O result.
pub trait Context<T> {
    /// Names the failed call (evaluated only on error).
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> Context<T> for io::Result<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::io(what(), e))
    }
}
