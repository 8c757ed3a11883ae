"""A 5 GiB object streams through PUT and GET with bounded server memory."""

import hashlib
import http.client
import shutil
import urllib.parse

import pytest

SIZE = 5 << 30
BLOCK = hashlib.sha256(b"stow").digest() * (1 << 15)  # 1 MiB, deterministic


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_five_gib_put_and_get_stream(s3server, s3, tmp_path):
    free = shutil.disk_usage(tmp_path).free
    if free < 3 * SIZE:
        pytest.skip(f"needs {3 * SIZE >> 30} GiB free for a 5 GiB object, {free >> 30} GiB free here")
    s3.create_bucket(Bucket="large")
    put_url = urllib.parse.urlparse(
        s3.generate_presigned_url("put_object", Params={"Bucket": "large", "Key": "5g"}, ExpiresIn=3600))
    conn = http.client.HTTPConnection(put_url.netloc, timeout=600)
    conn.putrequest("PUT", put_url.path + "?" + put_url.query)
    conn.putheader("Content-Length", str(SIZE))
    conn.endheaders()
    md5 = hashlib.md5()
    sent = 0
    while sent < SIZE:
        conn.send(BLOCK)
        md5.update(BLOCK)
        sent += len(BLOCK)
    resp = conn.getresponse()
    resp.read()
    assert resp.status == 200
    assert resp.getheader("ETag") == f'"{md5.hexdigest()}"'

    get_url = urllib.parse.urlparse(
        s3.generate_presigned_url("get_object", Params={"Bucket": "large", "Key": "5g"}, ExpiresIn=3600))
    conn = http.client.HTTPConnection(get_url.netloc, timeout=600)
    conn.request("GET", get_url.path + "?" + get_url.query)
    resp = conn.getresponse()
    assert resp.status == 200
    assert int(resp.getheader("Content-Length")) == SIZE
    back = hashlib.md5()
    got = 0
    while True:
        chunk = resp.read(4 << 20)
        if not chunk:
            break
        back.update(chunk)
        got += len(chunk)
    assert got == SIZE and back.hexdigest() == md5.hexdigest()
    rss = peak_rss_mib(s3server.proc.pid)
    assert rss < 256, f"server peak RSS {rss:.0f} MiB: bodies must stream"
