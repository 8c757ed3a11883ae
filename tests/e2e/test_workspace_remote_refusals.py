"""Remote refusals through the real binary: credentials that never appear in
any file or output, every error code (each leaving remotes.json as it
was), service failures classified, the AWS credential chain (profiles,
AWS_PROFILE, AWS_ENDPOINT_URL) and endpoints carrying credentials."""


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
