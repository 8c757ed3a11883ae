"""The harness of the remote end-to-end suites: the two S3 services the
tests start (`stow-s3 serve`, `moto_server`) with their fixtures, and the
helpers that drive the CLI and read what a remote and a registry hold.
Test modules import everything (`from remotekit import *`), fixtures
included."""

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
