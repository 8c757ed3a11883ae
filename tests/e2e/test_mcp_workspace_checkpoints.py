"""`stow-s3 mcp` workspace profile: workspace inspection and scope, keyed
checkpoint creation and resolution (replay, request conflicts, limits that
only narrow, cross-checked with the CLI), a result over 256 KiB keeping its
outcome, and crash consistency of a keyed capture under SIGKILL
(spec/mcp.md §11-12, §14 items 23-25)."""

from __future__ import annotations

import collections
import hashlib
import json
import os
import random
import time

import pytest

from mcpkit import (CALL_TIMEOUT, ERAS, WORKSPACE_KEYS, WsRawServer, arun, assert_committed_capture,
                    assert_refused, code, structured, ws_session)
from wskit import (SMALL, checkpoint_dirs, cli_checkpoint, cli_resolve, derived_id, prepare,
                   visible_checkpoints, write_files)


# ---------------------------------------------------------------- create / resolve


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


# ---------------------------------------------------------------- result bound


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


# ---------------------------------------------------------------- SIGKILL during a capture

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
