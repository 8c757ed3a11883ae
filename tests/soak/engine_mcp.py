"""Engine `mcp`: `stow-s3 mcp` (object profile) driven by the official MCP
Python SDK — four concurrent tasks making keyed saves (unconditional,
guarded by an observation, create-only) and replaying acknowledged ones —
killed with SIGKILL at a random moment. Then `stow-s3 check`, and a new
server resolves every request key of the cycle: an acknowledged save
resolves committed with the object it answered; one in flight resolves
committed (and the object holds its bytes) or not_found (and the object is
as before); every key holds exactly the bytes the outcomes say; usage and
the retained receipts are what was committed."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time

from soakkit import ABSENT, E2E, check_store, clean_env, kill_delay, run, value_of

sys.path.insert(0, str(E2E))
import mcpkit  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

BUCKET = "files"
CALL_TIMEOUT = 20.0
RETIRE_EVERY = 10


class Save:
    def __init__(self, key, rk, data, kind, cycle):
        self.key, self.rk, self.kind, self.cycle = key, rk, kind, cycle
        self.value = value_of(data)
        self.reply = None  # the acknowledged object
        self.outcome = None  # after resolution: True (committed) / False


class McpEngine:
    name = "mcp"
    TASKS = 4

    def __init__(self, ctx, bin_, workdir):
        self.ctx, self.bin, self.dir = ctx, bin_, workdir
        self.objs = workdir / "objs"
        self.state = {}  # key -> Value / ABSENT, as last verified
        self.pending: list[Save] = []  # saves of the last cycle, not yet resolved
        self.retained: dict[str, Save] = {}  # committed since the last retirement
        self.errlog = open(workdir / "mcp-stderr.log", "a")

    def params(self):
        pidfile = self.dir / "mcp.pid"
        args = ["-c", f'echo $$ > "{pidfile}"; exec "$0" "$@"', self.bin,
                *mcpkit.mcp_args(self.objs, BUCKET, extra=["--max-objects", "100000"])]
        env = {"PATH": os.environ.get("PATH", ""), "STOW_LOG": clean_env()["STOW_LOG"]}
        return StdioServerParameters(command="sh", args=args, env=env), pidfile

    async def call(self, coro):
        return await asyncio.wait_for(coro, CALL_TIMEOUT)

    # ---------------------------------------------------------------- cycle

    def setup(self):
        pass

    def cycle(self):
        ctx = self.ctx
        asyncio.run(self.victim())
        self.after_kill(ctx.rng("after-kill"))
        usage = check_store(ctx, self.bin, self.objs)
        self.usage = usage
        if (ctx.cycle + 1) % RETIRE_EVERY == 0:
            asyncio.run(self.judge_only())
            self.retire()

    def finish(self):
        asyncio.run(self.judge_only())
        self.retire()

    def after_kill(self, rng):
        """Called once the killed server has ended, before anything is
        judged (the power-loss driver cuts the power here)."""

    async def judge_only(self):
        params, _ = self.params()
        async with Client(stdio_client(params, errlog=self.errlog), mode="legacy") as c:
            await self.verify(mcpkit.Session(c))

    async def victim(self):
        ctx = self.ctx
        rng = ctx.rng("main")
        params, pidfile = self.params()
        pidfile.unlink(missing_ok=True)
        killer = None
        started = time.monotonic()
        saves: list[Save] = []
        try:
            async with Client(stdio_client(params, errlog=self.errlog), mode="legacy") as c:
                s = mcpkit.Session(c)
                pid = int(pidfile.read_text())
                await self.verify(s)
                delay = kill_delay(rng, 0.25)
                killer = threading.Timer(delay, _sigkill, (pid,))
                killer.start()
                results = await asyncio.gather(*(self.task(s, n, saves) for n in range(self.TASKS)),
                                               return_exceptions=True)
                for r in results:
                    if isinstance(r, BaseException) and not isinstance(r, _Stopped):
                        raise r
        except Exception as e:
            if not _is_disconnect(e):
                raise _unwrap(e) from None
        finally:
            if killer is not None:
                killer.join()
        if time.monotonic() - started > 60:
            ctx.fail("the MCP session did not end after SIGKILL", expected="< 60 s",
                     found=f"{time.monotonic() - started:.0f} s")
        ctx.stats["kills"] += 1
        self.pending = saves
        ctx.stats["acked_saves"] += sum(1 for sv in saves if sv.reply is not None)
        ctx.stats["in_flight_at_kill"] += sum(1 for sv in saves if sv.reply is None)

    async def task(self, s, n, saves):
        ctx = self.ctx
        rng = ctx.rng("task", n)
        own = [f"t{n}/k{j}" for j in range(5)]
        mine = {k: self.state.get(k, ABSENT) for k in own}
        acked = []
        i = 0
        while True:
            i += 1
            key = rng.choice(own)
            kind = rng.choices(["replace", "guarded", "create", "replay"], [40, 35, 15, 10])[0]
            replayable = [sv for sv in acked if sv.kind == "replace"]
            if kind == "replay" and replayable:
                sv = rng.choice(replayable)
                env = await self._call(s.save(sv.key, sv.data, sv.rk, replace=True))
                if env is None:
                    raise _Stopped()
                ctx.check(env.get("outcome") == "committed" and env.get("replayed") is True
                          and env.get("object") == sv.reply, "a replayed save did not answer its receipt",
                          key=(sv.key, sv.rk), expected=sv.reply, found=env)
                continue
            if kind == "create":
                fresh = [k for k in own if mine[k] is ABSENT]
                if not fresh:
                    kind = "guarded"
                else:
                    key = rng.choice(fresh)
            size = rng.choice([0, rng.randint(1, 200), rng.randint(200, 60_000)])
            head = f"c{ctx.cycle}/t{n}/{i}|".encode()
            data = head + rng.randbytes(size)
            sv = Save(key, f"c{ctx.cycle}-t{n}-{i}", data, kind, ctx.cycle)
            sv.data = data
            token = None
            if kind in ("guarded", "create"):
                env = await self._call(s.read(key))
                if env is None:
                    raise _Stopped()
                ctx.check(env.get("outcome") == "ok", "read_for_save failed while running", key=key,
                          expected="ok", found=env)
                got = ABSENT if env.get("absent") else value_of(mcpkit.body(env), etag=env["object"]["etag"].strip('"'))
                ctx.check(got == mine[key], "a read while running disagrees with the acknowledged state", key=key,
                          expected=mine[key], found=got)
                token = env["observation_token"]
            saves.append(sv)
            env = await self._call(s.save(key, data, sv.rk, token=token, replace=True if token is None else None))
            if env is None:
                raise _Stopped()
            if env.get("outcome") != "committed":
                ctx.fail("a valid keyed save was not committed", key=(key, sv.rk), expected="committed", found=env)
            obj = env["object"]
            ctx.check(obj["etag"].strip('"') == sv.value.etag and obj["size"] == sv.value.size,
                      "a save answered a wrong ETag or size", key=(key, sv.rk), expected=sv.value, found=obj)
            sv.reply = obj
            mine[key] = sv.value
            acked.append(sv)

    async def _call(self, coro):
        try:
            return await self.call(coro)
        except TimeoutError:
            self.ctx.fail("an MCP call hung", expected=f"an answer or a closed connection within {CALL_TIMEOUT} s",
                          found="no answer")
        except Exception as e:
            if _is_disconnect(e):
                return None
            raise

    # ---------------------------------------------------------------- after the restart

    async def verify(self, s):
        """Resolves every save of the last cycle and reads every key."""
        ctx = self.ctx
        last = {}
        for sv in self.pending:
            env = await self.call(s.resolve(sv.key, sv.rk))
            if sv.reply is not None:
                if env.get("outcome") != "committed" or env.get("object") != sv.reply:
                    ctx.stats["failures"] += 1
                    ctx.fail("an acknowledged save does not resolve committed with its object",
                             key=(sv.key, sv.rk), expected=sv.reply, found=env)
                sv.outcome = True
            elif env.get("outcome") == "committed":
                obj = env["object"]
                ctx.check(obj["etag"].strip('"') == sv.value.etag and obj["size"] == sv.value.size,
                          "an unacknowledged save resolves committed with another object",
                          key=(sv.key, sv.rk), expected=sv.value, found=obj)
                sv.outcome = True
                ctx.stats["in_flight_resolved_committed"] += 1
            else:
                ctx.check(env.get("outcome") == "unknown" and (env.get("error") or {}).get("code") == "not_found",
                          "an unacknowledged save resolves to neither committed nor not_found",
                          key=(sv.key, sv.rk), expected="committed, or unknown/not_found", found=env)
                sv.outcome = False
                ctx.stats["in_flight_resolved_not_found"] += 1
            if sv.outcome:
                last[sv.key] = sv.value
                self.retained[sv.rk] = sv
        # Receipts outlive restarts: a few older ones still resolve as answered.
        older = [sv for sv in self.retained.values() if sv.cycle < ctx.cycle - 1 and sv.reply is not None]
        for sv in ctx.rng("older").sample(older, min(3, len(older))):
            env = await self.call(s.resolve(sv.key, sv.rk))
            ctx.check(env.get("outcome") == "committed" and env.get("object") == sv.reply,
                      "an older acknowledged save no longer resolves", key=(sv.key, sv.rk),
                      expected=sv.reply, found=env)
        expected = dict(self.state)
        expected.update(last)
        keys = sorted(set(expected) | {f"t{n}/k{j}" for n in range(self.TASKS) for j in range(5)})
        found = {}
        for key in keys:
            env = await self.call(s.read(key))
            ctx.check(env.get("outcome") == "ok", "read_for_save failed after the restart", key=key,
                      expected="ok", found=env)
            got = ABSENT if env.get("absent") else value_of(mcpkit.body(env), etag=env["object"]["etag"].strip('"'))
            want = expected.get(key, ABSENT)
            if got != want:
                ctx.stats["failures"] += 1
                what = ("an acknowledged save is lost" if got is ABSENT else
                        "the object holds bytes no committed save wrote (torn, lost or resurrected)")
                ctx.fail(what, key=key, expected=want, found=got)
            await self.call(s.release(env["observation_token"]))
            found[key] = got
        if self.pending:
            present = [v for v in found.values() if v is not ABSENT]
            want_usage = {"bytes": sum(v.size for v in present), "objects": len(present)}
            ctx.check({k: self.usage.get(k) for k in want_usage} == want_usage,
                      "usage counters differ from what is stored", key="usage", expected=want_usage,
                      found=self.usage)
            ctx.stats["acked_verified"] += sum(1 for sv in self.pending if sv.reply is not None)
        self.state = found
        self.pending = []

    def retire(self):
        """Between sessions: the retained receipts are exactly the committed
        saves since the last retirement; then all are retired."""
        ctx = self.ctx
        held, after = {}, None
        while True:
            args = ["receipts", "list", "--data-dir", self.objs, "--limit", "1000"]
            if after:
                args += ["--after", after]
            rc, doc, err = run(self.bin, *args)
            ctx.check(rc == 0, "receipts list failed", key=str(self.objs), expected="rc 0", found=f"{rc} {err}")
            for r in doc["receipts"]:
                held[r["request_key"]] = r
            after = doc.get("next_after")
            if not after:
                break
        want = set(self.retained)
        ctx.check(set(held) == want, "retained receipts differ from the committed saves",
                  key="receipts", expected=sorted(want - set(held))[:10],
                  found=f"extra={sorted(set(held) - want)[:10]} missing={sorted(want - set(held))[:10]}")
        for rk, r in held.items():
            sv = self.retained[rk]
            ctx.check((r["key"], r["etag"].strip('"'), r["size"]) == (sv.key, sv.value.etag, sv.value.size),
                      "a receipt names another object", key=rk, expected=sv.value, found=r)
        rc, doc, err = run(self.bin, "receipts", "retire", "--data-dir", self.objs, "--all")
        ctx.check(rc == 0, "receipts retire failed", key=str(self.objs), expected="rc 0", found=f"{rc} {err}")
        ctx.stats["receipts_checked"] += len(held)
        self.retained = {}

    def teardown(self):
        self.errlog.close()


class _Stopped(Exception):
    pass


def _sigkill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _unwrap(e: BaseException) -> BaseException:
    """A failure raised inside the SDK's task groups, unwrapped."""
    while isinstance(e, BaseExceptionGroup):
        inner = [x for x in e.exceptions if not _is_disconnect(x)]
        if not inner:
            break
        e = inner[0]
    return e


def _is_disconnect(e: BaseException) -> bool:
    if isinstance(e, BaseExceptionGroup):
        return all(_is_disconnect(x) for x in e.exceptions)
    text = f"{type(e).__name__} {e}"
    return any(s in text for s in ("Connection closed", "ClosedResourceError", "BrokenResourceError",
                                   "EndOfStream", "BrokenPipe", "ConnectionReset"))

