"""`workspace status` through a running `workspace watch` (issue 26): the
watcher answers statuses from its kept scan, which random edits keep up to
date; a watcher killed mid-status leaves the status to the CLI's own
process. (Split from test_workspace_watch.py, whose helpers it uses.)"""

import os
import pathlib
import random

from test_workspace_watch import (  # noqa: F401  (watch is a fixture)
    Editor,
    checkpoint,
    inotify_watches,
    prepare,
    seeded_tree,
    tree_dirs,
    watch,
    ws,
)


def as_diff(change):
    """A status change as diff reports it, its finer kind checked against
    its two sides on the way."""
    frm, to, kind = change.get("from"), change.get("to"), change["kind"]
    if kind in ("modified", "mode_changed"):
        assert frm and to, change
        same_bytes = (frm["sha256"], frm["size"]) == (to["sha256"], to["size"])
        assert same_bytes == (kind == "mode_changed"), change
        return {**change, "kind": "changed"}
    assert kind in ("added", "deleted", "type_changed"), change
    return {**change, "kind": "added" if frm is None else "deleted"}


def test_status_goes_through_the_watch_and_follows_random_edits(stow_bin, workdir, watch):  # noqa: F811
    seed = int(os.environ.get("STOW_WATCH_SEED") or random.randrange(1 << 32))
    print(f"seed {seed} (rerun with STOW_WATCH_SEED={seed})")
    rnd = random.Random(seed)
    files, modes, dirs = seeded_tree(rnd)
    p = prepare(stow_bin, workdir, files, modes, dirs)
    ws_id, reg, root = p["workspace_id"], workdir / "reg", pathlib.Path(p["root"])
    head = checkpoint(stow_bin, reg, ws_id)["checkpoint_id"]
    w = watch(ws_id)
    assert inotify_watches(w.pid) is None
    # The first status is served by the watcher, which keeps its scan: it
    # then watches every directory of the tree.
    st = ws(stow_bin, "status", "--id", ws_id, "--registry-dir", reg)[1]
    assert (st["clean"], st["checkpoint_id"]) == (True, head), st
    assert inotify_watches(w.pid) == tree_dirs(root)
    editor = Editor(root, rnd)
    for n in range(10):
        done = editor.round(rnd.randint(2, 8))
        context = f"seed {seed}, round {n}: " + "; ".join(done)
        st = ws(stow_bin, "status", "--id", ws_id, "--registry-dir", reg)[1]
        assert st["checkpoint_id"] == head, context
        # Asked twice, the kept scan answers the same.
        again = ws(stow_bin, "status", "--id", ws_id, "--registry-dir", reg)[1]
        assert again == st, context
        # What status reported is what a checkpoint taken now differs by.
        now = checkpoint(stow_bin, reg, ws_id)["checkpoint_id"]
        d = ws(stow_bin, "diff", "--registry-dir", reg, "--from", head, "--to", now)[1]
        assert [as_diff(c) for c in st["changes"]] == d["changes"], context
        assert st.get("links", []) == d.get("links", []), context
        assert st["clean"] == (not d["changes"] and not d.get("links")), context
        clean = ws(stow_bin, "status", "--id", ws_id, "--registry-dir", reg)[1]
        assert (clean["clean"], clean["checkpoint_id"]) == (True, now), (context, clean)
        head = now
        assert inotify_watches(w.pid) == tree_dirs(root), context
        assert w.proc.poll() is None, w.stderr()
    rc, _, _ = w.stop()
    assert rc == 0, w.stderr()

    # A watcher killed while it serves a status: the status (it changes
    # nothing) is answered in process, the same.
    (root / "late.txt").write_bytes(b"late")
    w = watch(ws_id, env_extra={"STOW_TEST_FAULT": "status.compared"})
    st = ws(stow_bin, "status", "--id", ws_id, "--registry-dir", reg)[1]
    assert w.proc.wait(timeout=10) == -9
    assert [(c["path"], c["kind"]) for c in st["changes"]] == [("late.txt", "added")], st
