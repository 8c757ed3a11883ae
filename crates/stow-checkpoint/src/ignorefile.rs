//! `.stowignore`: gitignore-syntax rules at the workspace root that keep
//! paths out of captures (build output, caches, logs). Matched by the
//! `ignore` crate, the matcher ripgrep uses for `.gitignore`.
//!
//! An attached workspace (recorded with `gitignore`) also leaves out what
//! git ignores there: `.git/info/exclude`, the root's `.gitignore`, and the
//! `.gitignore` of every directory below, each matched relative to its own
//! directory. Precedence, first decided wins: `.stowignore`, then the
//! `.gitignore` files from the path's own directory up to the root, then
//! the exclude file (git's order, with our file above git's). Git skips a
//! pattern it cannot parse, and so do we for git's files; a bad
//! `.stowignore` pattern is refused.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;

use crate::error::{Result, WsError};

/// The ignore file's name, at the workspace root.
pub const IGNORE_FILE: &str = ".stowignore";

/// Git's per-directory ignore file, read for attached workspaces.
pub const GIT_IGNORE_FILE: &str = ".gitignore";

/// The ignore rules of one tree, as one capture (or status, or rewind)
/// reads them. Nested `.gitignore` files are read when a path below their
/// directory is first asked about, and kept for the life of the rules.
pub(crate) struct Rules {
    root: PathBuf,
    /// `.stowignore`.
    stow: Option<Gitignore>,
    /// The root's `.gitignore` and the exclude file, in one matcher (the
    /// `.gitignore` added last, so it wins).
    git_root: Option<Gitignore>,
    /// Whether `.gitignore` files below the root are read.
    nested: bool,
    /// Directory (slash path, never the root) → its `.gitignore`, if any.
    below: RwLock<HashMap<String, Option<Arc<Gitignore>>>>,
}

impl Rules {
    /// Whether the rules keep `rel` (a slash path under the root) out.
    pub(crate) fn is_ignored(&self, rel: &str, is_dir: bool) -> bool {
        if let Some(m) = self.stow.as_ref().map(|g| g.matched(rel, is_dir)) {
            if !m.is_none() {
                return m.is_ignore();
            }
        }
        if self.nested {
            // The path's own directory first, then up towards the root.
            let mut dir = rel;
            while let Some((parent, _)) = dir.rsplit_once('/') {
                dir = parent;
                if let Some(g) = self.below(dir) {
                    let m = g.matched(&rel[dir.len() + 1..], is_dir);
                    if !m.is_none() {
                        return m.is_ignore();
                    }
                }
            }
        }
        self.git_root
            .as_ref()
            .is_some_and(|g| matches!(g.matched(rel, is_dir), Match::Ignore(_)))
    }

    /// The `.gitignore` of directory `dir` (read once).
    fn below(&self, dir: &str) -> Option<Arc<Gitignore>> {
        if let Some(known) = self
            .below
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(dir)
        {
            return known.clone();
        }
        let abs = self.root.join(dir);
        let path = abs.join(GIT_IGNORE_FILE);
        let read = match regular_file(&path) {
            Ok(true) => {
                let mut b = GitignoreBuilder::new(&abs);
                let _partial_errors = b.add(&path);
                b.build().ok().map(Arc::new)
            }
            // Not there (or unreadable): nothing of it applies.
            _ => None,
        };
        self.below
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(dir.to_string(), read.clone());
        read
    }
}

/// The rules a capture of `root` applies: `.stowignore`, and with
/// `gitignore` git's own files; `None` when there are none. A malformed
/// `.stowignore` pattern is refused (naming the file), never skipped.
pub(crate) fn load(root: &Path, gitignore: bool) -> Result<Option<Rules>> {
    let mut git_root = None;
    if gitignore {
        // Later files win, as in git: the exclude file, then `.gitignore`.
        let mut b = GitignoreBuilder::new(root);
        let mut any = false;
        for path in [
            root.join(".git").join("info").join("exclude"),
            root.join(GIT_IGNORE_FILE),
        ] {
            if regular_file(&path)? {
                let _partial_errors = b.add(&path);
                any = true;
            }
        }
        if any {
            git_root = b.build().ok();
        }
    }
    let path = root.join(IGNORE_FILE);
    let mut stow = None;
    if regular_file(&path)? {
        let mut b = GitignoreBuilder::new(root);
        if let Some(e) = b.add(&path) {
            return Err(WsError::InvalidRequest(format!("{}: {e}", path.display())));
        }
        stow = Some(
            b.build()
                .map_err(|e| WsError::InvalidRequest(format!("{}: {e}", path.display())))?,
        );
    }
    if stow.is_none() && !gitignore {
        return Ok(None);
    }
    Ok(Some(Rules {
        root: root.to_path_buf(),
        stow,
        git_root,
        nested: gitignore,
        below: RwLock::default(),
    }))
}

/// The rules a capture applied whose root `.gitignore` and `.stowignore`
/// held `git` and `stow` (a checkpoint's own copies), with the
/// repository's exclude file as it is now (`gitignore`: attached
/// workspaces); `None` when there are none. Lines that do not parse are
/// skipped: these rules only keep paths, never refuse. (Nested
/// `.gitignore` files are not part of them.)
pub(crate) fn from_contents(
    root: &Path,
    gitignore: bool,
    git: Option<&[u8]>,
    stow: Option<&[u8]>,
) -> Result<Option<Rules>> {
    let build = |files: &[Option<&[u8]>], exclude: bool| -> Result<Option<Gitignore>> {
        let mut b = GitignoreBuilder::new(root);
        let mut any = false;
        let path = root.join(".git").join("info").join("exclude");
        if exclude && regular_file(&path)? {
            let _partial_errors = b.add(&path);
            any = true;
        }
        for text in files.iter().flatten() {
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
    };
    let git_root = build(&[git], gitignore)?;
    let stow = build(&[stow], false)?;
    if git_root.is_none() && stow.is_none() {
        return Ok(None);
    }
    Ok(Some(Rules {
        root: root.to_path_buf(),
        stow,
        git_root,
        nested: false,
        below: RwLock::default(),
    }))
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
pub(crate) fn is_ignored(rules: &Rules, rel: &str, is_dir: bool) -> bool {
    rules.is_ignored(rel, is_dir)
}
