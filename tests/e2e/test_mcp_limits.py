"""Bounds of the object profile (spec/mcp.md §13, §14 items 9, 11, 12):
bodies, arguments, results, admission, tool names and stdio lines."""

import asyncio
import sqlite3

import pytest
from mcp.shared.exceptions import MCPError

from mcpkit import b64, body, code, run, session


def test_bodies_over_64_kib_are_refused(stow_bin, workdir):
    objs = workdir / "objs"

    async def go():
        async with session(stow_bin, objs) as s:
            big = await s.save("big", b"x" * (64 * 1024 + 1), "r1", replace=True)
            assert (big["outcome"], code(big)) == ("unknown", "payload_too_large")
            assert (await s.read("big"))["absent"] is True
            exact = await s.save("max", bytes(range(256)) * 256, "r2", replace=True)
            assert exact["outcome"] == "committed" and exact["object"]["size"] == 65536
            r = await s.read("max")
            assert body(r) == bytes(range(256)) * 256
            await s.save("mid", b"y" * 1000, "r3", replace=True)

    run(go())

    async def narrowed():
        # A stored object over the (narrowed) body limit: refused, no token kept.
        async with session(stow_bin, objs, create=False, extra=["--max-object-bytes", "999", "--max-observations", "1"]) as s:
            caps = (await s.capabilities())["capabilities"]
            assert caps["max_object_bytes"] == 999
            r = await s.read("mid")
            assert (r["outcome"], code(r)) == ("ok", "payload_too_large")
            assert "observation_token" not in r and "object" not in r
            ok = await s.read("small")  # the pool of one is still free
            assert code(ok) is None
            over = await s.save("mid", b"z" * 1000, "r4", replace=True)
            assert code(over) == "payload_too_large"

    run(narrowed())


def test_arguments_over_256_kib_are_refused_before_validation(stow_bin, workdir):
    async def go():
        async with session(stow_bin, workdir / "objs") as s:
            # A 300 KiB property name: refused by size, not by the schema.
            env = await s.call("stow_object_save", {"k" * (300 * 1024): "v"})
            assert (env["outcome"], code(env)) == ("unknown", "payload_too_large")
            env = await s.call("stow_object_read_for_save", {"key": "k" * (300 * 1024)})
            assert (env["outcome"], code(env)) == ("ok", "payload_too_large")
            # 90 KiB of newlines: small enough to admit, but the validation
            # message (escaped twice on the wire) passes 256 KiB.
            env = await s.call("stow_object_save", {"\n" * (90 * 1024): "v"})
            assert (env["outcome"], code(env)) == ("unknown", "response_too_large")
            assert env["available"] is False and env["replayed"] is False
            # A tool name over 128 bytes.
            env = await s.call("x" * 129, {})
            assert (env["outcome"], code(env)) == ("unknown", "payload_too_large")
            with pytest.raises(MCPError):
                await s.client.call_tool("no_such_tool", {})

    run(go())


def test_over_long_line_is_refused_and_the_session_continues(stow_bin, workdir):
    async def go():
        async with session(stow_bin, workdir / "objs") as s:
            with pytest.raises(MCPError) as err:
                await s.client.call_tool("stow_object_read_for_save", {"key": "k", "pad": "p" * (1 << 20)})
            assert "line limit" in str(err.value)
            r = await s.save("k", b"still here", "r", replace=True)
            assert r["outcome"] == "committed"

    run(go())


def test_nine_concurrent_calls(stow_bin, workdir):
    objs = workdir / "objs"

    async def go():
        async with session(stow_bin, objs) as s:
            await s.save("warm", b"x", "warm", replace=True)
            # Hold the store's database write lock from outside so eight
            # saves stay in flight (the store waits for the lock).
            db = sqlite3.connect(objs / "meta.db", isolation_level=None, timeout=5)
            db.execute("BEGIN IMMEDIATE")
            try:
                saves = [
                    asyncio.create_task(s.save(f"k{i}", b"v", f"r{i}", replace=True)) for i in range(8)
                ]
                await asyncio.sleep(1.0)
                ninth = await s.capabilities()
                assert (ninth["outcome"], code(ninth)) == ("ok", "busy")
                busy_save = await s.save("k9", b"v", "r9", replace=True)
                assert (busy_save["outcome"], code(busy_save)) == ("unknown", "busy")
                # Other methods are still answered.
                assert len((await s.client.list_tools()).tools) == 5
                assert not any(t.done() for t in saves)
            finally:
                db.execute("COMMIT")
                db.close()
            results = await asyncio.gather(*saves)
            assert all(r["outcome"] == "committed" for r in results)
            assert code(await s.capabilities()) is None
            assert code(await s.resolve("k9", "r9")) == "not_found"

    run(go())


def test_results_carry_structured_and_text_forms(stow_bin, workdir):
    async def go():
        async with session(stow_bin, workdir / "objs") as s:
            data = bytes(range(256)) * 256
            await s.save("bin", data, "r", replace=True)
            r = await s.raw("stow_object_read_for_save", {"key": "bin"})
            assert r.structured_content["object"]["data_base64"] == b64(data)
            assert r.is_error is False

    run(go())
