//! `.stowignore`: gitignore-syntax rules at the workspace root that keep
//! paths out of captures (build output, caches, logs). Matched by the
//! `ignore` crate, the matcher ripgrep uses for `.gitignore`.
//!
//! An attached workspace (recorded with `gitignore`) also leaves out what
//! git ignores there: the root's `.gitignore` and `.git/info/exclude`.
//! (Nested `.gitignore` files are not read yet.) Git skips a pattern it
//! cannot parse, and so do we for git's files; a bad `.stowignore` pattern
//! is refused.

use std::path::Path;

use ignore::gitignore::{Gitignore, GitignoreBuilder};

use crate::error::{Result, WsError};

/// The ignore file's name, at the workspace root.
pub const IGNORE_FILE: &str = ".stowignore";

/// The root's `.gitignore`, read for attached workspaces.
pub const GIT_IGNORE_FILE: &str = ".gitignore";

/// The rules a capture of `root` applies: `.stowignore`, and with
/// `gitignore` git's own files; `None` when there are none. A malformed
/// `.stowignore` pattern is refused (naming the file), never skipped.
pub(crate) fn load(root: &Path, gitignore: bool) -> Result<Option<Gitignore>> {
    let mut b = GitignoreBuilder::new(root);
    let mut any = false;
    if gitignore {
        // Later files win, as in git: the exclude file, then `.gitignore`.
        for path in [
            root.join(".git").join("info").join("exclude"),
            root.join(GIT_IGNORE_FILE),
        ] {
            if regular_file(&path)? {
                let _partial_errors = b.add(&path);
                any = true;
            }
        }
    }
    let path = root.join(IGNORE_FILE);
    if regular_file(&path)? {
        if let Some(e) = b.add(&path) {
            return Err(WsError::InvalidRequest(format!("{}: {e}", path.display())));
        }
        any = true;
    }
    if !any {
        return Ok(None);
    }
    b.build()
        .map(Some)
        .map_err(|e| WsError::InvalidRequest(format!("{}: {e}", path.display())))
}

/// The rules a capture applied whose root `.gitignore` and `.stowignore`
/// held `git` and `stow` (a checkpoint's own copies), with the
/// repository's exclude file as it is now (`gitignore`: attached
/// workspaces); `None` when there are none. Lines that do not parse are
/// skipped: these rules only keep paths, never refuse.
pub(crate) fn from_contents(
    root: &Path,
    gitignore: bool,
    git: Option<&[u8]>,
    stow: Option<&[u8]>,
) -> Result<Option<Gitignore>> {
    let mut b = GitignoreBuilder::new(root);
    let mut any = false;
    let exclude = root.join(".git").join("info").join("exclude");
    if gitignore && regular_file(&exclude)? {
        let _partial_errors = b.add(&exclude);
        any = true;
    }
    for text in [git, stow].into_iter().flatten() {
        for line in String::from_utf8_lossy(text).lines() {
            let _ = b.add_line(None, line);
        }
        any = true;
    }
    if !any {
        return Ok(None);
    }
    b.build()
        .map(Some)
        .map_err(|e| WsError::InvalidRequest(format!("ignore rules of a checkpoint: {e}")))
}

/// Whether `path` is a regular file (`false` when absent); a `.stowignore`
/// that is something else is refused.
fn regular_file(path: &Path) -> Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_file() => Ok(true),
        Ok(_) if path.ends_with(IGNORE_FILE) => Err(WsError::InvalidRequest(format!(
            "{} is not a regular file",
            path.display()
        ))),
        Ok(_) => Ok(false),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(WsError::io_at("read", path, e)),
    }
}

/// Whether the rules keep `rel` (a slash path under the root) out.
pub(crate) fn is_ignored(rules: &Gitignore, rel: &str, is_dir: bool) -> bool {
    rules.matched(rel, is_dir).is_ignore()
}
