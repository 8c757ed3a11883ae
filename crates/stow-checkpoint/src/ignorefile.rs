//! `.stowignore`: gitignore-syntax rules at the workspace root that keep
//! paths out of captures (build output, caches, logs). Matched by the
//! `ignore` crate, the matcher ripgrep uses for `.gitignore`.
//!
//! An attached workspace (recorded with `gitignore`) also leaves out what
//! git ignores there: the user's global excludes file (`core.excludesFile`,
//! else git's default), the repository's `info/exclude` (found as git
//! finds them: `gitexcludes`), the
//! root's `.gitignore`, and the
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
use crate::fsutil::FileStamp;
use crate::gitexcludes::excludes_files;

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
    /// Where `.gitignore` files below the root come from.
    nested: Nested,
    /// Directory (slash path, never the root) → what it holds.
    below: RwLock<HashMap<String, Below>>,
    /// The excludes files as read (neither is watched: a monitor compares
    /// these to know the rules it kept a scan under still hold).
    exclude: ExcludeStamps,
}

/// Where a tree's nested `.gitignore` files come from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Nested {
    /// Nowhere: only the root's rules apply.
    None,
    /// The tree on disk, read when first asked.
    Tree,
    /// Given up front (a checkpoint's own files); a directory not given
    /// has none.
    Given,
}

/// One directory below the root, as the rules know it.
#[derive(Clone, Default)]
struct Below {
    /// A real directory (neither it nor any directory above it is a
    /// symbolic link): only such a directory's `.gitignore` applies, as a
    /// scan never enters a link.
    real: bool,
    rules: Option<Arc<Gitignore>>,
}

impl Rules {
    /// Whether the rules keep `rel` (a slash path under the root) out.
    pub(crate) fn is_ignored(&self, rel: &str, is_dir: bool) -> bool {
        let dir = rel.rsplit_once('/').map_or("", |(dir, _)| dir);
        self.in_dir(dir).is_ignored(rel, is_dir)
    }

    /// The rules for the entries of directory `dir` (a slash path, `""`
    /// for the root): its own `.gitignore` and those above it, looked up
    /// once for all the entries a scan reads there.
    pub(crate) fn in_dir(&self, dir: &str) -> DirRules<'_> {
        let mut nested = Vec::new();
        if self.nested != Nested::None {
            let mut at = dir;
            while !at.is_empty() {
                if let Some(g) = self.below(at).rules {
                    nested.push((at.len(), g));
                }
                at = at.rsplit_once('/').map_or("", |(parent, _)| parent);
            }
        }
        DirRules {
            rules: self,
            nested,
        }
    }

    /// The excludes files' stamps when these rules were read.
    pub(crate) fn exclude_stamp(&self) -> ExcludeStamps {
        self.exclude
    }

    /// Directory `dir` (read from the tree once).
    fn below(&self, dir: &str) -> Below {
        if let Some(known) = self
            .below
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(dir)
        {
            return known.clone();
        }
        if self.nested != Nested::Tree {
            return Below::default();
        }
        let parent_real = match dir.rsplit_once('/') {
            Some((parent, _)) => self.below(parent).real,
            None => true,
        };
        let abs = self.root.join(dir);
        let real =
            parent_real && std::fs::symlink_metadata(&abs).is_ok_and(|m| m.file_type().is_dir());
        let rules = match real && regular_file(&abs.join(GIT_IGNORE_FILE)).unwrap_or(false) {
            true => read_nested(&abs),
            // Not there (or unreadable): nothing of it applies.
            false => None,
        };
        self.remember(dir, Below { real, rules })
    }

    /// [`Rules::in_dir`] for a directory a scan is reading, whose listing
    /// says whether it holds a regular `.gitignore`: a scan reaches only
    /// real directories (it never enters a link), so neither the directory
    /// nor its `.gitignore` needs a `stat` of its own.
    pub(crate) fn in_scanned_dir(&self, dir: &str, gitignore_listed: bool) -> DirRules<'_> {
        let known = self
            .below
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(dir);
        if self.nested == Nested::Tree && !dir.is_empty() && !known {
            let real = match dir.rsplit_once('/') {
                Some((parent, _)) => self.below(parent).real,
                None => true,
            };
            let rules = match real && gitignore_listed {
                true => read_nested(&self.root.join(dir)),
                false => None,
            };
            self.remember(dir, Below { real, rules });
        }
        self.in_dir(dir)
    }

    fn remember(&self, dir: &str, entry: Below) -> Below {
        self.below
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(dir.to_string(), entry.clone());
        entry
    }
}

/// The rules that apply to the entries of one directory.
pub(crate) struct DirRules<'a> {
    rules: &'a Rules,
    /// The directory's `.gitignore` matchers, its own first, then up
    /// towards the root: (length of the directory's path, matcher).
    nested: Vec<(usize, Arc<Gitignore>)>,
}

impl DirRules<'_> {
    /// Whether the rules keep `rel` (an entry of this directory) out:
    /// `.stowignore` first, then the nearest `.gitignore` with a say,
    /// then the root's `.gitignore` and the exclude file.
    pub(crate) fn is_ignored(&self, rel: &str, is_dir: bool) -> bool {
        if let Some(m) = self.rules.stow.as_ref().map(|g| g.matched(rel, is_dir)) {
            if !m.is_none() {
                return m.is_ignore();
            }
        }
        for (len, g) in &self.nested {
            let m = g.matched(&rel[len + 1..], is_dir);
            if !m.is_none() {
                return m.is_ignore();
            }
        }
        self.rules
            .git_root
            .as_ref()
            .is_some_and(|g| matches!(g.matched(rel, is_dir), Match::Ignore(_)))
    }
}

/// Whether a file named `name` is one the rules are read from (at any
/// depth: a nested `.gitignore` rules its directory).
pub(crate) fn is_rules_file(name: &str) -> bool {
    name == IGNORE_FILE || name == GIT_IGNORE_FILE
}

/// The rules a capture of `root` applies: `.stowignore`, and with
/// `gitignore` git's own files; `None` when there are none. A malformed
/// `.stowignore` pattern is refused (naming the file), never skipped.
pub(crate) fn load(root: &Path, gitignore: bool) -> Result<Option<Rules>> {
    let mut git_root = None;
    if gitignore {
        // Later files win, as in git: the excludes files, then `.gitignore`.
        let mut b = GitignoreBuilder::new(root);
        let mut any = false;
        let [global, repo] = excludes_files(root);
        // The user's global file is theirs, not the tree's: unreadable, it
        // is left out rather than refusing the capture.
        if let Some(path) = global.filter(|p| regular_file(p).unwrap_or(false)) {
            let _partial_errors = b.add(&path);
            any = true;
        }
        for path in [repo, Some(root.join(GIT_IGNORE_FILE))]
            .into_iter()
            .flatten()
        {
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
        nested: if gitignore {
            Nested::Tree
        } else {
            Nested::None
        },
        below: RwLock::default(),
        exclude: exclude_stamp(root, gitignore),
    }))
}

/// The stamps of the excludes files (global, then the repository's), as
/// an attached workspace's rules read them.
pub(crate) type ExcludeStamps = [Option<FileStamp>; 2];

/// The stamps of `root`'s excludes files, read for attached workspaces.
fn exclude_stamp(root: &Path, gitignore: bool) -> ExcludeStamps {
    if !gitignore {
        return [None, None];
    }
    excludes_files(root).map(|p| p.and_then(|p| FileStamp::of(&p)))
}

/// The rules a capture applied whose `.gitignore` files held `git` (by
/// directory, "" for the root) and whose root `.stowignore` held `stow` (a
/// checkpoint's own copies), with the repository's exclude file as it is
/// now (`gitignore`: attached workspaces); `None` when there are none.
/// Lines that do not parse are skipped: these rules only keep paths,
/// never refuse.
pub(crate) fn from_contents(
    root: &Path,
    gitignore: bool,
    git: &HashMap<String, Vec<u8>>,
    stow: Option<&[u8]>,
) -> Result<Option<Rules>> {
    let build = |dir: &str, files: &[Option<&[u8]>], exclude: bool| -> Result<Option<Gitignore>> {
        let mut b = GitignoreBuilder::new(root.join(dir));
        let mut any = false;
        for path in excludes_files(root).into_iter().flatten() {
            if exclude && regular_file(&path).unwrap_or(false) {
                let _partial_errors = b.add(&path);
                any = true;
            }
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
    let git = if gitignore { git } else { &HashMap::new() };
    let git_root = build("", &[git.get("").map(Vec::as_slice)], gitignore)?;
    let stow = build("", &[stow], false)?;
    let mut below = HashMap::new();
    for (dir, text) in git.iter().filter(|(dir, _)| !dir.is_empty()) {
        let rules = build(dir, &[Some(text)], false)?.map(Arc::new);
        below.insert(dir.clone(), Below { real: true, rules });
    }
    if git_root.is_none() && stow.is_none() && below.is_empty() {
        return Ok(None);
    }
    Ok(Some(Rules {
        root: root.to_path_buf(),
        stow,
        git_root,
        nested: Nested::Given,
        below: RwLock::new(below),
        exclude: exclude_stamp(root, gitignore),
    }))
}

/// The matcher of the `.gitignore` in directory `abs` (`None` when it
/// cannot be read or built: nothing of it applies).
fn read_nested(abs: &Path) -> Option<Arc<Gitignore>> {
    let mut b = GitignoreBuilder::new(abs);
    let _partial_errors = b.add(abs.join(GIT_IGNORE_FILE));
    b.build().ok().map(Arc::new)
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
