"""`workspace status` of attached workspaces: paging with a cursor, and the
kinds of change it tells apart (issue 26)."""

import os
import stat

from test_workspace_attach import env, ok, refused  # noqa: F401  (env is a fixture)


def test_status_pages_with_a_cursor(stow_bin, workdir, env):  # noqa: F811
    root = workdir / "tree"
    (root / "d").mkdir(parents=True)
    for i in range(12):
        (root / "d" / f"f{i:02}.txt").write_text(str(i))
    os.symlink("f00.txt", root / "d" / "l05")
    ok(stow_bin, "attach", "--root", root, env=env)
    cp = ok(stow_bin, "checkpoint", cwd=root, env=env)
    for i in range(0, 12, 2):
        (root / "d" / f"f{i:02}.txt").write_text("edited")
    (root / "d" / "f03.txt").unlink()
    os.symlink("f01.txt", root / "d" / "f03.txt")  # a file replaced by a link, one path
    os.unlink(root / "d" / "l05")
    for i in range(5):
        (root / "d" / f"n{i}.txt").write_text("new")
    whole = ok(stow_bin, "status", cwd=root, env=env)
    assert "next_cursor" not in whole
    entries = lambda doc: [("file", c["path"], c["kind"]) for c in doc["changes"]] + \
        [("link", l["path"], l["kind"]) for l in doc.get("links", [])]
    want = sorted(entries(whole), key=lambda e: (e[1], e[0] == "link"))
    assert len(want) == 6 + 1 + 1 + 1 + 5
    got, cursor, pages = [], None, 0
    while True:
        args = ["status", "--limit", "4"] + (["--cursor", cursor] if cursor else [])
        doc = ok(stow_bin, *args, cwd=root, env=env)
        pages += 1
        page = sorted(entries(doc), key=lambda e: (e[1], e[0] == "link"))
        assert 1 <= len(page) <= 4
        # Counts and clean are the whole status's on every page.
        assert (doc["added"], doc["changed"], doc["deleted"], doc["clean"]) == \
            (whole["added"], whole["changed"], whole["deleted"], False)
        got += page
        cursor = doc.get("next_cursor")
        if not cursor:
            break
    assert got == want and pages == 4
    # A cursor is bound to its workspace and checkpoint; limits are bounded.
    first = ok(stow_bin, "status", "--limit", "4", cwd=root, env=env)["next_cursor"]
    ok(stow_bin, "checkpoint", cwd=root, env=env)
    refused(stow_bin, "status", "--cursor", first, code="invalid_request", cwd=root, env=env)
    refused(stow_bin, "status", "--against", cp["checkpoint_id"], "--cursor", "zz", code="invalid_request",
            cwd=root, env=env)
    for bad in ("0", "10001"):
        refused(stow_bin, "status", "--limit", bad, code="invalid_request", cwd=root, env=env)
    again = ok(stow_bin, "status", "--against", cp["checkpoint_id"], "--limit", "4", "--cursor", first,
               cwd=root, env=env)
    assert sorted(entries(again), key=lambda e: (e[1], e[0] == "link")) == want[4:8]


# Found by this suite and fixed: seeded totals without .git, links in the
# tree, workspaces of other registries and teams, a .stow of the user's.


def test_status_kinds_tell_content_mode_and_type_changes_apart(stow_bin, workdir, env):  # noqa: F811
    root = workdir / "kinds"
    root.mkdir()
    for name in ("edited", "chmodded", "removed", "retyped", "same"):
        (root / name).write_text(f"{name}\n")
    ok(stow_bin, "attach", "--root", root, env=env)
    cp = ok(stow_bin, "checkpoint", env=env, cwd=root)["checkpoint_id"]
    (root / "edited").write_text("other bytes\n")
    (root / "chmodded").chmod(0o755)
    (root / "removed").unlink()
    (root / "retyped").unlink()
    (root / "retyped").symlink_to("same")
    (root / "new").write_text("new\n")
    st = ok(stow_bin, "status", env=env, cwd=root)
    assert [(c["path"], c["kind"]) for c in st["changes"]] == [
        ("chmodded", "mode_changed"), ("edited", "modified"), ("new", "added"),
        ("removed", "deleted"), ("retyped", "type_changed")], st
    retyped = st["changes"][-1]
    assert retyped["from"]["path"] == "retyped" and "to" not in retyped
    assert [(l["path"], l["kind"], l["to"]) for l in st["links"]] == [("retyped", "added", "same")]
    # Counted once each: the type change as changed, not as a deleted file
    # and an added link.
    assert (st["added"], st["changed"], st["deleted"], st["clean"]) == (1, 3, 1, False)
    # A dry run lists the same entries; nothing changes.
    plan = ok(stow_bin, "rewind", "--to", cp, "--dry-run", env=env, cwd=root)
    assert [(c["path"], c["kind"]) for c in plan["changes"]] == \
        [(c["path"], c["kind"]) for c in st["changes"]]
    assert (root / "retyped").is_symlink() and (root / "edited").read_text() == "other bytes\n"
    # The rewind puts every kind back.
    ok(stow_bin, "rewind", "--to", cp, env=env, cwd=root)
    back = ok(stow_bin, "status", "--against", cp, env=env, cwd=root)
    assert back["clean"] and back["changes"] == [], back
    assert not (root / "retyped").is_symlink() and (root / "retyped").read_text() == "retyped\n"
    assert stat.S_IMODE((root / "chmodded").stat().st_mode) == 0o644


def test_a_name_that_is_not_utf8_is_listed_as_skipped_not_a_failure(stow_bin, workdir, env):  # noqa: F811
    """A checkpoint holds UTF-8 paths only. A file or directory whose name
    is not UTF-8 is skipped, with the reason and an escaped name, and every
    other path is captured, compared and rewound as usual; before, each
    capture and status of such a tree failed with a retryable
    workspace_changed for ever."""
    root = workdir / "tree"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.txt").write_text("a")
    odd = os.path.join(os.fsencode(root / "src"), b"bad\xffname")
    with open(odd, "wb") as f:
        f.write(b"odd")
    os.mkdir(os.path.join(os.fsencode(root), b"dir\xfe"))
    with open(os.path.join(os.fsencode(root), b"dir\xfe", b"inner.txt"), "wb") as f:
        f.write(b"inner")
    ok(stow_bin, "attach", "--root", root, env=env)
    cp = ok(stow_bin, "checkpoint", cwd=root, env=env)
    assert cp["files"] == 1, cp
    skipped = {s["path"]: s["reason"] for s in cp.get("skipped", [])}
    assert skipped == {
        "src/bad\\xFFname": "a name that is not UTF-8 is not captured",
        "dir\\xFE": "a name that is not UTF-8 is not captured",
    }, cp
    assert ok(stow_bin, "status", cwd=root, env=env)["clean"] is True
    (root / "src" / "a.txt").write_text("edited")
    with open(odd, "wb") as f:
        f.write(b"changed, never captured")
    st = ok(stow_bin, "status", cwd=root, env=env)
    assert [(c["path"], c["kind"]) for c in st["changes"]] == [("src/a.txt", "modified")]
    done = ok(stow_bin, "rewind", "--to", cp["checkpoint_id"], cwd=root, env=env)
    assert done["written"] == 1 and not done["conflicts"], done
    assert (root / "src" / "a.txt").read_text() == "a"
    with open(odd, "rb") as f:
        assert f.read() == b"changed, never captured"  # not the rewind's to touch
