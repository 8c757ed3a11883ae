"""`POST /_stow/reset` (issue 30): a server started with `--allow-reset`
empties its store on a SigV4-signed request — buckets, objects, multipart
uploads — and keeps serving; without the flag, or unsigned, or badly
signed, the call is refused and nothing changes."""

import json
import subprocess
import urllib.error
import urllib.request

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from s3server import S3Server


def call_reset(server, *, secret=None, sign=True, method="POST"):
    """Sends the reset call; returns (status, headers, body text)."""
    url = f"{server.endpoint}/_stow/reset"
    headers = {}
    if sign:
        request = AWSRequest(method=method, url=url, data=b"",
                             headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
        creds = Credentials(server.access_key, secret or server.secret_key)
        SigV4Auth(creds, "s3", server.ready["region"]).add_auth(request)
        headers = dict(request.headers.items())
    req = urllib.request.Request(url, data=b"", method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read().decode()


def populate(s3):
    """A bucket with an inline and a file object, another with an upload in
    progress; returns the upload's ID."""
    s3.create_bucket(Bucket="keep-a")
    s3.put_object(Bucket="keep-a", Key="small.txt", Body=b"hello")
    s3.put_object(Bucket="keep-a", Key="large.bin", Body=b"x" * 200_000)
    s3.create_bucket(Bucket="keep-b")
    up = s3.create_multipart_upload(Bucket="keep-b", Key="big")["UploadId"]
    s3.upload_part(Bucket="keep-b", Key="big", UploadId=up, PartNumber=1, Body=b"p" * (5 << 20))
    return up


def bucket_names(s3):
    return sorted(b["Name"] for b in s3.list_buckets()["Buckets"])


@pytest.fixture
def resettable(stow_bin, tmp_path):
    server = S3Server(stow_bin, tmp_path / "data", "--allow-reset")
    yield server
    assert server.stop() == 0


def test_without_the_flag_reset_is_refused_and_nothing_changes(s3server, s3):
    populate(s3)
    for sign in (True, False):
        status, _, body = call_reset(s3server, sign=sign)
        assert status == 405, body
        assert "<Code>MethodNotAllowed</Code>" in body
        assert "--allow-reset" in body
    assert bucket_names(s3) == ["keep-a", "keep-b"]
    assert s3.get_object(Bucket="keep-a", Key="large.bin")["Body"].read() == b"x" * 200_000
    assert len(s3.list_multipart_uploads(Bucket="keep-b").get("Uploads", [])) == 1


def test_reset_empties_the_store_and_the_server_keeps_serving(resettable):
    s3 = resettable.client()
    upload = populate(s3)
    status, headers, body = call_reset(resettable)
    assert status == 200, body
    assert headers["content-type"] == "application/json"
    assert json.loads(body) == {
        "reset": True, "buckets": 2, "objects": 2, "bytes": 5 + 200_000 + (5 << 20),
        "uploads": 1, "receipts": 0,
    }
    assert bucket_names(s3) == []
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket="keep-a", Key="small.txt")
    assert e.value.response["Error"]["Code"] in ("404", "NoSuchBucket")
    with pytest.raises(ClientError) as e:
        s3.list_parts(Bucket="keep-b", Key="big", UploadId=upload)
    assert e.value.response["Error"]["Code"] in ("NoSuchBucket", "NoSuchUpload")

    # The same names work again, and the server answers as before.
    s3.create_bucket(Bucket="keep-a")
    s3.put_object(Bucket="keep-a", Key="large.bin", Body=b"y" * 200_000)
    assert s3.get_object(Bucket="keep-a", Key="large.bin")["Body"].read() == b"y" * 200_000
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="keep-a")["Contents"]] == ["large.bin"]
    status, _, body = call_reset(resettable)
    assert status == 200 and json.loads(body)["objects"] == 1
    assert bucket_names(s3) == []
    assert call_reset(resettable)[0] == 200, "an empty store resets too"


def test_reset_is_refused_unsigned_badly_signed_or_not_posted(resettable):
    s3 = resettable.client()
    populate(s3)
    status, _, body = call_reset(resettable, sign=False)
    assert status == 403 and "<Code>AccessDenied</Code>" in body, body
    status, _, body = call_reset(resettable, secret="wrong-secret")
    assert status == 403 and "<Code>SignatureDoesNotMatch</Code>" in body, body
    status, _, body = call_reset(resettable, method="GET")
    assert status == 405 and "<Code>MethodNotAllowed</Code>" in body, body
    assert bucket_names(s3) == ["keep-a", "keep-b"]
    # `_stow` stays unusable as a bucket name on such a server.
    with pytest.raises(ClientError) as e:
        s3.create_bucket(Bucket="_stow")
    assert e.value.response["Error"]["Code"] == "InvalidBucketName"


def test_reset_survives_a_restart(stow_bin, tmp_path):
    data = tmp_path / "data"
    server = S3Server(stow_bin, data, "--allow-reset")
    s3 = server.client()
    populate(s3)
    assert call_reset(server)[0] == 200
    s3.create_bucket(Bucket="after")
    s3.put_object(Bucket="after", Key="k", Body=b"z" * 100_000)
    assert server.stop() == 0
    server = S3Server(stow_bin, data)
    s3 = server.client()
    assert bucket_names(s3) == ["after"]
    assert s3.get_object(Bucket="after", Key="k")["Body"].read() == b"z" * 100_000
    assert server.stop() == 0
    check = subprocess.run([stow_bin, "check", "--data-dir", str(data)],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_memory_backend_resets_too(stow_bin, tmp_path):
    server = S3Server(stow_bin, tmp_path / "unused", "--allow-reset", backend="memory")
    try:
        s3 = server.client()
        populate(s3)
        assert call_reset(server)[0] == 200
        assert bucket_names(s3) == []
        s3.create_bucket(Bucket="again")
        s3.put_object(Bucket="again", Key="k", Body=b"q" * 100_000)
        assert s3.get_object(Bucket="again", Key="k")["Body"].read() == b"q" * 100_000
    finally:
        assert server.stop() == 0


def test_read_only_and_allow_reset_conflict(stow_bin, tmp_path):
    out = subprocess.run([stow_bin, "serve", "--port", "0", "--data-dir", str(tmp_path / "d"),
                          "--read-only", "--allow-reset"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 2, out.stdout + out.stderr
