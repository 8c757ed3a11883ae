"""Sessions: start, S3 through boto3, cleanup (also on error and when the parent is SIGKILLed)."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import pid_alive

import stow_s3

SRC = str(Path(__file__).resolve().parents[1] / "src")


def health(endpoint: str) -> bytes:
    with urllib.request.urlopen(endpoint + "/_stow/health", timeout=5) as r:
        return r.read()


def test_session_starts_and_cleans_up() -> None:
    session = stow_s3.open_session()
    try:
        assert session.endpoint.startswith("http://127.0.0.1:")
        assert session.region == "us-east-1" and session.access_key and session.secret_key
        assert session.ready.protocol_version == stow_s3.READY_PROTOCOL_VERSION
        assert session.ready.backend == "filesystem" and session.capabilities.persistent is True
        assert session.owns_data_dir and os.path.isdir(session.data_dir)
        assert Path(session.data_dir).name.startswith("stow-session-")
        assert b"ok" in health(session.endpoint)
        pid = session.pid
    finally:
        session.close()
    assert session.closed and not pid_alive(pid) and not os.path.exists(session.data_dir)
    session.close()  # idempotent
    with pytest.raises(stow_s3.StowSessionError):
        session.s3_client()


def test_caller_data_dir_is_kept(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with stow_s3.with_session(data) as session:
        assert session.data_dir == str(data) and not session.owns_data_dir
    assert data.is_dir()


def test_with_session_closes_and_reraises_unchanged() -> None:
    class Boom(Exception):
        pass

    boom = Boom("from the caller")
    seen: dict[str, object] = {}
    with pytest.raises(Boom) as caught:
        with stow_s3.with_session() as session:
            seen.update(pid=session.pid, dir=session.data_dir, s=session)
            raise boom
    assert caught.value is boom
    assert seen["s"].closed and not pid_alive(seen["pid"]) and not os.path.exists(seen["dir"])

    with pytest.raises(Boom):  # the Session's own context manager, too
        with stow_s3.open_session() as session:
            pid = session.pid
            raise Boom()
    assert session.closed and not pid_alive(pid)


def test_child_environment_is_stripped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "leak")
    monkeypatch.setenv("AWS_PROFILE", "leak")
    monkeypatch.setenv("S3_ENDPOINT", "leak")
    monkeypatch.setenv("STOW_LOCAL_ACCESS_KEY_ID", "leak")
    monkeypatch.setenv("STOW_ADMIN_TOKEN", "leak")
    env = stow_s3.build_child_env()
    assert not [k for k in env if k.startswith(("AWS_", "S3_", "STOW_"))] and "PATH" in env
    with stow_s3.with_session() as session:
        environ = Path(f"/proc/{session.pid}/environ").read_bytes().split(b"\0")
        names = [e.split(b"=", 1)[0] for e in environ if e]
        assert not [n for n in names if n.startswith((b"AWS_", b"S3_", b"STOW_"))]
        assert session.access_key != "leak"


def test_parent_sigkill_stops_the_server(tmp_path: Path) -> None:
    data = tmp_path / "data"
    child = textwrap.dedent(
        f"""
        import sys, time
        import stow_s3
        s = stow_s3.open_session({str(data)!r})
        print(s.pid, flush=True)
        time.sleep(60)
        """
    )
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, env=env)
    try:
        line = proc.stdout.readline()
        server_pid = int(line)
        assert pid_alive(server_pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 5
        while pid_alive(server_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(server_pid), "the server outlived its SIGKILLed parent"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_startup_failure_reports_stderr(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with stow_s3.with_session(data):
        with pytest.raises(stow_s3.StowSessionError) as err:
            stow_s3.open_session(data)  # the data dir is locked by the first server
    assert err.value.code == "exited" and "already in use" in err.value.stderr
    assert data.is_dir()  # a caller-given dir is never removed


def test_binary_not_found_lists_what_was_tried(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("STOW_BIN", str(tmp_path / "missing"))
    with pytest.raises(stow_s3.StowBinaryNotFoundError) as err:
        stow_s3.resolve_stow_binary()
    assert str(tmp_path / "missing") in str(err.value)
    monkeypatch.delenv("STOW_BIN")
    monkeypatch.setenv("PATH", str(tmp_path))
    from stow_s3 import _binary

    monkeypatch.setattr(_binary, "_repository_candidates", lambda start: [tmp_path / "target/debug/stow-s3"])
    monkeypatch.setattr(_binary.sysconfig, "get_path", lambda name: str(tmp_path / "scripts"))
    with pytest.raises(stow_s3.StowBinaryNotFoundError) as err:
        stow_s3.resolve_stow_binary()
    text = str(err.value)
    for fragment in ("STOW_BIN", "bundled", "stow_s3/bin/stow-s3", "repository", "target/debug/stow-s3", "PATH"):
        assert fragment in text
    assert len(err.value.tried) >= 5
    assert not stow_s3.stow_binary_available()


def test_stow_bin_wins(monkeypatch: pytest.MonkeyPatch, stow_bin: str) -> None:
    monkeypatch.setenv("STOW_BIN", stow_bin)
    assert stow_s3.resolve_stow_binary_detailed().source == "env"


def test_boto3_round_trip() -> None:
    pytest.importorskip("boto3")
    with stow_s3.with_session() as session:
        s3 = session.s3_client()
        bucket = session.new_bucket_name()
        s3.create_bucket(Bucket=bucket)
        s3.put_object(Bucket=bucket, Key="dir/a.txt", Body=b"hello", ContentType="text/plain")
        got = s3.get_object(Bucket=bucket, Key="dir/a.txt")
        assert got["Body"].read() == b"hello" and got["ContentType"] == "text/plain"
        listed = s3.list_objects_v2(Bucket=bucket, Prefix="dir/")
        assert [o["Key"] for o in listed["Contents"]] == ["dir/a.txt"]
        up = s3.create_multipart_upload(Bucket=bucket, Key="big.bin")
        part1 = b"a" * (5 * 1024 * 1024)
        parts = []
        for n, body in ((1, part1), (2, b"tail")):
            r = s3.upload_part(Bucket=bucket, Key="big.bin", UploadId=up["UploadId"], PartNumber=n, Body=body)
            parts.append({"ETag": r["ETag"], "PartNumber": n})
        s3.complete_multipart_upload(Bucket=bucket, Key="big.bin", UploadId=up["UploadId"],
                                     MultipartUpload={"Parts": parts})
        assert s3.get_object(Bucket=bucket, Key="big.bin")["Body"].read() == part1 + b"tail"


def test_s3_client_ignores_the_callers_aws_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    """The client talks to the session whatever the caller's AWS settings
    say: a missing AWS_PROFILE, wrong keys, another endpoint, a config
    file that forces virtual-host addressing (the clients share one
    private, cached boto3 session)."""
    pytest.importorskip("boto3")
    config = tmp_path / "config"
    config.write_text("[profile elsewhere]\ns3 =\n  addressing_style = virtual\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "WRONG")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "WRONG")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    with stow_s3.with_session() as a, stow_s3.with_session() as b:
        for session in (a, b):
            s3 = session.s3_client()
            bucket = session.new_bucket_name()
            s3.create_bucket(Bucket=bucket)
            assert [x["Name"] for x in s3.list_buckets()["Buckets"]] == [bucket]


def test_memory_backend_sessions() -> None:
    """backend="memory": nothing is fsynced (the fastest throwaway endpoint),
    the readiness record says so, and S3 works the same."""
    pytest.importorskip("boto3")
    with stow_s3.with_session(backend="memory") as session:
        assert session.backend == "memory"
        s3 = session.s3_client()
        bucket = session.new_bucket_name()
        s3.create_bucket(Bucket=bucket)
        s3.put_object(Bucket=bucket, Key="k", Body=b"v")
        assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"
    with pytest.raises(ValueError):
        stow_s3.open_session(backend="tape")
