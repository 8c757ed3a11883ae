//! The plan of a rewind: for every path where the tree as the undo
//! checkpoint recorded it (`was`) differs from the target checkpoint
//! (`want`), the steps that turn one into the other, in the order they
//! can run: read-only directories opened up, removals, emptied
//! directories, new directories, installs, directory modes.
//!
//! A plan is computed from two published (immutable) manifests, never
//! from the live tree; the live tree is compared with `was` only when a
//! step runs (`apply`), which is what makes a concurrent write a conflict
//! instead of a loss.

use std::collections::{BTreeMap, BTreeSet};

use crate::ignorefile::Rules;
use serde::{Deserialize, Serialize};

use crate::error::{Result, WsError};
use crate::format::CheckpointManifest;
use crate::ignorefile::is_ignored;
use crate::paths::{check_checkpoint_path, is_reserved_path, is_sensitive};

/// What a path holds in one of the two checkpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Entry {
    Absent,
    File {
        sha256: String,
        size: u64,
        mode: u32,
    },
    Link {
        target: String,
    },
    Dir {
        mode: u32,
    },
}

/// One step of a rewind. `was` is what the undo checkpoint recorded at the
/// path when the step runs (so a step that follows a removal expects
/// nothing there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub(crate) enum Step {
    /// Remove a file or link (the checkpoint has nothing, a directory, or
    /// an entry of another kind there).
    Remove { path: String, was: Entry },
    /// Remove a directory the checkpoint does not hold, once empty (what
    /// the capture rules left out stays, and the directory with it).
    RemoveDir { path: String },
    /// Create a directory the checkpoint holds, where `was` is nothing, a
    /// file or a link (exchanged in one step).
    MakeDir { path: String, was: Entry, mode: u32 },
    /// Put a file or link in place (`want` is `File` or `Link`), replacing
    /// `was` in one step (nothing, a file, a link, or a directory that
    /// earlier steps emptied).
    Install {
        path: String,
        was: Entry,
        want: Entry,
    },
    /// Set a file's mode (same bytes).
    Chmod { path: String, was: Entry, mode: u32 },
    /// Set a directory's mode (deepest first, once everything inside is
    /// written; or, first of all, a read-only directory opened up to its
    /// owner so the steps inside it can run).
    DirMode { path: String, mode: u32 },
}

impl Step {
    /// The path the step acts on.
    pub(crate) fn path(&self) -> &str {
        match self {
            Step::Remove { path, .. }
            | Step::RemoveDir { path }
            | Step::MakeDir { path, .. }
            | Step::Install { path, .. }
            | Step::Chmod { path, .. }
            | Step::DirMode { path, .. } => path,
        }
    }
}

/// Bytes of the files the steps check against the undo capture before
/// replacing or removing them.
pub(crate) fn bytes_to_check(steps: &[Step]) -> u64 {
    steps
        .iter()
        .map(|s| match s {
            Step::Remove { was, .. }
            | Step::Install { was, .. }
            | Step::Chmod { was, .. }
            | Step::MakeDir { was, .. } => match was {
                Entry::File { size, .. } => *size,
                _ => 0,
            },
            _ => 0,
        })
        .fold(0, u64::saturating_add)
}

/// Which paths a rewind may touch: the ones a capture of the tree reads.
pub(crate) struct Domain<'a> {
    pub rules: Option<&'a Rules>,
    pub include_sensitive: bool,
}

impl Domain<'_> {
    /// Whether a capture reads `path` (a file, link or directory): no
    /// reserved segment, no ignored ancestor or leaf, not sensitive unless
    /// included.
    fn covers(&self, path: &str, is_dir: bool) -> bool {
        if is_reserved_path(path) || (!self.include_sensitive && is_sensitive(path)) {
            return false;
        }
        self.rules
            .is_none_or(|r| !ignored_with_ancestors(r, path, is_dir))
    }
}

/// Whether `rules` keep `path` out, or any directory above it.
pub(crate) fn ignored_with_ancestors(rules: &Rules, path: &str, is_dir: bool) -> bool {
    ancestors_of(path).any(|a| is_ignored(rules, a, true)) || is_ignored(rules, path, is_dir)
}

/// Drops the removals of paths the target's own ignore rules kept out of
/// it: the target did not hold them because they were ignored then, not
/// because they were absent (the rules changed since), so they stay.
pub(crate) fn keep_target_ignored(plan: &mut Plan, target_rules: &Rules) {
    let mut kept: Vec<String> = Vec::new();
    plan.steps.retain(|s| {
        let (path, is_dir) = match s {
            Step::Remove { path, .. } => (path, false),
            Step::RemoveDir { path } => (path, true),
            _ => return true,
        };
        if ignored_with_ancestors(target_rules, path, is_dir) {
            kept.push(path.clone());
            return false;
        }
        true
    });
    plan.skipped.extend(kept);
}

/// The steps, and what the plan leaves alone.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Plan {
    pub steps: Vec<Step>,
    /// Files the target holds that are already in place.
    pub unchanged: u64,
    /// Target paths the capture rules leave out (ignored or sensitive):
    /// never written.
    pub skipped: Vec<String>,
}

/// Every path of a manifest with what it holds (directories implied by a
/// file or link included).
fn entries(m: &CheckpointManifest) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    for d in &m.dirs {
        out.insert(d.path.clone(), Entry::Dir { mode: d.mode });
    }
    let add_parents = |out: &mut BTreeMap<String, Entry>, path: &str| {
        let mut at = path;
        while let Some((parent, _)) = at.rsplit_once('/') {
            out.entry(parent.to_string())
                .or_insert(Entry::Dir { mode: 0o755 });
            at = parent;
        }
    };
    for f in &m.files {
        add_parents(&mut out, &f.path);
        out.insert(
            f.path.clone(),
            Entry::File {
                sha256: f.sha256.clone(),
                size: f.size,
                mode: f.mode,
            },
        );
    }
    for l in &m.links {
        add_parents(&mut out, &l.path);
        out.insert(
            l.path.clone(),
            Entry::Link {
                target: l.target.clone(),
            },
        );
    }
    out
}

/// Checks and normalizes `--paths`: clean relative paths, no reserved
/// segment, a trailing slash dropped, duplicates and paths under another
/// one folded.
pub(crate) fn check_scope(paths: &[String]) -> Result<Vec<String>> {
    let mut out: BTreeSet<String> = BTreeSet::new();
    for p in paths {
        let p = p.trim_end_matches('/');
        let p = p.strip_prefix("./").unwrap_or(p);
        check_checkpoint_path(p).map_err(|e| match e {
            WsError::InvalidPath { path, reason } => WsError::InvalidPath {
                path,
                reason: format!("{reason} (a --paths entry names a file or directory of the tree)"),
            },
            e => e,
        })?;
        out.insert(p.to_string());
    }
    // Sorted, so a path's ancestors are kept before it is looked at.
    let mut kept: Vec<String> = Vec::new();
    let mut set: std::collections::HashSet<String> = std::collections::HashSet::new();
    for p in out {
        if !ancestors_of(&p).any(|a| set.contains(a)) {
            set.insert(p.clone());
            kept.push(p);
        }
    }
    Ok(kept)
}

/// The directories above a slash path, outermost first ("a", "a/b" for
/// "a/b/c").
fn ancestors_of(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/').map(move |(i, _)| &path[..i])
}

/// Whether `path` is `scope` or lies inside it.
fn under(path: &str, scope: &str) -> bool {
    path == scope || (path.starts_with(scope) && path.as_bytes().get(scope.len()) == Some(&b'/'))
}

/// The plan that turns `was` (the undo checkpoint) into `want` (the
/// target), restricted to `scope` (empty: the whole tree) and to what
/// `domain` covers.
///
/// Long because the five step groups are one ordering rule, best read in
/// one place.
pub(crate) fn build(
    was: &CheckpointManifest,
    want: &CheckpointManifest,
    scope: &[String],
    domain: &Domain,
) -> Plan {
    let before = entries(was);
    let after = entries(want);
    // Lookups by set, ancestor by ancestor: the cost is the tree's paths
    // times their depth, whatever the number of scoped paths.
    let scoped: std::collections::HashSet<&str> = scope.iter().map(String::as_str).collect();
    let above_scope: std::collections::HashSet<&str> =
        scope.iter().flat_map(|s| ancestors_of(s)).collect();
    let in_scope = |p: &str| {
        scope.is_empty() || scoped.contains(p) || ancestors_of(p).any(|a| scoped.contains(a))
    };
    // An ancestor of a scoped path must exist as a directory for the path
    // to be written: it joins the scope for creation only.
    let is_ancestor_of_scope = |p: &str| above_scope.contains(p);
    let mut plan = Plan::default();
    let mut skipped_dirs: Vec<&str> = Vec::new();
    let paths: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    let mut removes = Vec::new();
    let mut remove_dirs = Vec::new();
    let mut make_dirs = Vec::new();
    let mut installs = Vec::new();
    let mut dir_modes = Vec::new();
    for path in paths {
        let creating_ancestor = is_ancestor_of_scope(path);
        if !in_scope(path) && !creating_ancestor {
            continue;
        }
        let was = before.get(path).cloned().unwrap_or(Entry::Absent);
        let want = after.get(path).cloned().unwrap_or(Entry::Absent);
        // Outside the scope only a missing ancestor directory is made.
        let missing_ancestor = was == Entry::Absent && matches!(want, Entry::Dir { .. });
        if !in_scope(path) && !missing_ancestor {
            continue;
        }
        // The undo checkpoint read the tree by the capture rules, so
        // anything it holds is in the domain; a target path it does not
        // hold must be, too, or it is left alone.
        if was == Entry::Absent {
            if skipped_dirs.iter().any(|d| under(path, d)) {
                continue;
            }
            let is_dir = matches!(want, Entry::Dir { .. });
            if !domain.covers(path, is_dir) {
                plan.skipped.push(path.clone());
                if is_dir {
                    skipped_dirs.push(path);
                }
                continue;
            }
        }
        match (&was, &want) {
            (a, b) if a == b => {
                if matches!(b, Entry::File { .. }) {
                    plan.unchanged += 1;
                }
            }
            (Entry::Dir { .. }, Entry::Dir { mode }) => dir_modes.push(Step::DirMode {
                path: path.clone(),
                mode: *mode,
            }),
            (
                Entry::File { sha256: a, .. },
                Entry::File {
                    sha256: b, mode, ..
                },
            ) if a == b => installs.push(Step::Chmod {
                path: path.clone(),
                was: was.clone(),
                mode: *mode,
            }),
            // Every other change is one step at the path: never a moment
            // without an entry there (a directory being replaced is
            // emptied first, by its children's own steps).
            // A sensitive path the target does not hold may be one its
            // capture only left out: never deleted, even with
            // `--include-sensitive` (which writes the target's own).
            (Entry::File { .. } | Entry::Link { .. }, Entry::Absent) if is_sensitive(path) => {
                plan.skipped.push(path.clone())
            }
            (Entry::File { .. } | Entry::Link { .. }, Entry::Absent) => {
                removes.push(Step::Remove {
                    path: path.clone(),
                    was: was.clone(),
                })
            }
            (Entry::Dir { .. }, Entry::Absent) => {
                remove_dirs.push(Step::RemoveDir { path: path.clone() })
            }
            (_, Entry::Dir { mode }) => {
                make_dirs.push(Step::MakeDir {
                    path: path.clone(),
                    was: was.clone(),
                    mode: *mode,
                });
                dir_modes.push(Step::DirMode {
                    path: path.clone(),
                    mode: *mode,
                });
            }
            (_, Entry::File { .. } | Entry::Link { .. }) => installs.push(Step::Install {
                path: path.clone(),
                was: was.clone(),
                want: want.clone(),
            }),
            (Entry::Absent, Entry::Absent) => {}
        }
    }
    let depth = |s: &Step| s.path().matches('/').count();
    // Deepest first: a directory is empty only once its children are gone.
    remove_dirs.sort_by_key(|s| std::cmp::Reverse(depth(s)));
    let changes = [removes, remove_dirs, make_dirs, installs].concat();
    let opened = open_up(&before, &changes, &mut dir_modes);
    // Deepest first: a directory's own mode may forbid writing into it.
    // (Directories are made in path order: parents first.)
    dir_modes.sort_by_key(|s| std::cmp::Reverse(depth(s)));
    plan.steps = [opened, changes, dir_modes].concat();
    plan
}

/// The owner's access a step needs in the directories above its path:
/// search to reach it, write to change it.
const OWNER_RWX: u32 = 0o700;

/// Opens up the directories the undo checkpoint holds whose mode keeps
/// their owner from changing what is inside (a read-only `0555`
/// directory): the returned steps, shallowest first, give the owner full
/// access before any change below them runs, and `dir_modes` gains the
/// step that closes each one again after all of them: to the target's
/// mode where the plan sets that already, else to the mode it had (a
/// directory outside `--paths`, or one the target does not hold that
/// stays, holding what the capture rules leave out).
fn open_up(
    before: &BTreeMap<String, Entry>,
    changes: &[Step],
    dir_modes: &mut Vec<Step>,
) -> Vec<Step> {
    let mut closed: BTreeMap<&str, u32> = BTreeMap::new();
    for step in changes {
        for a in ancestors_of(step.path()) {
            if let Some(Entry::Dir { mode }) = before.get(a) {
                if mode & OWNER_RWX != OWNER_RWX {
                    closed.insert(a, *mode);
                }
            }
        }
    }
    let mut opened: Vec<Step> = closed
        .iter()
        .map(|(path, mode)| Step::DirMode {
            path: path.to_string(),
            mode: mode | OWNER_RWX,
        })
        .collect();
    opened.sort_by_key(|s| s.path().matches('/').count());
    for (path, mode) in &closed {
        if !dir_modes.iter().any(|s| s.path() == *path) {
            dir_modes.push(Step::DirMode {
                path: path.to_string(),
                mode: *mode,
            });
        }
    }
    opened
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{DirectoryEntry, FileEntry, LinkEntry};

    fn manifest(
        files: &[(&str, &str, u32)],
        links: &[(&str, &str)],
        dirs: &[&str],
    ) -> CheckpointManifest {
        CheckpointManifest {
            version: 1,
            id: "cp".into(),
            workspace_id: "ws".into(),
            parent_id: None,
            created: String::new(),
            files: files
                .iter()
                .map(|(p, sha, mode)| FileEntry {
                    path: p.to_string(),
                    size: 1,
                    mode: *mode,
                    sha256: sha.to_string(),
                    content_type: None,
                    metadata: Default::default(),
                })
                .collect(),
            excluded: vec![],
            primary_bucket: None,
            buckets: vec![],
            objects: vec![],
            dirs: dirs
                .iter()
                .map(|d| DirectoryEntry {
                    path: d.to_string(),
                    mode: 0o755,
                })
                .collect(),
            links: links
                .iter()
                .map(|(p, t)| LinkEntry {
                    path: p.to_string(),
                    target: t.to_string(),
                })
                .collect(),
            skipped: vec![],
            ignored: None,
            message: None,
        }
    }

    const ALL: Domain = Domain {
        rules: None,
        include_sensitive: false,
    };

    fn kinds(plan: &Plan) -> Vec<String> {
        plan.steps
            .iter()
            .map(|s| {
                let name = serde_json::to_value(s).unwrap()["step"]
                    .as_str()
                    .unwrap()
                    .to_string();
                format!("{name} {}", s.path())
            })
            .collect()
    }

    #[test]
    fn a_file_replaced_by_a_directory_is_removed_before_the_directory_is_made() {
        let was = manifest(&[("a", "1", 0o644), ("keep", "k", 0o644)], &[], &[]);
        let want = manifest(&[("a/x", "2", 0o644), ("keep", "k", 0o644)], &[], &["a"]);
        let plan = build(&was, &want, &[], &ALL);
        assert_eq!(kinds(&plan), ["make_dir a", "install a/x", "dir_mode a"]);
        assert_eq!(plan.unchanged, 1);
    }

    #[test]
    fn read_only_directories_are_opened_up_first_and_closed_last() {
        let with_modes = |mut m: CheckpointManifest, modes: &[(&str, u32)]| {
            for (path, mode) in modes {
                if let Some(d) = m.dirs.iter_mut().find(|d| d.path == *path) {
                    d.mode = *mode;
                }
            }
            m
        };
        let was = with_modes(
            manifest(
                &[
                    ("gone/x", "1", 0o644),
                    ("ro/f", "1", 0o644),
                    ("ro/sub/g", "1", 0o644),
                    ("rw/h", "1", 0o644),
                ],
                &[],
                &["gone", "ro", "ro/sub", "rw", "quiet"],
            ),
            &[
                ("gone", 0o555),
                ("ro", 0o555),
                ("ro/sub", 0o500),
                ("quiet", 0o555),
            ],
        );
        let want = with_modes(
            manifest(
                &[("ro/f", "2", 0o644), ("rw/h", "2", 0o644)],
                &[],
                &["ro", "rw", "quiet"],
            ),
            &[("ro", 0o555), ("quiet", 0o555)],
        );
        let plan = build(&was, &want, &[], &ALL);
        assert_eq!(
            kinds(&plan),
            [
                "dir_mode gone",
                "dir_mode ro",
                "dir_mode ro/sub",
                "remove gone/x",
                "remove ro/sub/g",
                "remove_dir ro/sub",
                "remove_dir gone",
                "install ro/f",
                "install rw/h",
                "dir_mode ro/sub",
                "dir_mode gone",
                "dir_mode ro",
            ]
        );
        let modes: Vec<u32> = plan
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::DirMode { mode, .. } => Some(*mode),
                _ => None,
            })
            .collect();
        // Opened to the owner (group and other bits kept), then closed
        // again to the mode each had (the target's, the same, for `ro`;
        // `gone` and `ro/sub` keep theirs if they stay, holding what the
        // capture rules leave out). `quiet` has no change inside: untouched.
        assert_eq!(modes, [0o755, 0o755, 0o700, 0o500, 0o555, 0o555]);
        // A `--paths` rewind inside it: the directory outside the scope
        // gets its own mode back, not the target's.
        let want_open = with_modes(want.clone(), &[("ro", 0o755)]);
        let plan = build(&was, &want_open, &["ro/f".to_string()], &ALL);
        assert_eq!(kinds(&plan), ["dir_mode ro", "install ro/f", "dir_mode ro"]);
        assert!(matches!(plan.steps[2], Step::DirMode { mode: 0o555, .. }));
    }

    #[test]
    fn a_directory_replaced_by_a_file_is_emptied_deepest_first() {
        let was = manifest(&[("d/e/f", "1", 0o644)], &[("d/l", "t")], &["d", "d/e"]);
        let want = manifest(&[("d", "2", 0o600)], &[], &[]);
        let plan = build(&was, &want, &[], &ALL);
        assert_eq!(
            kinds(&plan),
            ["remove d/e/f", "remove d/l", "remove_dir d/e", "install d"]
        );
        let Step::Install { was, .. } = &plan.steps[3] else {
            panic!()
        };
        assert_eq!(*was, Entry::Dir { mode: 0o755 });
    }

    #[test]
    fn same_bytes_with_another_mode_is_a_chmod_and_links_are_replaced_in_place() {
        let was = manifest(&[("x", "1", 0o644)], &[("l", "old")], &[]);
        let want = manifest(&[("x", "1", 0o755)], &[("l", "new")], &[]);
        let plan = build(&was, &want, &[], &ALL);
        assert_eq!(kinds(&plan), ["install l", "chmod x"]);
    }

    #[test]
    fn a_scope_limits_the_plan_and_creates_missing_ancestors() {
        let was = manifest(&[("a", "1", 0o644), ("b/c", "1", 0o644)], &[], &["b"]);
        let want = manifest(
            &[("a", "2", 0o644), ("n/m/f", "3", 0o644)],
            &[],
            &["n", "n/m"],
        );
        let scope = check_scope(&["n/m/f".into(), "n/m/f/".into()]).unwrap();
        assert_eq!(scope, ["n/m/f"]);
        let plan = build(&was, &want, &scope, &ALL);
        assert_eq!(
            kinds(&plan),
            [
                "make_dir n",
                "make_dir n/m",
                "install n/m/f",
                "dir_mode n/m",
                "dir_mode n"
            ]
        );
    }

    #[test]
    fn target_paths_outside_the_capture_rules_are_skipped() {
        let was = manifest(&[("a", "1", 0o644)], &[], &[]);
        let want = manifest(
            &[
                ("a", "1", 0o644),
                (".env", "s", 0o600),
                ("x/.git/y", "g", 0o644),
            ],
            &[],
            &[],
        );
        let plan = build(&was, &want, &[], &ALL);
        assert!(plan.steps.iter().all(|s| !s.path().contains(".env")));
        assert!(plan.skipped.contains(&".env".to_string()));
        assert!(plan.skipped.iter().any(|p| p.contains(".git")));
    }

    #[test]
    fn scopes_are_checked_and_folded() {
        assert!(check_scope(&["../x".into()]).is_err());
        assert!(check_scope(&[".git/config".into()]).is_err());
        assert_eq!(
            check_scope(&["a".into(), "a/b".into(), "ab".into()]).unwrap(),
            ["a", "ab"]
        );
    }
}
