"""Checkpoint transfer through the real binary: export/preview/import,
portable handoff and adopt, deltas and gc — workspace.md §14 steps 5-9
(steps 1-4 and 10-11 are in test_workspace.py), the archive format of §9,
the delta document of §10 and the handoff documents of §11."""

import base64
import hashlib
import json
import os
import random
import re
import shutil
import stat
import subprocess
import tarfile

from test_workspace import manifest, ok, ws

HEX64 = re.compile(r"[0-9a-f]{64}")


# ---------------------------------------------------------------- helpers


def fail(stow_bin, *args, env=None):
    """Runs a command that must fail; returns its `error` object."""
    rc, out, err = ws(stow_bin, *args, env=env, check=False)
    assert rc == 1, f"{args} exited {rc}: {out} {err}"
    assert out and "error" in out, f"{args}: no error document on stdout (stderr: {err})"
    assert out["error"]["code"] and "message" in out["error"], out
    return out["error"]


def run_in(stow_bin, cwd, *args, env=None):
    """Runs `stow-s3 workspace ...` in `cwd`; returns the CompletedProcess."""
    return subprocess.run(
        [stow_bin, "workspace", *[str(a) for a in args]],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env,
    )


def sha256_file(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def isolated_env(workdir):
    """An environment whose default registry lives under workdir/xdg."""
    home = workdir / "home"
    home.mkdir(exist_ok=True)
    return {**os.environ, "XDG_CONFIG_HOME": str(workdir / "xdg"), "HOME": str(home)}


def write_tree(src, files):
    for rel, body in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(body)


def prepare_tree(stow_bin, workdir, files, root="w", registry="reg", src="in", **fields):
    """Prepares a workspace seeded with `files` ({rel: bytes})."""
    write_tree(workdir / src, files)
    m = manifest(workdir / f"{root}.task.json", root=root, registry_dir=registry,
                 inputs=[{"source": src, "destination": "."}], **fields)
    return ok(stow_bin, "prepare", "--manifest", m)


def tree(root):
    """{slash path: (mode, sha256, size)} of every file under root, the
    root-level .stow excluded; every entry must be a regular file."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if os.path.samefile(dirpath, root):
            dirnames[:] = [d for d in dirnames if d != ".stow"]
        for name in filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            assert stat.S_ISREG(st.st_mode), path
            with open(path, "rb") as fh:
                data = fh.read()
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            out[rel] = (st.st_mode & 0o777, hashlib.sha256(data).hexdigest(), len(data))
    return out


def snapshot(root):
    """Every file under root (lock files aside) with its digest."""
    out = {}
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            if name.endswith(".lock"):
                continue
            path = os.path.join(dirpath, name)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def tar_names(archive):
    """Entry names as plain `tar tzf` lists them."""
    out = subprocess.run(["tar", "tzf", str(archive)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def changes_of(d):
    return [(c["path"], c["kind"]) for c in d["changes"]]


# ---------------------------------------------------------------- §14 5-9


def test_transfer_scenario(stow_bin, workdir):
    src = workdir / "src"
    (src / "nested").mkdir(parents=True)
    (src / "seed.txt").write_text("seed")
    (src / "nested" / "second.txt").write_text("second")
    team = ["--registry-dir", workdir / "registry", "--team", "platform"]

    # 1-4 (as in test_workspace): two workspaces of team platform.
    m = manifest(workdir / "task.json", root="task1", registry_dir="registry", team="platform",
                 inputs=[{"source": "src", "destination": "."}])
    p1 = ok(stow_bin, "prepare", "--manifest", m)
    ws1 = p1["workspace_id"]
    c1 = ok(stow_bin, "checkpoint", "--id", ws1, *team)
    assert (c1["files"], c1["bytes"]) == (2, 10)
    cp1 = c1["checkpoint_id"]
    (workdir / "task1" / "notes.txt").write_text("x" * 20)
    c2 = ok(stow_bin, "checkpoint", "--id", ws1, "--parent", cp1, *team)
    assert (c2["files"], c2["bytes"]) == (3, 30)
    cp2 = c2["checkpoint_id"]

    (workdir / "one").mkdir()
    (workdir / "one" / "nine.txt").write_text("123456789")
    m2 = manifest(workdir / "task2.json", root="task2", registry_dir="registry", team="platform",
                  inputs=[{"source": "one", "destination": "."}])
    p2 = ok(stow_bin, "prepare", "--manifest", m2)
    ws2 = p2["workspace_id"]
    c3 = ok(stow_bin, "checkpoint", "--id", ws2, *team)
    assert (c3["files"], c3["bytes"]) == (1, 9)
    # A delta between the two workspaces is refused and leaves no file.
    err = fail(stow_bin, "delta", "--from", c3["checkpoint_id"], "--to", cp2,
               "--output", workdir / "cross.json", *team)
    assert "crosses workspaces" in err["message"]
    assert not (workdir / "cross.json").exists()

    # 5. handoff without an archive: a version-1 document, nothing printed.
    h1 = workdir / "handoff-v1.json"
    rc, out, _ = ws(stow_bin, "handoff", "--id", ws1, "--output", h1, *team)
    assert rc == 0 and out is None
    d1 = json.loads(h1.read_text())
    assert d1["version"] == 1 and d1["workspace_id"] == ws1 and d1["team"] == "platform"
    assert "checkpoint_id" not in d1 and "archive" not in d1
    assert d1["registry_dir"] == p1["registry_dir"]

    # --archive needs --checkpoint-id.
    err = fail(stow_bin, "handoff", "--id", ws1, "--archive", workdir / "noid.tar.gz", *team)
    assert err["code"] == "invalid_request"
    assert not (workdir / "noid.tar.gz").exists()

    # With --checkpoint-id cp2 --archive: version 2, archive beside the document.
    bundle = workdir / "bundle"
    bundle.mkdir()
    rc, out, _ = ws(stow_bin, "handoff", "--id", ws1, "--checkpoint-id", cp2,
                    "--archive", bundle / "checkpoint.tar.gz",
                    "--output", bundle / "handoff.json", *team)
    assert rc == 0 and out is None
    d2 = json.loads((bundle / "handoff.json").read_text())
    assert oct(os.stat(bundle / "handoff.json").st_mode & 0o777) == "0o600"
    assert d2["version"] == 2 and d2["workspace_id"] == ws1 and d2["checkpoint_id"] == cp2
    assert d2["team"] == "platform" and d2["registry_dir"] == p1["registry_dir"]
    arc = d2["archive"]
    assert arc["path"] == "checkpoint.tar.gz"
    assert HEX64.fullmatch(arc["sha256"])
    assert arc["sha256"] == sha256_file(bundle / "checkpoint.tar.gz")
    assert arc["bytes"] >= 1 and arc["bytes"] == os.path.getsize(bundle / "checkpoint.tar.gz")
    assert arc["files"] == 3

    # Printed instead: same archive bytes (exports are deterministic), path absolute.
    printed = ok(stow_bin, "handoff", "--id", ws1, "--checkpoint-id", cp2,
                 "--archive", workdir / "printed.tar.gz", *team)
    assert printed["version"] == 2 and printed["checkpoint_id"] == cp2
    assert os.path.isabs(printed["archive"]["path"])
    assert os.path.samefile(printed["archive"]["path"], workdir / "printed.tar.gz")
    assert printed["archive"]["sha256"] == arc["sha256"]
    assert (workdir / "printed.tar.gz").read_bytes() == (bundle / "checkpoint.tar.gz").read_bytes()

    # 6. adopt into the default registry, from a moved copy of the bundle
    # (the relative archive path resolves from the document's directory).
    env = isolated_env(workdir)
    xdg = workdir / "xdg"
    moved = workdir / "moved"
    shutil.copytree(bundle, moved)
    adopted_root = workdir / "adopted"
    a6 = ok(stow_bin, "adopt", "--handoff", moved / "handoff.json", "--root", adopted_root, env=env)
    adopted = a6["workspace_id"]
    assert re.fullmatch(r"ws_[0-9a-f]+", adopted) and adopted not in (ws1, ws2)
    assert a6["checkpoint_id"] == cp2 and a6["team"] == "platform"
    assert a6["root"] == str(adopted_root)
    assert a6["registry_dir"].startswith(str(xdg))
    assert a6["registry_dir"].endswith(os.path.join("teams", "platform"))
    assert (a6["seeded_bytes"], a6["seeded_objects"]) == (30, 3)
    assert (adopted_root / "notes.txt").read_text() == "x" * 20
    assert (adopted_root / "nested" / "second.txt").read_text() == "second"
    assert (adopted_root / "seed.txt").read_text() == "seed"

    ls = ok(stow_bin, "list", "--team", "platform", env=env)
    assert ls["registry_dir"] == a6["registry_dir"]
    [entry] = [r for r in ls["results"] if r["id"] == adopted]
    assert entry["owned"] is False and entry["readable"] is True
    err = fail(stow_bin, "destroy", "--id", adopted, "--team", "platform", env=env)
    assert err["code"] == "refused"
    assert (adopted_root / "notes.txt").exists()
    col = ok(stow_bin, "collect", "--team", "platform", env=env)
    [entry] = [r for r in col["results"] if r["id"] == adopted]
    assert entry["removed"] is False and entry["reason"] == "adopted"
    # Adopt targets the local registry; the sender's one is untouched.
    sender = ok(stow_bin, "list", *team)
    assert {r["id"] for r in sender["results"]} == {ws1, ws2}

    # A tampered archive is refused before anything is created.
    tampered = workdir / "tampered"
    tampered.mkdir()
    rc, out, _ = ws(stow_bin, "handoff", "--id", ws1, "--checkpoint-id", cp1,
                    "--archive", tampered / "checkpoint.tar.gz",
                    "--output", tampered / "handoff.json", *team)
    assert rc == 0
    good = (tampered / "checkpoint.tar.gz").read_bytes()
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF
    (tampered / "checkpoint.tar.gz").write_bytes(bytes(bad))
    before = snapshot(xdg)
    err = fail(stow_bin, "adopt", "--handoff", tampered / "handoff.json",
               "--root", workdir / "tampered-root", env=env)
    assert err["code"] == "invalid_archive"
    assert not (workdir / "tampered-root").exists()
    assert snapshot(xdg) == before

    # A version-1 document carries no archive.
    err = fail(stow_bin, "adopt", "--handoff", h1, "--root", workdir / "v1-root", env=env)
    assert err["code"] == "invalid_request" and "--archive" in err["message"]
    assert not (workdir / "v1-root").exists()
    # The document names team platform; --team other disagrees.
    err = fail(stow_bin, "adopt", "--handoff", moved / "handoff.json",
               "--root", workdir / "team-root", "--team", "other", env=env)
    assert err["code"] == "invalid_request"
    assert not (workdir / "team-root").exists()
    assert snapshot(xdg) == before

    # Control: the same bundle, untampered, adopts.
    (tampered / "checkpoint.tar.gz").write_bytes(good)
    ctl = ok(stow_bin, "adopt", "--handoff", tampered / "handoff.json",
             "--root", workdir / "control-root", env=env)
    assert ctl["checkpoint_id"] == cp1 and ctl["workspace_id"] not in (ws1, ws2, adopted)
    assert (ctl["seeded_bytes"], ctl["seeded_objects"]) == (10, 2)
    assert not (workdir / "control-root" / "notes.txt").exists()

    # 7. resume --handoff keeps the sender's identity (v2 and v1 documents).
    r = ok(stow_bin, "resume", "--handoff", bundle / "handoff.json")
    assert r["workspace_id"] == ws1 and r["checkpoint_id"] == cp2
    r = ok(stow_bin, "resume", "--handoff", h1)
    assert r["workspace_id"] == ws1 and "checkpoint_id" not in r
    err = fail(stow_bin, "resume", "--handoff", bundle / "handoff.json",
               "--registry-dir", workdir / "registry")
    assert "not both" in err["message"]

    # 8. delta cp1 -> cp2 (relative output, reported absolute).
    out = run_in(stow_bin, workdir, "delta", "--from", cp1, "--to", cp2, "--output", "delta.json", *team)
    assert out.returncode == 0, out.stderr
    d8 = json.loads(out.stdout)
    delta_path = workdir / "delta.json"
    assert d8["version"] == 1 and d8["workspace_id"] == ws1
    assert (d8["base_id"], d8["target_id"]) == (cp1, cp2)
    assert os.path.isabs(d8["document"])
    assert os.path.realpath(d8["document"]) == os.path.realpath(delta_path)
    assert HEX64.fullmatch(d8["sha256"]) and d8["sha256"] == sha256_file(delta_path)
    assert (d8["files"], d8["bytes"]) == (1, 20)
    raw = delta_path.read_bytes()
    assert raw != out.stdout.encode()
    assert b"\n" not in raw.strip()  # compact JSON
    doc = json.loads(raw)
    assert doc["version"] == 1 and doc["workspace_id"] == ws1
    assert (doc["base_id"], doc["target_id"]) == (cp1, cp2)
    assert changes_of(doc) == [("notes.txt", "added")]
    assert (doc["files"], doc["bytes"]) == (1, 20)
    assert base64.b64decode(doc["content"]["notes.txt"]) == b"x" * 20
    assert list(doc["content"]) == ["notes.txt"]

    # 9. apply to cp1 with the digest: a new checkpoint equal to cp2.
    a1 = ok(stow_bin, "apply", "--delta", delta_path, "--base", cp1, "--expect-sha256", d8["sha256"], *team)
    assert a1["checkpoint_id"] not in (cp1, cp2)
    assert a1["parent_checkpoint_id"] == cp1 and a1["workspace_id"] == ws1
    assert (a1["files"], a1["bytes"]) == (3, 30)
    assert ok(stow_bin, "diff", "--from", cp2, "--to", a1["checkpoint_id"], *team)["changes"] == []

    # to cp2: the base has diverged (notes.txt is already there); base untouched.
    err = fail(stow_bin, "apply", "--delta", delta_path, "--base", cp2, *team)
    assert err["code"] == "delta_conflict" and "diverged" in err["message"]
    assert changes_of(ok(stow_bin, "diff", "--from", cp1, "--to", cp2, *team)) == [("notes.txt", "added")]

    # A tampered payload disagrees with the manifest of the change.
    forged = dict(doc, content={"notes.txt": base64.b64encode(b"y" * 20).decode()})
    (workdir / "tampered-delta.json").write_text(json.dumps(forged, separators=(",", ":")))
    err = fail(stow_bin, "apply", "--delta", workdir / "tampered-delta.json", "--base", cp1, *team)
    assert "disagrees with" in err["message"]

    # Re-encoded in transit (same content, other bytes): applies without a
    # digest, is refused with the original one.
    transit = workdir / "transit"
    transit.mkdir()
    renamed = transit / "renamed-delta.json"
    renamed.write_text(json.dumps(doc, indent=2) + "\n")
    assert renamed.read_bytes() != raw
    a2 = ok(stow_bin, "apply", "--delta", renamed, "--base", cp1, *team)
    assert a2["checkpoint_id"] not in (cp1, cp2, a1["checkpoint_id"])
    assert a2["parent_checkpoint_id"] == cp1 and (a2["files"], a2["bytes"]) == (3, 30)
    err = fail(stow_bin, "apply", "--delta", renamed, "--base", cp1, "--expect-sha256", d8["sha256"], *team)
    assert "does not match the digest" in err["message"]
    # A plain rename keeps the bytes, so the digest still holds.
    os.rename(delta_path, transit / "moved.json")
    a3 = ok(stow_bin, "apply", "--delta", transit / "moved.json", "--base", cp1,
            "--expect-sha256", d8["sha256"], *team)
    assert a3["checkpoint_id"] not in (a1["checkpoint_id"], a2["checkpoint_id"])


# ---------------------------------------------------------------- archives


def test_export_is_deterministic_and_tar_readable(stow_bin, workdir):
    files = {
        "a.txt": b"alpha\n",
        "B.txt": b"upper case sorts first",
        "dir/b.bin": bytes(range(256)) * 4,
        "dir/sub/empty.txt": b"",
        "dir-x.txt": b"byte order: '-' sorts before '/'",
        "z.txt": b"zz",
    }
    p = prepare_tree(stow_bin, workdir, files)
    wsid, root = p["workspace_id"], workdir / "w"
    reg = ["--registry-dir", workdir / "reg"]
    c1 = ok(stow_bin, "checkpoint", "--id", wsid, *reg)
    (root / "new.txt").write_bytes(b"added later")
    files["new.txt"] = b"added later"
    c2 = ok(stow_bin, "checkpoint", "--id", wsid, "--parent", c1["checkpoint_id"], *reg)
    cp = c2["checkpoint_id"]
    total = sum(len(b) for b in files.values())
    assert (c2["files"], c2["bytes"]) == (len(files), total)

    out1, out2 = workdir / "one.tar.gz", workdir / "two.tar.gz"
    e1 = ok(stow_bin, "export", "--checkpoint-id", cp, "--output", out1, *reg)
    e2 = ok(stow_bin, "export", "--checkpoint-id", cp, "--output", out2, *reg)
    raw = out1.read_bytes()
    assert raw == out2.read_bytes()
    assert e1["version"] == 1 and e1["checkpoint_id"] == cp and e1["archive"] == str(out1)
    assert e1["sha256"] == hashlib.sha256(raw).hexdigest() == e2["sha256"]
    assert e1["bytes"] == len(raw) and e1["files"] == len(files)
    assert raw[:2] == b"\x1f\x8b" and raw[4:8] == b"\0\0\0\0"  # gzip, header mtime 0

    # Plain tar lists manifest.json, then files/<path> in byte order.
    names = tar_names(out1)
    assert names[0] == "manifest.json"
    assert names[1:] == sorted(names[1:]) == ["files/" + rel for rel in sorted(files)]
    assert not any(n.endswith("/") for n in names)
    with tarfile.open(out1, "r:gz") as t:
        members = t.getmembers()
    assert [m.name for m in members] == names
    for m in members:
        assert m.isreg(), m.name
        assert m.mode & 0o7777 == 0o600, (m.name, oct(m.mode))
        assert m.mtime == 0, m.name
        if m.name != "manifest.json":
            assert m.size == len(files[m.name[len("files/"):]])

    x = workdir / "x"
    x.mkdir()
    out = subprocess.run(["tar", "xzf", str(out1), "-C", str(x)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert set(tree(x)) == {"manifest.json"} | {"files/" + rel for rel in files}
    for rel, body in files.items():
        assert (x / "files" / rel).read_bytes() == body == (root / rel).read_bytes()
    header = (x / "manifest.json").read_text()
    assert isinstance(json.loads(header), dict) and cp in header

    # preview reads the archive alone (no registry, none created).
    env = isolated_env(workdir)
    pv = ok(stow_bin, "preview", "--archive", out1, env=env)
    assert pv["version"] == 1 and pv["checkpoint_id"] == cp and pv["workspace_id"] == wsid
    assert pv["parent_checkpoint_id"] == c1["checkpoint_id"]
    assert [(f["path"], f["size"]) for f in pv["files"]] == [(rel, len(files[rel])) for rel in sorted(files)]
    assert pv["bytes"] == total and pv["sensitive_paths"] == []
    assert "primary_bucket" not in pv
    assert not (workdir / "xdg").exists()

    # An existing output is never replaced.
    keep = workdir / "keep.tar.gz"
    keep.write_bytes(b"keep")
    err = fail(stow_bin, "export", "--checkpoint-id", cp, "--output", keep, *reg)
    assert err["code"] == "already_exists" and keep.read_bytes() == b"keep"
    # Limits: export refuses and writes nothing; preview and import refuse.
    err = fail(stow_bin, "export", "--checkpoint-id", cp, "--output", workdir / "small.tar.gz",
               "--max-files", "1", *reg)
    assert err["code"] == "capacity_exceeded" and not (workdir / "small.tar.gz").exists()
    err = fail(stow_bin, "export", "--checkpoint-id", cp, "--output", workdir / "small.tar.gz",
               "--max-bytes", "1", *reg)
    assert err["code"] == "capacity_exceeded" and not (workdir / "small.tar.gz").exists()
    err = fail(stow_bin, "export", "--checkpoint-id", "cp_" + "0" * 24, "--output", workdir / "none.tar.gz", *reg)
    assert err["code"] == "not_found" and not (workdir / "none.tar.gz").exists()
    err = fail(stow_bin, "preview", "--archive", out1, "--max-files", "1")
    assert err["code"] in ("capacity_exceeded", "invalid_archive")
    reg2 = ["--registry-dir", workdir / "reg2"]
    err = fail(stow_bin, "import", "--archive", out1, "--max-bytes", "1", *reg2)
    assert err["code"] in ("capacity_exceeded", "invalid_archive")
    # ... and published nothing: the real import still succeeds.
    imp = ok(stow_bin, "import", "--archive", out1, *reg2)
    assert imp["checkpoint_id"] == cp and imp["created"]
    assert imp["workspace_id"] == wsid and imp["parent_checkpoint_id"] == c1["checkpoint_id"]
    assert (imp["files"], imp["bytes"]) == (len(files), total)


def test_sensitive_paths_need_opt_in(stow_bin, workdir):
    files = {".env": b"SECRET=1\n", "app.txt": b"app"}
    p = prepare_tree(stow_bin, workdir, files, include_sensitive_inputs=True)
    reg = ["--registry-dir", workdir / "reg"]
    c = ok(stow_bin, "checkpoint", "--id", p["workspace_id"], "--include-sensitive", *reg)
    assert c["files"] == 2
    err = fail(stow_bin, "export", "--checkpoint-id", c["checkpoint_id"], "--output", workdir / "a.tar.gz", *reg)
    assert err["code"] == "sensitive_path" and not (workdir / "a.tar.gz").exists()
    ok(stow_bin, "export", "--checkpoint-id", c["checkpoint_id"], "--output", workdir / "a.tar.gz",
       "--include-sensitive", *reg)
    pv = ok(stow_bin, "preview", "--archive", workdir / "a.tar.gz")
    assert pv["sensitive_paths"] == [".env"]
    assert [f["path"] for f in pv["files"]] == [".env", "app.txt"]
    reg2 = ["--registry-dir", workdir / "reg2"]
    err = fail(stow_bin, "import", "--archive", workdir / "a.tar.gz", *reg2)
    assert err["code"] == "sensitive_path"
    imp = ok(stow_bin, "import", "--archive", workdir / "a.tar.gz", "--include-sensitive", *reg2)
    assert imp["checkpoint_id"] == c["checkpoint_id"] and imp["files"] == 2


def test_round_trip_many_files(stow_bin, workdir):
    rng = random.Random(20260601)
    dirs = [""]
    for i in range(40):
        parent = rng.choice([d for d in dirs if d.count("/") < 3])
        dirs.append(f"{parent}/d{i:02d}" if parent else f"d{i:02d}")
    shared = b"the same payload in many files\n" * 7
    files, modes = {}, {}
    for i in range(599):
        d = rng.choice(dirs)
        rel = f"{d}/f{i:03d}.txt" if d else f"f{i:03d}.txt"
        if i % 10 == 0:
            body = b""
        elif i % 7 == 0:
            body = shared
        else:
            body = f"file {i} ".encode() * rng.randint(1, 60)
        files[rel] = body
        modes[rel] = (0o644, 0o755, 0o600)[i % 3]
    files["big/blob.bin"] = rng.randbytes(3 * 1024 * 1024)
    modes["big/blob.bin"] = 0o644
    assert len(files) == 600
    total = sum(len(b) for b in files.values())
    distinct = sum(len(b) for b in set(files.values()))
    assert distinct < total

    p = prepare_tree(stow_bin, workdir, files)
    wsid, root = p["workspace_id"], workdir / "w"
    for rel, mode in modes.items():
        os.chmod(root / rel, mode)
    source = tree(root)
    assert len(source) == 600
    assert {rel: m for rel, (m, _, _) in source.items()} == modes
    reg = ["--registry-dir", workdir / "reg"]
    c = ok(stow_bin, "checkpoint", "--id", wsid, *reg)
    cp = c["checkpoint_id"]
    assert (c["files"], c["bytes"]) == (600, total)

    archive = workdir / "many.tar.gz"
    e = ok(stow_bin, "export", "--checkpoint-id", cp, "--output", archive, *reg)
    assert e["files"] == 600
    names = tar_names(archive)
    assert names[0] == "manifest.json" and names[1:] == ["files/" + rel for rel in sorted(files)]

    # The checkpoint exists where it was made.
    err = fail(stow_bin, "import", "--archive", archive, *reg)
    assert err["code"] == "already_exists"

    # Import into a fresh registry stores each distinct payload once.
    imp = ok(stow_bin, "import", "--archive", archive, "--registry-dir", workdir / "reg2")
    assert imp["checkpoint_id"] == cp and imp["workspace_id"] == wsid
    assert (imp["files"], imp["bytes"]) == (600, total)
    assert imp["stored_bytes"] == distinct < imp["bytes"]
    err = fail(stow_bin, "import", "--archive", archive, "--registry-dir", workdir / "reg2")
    assert err["code"] == "already_exists"
    imp4 = ok(stow_bin, "import", "--archive", archive, "--registry-dir", workdir / "reg4")
    assert imp4["stored_bytes"] == distinct and imp4["bytes"] == total

    r = ok(stow_bin, "restore", "--checkpoint-id", cp, "--root", workdir / "restored",
           "--registry-dir", workdir / "reg2")
    assert r["workspace_id"] != wsid
    assert tree(workdir / "restored") == source

    # Handoff with an archive (byte-identical to the export), adopt elsewhere.
    bundle = workdir / "bundle"
    bundle.mkdir()
    rc, _, _ = ws(stow_bin, "handoff", "--id", wsid, "--checkpoint-id", cp,
                  "--archive", bundle / "checkpoint.tar.gz", "--output", bundle / "handoff.json", *reg)
    assert rc == 0
    doc = json.loads((bundle / "handoff.json").read_text())
    assert doc["archive"]["sha256"] == e["sha256"] and doc["archive"]["files"] == 600
    assert (bundle / "checkpoint.tar.gz").read_bytes() == archive.read_bytes()
    a = ok(stow_bin, "adopt", "--handoff", bundle / "handoff.json", "--root", workdir / "adopted",
           "--registry-dir", workdir / "reg3")
    assert a["workspace_id"] != wsid and a["checkpoint_id"] == cp
    assert (a["seeded_bytes"], a["seeded_objects"]) == (total, 600)
    assert tree(workdir / "adopted") == source
    assert (workdir / "adopted" / "big" / "blob.bin").read_bytes() == files["big/blob.bin"]


def test_portable_round_trip(stow_bin, workdir):
    files = {"index.html": b"<h1>hi</h1>\n", "assets/app.js": b"console.log(1)\n"}
    p = prepare_tree(stow_bin, workdir, files)
    wsid, root, bucket = p["workspace_id"], workdir / "w", p["bucket"]
    reg = ["--registry-dir", workdir / "reg"]
    c = ok(stow_bin, "checkpoint", "--id", wsid, "--portable", *reg)
    cpa = c["checkpoint_id"]
    assert c["objects"] == 0

    archive = workdir / "v2.tar.gz"
    e = ok(stow_bin, "export", "--checkpoint-id", cpa, "--output", archive, *reg)
    assert e["checkpoint_id"] == cpa and e["sha256"] == sha256_file(archive)
    names = tar_names(archive)
    assert names[0] == "manifest.json"
    assert names[1:] == ["files/" + rel for rel in sorted(files)]  # no objects/ for a plain bucket
    pv = ok(stow_bin, "preview", "--archive", archive)
    assert pv["checkpoint_id"] == cpa and pv["workspace_id"] == wsid
    assert pv["primary_bucket"] == bucket and bucket in pv["buckets"]
    assert pv["objects"] == []
    assert [f["path"] for f in pv["files"]] == sorted(files)
    assert pv["bytes"] == sum(len(b) for b in files.values())

    imp = ok(stow_bin, "import", "--archive", archive, "--registry-dir", workdir / "reg2")
    assert imp["checkpoint_id"] == cpa and imp["workspace_id"] == wsid and imp["files"] == 2
    r = ok(stow_bin, "restore", "--checkpoint-id", cpa, "--root", workdir / "r", "--registry-dir", workdir / "reg2")
    assert r["bucket"] == bucket and r["workspace_id"] != wsid
    assert tree(workdir / "r") == tree(root)

    # A delta between portable checkpoints is a version-2 document.
    (root / "index.html").write_bytes(b"<h1>bye</h1>\n")
    (root / "assets" / "style.css").write_bytes(b"h1 { color: red }\n")
    cb = ok(stow_bin, "checkpoint", "--id", wsid, "--portable", "--parent", cpa, *reg)
    dl = ok(stow_bin, "delta", "--from", cpa, "--to", cb["checkpoint_id"], "--output", workdir / "v2.delta", *reg)
    assert dl["workspace_id"] == wsid and dl["files"] == 2
    assert dl["sha256"] == sha256_file(workdir / "v2.delta")
    doc = json.loads((workdir / "v2.delta").read_text())
    assert doc["version"] == 2 and doc["workspace_id"] == wsid
    assert (doc["base_id"], doc["target_id"]) == (cpa, cb["checkpoint_id"])
    ap = ok(stow_bin, "apply", "--delta", workdir / "v2.delta", "--base", cpa, "--expect-sha256", dl["sha256"], *reg)
    assert ap["parent_checkpoint_id"] == cpa and ap["checkpoint_id"] not in (cpa, cb["checkpoint_id"])
    assert (ap["files"], ap["bytes"]) == (cb["files"], cb["bytes"])
    same = ok(stow_bin, "diff", "--from", cb["checkpoint_id"], "--to", ap["checkpoint_id"], *reg)
    assert same["changes"] == [] and same.get("objects", []) == [] and same.get("buckets", []) == []
    r2 = ok(stow_bin, "restore", "--checkpoint-id", ap["checkpoint_id"], "--root", workdir / "r2", *reg)
    assert r2["bucket"] == bucket
    assert tree(workdir / "r2") == tree(root)


# ---------------------------------------------------------------- deltas


def test_delta_v1_and_refusals(stow_bin, workdir):
    files = {"a.txt": b"alpha", "b.txt": b"bravo", "c.sh": b"#!/bin/sh\necho c\n", "d.txt": b"delta"}
    p = prepare_tree(stow_bin, workdir, files)
    wsid, root = p["workspace_id"], workdir / "w"
    os.chmod(root / "c.sh", 0o644)
    reg = ["--registry-dir", workdir / "reg"]
    base = ok(stow_bin, "checkpoint", "--id", wsid, *reg)["checkpoint_id"]

    # add, content change, mode change, delete
    (root / "a.txt").write_bytes(b"alpha two")
    os.chmod(root / "c.sh", 0o755)
    (root / "d.txt").unlink()
    (root / "new.txt").write_bytes(b"brand new")
    t = ok(stow_bin, "checkpoint", "--id", wsid, "--parent", base, *reg)
    target = t["checkpoint_id"]
    content_bytes = len(b"alpha two") + len(files["c.sh"]) + len(b"brand new")

    path = workdir / "d.json"
    d = ok(stow_bin, "delta", "--from", base, "--to", target, "--output", path, *reg)
    assert d["version"] == 1 and d["workspace_id"] == wsid
    assert (d["base_id"], d["target_id"]) == (base, target)
    assert os.path.isabs(d["document"]) and os.path.realpath(d["document"]) == os.path.realpath(path)
    assert d["sha256"] == sha256_file(path)
    assert (d["files"], d["bytes"]) == (4, content_bytes)
    doc = json.loads(path.read_text())
    assert doc["version"] == 1 and doc["workspace_id"] == wsid and doc["created"]
    assert changes_of(doc) == [("a.txt", "changed"), ("c.sh", "changed"),
                               ("d.txt", "deleted"), ("new.txt", "added")]
    by = {c["path"]: c for c in doc["changes"]}
    assert (by["c.sh"]["from"]["mode"], by["c.sh"]["to"]["mode"]) == (0o644, 0o755)
    assert by["c.sh"]["from"]["sha256"] == by["c.sh"]["to"]["sha256"]
    assert "to" not in by["d.txt"] and "from" not in by["new.txt"]
    assert by["a.txt"]["to"]["sha256"] == hashlib.sha256(b"alpha two").hexdigest()
    assert {k: base64.b64decode(v) for k, v in doc["content"].items()} == {
        "a.txt": b"alpha two", "c.sh": files["c.sh"], "new.txt": b"brand new"}
    assert (doc["files"], doc["bytes"]) == (4, content_bytes)

    # Apply on the base reproduces the target; twice gives two checkpoints.
    a1 = ok(stow_bin, "apply", "--delta", path, "--base", base, "--expect-sha256", d["sha256"], *reg)
    a2 = ok(stow_bin, "apply", "--delta", path, "--base", base, "--expect-sha256", d["sha256"].upper(), *reg)
    assert a1["checkpoint_id"] != a2["checkpoint_id"]
    for a in (a1, a2):
        assert a["checkpoint_id"] not in (base, target)
        assert a["parent_checkpoint_id"] == base and a["workspace_id"] == wsid
        assert (a["files"], a["bytes"]) == (t["files"], t["bytes"])
        assert ok(stow_bin, "diff", "--from", target, "--to", a["checkpoint_id"], *reg)["changes"] == []
    r = ok(stow_bin, "restore", "--checkpoint-id", a1["checkpoint_id"], "--root", workdir / "r", *reg)
    assert r["workspace_id"] != wsid
    assert tree(workdir / "r") == tree(root)
    assert os.stat(workdir / "r" / "c.sh").st_mode & 0o777 == 0o755
    assert not (workdir / "r" / "d.txt").exists()

    # On the target itself the preconditions fail; nothing is written.
    err = fail(stow_bin, "apply", "--delta", path, "--base", target, *reg)
    assert err["code"] == "delta_conflict" and "diverged" in err["message"]
    assert changes_of(ok(stow_bin, "diff", "--from", base, "--to", target, *reg)) == [
        ("a.txt", "changed"), ("c.sh", "changed"), ("d.txt", "deleted"), ("new.txt", "added")]

    # A base from another workspace is refused, even with identical files.
    p2 = prepare_tree(stow_bin, workdir, {}, root="w2")
    os.chmod(workdir / "w2" / "c.sh", 0o644)
    other = ok(stow_bin, "checkpoint", "--id", p2["workspace_id"], *reg)["checkpoint_id"]
    rc, out, _ = ws(stow_bin, "apply", "--delta", path, "--base", other, *reg, check=False)
    assert rc == 1 and out["error"]["code"]

    # Bounds refuse and leave no document; an existing output is kept.
    small = workdir / "small.json"
    err = fail(stow_bin, "delta", "--from", base, "--to", target, "--output", small, "--max-files", "1", *reg)
    assert err["code"] == "capacity_exceeded" and not small.exists()
    err = fail(stow_bin, "delta", "--from", base, "--to", target, "--output", small, "--max-bytes", "1", *reg)
    assert err["code"] == "capacity_exceeded" and not small.exists()
    before = path.read_bytes()
    err = fail(stow_bin, "delta", "--from", base, "--to", target, "--output", path, *reg)
    assert err["code"] == "already_exists" and path.read_bytes() == before


def test_apply_refuses_what_the_document_alone_gets_wrong(stow_bin, workdir):
    """A sensitive path is refused in a link change as in a file change; a
    malformed message or directory list is the document's fault
    (invalid_delta), not a conflict with the base."""
    p = prepare_tree(stow_bin, workdir, {"a.txt": b"alpha"})
    wsid, root = p["workspace_id"], workdir / "w"
    reg = ["--registry-dir", workdir / "reg"]
    base = ok(stow_bin, "checkpoint", "--id", wsid, *reg)["checkpoint_id"]
    (root / "a.txt").write_bytes(b"alpha two")
    target = ok(stow_bin, "checkpoint", "--id", wsid, "--parent", base, *reg)["checkpoint_id"]
    path = workdir / "d.json"
    ok(stow_bin, "delta", "--from", base, "--to", target, "--output", path, *reg)
    doc = json.loads(path.read_text())
    before = ok(stow_bin, "log", "--id", wsid, *reg)["checkpoints"]

    def apply_edited(name, **edits):
        edited = workdir / name
        edited.write_text(json.dumps({**doc, **edits}))
        return fail(stow_bin, "apply", "--delta", edited, "--base", base, *reg)

    err = apply_edited("link.json", link_changes=[{"path": ".env", "kind": "added", "to": "/home/u/.env"}])
    assert err["code"] == "sensitive_path" and ".env" in err["message"]
    err = apply_edited("message.json", message="m" * 100_000)
    assert err["code"] == "invalid_delta"
    err = apply_edited("dirs.json", dirs=[{"path": "../up", "mode": 0o755}])
    assert err["code"] == "invalid_delta"
    assert ok(stow_bin, "log", "--id", wsid, *reg)["checkpoints"] == before
    # The document itself still applies.
    assert ok(stow_bin, "apply", "--delta", path, "--base", base, *reg)["parent_checkpoint_id"] == base


# ---------------------------------------------------------------- gc


def test_gc_frees_unreferenced_blobs(stow_bin, workdir):
    # A registry that was never created stays uncreated.
    never = workdir / "never"
    g = ok(stow_bin, "gc", "--registry-dir", never, "--team", "t")
    assert g == {"version": 1, "registry_dir": str(never / "teams" / "t"), "freed_blobs": 0, "freed_bytes": 0}
    g = ok(stow_bin, "gc", "--registry-dir", never)
    assert (g["freed_blobs"], g["freed_bytes"]) == (0, 0)
    assert not never.exists()

    p = prepare_tree(stow_bin, workdir, {"a.txt": b"alpha", "b.txt": b"bravo"})
    wsid, root = p["workspace_id"], workdir / "w"
    reg = ["--registry-dir", workdir / "reg"]
    g = ok(stow_bin, "gc", *reg)
    assert g["registry_dir"] == p["registry_dir"] and (g["freed_blobs"], g["freed_bytes"]) == (0, 0)

    c1 = ok(stow_bin, "checkpoint", "--id", wsid, *reg)["checkpoint_id"]
    (root / "c.txt").write_bytes(b"only in the second checkpoint")
    c2 = ok(stow_bin, "checkpoint", "--id", wsid, "--parent", c1, *reg)["checkpoint_id"]
    g = ok(stow_bin, "gc", *reg)
    assert (g["freed_blobs"], g["freed_bytes"]) == (0, 0)  # everything is referenced
    dl = ok(stow_bin, "checkpoint-delete", "--checkpoint-id", c2, *reg)
    assert dl["deleted"] is True
    assert (dl["freed_blobs"], dl["freed_bytes"]) == (1, len(b"only in the second checkpoint"))
    g = ok(stow_bin, "gc", *reg)
    assert (g["freed_blobs"], g["freed_bytes"]) == (0, 0)  # deletion already collected
    r = ok(stow_bin, "restore", "--checkpoint-id", c1, "--root", workdir / "r1", *reg)
    assert (workdir / "r1" / "a.txt").read_bytes() == b"alpha" and not (workdir / "r1" / "c.txt").exists()
    ok(stow_bin, "destroy", "--id", r["workspace_id"], *reg)

    # An import refused at admission may leave blobs behind; gc removes at
    # most those, never what c1 needs.
    q = prepare_tree(stow_bin, workdir, {"q.txt": b"from another registry " * 10},
                     root="wq", registry="regq", src="inq")
    cq = ok(stow_bin, "checkpoint", "--id", q["workspace_id"], "--registry-dir", workdir / "regq")
    ok(stow_bin, "export", "--checkpoint-id", cq["checkpoint_id"], "--output", workdir / "q.tar.gz",
       "--registry-dir", workdir / "regq")
    ok(stow_bin, "policy", "set", "--max-checkpoints", "1", *reg)
    err = fail(stow_bin, "import", "--archive", workdir / "q.tar.gz", *reg)
    assert err["code"] == "capacity_exceeded"
    g = ok(stow_bin, "gc", *reg)
    assert g["freed_blobs"] <= 1 and g["freed_bytes"] <= cq["bytes"]
    g = ok(stow_bin, "gc", *reg)
    assert (g["freed_blobs"], g["freed_bytes"]) == (0, 0)
    ok(stow_bin, "restore", "--checkpoint-id", c1, "--root", workdir / "r2", *reg)
    assert (workdir / "r2" / "b.txt").read_bytes() == b"bravo"
    ok(stow_bin, "policy", "set", "--max-checkpoints", "0", *reg)
    imp = ok(stow_bin, "import", "--archive", workdir / "q.tar.gz", *reg)
    assert imp["checkpoint_id"] == cq["checkpoint_id"] and imp["bytes"] == cq["bytes"]
