"""Crash consistency: a save is sent, the server is killed with SIGKILL at a
random moment, and a new server resolves the request. The answer must be
`committed` exactly when the object holds the new bytes; otherwise the
receipt is absent (`unknown` + `not_found`) and the old bytes remain."""

import base64
import collections
import json
import random
import time

from mcpkit import RawServer, b64

ITERATIONS = 16


def structured(resp):
    return resp["result"]["structuredContent"]


def current_bytes(srv) -> bytes:
    env = structured(srv.tool("stow_object_read_for_save", {"key": "k"}))
    assert env["outcome"] == "ok" and "error" not in env, env
    return base64.b64decode(env["object"].get("data_base64", ""))


def test_sigkill_at_a_random_moment(stow_bin, workdir):
    objs = workdir / "objs"
    rng = random.Random(1129)
    srv = RawServer(stow_bin, objs)
    srv.initialize()
    srv.tool("stow_object_save", {"key": "k", "data_base64": b64(b"v-init"), "request_key": "init", "replace": True})
    srv.close_stdin()
    assert srv.wait() == 0

    seen = collections.Counter()
    for i in range(ITERATIONS):
        victim = RawServer(stow_bin, objs, create=False)
        victim.initialize()
        before = current_bytes(victim)
        new = f"value-{i}".encode()
        rid = victim.request(
            "tools/call",
            {
                "name": "stow_object_save",
                "arguments": {"key": "k", "data_base64": b64(new), "request_key": f"kill-{i}", "replace": True},
            },
        )
        time.sleep(rng.random() ** 2 * 0.006)  # biased towards early kills
        victim.kill()
        replies = [json.loads(line) for line in victim.stdout_lines]
        reply = next((m for m in replies if m.get("id") == rid), None)

        judge = RawServer(stow_bin, objs, create=False)
        judge.initialize()
        resolved = structured(
            judge.tool("stow_object_resolve_save", {"key": "k", "request_key": f"kill-{i}"})
        )
        now = current_bytes(judge)
        judge.close_stdin()
        assert judge.wait() == 0

        if resolved["outcome"] == "committed":
            assert now == new, (i, resolved, now)
            assert resolved["object"]["size"] == len(new)
            seen["committed"] += 1
        else:
            assert (resolved["outcome"], resolved["error"]["code"]) == ("unknown", "not_found"), resolved
            assert now == before, (i, now, before)
            seen["not_found"] += 1
        if reply is not None:
            seen["replied"] += 1
            assert structured(reply)["outcome"] == "committed"
            assert resolved["outcome"] == "committed", "a committed reply must be durable"
    print(dict(seen))
    assert seen["committed"] + seen["not_found"] == ITERATIONS
