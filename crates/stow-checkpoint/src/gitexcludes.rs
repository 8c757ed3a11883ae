//! Where git keeps the excludes files of a working tree, as git finds
//! them: the user's global file (`core.excludesFile` from git's config
//! files, else git's default `$XDG_CONFIG_HOME/git/ignore` or
//! `~/.config/git/ignore`) and the repository's `info/exclude`, in the
//! git directory a `.git` directory is, or a `.git` file names (`gitdir:
//! …`, as linked worktrees and submodules have it), the common directory
//! of a linked worktree included.
//!
//! Git's config is read only for this one key, from the files git reads
//! it from (the system file unless `GIT_CONFIG_NOSYSTEM`, the user's `$XDG_CONFIG_HOME/git/config` and
//! `~/.gitconfig`, the repository's `config`; a later file wins), without
//! `include` directives. A relative `core.excludesFile` is taken relative
//! to the working tree's root.

use std::path::{Path, PathBuf};

/// Largest config or `.git` file read (git's own are a few KiB).
const MAX_READ_BYTES: u64 = 1 << 20;

/// Git's excludes files for the working tree at `root`, lowest precedence
/// first: the user's global one and the repository's `info/exclude`.
pub(crate) fn excludes_files(root: &Path) -> [Option<PathBuf>; 2] {
    let home = std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".config")));
    let common = common_dir(root);
    // `GIT_CONFIG_NOSYSTEM` leaves the system file out, as in git.
    let system = std::env::var_os("GIT_CONFIG_NOSYSTEM")
        .filter(|v| !v.is_empty() && v != "0" && v != "false")
        .is_none()
        .then(|| PathBuf::from("/etc/gitconfig"));
    let mut configs: Vec<PathBuf> = system.into_iter().collect();
    configs.extend(xdg.as_ref().map(|x| x.join("git").join("config")));
    configs.extend(home.as_ref().map(|h| h.join(".gitconfig")));
    configs.extend(common.as_ref().map(|c| c.join("config")));
    let set = configs
        .iter()
        .filter_map(|c| read_small(c))
        .filter_map(|text| excludes_file_setting(&text))
        .next_back()
        .map(|v| expand(&v, home.as_deref(), root));
    [
        set.or_else(|| xdg.map(|x| x.join("git").join("ignore"))),
        common.map(|c| c.join("info").join("exclude")),
    ]
}

/// The repository's common git directory for the working tree at `root`:
/// `root/.git` when it is a directory; the directory a `.git` file names
/// (relative to `root` when not absolute), or that directory's
/// `commondir` (a linked worktree's). `None` when there is no `.git`.
fn common_dir(root: &Path) -> Option<PathBuf> {
    let dot_git = root.join(".git");
    let meta = std::fs::symlink_metadata(&dot_git).ok()?;
    if meta.is_dir() {
        return Some(dot_git);
    }
    let text = read_small(&dot_git)?;
    let named = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    if named.is_empty() {
        return None;
    }
    let git_dir = root.join(named);
    match read_small(&git_dir.join("commondir")) {
        Some(c) if !c.trim().is_empty() => Some(git_dir.join(c.trim())),
        _ => Some(git_dir),
    }
}

/// The last `core.excludesFile` value in a git config file's text, if
/// any. Section and key names are case-insensitive, as in git; a value
/// may be quoted and followed by a `#` or `;` comment.
fn excludes_file_setting(text: &str) -> Option<String> {
    let mut in_core = false;
    let mut found = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix('[') {
            let (header, after) = rest.split_once(']').unwrap_or((rest, ""));
            in_core = header.trim().eq_ignore_ascii_case("core");
            // `[core] excludesFile = …` on the header's line.
            let after = after.trim();
            if in_core && !after.is_empty() {
                found = key_value(after).or(found);
            }
            continue;
        }
        if in_core {
            found = key_value(line).or(found);
        }
    }
    found
}

/// The value of an `excludesFile = value` line.
fn key_value(line: &str) -> Option<String> {
    let (key, value) = line.split_once('=')?;
    if !key.trim().eq_ignore_ascii_case("excludesfile") {
        return None;
    }
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = value.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '#' | ';' if !quoted => break,
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    let out = out.trim().to_string();
    (!out.is_empty()).then_some(out)
}

/// A config path value as git expands it: `~/` is the home directory; a
/// relative path is taken from the working tree's root.
fn expand(value: &str, home: Option<&Path>, root: &Path) -> PathBuf {
    match (value.strip_prefix("~/"), home) {
        (Some(rest), Some(h)) => h.join(rest),
        _ => root.join(value),
    }
}

/// A small text file's contents (`None`: absent, unreadable, too large).
fn read_small(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_READ_BYTES {
        return None;
    }
    std::fs::read_to_string(path).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_excludes_file_setting_is_read_as_git_reads_it() {
        let cfg = "[user]\n\tname = x\n[core]\n\tbare = false\n\texcludesFile = ~/.gi # mine\n";
        assert_eq!(excludes_file_setting(cfg).as_deref(), Some("~/.gi"));
        let later = "[Core]\nEXCLUDESFILE = \"/a b/c;d\" ; comment\n[core]\nexcludesfile=/x\n";
        assert_eq!(excludes_file_setting(later).as_deref(), Some("/x"));
        let quoted = "[core]\nexcludesfile = \"/a b/c;d\" ; comment\n";
        assert_eq!(excludes_file_setting(quoted).as_deref(), Some("/a b/c;d"));
        // Another section's key, a subsection, an empty value: not it.
        let other = "[user]\nexcludesfile = /no\n[core \"sub\"]\nexcludesfile = /no\n[core.sub]\nexcludesfile = /no\n[core]\nexcludesfile =\n";
        assert_eq!(excludes_file_setting(other), None);
        assert_eq!(
            excludes_file_setting("[core] excludesfile = /inline").as_deref(),
            Some("/inline")
        );
        let home = Path::new("/home/u");
        let root = Path::new("/w");
        assert_eq!(expand("~/.gi", Some(home), root), home.join(".gi"));
        assert_eq!(expand("rel/ign", Some(home), root), root.join("rel/ign"));
        assert_eq!(expand("/abs", Some(home), root), PathBuf::from("/abs"));
    }

    #[test]
    fn a_dot_git_file_names_the_git_directory_and_its_common_one() {
        let t = tempfile::tempdir().unwrap();
        let main_git = t.path().join("main/.git");
        let wt_git = main_git.join("worktrees/wt");
        std::fs::create_dir_all(&wt_git).unwrap();
        std::fs::write(wt_git.join("commondir"), "../..\n").unwrap();
        let wt = t.path().join("wt");
        std::fs::create_dir_all(&wt).unwrap();
        std::fs::write(wt.join(".git"), format!("gitdir: {}\n", wt_git.display())).unwrap();
        assert_eq!(common_dir(&wt), Some(wt_git.join("../..")));
        // A submodule's: relative, no common dir.
        let sub = t.path().join("main/sub");
        std::fs::create_dir_all(t.path().join("main/.git/modules/sub")).unwrap();
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join(".git"), "gitdir: ../.git/modules/sub\n").unwrap();
        assert_eq!(common_dir(&sub), Some(sub.join("../.git/modules/sub")));
        assert_eq!(common_dir(&t.path().join("main")), Some(main_git));
        assert_eq!(common_dir(t.path()), None);
    }
}
