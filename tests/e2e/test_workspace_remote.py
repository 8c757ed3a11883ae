"""Remotes through the real binary and real S3 services, against both a
`stow-s3 serve` (which checks signatures) and a `moto_server`: round trips
between two registries, child pushes that send only what changed, a push
killed with SIGKILL and rerun, concurrent pushes, tampered remotes, bounds,
odd prefixes and handoff through a remote. Refusals, credentials and the
AWS chain are in test_workspace_remote_refusals.py."""


import hashlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import pytest
from botocore.config import Config

from s3server import WorkspaceServer, wait_until
from test_workspace import ok, ws
from test_workspace_transfer import fail, prepare_tree, tree

from remotekit import *  # noqa: F403 (services, fixtures, helpers)


def test_round_trip_between_registries(stow_bin, workdir, service):
    rng = random.Random(7)
    big = rng.randbytes(9 * MIB + 17)  # past 8 MiB: goes up in two parts
    files = {
        "README.md": b"# project\n",
        "src/app/main.py": b"print('main')\n",
        "src/app/util/deep/nested/leaf.txt": b"a leaf five levels down\n",
        "bin/run.sh": b"#!/bin/sh\necho run\n",
        "empty.txt": b"",
        "data/big.bin": big,
        "copies/one.txt": b"the same bytes twice\n",
        "copies/two.txt": b"the same bytes twice\n",
        "private.key.txt": b"mode 0600\n",
    }
    p = prepare_tree(stow_bin, workdir, files, registry="regA")
    wsid, root = p["workspace_id"], workdir / "w"
    os.chmod(root / "bin" / "run.sh", 0o755)
    os.chmod(root / "private.key.txt", 0o600)

    # Objects through the workspace's S3 view: a key that is no path, an
    # object of another bucket, and a file written with a content type.
    srv = WorkspaceServer(stow_bin, wsid, workdir / "regA")
    try:
        s3w = srv.client()
        s3w.put_object(Bucket=srv.bucket, Key="odd:key", Body=b"private object",
                       ContentType="text/x-odd", Metadata={"run": "7"})
        s3w.create_bucket(Bucket="scratch")
        s3w.put_object(Bucket="scratch", Key="s/1.bin", Body=b"scratch " * 100)
        s3w.put_object(Bucket=srv.bucket, Key="notes/typed.txt", Body=b"typed", ContentType="text/plain")
    finally:
        assert srv.stop() == 0
    source = tree(root)
    assert source["bin/run.sh"][0] == 0o755 and source["private.key.txt"][0] == 0o600
    assert "notes/typed.txt" in source and "odd:key" not in source

    regA = ["--registry-dir", workdir / "regA"]
    c = ok(stow_bin, "checkpoint", "--id", wsid, "--portable", *regA)
    cp = c["checkpoint_id"]
    assert c["objects"] == 2 and c["files"] == len(source)
    expected = payloads([*files_of(root).values(), b"private object", b"scratch " * 100])
    assert len(expected) == len(source) + 2 - 1  # the two copies share one blob

    bucket = service.bucket()
    url = f"s3://{bucket}/teams/alpha"
    env = service.env()
    added = add_remote(stow_bin, regA, "origin", service, url + "/")
    assert added == {"name": "origin", "url": url + "/", "endpoint_url": service.endpoint,
                     "region": service.region}
    stored = json.loads((workdir / "regA" / ".stow" / "remotes.json").read_text())
    assert stored["remotes"]["origin"]["url"] == url + "/"

    pushed = ok(stow_bin, "push", "--checkpoint-id", cp, "--remote", "origin", "--timeout", "60s", *regA, env=env)
    assert pushed == {
        "checkpoint_id": cp, "workspace_id": wsid, "remote_url": url,
        "uploaded_blobs": len(expected), "uploaded_bytes": sum(expected.values()),
        "skipped_blobs": 0, "skipped_bytes": 0, "manifest": "uploaded",
    }

    # The layout: one blob per distinct payload, named by its digest, with
    # its digest as metadata; the big one in parts; the manifest beside.
    s3 = service.client()
    objs = remote_keys(service, bucket, "teams/alpha/")
    assert set(objs) == {f"blobs/{sha}" for sha in expected} | {f"checkpoints/{cp}.json"}
    big_sha = hashlib.sha256(big).hexdigest()
    for sha, size in expected.items():
        key = f"teams/alpha/blobs/{sha}"
        assert objs[f"blobs/{sha}"]["Size"] == size
        head = s3.head_object(Bucket=bucket, Key=key)
        assert head["Metadata"].get("sha256") == sha
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert hashlib.sha256(body).hexdigest() == sha
        if sha == big_sha:
            assert head["ETag"].endswith('-2"'), head["ETag"]
        else:
            assert "-" not in head["ETag"], head["ETag"]
    doc = json.loads(s3.get_object(Bucket=bucket, Key=f"teams/alpha/checkpoints/{cp}.json")["Body"].read())
    assert doc["manifest"]["id"] == cp and doc["manifest"]["workspace_id"] == wsid
    assert sorted(f["path"] for f in doc["manifest"]["files"]) == sorted(source)

    listed = remote_ok(stow_bin, "checkpoints", "origin", *regA, env=env)
    assert listed["remote_url"] == url
    [row] = listed["checkpoints"]
    assert (row["checkpoint_id"], row["workspace_id"]) == (cp, wsid)
    assert (row["files"], row["bytes"]) == (c["files"], c["bytes"])
    assert row["manifest_bytes"] == objs[f"checkpoints/{cp}.json"]["Size"] and "problem" not in row

    # Registry B, "another machine": the same remote, its own name for it.
    regB = ["--registry-dir", workdir / "regB"]
    add_remote(stow_bin, regB, "shared", service, url)
    assert ok(stow_bin, "remote-list", "--remote", "shared", *regB, env=env) == listed
    pulled = ok(stow_bin, "pull", "--checkpoint-id", cp, "--remote", "shared", *regB, env=env)
    assert pulled["checkpoint_id"] == cp and pulled["workspace_id"] == wsid
    assert (pulled["files"], pulled["bytes"], pulled["objects"]) == (c["files"], c["bytes"], c["objects"])
    assert pulled["remote_url"] == url
    assert (pulled["downloaded_blobs"], pulled["downloaded_bytes"], pulled["local_blobs"]) == (
        len(expected), sum(expected.values()), 0)
    assert checkpoint_ids(workdir / "regB") == [cp]
    assert leftovers(workdir / "regB")[0] == []
    err = fail(stow_bin, "pull", "--checkpoint-id", cp, "--remote", "shared", *regB, env=env)
    assert err["code"] == "already_exists"

    a = ok(stow_bin, "adopt", "--remote", "shared", "--checkpoint-id", cp, "--root", workdir / "adopted",
           *regB, env=env)
    assert a["checkpoint_id"] == cp and a["workspace_id"] != wsid
    assert a["registry_dir"] == str(workdir / "regB") and a["root"] == str(workdir / "adopted")
    assert tree(workdir / "adopted") == source
    assert (workdir / "adopted" / "data" / "big.bin").read_bytes() == big

    # The bucket's objects came along, properties and all.
    srv = WorkspaceServer(stow_bin, a["workspace_id"], workdir / "regB")
    try:
        s3b = srv.client()
        got = s3b.get_object(Bucket=srv.bucket, Key="odd:key")
        assert got["Body"].read() == b"private object"
        assert (got["ContentType"], got["Metadata"]) == ("text/x-odd", {"run": "7"})
        assert s3b.get_object(Bucket="scratch", Key="s/1.bin")["Body"].read() == b"scratch " * 100
        assert s3b.head_object(Bucket=srv.bucket, Key="notes/typed.txt")["ContentType"] == "text/plain"
    finally:
        assert srv.stop() == 0

    # adopt --remote into a third registry pulls on its own.
    regC = ["--registry-dir", workdir / "regC"]
    add_remote(stow_bin, regC, "origin", service, url)
    a3 = ok(stow_bin, "adopt", "--remote", "origin", "--checkpoint-id", cp, "--root", workdir / "adopted3",
            *regC, env=env)
    assert a3["checkpoint_id"] == cp and checkpoint_ids(workdir / "regC") == [cp]
    assert tree(workdir / "adopted3") == source
    # Nothing on the remote changed through all the pulls.
    assert set(remote_keys(service, bucket, "teams/alpha/")) == set(objs)


# ---------------------------------------------------------------- 2. deltas


def test_child_push_uploads_only_what_changed(stow_bin, workdir, service):
    files = {f"src/m{i:02d}.txt": f"module {i}\n".encode() * (i + 1) for i in range(30)}
    files["run.sh"] = b"#!/bin/sh\n"
    p = prepare_tree(stow_bin, workdir, files, registry="regA")
    wsid, root = p["workspace_id"], workdir / "w"
    regA = ["--registry-dir", workdir / "regA"]
    env = service.env()
    parent = ok(stow_bin, "checkpoint", "--id", wsid, *regA)["checkpoint_id"]
    bucket = service.bucket()
    add_remote(stow_bin, regA, "origin", service, f"s3://{bucket}/p")
    first = ok(stow_bin, "push", "--checkpoint-id", parent, "--remote", "origin", *regA, env=env)
    assert (first["uploaded_blobs"], first["manifest"]) == (31, "uploaded")
    before = blob_keys(service, bucket, "p/")
    assert len(before) == 31

    # Two files change, a third only changes mode (same blob).
    new3, new7 = b"module three, rewritten\n", b"module seven, rewritten at length\n" * 3
    (root / "src/m03.txt").write_bytes(new3)
    (root / "src/m07.txt").write_bytes(new7)
    os.chmod(root / "run.sh", 0o755)
    child = ok(stow_bin, "checkpoint", "--id", wsid, "--parent", parent, *regA)
    cp = child["checkpoint_id"]
    distinct = payloads(files_of(root).values())
    assert len(distinct) == 31

    mark = service.log_mark()
    pushed = ok(stow_bin, "push", "--checkpoint-id", cp, "--remote", "origin", *regA, env=env)
    assert pushed["manifest"] == "uploaded"
    assert (pushed["uploaded_blobs"], pushed["uploaded_bytes"]) == (2, len(new3) + len(new7))
    assert pushed["skipped_blobs"] == 29
    assert pushed["skipped_bytes"] == sum(distinct.values()) - len(new3) - len(new7)
    puts = service.puts_since(mark)
    assert len(puts) == 3 and all(s == 200 for _, s in puts), puts  # two blobs, then the manifest
    if service.name == "moto":
        assert {k for k, _ in puts} == {f"p/blobs/{hashlib.sha256(b).hexdigest()}" for b in (new3, new7)} | {
            f"p/checkpoints/{cp}.json"}
    after = blob_keys(service, bucket, "p/")
    assert after - before == {f"blobs/{hashlib.sha256(b).hexdigest()}" for b in (new3, new7)}

    # Pushing again sends nothing at all.
    mark = service.log_mark()
    for c in (cp, parent):
        again = ok(stow_bin, "push", "--checkpoint-id", c, "--remote", "origin", *regA, env=env)
        assert again["manifest"] == "already_present"
        assert (again["uploaded_blobs"], again["uploaded_bytes"]) == (0, 0)
        assert again["skipped_blobs"] == 31
    assert service.puts_since(mark) == []
    assert blob_keys(service, bucket, "p/") == after

    # Where the parent is absent, the child goes up whole.
    add_remote(stow_bin, regA, "elsewhere", service, f"s3://{bucket}/q")
    whole = ok(stow_bin, "push", "--checkpoint-id", cp, "--remote", "elsewhere", *regA, env=env)
    assert (whole["uploaded_blobs"], whole["uploaded_bytes"]) == (31, sum(distinct.values()))

    # A registry holding the parent pulls only the two new blobs.
    regB = ["--registry-dir", workdir / "regB"]
    add_remote(stow_bin, regB, "origin", service, f"s3://{bucket}/p")
    ok(stow_bin, "pull", "--checkpoint-id", parent, "--remote", "origin", *regB, env=env)
    pulled = ok(stow_bin, "pull", "--checkpoint-id", cp, "--remote", "origin", *regB, env=env)
    assert pulled["parent_checkpoint_id"] == parent
    assert (pulled["downloaded_blobs"], pulled["downloaded_bytes"], pulled["local_blobs"]) == (
        2, len(new3) + len(new7), 29)
    ok(stow_bin, "restore", "--checkpoint-id", cp, "--root", workdir / "r", *regB)
    assert tree(workdir / "r") == tree(root)
    assert tree(workdir / "r")["run.sh"][0] == 0o755


# ---------------------------------------------------------------- 3. SIGKILL


def test_push_killed_mid_way_then_rerun(stow_bin, workdir, service):
    files = many_files(service.many, seed=3)
    p = prepare_tree(stow_bin, workdir, files, registry="regA")
    wsid, root = p["workspace_id"], workdir / "w"
    regA = ["--registry-dir", workdir / "regA"]
    cp = ok(stow_bin, "checkpoint", "--id", wsid, *regA)["checkpoint_id"]
    total = payloads(files.values())
    assert len(total) == len(files)
    bucket = service.bucket()
    add_remote(stow_bin, regA, "origin", service, f"s3://{bucket}/k")
    env = service.env()
    s3 = service.client()

    mark = service.log_mark()
    proc = subprocess.Popen([stow_bin, "workspace", "push", "--checkpoint-id", cp, "--remote", "origin",
                             *[str(a) for a in regA]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        def some_blobs():
            assert proc.poll() is None, "the push finished before it could be killed; make it bigger"
            return s3.list_objects_v2(Bucket=bucket, Prefix="k/blobs/", MaxKeys=20).get("KeyCount", 0) >= 20
        assert wait_until(some_blobs, timeout=60, interval=0.005)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL

    # Requests the server had whole when the client died may still land.
    present = set()
    while True:
        now = blob_keys(service, bucket, "k/")
        if now == present:
            break
        present = now
        time.sleep(0.3)
    assert 20 <= len(present) < len(total)
    assert present <= {f"blobs/{sha}" for sha in total}
    for key in present:  # only whole blobs, never a torn one
        body = s3.get_object(Bucket=bucket, Key=f"k/{key}")["Body"].read()
        assert hashlib.sha256(body).hexdigest() == key[len("blobs/"):]
    killed_puts = service.puts_since(mark)
    # No manifest: the checkpoint is not on the remote.
    assert not any(k.startswith("checkpoints/") for k in remote_keys(service, bucket, "k/"))
    regB = ["--registry-dir", workdir / "regB"]
    add_remote(stow_bin, regB, "origin", service, f"s3://{bucket}/k")
    err = fail(stow_bin, "pull", "--checkpoint-id", cp, "--remote", "origin", *regB, env=env)
    assert err["code"] == "not_found"
    assert checkpoint_ids(workdir / "regB") == []
    assert ok(stow_bin, "remote-list", "--remote", "origin", *regB, env=env)["checkpoints"] == []

    # The rerun sends exactly what is missing.
    mark = service.log_mark()
    rerun = ok(stow_bin, "push", "--checkpoint-id", cp, "--remote", "origin", *regA, env=env)
    assert rerun["manifest"] == "uploaded"
    assert rerun["uploaded_blobs"] + len(present) == len(total)
    assert (rerun["skipped_blobs"], rerun["uploaded_bytes"]) == (
        len(present), sum(total.values()) - sum(total[k[len("blobs/"):]] for k in present))
    puts = service.puts_since(mark)
    assert [s for _, s in puts if s != 200] == [], "a blob was sent again"
    assert len(puts) == rerun["uploaded_blobs"] + 1
    # Every PUT the killed push had acknowledged made one of those blobs (a
    # request cut off with the client may land without being logged).
    ok_killed = [(k, s) for k, s in killed_puts if s == 200]
    assert 0 < len(ok_killed) <= len(present)
    if service.name == "moto":
        assert {k for k, _ in ok_killed} <= {f"k/{b}" for b in present}
        assert {k for k, _ in puts} & {f"k/{b}" for b in present} == set()  # none sent again
        assert {k for k, _ in puts} == {f"k/{b}" for b in {f"blobs/{sha}" for sha in total} - present} | {
            f"k/checkpoints/{cp}.json"}
    assert blob_keys(service, bucket, "k/") == {f"blobs/{sha}" for sha in total}

    pulled = ok(stow_bin, "pull", "--checkpoint-id", cp, "--remote", "origin", *regB, env=env)
    assert pulled["downloaded_blobs"] == len(total)
    ok(stow_bin, "restore", "--checkpoint-id", cp, "--root", workdir / "r", *regB)
    assert tree(workdir / "r") == tree(root)


# ---------------------------------------------------------------- 4. concurrency


def test_concurrent_pushes_of_overlapping_checkpoints(stow_bin, workdir, service):
    n = service.many // 4
    files = many_files(n, seed=4, size=200)
    p = prepare_tree(stow_bin, workdir, files, registry="regA")
    wsid, root = p["workspace_id"], workdir / "w"
    regA = ["--registry-dir", workdir / "regA"]
    parent = ok(stow_bin, "checkpoint", "--id", wsid, *regA)["checkpoint_id"]
    parent_tree = tree(root)
    for i, rel in enumerate(sorted(files)[: n // 3]):
        (root / rel).write_bytes(f"changed {i}\n".encode() * 9)
    (root / "added" / "x").mkdir(parents=True)
    (root / "added" / "x" / "new.bin").write_bytes(os.urandom(3000))
    child = ok(stow_bin, "checkpoint", "--id", wsid, "--parent", parent, *regA)["checkpoint_id"]
    child_tree = tree(root)
    union = payloads(files.values()) | payloads(files_of(root).values())

    bucket = service.bucket()
    add_remote(stow_bin, regA, "origin", service, f"s3://{bucket}")
    env = service.env()
    # Each process waits at a gate (a shell reading a line) so that all
    # three start at once rather than one process start apart.
    procs = [subprocess.Popen(["sh", "-c", 'read go && exec "$0" "$@"', stow_bin, "workspace", "push",
                               "--checkpoint-id", c, "--remote", "origin", *[str(a) for a in regA]],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env)
             for c in (child, parent, child)]
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"{out} {err}"
        results.append(json.loads(out))
    c1, pp, c2 = results
    assert pp["checkpoint_id"] == parent and c1["checkpoint_id"] == c2["checkpoint_id"] == child
    # One of the two pushes of the child wrote its manifest; the other found it.
    assert sorted([c1["manifest"], c2["manifest"]]) == ["already_present", "uploaded"]
    assert pp["manifest"] == "uploaded"
    for r, c in ((c1, child), (pp, parent), (c2, child)):
        want = payloads(files_of(root).values()) if c == child else payloads(files.values())
        assert r["uploaded_blobs"] + r["skipped_blobs"] == len(want)
        assert r["uploaded_bytes"] + r["skipped_bytes"] == sum(want.values())
    objs = remote_keys(service, bucket)
    assert set(objs) == {f"blobs/{s}" for s in union} | {f"checkpoints/{c}.json" for c in (parent, child)}
    for sha, size in union.items():
        assert objs[f"blobs/{sha}"]["Size"] == size
    # Create-only writes: every blob was created by exactly one push.
    assert sum(r["uploaded_blobs"] for r in results) == len(union)

    regB = ["--registry-dir", workdir / "regB"]
    add_remote(stow_bin, regB, "origin", service, f"s3://{bucket}")
    for c, want in ((parent, parent_tree), (child, child_tree)):
        ok(stow_bin, "pull", "--checkpoint-id", c, "--remote", "origin", *regB, env=env)
        ok(stow_bin, "restore", "--checkpoint-id", c, "--root", workdir / f"r-{c}", *regB)
        assert tree(workdir / f"r-{c}") == want


# ---------------------------------------------------------------- 5. tampering


def test_tampered_remote_is_refused_and_publishes_nothing(stow_bin, workdir, service):
    rng = random.Random(5)
    big = rng.randbytes(9 * MIB)
    files = {f"f{i:02d}.txt": f"payload {i} ".encode() * 40 for i in range(40)}
    files["big.bin"] = big
    p = prepare_tree(stow_bin, workdir, files, registry="regA")
    regA = ["--registry-dir", workdir / "regA"]
    cp = ok(stow_bin, "checkpoint", "--id", p["workspace_id"], *regA)["checkpoint_id"]
    bucket = service.bucket()
    add_remote(stow_bin, regA, "origin", service, f"s3://{bucket}/t")
    env = service.env()
    ok(stow_bin, "push", "--checkpoint-id", cp, "--remote", "origin", *regA, env=env)
    s3 = service.client()
    victim = f"t/blobs/{hashlib.sha256(files['f17.txt']).hexdigest()}"
    good = files["f17.txt"]
    big_key = f"t/blobs/{hashlib.sha256(big).hexdigest()}"

    regB_dir = workdir / "regB"
    regB = ["--registry-dir", regB_dir]
    add_remote(stow_bin, regB, "origin", service, f"s3://{bucket}/t")
    remotes_before = (regB_dir / ".stow" / "remotes.json").read_bytes()

    def refused(what):
        err = fail(stow_bin, "pull", "--checkpoint-id", cp, "--remote", "origin", *regB, env=env)
        assert err["code"] == "corrupt_remote", (what, err)
        assert checkpoint_ids(regB_dir) == [], what
        staged, stored = leftovers(regB_dir)
        assert staged == [], (what, staged)
        assert stored == [], (what, stored)
        assert ok(stow_bin, "list", *regB)["count"] == 0
        err = fail(stow_bin, "adopt", "--remote", "origin", "--checkpoint-id", cp,
                   "--root", workdir / "adopted", *regB, env=env)
        assert err["code"] == "corrupt_remote", (what, err)
        assert not (workdir / "adopted").exists() and checkpoint_ids(regB_dir) == []
        return err

    flipped = bytearray(good)
    flipped[len(flipped) // 2] ^= 0x01
    s3.put_object(Bucket=bucket, Key=victim, Body=bytes(flipped))  # same size
    assert "sha256" in refused("same size")["message"]
    s3.put_object(Bucket=bucket, Key=victim, Body=good + b"!")
    refused("longer")
    s3.put_object(Bucket=bucket, Key=victim, Body=good[:-1])
    refused("shorter")
    s3.delete_object(Bucket=bucket, Key=victim)
    assert "missing" in refused("deleted")["message"]
    s3.put_object(Bucket=bucket, Key=victim, Body=good)
    bad_big = bytearray(big)
    bad_big[5 * MIB] ^= 0xFF
    s3.put_object(Bucket=bucket, Key=big_key, Body=bytes(bad_big))
    refused("big blob, same size")
    s3.put_object(Bucket=bucket, Key=big_key, Body=big)
    manifest_key = f"t/checkpoints/{cp}.json"
    manifest = s3.get_object(Bucket=bucket, Key=manifest_key)["Body"].read()
    s3.put_object(Bucket=bucket, Key=manifest_key, Body=manifest[:-10])
    refused("truncated manifest")
    # A manifest under another checkpoint's name.
    other = "cp_0123456789abcdef01234567"
    s3.put_object(Bucket=bucket, Key=f"t/checkpoints/{other}.json", Body=manifest)
    err = fail(stow_bin, "pull", "--checkpoint-id", other, "--remote", "origin", *regB, env=env)
    assert err["code"] == "corrupt_remote" and checkpoint_ids(regB_dir) == []
    listed = ok(stow_bin, "remote-list", "--remote", "origin", *regB, env=env)["checkpoints"]
    rows = {r["checkpoint_id"]: r for r in listed}
    assert set(rows) == {cp, other} and "problem" in rows[cp] and "problem" in rows[other]
    s3.put_object(Bucket=bucket, Key=manifest_key, Body=manifest)
    assert (regB_dir / ".stow" / "remotes.json").read_bytes() == remotes_before

    # Push checks what it finds too: a wrong-sized blob under the right name.
    s3.put_object(Bucket=bucket, Key=victim, Body=good + b"!")
    q = prepare_tree(stow_bin, workdir, {"same.txt": good}, root="w2", registry="regA", src="in2")
    cq = ok(stow_bin, "checkpoint", "--id", q["workspace_id"], *regA)["checkpoint_id"]
    err = fail(stow_bin, "push", "--checkpoint-id", cq, "--remote", "origin", *regA, env=env)
    assert err["code"] == "corrupt_remote"
    assert f"t/checkpoints/{cq}.json" not in remote_keys(service, bucket)
    s3.put_object(Bucket=bucket, Key=victim, Body=good)

    # A valid manifest that is not this checkpoint's: a push refuses it.
    forged = json.loads(manifest)
    forged["manifest"]["created"] = "2001-01-01T00:00:00Z"
    s3.put_object(Bucket=bucket, Key=manifest_key, Body=json.dumps(forged).encode())
    err = fail(stow_bin, "push", "--checkpoint-id", cp, "--remote", "origin", *regA, env=env)
    assert err["code"] == "already_exists" and "different" in err["message"]
    s3.put_object(Bucket=bucket, Key=manifest_key, Body=manifest)
    again = ok(stow_bin, "push", "--checkpoint-id", cp, "--remote", "origin", *regA, env=env)
    assert again["manifest"] == "already_present"

    # Control: repaired, the same pull goes through.
    pulled = ok(stow_bin, "pull", "--checkpoint-id", cp, "--remote", "origin", *regB, env=env)
    assert pulled["downloaded_blobs"] == 41 and checkpoint_ids(regB_dir) == [cp]
    assert leftovers(regB_dir)[0] == []
    ok(stow_bin, "restore", "--checkpoint-id", cp, "--root", workdir / "r", *regB)
    assert tree(workdir / "r") == tree(workdir / "w")


# ---------------------------------------------------------------- bounds


def test_pull_bounds_and_sensitive_paths(stow_bin, workdir, service):
    files = {".env": b"SECRET=1\n", "app.txt": b"app", "lib/b.txt": b"bb" * 50}
    total = sum(len(b) for b in files.values())
    p = prepare_tree(stow_bin, workdir, files, registry="regA", include_sensitive_inputs=True)
    regA = ["--registry-dir", workdir / "regA"]
    cp = ok(stow_bin, "checkpoint", "--id", p["workspace_id"], "--include-sensitive", *regA)["checkpoint_id"]
    bucket = service.bucket()
    env = service.env()
    add_remote(stow_bin, regA, "origin", service, f"s3://{bucket}")
    # A remote is shared: pushing credentials needs the opt-in, as export does.
    err = fail(stow_bin, "push", "--checkpoint-id", cp, "--remote", "origin", *regA, env=env)
    assert err["code"] == "sensitive_path"
    assert remote_keys(service, bucket) == {}
    ok(stow_bin, "push", "--checkpoint-id", cp, "--remote", "origin", "--include-sensitive", *regA, env=env)
    regB_dir = workdir / "regB"
    regB = ["--registry-dir", regB_dir]
    add_remote(stow_bin, regB, "origin", service, f"s3://{bucket}")
    pull = ["pull", "--checkpoint-id", cp, "--remote", "origin", *regB]

    def nothing_published():
        assert checkpoint_ids(regB_dir) == []
        assert leftovers(regB_dir) == ([], [])

    assert fail(stow_bin, *pull, env=env)["code"] == "sensitive_path"
    nothing_published()
    err = fail(stow_bin, "adopt", "--remote", "origin", "--checkpoint-id", cp, "--root", workdir / "a",
               *regB, env=env)
    assert err["code"] == "sensitive_path" and not (workdir / "a").exists()
    nothing_published()
    assert fail(stow_bin, *pull, "--include-sensitive", "--max-files", "2", env=env)["code"] == "capacity_exceeded"
    nothing_published()
    err = fail(stow_bin, *pull, "--include-sensitive", "--max-bytes", total - 1, env=env)
    assert err["code"] == "capacity_exceeded"
    nothing_published()
    pulled = ok(stow_bin, *pull, "--include-sensitive", "--max-files", "3", "--max-bytes", total, env=env)
    assert (pulled["files"], pulled["bytes"], pulled["downloaded_blobs"]) == (3, total, 3)
    assert checkpoint_ids(regB_dir) == [cp]


def test_prefix_with_unusual_characters(stow_bin, workdir, service):
    p = prepare_tree(stow_bin, workdir, {"a.txt": b"alpha", "b/c.txt": b"charlie"}, registry="regA")
    regA = ["--registry-dir", workdir / "regA"]
    cp = ok(stow_bin, "checkpoint", "--id", p["workspace_id"], *regA)["checkpoint_id"]
    bucket = service.bucket()
    env = service.env()
    prefix = "team a/\u03b2+x=1,(v2)"
    add_remote(stow_bin, regA, "origin", service, f"s3://{bucket}/{prefix}")
    pushed = ok(stow_bin, "push", "--checkpoint-id", cp, "--remote", "origin", *regA, env=env)
    assert pushed["remote_url"] == f"s3://{bucket}/{prefix}" and pushed["uploaded_blobs"] == 2
    keys = set(remote_keys(service, bucket))
    assert keys == {f"{prefix}/blobs/{hashlib.sha256(b).hexdigest()}" for b in (b"alpha", b"charlie")} | {
        f"{prefix}/checkpoints/{cp}.json"}
    # What is no checkpoint manifest under checkpoints/ is not listed.
    s3 = service.client()
    s3.put_object(Bucket=bucket, Key=f"{prefix}/checkpoints/README", Body=b"notes")
    s3.put_object(Bucket=bucket, Key=f"{prefix}/checkpoints/cp_nothex.json", Body=b"{}")
    rows = ok(stow_bin, "remote-list", "--remote", "origin", *regA, env=env)["checkpoints"]
    assert [r["checkpoint_id"] for r in rows] == [cp]
    regB = ["--registry-dir", workdir / "regB"]
    add_remote(stow_bin, regB, "origin", service, f"s3://{bucket}/{prefix}")
    ok(stow_bin, "adopt", "--remote", "origin", "--checkpoint-id", cp, "--root", workdir / "r", *regB, env=env)
    assert tree(workdir / "r") == tree(workdir / "w")


# ---------------------------------------------------------------- 6. secrets


def test_handoff_through_a_remote(stow_bin, workdir, service):
    files = {"app/main.py": b"print(1)\n", "run.sh": b"#!/bin/sh\n", "empty": b""}
    p = prepare_tree(stow_bin, workdir, files, registry="regA", team="platform")
    wsid, root = p["workspace_id"], workdir / "w"
    os.chmod(root / "run.sh", 0o755)
    team = ["--registry-dir", workdir / "regA", "--team", "platform"]
    cp = ok(stow_bin, "checkpoint", "--id", wsid, "--portable", *team)["checkpoint_id"]
    bucket = service.bucket()
    url = f"s3://{bucket}/handoffs"
    env = service.env()
    add_remote(stow_bin, team, "origin", service, url)
    # Remotes belong to their partition.
    assert remote_ok(stow_bin, "list", "--registry-dir", workdir / "regA")["remotes"] == []
    assert [r["name"] for r in remote_ok(stow_bin, "list", *team)["remotes"]] == ["origin"]

    err = fail(stow_bin, "handoff", "--id", wsid, "--remote", "origin", *team, env=env)
    assert err["code"] == "invalid_request"
    assert blob_keys(service, bucket) == set()
    out = cli(stow_bin, "workspace", "handoff", "--id", wsid, "--checkpoint-id", cp, "--remote", "origin",
              "--archive", workdir / "a.tar.gz", *team, env=env)
    assert out.returncode != 0 and not (workdir / "a.tar.gz").exists()

    h = workdir / "handoff.json"
    rc, printed, _ = ws(stow_bin, "handoff", "--id", wsid, "--checkpoint-id", cp, "--remote", "origin",
                        "--output", h, *team, env=env)
    assert rc == 0 and printed is None
    assert oct(os.stat(h).st_mode & 0o777) == "0o600"
    doc = json.loads(h.read_text())
    assert doc == {"version": 2, "workspace_id": wsid, "checkpoint_id": cp, "team": "platform",
                   "remote": {"url": url, "endpoint_url": service.endpoint, "region": service.region}}
    assert "archive" not in doc and "registry_dir" not in doc
    text = h.read_text()
    assert service.access_key not in text and service.secret_key not in text
    assert f"handoffs/checkpoints/{cp}.json" in remote_keys(service, bucket)
    # Printed instead: the same document; the push is a no-op the second time.
    again = ok(stow_bin, "handoff", "--id", wsid, "--checkpoint-id", cp, "--remote", "origin", *team, env=env)
    assert again == doc
    err = fail(stow_bin, "handoff", "--id", wsid, "--checkpoint-id", cp, "--remote", "origin",
               "--output", h, *team, env=env)
    assert err["code"] == "already_exists" and json.loads(h.read_text()) == doc

    # Another machine: its own registry, no remotes configured, its own keys.
    regB = ["--registry-dir", workdir / "regB"]
    a = ok(stow_bin, "adopt", "--handoff", h, "--root", workdir / "adopted", *regB, env=env)
    assert a["checkpoint_id"] == cp and a["workspace_id"] != wsid and a["team"] == "platform"
    assert a["registry_dir"] == str(workdir / "regB" / "teams" / "platform")
    assert tree(workdir / "adopted") == tree(root)
    assert checkpoint_ids(workdir / "regB" / "teams" / "platform") == [cp]
    # A second adopt reuses the checkpoint it has, once the remote's
    # manifest proves to be the same: it asks the remote (so it needs the
    # keys), downloads and writes nothing.
    state = workdir / "regB" / "teams" / "platform" / ".stow"
    held = [tree(state / "checkpoints"), tree(state / "blobs")]
    assert all(held), "the registry's checkpoints and blobs are where this test looks"
    err = fail(stow_bin, "adopt", "--handoff", h, "--root", workdir / "adopted2", *regB, env=clean_env())
    assert err["code"] == "remote_auth" and not (workdir / "adopted2").exists()
    a2 = ok(stow_bin, "adopt", "--handoff", h, "--root", workdir / "adopted2", *regB, env=env)
    assert a2["checkpoint_id"] == cp and tree(workdir / "adopted2") == tree(root)
    assert [tree(state / "checkpoints"), tree(state / "blobs")] == held

    # A document whose workspace disagrees with the remote's checkpoint.
    forged = workdir / "forged.json"
    forged.write_text(json.dumps({**doc, "workspace_id": "ws_00000000deadbeef"}))
    err = fail(stow_bin, "adopt", "--handoff", forged, "--root", workdir / "forged-root",
               "--registry-dir", workdir / "regC", env=env)
    assert err["code"] == "invalid_request"
    assert not (workdir / "forged-root").exists()
    assert checkpoint_ids(workdir / "regC" / "teams" / "platform") == []
    # One naming a checkpoint the remote lacks.
    absent = workdir / "absent.json"
    absent.write_text(json.dumps({**doc, "checkpoint_id": "cp_000000000000000000000000"}))
    err = fail(stow_bin, "adopt", "--handoff", absent, "--root", workdir / "absent-root",
               "--registry-dir", workdir / "regC", env=env)
    assert err["code"] == "not_found" and not (workdir / "absent-root").exists()
    # One carrying both a remote and an archive.
    both = workdir / "both.json"
    archive = {"path": "x.tar.gz", "sha256": "0" * 64, "bytes": 1, "files": 1}
    both.write_text(json.dumps({**doc, "archive": archive}))
    err = fail(stow_bin, "adopt", "--handoff", both, "--root", workdir / "both-root",
               "--registry-dir", workdir / "regC", env=env)
    assert err["code"] == "invalid_request" and not (workdir / "both-root").exists()


# ---------------------------------------------------------------- echoed secrets
