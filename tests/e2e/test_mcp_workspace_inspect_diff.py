"""`stow-s3 mcp` workspace profile: paged checkpoint inspection (entries,
cursors and their refusals, 2,500 files under the 256 KiB result bound)
and paged diffs between checkpoints (spec/mcp.md §11-12)."""

from __future__ import annotations

import pathlib

import pytest

from mcpkit import (ERAS, all_pages, arun, assert_committed_capture, assert_refused, file_entry, strip_mode,
                    ws_session)
from wskit import SMALL, prepare, write_files


# ---------------------------------------------------------------- inspect and paging


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


# ---------------------------------------------------------------- diff


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
