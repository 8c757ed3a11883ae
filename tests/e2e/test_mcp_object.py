"""`stow-s3 mcp` object profile through the official Python MCP client:
tool contract, guarded saves, replay, resolution across restarts, read-only
relaunch, observation tokens (spec/mcp.md §14 items 1-8, 15-17)."""

import asyncio
import json
import signal

import pytest

from mcpkit import (
    BROWSER_TOOLS,
    CORE_TOOLS,
    ERAS,
    SEED_000,
    RawServer,
    body,
    code,
    run,
    session,
    usage_of,
)


def seed_tools():
    """Name -> (description, input schema, output schema), parsed from seed 000."""
    text = SEED_000.read_text()
    dec = json.JSONDecoder()
    lines = text.split("\n")
    tools = {}
    for i, line in enumerate(lines):
        if line.startswith("stow_") and " " not in line and i + 4 < len(lines) and lines[i + 4] == "Input":
            rest = "\n".join(lines[i + 6 :])
            inp, end = dec.raw_decode(rest)
            rest = rest[end:].lstrip()
            assert rest.startswith("Result")
            out, _ = dec.raw_decode(rest[len("Result") :].lstrip())
            tools[line] = (lines[i + 2], inp, out)
    return tools


@pytest.mark.skipif(not SEED_000.exists(), reason="../shared/seeds is not beside the repository")
@pytest.mark.parametrize("era", ERAS)
def test_tools_are_the_seeds_verbatim(stow_bin, workdir, era):
    seed = seed_tools()

    async def go():
        async with session(stow_bin, workdir / "objs", era) as s:
            core = (await s.client.list_tools()).tools
        async with session(stow_bin, workdir / "objs", era, browser=True) as s:
            full = (await s.client.list_tools()).tools
        return core, full

    core, full = run(go())
    assert [t.name for t in core] == CORE_TOOLS
    assert [t.name for t in full] == CORE_TOOLS + BROWSER_TOOLS
    for t in full:
        desc, inp, out = seed[t.name]
        assert t.description == desc
        assert t.input_schema == inp, t.name
        assert t.output_schema == out, t.name


def test_every_tool_refuses_unknown_properties(stow_bin, workdir):
    async def go():
        async with session(stow_bin, workdir / "objs", browser=True) as s:
            base = {
                "stow_object_read_for_save": {"key": "k"},
                "stow_object_save": {"key": "k", "data_base64": "", "request_key": "r", "replace": True},
                "stow_object_resolve_save": {"key": "k", "request_key": "r"},
                "stow_object_release_observation": {"observation_token": "t"},
                "stow_object_capabilities": {},
                "stow_browser": {},
                "stow_object_mentions": {"query": ""},
            }
            for name, args in base.items():
                r = await s.raw(name, {**args, "surprise": 1})
                assert r.is_error and r.structured_content is None, name
                assert "validating \"arguments\"" in r.content[0].text
            for extra in ({"bucket": "other"}, {"path": "/etc"}, {"if_match": "*"}):
                r = await s.raw("stow_object_save", {**base["stow_object_save"], **extra})
                assert r.is_error and r.structured_content is None
            # Nothing was saved by any refused call.
            assert (await s.read("k"))["absent"] is True

    run(go())


def test_capabilities(stow_bin, workdir):
    async def go():
        async with session(stow_bin, workdir / "objs") as s:
            return await s.capabilities()

    env = run(go())
    assert env["outcome"] == "ok" and env["available"] is True
    caps = env["capabilities"]
    assert caps == {
        "backend": "filesystem",
        "persistent": True,
        "guarded_saves": True,
        "durable_save_requests": True,
        "read_only": False,
        "max_object_bytes": 65536,
        "max_observations": 256,
        "observation_ttl_seconds": 900,
        "max_response_bytes": 262144,
        "max_tool_arguments_bytes": 262144,
        "max_concurrent_calls": 8,
    }
    assert str(workdir) not in json.dumps(env)


@pytest.mark.parametrize("era", ERAS)
def test_guarded_save_replay_and_conflicts(stow_bin, workdir, era):
    async def go():
        async with session(stow_bin, workdir / "objs", era) as s:
            r = await s.read("notes/a.txt")
            assert r["outcome"] == "ok" and r["available"] and r["absent"]
            assert "object" not in r and len(r["observation_token"]) == 32
            tok = r["observation_token"]

            first = await s.save(
                "notes/a.txt", b"hello v1", "req-1", token=tok, content_type="text/plain", metadata={"owner": "a"}
            )
            assert first["outcome"] == "committed" and first["available"] and not first["replayed"]
            assert first["object"]["size"] == 8 and first["object"]["metadata"] == {"owner": "a"}
            assert "data_base64" not in first["object"]

            again = await s.save(
                "notes/a.txt", b"hello v1", "req-1", token=tok, content_type="text/plain", metadata={"owner": "a"}
            )
            assert again["outcome"] == "committed" and again["replayed"] is True
            assert again["object"]["last_modified"] == first["object"]["last_modified"]

            r = await s.read("notes/a.txt")
            assert not r["absent"] and body(r) == b"hello v1"
            assert r["object"]["content_type"] == "text/plain"

            newer = await s.save("notes/a.txt", b"hello v2", "req-2", token=r["observation_token"])
            assert newer["outcome"] == "committed"

            resolved = await s.resolve("notes/a.txt", "req-1")
            assert resolved["outcome"] == "committed" and resolved["replayed"] and resolved["available"]
            assert resolved["object"]["metadata"] == {"owner": "a"}
            assert resolved["object"]["last_modified"] == first["object"]["last_modified"]

            changed = await s.save("notes/a.txt", b"other!", "req-1", token=tok)
            assert (changed["outcome"], code(changed)) == ("unknown", "request_conflict")
            stale = await s.save("notes/a.txt", b"late", "req-3", token=tok)
            assert (stale["outcome"], code(stale)) == ("not_committed", "conflict")
            assert body(await s.read("notes/a.txt")) == b"hello v2"

    run(go())


def test_tokens_go_stale_on_any_write(stow_bin, workdir):
    async def go():
        async with session(stow_bin, workdir / "objs") as s:
            await s.save("k", b"A", "r1", replace=True, metadata={"v": "1"})
            # Same bytes, metadata changed.
            tok = (await s.read("k"))["observation_token"]
            await s.save("k", b"A", "r2", replace=True, metadata={"v": "2"})
            stale = await s.save("k", b"X", "r3", token=tok)
            assert (stale["outcome"], code(stale)) == ("not_committed", "conflict")
            # A -> B -> A.
            tok = (await s.read("k"))["observation_token"]
            await s.save("k", b"B", "r4", replace=True)
            await s.save("k", b"A", "r5", replace=True, metadata={"v": "2"})
            stale = await s.save("k", b"X", "r6", token=tok)
            assert (stale["outcome"], code(stale)) == ("not_committed", "conflict")
            r = await s.read("k")
            assert body(r) == b"A" and r["object"]["metadata"] == {"v": "2"}
            # The refused saves left no receipt.
            assert code(await s.resolve("k", "r3")) == "not_found"

    run(go())


def test_input_refusals_are_unknown(stow_bin, workdir):
    async def go():
        async with session(stow_bin, workdir / "objs") as s:
            tok = (await s.read("k"))["observation_token"]
            both = await s.save("k", b"x", "r", token=tok, replace=True)
            neither = await s.save("k", b"x", "r")
            replace_false = await s.save("k", b"x", "r", replace=False)
            bad = await s.call("stow_object_save", {"key": "k", "data_base64": "%%%", "request_key": "r", "replace": True})
            unpadded = await s.call(
                "stow_object_save", {"key": "k", "data_base64": "aGk", "request_key": "r", "replace": True}
            )
            empty_rk = await s.save("k", b"x", "", token=tok)
            bad_key = await s.save("", b"x", "r", replace=True)
            for env in (both, neither, replace_false, bad, unpadded, empty_rk, bad_key):
                assert (env["outcome"], code(env)) == ("unknown", "invalid"), env
            fabricated = await s.save("k", b"x", "r", token="00" * 16)
            assert (fabricated["outcome"], code(fabricated)) == ("unknown", "invalid_observation")
            assert (await s.read("k"))["absent"] is True

    run(go())


def test_observation_pool_of_one(stow_bin, workdir):
    async def go():
        async with session(stow_bin, workdir / "objs", extra=["--max-observations", "1"]) as s:
            caps = (await s.capabilities())["capabilities"]
            assert caps["max_observations"] == 1
            tok = (await s.read("a"))["observation_token"]
            full = await s.read("b")
            assert (full["outcome"], code(full)) == ("ok", "observation_full")
            assert "observation_token" not in full
            other = await s.save("b", b"x", "r1", token=tok)
            assert (other["outcome"], code(other)) == ("unknown", "invalid_observation")
            for _ in range(2):
                rel = await s.release(tok)
                assert rel["outcome"] == "ok" and rel["released"] is True and rel["available"]
            gone = await s.save("a", b"x", "r2", token=tok)
            assert code(gone) == "invalid_observation"
            assert code(await s.release("")) == "invalid"
            fresh = await s.read("b")
            assert code(fresh) is None

    run(go())


def test_concurrent_saves(stow_bin, workdir):
    async def go():
        async with session(stow_bin, workdir / "objs") as s:
            a = (await s.read("a"))["observation_token"]
            b = (await s.read("b"))["observation_token"]
            ra, rb = await asyncio.gather(s.save("a", b"1", "ra", token=a), s.save("b", b"2", "rb", token=b))
            assert ra["outcome"] == rb["outcome"] == "committed"
            tok = (await s.read("same"))["observation_token"]
            results = await asyncio.gather(
                s.save("same", b"first", "s1", token=tok), s.save("same", b"second", "s2", token=tok)
            )
            outcomes = sorted((r["outcome"], code(r)) for r in results)
            assert outcomes == [("committed", None), ("not_committed", "conflict")]

    run(go())


@pytest.mark.parametrize("era", ERAS)
def test_restart_resolves_from_the_receipt(stow_bin, workdir, era):
    objs = workdir / "objs"

    async def first_life():
        async with session(stow_bin, objs, era) as s:
            tok = (await s.read("doc.txt"))["observation_token"]
            # The reply of this save is "lost": the caller only kept its
            # request key, and closes the connection.
            await s.save("doc.txt", b"8 bytes!", "lost-reply", token=tok, content_type="text/plain", metadata={"m": "1"})
            await s.save("other", b"x", "tokenless", replace=True)
            return tok

    tok = run(first_life())

    async def second_life():
        # Reopen without --create-bucket.
        async with session(stow_bin, objs, era, create=False) as s:
            old = await s.save("doc.txt", b"new", "after", token=tok)
            assert (old["outcome"], code(old)) == ("unknown", "invalid_observation")
            r = await s.resolve("doc.txt", "lost-reply")
            assert r["outcome"] == "committed" and r["replayed"] and r["available"]
            assert r["object"]["size"] == 8 and r["object"]["content_type"] == "text/plain"
            assert r["object"]["metadata"] == {"m": "1"}
            assert (await s.resolve("other", "tokenless"))["outcome"] == "committed"
            missing = await s.resolve("doc.txt", "never-sent")
            assert (missing["outcome"], code(missing)) == ("unknown", "not_found")
            assert missing["available"] is False
            wrong_key = await s.resolve("other", "lost-reply")
            assert (wrong_key["outcome"], code(wrong_key)) == ("unknown", "request_conflict")
            # A tokenless retry of a replace-request replays after restart.
            again = await s.save("other", b"x", "tokenless", replace=True)
            assert again["outcome"] == "committed" and again["replayed"]
            return r

    r1 = run(second_life())

    async def third_life():
        async with session(stow_bin, objs, era, create=False) as s:
            r = await s.resolve("doc.txt", "lost-reply")
            assert r == r1, "the receipt is unchanged"

    run(third_life())


def test_read_only_relaunch(stow_bin, workdir):
    objs = workdir / "objs"

    async def seed():
        async with session(stow_bin, objs) as s:
            await s.save("k", b"kept", "r1", replace=True)

    run(seed())

    async def ro():
        async with session(stow_bin, objs, create=False, read_only=True) as s:
            r = await s.read("k")
            assert r["outcome"] == "ok" and body(r) == b"kept"
            denied = await s.save("k", b"x", "r2", token=r["observation_token"])
            assert (denied["outcome"], code(denied)) == ("unknown", "denied")
            assert (await s.resolve("k", "r1"))["outcome"] == "committed"
            assert (await s.capabilities())["capabilities"]["read_only"] is True

    run(ro())


def test_eof_exits_zero_and_releases_the_directory(stow_bin, workdir):
    objs = workdir / "objs"
    srv = RawServer(stow_bin, objs)
    srv.initialize()
    r = srv.tool("stow_object_save", {"key": "k", "data_base64": "aGVsbG8=", "request_key": "r", "replace": True})
    assert r["result"]["structuredContent"]["outcome"] == "committed"
    srv.close_stdin()
    assert srv.wait() == 0
    assert usage_of(stow_bin, objs) == {"bytes": 5, "objects": 1}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signals_close_cleanly(stow_bin, workdir, sig):
    objs = workdir / "objs"
    srv = RawServer(stow_bin, objs)
    srv.initialize()
    srv.tool("stow_object_save", {"key": "k", "data_base64": "", "request_key": "r", "replace": True})
    srv.proc.send_signal(sig)
    assert srv.wait() == 0
    assert usage_of(stow_bin, objs) == {"bytes": 0, "objects": 1}


def test_two_servers_on_one_directory(stow_bin, workdir):
    objs = workdir / "objs"
    first = RawServer(stow_bin, objs)
    first.initialize()
    second = RawServer(stow_bin, objs)
    assert second.wait() == 1
    assert b"in use" in second.stderr or b"already" in second.stderr, second.stderr
    assert second.stdout_lines == []
    first.close_stdin()
    assert first.wait() == 0
    third = RawServer(stow_bin, objs, create=False)
    third.initialize()
    third.close_stdin()
    assert third.wait() == 0


def test_stdout_carries_json_rpc_only(stow_bin, workdir):
    srv = RawServer(stow_bin, workdir / "objs", env_extra={"STOW_LOG": "trace"}, browser=True)
    srv.initialize()
    srv.call("tools/list")
    srv.tool("stow_object_read_for_save", {"key": "k"})
    srv.tool("stow_browser", {"prefix": ""})
    srv.close_stdin()
    assert srv.wait() == 0
    assert srv.stdout_lines
    for line in srv.stdout_lines:
        assert json.loads(line)["jsonrpc"] == "2.0"
    assert srv.stderr, "trace logs go to stderr"


def test_discover_probe_mode(stow_bin, workdir):
    async def go():
        async with session(stow_bin, workdir / "objs", "auto") as s:
            assert s.client.protocol_version == "2026-07-28"
            return await s.capabilities()

    assert run(go())["outcome"] == "ok"
