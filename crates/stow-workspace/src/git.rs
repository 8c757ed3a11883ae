//! Git inputs through the system `git` with a sanitized environment (ARCHITECTURE.md, "Git inputs"):
//! no system or global config, no prompts, no LFS smudge, hooks disabled.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use stow_checkpoint::{Result, WsError};

/// One file of a commit's tree, as `git ls-tree -r -l` reports it.
#[derive(Debug, Clone)]
pub struct TreeEntry {
    /// Octal mode (`100644`, `100755`, `120000`, `160000`).
    pub mode: String,
    /// Size in bytes (0 for submodules).
    pub size: u64,
    /// Slash path inside the repository.
    pub path: String,
}

fn git_err(repo: &Path, reason: impl Into<String>) -> WsError {
    WsError::Git {
        source_repo: repo.to_path_buf(),
        reason: reason.into(),
    }
}

/// A `git` command with every inherited `GIT_*` variable removed and the
/// sanitizing variables set, so neither the caller's environment nor its
/// configuration can redirect, prompt or run code.
fn git() -> Command {
    let mut cmd = Command::new("git");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("GIT_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_LFS_SKIP_SMUDGE", "1")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .stdin(std::process::Stdio::null());
    cmd
}

fn run(repo: &Path, cmd: &mut Command) -> Result<Output> {
    let out = cmd.output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            git_err(repo, "the git binary was not found on PATH")
        } else {
            git_err(repo, format!("could not run git: {e}"))
        }
    })?;
    if !out.status.success() {
        return Err(git_err(
            repo,
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(out)
}

fn stdout_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The top level of the repository containing `source`, and the commit
/// `reference` resolves to there. Read-only: the source is not modified
/// (`GIT_OPTIONAL_LOCKS=0` keeps even the index untouched).
pub fn resolve(source: &Path, reference: &str) -> Result<(PathBuf, String)> {
    let out = run(
        source,
        git()
            .arg("-C")
            .arg(source)
            .args(["rev-parse", "--show-toplevel"]),
    )?;
    let top = PathBuf::from(stdout_line(&out));
    let out = run(
        source,
        git().arg("-C").arg(&top).args([
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            &format!("{reference}^{{commit}}"),
        ]),
    )
    .map_err(|_| {
        git_err(
            source,
            format!("ref {reference:?} does not resolve to a commit"),
        )
    })?;
    let commit = stdout_line(&out);
    if !(commit.len() == 40 || commit.len() == 64) || !commit.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return Err(git_err(source, format!("unexpected commit id {commit:?}")));
    }
    Ok((top, commit))
}

/// Every entry of the commit's tree, recursively.
pub fn ls_tree(top: &Path, commit: &str) -> Result<Vec<TreeEntry>> {
    let out = run(
        top,
        git()
            .arg("-C")
            .arg(top)
            .args(["ls-tree", "-r", "-z", "-l", "--full-tree", commit]),
    )?;
    let mut entries = Vec::new();
    for rec in out.stdout.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        let rec = String::from_utf8_lossy(rec);
        let (meta, path) = rec
            .split_once('\t')
            .ok_or_else(|| git_err(top, "unparseable ls-tree output"))?;
        let fields: Vec<&str> = meta.split_whitespace().collect();
        if fields.len() != 4 {
            return Err(git_err(top, "unparseable ls-tree output"));
        }
        entries.push(TreeEntry {
            mode: fields[0].to_string(),
            size: fields[3].parse().unwrap_or(0),
            path: path.to_string(),
        });
    }
    Ok(entries)
}

/// Stages a detached shallow checkout of `commit` from `top` into `dest`
/// (which must not exist), with no remote configured, hooks pointed at the
/// empty `hooks_dir`, and no `FETCH_HEAD` left behind.
pub fn stage(top: &Path, commit: &str, dest: &Path, hooks_dir: &Path) -> Result<()> {
    std::fs::create_dir(dest)
        .map_err(|e| WsError::io_at("create repository directory", dest, e))?;
    let hooks = format!("core.hooksPath={}", hooks_dir.display());
    // An empty template keeps sample hooks and descriptions out of the copy.
    run(
        top,
        git()
            .arg("-C")
            .arg(dest)
            .args(["init", "--quiet", "--template="]),
    )?;
    run(
        top,
        git()
            .arg("-C")
            .arg(dest)
            .args([
                "-c",
                &hooks,
                "-c",
                "protocol.file.allow=always",
                "fetch",
                "--quiet",
                "--no-tags",
                "--depth=1",
                "--no-recurse-submodules",
                "--",
            ])
            .arg(top)
            .arg(commit),
    )?;
    run(
        top,
        git().arg("-C").arg(dest).args([
            "-c",
            &hooks,
            "-c",
            "advice.detachedHead=false",
            "-c",
            "submodule.recurse=false",
            "checkout",
            "--quiet",
            "--detach",
            "FETCH_HEAD",
        ]),
    )?;
    let fetch_head = dest.join(".git").join("FETCH_HEAD");
    let _ = std::fs::remove_file(&fetch_head);
    let out = run(top, git().arg("-C").arg(dest).args(["rev-parse", "HEAD"]))?;
    if stdout_line(&out) != commit {
        return Err(git_err(top, "checkout did not land on the resolved commit"));
    }
    Ok(())
}
