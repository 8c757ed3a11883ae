"""Start and stop a real `stow-s3 serve` for tests, reading its readiness record."""

import hashlib
import json
import os
import signal
import subprocess
import threading
import time

import boto3
from botocore.config import Config


def spawn_ready(args, env=None):
    """Starts `args` + `--ready-fd N` and returns (process, readiness record)."""
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        [*args, "--ready-fd", str(write_fd)], pass_fds=(write_fd,),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as ready:
        line = ready.readline()
    if not line:
        _, err = proc.communicate(timeout=10)
        raise RuntimeError(f"{args[1]} did not become ready: rc={proc.returncode} {err.decode()}")
    return proc, json.loads(line)


class S3Server:
    """A running `stow-s3 serve` process and a boto3 client bound to it."""

    def __init__(self, stow_bin, data_dir, *extra, backend="filesystem", env=None):
        self.proc, self.ready = spawn_ready([
            stow_bin, "serve", "--port", "0", "--data-dir", str(data_dir),
            "--backend", backend, *extra,
        ], env=env)
        self.endpoint = self.ready["endpoint"]
        self.access_key = self.ready["accessKeyId"]
        self.secret_key = self.ready["secretAccessKey"]

    def client(self, **config):
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.ready["region"],
            config=Config(signature_version="s3v4", s3={"addressing_style": "path"}, retries={"max_attempts": 1}, **config),
        )

    def aws_env(self):
        env = dict(os.environ)
        env.update(
            AWS_ACCESS_KEY_ID=self.access_key,
            AWS_SECRET_ACCESS_KEY=self.secret_key,
            AWS_DEFAULT_REGION=self.ready["region"],
            AWS_ENDPOINT_URL=self.endpoint,
            AWS_CONFIG_FILE="/dev/null",
            AWS_SHARED_CREDENTIALS_FILE="/dev/null",
        )
        return env

    def stop(self, sig=signal.SIGTERM, timeout=15):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def wait_until(predicate, timeout=10.0, interval=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def kill_under_write_load(server, bucket, key_of, writers, enough):
    """PUTs from `writers` threads (small bodies and bodies past the inline
    size) until `enough` writes are acknowledged, then kill -9s the server.

    `key_of(thread, i)` names the i-th write of a thread. Returns
    `(acked, in_flight)`: the last acknowledged `(body, etag)` per key, and
    per key the body of a write that was in flight when the server died
    (each writer has at most one)."""
    acked, inflight = {}, {}
    lock = threading.Lock()
    stop = threading.Event()

    def writer(t):
        client = server.client()
        i = 0
        while not stop.is_set():
            key = key_of(t, i)
            body = hashlib.sha256(f"{t}-{i}".encode()).digest() * (1 + (i % 3) * 1500)
            with lock:
                inflight[t] = (key, body)
            try:
                etag = client.put_object(Bucket=bucket, Key=key, Body=body)["ETag"]
            except Exception:
                return
            with lock:
                acked[key] = (body, etag.strip('"'))
            i += 1

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(writers)]
    for t in threads:
        t.start()
    assert wait_until(lambda: len(acked) >= enough, timeout=60)
    server.proc.kill()
    server.proc.wait()
    stop.set()
    for t in threads:
        t.join()
    return acked, {key: body for key, body in inflight.values()}


class WorkspaceServer(S3Server):
    """A running `stow-s3 workspace serve` for one registered workspace."""

    def __init__(self, stow_bin, workspace_id, registry_dir, *extra, env=None):
        self.proc, self.ready = spawn_ready([
            stow_bin, "workspace", "serve", "--id", workspace_id,
            "--registry-dir", str(registry_dir), *extra,
        ], env=env)
        self.endpoint = self.ready["endpoint"]
        self.access_key = self.ready["access_key_id"]
        self.secret_key = self.ready["secret_access_key"]
        self.bucket = self.ready["bucket"]
        self.root = self.ready["root"]
