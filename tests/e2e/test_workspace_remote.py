"""Remotes through the real binary and real S3 services: `stow-s3 remote`
add/list/remove/ls, `workspace push`/`pull`/`remote-list`, `adopt --remote`
and `handoff --remote`, against both a `stow-s3 serve` (which checks
signatures) and a `moto_server` (PyPI moto[server]). Round trips between
two registries, child pushes that send only what changed, a push killed
with SIGKILL and rerun, concurrent pushes, tampered remotes, credentials
that never leak, the AWS credential chain and the error codes."""

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

MIB = 1024 * 1024


# ---------------------------------------------------------------- services


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra):
    """The test's environment without any AWS setting of the machine
    (no keys, profiles, endpoint or region leak in), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull, NO_COLOR="1")
    env.update(extra)
    return env


class Service:
    """A running S3 service: endpoint, the keys it accepts, a boto3 client
    and its request log (to count the PUTs a command made)."""

    name = ""
    checks_signatures = False
    # Enough files that a push takes a second or more on this service.
    many = 0

    def __init__(self, endpoint, access_key, secret_key, log_path, region="us-east-1"):
        self.endpoint, self.access_key, self.secret_key = endpoint, access_key, secret_key
        self.region, self.log_path = region, log_path

    def client(self):
        return boto3.client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key, region_name=self.region,
            config=Config(signature_version="s3v4", s3={"addressing_style": "path"},
                          retries={"max_attempts": 2}),
        )

    def env(self, **extra):
        keys = {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}
        return clean_env(**{**keys, **extra})

    def bucket(self):
        name = f"cps-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def log_mark(self):
        return self.log_path.stat().st_size

    def _settled_log(self, mark):
        # A log line can land just after the client saw its response.
        size = -1
        while True:
            now = self.log_path.stat().st_size
            if now == size:
                break
            size = now
            time.sleep(0.15)
        with open(self.log_path, "rb") as fh:
            fh.seek(mark)
            return fh.read().decode(errors="replace")

    def puts_since(self, mark):
        """[(key or None, status)] of the PUT requests logged since `mark`
        (key None where the service does not log it)."""
        raise NotImplementedError


class StowService(Service):
    name = "stow"
    checks_signatures = True
    many = 3000

    def __init__(self, stow_bin, data_dir, log_path):
        keys = ("AKIDSTOWPROBE4242QX", "stow-probe-secret-9f8e7d6c5b4a")
        read_fd, write_fd = os.pipe()
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [stow_bin, "serve", "--port", "0", "--data-dir", str(data_dir), "--backend", "filesystem",
             "--access-key", keys[0], "--secret-key", keys[1], "--max-concurrent-requests", "64",
             "--ready-fd", str(write_fd)],
            pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=self.log,
            env=clean_env(STOW_LOG="info"),
        )
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as ready:
            line = ready.readline()
        assert line, f"stow-s3 serve did not become ready: {log_path.read_text()}"
        self.ready = json.loads(line)
        super().__init__(self.ready["endpoint"], keys[0], keys[1], log_path, self.ready["region"])

    def puts_since(self, mark):
        text = self._settled_log(mark)
        return [(None, int(s)) for s in re.findall(r"\bPUT /s3 (\d{3})\b", text)]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.log.close()
        return rc


class MotoService(Service):
    name = "moto"
    many = 400

    def __init__(self, log_path):
        exe = shutil.which("moto_server")
        if exe is None:
            print("moto_server is not installed (pip install 'moto[server]>=5'); skipping the moto cases")
            pytest.skip("moto_server is not installed (pip install 'moto[server]>=5')")
        port = free_port()
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=clean_env())

        def answers():
            assert self.proc.poll() is None, f"moto_server exited: {log_path.read_text()}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return True
            except OSError:
                return False

        assert wait_until(answers, timeout=30), "moto_server did not start listening"
        # moto accepts any keys; distinctive ones still prove they never leak.
        super().__init__(f"http://127.0.0.1:{port}", "AKIDMOTOPROBE1717ZZ",
                         "moto-probe-secret-1a2b3c4d5e6f", log_path)

    def puts_since(self, mark):
        text = self._settled_log(mark)
        out = []
        for path, status in re.findall(r'"PUT (\S+) HTTP/1\.[01]" (\d{3})', text):
            key, _, query = path.partition("?")
            # /bucket/key; parts of a multipart upload are not objects.
            if "partNumber=" in query:
                continue
            out.append((key.split("/", 2)[2] if key.count("/") >= 2 else None, int(status)))
        return out

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()
        return 0


@pytest.fixture(scope="module")
def stow_service(stow_bin, tmp_path_factory):
    d = tmp_path_factory.mktemp("stow-service")
    svc = StowService(stow_bin, d / "data", d / "requests.log")
    yield svc
    assert svc.stop() == 0, (d / "requests.log").read_text()[-2000:]


@pytest.fixture(scope="module")
def moto_service(tmp_path_factory):
    d = tmp_path_factory.mktemp("moto-service")
    svc = MotoService(d / "requests.log")
    yield svc
    svc.stop()


@pytest.fixture(params=["stow", "moto"])
def service(request):
    return request.getfixturevalue(f"{request.param}_service")


# ---------------------------------------------------------------- helpers


def cli(stow_bin, *args, env=None, timeout=120):
    """Runs `stow-s3 ...`; returns the CompletedProcess."""
    return subprocess.run([stow_bin, *[str(a) for a in args]], capture_output=True, text=True,
                          timeout=timeout, env=env)


def remote_ok(stow_bin, *args, env=None):
    """Runs `stow-s3 remote ...` that must succeed; returns its document."""
    out = cli(stow_bin, "remote", *args, env=env)
    assert out.returncode == 0, f"remote {args}: {out.stdout} {out.stderr}"
    return json.loads(out.stdout)


def remote_fail(stow_bin, *args, env=None):
    """Runs `stow-s3 remote ...` that must fail; returns its `error` object."""
    out = cli(stow_bin, "remote", *args, env=env)
    assert out.returncode == 1, f"remote {args} exited {out.returncode}: {out.stdout} {out.stderr}"
    err = json.loads(out.stdout)["error"]
    assert err["code"] and err["message"], err
    return err


def add_remote(stow_bin, reg, name, service, url, *extra):
    """Names `url` on `service` as remote `name` of partition `reg` (a list
    of --registry-dir/--team arguments)."""
    return remote_ok(stow_bin, "add", name, url, "--endpoint-url", service.endpoint,
                     "--region", service.region, *extra, *reg, env=service.env())


def payloads(bodies):
    """{sha256: size} of the distinct payloads among `bodies`."""
    return {hashlib.sha256(b).hexdigest(): len(b) for b in bodies}


def remote_keys(service, bucket, prefix=""):
    """{key relative to prefix: object summary} of every object under prefix."""
    s3, out, token = service.client(), {}, None
    while True:
        kw = {"Bucket": bucket, "Prefix": prefix}
        if token:
            kw["ContinuationToken"] = token
        page = s3.list_objects_v2(**kw)
        for o in page.get("Contents", []):
            out[o["Key"][len(prefix):]] = o
        if not page.get("IsTruncated"):
            return out
        token = page["NextContinuationToken"]


def blob_keys(service, bucket, prefix=""):
    return {k for k in remote_keys(service, bucket, prefix) if k.startswith("blobs/")}


def files_of(root):
    """{rel: bytes} of every file under root (the root's .stow excluded)."""
    return {rel: (root / rel).read_bytes() for rel in tree(root)}


def checkpoint_ids(reg_dir):
    d = reg_dir / ".stow" / "checkpoints"
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def leftovers(reg_dir):
    """Files staged in the registry's tmp, and blobs it holds."""
    tmp = reg_dir / ".stow" / "tmp"
    blobs = reg_dir / ".stow" / "blobs"
    staged = [p for p in tmp.rglob("*") if p.is_file()] if tmp.exists() else []
    stored = [p for p in blobs.rglob("*") if p.is_file()] if blobs.exists() else []
    return staged, stored


def many_files(n, seed, size=300):
    rng = random.Random(seed)
    return {f"d{i % 17:02d}/s{i % 5}/f{i:05d}.txt": f"{seed} {i} ".encode() + rng.randbytes(size)
            for i in range(n)}


# ---------------------------------------------------------------- 1. round trip


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

    listed = remote_ok(stow_bin, "ls", "origin", *regA, env=env)
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


def test_credentials_never_appear(stow_bin, workdir, service):
    wrong_secret = "wrong-probe-secret-7w6v5u"
    secrets = [service.access_key, service.secret_key, wrong_secret]
    aws = workdir / "aws"
    aws.mkdir()
    (aws / "credentials").write_text(
        f"[probe]\naws_access_key_id = {service.access_key}\naws_secret_access_key = {service.secret_key}\n")
    transcript = []

    def run(*args, env, rc=0):
        out = cli(stow_bin, *args, env=env)
        transcript.append(f"{args}\n{out.stdout}\n{out.stderr}")
        assert out.returncode == rc, f"{args}: {out.stdout} {out.stderr}"
        return json.loads(out.stdout) if out.stdout.strip() else None

    files = {"a.txt": b"alpha", "dir/b.txt": b"bravo" * 100}
    p = prepare_tree(stow_bin, workdir, files, registry="regA")
    regA = ["--registry-dir", workdir / "regA"]
    cp = ok(stow_bin, "checkpoint", "--id", p["workspace_id"], "--portable", *regA)["checkpoint_id"]
    bucket = service.bucket()
    url = f"s3://{bucket}/s"
    env = service.env()
    traced = service.env(STOW_LOG="trace")
    run("remote", "add", "origin", url, "--endpoint-url", service.endpoint, "--region", service.region,
        *regA, env=env)
    run("remote", "list", *regA, env=env)
    run("workspace", "push", "--checkpoint-id", cp, "--remote", "origin", *regA, env=traced)
    run("remote", "ls", "origin", *regA, env=traced)
    run("workspace", "remote-list", "--remote", "origin", *regA, env=env)
    run("workspace", "handoff", "--id", p["workspace_id"], "--checkpoint-id", cp, "--remote", "origin",
        *regA, env=env)
    run("workspace", "handoff", "--id", p["workspace_id"], "--checkpoint-id", cp, "--remote", "origin",
        "--output", workdir / "handoff.json", *regA, env=env)
    regB = ["--registry-dir", workdir / "regB"]
    run("remote", "add", "origin", url, "--endpoint-url", service.endpoint, *regB, env=env)
    run("workspace", "pull", "--checkpoint-id", cp, "--remote", "origin", *regB, env=traced)
    run("workspace", "adopt", "--handoff", workdir / "handoff.json", "--root", workdir / "adopted",
        "--registry-dir", workdir / "regC", env=env)
    # Through a profile of the shared credentials file.
    regD = ["--registry-dir", workdir / "regD"]
    prof_env = clean_env(AWS_SHARED_CREDENTIALS_FILE=str(aws / "credentials"))
    run("remote", "add", "prof", url, "--endpoint-url", service.endpoint, "--profile", "probe",
        *regD, env=prof_env)
    run("remote", "list", *regD, env=prof_env)
    run("workspace", "adopt", "--remote", "prof", "--checkpoint-id", cp, "--root", workdir / "adopted-d",
        *regD, env=prof_env)
    # Refusals print no secret either.
    if service.checks_signatures:
        bad = service.env(AWS_SECRET_ACCESS_KEY=wrong_secret, STOW_LOG="debug")
        doc = run("workspace", "push", "--checkpoint-id", cp, "--remote", "origin", *regA, env=bad, rc=1)
        assert doc["error"]["code"] == "remote_auth"
    doc = run("workspace", "push", "--checkpoint-id", cp, "--remote", "prof", *regD,
              env=clean_env(AWS_SHARED_CREDENTIALS_FILE=str(aws / "credentials"), STOW_LOG="trace"))
    assert doc["manifest"] == "already_present"  # regD adopted it from there
    doc = run("workspace", "remote-list", "--remote", "prof", *regD, env=clean_env(), rc=1)
    assert doc["error"]["code"] == "remote_auth"  # no credentials file: the profile is missing
    assert (workdir / "adopted" / "dir" / "b.txt").read_bytes() == b"bravo" * 100

    found = []
    for path in workdir.rglob("*"):
        if path.is_file() and aws not in path.parents:
            data = path.read_bytes()
            found += [(str(path), s) for s in secrets if s.encode() in data]
    for text in transcript:
        found += [("output", s) for s in secrets if s in text]
    s3 = service.client()
    for key in remote_keys(service, bucket):
        obj = s3.get_object(Bucket=bucket, Key=key)
        blob = obj["Body"].read() + json.dumps(obj["Metadata"]).encode() + key.encode()
        found += [(key, s) for s in secrets if s.encode() in blob]
    assert found == []
    remotes = json.loads((workdir / "regD" / ".stow" / "remotes.json").read_text())
    assert remotes == {"version": 1, "remotes": {"prof": {"url": url, "endpoint_url": service.endpoint,
                                                          "profile": "probe"}}}
    assert oct(os.stat(workdir / "regD" / ".stow" / "remotes.json").st_mode & 0o777) == "0o600"


# ---------------------------------------------------------------- 7. errors


def test_errors_and_refusals_leave_remotes_unchanged(stow_bin, workdir, service):
    p = prepare_tree(stow_bin, workdir, {"a.txt": b"alpha"}, registry="regA")
    reg_dir = workdir / "regA"
    regA = ["--registry-dir", reg_dir]
    cp = ok(stow_bin, "checkpoint", "--id", p["workspace_id"], *regA)["checkpoint_id"]
    bucket = service.bucket()
    env = service.env()
    add_remote(stow_bin, regA, "origin", service, f"s3://{bucket}")
    remotes = reg_dir / ".stow" / "remotes.json"
    original = remotes.read_bytes()

    def refused(expect, *args, env=env, remote_cmd=False):
        err = remote_fail(stow_bin, *args, *regA, env=env) if remote_cmd else fail(stow_bin, *args, *regA, env=env)
        assert err["code"] == expect, (args, err)
        assert remotes.read_bytes() == original, args
        return err

    # A missing bucket.
    add_remote(stow_bin, regA, "nobucket", service, f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}")
    original = remotes.read_bytes()
    refused("remote_no_bucket", "push", "--checkpoint-id", cp, "--remote", "nobucket")
    refused("remote_no_bucket", "pull", "--checkpoint-id", cp, "--remote", "nobucket")
    refused("remote_no_bucket", "ls", "nobucket", remote_cmd=True)

    # Credentials the service refuses (moto accepts any), or none at all.
    if service.checks_signatures:
        err = refused("remote_auth", "push", "--checkpoint-id", cp, "--remote", "origin",
                      env=service.env(AWS_SECRET_ACCESS_KEY="not-the-secret"))
        assert "SignatureDoesNotMatch" in err["message"]
        refused("remote_auth", "pull", "--checkpoint-id", cp, "--remote", "origin",
                env=service.env(AWS_ACCESS_KEY_ID="AKIDUNKNOWN0000"))
        refused("remote_auth", "ls", "origin", env=service.env(AWS_SECRET_ACCESS_KEY="x"), remote_cmd=True)
    refused("remote_auth", "push", "--checkpoint-id", cp, "--remote", "origin", env=clean_env())

    # An endpoint nothing listens on: refused quickly.
    dead = f"http://127.0.0.1:{free_port()}"
    remote_ok(stow_bin, "add", "dead", f"s3://{bucket}", "--endpoint-url", dead, *regA)
    original = remotes.read_bytes()
    started = time.monotonic()
    refused("remote_unreachable", "push", "--checkpoint-id", cp, "--remote", "dead")
    assert time.monotonic() - started < 5
    # One that accepts connections and never answers: the deadline holds.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        remote_ok(stow_bin, "add", "silent", f"s3://{bucket}",
                  "--endpoint-url", f"http://127.0.0.1:{silent.getsockname()[1]}", *regA)
        original = remotes.read_bytes()
        started = time.monotonic()
        refused("remote_timeout", "push", "--checkpoint-id", cp, "--remote", "silent", "--timeout", "2s")
        assert time.monotonic() - started < 8
    refused("invalid_request", "push", "--checkpoint-id", cp, "--remote", "origin", "--timeout", "soon")

    # Unknown names, absent checkpoints.
    refused("not_found", "push", "--checkpoint-id", cp, "--remote", "upstream")
    refused("not_found", "pull", "--checkpoint-id", cp, "--remote", "upstream")
    refused("not_found", "remote-list", "--remote", "upstream")
    refused("not_found", "ls", "upstream", remote_cmd=True)
    refused("not_found", "remove", "upstream", remote_cmd=True)
    refused("not_found", "pull", "--checkpoint-id", "cp_000000000000000000000000", "--remote", "origin")
    refused("not_found", "push", "--checkpoint-id", "cp_000000000000000000000000", "--remote", "origin")
    refused("not_found", "adopt", "--remote", "origin", "--checkpoint-id", "cp_000000000000000000000000",
            "--root", workdir / "nowhere")
    assert not (workdir / "nowhere").exists()
    for bad_id in ["../x", "cp_../../etc", "checkpoints/cp"]:
        refused("invalid_request", "pull", "--checkpoint-id", bad_id, "--remote", "origin")

    # Bad definitions.
    for url in ["http://bucket/x", "bucket", "s3://", "s3://ab", "s3://Upper", "s3://under_score",
                "s3://bucket/../up", "s3://bucket/a//b", "s3://-bucket"]:
        refused("invalid_request", "add", "other", url, remote_cmd=True)
    for name in ["_x", ".x", "a/b", "a b", "x" * 65]:
        refused("invalid_request", "add", name, f"s3://{bucket}", remote_cmd=True)
    for endpoint in ["ftp://host", "127.0.0.1:9000", "http://", "http://user:pass@127.0.0.1:9000",
                     "https://AKID@host.example"]:
        refused("invalid_request", "add", "other", f"s3://{bucket}", "--endpoint-url", endpoint, remote_cmd=True)
    refused("invalid_request", "add", "other", f"s3://{bucket}", "--region", "US East", remote_cmd=True)
    refused("invalid_request", "add", "other", f"s3://{bucket}", "--profile", "a/b", remote_cmd=True)
    refused("already_exists", "add", "origin", f"s3://{bucket}/elsewhere", remote_cmd=True)
    refused("already_exists", "add", "origin", f"s3://{bucket}", "--endpoint-url", service.endpoint,
            remote_cmd=True)
    names = [r["name"] for r in remote_ok(stow_bin, "list", *regA)["remotes"]]
    assert names == ["dead", "nobucket", "origin", "silent"]

    # Remove forgets the name only; the remote keeps what it holds.
    ok(stow_bin, "push", "--checkpoint-id", cp, "--remote", "origin", *regA, env=env)
    gone = remote_ok(stow_bin, "remove", "origin", *regA)
    assert gone["name"] == "origin" and gone["url"] == f"s3://{bucket}"
    assert f"checkpoints/{cp}.json" in remote_keys(service, bucket)
    original = remotes.read_bytes()
    refused("not_found", "push", "--checkpoint-id", cp, "--remote", "origin")


class StubS3:
    """An HTTP endpoint answering every request with one S3 error, counting
    the requests (to see retries)."""

    def __init__(self, status, code):
        stub = self
        self.requests = 0

        class Handler(BaseHTTPRequestHandler):
            def answer(self):
                stub.requests += 1
                n = int(self.headers.get("content-length") or 0)
                if n:
                    self.rfile.read(n)
                body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                        f"<Message>stub</Message></Error>").encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = answer

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_throttling_and_service_failures_are_classified(stow_bin, workdir):
    p = prepare_tree(stow_bin, workdir, {"a.txt": b"alpha"}, registry="reg")
    reg = ["--registry-dir", workdir / "reg"]
    cp = ok(stow_bin, "checkpoint", "--id", p["workspace_id"], *reg)["checkpoint_id"]
    env = clean_env(AWS_ACCESS_KEY_ID="AKIDSTUB", AWS_SECRET_ACCESS_KEY="stub-secret")
    for status, code, expect, retried in [(503, "SlowDown", "remote_throttled", True),
                                          (500, "InternalError", "remote_failed", True),
                                          (403, "AccessDenied", "remote_auth", False),
                                          (404, "NoSuchBucket", "remote_no_bucket", False),
                                          (400, "InvalidRequest", "remote_failed", False)]:
        stub = StubS3(status, code)
        try:
            name = f"stub{status}"
            remote_ok(stow_bin, "add", name, "s3://cps/x", "--endpoint-url", stub.endpoint, *reg)
            started = time.monotonic()
            err = fail(stow_bin, "push", "--checkpoint-id", cp, "--remote", name, *reg, env=env)
            assert err["code"] == expect, (status, code, err)
            assert time.monotonic() - started < 20
            # Retried a bounded number of times (5xx), or not at all (4xx).
            assert (2 <= stub.requests <= 10) if retried else stub.requests == 1, (status, stub.requests)
        finally:
            stub.close()


# ---------------------------------------------------------------- 8. chain


def test_profiles_and_aws_endpoint_url(stow_bin, workdir, stow_service):
    service = stow_service  # checks signatures: proves which keys were used
    aws = workdir / "aws"
    aws.mkdir()
    creds, config = aws / "credentials", aws / "config"
    creds.write_text(
        "# test profiles\n"
        f"[stowprobe]\naws_access_key_id = {service.access_key}\naws_secret_access_key = {service.secret_key}\n\n"
        f"[badprobe]\naws_access_key_id = {service.access_key}\naws_secret_access_key = not-it\n\n"
        "[nokeys]\nregion = us-east-1\n")
    config.write_text("[profile stowprobe]\nregion = us-east-1\n\n"
                      f"[profile cfgonly]\naws_access_key_id = {service.access_key}\n"
                      f"aws_secret_access_key = {service.secret_key}\n")
    files_env = dict(AWS_SHARED_CREDENTIALS_FILE=str(creds), AWS_CONFIG_FILE=str(config))
    p = prepare_tree(stow_bin, workdir, {"a.txt": b"alpha"}, registry="regA")
    regA = ["--registry-dir", workdir / "regA"]
    cp = ok(stow_bin, "checkpoint", "--id", p["workspace_id"], *regA)["checkpoint_id"]
    bucket = service.bucket()
    url = f"s3://{bucket}"

    def add(name, *extra):
        return remote_ok(stow_bin, "add", name, url, *extra, *regA)

    def ls(name, env):
        return ok(stow_bin, "remote-list", "--remote", name, *regA, env=env)

    def refused(name, env):
        return fail(stow_bin, "remote-list", "--remote", name, *regA, env=env)["code"]

    # --profile: the profile's keys, even over the environment's.
    e = add("viaprofile", "--endpoint-url", service.endpoint, "--profile", "stowprobe")
    assert e["profile"] == "stowprobe"
    assert ls("viaprofile", clean_env(**files_env))["checkpoints"] == []
    pushed = ok(stow_bin, "push", "--checkpoint-id", cp, "--remote", "viaprofile", *regA,
                env=clean_env(**files_env, AWS_ACCESS_KEY_ID="AKIDWRONG", AWS_SECRET_ACCESS_KEY="wrong"))
    assert pushed["manifest"] == "uploaded"
    add("badprofile", "--endpoint-url", service.endpoint, "--profile", "badprobe")
    assert refused("badprofile", service.env(**files_env)) == "remote_auth"
    add("noprofile", "--endpoint-url", service.endpoint, "--profile", "nosuch")
    assert refused("noprofile", service.env(**files_env)) == "remote_auth"
    add("nokeys", "--endpoint-url", service.endpoint, "--profile", "nokeys")
    assert refused("nokeys", service.env(**files_env)) == "remote_auth"
    add("cfgonly", "--endpoint-url", service.endpoint, "--profile", "cfgonly")
    assert [r["checkpoint_id"] for r in ls("cfgonly", clean_env(**files_env))["checkpoints"]] == [cp]

    # AWS_PROFILE for a remote without --profile.
    add("plain", "--endpoint-url", service.endpoint)
    rows = ls("plain", clean_env(**files_env, AWS_PROFILE="stowprobe"))["checkpoints"]
    assert [r["checkpoint_id"] for r in rows] == [cp]
    assert refused("plain", clean_env(**files_env, AWS_PROFILE="badprobe")) == "remote_auth"
    assert refused("plain", clean_env(**files_env, AWS_PROFILE="nosuch")) == "remote_auth"
    assert refused("plain", clean_env(**files_env)) == "remote_auth"  # no keys anywhere
    # The default profile when AWS_PROFILE is unset.
    (aws / "default").write_text(f"[default]\naws_access_key_id = {service.access_key}\n"
                                 f"aws_secret_access_key = {service.secret_key}\n")
    ls("plain", clean_env(AWS_SHARED_CREDENTIALS_FILE=str(aws / "default")))

    # AWS_ENDPOINT_URL when the remote names no endpoint.
    add("noendpoint")
    dead = f"http://127.0.0.1:{free_port()}"
    rows = ls("noendpoint", service.env(AWS_ENDPOINT_URL=service.endpoint))["checkpoints"]
    assert [r["checkpoint_id"] for r in rows] == [cp]
    assert refused("noendpoint", service.env(AWS_ENDPOINT_URL=dead)) == "remote_unreachable"
    regB = ["--registry-dir", workdir / "regB"]
    remote_ok(stow_bin, "add", "noendpoint", url, *regB)
    pulled = ok(stow_bin, "pull", "--checkpoint-id", cp, "--remote", "noendpoint", *regB,
                env=clean_env(**files_env, AWS_ENDPOINT_URL=service.endpoint, AWS_PROFILE="stowprobe"))
    assert pulled["checkpoint_id"] == cp and pulled["downloaded_blobs"] == 1
    # A remote's own endpoint wins over AWS_ENDPOINT_URL.
    ls("plain", service.env(AWS_ENDPOINT_URL=dead))

    stored = json.loads((workdir / "regA" / ".stow" / "remotes.json").read_text())["remotes"]
    assert stored["noendpoint"] == {"url": url}
    assert stored["viaprofile"] == {"url": url, "endpoint_url": service.endpoint, "profile": "stowprobe"}
    text = (workdir / "regA" / ".stow" / "remotes.json").read_text()
    assert service.secret_key not in text and service.access_key not in text


# ---------------------------------------------------------------- 9. handoff


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
    # A second adopt reuses the checkpoint it has.
    a2 = ok(stow_bin, "adopt", "--handoff", h, "--root", workdir / "adopted2", *regB, env=clean_env())
    assert a2["checkpoint_id"] == cp and tree(workdir / "adopted2") == tree(root)

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


def test_endpoint_with_credentials_is_refused_without_echoing_them(stow_bin, workdir):
    reg = ["--registry-dir", workdir / "reg"]
    remote_ok(stow_bin, "add", "origin", "s3://bucket", *reg)
    before = (workdir / "reg" / ".stow" / "remotes.json").read_bytes()
    out = cli(stow_bin, "remote", "add", "leaky", "s3://bucket",
              "--endpoint-url", "http://AKIDLEAKPROBE:leak-probe-password@127.0.0.1:9000", *reg)
    assert out.returncode == 1
    assert json.loads(out.stdout)["error"]["code"] == "invalid_request"
    assert (workdir / "reg" / ".stow" / "remotes.json").read_bytes() == before
    # The refusal exists to keep the secret out of storage; it must not
    # print it either.
    assert "leak-probe-password" not in out.stdout + out.stderr
