"""Agent workspaces through the real binary: the linear scenario of
workspace.md §14 (steps 1-4, 10-11), handoff/resume, manifest refusals,
checkpoint deletion and policy."""

import json
import os
import re
import shutil
import subprocess


def ws(stow_bin, *args, env=None, check=True):
    """Runs `stow-s3 workspace ...`; returns (returncode, parsed stdout or None, stderr)."""
    out = subprocess.run(
        [stow_bin, "workspace", *[str(a) for a in args]],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    doc = json.loads(out.stdout) if out.stdout.strip() else None
    if check:
        assert out.returncode == 0, f"{args}: {out.stderr}"
    return out.returncode, doc, out.stderr


def ok(stow_bin, *args, env=None):
    return ws(stow_bin, *args, env=env)[1]


def manifest(path, **fields):
    doc = {"version": 1, **fields}
    path.write_text(json.dumps(doc))
    return path


def test_linear_scenario(stow_bin, workdir):
    src = workdir / "src"
    (src / "nested").mkdir(parents=True)
    (src / "seed.txt").write_text("seed")
    (src / "nested" / "second.txt").write_text("second")
    team = ["--registry-dir", workdir / "registry", "--team", "platform"]

    # 1. prepare
    m = manifest(
        workdir / "task.json",
        root="task1",
        registry_dir="registry",
        team="platform",
        inputs=[{"source": "src", "destination": "."}],
    )
    p1 = ok(stow_bin, "prepare", "--manifest", m)
    assert re.fullmatch(r"ws_[0-9a-f]+", p1["workspace_id"])
    assert p1["seeded_objects"] == 2 and p1["seeded_bytes"] == 10
    assert p1["team"] == "platform"
    assert p1["root"] == str(workdir / "task1")
    assert p1["registry_dir"].startswith(str(workdir))
    assert (workdir / "task1" / "nested" / "second.txt").read_text() == "second"
    # No bound: `remaining` is null (the spec's rule for registry_bound).
    assert p1["capabilities"]["registry_bound"] == {"limit": 0, "count": 1, "remaining": None}
    assert p1["capabilities"]["checkpoint_limits"] == {"max_bytes": 0, "max_count": 0}
    assert p1["base_identity"].startswith("sha256:")
    ws1 = p1["workspace_id"]

    # 3. checkpoints and diff
    c1 = ok(stow_bin, "checkpoint", "--id", ws1, *team)
    assert re.fullmatch(r"cp_[0-9a-f]+", c1["checkpoint_id"])
    assert (c1["files"], c1["bytes"]) == (2, 10)
    (workdir / "task1" / "notes.txt").write_text("x" * 20)
    c2 = ok(stow_bin, "checkpoint", "--id", ws1, "--parent", c1["checkpoint_id"], *team)
    assert c2["parent_checkpoint_id"] == c1["checkpoint_id"]
    assert c2["checkpoint_id"] != c1["checkpoint_id"]
    assert (c2["files"], c2["bytes"]) == (3, 30)
    d = ok(stow_bin, "diff", "--from", c1["checkpoint_id"], "--to", c2["checkpoint_id"], *team)
    assert [(c["path"], c["kind"]) for c in d["changes"]] == [("notes.txt", "added")]

    # 4. a second workspace in the same team
    (workdir / "one").mkdir()
    (workdir / "one" / "nine.txt").write_text("123456789")
    m2 = manifest(
        workdir / "task2.json",
        root="task2",
        registry_dir="registry",
        team="platform",
        inputs=[{"source": "one", "destination": "."}],
    )
    p2 = ok(stow_bin, "prepare", "--manifest", m2)
    ws2 = p2["workspace_id"]
    assert ws2 != ws1 and p2["seeded_objects"] == 1
    c3 = ok(stow_bin, "checkpoint", "--id", ws2, *team)
    assert (c3["files"], c3["bytes"]) == (1, 9)

    # restore into a new root reproduces the tree as a new workspace
    r = ok(stow_bin, "restore", "--checkpoint-id", c2["checkpoint_id"], "--root", workdir / "restored", *team)
    assert r["workspace_id"] not in (ws1, ws2)
    assert (workdir / "restored" / "notes.txt").read_text() == "x" * 20
    ok(stow_bin, "destroy", "--id", r["workspace_id"], *team)

    # 10. collect on the partition path, then destroy
    col = ok(stow_bin, "collect", "--registry-dir", workdir / "registry" / "teams" / "platform")
    assert len(col["results"]) >= 2
    first = col["results"][0]
    assert re.fullmatch(r"ws_[0-9a-f]+", first["id"]) and first["dir"]
    assert first["removed"] is False and first["reason"] == "no-ttl"
    assert ok(stow_bin, "destroy", "--id", ws1, *team)["destroyed"] is True
    assert not (workdir / "task1").exists()

    # 11. prune and list
    pr = ok(stow_bin, "prune", *team)
    assert (pr["count"], pr["removed"]) == (1, 0)
    assert pr["results"][0]["id"] == ws2 and pr["results"][0]["reason"] == "present"
    ls = ok(stow_bin, "list", *team)
    assert ls["count"] == 1 and ls["results"][0]["id"] == ws2 and ls["results"][0]["readable"] is True
    shutil.rmtree(workdir / "task2")
    pr = ok(stow_bin, "prune", *team)
    assert pr["removed"] == 1 and pr["results"][0]["reason"] == "pruned"
    assert ok(stow_bin, "list", *team)["count"] == 0
    # Other partitions never saw any of it.
    assert ok(stow_bin, "list", "--registry-dir", workdir / "registry")["count"] == 0


def test_handoff_and_resume(stow_bin, workdir):
    (workdir / "in").mkdir()
    (workdir / "in" / "a.txt").write_text("a")
    m = manifest(workdir / "t.json", root="w", registry_dir="reg", team="platform",
                 inputs=[{"source": "in", "destination": "."}])
    p = ok(stow_bin, "prepare", "--manifest", m)
    team = ["--registry-dir", workdir / "reg", "--team", "platform"]
    rc, out, _ = ws(stow_bin, "handoff", "--id", p["workspace_id"], "--output", workdir / "h.json", *team)
    assert rc == 0 and out is None
    doc = json.loads((workdir / "h.json").read_text())
    assert doc["version"] == 1 and doc["team"] == "platform" and "checkpoint_id" not in doc
    assert oct(os.stat(workdir / "h.json").st_mode & 0o777) == "0o600"
    res = ok(stow_bin, "resume", "--handoff", workdir / "h.json")
    assert res["workspace_id"] == p["workspace_id"]
    rc, out, err = ws(stow_bin, "resume", "--handoff", workdir / "h.json",
                      "--registry-dir", workdir / "reg", check=False)
    assert rc == 1 and "not both" in out["error"]["message"]
    res = ok(stow_bin, "resume", "--id", p["workspace_id"], *team)
    assert res["team"] == "platform"


def test_refused_manifest_leaves_nothing(stow_bin, workdir):
    (workdir / "in").mkdir()
    (workdir / "in" / ".env").write_text("SECRET=1")
    m = manifest(workdir / "t.json", root="w", registry_dir="reg",
                 inputs=[{"source": "in", "destination": "."}])
    rc, out, _ = ws(stow_bin, "prepare", "--manifest", m, check=False)
    assert rc == 1 and out["error"]["code"] == "sensitive_path"
    assert not (workdir / "w").exists() and not (workdir / "reg").exists()
    m = manifest(workdir / "t.json", root="w", registry_dir="reg", bogus=1,
                 inputs=[{"source": "in", "destination": "."}])
    rc, out, _ = ws(stow_bin, "prepare", "--manifest", m, check=False)
    assert rc == 1 and out["error"]["code"] == "invalid_manifest"
    assert not (workdir / "w").exists() and not (workdir / "reg").exists()


def test_checkpoint_delete_and_policy(stow_bin, workdir):
    (workdir / "in").mkdir()
    (workdir / "in" / "a.txt").write_text("a")
    m = manifest(workdir / "t.json", root="w", registry_dir="reg", max_checkpoints=2,
                 inputs=[{"source": "in", "destination": "."}])
    p = ok(stow_bin, "prepare", "--manifest", m)
    reg = ["--registry-dir", workdir / "reg"]
    c1 = ok(stow_bin, "checkpoint", "--id", p["workspace_id"], *reg)
    c2 = ok(stow_bin, "checkpoint", "--id", p["workspace_id"], "--parent", c1["checkpoint_id"], *reg)
    rc, out, _ = ws(stow_bin, "checkpoint", "--id", p["workspace_id"], *reg, check=False)
    assert rc == 1 and out["error"]["code"] == "capacity_exceeded"
    rc, out, _ = ws(stow_bin, "checkpoint-delete", "--checkpoint-id", c1["checkpoint_id"], *reg, check=False)
    assert rc == 1 and out["error"]["code"] == "refused"
    assert ok(stow_bin, "checkpoint-delete", "--checkpoint-id", c2["checkpoint_id"], *reg)["deleted"] is True
    rc, out, _ = ws(stow_bin, "policy", "set", "--max-checkpoints", "0", "--max-workspaces", "1", *reg)
    assert out["policy"]["max_workspaces"] == 1
    rc, out, _ = ws(stow_bin, "policy", "set", "--max-checkpoint-bytes", "0", "--max-workspaces", "0", *reg)
    shown = ok(stow_bin, "policy", "show", *reg)
    assert shown["usage"] == {"workspaces": 1, "checkpoints": 1, "checkpoint_bytes": 1}
    rc, out, _ = ws(stow_bin, "policy", "set", "--max-checkpoints", "0", "--max-workspaces", "1", *reg)
    m2 = manifest(workdir / "t2.json", root="w2", registry_dir="reg",
                  inputs=[{"source": "in", "destination": "."}])
    rc, out, _ = ws(stow_bin, "prepare", "--manifest", m2, check=False)
    assert rc == 1 and out["error"]["code"] == "capacity_exceeded"
    assert not (workdir / "w2").exists()
    rc, out, _ = ws(stow_bin, "policy", "set", "--max-checkpoints", "0", "--max-workspaces", "0", *reg)
    assert rc == 0
    # A policy current usage already exceeds is refused.
    ok(stow_bin, "prepare", "--manifest", m2)
    rc, out, _ = ws(stow_bin, "policy", "set", "--max-workspaces", "1", *reg, check=False)
    assert rc == 1 and out["error"]["code"] == "capacity_exceeded"


def test_keyed_capture_envelope(stow_bin, workdir):
    (workdir / "in").mkdir()
    (workdir / "in" / "a.txt").write_text("alpha")
    m = manifest(workdir / "t.json", root="w", registry_dir="reg",
                 inputs=[{"source": "in", "destination": "."}])
    p = ok(stow_bin, "prepare", "--manifest", m)
    base = ["checkpoint", "--id", p["workspace_id"], "--registry-dir", workdir / "reg", "--timeout", "30s"]
    rc, out, err = ws(stow_bin, *base, "--request-key", "k-1", "--resolve", check=False)
    assert rc == 1
    assert out["result"]["outcome"] == "unknown" and out["error"]["code"] == "not_found"
    assert "message" not in out["error"] and err
    first = ok(stow_bin, *base, "--request-key", "k-1")
    assert first["version"] == 1 and "error" not in first
    assert first["result"]["outcome"] == "committed" and first["result"]["replayed"] is False
    cp = first["result"]["checkpoint"]
    assert re.fullmatch(r"cp_[0-9a-f]{24}", cp["id"]) and cp["files"] == 1 and cp["bytes"] == 5
    again = ok(stow_bin, *base, "--request-key", "k-1")
    assert again["result"]["replayed"] is True and again["result"]["checkpoint"]["id"] == cp["id"]
    rc, out, _ = ws(stow_bin, *base, "--request-key", "k-1", "--max-files", "3", check=False)
    assert rc == 1 and out["error"]["code"] == "request_conflict" and out["result"]["outcome"] == "unknown"
    assert out["error"] == {"code": "request_conflict", "phase": "resolve", "attempts": 1,
                            "retryable": False, "outcome": "unknown"}
    rc, out, _ = ws(stow_bin, "checkpoint", "--id", p["workspace_id"], "--registry-dir", workdir / "reg",
                    "--request-key", "k-2", check=False)
    assert rc == 1 and out["error"]["code"] == "invalid_request"



def test_keyed_capture_omits_an_absent_parent(stow_bin, workdir):
    """Output rule: an absent member is omitted, never null. A first keyed
    checkpoint has no parent, so `parent_id` is not in its document (nor
    in its replay or resolution); a child's names its parent."""
    (workdir / "in").mkdir()
    (workdir / "in" / "a.txt").write_text("alpha")
    m = manifest(workdir / "t.json", root="w", registry_dir="reg",
                 inputs=[{"source": "in", "destination": "."}])
    p = ok(stow_bin, "prepare", "--manifest", m)
    base = ["checkpoint", "--id", p["workspace_id"], "--registry-dir", workdir / "reg", "--timeout", "30s"]
    for args in (["--request-key", "k-1"], ["--request-key", "k-1"], ["--request-key", "k-1", "--resolve"]):
        rc, out, err = ws(stow_bin, *base, *args, check=False)
        assert rc == 0, err
        cp = out["result"]["checkpoint"]
        assert "parent_id" not in cp, cp
        assert None not in cp.values(), cp
    first = cp["id"]
    (workdir / "w" / "b.txt").write_text("beta")
    child = ok(stow_bin, *base, "--request-key", "k-2", "--parent", first)
    assert child["result"]["checkpoint"]["parent_id"] == first

def test_restore_reproduces_bytes_and_modes(stow_bin, workdir):
    src = workdir / "in"
    (src / "bin").mkdir(parents=True)
    (src / "bin" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(src / "bin" / "run.sh", 0o755)
    (src / "data.bin").write_bytes(bytes(range(256)) * 1000)
    m = manifest(workdir / "t.json", root="w", registry_dir="reg",
                 inputs=[{"source": "in", "destination": "."}])
    p = ok(stow_bin, "prepare", "--manifest", m)
    reg = ["--registry-dir", workdir / "reg"]
    os.chmod(workdir / "w" / "data.bin", 0o600)
    c = ok(stow_bin, "checkpoint", "--id", p["workspace_id"], "--portable", *reg)
    assert c["objects"] == 0
    r = ok(stow_bin, "restore", "--checkpoint-id", c["checkpoint_id"], "--root", workdir / "r", *reg)
    assert r["bucket"] == p["bucket"]
    for rel in ["bin/run.sh", "data.bin"]:
        a, b = workdir / "w" / rel, workdir / "r" / rel
        assert a.read_bytes() == b.read_bytes()
        assert (os.stat(a).st_mode & 0o777) == (os.stat(b).st_mode & 0o777)
    assert r["base_identity"] == ok(stow_bin, "resume", "--id", p["workspace_id"], *reg)["base_identity"]


def test_a_root_inside_the_registry_is_refused(stow_bin, workdir):
    """prepare, restore and adopt refuse a root inside the registry's
    directory (as attach does): gc took such a workspace's files for
    unreferenced blobs and deleted them. Inside another workspace too."""
    (workdir / "in").mkdir()
    (workdir / "in" / "a.txt").write_text("alpha")
    m = manifest(workdir / "t.json", root="w", registry_dir="reg",
                 inputs=[{"source": "in", "destination": "."}])
    p = ok(stow_bin, "prepare", "--manifest", m)
    reg = ["--registry-dir", workdir / "reg"]
    cp = ok(stow_bin, "checkpoint", "--id", p["workspace_id"], *reg)["checkpoint_id"]
    before = sorted(str(x) for x in (workdir / "reg").rglob("*"))
    inside = workdir / "reg" / ".stow" / "blobs" / "zz"
    rc, out, _ = ws(stow_bin, "restore", "--checkpoint-id", cp, "--root", inside, *reg, check=False)
    assert rc == 1 and out["error"]["code"] == "invalid_root", out
    assert "inside the registry" in out["error"]["message"]
    archive = workdir / "a.tar.gz"
    h = workdir / "h.json"
    ok(stow_bin, "handoff", "--id", p["workspace_id"], "--checkpoint-id", cp, "--archive", archive,
       "--output", h, *reg)
    rc, out, _ = ws(stow_bin, "adopt", "--handoff", h, "--root", workdir / "reg" / "adopted", *reg, check=False)
    assert rc == 1 and out["error"]["code"] == "invalid_root", out
    m2 = manifest(workdir / "t2.json", root="reg/w2", registry_dir="reg",
                  inputs=[{"source": "in", "destination": "."}])
    rc, out, _ = ws(stow_bin, "prepare", "--manifest", m2, check=False)
    assert rc == 1 and out["error"]["code"] == "invalid_root", out
    # Nor inside another workspace: its rewind would delete the inner one.
    rc, out, _ = ws(stow_bin, "restore", "--checkpoint-id", cp, "--root", workdir / "w" / "inner", *reg, check=False)
    assert rc == 1 and out["error"]["code"] == "invalid_root", out
    assert "inside workspace" in out["error"]["message"] and not (workdir / "w" / "inner").exists()
    assert sorted(str(x) for x in (workdir / "reg").rglob("*")) == before
    assert ok(stow_bin, "gc", *reg)["freed_blobs"] == 0
    assert (workdir / "w" / "a.txt").read_text() == "alpha"


def test_detach_keeps_a_checkpoint_another_workspace_has_as_its_head(stow_bin, workdir):
    """A handoff adopted in the same registry shares its checkpoint: detaching
    the first workspace leaves it for the adopted one, whose head it is."""
    reg = ["--registry-dir", workdir / "reg"]
    (workdir / "ra").mkdir()
    (workdir / "ra" / "a.txt").write_text("alpha")
    ra = ok(stow_bin, "attach", "--root", workdir / "ra", *reg)["workspace_id"]
    cp = ok(stow_bin, "checkpoint", "--id", ra, *reg)["checkpoint_id"]
    h = workdir / "h.json"
    ok(stow_bin, "handoff", "--id", ra, "--checkpoint-id", cp, "--archive", workdir / "a.tar.gz", "--output", h, *reg)
    rb = ok(stow_bin, "adopt", "--handoff", h, "--root", workdir / "rb", *reg)["workspace_id"]
    ok(stow_bin, "detach", "--id", ra, *reg)
    assert ok(stow_bin, "log", "--id", rb, *reg)["head"] == cp
    assert ok(stow_bin, "status", "--id", rb, *reg)["clean"] is True
    r = ok(stow_bin, "restore", "--checkpoint-id", cp, "--root", workdir / "again", *reg)
    assert (workdir / "again" / "a.txt").read_text() == "alpha" and r["workspace_id"] != rb
