"""`stow-s3 mcp` workspace profile through the official Python MCP client:
the tool contract of seed 000 (the rewind tools beyond it are
test_mcp_rewind.py's), startup refusals, keyed checkpoint creation
and resolution (cross-checked with the CLI), paged inspection and diffs,
handoff export and adoption with every adopt refusal, and crash
consistency of a keyed capture under SIGKILL (spec/mcp.md §11-12, §14
items 23-25; spec/README.md "Interface decisions")."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import json
import os
import pathlib
import queue
import random
import re
import shutil
import stat
import subprocess
import threading
import time
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from mcpkit import ERAS, SEED_000, RawServer, Session, code
from test_mcp_object import seed_tools
from test_workspace import manifest, ok, ws
from test_workspace_transfer import tree

WORKSPACE_TOOLS = [
    "stow_workspace_inspect",
    "stow_checkpoint_create",
    "stow_checkpoint_resolve",
    "stow_checkpoint_inspect",
    "stow_checkpoint_diff",
]
EXPORT_TOOL = "stow_handoff_export"
ADOPT_TOOL = "stow_handoff_adopt"
# Beyond the seed's seven (issue 27), listed after them.
REWIND_TOOLS = ["stow_workspace_status", "stow_checkpoint_list", "stow_workspace_rewind"]

ENVELOPE_KEYS = {
    "version", "outcome", "workspace", "capture", "checkpoint_id", "entries",
    "next_cursor", "handoff", "bundle", "origin_checkpoint_id", "error",
    # The rewind tools' members.
    "head", "undo_checkpoint_id", "dry_run", "replayed", "written", "deleted",
    "unchanged", "conflicts", "skipped",
}
ERROR_KEYS = {"code", "phase", "attempts", "retryable", "message"}
WORKSPACE_KEYS = {"workspace_id", "directory", "bucket", "max_checkpoint_bytes", "max_checkpoints"}
CHECKPOINT_KEYS = {
    "version", "id", "workspace_id", "parent_id", "created", "files", "bytes", "excluded", "objects",
}
FILE_KEYS = {"path", "size", "mode", "sha256"}
CP_ID = re.compile(r"cp_[0-9a-f]{24}")
WS_ID = re.compile(r"ws_[0-9a-f]+")

SUBPROCESS_TIMEOUT = 20  # startup refusals
CALL_TIMEOUT = 120  # one MCP request on a busy 2-core machine
SESSION_TIMEOUT = 600  # a whole asyncio scenario


# ---------------------------------------------------------------- helpers


def server_env(extra=None) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", ""), "STOW_LOG": "warn", **(extra or {})}


def ws_argv(registry, ws_id, extra=(), timeout="30s") -> list[str]:
    argv = ["mcp", "--registry-dir", str(registry), "--workspace-id", ws_id]
    if timeout is not None:
        argv += ["--timeout", timeout]
    return argv + [str(a) for a in extra]


class WsSession(Session):
    """mcpkit's Session (structured == text, isError iff error, version 1)
    plus the workspace envelope's shape: only known members, and an error
    always carries all five fields."""

    async def call(self, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        env = await super().call(name, args)
        assert set(env) <= ENVELOPE_KEYS, (name, sorted(set(env) - ENVELOPE_KEYS))
        assert isinstance(env["outcome"], str) and env["outcome"], env
        if "error" in env:
            err = env["error"]
            assert set(err) == ERROR_KEYS, (name, err)
            assert isinstance(err["code"], str) and err["code"], err
            assert isinstance(err["phase"], str), err
            assert isinstance(err["attempts"], int) and not isinstance(err["attempts"], bool), err
            assert isinstance(err["retryable"], bool), err
            assert isinstance(err["message"], str), err
        return env

    async def inspect_ws(self, ws_id):
        return await self.call("stow_workspace_inspect", {"workspace_id": ws_id})

    async def create(self, ws_id, key, **opts):
        return await self.call("stow_checkpoint_create", {"workspace_id": ws_id, "request_key": key, **opts})

    async def resolve(self, ws_id, key, **opts):
        return await self.call("stow_checkpoint_resolve", {"workspace_id": ws_id, "request_key": key, **opts})

    async def inspect(self, cp, **opts):
        return await self.call("stow_checkpoint_inspect", {"checkpoint_id": cp, **opts})

    async def diff(self, a, b, **opts):
        return await self.call("stow_checkpoint_diff", {"from_id": a, "to_id": b, **opts})

    async def export(self, ws_id, cp, bundle):
        return await self.call(EXPORT_TOOL, {"workspace_id": ws_id, "checkpoint_id": cp, "bundle": bundle})

    async def adopt(self, bundle, destination):
        return await self.call(ADOPT_TOOL, {"bundle": bundle, "destination": destination})


@contextlib.asynccontextmanager
async def ws_session(stow_bin, registry, ws_id, era="legacy", extra=()):
    """An official-client session with a workspace-profile server; its
    stderr goes to a log file beside the registry, never to stdout."""
    params = StdioServerParameters(command=stow_bin, args=ws_argv(registry, ws_id, extra), env=server_env())
    errlog = open(pathlib.Path(registry).parent / "server-stderr.log", "a")
    try:
        async with Client(
            stdio_client(params, errlog=errlog), mode=era, read_timeout_seconds=CALL_TIMEOUT
        ) as c:
            yield WsSession(c)
    finally:
        errlog.close()


def arun(coro, timeout=SESSION_TIMEOUT):
    """Runs a scenario with an overall deadline (the stdio client then
    terminates its server)."""

    async def bounded():
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


class WsRawServer(RawServer):
    """mcpkit's RawServer (newline-delimited JSON-RPC on raw pipes) launched
    with workspace-profile arguments."""

    def __init__(self, stow_bin, registry, ws_id, extra=(), env_extra=None):  # noqa: D107
        self.proc = subprocess.Popen(
            [stow_bin, *ws_argv(registry, ws_id, extra)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=server_env(env_extra),
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.stdout_lines: list[bytes] = []
        self.stderr = b""
        self._out_thread = threading.Thread(target=self._pump, daemon=True)
        self._err_thread = threading.Thread(target=self._pump_err, daemon=True)
        self._out_thread.start()
        self._err_thread.start()
        self.next_id = 1

    def ensure_dead(self):
        if self.proc.poll() is None:
            self.kill()


def structured(resp) -> dict[str, Any]:
    assert "result" in resp, resp
    return resp["result"]["structuredContent"]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_files(root, files):
    for rel, data in files.items():
        p = pathlib.Path(root) / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def prepare(stow_bin, workdir, files, root="w", registry="reg", **fields):
    """Prepares a workspace seeded with `files` ({rel: bytes}); returns the
    prepare document (workspace_id, root, bucket, ...)."""
    src = workdir / f"{root}-input"
    write_files(src, files)
    m = manifest(workdir / f"{root}.task.json", root=root, registry_dir=registry,
                 inputs=[{"source": src.name, "destination": "."}], **fields)
    return ok(stow_bin, "prepare", "--manifest", m)


def checkpoint_dirs(registry) -> list[str]:
    """Everything in the registry's checkpoints directory (hidden stages too)."""
    d = pathlib.Path(registry) / ".stow" / "checkpoints"
    return sorted(os.listdir(d)) if d.is_dir() else []


def visible_checkpoints(registry) -> list[str]:
    return [n for n in checkpoint_dirs(registry) if not n.startswith(".")]


def derived_id(ws_id: str, key: str) -> str:
    """The checkpoint ID a request key derives (the keyed engine the CLI
    shares: cp_ + 24 hex of SHA-256 over a domain tag, workspace and key)."""
    digest = sha(b"stow-checkpoint-request-v1\0" + ws_id.encode() + b"\0" + key.encode())
    return "cp_" + digest[:24]


def listing(root) -> list[tuple]:
    """Every entry under root (directories, links, FIFOs included) without
    following links or opening anything but regular files."""
    out = []
    root = str(root)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as fh:
                    out.append((rel, "file", st.st_mode & 0o777, sha(fh.read())))
            elif stat.S_ISLNK(st.st_mode):
                out.append((rel, "link", os.readlink(p)))
            elif stat.S_ISDIR(st.st_mode):
                out.append((rel, "dir"))
            else:
                out.append((rel, "other", stat.S_IFMT(st.st_mode)))
    return out


def cli_checkpoint(stow_bin, registry, ws_id, *args, check=True):
    """`stow-s3 workspace checkpoint` (keyed when args carry a key)."""
    return ws(stow_bin, "checkpoint", "--id", ws_id, "--registry-dir", registry, *args, check=check)


def cli_resolve(stow_bin, registry, ws_id, key):
    """The CLI's keyed resolution of an MCP-created (portable) checkpoint."""
    _, doc, _ = cli_checkpoint(stow_bin, registry, ws_id, "--request-key", key, "--resolve",
                               "--portable", "--timeout", "30s")
    return doc


def assert_committed_capture(env, ws_id, *, replayed, parent="", files=None, nbytes=None):
    assert env["outcome"] == "committed" and "error" not in env, env
    cp_id = env["checkpoint_id"]
    assert CP_ID.fullmatch(cp_id), cp_id
    cap = env["capture"]
    assert cap["outcome"] == "committed" and cap["replayed"] is replayed, cap
    cp = cap["checkpoint"]
    assert set(cp) == CHECKPOINT_KEYS, sorted(cp)
    assert cp["version"] == 2, "MCP captures are portable"
    assert cp["id"] == cp_id and cp["workspace_id"] == ws_id
    assert cp["parent_id"] == parent
    assert isinstance(cp["created"], str) and cp["created"]
    assert cp["objects"] == 0
    if files is not None:
        assert cp["files"] == files, cp
    if nbytes is not None:
        assert cp["bytes"] == nbytes, cp
    return cp_id


def assert_refused(env, outcome, err_code):
    assert (env["outcome"], code(env)) == (outcome, err_code), env


async def all_pages(call, limit, max_pages=50):
    """Follows next_cursor to the end; returns the list of pages (entries)."""
    pages, cursor = [], None
    for _ in range(max_pages):
        args = {"limit": limit}
        if cursor is not None:
            args["cursor"] = cursor
        env = await call(**args)
        assert env["outcome"] == "ok" and "error" not in env, env
        pages.append(env.get("entries", []))
        cursor = env.get("next_cursor")
        if cursor is None:
            return pages
        assert isinstance(cursor, str) and cursor and len(cursor) <= 256, cursor
    raise AssertionError("paging did not end")


def file_entry(rel, data):
    return {"path": rel, "size": len(data), "sha256": sha(data)}


def strip_mode(entry):
    assert set(entry) == FILE_KEYS, entry
    assert isinstance(entry["mode"], int) and entry["mode"] >= 0
    return {k: v for k, v in entry.items() if k != "mode"}


SMALL = {"a.txt": b"alpha", "nested/b.txt": b"bravo!"}


# ---------------------------------------------------------------- 1. tool list


@pytest.mark.skipif(not SEED_000.exists(), reason="../shared/seeds is not beside the repository")
@pytest.mark.parametrize("era", ERAS)
def test_tools_are_the_seeds_verbatim(stow_bin, workdir, era):
    seed = seed_tools()
    p = prepare(stow_bin, workdir, SMALL)
    reg, wid = workdir / "reg", p["workspace_id"]
    (workdir / "export").mkdir()
    (workdir / "adopt").mkdir()

    async def go():
        lists = []
        for extra in ([], ["--export-root", workdir / "export"],
                      ["--export-root", workdir / "export", "--adopt-root", workdir / "adopt"]):
            async with ws_session(stow_bin, reg, wid, era, extra) as s:
                lists.append((await s.client.list_tools()).tools)
        return lists

    bare, export, both = arun(go())
    assert [t.name for t in bare] == WORKSPACE_TOOLS + REWIND_TOOLS
    assert [t.name for t in export] == WORKSPACE_TOOLS + [EXPORT_TOOL] + REWIND_TOOLS
    assert [t.name for t in both] == WORKSPACE_TOOLS + [EXPORT_TOOL, ADOPT_TOOL] + REWIND_TOOLS
    for tools in (bare, export, both):
        for t in tools:
            if t.name in REWIND_TOOLS:
                continue
            desc, inp, out = seed[t.name]
            assert t.description == desc, t.name
            assert t.input_schema == inp, t.name
            assert t.output_schema == out, t.name


# ---------------------------------------------------------------- 2. unknown properties


@pytest.mark.parametrize("era", ERAS)
def test_every_tool_refuses_unknown_properties(stow_bin, workdir, era):
    p = prepare(stow_bin, workdir, SMALL)
    reg, wid = workdir / "reg", p["workspace_id"]
    cp = cli_checkpoint(stow_bin, reg, wid, "--portable")[1]["checkpoint_id"]
    exp, adp = workdir / "export", workdir / "adopt"
    exp.mkdir()
    adp.mkdir()

    async def go():
        async with ws_session(stow_bin, reg, wid, era, ["--export-root", exp, "--adopt-root", adp]) as s:
            # A real bundle, so a refused adopt is refused for its property.
            assert (await s.export(wid, cp, "b1"))["outcome"] == "committed"
            before_cps, before_exp = checkpoint_dirs(reg), listing(exp)
            base = {
                "stow_workspace_inspect": {"workspace_id": wid},
                "stow_checkpoint_create": {"workspace_id": wid, "request_key": "rk-unknown"},
                "stow_checkpoint_resolve": {"workspace_id": wid, "request_key": "rk-unknown"},
                "stow_checkpoint_inspect": {"checkpoint_id": cp},
                "stow_checkpoint_diff": {"from_id": cp, "to_id": cp},
                EXPORT_TOOL: {"workspace_id": wid, "checkpoint_id": cp, "bundle": "b-unknown"},
                ADOPT_TOOL: {"bundle": "b1", "destination": "d-unknown"},
            }
            assert set(base) == set(WORKSPACE_TOOLS + [EXPORT_TOOL, ADOPT_TOOL])
            refused = [(name, {**args, "surprise": 1}) for name, args in base.items()]
            refused += [
                ("stow_checkpoint_create", {**base["stow_checkpoint_create"], "registry_dir": str(workdir)}),
                ("stow_checkpoint_create", {**base["stow_checkpoint_create"], "portable": False}),
                ("stow_checkpoint_create", {**base["stow_checkpoint_create"], "include_sensitive": True}),
                ("stow_checkpoint_inspect", {**base["stow_checkpoint_inspect"], "workspace_id": wid}),
                (EXPORT_TOOL, {**base[EXPORT_TOOL], "export_root": str(workdir)}),
                (ADOPT_TOOL, {**base[ADOPT_TOOL], "adopt_root": str(workdir)}),
                (ADOPT_TOOL, {**base[ADOPT_TOOL], "team": "platform"}),
            ]
            for name, args in refused:
                r = await s.raw(name, args)
                assert r.is_error, (name, args, r)
                if r.structured_content is not None:
                    assert "error" in r.structured_content, (name, r.structured_content)
                    assert r.structured_content.get("outcome") != "committed"
            # None of the refused calls had an effect.
            assert checkpoint_dirs(reg) == before_cps
            assert listing(exp) == before_exp
            assert listing(adp) == []
            missing = await s.resolve(wid, "rk-unknown")
            assert_refused(missing, "unknown", "not_found")

    arun(go())


# ---------------------------------------------------------------- 3. startup refusals


def _object_flag_cases():
    return [
        ("bucket", ["--bucket", "x"], "--bucket"),
        ("create-bucket", ["--create-bucket"], "--create-bucket"),
        ("browser", ["--browser"], "--browser"),
        ("read-only", ["--read-only"], "--read-only"),
        ("object-dir", ["--object-dir", "{workdir}/objs"], "--object-dir"),
    ]


STARTUP_CASES = [
    # (id, argv template); run with cwd = workdir, so "reg" exists relatively.
    ("relative-registry", ["--registry-dir", "reg", "--workspace-id", "{wid}", "--timeout", "30s"]),
    ("missing-registry", ["--registry-dir", "{workdir}/nope", "--workspace-id", "{wid}", "--timeout", "30s"]),
    ("unknown-workspace", ["--registry-dir", "{reg}", "--workspace-id", "ws_0000000000000000", "--timeout", "30s"]),
    ("timeout-missing", ["--registry-dir", "{reg}", "--workspace-id", "{wid}"]),
    ("timeout-zero", ["--registry-dir", "{reg}", "--workspace-id", "{wid}", "--timeout", "0s"]),
    ("timeout-unparsable", ["--registry-dir", "{reg}", "--workspace-id", "{wid}", "--timeout", "soon"]),
    ("export-root-missing", ["--registry-dir", "{reg}", "--workspace-id", "{wid}", "--timeout", "30s",
                             "--export-root", "{workdir}/no-export"]),
    ("adopt-root-missing", ["--registry-dir", "{reg}", "--workspace-id", "{wid}", "--timeout", "30s",
                            "--export-root", "{workdir}/export", "--adopt-root", "{workdir}/no-adopt"]),
    ("adopt-without-export", ["--registry-dir", "{reg}", "--workspace-id", "{wid}", "--timeout", "30s",
                              "--adopt-root", "{workdir}/adopt"]),
]


def _start_refused(stow_bin, workdir, argv):
    out = subprocess.run(
        [stow_bin, "mcp", *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
        cwd=workdir,
        env=server_env(),
    )
    assert out.returncode != 0, f"{argv}: started (rc 0); stderr {out.stderr!r}"
    assert out.stdout == "", f"{argv}: stdout must stay empty: {out.stdout!r}"
    assert out.stderr.strip(), f"{argv}: no message on stderr"
    return out.stderr


@pytest.fixture
def startup_ws(stow_bin, workdir):
    p = prepare(stow_bin, workdir, SMALL)
    (workdir / "export").mkdir()
    (workdir / "adopt").mkdir()
    return {"workdir": str(workdir), "reg": str(workdir / "reg"), "wid": p["workspace_id"]}


@pytest.mark.parametrize("case", STARTUP_CASES, ids=[c[0] for c in STARTUP_CASES])
def test_startup_refusals(stow_bin, workdir, startup_ws, case):
    _, template = case
    argv = [a.format(**startup_ws) for a in template]
    _start_refused(stow_bin, workdir, argv)
    assert not (workdir / "nope").exists()
    assert not (workdir / "no-export").exists() and not (workdir / "no-adopt").exists()
    # The checkpoints directory was not touched by a refused start.
    assert checkpoint_dirs(workdir / "reg") == []


@pytest.mark.parametrize("case", _object_flag_cases(), ids=[c[0] for c in _object_flag_cases()])
def test_object_flags_are_incompatible(stow_bin, workdir, startup_ws, case):
    _, flag_argv, flag = case
    base = ["--registry-dir", startup_ws["reg"], "--workspace-id", startup_ws["wid"], "--timeout", "30s"]
    argv = base + [a.format(**startup_ws) for a in flag_argv]
    err = _start_refused(stow_bin, workdir, argv)
    assert "incompatible" in err and flag in err, err
    assert not (workdir / "objs").exists()


def test_a_valid_start_serves_and_eof_exits_zero(stow_bin, workdir, startup_ws):
    """The control of the refusals: the same base arguments serve."""
    srv = WsRawServer(stow_bin, startup_ws["reg"], startup_ws["wid"])
    try:
        info = srv.initialize()
        assert "serverInfo" in info and info["capabilities"].get("tools") is not None, info
        env = structured(srv.tool("stow_workspace_inspect", {"workspace_id": startup_ws["wid"]}, CALL_TIMEOUT))
        assert env["outcome"] == "ok" and "error" not in env
        srv.close_stdin()
        assert srv.wait(CALL_TIMEOUT) == 0
        for line in srv.stdout_lines:
            assert json.loads(line)["jsonrpc"] == "2.0"
    finally:
        srv.ensure_dead()


# ---------------------------------------------------------------- 4. create / resolve


@pytest.mark.parametrize("era", ERAS)
def test_workspace_inspect_and_scope(stow_bin, workdir, era):
    p = prepare(stow_bin, workdir, SMALL, max_checkpoints=7)
    other = prepare(stow_bin, workdir, {"o.txt": b"other"}, root="o")
    reg, wid, oid = workdir / "reg", p["workspace_id"], other["workspace_id"]
    foreign_cp = cli_checkpoint(stow_bin, reg, oid, "--portable")[1]["checkpoint_id"]

    async def go():
        async with ws_session(stow_bin, reg, wid, era) as s:
            env = await s.inspect_ws(wid)
            assert set(env) == {"version", "outcome", "workspace"}, env
            w = env["workspace"]
            assert set(w) == WORKSPACE_KEYS
            assert w["workspace_id"] == wid and w["bucket"] == p["bucket"]
            assert os.path.realpath(w["directory"]) == os.path.realpath(p["root"])
            assert (w["max_checkpoints"], w["max_checkpoint_bytes"]) == (7, 0)

            foreign = await s.inspect_ws(oid)
            assert_refused(foreign, "ok", "invalid_scope")
            assert "workspace" not in foreign

            before = checkpoint_dirs(reg)
            made = await s.create(oid, "foreign-key")
            assert "error" in made and made["outcome"] != "committed", made
            resolved = await s.resolve(oid, "foreign-key")
            assert "error" in resolved and resolved["outcome"] != "committed", resolved
            assert checkpoint_dirs(reg) == before

            mine = assert_committed_capture(await s.create(wid, "mine"), wid, replayed=False)
            for env in (await s.inspect(foreign_cp), await s.diff(mine, foreign_cp),
                        await s.diff(foreign_cp, mine)):
                assert env["outcome"] == "ok" and "error" in env and "entries" not in env, env

    arun(go())


@pytest.mark.parametrize("era", ERAS)
def test_create_replay_conflict_and_resolve(stow_bin, workdir, era):
    p = prepare(stow_bin, workdir, SMALL)
    reg, wid = workdir / "reg", p["workspace_id"]

    async def first_life():
        async with ws_session(stow_bin, reg, wid, era) as s:
            c0 = assert_committed_capture(await s.create(wid, "k-0"), wid, replayed=False, files=2, nbytes=11)

            first = await s.create(wid, "k-1")
            c1 = assert_committed_capture(first, wid, replayed=False, files=2, nbytes=11)
            assert c1 != c0
            assert first["capture"]["checkpoint"]["excluded"] == []
            manifest_doc = json.loads((reg / ".stow" / "checkpoints" / c1 / "manifest.json").read_text())
            assert manifest_doc["version"] == 2 and manifest_doc["id"] == c1

            again = await s.create(wid, "k-1")
            assert assert_committed_capture(again, wid, replayed=True) == c1
            assert again["capture"]["checkpoint"]["created"] == first["capture"]["checkpoint"]["created"]

            # The same key with other options is a conflict, never a new capture.
            settled = visible_checkpoints(reg)
            for opts in ({"parent_id": c0}, {"max_files": 5}, {"max_bytes": 1000}):
                assert_refused(await s.create(wid, "k-1", **opts), "unknown", "request_conflict")
                assert_refused(await s.resolve(wid, "k-1", **opts), "unknown", "request_conflict")
            assert visible_checkpoints(reg) == settled

            # Limits may only narrow.
            for opts in ({"max_bytes": (1 << 30) + 1}, {"max_files": 100001},
                         {"max_bytes": -1}, {"max_files": -1}):
                assert_refused(await s.create(wid, "k-wide", **opts), "not_committed", "invalid_request")
            # A file bigger than a narrowed byte bound.
            assert_refused(await s.create(wid, "k-narrow", max_bytes=3), "not_committed", "capacity_exceeded")
            assert visible_checkpoints(reg) == settled
            for key in ("k-wide", "k-narrow"):
                assert_refused(await s.resolve(wid, key), "unknown", "not_found")

            # Resolution of an unknown key creates nothing at all.
            before = checkpoint_dirs(reg)
            missing = await s.resolve(wid, "never-sent")
            assert_refused(missing, "unknown", "not_found")
            assert checkpoint_dirs(reg) == before

            resolved = await s.resolve(wid, "k-1")
            assert assert_committed_capture(resolved, wid, replayed=True) == c1
            return c1, first["capture"]["checkpoint"]

    c1, cp1 = arun(first_life())

    # MCP -> CLI: the MCP capture resolves from the CLI.
    doc = cli_resolve(stow_bin, reg, wid, "k-1")
    assert doc["version"] == 1 and "error" not in doc, doc
    res = doc["result"]
    assert res["outcome"] == "committed" and res["replayed"] is True
    assert res["checkpoint"]["id"] == c1
    assert (res["checkpoint"]["files"], res["checkpoint"]["bytes"]) == (cp1["files"], cp1["bytes"])
    assert res["checkpoint"]["created"] == cp1["created"]

    # CLI -> MCP: a CLI keyed capture resolves (and replays) over MCP.
    _, made, _ = cli_checkpoint(stow_bin, reg, wid, "--request-key", "k-cli", "--portable", "--timeout", "30s")
    assert made["result"]["outcome"] == "committed" and made["result"]["replayed"] is False
    cli_id = made["result"]["checkpoint"]["id"]

    async def second_life():
        async with ws_session(stow_bin, reg, wid, era) as s:
            before = checkpoint_dirs(reg)
            env = await s.resolve(wid, "k-cli")
            assert assert_committed_capture(env, wid, replayed=True, files=2, nbytes=11) == cli_id
            env = await s.create(wid, "k-cli")
            assert assert_committed_capture(env, wid, replayed=True) == cli_id
            # A restart keeps the MCP capture resolvable too.
            env = await s.resolve(wid, "k-1")
            assert assert_committed_capture(env, wid, replayed=True) == c1
            assert checkpoint_dirs(reg) == before

    arun(second_life())


def test_configured_limits_bound_the_arguments(stow_bin, workdir):
    p = prepare(stow_bin, workdir, SMALL)
    reg, wid = workdir / "reg", p["workspace_id"]

    async def go():
        async with ws_session(stow_bin, reg, wid, extra=["--max-bytes", "1000", "--max-files", "10"]) as s:
            assert_refused(await s.create(wid, "k", max_files=11), "not_committed", "invalid_request")
            assert_refused(await s.create(wid, "k", max_bytes=1001), "not_committed", "invalid_request")
            assert visible_checkpoints(reg) == []
            env = await s.create(wid, "k-equal", max_files=10, max_bytes=1000)
            assert_committed_capture(env, wid, replayed=False, files=2)
            write_files(p["root"], {"big.bin": b"x" * 2000})
            before = visible_checkpoints(reg)
            assert_refused(await s.create(wid, "k-big"), "not_committed", "capacity_exceeded")
            assert visible_checkpoints(reg) == before

    arun(go())


# ---------------------------------------------------------------- 5. inspect and paging


@pytest.mark.parametrize("era", ERAS)
def test_inspect_entries_paging_and_refusals(stow_bin, workdir, era):
    p = prepare(stow_bin, workdir, SMALL)
    reg, wid = workdir / "reg", p["workspace_id"]
    write_files(p["root"], {".env": b"SECRET=1"})

    async def go():
        async with ws_session(stow_bin, reg, wid, era) as s:
            made = await s.create(wid, "k-a")
            cp_a = assert_committed_capture(made, wid, replayed=False, files=2, nbytes=11)
            assert made["capture"]["checkpoint"]["excluded"] == [".env"]
            cp_b = assert_committed_capture(await s.create(wid, "k-b"), wid, replayed=False)

            full = await s.inspect(cp_a)
            assert full["outcome"] == "ok" and "error" not in full, full
            assert full["checkpoint_id"] == cp_a and "next_cursor" not in full
            entries = full["entries"]
            assert [e["kind"] for e in entries] == ["file", "file", "bucket", "excluded"]
            for e, (rel, data) in zip(entries[:2], sorted(SMALL.items())):
                assert set(e) == {"kind", "file"}
                assert strip_mode(e["file"]) == file_entry(rel, data)
            assert entries[2] == {"kind": "bucket", "bucket": p["bucket"]}
            assert entries[3] == {"kind": "excluded", "excluded": ".env"}

            for limit, sizes in ((1, [1, 1, 1, 1]), (2, [2, 2]), (3, [3, 1]), (4, [4]), (1000, [4])):
                pages = await all_pages(lambda **kw: s.inspect(cp_a, **kw), limit)
                assert [len(pg) for pg in pages] == sizes, (limit, pages)
                assert sum(pages, []) == entries

            for limit in (0, 1001, -1):
                bad = await s.inspect(cp_a, limit=limit)
                assert_refused(bad, "ok", "invalid_request")
                assert "entries" not in bad and "next_cursor" not in bad

            cursor_a = (await s.inspect(cp_a, limit=1))["next_cursor"]
            crossed = await s.inspect(cp_b, limit=1, cursor=cursor_a)
            assert_refused(crossed, "ok", "invalid_request")
            assert "entries" not in crossed
            for garbage in ("not-a-cursor", "%%%", "A" * 300):
                assert_refused(await s.inspect(cp_a, cursor=garbage), "ok", "invalid_request")
            # The cursor still works where it belongs.
            rest = await s.inspect(cp_a, cursor=cursor_a, limit=1)
            assert rest["entries"] == entries[1:2] and rest["next_cursor"]

            missing = await s.inspect("cp_" + "0" * 24)
            assert missing["outcome"] == "ok" and "error" in missing

    arun(go())


def test_inspect_pages_through_2500_files(stow_bin, workdir):
    p = prepare(stow_bin, workdir, {"seed.txt": b"seed"})
    reg, wid = workdir / "reg", p["workspace_id"]
    files = {"seed.txt": b"seed"}
    for i in range(2499):
        files[f"d{i % 10}/f{i:05d}.txt"] = f"file {i}\n".encode()
    write_files(p["root"], files)
    expected = [file_entry(rel, files[rel]) for rel in sorted(files)]

    async def go():
        async with ws_session(stow_bin, reg, wid) as s:
            made = await s.create(wid, "big")
            cp = assert_committed_capture(made, wid, replayed=False, files=2500,
                                          nbytes=sum(len(b) for b in files.values()))
            first = await s.inspect(cp)
            assert len(first["entries"]) == 100 and first["next_cursor"], "default limit is 100"

            envs, cursor = [], None
            while len(envs) < 10:
                args = {"limit": 1000} if cursor is None else {"limit": 1000, "cursor": cursor}
                env = await s.inspect(cp, **args)
                assert env["outcome"] == "ok" and "error" not in env and env["checkpoint_id"] == cp, env
                envs.append(env)
                cursor = env.get("next_cursor")
                if cursor is None:
                    break
            return cp, envs

    cp, envs = arun(go())
    # A page holds at most `limit` entries, fewer when more would push the
    # result (structured and text forms) past 256 KiB; here about 850.
    sizes = [len(e["entries"]) for e in envs]
    assert sum(sizes) == 2501 and all(0 < n <= 1000 for n in sizes), sizes
    assert len(envs) == 3 and min(sizes[:-1]) >= 800, sizes
    assert all("next_cursor" in e for e in envs[:-1]) and "next_cursor" not in envs[-1]
    entries = [x for e in envs for x in e["entries"]]
    assert [x["kind"] for x in entries] == ["file"] * 2500 + ["bucket"]
    assert [strip_mode(x["file"]) for x in entries[:2500]] == expected
    assert entries[-1] == {"kind": "bucket", "bucket": p["bucket"]}


# ---------------------------------------------------------------- 6. diff


@pytest.mark.parametrize("era", ERAS)
def test_diff_after_edits(stow_bin, workdir, era):
    old = {"a.txt": b"same", "b.txt": b"before", "c.txt": b"doomed"}
    p = prepare(stow_bin, workdir, old)
    reg, wid, root = workdir / "reg", p["workspace_id"], pathlib.Path(p["root"])

    async def go():
        async with ws_session(stow_bin, reg, wid, era) as s:
            c1 = assert_committed_capture(await s.create(wid, "d-1"), wid, replayed=False, files=3)
            (root / "b.txt").write_bytes(b"after!!")
            (root / "c.txt").unlink()
            (root / "new.txt").write_bytes(b"fresh")
            c2 = assert_committed_capture(await s.create(wid, "d-2", parent_id=c1), wid,
                                          replayed=False, parent=c1, files=3)

            d = await s.diff(c1, c2)
            assert d["outcome"] == "ok" and "error" not in d and "next_cursor" not in d, d
            entries = d["entries"]
            assert all(set(e) == {"kind", "change"} and e["kind"] == "change" for e in entries), entries
            changes = [e["change"] for e in entries]
            assert [(c["path"], c["kind"]) for c in changes] == [
                ("b.txt", "changed"), ("c.txt", "deleted"), ("new.txt", "added")]
            b, c, n = changes
            assert strip_mode(b["from"]) == file_entry("b.txt", b"before")
            assert strip_mode(b["to"]) == file_entry("b.txt", b"after!!")
            assert strip_mode(c["from"]) == file_entry("c.txt", b"doomed") and "to" not in c
            assert strip_mode(n["to"]) == file_entry("new.txt", b"fresh") and "from" not in n

            pages = await all_pages(lambda **kw: s.diff(c1, c2, **kw), 1)
            assert [len(pg) for pg in pages] == [1, 1, 1] and sum(pages, []) == entries

            back = await s.diff(c2, c1)
            assert [(e["change"]["path"], e["change"]["kind"]) for e in back["entries"]] == [
                ("b.txt", "changed"), ("c.txt", "added"), ("new.txt", "deleted")]

            same = await s.diff(c1, c1)
            assert same["outcome"] == "ok" and "error" not in same
            assert same.get("entries", []) == [] and "next_cursor" not in same

            for limit in (0, 1001):
                assert_refused(await s.diff(c1, c2, limit=limit), "ok", "invalid_request")
            assert_refused(await s.diff(c1, c2, cursor="not-a-cursor"), "ok", "invalid_request")
            # An inspect cursor is not a diff cursor.
            inspect_cursor = (await s.inspect(c1, limit=1))["next_cursor"]
            assert_refused(await s.diff(c1, c2, cursor=inspect_cursor), "ok", "invalid_request")

    arun(go())


# ---------------------------------------------------------------- 7. export and adopt


def _bundle_copy(exp, name, handoff=None, archive_name="checkpoint.tar.gz"):
    """A copy of bundle b1 under another name, its handoff.json optionally
    replaced by the document `handoff`."""
    src, dst = exp / "b1", exp / name
    dst.mkdir()
    shutil.copyfile(src / "checkpoint.tar.gz", dst / archive_name)
    doc = json.loads((src / "handoff.json").read_text()) if handoff is None else handoff
    (dst / "handoff.json").write_text(json.dumps(doc))
    return dst


@pytest.mark.parametrize("era", ERAS)
def test_export_then_adopt_in_another_registry(stow_bin, workdir, era):
    files = {"a.txt": b"alpha", "nested/b.txt": b"bravo!", "bin/run.sh": b"#!/bin/sh\necho hi\n"}
    p1 = prepare(stow_bin, workdir, files, root="w1", registry="reg1")
    os.chmod(pathlib.Path(p1["root"]) / "bin" / "run.sh", 0o755)
    p2 = prepare(stow_bin, workdir, {"mine.txt": b"receiver"}, root="w2", registry="reg2")
    r1, r2 = workdir / "reg1", workdir / "reg2"
    w1, w2 = p1["workspace_id"], p2["workspace_id"]
    exp, adp = workdir / "export", workdir / "adopt"
    exp.mkdir()
    adp.mkdir()

    async def export_side():
        async with ws_session(stow_bin, r1, w1, era, ["--export-root", exp]) as s:
            cp = assert_committed_capture(await s.create(w1, "x-1"), w1, replayed=False, files=3)
            env = await s.export(w1, cp, "b1")
            assert env["outcome"] == "committed" and "error" not in env, env
            assert env["bundle"] == "b1"
            h = env["handoff"]
            assert "team" not in h and "registry_dir" not in h, h
            assert (h["version"], h["workspace_id"], h["checkpoint_id"]) == (2, w1, cp)
            arc = h["archive"]
            assert set(arc) == {"path", "sha256", "bytes", "files"}
            assert arc["path"] == "checkpoint.tar.gz" and arc["files"] == 3
            bundle = exp / "b1"
            assert sorted(os.listdir(bundle)) == ["checkpoint.tar.gz", "handoff.json"]
            data = (bundle / "checkpoint.tar.gz").read_bytes()
            assert (sha(data), len(data)) == (arc["sha256"], arc["bytes"])
            doc = json.loads((bundle / "handoff.json").read_text())
            assert (doc["version"], doc["workspace_id"], doc["checkpoint_id"]) == (2, w1, cp)
            assert doc["archive"] == arc and "team" not in doc and "registry_dir" not in doc

            kept = listing(exp)
            again = await s.export(w1, cp, "b1")
            assert code(again) == "already_exists" and again["outcome"] != "committed", again
            assert listing(exp) == kept
            for bad in ("../x", ".hidden", "a/b", "", "."):
                env = await s.export(w1, cp, bad)
                assert code(env) == "invalid_request" and env["outcome"] != "committed", (bad, env)
                assert listing(exp) == kept, bad
            assert sorted(os.listdir(exp)) == ["b1"]
            assert not (workdir / "x").exists()
            return cp

    cp = arun(export_side())
    handoff = json.loads((exp / "b1" / "handoff.json").read_text())

    # Refusal bundles, each beside the good one in the export root.
    link = exp / "link"
    link.mkdir()
    shutil.copyfile(exp / "b1" / "checkpoint.tar.gz", link / "checkpoint.tar.gz")
    os.symlink(exp / "b1" / "handoff.json", link / "handoff.json")
    fifo = exp / "fifo"
    fifo.mkdir()
    shutil.copyfile(exp / "b1" / "checkpoint.tar.gz", fifo / "checkpoint.tar.gz")
    os.mkfifo(fifo / "handoff.json")
    fifo_archive = exp / "fifo-archive"
    fifo_archive.mkdir()
    shutil.copyfile(exp / "b1" / "handoff.json", fifo_archive / "handoff.json")
    os.mkfifo(fifo_archive / "checkpoint.tar.gz")
    link_archive = exp / "link-archive"
    link_archive.mkdir()
    shutil.copyfile(exp / "b1" / "handoff.json", link_archive / "handoff.json")
    os.symlink(exp / "b1" / "checkpoint.tar.gz", link_archive / "checkpoint.tar.gz")
    _bundle_copy(exp, "team", {**handoff, "team": "platform"})
    _bundle_copy(exp, "other-path", {**handoff, "archive": {**handoff["archive"], "path": "other.tar.gz"}},
                 archive_name="other.tar.gz")
    _bundle_copy(exp, "dot-path", {**handoff, "archive": {**handoff["archive"], "path": "./checkpoint.tar.gz"}})
    _bundle_copy(exp, "outside-path",
                 {**handoff, "archive": {**handoff["archive"], "path": "../b1/checkpoint.tar.gz"}})
    tampered = _bundle_copy(exp, "tampered")
    raw = bytearray((tampered / "checkpoint.tar.gz").read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (tampered / "checkpoint.tar.gz").write_bytes(bytes(raw))
    (adp / "taken").mkdir()
    (adp / "taken" / "keep.txt").write_text("keep")

    async def adopt_side():
        extra = ["--export-root", exp, "--adopt-root", adp]
        async with ws_session(stow_bin, r2, w2, era, extra) as s:
            tools = [t.name for t in (await s.client.list_tools()).tools]
            assert tools == WORKSPACE_TOOLS + [EXPORT_TOOL, ADOPT_TOOL] + REWIND_TOOLS
            before, before_exp = listing(adp), listing(exp)
            refusals = [("b1", bad) for bad in ("../x", ".hidden", "a/b")]
            refusals += [("b1", "taken"), ("missing-bundle", "d"), ("../b1", "d")]
            refusals += [(b, "d") for b in ("link", "fifo", "fifo-archive", "link-archive", "team",
                                            "other-path", "dot-path", "outside-path", "tampered")]
            for bundle, dest in refusals:
                env = await s.adopt(bundle, dest)
                assert "error" in env and env["outcome"] != "committed", (bundle, dest, env)
                assert listing(adp) == before, (bundle, dest)
                assert listing(exp) == before_exp, (bundle, dest)
                if bundle == "tampered":
                    assert code(env) == "invalid_archive", env
            assert not (workdir / "x").exists() and not (exp / "x").exists()
            assert (adp / "taken" / "keep.txt").read_text() == "keep"
            assert ok(stow_bin, "list", "--registry-dir", r2)["count"] == 1

            env = await s.adopt("b1", "dest")
            assert env["outcome"] == "committed" and "error" not in env, env
            assert env["origin_checkpoint_id"] == cp
            w = env["workspace"]
            assert set(w) == WORKSPACE_KEYS
            new_id = w["workspace_id"]
            assert WS_ID.fullmatch(new_id) and new_id not in (w1, w2)
            assert os.path.realpath(w["directory"]) == os.path.realpath(adp / "dest")

            # The adopted workspace joined this server's scope.
            seen = await s.inspect_ws(new_id)
            assert seen["outcome"] == "ok" and "error" not in seen, seen
            assert seen["workspace"]["workspace_id"] == new_id
            assert seen["workspace"]["directory"] == w["directory"]
            assert seen["workspace"]["bucket"] == w["bucket"]
            made = await s.create(new_id, "after-adopt")
            assert_committed_capture(made, new_id, replayed=False, files=3)
            # The receiver's own workspace is still in scope.
            assert (await s.inspect_ws(w2))["outcome"] == "ok"
            return new_id

    arun(adopt_side())
    assert tree(adp / "dest") == tree(pathlib.Path(p1["root"]))
    assert sorted(os.listdir(adp)) == ["dest", "taken"]

    # Scope is per server session: a fresh server on w2 does not see it.
    async def fresh():
        async with ws_session(stow_bin, r2, w2, era) as s:
            listed = ok(stow_bin, "list", "--registry-dir", r2)
            new_ids = [r["id"] for r in listed["results"] if r["id"] != w2]
            assert len(new_ids) == 1
            assert_refused(await s.inspect_ws(new_ids[0]), "ok", "invalid_scope")

    arun(fresh())



def test_adopting_a_bundle_of_the_same_server_reuses_its_checkpoint(stow_bin, workdir):
    """A bundle exported by this very server names a checkpoint its
    registry holds, with the same manifest: adopt reuses it (nothing is
    written to the checkpoints or blobs) and restores it, as often as
    asked. A plain `workspace import` of the same archive still refuses
    the existing ID."""
    files = {"a.txt": b"alpha", "nested/b.txt": b"bravo!"}
    p = prepare(stow_bin, workdir, files, root="w", registry="reg")
    reg, wid = workdir / "reg", p["workspace_id"]
    exp, adp = workdir / "export", workdir / "adopt"
    exp.mkdir()
    adp.mkdir()
    blobs = reg / ".stow" / "blobs"

    async def scenario():
        extra = ["--export-root", exp, "--adopt-root", adp]
        async with ws_session(stow_bin, reg, wid, "legacy", extra) as s:
            cp = assert_committed_capture(await s.create(wid, "x-1"), wid, replayed=False, files=2)
            env = await s.export(wid, cp, "b1")
            assert env["outcome"] == "committed" and "error" not in env, env
            held = (checkpoint_dirs(reg), tree(reg / ".stow" / "checkpoints"), tree(blobs))
            assert all(held), "the registry's checkpoints and blobs are where this test looks"
            adopted = []
            for dest in ("d1", "d2"):
                env = await s.adopt("b1", dest)
                assert env["outcome"] == "committed" and "error" not in env, env
                assert env["origin_checkpoint_id"] == cp
                new_id = env["workspace"]["workspace_id"]
                assert WS_ID.fullmatch(new_id) and new_id != wid and new_id not in adopted
                adopted.append(new_id)
                assert (await s.inspect_ws(new_id))["outcome"] == "ok"
                assert tree(adp / dest) == tree(pathlib.Path(p["root"]))
                assert (checkpoint_dirs(reg), tree(reg / ".stow" / "checkpoints"), tree(blobs)) == held
            return cp

    cp = arun(scenario())
    rc, out, _ = ws(stow_bin, "import", "--archive", exp / "b1" / "checkpoint.tar.gz",
                    "--registry-dir", reg, check=False)
    assert rc == 1 and out["error"]["code"] == "already_exists", out
    assert cp in visible_checkpoints(reg)

# ---------------------------------------------------------------- 8. SIGKILL during a capture

KILL_ROUNDS = 10


def test_sigkill_during_a_capture(stow_bin, workdir):
    p = prepare(stow_bin, workdir, {"seed.txt": b"seed"})
    reg, wid = workdir / "reg", p["workspace_id"]
    files = {f"d{i % 20}/f{i:05d}.bin": hashlib.sha256(str(i).encode()).digest() * 8 for i in range(2999)}
    write_files(p["root"], files)
    rng = random.Random(20251125)

    # Calibration: how long an undisturbed capture of this tree takes, and
    # the key -> ID derivation the absence check relies on.
    srv = WsRawServer(stow_bin, reg, wid)
    try:
        srv.initialize()
        started = time.monotonic()
        env = structured(srv.tool("stow_checkpoint_create", {"workspace_id": wid, "request_key": "calibrate"},
                                  CALL_TIMEOUT))
        took = time.monotonic() - started
        assert env["outcome"] == "committed" and env["capture"]["checkpoint"]["files"] == 3000, env
        assert env["checkpoint_id"] == derived_id(wid, "calibrate")
        srv.close_stdin()
        assert srv.wait(CALL_TIMEOUT) == 0
    finally:
        srv.ensure_dead()

    seen = collections.Counter()
    for i in range(KILL_ROUNDS):
        key = f"kill-{i}"
        before = set(visible_checkpoints(reg))
        victim = WsRawServer(stow_bin, reg, wid)
        try:
            victim.initialize()
            rid = victim.request(
                "tools/call",
                {"name": "stow_checkpoint_create", "arguments": {"workspace_id": wid, "request_key": key}},
            )
            time.sleep(rng.random() * took * 1.5)
        finally:
            victim.kill()
        replies = [json.loads(line) for line in victim.stdout_lines]
        reply = next((m for m in replies if m.get("id") == rid), None)

        judge = WsRawServer(stow_bin, reg, wid)
        try:
            judge.initialize()
            resolved = structured(judge.tool("stow_checkpoint_resolve", {"workspace_id": wid, "request_key": key},
                                             CALL_TIMEOUT))
            judge.close_stdin()
            assert judge.wait(CALL_TIMEOUT) == 0
        finally:
            judge.ensure_dead()

        cp_dir = reg / ".stow" / "checkpoints" / derived_id(wid, key)
        if resolved["outcome"] == "committed":
            assert "error" not in resolved and resolved["capture"]["replayed"] is True, resolved
            cp_id = resolved["checkpoint_id"]
            assert cp_id == derived_id(wid, key)
            assert (cp_dir / "manifest.json").is_file()
            assert resolved["capture"]["checkpoint"]["files"] == 3000
            doc = cli_resolve(stow_bin, reg, wid, key)
            assert doc["result"]["outcome"] == "committed" and doc["result"]["checkpoint"]["id"] == cp_id
            assert set(visible_checkpoints(reg)) == before | {cp_id}
            seen["committed"] += 1
        else:
            assert (resolved["outcome"], code(resolved)) == ("unknown", "not_found"), (i, resolved)
            assert not cp_dir.exists(), (i, cp_dir)
            assert set(visible_checkpoints(reg)) == before, i
            seen["not_found"] += 1
        if reply is not None:
            seen["replied"] += 1
            if structured(reply)["outcome"] == "committed":
                assert resolved["outcome"] == "committed", "a committed reply must be durable"
    print(dict(seen), f"undisturbed capture {took:.2f}s")
    assert seen["committed"] + seen["not_found"] == KILL_ROUNDS


# ---------------------------------------------------------------- guide, bounds


@pytest.mark.parametrize("era", ERAS)
def test_the_checkpoint_guide_is_a_resource_and_the_instructions(stow_bin, workdir, era):
    p = prepare(stow_bin, workdir, {"a.txt": b"a"})

    async def go():
        async with ws_session(stow_bin, workdir / "reg", p["workspace_id"], era) as s:
            listed = (await s.client.list_resources()).resources
            read = await s.client.read_resource("stow://guides/checkpoints/v1")
            return listed, read

    listed, read = arun(go())
    assert [(str(r.uri), r.mime_type) for r in listed] == [("stow://guides/checkpoints/v1", "text/plain")]
    (content,) = read.contents
    assert content.mime_type == "text/plain"
    text = content.text
    # The workflow the guide must teach.
    for phrase in ("request_key", "committed", "stow_checkpoint_resolve", "pause", "not evidence"):
        assert phrase in text, phrase


def test_a_result_over_256_kib_keeps_its_outcome(stow_bin, workdir):
    # A capture that excludes many sensitive-looking files has a long
    # `excluded` list: the committed outcome survives the response bound.
    files = {f"secrets/{'k' * 180}{i:05}.pem": b"x" for i in range(1500)}
    files["keep.txt"] = b"keep"
    p = prepare(stow_bin, workdir, files, include_sensitive_inputs=True)

    async def go():
        async with ws_session(stow_bin, workdir / "reg", p["workspace_id"]) as s:
            return await s.call("stow_checkpoint_create",
                                {"workspace_id": p["workspace_id"], "request_key": "big"})

    env = arun(go())
    assert env["outcome"] == "committed", env
    assert env["error"]["code"] == "response_too_large"
    cp = env["checkpoint_id"]
    assert (workdir / "reg" / ".stow" / "checkpoints" / cp / "manifest.json").is_file()
    assert env["capture"]["replayed"] is False
