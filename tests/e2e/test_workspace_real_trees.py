"""Workspaces as agents leave them, through the real binary: a real
`python -m venv`, symlinks of every kind, a socket, a FIFO and empty
directories are captured, restored (every byte, mode and link target),
exported and imported on another registry, served, and never followed."""

import os
import pathlib
import socket
import stat
import subprocess
import sys

from s3server import WorkspaceServer
from test_workspace import manifest, ok
from test_workspace_transfer import fail


def listing(root, skip=(".stow",)):
    """Path -> what it is, never following links."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir.split(os.sep)[0] in skip:
            dirnames[:] = []
            continue
        for name in dirnames + filenames:
            p = pathlib.Path(dirpath) / name
            rel = os.path.relpath(p, root)
            if rel.split(os.sep)[0] in skip:
                continue
            st = os.lstat(p)
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", mode)
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", mode, p.read_bytes())
            else:
                out[rel] = ("special",)
    return out


def prepared(stow_bin, workdir):
    (workdir / "in").mkdir()
    (workdir / "in" / "README.md").write_text("task")
    m = manifest(workdir / "task.json", root="ws", registry_dir="reg",
                 max_bytes=1 << 30, max_objects=100000,
                 inputs=[{"source": "in", "destination": "."}])
    p = ok(stow_bin, "prepare", "--manifest", m)
    return p, pathlib.Path(p["root"])


def test_a_venv_sockets_fifos_and_empty_dirs_round_trip(stow_bin, workdir):
    p, root = prepared(stow_bin, workdir)
    reg = ["--registry-dir", workdir / "reg"]
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / ".venv")],
                   check=True, timeout=120)
    os.makedirs(root / "node_modules" / "pkg" / "bin")
    (root / "node_modules" / "pkg" / "bin" / "cli.js").write_text("#!/usr/bin/env node\n")
    os.makedirs(root / "node_modules" / ".bin")
    os.symlink("../pkg/bin/cli.js", root / "node_modules" / ".bin" / "pkg")
    os.symlink(str(workdir), root / "outside-dir")
    os.symlink("nowhere/at/all", root / "dangling")
    os.symlink("dangling", root / "chain")
    os.mkdir(root / "logs")
    os.mkdir(root / "private", 0o700)
    os.mkfifo(root / "pipe")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "dev.sock"))
    try:
        c = ok(stow_bin, "checkpoint", "--id", p["workspace_id"], *reg)
        assert {s["path"] for s in c["skipped"]} == {"dev.sock", "pipe"}
        assert c["links"] >= 6  # the venv's python links, node_modules/.bin, ours
        # Served: the server starts and lists no link or special file.
        server = WorkspaceServer(stow_bin, p["workspace_id"], workdir / "reg")
        try:
            s3 = server.client()
            keys = {o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=server.bucket)
                    for o in page.get("Contents", [])}
            assert "README.md" in keys and "dangling" not in keys and "dev.sock" not in keys
            assert not any(k.startswith("outside-dir/") for k in keys)
        finally:
            assert server.stop() == 0
    finally:
        sock.close()
    before = listing(workdir, skip=("ws", "reg", "back", "reg2", "back2", "cp.tar.gz"))
    r = ok(stow_bin, "restore", "--checkpoint-id", c["checkpoint_id"], "--root", workdir / "back", *reg)
    want = listing(root)
    for special in ("dev.sock", "pipe"):
        want.pop(special)
    assert listing(r["root"]) == want
    # Across registries: links travel as manifest entries.
    ok(stow_bin, "export", "--checkpoint-id", c["checkpoint_id"], "--output", workdir / "cp.tar.gz", *reg)
    ok(stow_bin, "import", "--archive", workdir / "cp.tar.gz", "--registry-dir", workdir / "reg2")
    r2 = ok(stow_bin, "restore", "--checkpoint-id", c["checkpoint_id"], "--root", workdir / "back2",
            "--registry-dir", workdir / "reg2")
    assert listing(r2["root"]) == want
    # Nothing outside the new roots was created or changed.
    assert listing(workdir, skip=("ws", "reg", "back", "reg2", "back2", "cp.tar.gz")) == before
    # Diff after retargeting a link.
    os.remove(root / "node_modules" / ".bin" / "pkg")
    os.symlink("../pkg/bin/other.js", root / "node_modules" / ".bin" / "pkg")
    c2 = ok(stow_bin, "checkpoint", "--id", p["workspace_id"], *reg)
    d = ok(stow_bin, "diff", "--from", c["checkpoint_id"], "--to", c2["checkpoint_id"], *reg)
    assert d["links"] == [{"path": "node_modules/.bin/pkg", "kind": "changed",
                           "from": "../pkg/bin/cli.js", "to": "../pkg/bin/other.js"}]


def test_inputs_with_symlinks_are_still_refused_at_prepare(stow_bin, workdir):
    (workdir / "in").mkdir()
    (workdir / "in" / "a.txt").write_text("a")
    os.symlink("a.txt", workdir / "in" / "link")
    m = manifest(workdir / "task.json", root="ws", registry_dir="reg",
                 inputs=[{"source": "in", "destination": "."}])
    assert fail(stow_bin, "prepare", "--manifest", m)["code"] == "invalid_input"
    assert not (workdir / "ws").exists()
