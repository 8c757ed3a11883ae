//! `.stowignore`: gitignore-syntax rules at the workspace root that keep
//! paths out of captures (build output, caches, logs). Matched by the
//! `ignore` crate, the matcher ripgrep uses for `.gitignore`.

use std::path::Path;

use ignore::gitignore::{Gitignore, GitignoreBuilder};

use crate::error::{Result, WsError};

/// The ignore file's name, at the workspace root.
pub const IGNORE_FILE: &str = ".stowignore";

/// The rules of `<root>/.stowignore`, or `None` when there is no such
/// file. A malformed pattern is refused (naming the file), never skipped.
pub(crate) fn load(root: &Path) -> Result<Option<Gitignore>> {
    let path = root.join(IGNORE_FILE);
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_file() => {}
        Ok(_) => {
            return Err(WsError::InvalidRequest(format!(
                "{} is not a regular file",
                path.display()
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(WsError::io_at("read", &path, e)),
    }
    let mut b = GitignoreBuilder::new(root);
    if let Some(e) = b.add(&path) {
        return Err(WsError::InvalidRequest(format!("{}: {e}", path.display())));
    }
    b.build()
        .map(Some)
        .map_err(|e| WsError::InvalidRequest(format!("{}: {e}", path.display())))
}

/// Whether the rules keep `rel` (a slash path under the root) out.
pub(crate) fn is_ignored(rules: &Gitignore, rel: &str, is_dir: bool) -> bool {
    rules.matched(rel, is_dir).is_ignore()
}
