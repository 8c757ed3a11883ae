"""Helpers for the MCP end-to-end tests: launch `stow-s3 mcp` under the
official Python MCP client (both protocol eras), check the object envelope
invariants on every result, and drive raw JSON-RPC where a test needs the
process itself (exit codes, signals, SIGKILL, stdout hygiene)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import pathlib
import queue
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
        env = {"PATH": os.environ.get("PATH", ""), "STOW_LOG": "warn", **(env_extra or {})}
        self.proc = subprocess.Popen(
            [stow_bin, *mcp_args(objdir, **kw)],
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
