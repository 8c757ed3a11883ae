"""Helpers for the MCP end-to-end tests: launch `stow-s3 mcp` under the
official Python MCP client (both protocol eras), check the object envelope
invariants on every result, and drive raw JSON-RPC where a test needs the
process itself (exit codes, signals, SIGKILL, stdout hygiene). The second
half is the workspace profile's: its tools, envelope shape, sessions and
result assertions (wskit.py prepares the workspaces they run on)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import pathlib
import queue
import re
import subprocess
import threading
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = pathlib.Path(__file__).resolve().parents[2]
SEED_000 = ROOT.parent / "shared" / "seeds" / "000_9ddffa47345bc962.txt"

# The two protocol eras: initialize (2025-11-25 clients) and the stateless
# 2026-07-28 revision.
ERAS = ["legacy", "2026-07-28"]

CORE_TOOLS = [
    "stow_object_read_for_save",
    "stow_object_save",
    "stow_object_resolve_save",
    "stow_object_release_observation",
    "stow_object_capabilities",
]
BROWSER_TOOLS = ["stow_browser", "stow_object_mentions"]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def mcp_args(objdir, bucket="files", *, create=True, browser=False, read_only=False, extra=()):
    args = ["mcp", "--object-dir", str(objdir), "--bucket", bucket]
    if create:
        args.append("--create-bucket")
    if browser:
        args.append("--browser")
    if read_only:
        args.append("--read-only")
    return args + list(extra)


def params(stow_bin, objdir, **kw) -> StdioServerParameters:
    env = {"PATH": os.environ.get("PATH", ""), "STOW_LOG": os.environ.get("STOW_LOG", "warn")}
    return StdioServerParameters(command=stow_bin, args=mcp_args(objdir, **kw), env=env)


@contextlib.asynccontextmanager
async def session(stow_bin, objdir, era="legacy", **kw):
    """An official-client session with the server (stderr kept out of stdout)."""
    errlog = open(pathlib.Path(objdir).parent / "server-stderr.log", "a")
    try:
        async with Client(stdio_client(params(stow_bin, objdir, **kw), errlog=errlog), mode=era) as c:
            yield Session(c)
    finally:
        errlog.close()


class Session:
    """Wraps the official client; every object result is checked for the
    envelope invariants (structured == text, isError iff error)."""

    def __init__(self, client: Client):
        self.client = client

    async def raw(self, name: str, args: dict[str, Any]):
        return await self.client.call_tool(name, args)

    async def call(self, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        r = await self.client.call_tool(name, args or {})
        env = r.structured_content
        assert env is not None, f"{name}: no structured content: {r.content}"
        assert len(r.content) == 1 and r.content[0].type == "text", r.content
        assert json.loads(r.content[0].text) == env, "text and structured forms differ"
        assert env["version"] == 1
        assert bool(r.is_error) == ("error" in env), (r.is_error, env)
        return env

    async def read(self, key: str) -> dict[str, Any]:
        return await self.call("stow_object_read_for_save", {"key": key})

    async def save(self, key, data: bytes, request_key, *, token=None, replace=None, **opts):
        args = {"key": key, "data_base64": b64(data), "request_key": request_key, **opts}
        if token is not None:
            args["observation_token"] = token
        if replace is not None:
            args["replace"] = replace
        return await self.call("stow_object_save", args)

    async def resolve(self, key, request_key):
        return await self.call("stow_object_resolve_save", {"key": key, "request_key": request_key})

    async def release(self, token):
        return await self.call("stow_object_release_observation", {"observation_token": token})

    async def capabilities(self):
        return await self.call("stow_object_capabilities", {})


def code(env: dict[str, Any]) -> str | None:
    return (env.get("error") or {}).get("code")


def body(env: dict[str, Any]) -> bytes:
    return base64.b64decode(env["object"].get("data_base64", ""))


def run(coro):
    return asyncio.run(coro)


def stow(stow_bin, *args, timeout=60):
    return subprocess.run([stow_bin, *args], capture_output=True, text=True, timeout=timeout)


def usage_of(stow_bin, objdir) -> dict[str, Any]:
    """Opens the directory with another process (`stow-s3 check`): proves the
    MCP server released it, and reports usage."""
    out = stow(stow_bin, "check", "--data-dir", str(objdir))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["usage"]


class RawServer:
    """The binary on raw pipes: newline-delimited JSON-RPC, for tests that
    need the process (exit codes, signals, SIGKILL, stdout hygiene)."""

    def __init__(self, stow_bin, objdir, env_extra=None, **kw):
        self._start([stow_bin, *mcp_args(objdir, **kw)], server_env(env_extra))

    def _start(self, argv, env):
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.stdout_lines: list[bytes] = []
        self.stderr = b""
        self._out_thread = threading.Thread(target=self._pump, daemon=True)
        self._err_thread = threading.Thread(target=self._pump_err, daemon=True)
        self._out_thread.start()
        self._err_thread.start()
        self.next_id = 1

    def _pump(self):
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.stdout_lines.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def _pump_err(self):
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()

    def send(self, msg: dict[str, Any] | bytes) -> None:
        assert self.proc.stdin is not None
        data = msg if isinstance(msg, bytes) else json.dumps(msg).encode() + b"\n"
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any] | None = None) -> int:
        rid = self.next_id
        self.next_id += 1
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return rid

    def response(self, rid: int, timeout=10.0) -> dict[str, Any]:
        while True:
            line = self.lines.get(timeout=timeout)
            if line is None:
                raise EOFError("server closed stdout")
            msg = json.loads(line)
            if msg.get("id") == rid:
                return msg

    def call(self, method, params=None, timeout=10.0):
        return self.response(self.request(method, params), timeout)

    def initialize(self) -> dict[str, Any]:
        r = self.call(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw-e2e", "version": "1"},
            },
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return r["result"]

    def tool(self, name, args, timeout=10.0) -> dict[str, Any]:
        return self.call("tools/call", {"name": name, "arguments": args}, timeout)

    def close_stdin(self):
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def wait(self, timeout=10.0) -> int:
        """Waits for the exit; stdout and stderr are fully read afterwards."""
        rc = self.proc.wait(timeout=timeout)
        self._out_thread.join(timeout)
        self._err_thread.join(timeout)
        return rc

    def kill(self):
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.wait()


# ---------------------------------------------------------------- workspace profile

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


def server_env(extra=None) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", ""), "STOW_LOG": "warn", **(extra or {})}


def ws_argv(registry, ws_id, extra=(), timeout="30s") -> list[str]:
    argv = ["mcp", "--registry-dir", str(registry), "--workspace-id", ws_id]
    if timeout is not None:
        argv += ["--timeout", timeout]
    return argv + [str(a) for a in extra]


class WsSession(Session):
    """Session (structured == text, isError iff error, version 1) plus the
    workspace envelope's shape: only known members, and an error always
    carries all five fields."""

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
    """RawServer (newline-delimited JSON-RPC on raw pipes) launched with
    workspace-profile arguments."""

    def __init__(self, stow_bin, registry, ws_id, extra=(), env_extra=None):  # noqa: D107
        self._start([stow_bin, *ws_argv(registry, ws_id, extra)], server_env(env_extra))

    def ensure_dead(self):
        if self.proc.poll() is None:
            self.kill()


def structured(resp) -> dict[str, Any]:
    assert "result" in resp, resp
    return resp["result"]["structuredContent"]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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
