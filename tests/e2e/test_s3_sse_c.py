"""Server-side encryption with customer-provided keys (SSE-C) through
boto3 against the real binary: PUT/GET/HEAD with the key (headers
echoed), the object unreadable without it or with another (400), malformed
key headers and SSE-C beside x-amz-server-side-encryption refused (400
InvalidArgument), ranged GETs across the 64 KiB records, copies re-keyed,
decrypted and shared, multipart (parts need the upload's key; GET of a
part), no plaintext in the data directory, and the workspace bucket view
refusing SSE-C (501)."""

import base64
import hashlib
import pathlib

import botocore
import pytest

KEY_A = bytes(range(32))
KEY_B = bytes(range(1, 33))


def sse(key=KEY_A, prefix=""):
    return {
        f"{prefix}SSECustomerAlgorithm": "AES256",
        f"{prefix}SSECustomerKey": base64.b64encode(key).decode(),
        f"{prefix}SSECustomerKeyMD5": base64.b64encode(hashlib.md5(key).digest()).decode(),
    }


def src_sse(key=KEY_A):
    return sse(key, "CopySource")


def code_of(excinfo):
    err = excinfo.value.response
    return err["Error"]["Code"], err["ResponseMetadata"]["HTTPStatusCode"]


def status_of(excinfo):
    return excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"]


def data(n, seed=0):
    return bytes((i * 31 + seed) % 251 for i in range(n))


def test_put_get_head_with_a_customer_key(s3):
    s3.create_bucket(Bucket="sse")
    body = data(200_000)
    put = s3.put_object(Bucket="sse", Key="k", Body=body, **sse())
    md5 = base64.b64encode(hashlib.md5(KEY_A).digest()).decode()
    assert put["SSECustomerAlgorithm"] == "AES256"
    assert put["SSECustomerKeyMD5"] == md5
    # The ETag is not a digest of the plaintext.
    assert put["ETag"].strip('"') != hashlib.md5(body).hexdigest()

    got = s3.get_object(Bucket="sse", Key="k", **sse())
    assert got["Body"].read() == body
    assert got["SSECustomerAlgorithm"] == "AES256"
    assert got["SSECustomerKeyMD5"] == md5
    assert got["ETag"] == put["ETag"]
    head = s3.head_object(Bucket="sse", Key="k", **sse())
    assert head["ContentLength"] == len(body)
    assert head["SSECustomerKeyMD5"] == md5

    # Without the key, or with another: 400 (ceph/s3-tests' expectation).
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket="sse", Key="k")
    assert code_of(e) == ("InvalidRequest", 400)
    assert "Server Side Encryption" in e.value.response["Error"]["Message"]
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket="sse", Key="k", **sse(KEY_B))
    assert code_of(e) == ("InvalidRequest", 400)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_object(Bucket="sse", Key="k")
    assert status_of(e) == 400
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_object(Bucket="sse", Key="k", **sse(KEY_B))
    assert status_of(e) == 400

    # A key for a plain object is refused too.
    s3.put_object(Bucket="sse", Key="plain", Body=b"plain")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket="sse", Key="plain", **sse())
    assert code_of(e) == ("InvalidRequest", 400)
    assert "not applicable" in e.value.response["Error"]["Message"]

    # Listing shows the plaintext size.
    listed = {o["Key"]: o["Size"] for o in s3.list_objects_v2(Bucket="sse")["Contents"]}
    assert listed["k"] == len(body)


def test_ranged_gets_across_records(s3):
    s3.create_bucket(Bucket="sse")
    body = data(3 * 65536 + 1234, 5)
    s3.put_object(Bucket="sse", Key="r", Body=body, **sse())
    for first, last in [(0, 0), (65530, 65545), (65536, 131072), (10, len(body) - 1)]:
        got = s3.get_object(Bucket="sse", Key="r", Range=f"bytes={first}-{last}", **sse())
        assert got["ContentRange"] == f"bytes {first}-{last}/{len(body)}"
        assert got["Body"].read() == body[first:last + 1]
    got = s3.get_object(Bucket="sse", Key="r", Range="bytes=-70000", **sse())
    assert got["Body"].read() == body[-70000:]


def test_malformed_key_headers_are_refused(s3):
    s3.create_bucket(Bucket="sse")
    good = sse()
    bad_md5 = dict(good, SSECustomerKeyMD5=base64.b64encode(b"\0" * 16).decode())
    short_key = dict(good, SSECustomerKey=base64.b64encode(b"k" * 16).decode(),
                     SSECustomerKeyMD5=base64.b64encode(hashlib.md5(b"k" * 16).digest()).decode())
    for headers in [bad_md5, short_key]:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.put_object(Bucket="sse", Key="x", Body=b"x", **headers)
        assert code_of(e) == ("InvalidArgument", 400)

    def with_headers(h):
        def add(params, **_):
            params["headers"].update(h)
        return add
    # Headers sent raw (boto3 fills in a missing MD5 itself).
    raw = s3
    for headers in [
        {"x-amz-server-side-encryption-customer-algorithm": "AES256",
         "x-amz-server-side-encryption-customer-key": good["SSECustomerKey"]},
        {"x-amz-server-side-encryption-customer-key": good["SSECustomerKey"],
         "x-amz-server-side-encryption-customer-key-md5": good["SSECustomerKeyMD5"]},
        {"x-amz-server-side-encryption-customer-algorithm": "AES256"},
    ]:
        handler = with_headers(headers)
        raw.meta.events.register("before-call.s3.PutObject", handler)
        try:
            with pytest.raises(botocore.exceptions.ClientError) as e:
                raw.put_object(Bucket="sse", Key="x", Body=b"x")
            assert code_of(e) == ("InvalidArgument", 400)
        finally:
            raw.meta.events.unregister("before-call.s3.PutObject", handler)
    # SSE-C beside SSE-S3 or SSE-KMS.
    for other in [{"ServerSideEncryption": "AES256"}, {"ServerSideEncryption": "aws:kms"}]:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.put_object(Bucket="sse", Key="x", Body=b"x", **good, **other)
        assert code_of(e) == ("InvalidArgument", 400)
        assert "incompatible" in e.value.response["Error"]["Message"]
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_object(Bucket="sse", Key="x")
    assert status_of(e) == 404


def test_copies_rekey_decrypt_and_share(s3):
    s3.create_bucket(Bucket="sse")
    body = data(100_000, 9)
    s3.put_object(Bucket="sse", Key="src", Body=body, **sse())
    # The source needs its key.
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.copy_object(Bucket="sse", Key="x", CopySource="sse/src")
    assert code_of(e) == ("InvalidRequest", 400)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.copy_object(Bucket="sse", Key="x", CopySource="sse/src", **src_sse(KEY_B))
    assert code_of(e) == ("InvalidRequest", 400)
    # Re-keyed.
    out = s3.copy_object(Bucket="sse", Key="rekeyed", CopySource="sse/src",
                         **src_sse(KEY_A), **sse(KEY_B))
    assert out["SSECustomerKeyMD5"] == sse(KEY_B)["SSECustomerKeyMD5"]
    assert s3.get_object(Bucket="sse", Key="rekeyed", **sse(KEY_B))["Body"].read() == body
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket="sse", Key="rekeyed", **sse(KEY_A))
    assert code_of(e) == ("InvalidRequest", 400)
    # Decrypted into a plain object, and a plain one sealed.
    s3.copy_object(Bucket="sse", Key="plain", CopySource="sse/src", **src_sse(KEY_A))
    assert s3.get_object(Bucket="sse", Key="plain")["Body"].read() == body
    s3.copy_object(Bucket="sse", Key="sealed", CopySource="sse/plain", **sse(KEY_B))
    assert s3.get_object(Bucket="sse", Key="sealed", **sse(KEY_B))["Body"].read() == body
    # Same key: kept as it is; and a copy onto itself that re-keys it.
    s3.copy_object(Bucket="sse", Key="same", CopySource="sse/src", **src_sse(KEY_A), **sse(KEY_A))
    assert s3.get_object(Bucket="sse", Key="same", **sse(KEY_A))["Body"].read() == body
    s3.copy_object(Bucket="sse", Key="src", CopySource="sse/src", **src_sse(KEY_A), **sse(KEY_B))
    assert s3.get_object(Bucket="sse", Key="src", **sse(KEY_B))["Body"].read() == body


def test_multipart_with_a_customer_key(s3):
    s3.create_bucket(Bucket="sse")
    up = s3.create_multipart_upload(Bucket="sse", Key="mp", **sse())
    assert up["SSECustomerKeyMD5"] == sse()["SSECustomerKeyMD5"]
    uid = up["UploadId"]
    p1, p2 = data(5 * 1024 * 1024 + 3, 1), data(70_000, 2)
    # A part without the key, or with another, is refused.
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.upload_part(Bucket="sse", Key="mp", UploadId=uid, PartNumber=1, Body=p1)
    assert code_of(e) == ("InvalidRequest", 400)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.upload_part(Bucket="sse", Key="mp", UploadId=uid, PartNumber=1, Body=p1,
                       **sse(KEY_B))
    assert code_of(e) == ("InvalidRequest", 400)
    e1 = s3.upload_part(Bucket="sse", Key="mp", UploadId=uid, PartNumber=1, Body=p1, **sse())
    assert e1["SSECustomerKeyMD5"] == sse()["SSECustomerKeyMD5"]
    e2 = s3.upload_part(Bucket="sse", Key="mp", UploadId=uid, PartNumber=2, Body=p2, **sse())
    parts = [{"PartNumber": 1, "ETag": e1["ETag"]}, {"PartNumber": 2, "ETag": e2["ETag"]}]
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.complete_multipart_upload(Bucket="sse", Key="mp", UploadId=uid,
                                     MultipartUpload={"Parts": parts}, **sse(KEY_B))
    assert code_of(e) == ("InvalidRequest", 400)
    done = s3.complete_multipart_upload(Bucket="sse", Key="mp", UploadId=uid,
                                        MultipartUpload={"Parts": parts}, **sse())
    whole = p1 + p2
    got = s3.get_object(Bucket="sse", Key="mp", **sse())
    assert got["Body"].read() == whole
    assert got["ETag"] == done["ETag"]
    part2 = s3.get_object(Bucket="sse", Key="mp", PartNumber=2, **sse())
    assert part2["PartsCount"] == 2
    assert part2["Body"].read() == p2
    at = len(p1)
    rng = s3.get_object(Bucket="sse", Key="mp", Range=f"bytes={at - 10}-{at + 9}", **sse())
    assert rng["Body"].read() == whole[at - 10:at + 10]
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket="sse", Key="mp")
    assert code_of(e) == ("InvalidRequest", 400)
    # A part copied from a sealed source into a sealed upload.
    up2 = s3.create_multipart_upload(Bucket="sse", Key="mp2", **sse(KEY_B))
    s3.upload_part_copy(Bucket="sse", Key="mp2", UploadId=up2["UploadId"], PartNumber=1,
                        CopySource="sse/mp", CopySourceRange="bytes=0-99",
                        **src_sse(KEY_A), **sse(KEY_B))
    listed = s3.list_parts(Bucket="sse", Key="mp2", UploadId=up2["UploadId"])["Parts"]
    s3.complete_multipart_upload(
        Bucket="sse", Key="mp2", UploadId=up2["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": listed[0]["ETag"]}]})
    assert s3.get_object(Bucket="sse", Key="mp2", **sse(KEY_B))["Body"].read() == whole[:100]


def test_no_plaintext_in_the_data_directory(s3server, tmp_path):
    s3 = s3server.client()
    s3.create_bucket(Bucket="sse")
    secret = b"SSE-C-PLAINTEXT-MARKER-" + b"0123456789abcdef" * 4
    s3.put_object(Bucket="sse", Key="small", Body=secret, **sse())
    s3.put_object(Bucket="sse", Key="large", Body=secret * 5000, **sse())
    root = tmp_path / "data"
    blobs = [p for p in root.rglob("*") if p.is_file()]
    assert blobs
    for path in blobs:
        assert secret not in path.read_bytes(), path
    # The scan is real: a plain object's bytes are found.
    s3.put_object(Bucket="sse", Key="plain", Body=secret * 5000)
    assert any(secret in p.read_bytes() for p in root.rglob("*") if p.is_file())


def test_workspace_bucket_view_refuses_sse_c(stow_bin, workdir):
    from test_workspace_serve import prepare
    from s3server import WorkspaceServer

    p = prepare(stow_bin, workdir, {"seed.txt": b"seed"})
    server = WorkspaceServer(stow_bin, p["workspace_id"], workdir / "reg")
    try:
        s3, bucket = server.client(), server.bucket
        refusals = [
            lambda: s3.put_object(Bucket=bucket, Key="new.txt", Body=b"x", **sse()),
            lambda: s3.get_object(Bucket=bucket, Key="seed.txt", **sse()),
            lambda: s3.head_object(Bucket=bucket, Key="seed.txt", **sse()),
            lambda: s3.copy_object(Bucket=bucket, Key="copy.txt",
                                   CopySource=f"{bucket}/seed.txt", **sse()),
            lambda: s3.create_multipart_upload(Bucket=bucket, Key="mp.txt", **sse()),
        ]
        for refused in refusals:
            with pytest.raises(botocore.exceptions.ClientError) as e:
                refused()
            assert status_of(e) == 501
            if code_of(e)[0] != "501":  # HEAD answers without a body
                assert code_of(e) == ("NotImplemented", 501)
                assert "SSE-C" in e.value.response["Error"]["Message"]
        assert not (pathlib.Path(server.root) / "new.txt").exists()
        assert not (pathlib.Path(server.root) / "copy.txt").exists()
        # Without a key the view still serves its files.
        assert s3.get_object(Bucket=bucket, Key="seed.txt")["Body"].read() == b"seed"
    finally:
        assert server.stop() == 0
