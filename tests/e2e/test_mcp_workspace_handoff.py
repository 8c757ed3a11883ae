"""`stow-s3 mcp` workspace profile: handoff export and adoption into
another registry with every adopt refusal, and adoption of a bundle the
same server exported (spec/mcp.md §11-12, §14 items 23-25)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil

import pytest

from mcpkit import (ADOPT_TOOL, ERAS, EXPORT_TOOL, REWIND_TOOLS, WORKSPACE_KEYS, WORKSPACE_TOOLS, WS_ID, arun,
                    assert_committed_capture, assert_refused, code, sha, ws_session)
from test_workspace import ok, ws
from test_workspace_transfer import tree
from wskit import checkpoint_dirs, listing, prepare, visible_checkpoints


# ---------------------------------------------------------------- export and adopt


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
