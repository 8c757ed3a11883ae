"""Rewinding an attached git repository in place, through the real binary
(issue 27): the agent scenario (edits by shell commands, whole directories
removed, a file replaced by a directory, links, modes), undo, --paths,
--dry-run, what is never touched, keyed replays, refusals and SIGKILL at
every stage of a rewind. Rewinds beside other writers, and read-only
directories: test_workspace_rewind_writers.py."""

import fcntl
import json
import os
import shutil
import subprocess
import threading
import time

import pytest

from test_workspace_attach import (  # noqa: F401  (env is a fixture)
    default_registry,
    env,
    git,
    git_status,
    make_repo,
    ok,
    refused,
    run,
    tree,
)


def content(root):
    """Every path under `root` but `.stow` (at the root) and `.git`, with
    kind, bytes digest or link target, and mode: what a rewind must
    reproduce (mtimes move by design)."""
    return {
        k: v[:3]
        for k, v in tree(root).items()
        if k != "." and k.split("/")[0] != ".stow" and ".git" not in k.split("/")
    }


def full(root):
    """`tree` less `.git` (git's own files): mtimes included."""
    return {k: v for k, v in tree(root).items() if ".git" not in k.split("/")}


def checkpoints(workdir):
    d = default_registry(workdir) / ".stow" / "checkpoints"
    return sorted(p for p in os.listdir(d) if p.startswith("cp_"))


def shell(cmd, cwd):
    subprocess.run(["sh", "-c", cmd], cwd=cwd, check=True)


AGENT_EDITS = """
set -e
printf 'pub fn answer() -> u32 {\\n    42\\n}\\n' > src/lib.rs
rm -rf src/nested
mkdir -p vendor/pkg/lib vendor/pkg/bin
for i in $(seq 1 40); do echo "module $i" > vendor/pkg/lib/m$i.js; done
ln -s ../lib/m1.js vendor/pkg/bin/cli
rm docs/guide.md && mkdir docs/guide.md && echo moved > docs/guide.md/index.md
chmod 600 scripts/build.sh
ln -s README.md readme-link
echo new > notes.txt
mkdir -p empty/inner
"""


def edited_repo(stow_bin, workdir, env, kill_at=None):
    """A repository attached and checkpointed, then changed by AGENT_EDITS;
    with `kill_at`, a rewind to that checkpoint killed (SIGKILL) at that
    STOW_TEST_FAULT point. Returns (repo, workspace ID, checkpoint ID, the
    checkpoint's content, the edited content)."""
    repo = make_repo(workdir / "repo", env)
    ws = ok(stow_bin, "attach", env=env, cwd=repo)["workspace_id"]
    cp = ok(stow_bin, "checkpoint", env=env, cwd=repo)["checkpoint_id"]
    at_cp = content(repo)
    shell(AGENT_EDITS, repo)
    edited = content(repo)
    if kill_at is not None:
        rc, _, _ = run(stow_bin, "rewind", "--to", cp, env={**env, "STOW_TEST_FAULT": kill_at}, cwd=repo)
        assert rc == -9
    return repo, ws, cp, at_cp, edited


def test_the_agent_scenario_rewinds_every_byte_mode_and_link_and_undoes(stow_bin, workdir, env):
    repo = make_repo(workdir / "repo", env)
    os.symlink("src/lib.rs", repo / "lib-link")
    (repo / "docs" / "old").mkdir()
    (repo / "docs" / "old" / "a.txt").write_text("a\n")
    ok(stow_bin, "attach", env=env, cwd=repo)
    cp = ok(stow_bin, "checkpoint", "--message", "before the agent", env=env, cwd=repo)["checkpoint_id"]
    at_cp = content(repo)
    git_at_cp = git_status(repo, env)
    ignored_before = {k: v for k, v in full(repo).items() if k.split("/")[0] in ("target", "node_modules")}

    shell(AGENT_EDITS, repo)
    # A directory replaced by a file, a link replaced by a file.
    shutil.rmtree(repo / "docs" / "old")
    (repo / "docs" / "old").write_text("now a file\n")
    os.remove(repo / "lib-link")
    (repo / "lib-link").write_text("not a link\n")
    edited = content(repo)
    assert edited != at_cp

    plan = ok(stow_bin, "rewind", "--to", cp, "--dry-run", env=env, cwd=repo)
    assert plan["dry_run"] is True and "undo_checkpoint_id" not in plan
    assert content(repo) == edited
    planned = {c["path"] for c in plan["changes"]}
    assert {"src/lib.rs", "src/nested/deep/mod.rs", "vendor/pkg/lib/m1.js", "notes.txt"} <= planned

    r = ok(stow_bin, "rewind", "--to", cp, env=env, cwd=repo / "src")
    assert r["checkpoint_id"] == cp and r["head"] == cp and r["conflicts"] == []
    assert r["written"] >= 5 and r["deleted"] >= 40 and r["unchanged"] >= 1
    assert content(repo) == at_cp
    assert git_status(repo, env) == git_at_cp
    # What git ignores was never read or touched (mtimes included).
    assert {k: v for k, v in full(repo).items() if k.split("/")[0] in ("target", "node_modules")} == ignored_before
    # No staged file is left anywhere, in .stow included.
    assert not (repo / ".stow" / "rewind").exists()
    assert not os.path.exists(default_registry(workdir) / ".stow" / "rewind" / (r["workspace_id"] + ".json"))

    st = ok(stow_bin, "status", env=env, cwd=repo)
    assert st["clean"] is True and st["checkpoint_id"] == cp

    # The undo checkpoint holds the edited tree: rewinding to it undoes.
    undo = r["undo_checkpoint_id"]
    log = ok(stow_bin, "log", env=env, cwd=repo)
    by_id = {e["checkpoint_id"]: e for e in log["checkpoints"]}
    assert by_id[undo]["origin"] == "rewind" and by_id[undo]["message"] == f"before rewind to {cp}"
    u = ok(stow_bin, "rewind", "--to", undo, env=env, cwd=repo)
    assert content(repo) == edited
    assert u["head"] == undo
    # The tree was clean against its head: the undo's own undo is that head.
    assert u["undo_checkpoint_id"] == cp
    # And the undo is undoable too.
    ok(stow_bin, "rewind", "--to", u["undo_checkpoint_id"], env=env, cwd=repo)
    assert content(repo) == at_cp


def test_paths_rewind_only_those_and_dry_run_changes_nothing(stow_bin, workdir, env):
    repo, _, cp, at_cp, edited = edited_repo(stow_bin, workdir, env)

    before = full(repo)
    n = len(checkpoints(workdir))
    d = ok(stow_bin, "rewind", "--to", cp, "--dry-run", "--paths", "src", env=env, cwd=repo)
    assert {c["path"] for c in d["changes"]} == {"src/lib.rs", "src/nested/deep/mod.rs"}
    assert (d["written"], d["deleted"]) == (2, 0)
    assert full(repo) == before and len(checkpoints(workdir)) == n

    r = ok(stow_bin, "rewind", "--to", cp, "--paths", "src/", "docs/guide.md", env=env, cwd=repo)
    assert r["paths"] == ["docs/guide.md", "src"]
    now = content(repo)
    for path in now.keys() | at_cp.keys() | edited.keys():
        top = path.split("/")[0]
        inside = top == "src" or path.startswith("docs/guide.md")
        want = at_cp if inside else edited
        assert now.get(path) == want.get(path), path
    # A partial rewind leaves the head on the undo checkpoint.
    assert r["head"] == r["undo_checkpoint_id"]
    st = ok(stow_bin, "status", env=env, cwd=repo)
    assert st["checkpoint_id"] == r["undo_checkpoint_id"] and not st["clean"]


def test_excluded_ignored_and_sensitive_paths_are_never_touched(stow_bin, workdir, env):
    repo = make_repo(workdir / "repo", env)
    (repo / ".stowignore").write_text("scratch/\n")
    ok(stow_bin, "attach", env=env, cwd=repo)
    cp = ok(stow_bin, "checkpoint", env=env, cwd=repo)["checkpoint_id"]
    # After the checkpoint: a credential file, a .stowignored directory,
    # git-ignored build output, a nested .git.
    (repo / ".env").write_text("TOKEN=secret\n")
    (repo / "scratch").mkdir()
    (repo / "scratch" / "log.txt").write_text("scratch\n")
    (repo / "target" / "release").mkdir()
    (repo / "target" / "release" / "app").write_text("bin\n")
    (repo / "sub" / ".git").mkdir(parents=True)
    (repo / "sub" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / "README.md").write_text("edited\n")
    keep = lambda t: {k: v for k, v in t.items() if k.split("/")[0] in (".env", "scratch", "target", "node_modules") or ".git" in k.split("/")}  # noqa: E731
    before = keep(tree(repo))
    r = ok(stow_bin, "rewind", "--to", cp, env=env, cwd=repo)
    assert (repo / "README.md").read_text() == "# demo\n"
    assert keep(tree(repo)) == before
    assert r["conflicts"] == []
    # "sub" holds only what the rules leave out: it stays, with its .git.
    assert (repo / "sub" / ".git" / "HEAD").exists()


def test_a_keyed_rewind_replays_and_other_inputs_conflict(stow_bin, workdir, env):
    repo = make_repo(workdir / "repo", env)
    ok(stow_bin, "attach", env=env, cwd=repo)
    cp = ok(stow_bin, "checkpoint", env=env, cwd=repo)["checkpoint_id"]
    (repo / "README.md").write_text("edited\n")
    first = ok(stow_bin, "rewind", "--to", cp, "--request-key", "k-1", env=env, cwd=repo)
    assert first["replayed"] is False
    (repo / "README.md").write_text("edited again\n")
    n = len(checkpoints(workdir))
    again = ok(stow_bin, "rewind", "--to", cp, "--request-key", "k-1", env=env, cwd=repo)
    assert again["replayed"] is True
    assert {k: v for k, v in again.items() if k != "replayed"} == {k: v for k, v in first.items() if k != "replayed"}
    # Nothing ran again: no capture, the edit is still there.
    assert len(checkpoints(workdir)) == n and (repo / "README.md").read_text() == "edited again\n"
    refused(stow_bin, "rewind", "--to", cp, "--paths", "src", "--request-key", "k-1", code="request_conflict", env=env, cwd=repo)
    assert (repo / "README.md").read_text() == "edited again\n"


def test_refusals_change_nothing(stow_bin, workdir, env):
    repo = make_repo(workdir / "repo", env)
    other = make_repo(workdir / "other", env)
    ok(stow_bin, "attach", env=env, cwd=repo)
    ok(stow_bin, "attach", env=env, cwd=other)
    ok(stow_bin, "checkpoint", env=env, cwd=repo)
    theirs = ok(stow_bin, "checkpoint", env=env, cwd=other)["checkpoint_id"]
    (repo / "README.md").write_text("edited\n")
    before, n = full(repo), len(checkpoints(workdir))
    refused(stow_bin, "rewind", "--to", "cp_000000000000000000000000", code="not_found", env=env, cwd=repo)
    refused(stow_bin, "rewind", "--to", "../../etc", code="invalid_request", env=env, cwd=repo)
    refused(stow_bin, "rewind", "--to", theirs, code="invalid_request", env=env, cwd=repo)
    cp = checkpoints(workdir)[0]
    refused(stow_bin, "rewind", "--to", cp, "--paths", "../up", code="invalid_path", env=env, cwd=repo)
    refused(stow_bin, "rewind", "--to", cp, "--paths", ".git", code="invalid_path", env=env, cwd=repo)
    refused(stow_bin, "rewind", "--to", cp, "--message", "x" * 5000, code="invalid_request", env=env, cwd=repo)
    rc, doc, err = run(stow_bin, "rewind", env=env, cwd=repo)
    assert rc == 2 and "--to" in err
    # Outside any workspace: a usage error.
    rc, doc, err = run(stow_bin, "rewind", "--to", cp, env=env, cwd=workdir)
    assert rc == 2
    # Another capture or rewind holds the workspace: in_progress.
    ws = json.loads((repo / ".stow" / "workspace.json").read_text())["workspace_id"]
    lock = default_registry(workdir) / ".stow" / "capture-locks" / f"{ws}.lock"
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        refused(stow_bin, "rewind", "--to", cp, code="in_progress", env=env, cwd=repo)
    assert full(repo) == before and len(checkpoints(workdir)) == n


@pytest.mark.parametrize(
    "point",
    ["rewind.journaled", "rewind.moved_aside#1", "rewind.moved_aside#7", "rewind.exchanged#1", "rewind.exchanged#3", "rewind.step#3", "rewind.step#25", "rewind.unstaged"],
)
def test_a_rewind_killed_anywhere_is_finished_by_the_next_command(stow_bin, workdir, env, point):
    repo, _, cp, at_cp, edited = edited_repo(stow_bin, workdir, env, kill_at=point)
    # Every path is as it was or as the checkpoint has it.
    now = content(repo)
    for path in now.keys() | at_cp.keys() | edited.keys():
        assert now.get(path) in (at_cp.get(path), edited.get(path)), path
    # The next status finishes the journal: the tree is the checkpoint's.
    st = ok(stow_bin, "status", env=env, cwd=repo)
    assert st["clean"] is True and st["checkpoint_id"] == cp
    assert content(repo) == at_cp
    assert not (repo / ".stow" / "rewind").exists()
    # The undo checkpoint is complete: rewinding to it restores the edits.
    log = ok(stow_bin, "log", env=env, cwd=repo)["checkpoints"]
    undo = [e for e in log if e.get("origin") == "rewind"]
    assert len(undo) == 1
    ok(stow_bin, "rewind", "--to", undo[0]["checkpoint_id"], env=env, cwd=repo)
    assert content(repo) == edited


def test_sensitive_paths_are_rewound_only_when_asked(stow_bin, workdir, env):
    repo = make_repo(workdir / "repo", env)
    (repo / ".env").write_text("TOKEN=one\n")
    ok(stow_bin, "attach", env=env, cwd=repo)
    cp = ok(stow_bin, "checkpoint", "--include-sensitive", env=env, cwd=repo)["checkpoint_id"]
    (repo / ".env").write_text("TOKEN=two\n")
    (repo / "id_rsa").write_text("new key\n")
    (repo / "README.md").write_text("edited\n")
    r = ok(stow_bin, "rewind", "--to", cp, env=env, cwd=repo)
    assert (repo / "README.md").read_text() == "# demo\n"
    assert (repo / ".env").read_text() == "TOKEN=two\n" and (repo / "id_rsa").exists()
    assert ".env" in r.get("skipped", [])
    (repo / "README.md").write_text("edited\n")
    r = ok(stow_bin, "rewind", "--to", cp, "--include-sensitive", env=env, cwd=repo)
    assert (repo / ".env").read_text() == "TOKEN=one\n" and (repo / "README.md").read_text() == "# demo\n"
    # A sensitive path the checkpoint does not hold is never deleted (its
    # capture may only have left it out).
    assert (repo / "id_rsa").read_text() == "new key\n" and "id_rsa" in r["skipped"]
    # The undo checkpoint held them: undo brings the later .env back.
    ok(stow_bin, "rewind", "--to", r["undo_checkpoint_id"], "--include-sensitive", env=env, cwd=repo)
    assert (repo / ".env").read_text() == "TOKEN=two\n"


def test_workspace_check_finishes_an_interrupted_rewind(stow_bin, workdir, env):
    repo, ws, _, at_cp, _ = edited_repo(stow_bin, workdir, env, kill_at="rewind.step#4")
    r = ok(stow_bin, "check", env=env, cwd=workdir)
    assert r["rewinds_finished"] == [ws] and r["damaged"] == []
    assert content(repo) == at_cp
    assert "rewinds_finished" not in ok(stow_bin, "check", env=env, cwd=workdir)


def test_a_portable_checkpoint_rewinds_the_bucket_view_too(stow_bin, workdir, env):
    """Private objects (another bucket), buckets and a file's S3 properties
    written through `workspace serve` are rewound with the files when the
    checkpoint is portable; the undo brings the later ones back."""
    from s3server import WorkspaceServer

    repo = make_repo(workdir / "repo", env)
    reg = workdir / "reg"
    ws = ok(stow_bin, "attach", "--registry-dir", reg, env=env, cwd=repo)["workspace_id"]

    def serve(fn):
        server = WorkspaceServer(stow_bin, ws, reg, "--port", "0", env=env)
        try:
            return fn(server.client(), server.bucket)
        finally:
            assert server.stop() == 0

    def first(s3, primary):
        s3.create_bucket(Bucket="side")
        s3.put_object(Bucket="side", Key="k1", Body=b"one", ContentType="text/x-one")
        s3.put_object(Bucket=primary, Key="notes/a.txt", Body=b"note", ContentType="text/markdown",
                      Metadata={"author": "agent"})

    serve(first)
    cp = ok(stow_bin, "checkpoint", "--portable", "--id", ws, "--registry-dir", reg, env=env)["checkpoint_id"]

    def later(s3, primary):
        s3.put_object(Bucket="side", Key="k1", Body=b"two")
        s3.put_object(Bucket="side", Key="k2", Body=b"new")
        s3.create_bucket(Bucket="extra")
        s3.put_object(Bucket=primary, Key="notes/a.txt", Body=b"note", ContentType="text/plain")

    serve(later)
    r = ok(stow_bin, "rewind", "--to", cp, "--id", ws, "--registry-dir", reg, env=env)
    assert r["conflicts"] == []

    def at_cp(s3, primary):
        one = s3.get_object(Bucket="side", Key="k1")
        assert one["Body"].read() == b"one" and one["ContentType"] == "text/x-one"
        assert [o["Key"] for o in s3.list_objects_v2(Bucket="side").get("Contents", [])] == ["k1"]
        assert "extra" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
        note = s3.head_object(Bucket=primary, Key="notes/a.txt")
        assert note["ContentType"] == "text/markdown" and note["Metadata"] == {"author": "agent"}

    serve(at_cp)
    ok(stow_bin, "rewind", "--to", r["undo_checkpoint_id"], "--id", ws, "--registry-dir", reg, env=env)

    def undone(s3, primary):
        assert s3.get_object(Bucket="side", Key="k1")["Body"].read() == b"two"
        assert s3.get_object(Bucket="side", Key="k2")["Body"].read() == b"new"
        assert "extra" in [b["Name"] for b in s3.list_buckets()["Buckets"]]
        assert s3.head_object(Bucket=primary, Key="notes/a.txt")["ContentType"] == "text/plain"

    serve(undone)


def test_a_portable_rewind_while_serve_runs_goes_through_the_server(stow_bin, workdir, env):
    """With `workspace serve` running (it owns the object store), portable
    checkpoints and rewinds of its workspace go through the server's
    process: S3 clients see the rewound objects at once, with no restart.
    A rewind killed part way inside the server is finished when the
    server starts again, before anything is served."""
    from s3server import WorkspaceServer

    repo = make_repo(workdir / "repo", env)
    reg = workdir / "reg"
    ws = ok(stow_bin, "attach", "--registry-dir", reg, env=env, cwd=repo)["workspace_id"]
    cli = ["--id", ws, "--registry-dir", reg]
    server = WorkspaceServer(stow_bin, ws, reg, "--port", "0", env=env)
    try:
        s3, primary = server.client(), server.bucket
        s3.create_bucket(Bucket="side")
        s3.put_object(Bucket="side", Key="k1", Body=b"one")
        s3.put_object(Bucket=primary, Key="notes/a.txt", Body=b"note", ContentType="text/markdown")
        cp = ok(stow_bin, "checkpoint", "--portable", *cli, env=env)["checkpoint_id"]
        s3.put_object(Bucket="side", Key="k1", Body=b"two")
        s3.put_object(Bucket="side", Key="k2", Body=b"new")
        (repo / "README.md").write_text("edited while served\n")
        r = ok(stow_bin, "rewind", "--to", cp, *cli, env=env)
        assert r["conflicts"] == [], r
        assert s3.get_object(Bucket="side", Key="k1")["Body"].read() == b"one"
        assert [o["Key"] for o in s3.list_objects_v2(Bucket="side").get("Contents", [])] == ["k1"]
        assert s3.head_object(Bucket=primary, Key="notes/a.txt")["ContentType"] == "text/markdown"
        assert s3.get_object(Bucket=primary, Key="README.md")["Body"].read() != b"edited while served\n"
        undo = ok(stow_bin, "rewind", "--to", r["undo_checkpoint_id"], *cli, env=env)
        assert undo["conflicts"] == []
        assert s3.get_object(Bucket="side", Key="k2")["Body"].read() == b"new"
        assert (repo / "README.md").read_text() == "edited while served\n"
    finally:
        assert server.stop() == 0

    # Killed inside the server after its file step, before the objects:
    # the CLI cannot know the outcome; the next server start finishes the
    # rewind (files and objects) first.
    server = WorkspaceServer(stow_bin, ws, reg, "--port", "0",
                             env={**env, "STOW_TEST_FAULT": "rewind.step#1"})
    try:
        rc, doc, _ = run(stow_bin, "rewind", "--to", cp, *cli, env=env)
        assert (rc, doc["error"]["code"]) == (1, "outcome_unknown"), doc
        assert server.proc.wait(timeout=20) == -9
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
    server = WorkspaceServer(stow_bin, ws, reg, "--port", "0", env=env)
    try:
        s3 = server.client()
        assert s3.get_object(Bucket="side", Key="k1")["Body"].read() == b"one"
        assert "k2" not in [o["Key"] for o in s3.list_objects_v2(Bucket="side").get("Contents", [])]
        assert (repo / "README.md").read_text() != "edited while served\n"
    finally:
        assert server.stop() == 0
    # Nothing was left for `check` to finish.
    assert "rewinds_finished" not in ok(stow_bin, "check", "--registry-dir", reg, env=env)


def test_serve_refuses_a_workspace_another_watch_holds(stow_bin, workdir, env):
    """found by review: with a `workspace watch` already running, `workspace
    serve` started without its own watch service, so rewinds went to the
    watch's process, unordered with the server's S3 writes. It is refused
    (in_use) until that watch stops; then it serves."""
    from s3server import WorkspaceServer

    repo = make_repo(workdir / "repo", env)
    reg = workdir / "reg"
    ws = ok(stow_bin, "attach", "--registry-dir", reg, env=env, cwd=repo)["workspace_id"]
    watcher = subprocess.Popen([stow_bin, "workspace", "watch", "--id", ws, "--registry-dir", reg],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert watcher.stdout.readline(), watcher.stderr.read()
        rc, doc, err = run(stow_bin, "serve", "--id", ws, "--registry-dir", reg, "--port", "0", env=env)
        assert (rc, doc["error"]["code"]) == (1, "in_use"), (doc, err)
        assert "already watched" in doc["error"]["message"]
    finally:
        watcher.terminate()
        watcher.wait(timeout=30)
    server = WorkspaceServer(stow_bin, ws, reg, "--port", "0", env=env)
    assert server.stop() == 0


def test_paths_the_target_ignored_are_not_deleted_when_the_rules_changed(stow_bin, workdir, env):
    """found by review: with .gitignore removed after the checkpoint, the
    undo capture holds what was ignored; the target lacks it because it was
    ignored then, so the rewind must leave it (and restore .gitignore)."""
    repo = make_repo(workdir / "repo", env)
    (repo / "build.log").write_text("log\n")
    (repo / ".gitignore").write_text("target/\nnode_modules/\nbuild.log\n")
    (repo / ".stowignore").write_text("scratch/\n")
    (repo / "scratch").mkdir()
    (repo / "scratch" / "cache").write_text("cache\n")
    ok(stow_bin, "attach", env=env, cwd=repo)
    cp = ok(stow_bin, "checkpoint", env=env, cwd=repo)["checkpoint_id"]
    (repo / ".gitignore").unlink()
    (repo / ".stowignore").unlink()
    (repo / "README.md").write_text("edited\n")
    r = ok(stow_bin, "rewind", "--to", cp, env=env, cwd=repo)
    assert (repo / "README.md").read_text() == "# demo\n"
    assert (repo / ".gitignore").exists() and (repo / ".stowignore").exists()
    for kept in ["build.log", "node_modules/pkg/index.js", "target/debug/app.bin", "scratch/cache"]:
        assert (repo / kept).exists(), kept
    assert {"build.log", "scratch/cache"} <= set(r["skipped"]), r["skipped"]


def test_a_path_that_cannot_be_changed_is_a_conflict_not_a_stuck_workspace(stow_bin, workdir, env):
    """found by review: a failure at one path (here an immutable file)
    ends as that path's conflict; the journal finishes, and the next
    commands work."""
    import shutil as _sh

    if _sh.which("chattr") is None:
        pytest.skip("chattr is not installed (e2fsprogs)")
    repo = make_repo(workdir / "repo", env)
    ok(stow_bin, "attach", env=env, cwd=repo)
    cp = ok(stow_bin, "checkpoint", env=env, cwd=repo)["checkpoint_id"]
    (repo / "README.md").write_text("edited\n")
    (repo / "notes.txt").write_text("locked\n")
    if subprocess.run(["chattr", "+i", str(repo / "notes.txt")], capture_output=True).returncode != 0:
        pytest.skip("this filesystem has no immutable attribute")
    try:
        rc, doc, err = run(stow_bin, "rewind", "--to", cp, env=env, cwd=repo)
        assert rc == 1 and "workspace_changed" in err, (doc, err)
        assert [c["path"] for c in doc["conflicts"]] == ["notes.txt"]
        assert "could not be changed" in doc["conflicts"][0]["reason"]
        assert (repo / "README.md").read_text() == "# demo\n"
        st = ok(stow_bin, "status", env=env, cwd=repo)
        assert [c["path"] for c in st["changes"]] == ["notes.txt"]
    finally:
        subprocess.run(["chattr", "-i", str(repo / "notes.txt")], check=False)


def test_a_directory_swapped_for_a_link_mid_rewind_is_never_written_through(stow_bin, workdir, env):
    """found by review: the steps below a directory that is replaced by a
    symlink while the rewind runs stop (conflicts); nothing lands outside."""
    repo = workdir / "repo"
    (repo / "d0").mkdir(parents=True)
    for i in range(60):
        (repo / "d0" / f"f{i:03}").write_text(f"file {i}\n")
    outside = workdir / "outside"
    outside.mkdir()
    ok(stow_bin, "attach", "--root", repo, env=env)
    cp = ok(stow_bin, "checkpoint", env=env, cwd=repo)["checkpoint_id"]
    for p in (repo / "d0").iterdir():
        p.unlink()
    proc = subprocess.Popen(
        [stow_bin, "workspace", "rewind", "--to", cp], cwd=repo,
        env={**env, "STOW_TEST_FAULT": "rewind.step#5@25"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 60
    while len(list((repo / "d0").iterdir())) < 5:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.005)
    os.rename(repo / "d0", workdir / "d0.moved")
    os.symlink(outside, repo / "d0")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "workspace_changed" in err, (out, err)
    doc = json.loads(out)
    assert len(doc["conflicts"]) >= 40 and all(c["path"].startswith("d0/") for c in doc["conflicts"])
    assert list(outside.iterdir()) == []


def test_a_directory_swapped_for_a_link_within_a_step_is_never_written_through(stow_bin, workdir, env):
    """found by review: a directory swapped for a link after a step checked
    its parents and before it renamed must not send the rename (or a
    removal) outside the tree. The rewind pauses inside its first step,
    after opening the step's directory; meanwhile the directory becomes a
    link to a directory holding the very bytes the steps expect, so only
    the descriptor walk keeps them inside: outside stays byte for byte."""
    repo = workdir / "repo"
    (repo / "d0").mkdir(parents=True)
    for i in range(10):
        (repo / "d0" / f"f{i:03}").write_text(f"file {i}\n")
    ws = ok(stow_bin, "attach", "--root", repo, env=env)["workspace_id"]
    cp = ok(stow_bin, "checkpoint", env=env, cwd=repo)["checkpoint_id"]
    for i in range(5):
        (repo / "d0" / f"f{i:03}").write_text(f"edit {i}\n")
    for i in range(3):
        (repo / "d0" / f"new{i}").write_text(f"new {i}\n")
    outside = workdir / "outside"
    shutil.copytree(repo / "d0", outside)
    before = content(outside)

    proc = subprocess.Popen(
        [stow_bin, "workspace", "rewind", "--to", cp], cwd=repo,
        env={**env, "STOW_TEST_FAULT": "rewind.step_opened#1@1500"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    journal = default_registry(workdir) / ".stow" / "rewind" / f"{ws}.json"
    deadline = time.monotonic() + 60
    while not journal.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.005)
    time.sleep(0.3)  # inside the first step's 1.5 s pause, its directory open
    os.rename(repo / "d0", workdir / "d0.moved")
    os.symlink(outside, repo / "d0")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "workspace_changed" in err, (out, err)
    doc = json.loads(out)
    assert len(doc["conflicts"]) == 7 and all(c["path"].startswith("d0/") for c in doc["conflicts"]), doc
    assert content(outside) == before
    assert not (repo / ".stow" / "rewind").exists()


def test_a_request_key_is_bounded(stow_bin, workdir, env):
    repo = make_repo(workdir / "repo", env)
    ok(stow_bin, "attach", env=env, cwd=repo)
    cp = ok(stow_bin, "checkpoint", env=env, cwd=repo)["checkpoint_id"]
    refused(stow_bin, "rewind", "--to", cp, "--request-key", "", code="invalid_request", env=env, cwd=repo)
    refused(stow_bin, "rewind", "--to", cp, "--request-key", "k" * 257, code="invalid_request", env=env, cwd=repo)
    # As a keyed checkpoint's: a key with surrounding whitespace is refused.
    for key in (" padded ", "tab\t"):
        message = refused(stow_bin, "rewind", "--to", cp, "--request-key", key, code="invalid_request", env=env,
                          cwd=repo)
        assert "whitespace" in message, message
        # A keyed checkpoint answers its envelope (its message on stderr).
        rc, doc, err = run(stow_bin, "checkpoint", "--timeout", "30s", "--request-key", key, env=env, cwd=repo)
        assert rc == 1 and doc["error"]["code"] == "invalid_request" and "whitespace" in err, (doc, err)


def test_a_dry_run_counts_what_the_rewind_then_does(stow_bin, workdir, env):
    """found by review: a file that became a link (and a link that became a
    file) is replaced in one step: the plan's counts are the rewind's."""
    repo = make_repo(workdir / "repo", env)
    os.symlink("README.md", repo / "was-link")
    ok(stow_bin, "attach", env=env, cwd=repo)
    cp = ok(stow_bin, "checkpoint", env=env, cwd=repo)["checkpoint_id"]
    os.remove(repo / "notes.txt")
    os.symlink("README.md", repo / "notes.txt")
    os.remove(repo / "was-link")
    (repo / "was-link").write_text("now a file\n")
    (repo / "extra.txt").write_text("extra\n")
    (repo / "docs" / "guide.md").write_text("edited\n")
    plan = ok(stow_bin, "rewind", "--to", cp, "--dry-run", env=env, cwd=repo)
    r = ok(stow_bin, "rewind", "--to", cp, env=env, cwd=repo)
    assert (plan["written"], plan["deleted"]) == (r["written"], r["deleted"]) == (3, 1), (plan, r)
    assert plan["unchanged"] == r["unchanged"]


def test_a_scope_naming_nothing_is_refused_and_a_clean_undo_keeps_its_message(stow_bin, workdir, env):
    repo, ws, cp, at_cp, edited = edited_repo(stow_bin, workdir, env)
    log = ok(stow_bin, "log", env=env, cwd=repo)
    # A --paths typo: refused before anything is captured or moved.
    for dry in ([], ["--dry-run"]):
        rc, doc, _ = run(stow_bin, "rewind", "--to", cp, "--paths", "no/such/dir", *dry, env=env, cwd=repo)
        assert (rc, doc["error"]["code"]) == (1, "invalid_request"), (dry, doc)
        assert "no/such/dir" in doc["error"]["message"]
    assert ok(stow_bin, "log", env=env, cwd=repo) == log and content(repo) == edited
    # A path only the checkpoint holds (deleted since) is a real scope.
    deleted = next(p for p, v in sorted(at_cp.items()) if p not in edited and v[0] == "file")
    r = ok(stow_bin, "rewind", "--to", cp, "--paths", deleted, env=env, cwd=repo)
    assert r["written"] == 1 and content(repo)[deleted] == at_cp[deleted]
    # A clean tree's undo is its head, unless a message asks for its own.
    ok(stow_bin, "rewind", "--to", cp, env=env, cwd=repo)
    head = ok(stow_bin, "log", env=env, cwd=repo)["head"]
    plain = ok(stow_bin, "rewind", "--to", cp, env=env, cwd=repo)
    assert plain["undo_checkpoint_id"] == head
    named = ok(stow_bin, "rewind", "--to", cp, "--message", "kept for later", env=env, cwd=repo)
    assert named["undo_checkpoint_id"] != head
    first = ok(stow_bin, "log", "--limit", "1", env=env, cwd=repo)["checkpoints"][0]
    assert (first["checkpoint_id"], first["message"], first["origin"]) == \
        (named["undo_checkpoint_id"], "kept for later", "rewind")


def test_nested_gitignore_rules_of_the_target_and_symlinked_directories(stow_bin, workdir, env):
    """Found by review: (1) a rewind deleted files the target's nested
    `.gitignore` kept out once the rules changed (only the root's were
    honoured); (2) a `.gitignore` reached through a directory replaced by a
    symlink (pointing outside) was applied, and kept a rewind from writing
    the directory back."""
    repo = workdir / "repo"
    (repo / "sub").mkdir(parents=True)
    (repo / "sub" / ".gitignore").write_text("*.tmp\n")
    (repo / "sub" / "a.tmp").write_text("scratch")
    (repo / "sub" / "x.txt").write_text("x")
    git(repo, "init", "-q", env=env)
    ok(stow_bin, "attach", cwd=repo, env=env)
    cp = ok(stow_bin, "checkpoint", cwd=repo, env=env)["checkpoint_id"]
    (repo / "sub" / ".gitignore").write_text("")
    r = ok(stow_bin, "rewind", "--to", cp, cwd=repo, env=env)
    assert (repo / "sub" / "a.tmp").read_text() == "scratch", r
    assert (repo / "sub" / ".gitignore").read_text() == "*.tmp\n"

    outside = workdir / "outside"
    outside.mkdir()
    (outside / ".gitignore").write_text("*\n")
    shutil.rmtree(repo / "sub")
    os.symlink(outside, repo / "sub")
    plan = ok(stow_bin, "rewind", "--to", cp, "--dry-run", cwd=repo, env=env)
    r = ok(stow_bin, "rewind", "--to", cp, cwd=repo, env=env)
    assert r["written"] == plan["written"] and r["written"] >= 2, (plan, r)
    assert (repo / "sub").is_dir() and not (repo / "sub").is_symlink()
    assert (repo / "sub" / "x.txt").read_text() == "x"
    assert ok(stow_bin, "status", cwd=repo, env=env)["clean"] is True
    assert sorted(os.listdir(outside)) == [".gitignore"]


def test_s3_writes_wait_for_a_rewind_the_server_runs(stow_bin, workdir, env):
    """A rewind handed to `workspace serve` holds the server's S3 writes
    off until it is done: a PUT sent mid-rewind lands after it (never part
    way, so the rewind reports no conflict) and is what stays."""
    from s3server import WorkspaceServer

    repo = make_repo(workdir / "repo", env)
    reg = workdir / "reg"
    ws = ok(stow_bin, "attach", "--registry-dir", reg, env=env, cwd=repo)["workspace_id"]
    cli = ["--id", ws, "--registry-dir", reg]
    server = WorkspaceServer(stow_bin, ws, reg, "--port", "0",
                             env={**env, "STOW_TEST_FAULT": "rewind.step@1500"})
    try:
        s3 = server.client()
        s3.create_bucket(Bucket="side")
        s3.put_object(Bucket="side", Key="k1", Body=b"one")
        cp = ok(stow_bin, "checkpoint", "--portable", *cli, env=env)["checkpoint_id"]
        s3.put_object(Bucket="side", Key="k1", Body=b"two")
        (repo / "README.md").write_text("edited\n")
        done = {}

        def rewind():
            done["result"] = run(stow_bin, "rewind", "--to", cp, *cli, env=env)
            done["at"] = time.monotonic()

        t = threading.Thread(target=rewind)
        t.start()
        # The rewind's first step has written README.md back: it now
        # sleeps after that step, holding the S3 writes off.
        deadline = time.monotonic() + 60
        while (repo / "README.md").read_text() == "edited\n":
            assert time.monotonic() < deadline, "the rewind never reached its first step"
            time.sleep(0.02)
        assert t.is_alive()
        s3.put_object(Bucket="side", Key="k1", Body=b"three")
        put_done = time.monotonic()
        t.join(timeout=60)
        rc, doc, err = done["result"]
        assert rc == 0 and doc["conflicts"] == [], (doc, err)
        assert put_done >= done["at"] - 0.2, "the PUT landed before the rewind ended"
        assert s3.get_object(Bucket="side", Key="k1")["Body"].read() == b"three"
        assert (repo / "README.md").read_text() != "edited\n"
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("keep", [False, True])
def test_detach_finishes_an_interrupted_rewind_first(stow_bin, workdir, env, keep):
    """A rewind killed after its first exchange leaves the tree half
    rewound and the moved-aside files in its stage under .stow: detach
    finishes it (the whole tree is the checkpoint's) before it removes
    .stow, and leaves no journal behind."""
    repo = workdir / "repo"
    repo.mkdir()
    (repo / "a").write_text("one")
    (repo / "b").write_text("one")
    ws = ok(stow_bin, "attach", "--root", repo, env=env)["workspace_id"]
    cp = ok(stow_bin, "checkpoint", env=env, cwd=repo)["checkpoint_id"]
    (repo / "a").write_text("agent work A")
    (repo / "b").write_text("agent work B")
    rc, _, _ = run(stow_bin, "rewind", "--to", cp, env={**env, "STOW_TEST_FAULT": "rewind.exchanged#1"}, cwd=repo)
    assert rc == -9
    journal = default_registry(workdir) / ".stow" / "rewind" / f"{ws}.json"
    assert journal.exists()
    ok(stow_bin, "detach", *(["--keep-checkpoints"] if keep else []), env=env, cwd=repo)
    assert (repo / "a").read_text() == "one" and (repo / "b").read_text() == "one"
    assert not (repo / ".stow").exists() and not journal.exists()
    assert ok(stow_bin, "check", env=env, cwd=workdir).get("damaged", []) == []
