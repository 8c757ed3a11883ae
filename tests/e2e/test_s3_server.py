"""The server process: readiness, admin routes, CORS, limits, signals, crashes."""

import hashlib
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import botocore
import pytest

from s3server import S3Server, kill_under_write_load, wait_until


def code_of(excinfo):
    return excinfo.value.response["Error"]["Code"], excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"]


def test_ready_line_on_stdout(stow_bin, tmp_path):
    proc = subprocess.Popen([stow_bin, "serve", "--port", "0", "--data-dir", str(tmp_path / "d"),
                             "--access-key", "AKEXAMPLE", "--secret-key", "SKEXAMPLE"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()
        parts = dict(p.split("=", 1) for p in line.split()[1:])
        assert line.startswith("STOW_READY ")
        assert parts["access_key"] == "AKEXAMPLE" and parts["secret_key"] == "SKEXAMPLE"
        assert parts["mode"] == "local"
        assert parts["endpoint"].startswith("http://127.0.0.1:")
        with urllib.request.urlopen(parts["endpoint"] + "/_stow/health") as resp:
            assert json.loads(resp.read()) == {"status": "ok"}
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0


def test_ready_fd_record_and_generated_credentials(s3server):
    r = s3server.ready
    assert r["protocolVersion"] == 1 and r["mode"] == "local" and r["backend"] == "filesystem"
    assert r["region"] == "us-east-1"
    assert len(r["accessKeyId"]) >= 16 and len(r["secretAccessKey"]) >= 32
    caps = r["capabilities"]
    assert caps["persistent"] is True and caps["multipart"] is True and caps["conditionalWrites"] is True
    assert caps["maxBytes"] == 0 and caps["maxRequestBytes"] == 5 << 30


def test_admin_routes(s3server, s3):
    s3.create_bucket(Bucket="adm")
    s3.put_object(Bucket="adm", Key="k", Body=b"12345")
    with urllib.request.urlopen(s3server.endpoint + "/_stow/status") as resp:
        status = json.loads(resp.read())
    assert status["bucket_count"] == 1 and status["object_count"] == 1
    assert status["write_policy"] == "local-only" and status["mode"] == "local"
    with urllib.request.urlopen(s3server.endpoint + "/_stow/metrics") as resp:
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = resp.read().decode()
    assert "stow_objects 1" in text and "stow_stored_bytes 5" in text
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(s3server.endpoint + "/_stow/nothing")
    assert e.value.code == 404
    req = urllib.request.Request(s3server.endpoint + "/_stow/health", method="POST", data=b"")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req)
    assert e.value.code == 404


def test_cors(stow_bin, tmp_path):
    def preflight(endpoint, origin):
        conn = http.client.HTTPConnection(urllib.parse.urlparse(endpoint).netloc, timeout=10)
        conn.request("OPTIONS", "/bucket/key", headers={"Origin": origin, "Access-Control-Request-Method": "PUT"})
        resp = conn.getresponse()
        resp.read()
        return resp.status, resp.getheader("Access-Control-Allow-Origin"), resp.getheader("Vary")

    server = S3Server(stow_bin, tmp_path / "a")
    try:
        assert preflight(server.endpoint, "http://localhost:5173") == (200, "http://localhost:5173", "Origin")
        assert preflight(server.endpoint, "http://evil.example")[1] is None
    finally:
        server.stop()
    server = S3Server(stow_bin, tmp_path / "b", "--cors-origin", "https://app.example")
    try:
        assert preflight(server.endpoint, "https://app.example")[1] == "https://app.example"
        assert preflight(server.endpoint, "http://localhost:5173")[1] is None
    finally:
        server.stop()


def test_read_only(stow_bin, tmp_path):
    data = tmp_path / "d"
    writer = S3Server(stow_bin, data)
    c = writer.client()
    c.create_bucket(Bucket="rob")
    c.put_object(Bucket="rob", Key="k", Body=b"kept")
    assert writer.stop() == 0
    reader = S3Server(stow_bin, data, "--read-only")
    try:
        c = reader.client()
        assert c.get_object(Bucket="rob", Key="k")["Body"].read() == b"kept"
        for call in [lambda: c.put_object(Bucket="rob", Key="x", Body=b"x"),
                     lambda: c.delete_object(Bucket="rob", Key="k"),
                     lambda: c.create_bucket(Bucket="other")]:
            with pytest.raises(botocore.exceptions.ClientError) as e:
                call()
            assert code_of(e) == ("AccessDenied", 403)
        assert c.get_object(Bucket="rob", Key="k")["Body"].read() == b"kept"
    finally:
        assert reader.stop() == 0


def test_quota_and_body_caps(stow_bin, tmp_path):
    server = S3Server(stow_bin, tmp_path / "d", "--max-bytes", "1000", "--max-objects", "2",
                      "--max-request-bytes", "4096")
    try:
        c = server.client()
        c.create_bucket(Bucket="cap")
        c.put_object(Bucket="cap", Key="a", Body=b"x" * 900)
        with pytest.raises(botocore.exceptions.ClientError) as e:
            c.put_object(Bucket="cap", Key="b", Body=b"x" * 200)
        assert code_of(e) == ("InsufficientStorage", 507)
        c.put_object(Bucket="cap", Key="b", Body=b"x" * 50)
        with pytest.raises(botocore.exceptions.ClientError) as e:
            c.put_object(Bucket="cap", Key="c", Body=b"x")
        assert code_of(e) == ("InsufficientStorage", 507)
        with pytest.raises(botocore.exceptions.ClientError) as e:
            c.put_object(Bucket="cap", Key="a", Body=b"x" * 5000)
        assert code_of(e) == ("EntityTooLarge", 400)
        assert c.get_object(Bucket="cap", Key="a")["Body"].read() == b"x" * 900
    finally:
        server.stop()


def test_concurrency_cap_answers_slowdown(stow_bin, tmp_path):
    server = S3Server(stow_bin, tmp_path / "d", "--max-concurrent-requests", "1")
    try:
        c = server.client()
        c.create_bucket(Bucket="busy")
        url = urllib.parse.urlparse(c.generate_presigned_url("put_object", Params={"Bucket": "busy", "Key": "slow"}))

        def requests_seen():
            with urllib.request.urlopen(server.endpoint + "/_stow/metrics") as resp:
                line = [l for l in resp.read().decode().splitlines() if l.startswith("stow_requests_total ")]
            return int(line[0].split()[1])

        before = requests_seen()
        slow = http.client.HTTPConnection(url.netloc, timeout=30)
        slow.putrequest("PUT", url.path + "?" + url.query)
        slow.putheader("Content-Length", str(1 << 20))
        slow.endheaders()
        slow.send(b"x" * 1000)  # holds the only slot while the body trickles in
        # Only once the server has taken the slow request may others race it
        # for the slot. Each metrics call counts itself, so after k polls the
        # counter reads before + k, plus one for the slow request.
        polls = [0]

        def slow_arrived():
            polls[0] += 1
            return requests_seen() >= before + polls[0] + 1
        assert wait_until(slow_arrived, timeout=10)

        def busy():
            try:
                c.head_bucket(Bucket="busy")
                return False
            except botocore.exceptions.ClientError as e:
                return e.response["ResponseMetadata"]["HTTPStatusCode"] == 503
        assert wait_until(busy, timeout=10)
        with urllib.request.urlopen(server.endpoint + "/_stow/health") as resp:
            assert resp.status == 200, "admin routes bypass the cap"
        slow.send(b"x" * ((1 << 20) - 1000))
        assert slow.getresponse().status == 200
        assert wait_until(lambda: not busy(), timeout=10)
    finally:
        server.stop()


def test_one_owner_per_directory_and_release_on_sigterm(stow_bin, tmp_path):
    data = tmp_path / "d"
    first = S3Server(stow_bin, data)
    second = subprocess.run([stow_bin, "serve", "--port", "0", "--data-dir", str(data)],
                            capture_output=True, text=True, timeout=30)
    assert second.returncode == 1
    err = json.loads(second.stdout)["error"]
    assert err["code"] == "store_locked" and str(data) in err["message"]
    assert first.stop(signal.SIGTERM) == 0
    again = S3Server(stow_bin, data)
    assert again.stop(signal.SIGINT) == 0


def test_parent_pid(stow_bin, tmp_path):
    bad = subprocess.run([stow_bin, "serve", "--port", "0", "--data-dir", str(tmp_path / "x"), "--parent-pid", "1"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 1 and "parent" in json.loads(bad.stdout)["error"]["message"]
    assert not (tmp_path / "x").exists(), "refused before the directory is created"
    # A parent that starts the server and then dies takes the server with it.
    script = (
        "import subprocess, sys, os\n"
        f"p = subprocess.Popen([{stow_bin!r}, 'serve', '--port', '0', '--data-dir', {str(tmp_path / 'd')!r},"
        " '--parent-pid', str(os.getpid())], stdout=subprocess.PIPE)\n"
        "print(p.stdout.readline().decode().strip(), p.pid, flush=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30).stdout
    assert out.startswith("STOW_READY"), out
    pid = int(out.split()[-1])

    def gone():
        try:
            os.kill(pid, 0)
            return False
        except ProcessLookupError:
            return True
    assert wait_until(gone, timeout=10), "server outlived its parent"


def test_create_only_and_if_match_races(stow_bin, tmp_path):
    server = S3Server(stow_bin, tmp_path / "d", "--max-concurrent-requests", "128")
    try:
        c = server.client()
        c.create_bucket(Bucket="race")
        start = c.put_object(Bucket="race", Key="m", Body=b"base")["ETag"]
        barrier = threading.Barrier(50)
        results = {"create": [], "match": []}

        def worker(i):
            client = server.client()
            barrier.wait()
            for kind, kwargs in [("create", {"Key": "c", "IfNoneMatch": "*"}), ("match", {"Key": "m", "IfMatch": start})]:
                try:
                    client.put_object(Bucket="race", Body=f"writer {i}".encode(), **kwargs)
                    results[kind].append(200)
                except botocore.exceptions.ClientError as e:
                    results[kind].append(e.response["ResponseMetadata"]["HTTPStatusCode"])

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(50)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for kind in ("create", "match"):
            assert results[kind].count(200) == 1, (kind, results[kind])
            assert results[kind].count(412) == 49, (kind, results[kind])
    finally:
        server.stop()


def test_kill_9_under_write_load_keeps_every_acknowledged_put(stow_bin, tmp_path):
    data = tmp_path / "d"
    server = S3Server(stow_bin, data, "--max-concurrent-requests", "64")
    c = server.client()
    c.create_bucket(Bucket="load")
    acked, in_flight = kill_under_write_load(
        server, "load", lambda t, i: f"t{t}/{i % 40}", writers=8, enough=100)
    check = subprocess.run([stow_bin, "check", "--data-dir", str(data)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    again = S3Server(stow_bin, data)
    try:
        c = again.client()
        for key, (acked_body, etag) in acked.items():
            got = c.get_object(Bucket="load", Key=key)
            body = got["Body"].read()
            stored = hashlib.md5(body).hexdigest()
            assert stored == got["ETag"].strip('"'), f"torn object {key}"
            # Each writer has at most one write in flight: an acknowledged
            # write may only have been replaced by that one, never lost.
            assert etag == hashlib.md5(acked_body).hexdigest()
            lost = in_flight.get(key)
            assert stored in (etag, lost and hashlib.md5(lost).hexdigest()), \
                f"acknowledged write to {key} lost"
    finally:
        assert again.stop() == 0
