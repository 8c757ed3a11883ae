"""Attached workspaces leave out what git leaves out, wherever git keeps
its excludes: `core.excludesFile` from git's config (global or the
repository's), and the `info/exclude` of a linked worktree (whose `.git`
is a file naming its git directory, with the main repository's common
directory). Every case is checked against git itself
(`git ls-files --others --exclude-standard`)."""

from test_workspace_attach import env, git, ok  # noqa: F401  (env is a fixture)


def untracked(repo, git_env):
    listed = git(repo, "ls-files", "--others", "--exclude-standard", env=git_env).splitlines()
    return sorted(p for p in listed if not p.startswith(".stow/"))


def captured(stow_bin, repo, git_env):
    """The files of a fresh checkpoint of `repo`, by path (restored into a
    new root and listed)."""
    cp = ok(stow_bin, "checkpoint", cwd=repo, env=git_env)["checkpoint_id"]
    out = repo.parent / f"restored-{cp}"
    ok(stow_bin, "restore", "--checkpoint-id", cp, "--root", out, env=git_env)
    return sorted(
        str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and ".stow" not in p.relative_to(out).parts
    )


def test_core_excludes_file_global_and_repository_settings_apply(stow_bin, workdir, env):
    repo = workdir / "repo"
    repo.mkdir()
    for name in ("a.txt", "b.scratch", "c.draft", "d.txt"):
        (repo / name).write_text(name)
    git(repo, "init", "-q", env=env)
    mine = workdir / "home" / "my-excludes"
    mine.write_text("*.scratch\n")
    (workdir / "home" / ".gitconfig").write_text('[core]\n\texcludesFile = "~/my-excludes" # mine\n')
    ok(stow_bin, "attach", cwd=repo, env=env)
    assert untracked(repo, env) == ["a.txt", "c.draft", "d.txt"]
    assert captured(stow_bin, repo, env) == ["a.txt", "c.draft", "d.txt"]
    # The repository's setting wins over the user's.
    per_repo = workdir / "repo-excludes"
    per_repo.write_text("*.draft\n")
    git(repo, "config", "core.excludesFile", str(per_repo), env=env)
    assert untracked(repo, env) == ["a.txt", "b.scratch", "d.txt"]
    assert captured(stow_bin, repo, env) == ["a.txt", "b.scratch", "d.txt"]
    st = ok(stow_bin, "status", cwd=repo, env=env)
    assert st["clean"] is True, st


def test_a_linked_worktree_uses_its_repositorys_info_exclude(stow_bin, workdir, env):
    main = workdir / "main"
    main.mkdir()
    (main / "README.md").write_text("main\n")
    git(main, "init", "-q", env=env)
    git(main, "add", "-A", env=env)
    git(main, "commit", "-qm", "init", env=env)
    (main / ".git" / "info").mkdir(exist_ok=True)
    (main / ".git" / "info" / "exclude").write_text("local-only.txt\n")
    wt = workdir / "wt"
    git(main, "worktree", "add", "-q", str(wt), env=env)
    assert (wt / ".git").is_file()
    (wt / "local-only.txt").write_text("mine\n")
    (wt / "keep.txt").write_text("keep\n")
    assert untracked(wt, env) == ["keep.txt"]
    ok(stow_bin, "attach", cwd=wt, env=env)
    # `.git` (a file here) is never captured, and the exclude applies.
    assert captured(stow_bin, wt, env) == ["README.md", "keep.txt"]
