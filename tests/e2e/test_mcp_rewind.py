"""The workspace profile's rewind tools (issue 27) through the official
Python MCP client, both protocol eras: stow_workspace_status,
stow_checkpoint_list and stow_workspace_rewind on an attached git
repository selected with --workspace-root; annotations and schemas; dry
run, rewind, undo, keyed replay (also after a server restart), request
conflicts, scope and unknown-property refusals; --workspace-root's own
startup refusals."""

from __future__ import annotations

import contextlib
import json
import pathlib
import subprocess

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from mcpkit import CALL_TIMEOUT, ERAS, REWIND_TOOLS, SUBPROCESS_TIMEOUT, WsSession, arun, code, server_env
from test_workspace_attach import env, make_repo, ok  # noqa: F401  (env is a fixture)
from wskit import listing


@contextlib.asynccontextmanager
async def root_session(stow_bin, root, era, home_env):
    """A workspace-profile server chosen by --workspace-root (no
    --registry-dir, --workspace-id or --timeout), run from the root."""
    params = StdioServerParameters(
        command=stow_bin,
        args=["mcp", "--workspace-root", "."],
        env=server_env({k: home_env[k] for k in ("HOME", "XDG_CONFIG_HOME")}),
        cwd=str(root),
    )
    errlog = open(pathlib.Path(root).parent / "server-stderr.log", "a")
    try:
        async with Client(stdio_client(params, errlog=errlog), mode=era, read_timeout_seconds=CALL_TIMEOUT) as c:
            yield WsSession(c)
    finally:
        errlog.close()


def tree_of(repo):
    """The repository's entries less .git and .stow."""
    return [e for e in listing(repo) if e[0].split("/")[0] not in (".git", ".stow")]


@pytest.mark.parametrize("era", ERAS)
def test_status_list_rewind_undo_and_replay_through_the_sdk(stow_bin, workdir, env, era):
    repo = make_repo(workdir / "repo", env)
    ws_id = ok(stow_bin, "attach", env=env, cwd=repo)["workspace_id"]

    async def first_session():
        async with root_session(stow_bin, repo, era, env) as s:
            tools = {t.name: t for t in (await s.client.list_tools()).tools}
            for name in REWIND_TOOLS:
                t = tools[name]
                assert t.description and t.input_schema["additionalProperties"] is False
                assert t.output_schema["type"] == "object"
            ann = {n: tools[n].annotations for n in REWIND_TOOLS}
            assert ann["stow_workspace_status"].read_only_hint is True
            assert ann["stow_checkpoint_list"].read_only_hint is True
            assert ann["stow_workspace_rewind"].destructive_hint is True
            assert ann["stow_workspace_rewind"].read_only_hint is False

            created = await s.create(ws_id, "cp-key-1")
            assert created["outcome"] == "committed", created
            cp = created["checkpoint_id"]
            at_cp = tree_of(repo)

            clean = await s.call("stow_workspace_status", {"workspace_id": ws_id})
            assert clean["outcome"] == "ok" and clean["checkpoint_id"] == cp and clean["entries"] == []

            # Edits by "shell commands".
            (repo / "README.md").write_text("# rewritten\n")
            (repo / "src" / "new.rs").write_text("fn new() {}\n")
            (repo / "docs" / "guide.md").unlink()
            edited = tree_of(repo)

            st = await s.call("stow_workspace_status", {"workspace_id": ws_id, "limit": 2})
            first = st["entries"]
            assert len(first) == 2 and st["next_cursor"]
            rest = await s.call("stow_workspace_status", {"workspace_id": ws_id, "cursor": st["next_cursor"]})
            kinds = {e["change"]["path"]: e["change"]["kind"] for e in first + rest["entries"]}
            assert kinds == {"README.md": "changed", "src/new.rs": "added", "docs/guide.md": "deleted"}

            log = await s.call("stow_checkpoint_list", {"workspace_id": ws_id})
            assert log["head"] == cp and [e["checkpoint_id"] for e in log["entries"]] == [cp]
            assert log["entries"][0]["head"] is True and log["entries"][0]["origin"] == "capture"

            args = {"workspace_id": ws_id, "checkpoint_id": cp, "request_key": "rw-1"}
            plan = await s.call("stow_workspace_rewind", {**args, "request_key": "plan-1", "dry_run": True})
            assert plan["outcome"] == "not_committed" and plan["dry_run"] is True and "error" not in plan
            assert {e["change"]["path"] for e in plan["entries"]} == set(kinds)
            assert tree_of(repo) == edited

            r = await s.call("stow_workspace_rewind", args)
            assert r["outcome"] == "committed" and "error" not in r, r
            assert r["checkpoint_id"] == cp and r["head"] == cp and r["replayed"] is False
            assert (r["written"], r["deleted"], r["conflicts"]) == (2, 1, [])
            assert tree_of(repo) == at_cp
            undo = r["undo_checkpoint_id"]

            again = await s.call("stow_workspace_rewind", args)
            assert again["replayed"] is True and again["undo_checkpoint_id"] == undo
            conflict = await s.call("stow_workspace_rewind", {**args, "paths": ["src"]})
            assert conflict["outcome"] == "not_committed" and code(conflict) == "request_conflict"

            log = await s.call("stow_checkpoint_list", {"workspace_id": ws_id, "limit": 1})
            assert log["entries"][0]["checkpoint_id"] == undo and log["entries"][0]["origin"] == "rewind"
            assert log["next_cursor"]

            # Out of scope and unknown properties: refused, nothing done.
            other = await s.call("stow_workspace_rewind", {**args, "workspace_id": "ws_0000000000000000"})
            assert other["outcome"] == "not_committed" and code(other) == "invalid_scope"
            # An empty scope is not "the whole tree": refused, a dry run too.
            for dry in (False, True):
                empty = await s.call("stow_workspace_rewind", {**args, "request_key": "rw-e", "paths": [], "dry_run": dry})
                assert empty["outcome"] == "not_committed" and code(empty) == "invalid_request", empty
            for name, a in [
                ("stow_workspace_status", {"workspace_id": ws_id, "surprise": 1}),
                ("stow_checkpoint_list", {"workspace_id": ws_id, "registry_dir": "/"}),
                ("stow_workspace_rewind", {**args, "request_key": "rw-x", "message": "m"}),
            ]:
                res = await s.raw(name, a)
                assert res.is_error, (name, res)
            assert tree_of(repo) == at_cp
            return cp, undo, edited, at_cp

    cp, undo, edited, at_cp = arun(first_session())

    async def after_restart():
        async with root_session(stow_bin, repo, era, env) as s:
            replay = await s.call("stow_workspace_rewind", {"workspace_id": ws_id, "checkpoint_id": cp, "request_key": "rw-1"})
            assert replay["replayed"] is True and replay["undo_checkpoint_id"] == undo
            assert tree_of(repo) == at_cp
            u = await s.call("stow_workspace_rewind", {"workspace_id": ws_id, "checkpoint_id": undo, "request_key": "undo-1"})
            assert u["outcome"] == "committed" and u["head"] == undo, u
            assert tree_of(repo) == edited

    arun(after_restart())


def test_status_lists_files_and_links_in_path_order_and_refuses_a_stale_cursor(stow_bin, workdir, env):
    """stow_workspace_status merges file and link changes in path order
    (links are not listed after every file), and a cursor taken before the
    tree changed is refused, never a page that skips or repeats."""
    import os

    repo = make_repo(workdir / "repo", env)
    ws_id = ok(stow_bin, "attach", env=env, cwd=repo)["workspace_id"]

    async def go():
        async with root_session(stow_bin, repo, "legacy", env) as s:
            assert (await s.create(ws_id, "k-order"))["outcome"] == "committed"
            (repo / "zz.txt").write_text("last by name\n")
            os.symlink("README.md", repo / "aa-link")
            (repo / "mm.txt").write_text("middle\n")
            st = await s.call("stow_workspace_status", {"workspace_id": ws_id})
            paths = [e["change"]["path"] if e["kind"] == "change" else e["link_change"]["path"]
                     for e in st["entries"]]
            assert paths == ["aa-link", "mm.txt", "zz.txt"], st["entries"]
            first = await s.call("stow_workspace_status", {"workspace_id": ws_id, "limit": 1})
            assert first["next_cursor"]
            (repo / "bb.txt").write_text("new since the first page\n")
            stale = await s.call("stow_workspace_status",
                                 {"workspace_id": ws_id, "cursor": first["next_cursor"]})
            assert code(stale) == "invalid_request", stale

    arun(go())


def test_mcp_checkpoints_and_rewinds_while_workspace_serve_runs(stow_bin, workdir, env):
    """`workspace serve` owns the workspace's object store; the MCP
    server's portable captures and rewinds go through the serving process,
    so they work while it runs and S3 clients see the rewound objects."""
    from s3server import WorkspaceServer

    repo = make_repo(workdir / "repo", env)
    a = ok(stow_bin, "attach", env=env, cwd=repo)
    ws_id = a["workspace_id"]
    server = WorkspaceServer(stow_bin, ws_id, a["registry_dir"], "--port", "0", env=env)
    try:
        s3, bucket = server.client(), server.bucket
        s3.put_object(Bucket=bucket, Key="notes/a.txt", Body=b"v1", ContentType="text/markdown")

        async def session():
            async with root_session(stow_bin, repo, ERAS[-1], env) as s:
                created = await s.create(ws_id, "serve-cp")
                assert created["outcome"] == "committed", created
                cp = created["checkpoint_id"]
                s3.put_object(Bucket=bucket, Key="notes/a.txt", Body=b"v2", ContentType="text/plain")
                (repo / "README.md").write_text("# while served\n")
                r = await s.call("stow_workspace_rewind",
                                 {"workspace_id": ws_id, "checkpoint_id": cp, "request_key": "serve-rw"})
                assert r["outcome"] == "committed" and "error" not in r, r
                return cp

        arun(session())
        got = s3.get_object(Bucket=bucket, Key="notes/a.txt")
        assert got["Body"].read() == b"v1" and got["ContentType"] == "text/markdown"
        assert (repo / "README.md").read_text() != "# while served\n"
    finally:
        assert server.stop() == 0


def test_workspace_root_refusals(stow_bin, workdir, env):
    repo = make_repo(workdir / "repo", env)
    ok(stow_bin, "attach", env=env, cwd=repo)
    plain = workdir / "plain"
    plain.mkdir()

    def start(*argv, cwd):
        return subprocess.run(
            [stow_bin, "mcp", *argv], stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=SUBPROCESS_TIMEOUT, cwd=cwd,
            env=server_env({k: env[k] for k in ("HOME", "XDG_CONFIG_HOME")}),
        )

    out = start("--workspace-root", ".", "--workspace-id", "ws_1", cwd=repo)
    assert out.returncode == 2 and "incompatible" in out.stderr and out.stdout == ""
    out = start("--workspace-root", ".", cwd=plain)
    assert out.returncode == 1 and "no workspace" in out.stderr and out.stdout == ""
    out = start("--workspace-root", "missing", cwd=plain)
    assert out.returncode == 1 and out.stdout == ""
    # A subdirectory of the workspace selects it (its nearest ancestor).
    srv = subprocess.Popen(
        [stow_bin, "mcp", "--workspace-root", "src"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, cwd=repo, env=server_env({k: env[k] for k in ("HOME", "XDG_CONFIG_HOME")}),
        text=True,
    )
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    out, err = srv.communicate(json.dumps(init) + "\n", timeout=SUBPROCESS_TIMEOUT)
    assert srv.returncode == 0, err
    assert json.loads(out.splitlines()[0])["result"]["serverInfo"]["name"] == "stow-workspace"


def readme_mcp_config(marker):
    import re

    text = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    m = re.search(rf"<!-- mcp-config: {marker} -->\n```(\w+)\n(.*?)```", text, re.S)
    assert m, f"README has no {marker} MCP configuration"
    return m.group(2)


def readme_launches(repo):
    """(name, command, args) of each MCP registration the README shows."""
    import shlex
    import tomllib

    line = readme_mcp_config("claude").strip()
    words = shlex.split(line)
    assert words[:4] == ["claude", "mcp", "add", "stow"] and words[4] == "--"
    out = [("claude", words[5], words[6:])]
    vscode = json.loads(readme_mcp_config("vscode"))["servers"]["stow"]
    assert vscode["type"] == "stdio"
    out.append(("vscode", vscode["command"], [a.replace("${workspaceFolder}", str(repo)) for a in vscode["args"]]))
    codex = tomllib.loads(readme_mcp_config("codex"))["mcp_servers"]["stow"]
    out.append(("codex", codex["command"], codex["args"]))
    return out


def test_the_readme_mcp_registrations_start_the_workspace_profile(stow_bin, workdir, env):
    repo = make_repo(workdir / "repo", env)
    ws_id = ok(stow_bin, "attach", env=env, cwd=repo)["workspace_id"]
    ok(stow_bin, "checkpoint", "--message", "registered", env=env, cwd=repo)
    launches = readme_launches(repo)
    assert [n for n, _, _ in launches] == ["claude", "vscode", "codex"]

    async def go():
        for name, command, args in launches:
            assert command == "stow-s3", name
            params = StdioServerParameters(
                command=str(pathlib.Path(stow_bin).parent / command), args=args, cwd=str(repo),
                env=server_env({k: env[k] for k in ("HOME", "XDG_CONFIG_HOME")}),
            )
            async with Client(stdio_client(params), read_timeout_seconds=CALL_TIMEOUT) as c:
                s = WsSession(c)
                names = [t.name for t in (await c.list_tools()).tools]
                assert set(REWIND_TOOLS) <= set(names), (name, names)
                log = await s.call("stow_checkpoint_list", {"workspace_id": ws_id})
                assert log["entries"][0]["message"] == "registered", (name, log)

    arun(go())
