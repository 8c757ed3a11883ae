"""S3 object operations through boto3 against the real server."""

import hashlib
import io
import urllib.error
import urllib.request

import botocore
import pytest


def code_of(excinfo):
    return excinfo.value.response["Error"]["Code"], excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"]


def test_bucket_lifecycle(s3):
    s3.create_bucket(Bucket="life")
    s3.create_bucket(Bucket="life")  # idempotent for the owner
    s3.head_bucket(Bucket="life")
    names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert names == ["life"]
    s3.put_object(Bucket="life", Key="k", Body=b"x")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.delete_bucket(Bucket="life")
    assert code_of(e) == ("BucketNotEmpty", 409)
    s3.delete_object(Bucket="life", Key="k")
    s3.delete_bucket(Bucket="life")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_bucket(Bucket="life")
    assert code_of(e)[1] == 404
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.create_bucket(Bucket="Bad_Name")
    assert code_of(e) == ("InvalidBucketName", 400)


def test_put_get_round_trip(s3):
    s3.create_bucket(Bucket="rtt")
    for key in ["plain.txt", "dir/../name.txt", "dir/./name.txt", "sp ace+plus", "ünïcödé/ключ"]:
        s3.put_object(
            Bucket="rtt", Key=key, Body=key.encode(), ContentType="text/plain",
            Metadata={"Project": "stow", "RUN-ID": "7"},
        )
        got = s3.get_object(Bucket="rtt", Key=key)
        assert got["Body"].read() == key.encode()
        assert got["ContentType"] == "text/plain"
        assert got["Metadata"] == {"project": "stow", "run-id": "7"}
        assert got["ETag"] == '"%s"' % hashlib.md5(key.encode()).hexdigest()
    s3.put_object(Bucket="rtt", Key="empty", Body=b"")
    assert s3.get_object(Bucket="rtt", Key="empty")["Body"].read() == b""
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="rtt")["Contents"]]
    assert "dir/../name.txt" in keys and "dir/./name.txt" in keys
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket="rtt", Key="missing")
    assert code_of(e) == ("NoSuchKey", 404)



def test_key_and_metadata_limits_have_their_own_codes(s3):
    """A key over 1024 bytes is KeyTooLongError and user metadata over
    2 KiB (keys and values together) is MetadataTooLarge, both 400, on
    every write that names a key or carries metadata; nothing is stored."""
    s3.create_bucket(Bucket="limits")
    s3.put_object(Bucket="limits", Key="k" * 1024, Body=b"x")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket="limits", Key="k" * 1025, Body=b"x")
    assert code_of(e) == ("KeyTooLongError", 400)
    # Bytes, not characters: 513 two-byte characters are 1026 bytes.
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket="limits", Key="\u00e9" * 513, Body=b"x")
    assert code_of(e) == ("KeyTooLongError", 400)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.create_multipart_upload(Bucket="limits", Key="m" * 1025)
    assert code_of(e) == ("KeyTooLongError", 400)

    # "big" (3 bytes) + 2045 bytes is exactly 2 KiB; one more is too much.
    s3.put_object(Bucket="limits", Key="at-limit", Body=b"x", Metadata={"big": "v" * 2045})
    assert s3.head_object(Bucket="limits", Key="at-limit")["Metadata"] == {"big": "v" * 2045}
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket="limits", Key="over", Body=b"x", Metadata={"big": "v" * 2046})
    assert code_of(e) == ("MetadataTooLarge", 400)
    # Many small entries count together.
    many = {f"m{i:02d}": "v" * 100 for i in range(25)}
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket="limits", Key="over", Body=b"x", Metadata=many)
    assert code_of(e) == ("MetadataTooLarge", 400)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.copy_object(Bucket="limits", Key="over", CopySource="limits/at-limit",
                       MetadataDirective="REPLACE", Metadata={"big": "v" * 3000})
    assert code_of(e) == ("MetadataTooLarge", 400)
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="limits")["Contents"])
    assert keys == ["at-limit", "k" * 1024]

def test_ranges(s3):
    s3.create_bucket(Bucket="rng")
    s3.put_object(Bucket="rng", Key="d", Body=b"0123456789")
    cases = {"bytes=0-4": (b"01234", "bytes 0-4/10"), "bytes=-3": (b"789", "bytes 7-9/10"),
             "bytes=5-": (b"56789", "bytes 5-9/10"), "bytes=8-9999": (b"89", "bytes 8-9/10")}
    for rng, (body, content_range) in cases.items():
        got = s3.get_object(Bucket="rng", Key="d", Range=rng)
        assert got["Body"].read() == body
        assert got["ContentRange"] == content_range
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket="rng", Key="d", Range="bytes=50-60")
    assert code_of(e) == ("InvalidRange", 416)
    assert e.value.response["ResponseMetadata"]["HTTPHeaders"]["content-range"] == "bytes */10"


def test_conditional_writes_and_reads(s3):
    s3.create_bucket(Bucket="cond")
    first = s3.put_object(Bucket="cond", Key="k", Body=b"one", IfNoneMatch="*")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket="cond", Key="k", Body=b"two", IfNoneMatch="*")
    assert code_of(e) == ("PreconditionFailed", 412)
    s3.put_object(Bucket="cond", Key="k", Body=b"two", IfMatch=first["ETag"])
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket="cond", Key="k", Body=b"three", IfMatch=first["ETag"])
    assert code_of(e) == ("PreconditionFailed", 412)
    assert s3.get_object(Bucket="cond", Key="k")["Body"].read() == b"two"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket="cond", Key="k", IfNoneMatch="*")
    assert code_of(e)[1] == 304
    head = s3.head_object(Bucket="cond", Key="k")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_object(Bucket="cond", Key="k", IfModifiedSince=head["LastModified"])
    assert code_of(e)[1] == 304
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket="cond", Key="k", IfMatch='"nope"')
    assert code_of(e) == ("PreconditionFailed", 412)


def test_checksums(s3):
    s3.create_bucket(Bucket="sums")
    expect = {
        "CRC64NVME": "jSnVw/bqjr4=", "CRC32C": "yZRlqg==", "SHA1": "Kq5sNclPz7QV2+lfQIuc6R7oRu0=",
        "SHA256": "uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek=",
    }
    for alg, value in expect.items():
        s3.put_object(Bucket="sums", Key=alg, Body=b"hello world", **{f"Checksum{alg}": value})
        got = s3.head_object(Bucket="sums", Key=alg, ChecksumMode="ENABLED")
        assert got[f"Checksum{alg}"] == value
        plain = s3.head_object(Bucket="sums", Key=alg)
        assert f"Checksum{alg}" not in plain, "checksums only on request"
    s3.put_object(Bucket="sums", Key="crc32", Body=b"checksum body", ChecksumCRC32="RL7+RQ==")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket="sums", Key="bad", Body=b"hello world", ChecksumCRC64NVME="AAAAAAAAAAA=")
    assert code_of(e) == ("BadDigest", 400)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket="sums", Key="bad", Body=b"body", ContentMD5="bm90LXRoZS1ib2R5")
    assert code_of(e)[1] == 400
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_object(Bucket="sums", Key="bad")
    assert code_of(e)[1] == 404, "refused puts store nothing"


def test_default_trailing_checksum_upload(s3):
    """boto3's default PutObject sends aws-chunked with a CRC trailer."""
    s3.create_bucket(Bucket="trail")
    body = b"x" * 100_000
    s3.put_object(Bucket="trail", Key="k", Body=io.BytesIO(body))
    got = s3.get_object(Bucket="trail", Key="k", ChecksumMode="ENABLED")
    assert got["Body"].read() == body
    assert "ContentEncoding" not in got or "aws-chunked" not in got["ContentEncoding"]
    assert any(k.startswith("ChecksumCRC") for k in got), got.keys()


def test_listing_v1_and_v2(s3):
    s3.create_bucket(Bucket="lst")
    for key in ["a/1", "a/./two", "a/3", "b/1", "root.txt"]:
        s3.put_object(Bucket="lst", Key=key, Body=b"")
    page = s3.list_objects_v2(Bucket="lst", Prefix="a/", MaxKeys=2)
    assert [o["Key"] for o in page["Contents"]] == ["a/./two", "a/1"]
    assert page["IsTruncated"]
    page = s3.list_objects_v2(Bucket="lst", Prefix="a/", MaxKeys=2, ContinuationToken=page["NextContinuationToken"])
    assert [o["Key"] for o in page["Contents"]] == ["a/3"]
    page = s3.list_objects_v2(Bucket="lst", Delimiter="/", MaxKeys=2)
    assert [p["Prefix"] for p in page["CommonPrefixes"]] == ["a/", "b/"]
    assert page["KeyCount"] == 2 and page["IsTruncated"]
    page = s3.list_objects_v2(Bucket="lst", Delimiter="/", ContinuationToken=page["NextContinuationToken"])
    assert [o["Key"] for o in page["Contents"]] == ["root.txt"]
    for bad in ["x" * 1001, "AA\x00"]:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.list_objects_v2(Bucket="lst", ContinuationToken=bad)
        assert code_of(e) == ("InvalidArgument", 400)
    v1 = s3.list_objects(Bucket="lst", Delimiter="/", MaxKeys=1)
    assert v1["IsTruncated"] and v1["NextMarker"] == "a/"
    v1 = s3.list_objects(Bucket="lst", Marker="a/3")
    assert [o["Key"] for o in v1["Contents"]] == ["b/1", "root.txt"]
    page = s3.list_objects_v2(Bucket="lst", MaxKeys=0)
    assert page["KeyCount"] == 0 and "Contents" not in page
    paginator = s3.get_paginator("list_objects_v2")
    seen = [o["Key"] for p in paginator.paginate(Bucket="lst", PaginationConfig={"PageSize": 2}) for o in p.get("Contents", [])]
    assert seen == ["a/./two", "a/1", "a/3", "b/1", "root.txt"]
    versions = s3.list_object_versions(Bucket="lst", Prefix="a/")
    assert [(v["Key"], v["VersionId"], v["IsLatest"]) for v in versions["Versions"]] == [
        ("a/./two", "null", True), ("a/1", "null", True), ("a/3", "null", True)]


def test_copy(s3):
    s3.create_bucket(Bucket="src")
    s3.create_bucket(Bucket="dst")
    put = s3.put_object(Bucket="src", Key="k", Body=b"source", ContentType="text/csv", Metadata={"a": "1"})
    s3.copy_object(Bucket="dst", Key="k", CopySource={"Bucket": "src", "Key": "k"})
    head = s3.head_object(Bucket="dst", Key="k")
    assert head["ContentType"] == "text/csv" and head["Metadata"] == {"a": "1"}
    s3.copy_object(Bucket="dst", Key="r", CopySource="src/k", MetadataDirective="REPLACE",
                   ContentType="application/json", Metadata={"b": "2"})
    head = s3.head_object(Bucket="dst", Key="r")
    assert head["ContentType"] == "application/json" and head["Metadata"] == {"b": "2"}
    s3.copy_object(Bucket="dst", Key="c1", CopySource="src/k", CopySourceIfMatch=put["ETag"])
    s3.copy_object(Bucket="dst", Key="c2", CopySource="src/k", CopySourceIfNoneMatch='"different"')
    for kw in [{"CopySourceIfNoneMatch": "*"}, {"CopySourceIfNoneMatch": put["ETag"]},
               {"CopySourceIfMatch": put["ETag"], "CopySourceIfNoneMatch": put["ETag"]}]:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.copy_object(Bucket="dst", Key="c3", CopySource="src/k", **kw)
        assert code_of(e) == ("PreconditionFailed", 412)
    s3.delete_object(Bucket="src", Key="k")
    assert s3.get_object(Bucket="dst", Key="k")["Body"].read() == b"source"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.copy_object(Bucket="dst", Key="k", CopySource="dst/k")
    assert code_of(e) == ("InvalidRequest", 400)


def test_delete_objects(s3):
    s3.create_bucket(Bucket="del")
    s3.put_object(Bucket="del", Key="a", Body=b"1")
    out = s3.delete_objects(Bucket="del", Delete={"Objects": [{"Key": "a"}, {"Key": "missing"}, {"Key": "v", "VersionId": "null"}]})
    assert sorted(d["Key"] for d in out["Deleted"]) == ["a", "missing", "v"]
    s3.put_object(Bucket="del", Key="b", Body=b"1")
    out = s3.delete_objects(Bucket="del", Delete={"Objects": [{"Key": "b"}], "Quiet": True})
    assert "Deleted" not in out or out["Deleted"] == []
    assert s3.list_objects_v2(Bucket="del")["KeyCount"] == 0


def test_a_tag_key_given_twice_is_invalid_tag_and_writes_nothing(s3):
    s3.create_bucket(Bucket="dup-tags")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket="dup-tags", Key="k", Body=b"x", Tagging="a=1&b=2&a=3")
    assert code_of(e) == ("InvalidTag", 400)
    assert s3.list_objects_v2(Bucket="dup-tags").get("KeyCount") == 0
    s3.put_object(Bucket="dup-tags", Key="k", Body=b"x", Tagging="a=1")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object_tagging(Bucket="dup-tags", Key="k", Tagging={"TagSet": [
            {"Key": "a", "Value": "1"}, {"Key": "a", "Value": "2"}]})
    assert code_of(e) == ("InvalidTag", 400)
    assert s3.get_object_tagging(Bucket="dup-tags", Key="k")["TagSet"] == [{"Key": "a", "Value": "1"}]


def test_presigned_urls(s3server, s3):
    s3.create_bucket(Bucket="pre")
    put_url = s3.generate_presigned_url("put_object", Params={"Bucket": "pre", "Key": "p"}, ExpiresIn=300)
    req = urllib.request.Request(put_url, data=b"presigned body", method="PUT")
    with urllib.request.urlopen(req) as resp:
        assert resp.status == 200
    get_url = s3.generate_presigned_url("get_object", Params={"Bucket": "pre", "Key": "p"}, ExpiresIn=300)
    with urllib.request.urlopen(get_url) as resp:
        assert resp.read() == b"presigned body"
    tampered = get_url.replace("Key=p", "Key=q").replace("/pre/p", "/pre/q")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(tampered)
    assert e.value.code == 403


def test_unsupported_features_answer_501(s3):
    s3.create_bucket(Bucket="nope")
    # Bucket logging is not offered (bucket policies, once here, are now
    # implemented: tests/e2e/test_s3_bucket_policy.py).
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_bucket_logging(Bucket="nope", BucketLoggingStatus={})
    assert code_of(e) == ("NotImplemented", 501)


def test_sigv2_is_refused_by_name(s3server):
    req = urllib.request.Request(s3server.endpoint + "/", headers={"Authorization": "AWS AKID:signature"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req)
    assert e.value.code == 403
    assert b"Signature Version 2" in e.value.read()


def test_unsigned_requests_are_denied(s3server, s3):
    # To a bucket that exists (to one that does not, S3 answers
    # NoSuchBucket to anyone: test_s3_public_access.py).
    s3.create_bucket(Bucket="health")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(s3server.endpoint + "/health")
    assert e.value.code == 403


def test_virtual_host_presigned_get(s3server, s3):
    import boto3
    from botocore.config import Config
    import http.client
    import urllib.parse

    s3.create_bucket(Bucket="vhost")
    s3.put_object(Bucket="vhost", Key="dir/file.txt", Body=b"virtual")
    port = urllib.parse.urlparse(s3server.endpoint).port
    virtual = boto3.client(
        "s3", endpoint_url=f"http://localhost:{port}", region_name="us-east-1",
        aws_access_key_id=s3server.access_key, aws_secret_access_key=s3server.secret_key,
        config=Config(signature_version="s3v4", s3={"addressing_style": "virtual"}),
    )
    url = urllib.parse.urlparse(virtual.generate_presigned_url(
        "get_object", Params={"Bucket": "vhost", "Key": "dir/file.txt"}, ExpiresIn=300))
    assert url.hostname == "vhost.localhost"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", url.path + "?" + url.query, headers={"Host": url.netloc})
    resp = conn.getresponse()
    assert (resp.status, resp.read()) == (200, b"virtual")


def test_edge_cases_of_the_conformance_corpus(s3server, s3):
    s3.create_bucket(Bucket="edge")
    s3.put_object(Bucket="edge", Key="d", Body=b"0123456789")
    for rng in ["bytes=0-1,2-3", "bytes=--1", "bytes=5-4"]:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.get_object(Bucket="edge", Key="d", Range=rng)
        assert code_of(e)[1] in (400, 416), rng
    # A checksum algorithm S3 does not define is refused, not ignored.
    def add_sha512(request, **kwargs):
        request.headers["x-amz-checksum-sha512"] = "AAAA"
    s3.meta.events.register("before-sign.s3.PutObject", add_sha512)
    try:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.put_object(Bucket="edge", Key="sha512", Body=b"x")
        assert code_of(e)[1] == 400
    finally:
        s3.meta.events.unregister("before-sign.s3.PutObject", add_sha512)
    got = s3.get_object(Bucket="edge", Key="d")
    assert len(got["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"]) == 32
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.list_parts(Bucket="edge", Key="d", UploadId="nope", MaxParts=-1)
    assert code_of(e)[1] in (400, 404)
