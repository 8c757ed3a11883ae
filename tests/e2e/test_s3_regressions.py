"""Conformance regressions of issue 29, each against the real binary with
boto3 (and raw HTTP where boto3 hides the wire): answers that differed from
AWS's (and from ceph/s3-tests' AWS-checked expectations)."""

import base64
import os
import re
import urllib.parse
import zlib

import boto3
import botocore
import botocore.config
import pytest
import requests

from test_s3_conformance import signed_raw

MIB = 1024 * 1024


def code_of(e):
    r = e.value.response
    return r["Error"]["Code"], r["ResponseMetadata"]["HTTPStatusCode"]


def crc32_b64(data):
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def test_unicode_metadata_comes_back_as_sent(s3server, s3):
    """A non-ASCII x-amz-meta-* value is answered with the bytes the client
    sent (botocore sends UTF-8), never RFC 2047-encoded."""
    s3.create_bucket(Bucket="meta")
    value = "Hello World\xe9 \u65e5\u672c"

    def set_raw(**kwargs):
        kwargs["params"]["headers"]["x-amz-meta-meta1"] = value

    s3.meta.events.register("before-call.s3.PutObject", set_raw)
    try:
        s3.put_object(Bucket="meta", Key="k", Body=b"bar", Metadata={"plain": "ascii"})
    finally:
        s3.meta.events.unregister("before-call.s3.PutObject", set_raw)
    # botocore (http.client) reads header bytes as Latin-1: undo that to see
    # the bytes on the wire.
    for op in (s3.get_object, s3.head_object):
        got = op(Bucket="meta", Key="k")
        wire = got["Metadata"]["meta1"].encode("latin-1")
        assert wire == value.encode(), (op.__name__, wire)
        assert b"=?UTF-8?" not in wire
        assert got["Metadata"]["plain"] == "ascii"
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "meta", "Key": "k"})
    raw = requests.get(url, timeout=10).raw.headers["x-amz-meta-meta1"]
    assert raw.encode("latin-1") == value.encode()


def test_presigned_urls_with_no_lifetime_left_are_403(s3server, s3):
    """X-Amz-Expires of zero or less: 403 AccessDenied "Request has expired"
    (PUT and GET), as AWS answers; the object is untouched."""
    s3.create_bucket(Bucket="pexp")
    s3.put_object(Bucket="pexp", Key="foo", Body=b"old")
    put = s3.generate_presigned_url("put_object", Params={"Bucket": "pexp", "Key": "foo"},
                                    ExpiresIn=-1000, HttpMethod="PUT")
    r = requests.put(put, data=b"new", timeout=10)
    assert r.status_code == 403, r.text
    assert "<Code>AccessDenied</Code>" in r.text and "Request has expired" in r.text, r.text
    for expires in (0, -7):
        get = s3.generate_presigned_url("get_object", Params={"Bucket": "pexp", "Key": "foo"},
                                        ExpiresIn=expires)
        r = requests.get(get, timeout=10)
        assert r.status_code == 403, (expires, r.text)
        assert "<Code>AccessDenied</Code>" in r.text, r.text
    assert s3.get_object(Bucket="pexp", Key="foo")["Body"].read() == b"old"


def test_list_objects_v1_echoes_a_newline_prefix_raw(s3server, s3):
    """ListObjects v1 never url-encodes its Prefix element (boto3 asks for
    EncodingType=url and decodes only keys, prefixes, delimiter and markers);
    v2 encodes it and boto3 decodes it: both show the newline."""
    s3.create_bucket(Bucket="newline")
    s3.put_object(Bucket="newline", Key="a\nb/c", Body=b"x")
    s3.put_object(Bucket="newline", Key="\nfoo", Body=b"x")
    for prefix in ("\n", "a\n"):
        v1 = s3.list_objects(Bucket="newline", Prefix=prefix)
        assert v1["Prefix"] == prefix, v1["Prefix"]
        assert [o["Key"] for o in v1["Contents"]] == [k for k in ("\nfoo", "a\nb/c") if k.startswith(prefix)]
        v2 = s3.list_objects_v2(Bucket="newline", Prefix=prefix)
        assert v2["Prefix"] == prefix, v2["Prefix"]
    # On the wire: v1 answers Prefix as sent (XML-escaped only) with or
    # without encoding-type=url; its keys are encoded when asked.
    for query in ("prefix=a%0A", "encoding-type=url&prefix=a%0A"):
        r = signed_raw(s3server, "GET", f"/newline?{query}")
        assert r.status == 200, r
        assert re.search(rb"<Prefix>a(\n|&#xA;|&#10;)</Prefix>", r.body), (query, r.body)
        assert b"%0A</Prefix>" not in r.body, (query, r.body)
    r = signed_raw(s3server, "GET", "/newline?encoding-type=url&prefix=a%0A")
    assert b"<Key>a%0Ab%2Fc</Key>" in r.body or b"<Key>a%0Ab/c</Key>" in r.body, r.body


def test_upload_part_copy_refuses_ranges_outside_or_malformed(s3server, s3):
    s3.create_bucket(Bucket="upc")
    s3.put_object(Bucket="upc", Key="source", Body=b"12345")
    uid = s3.create_multipart_upload(Bucket="upc", Key="dest")["UploadId"]
    src = {"Bucket": "upc", "Key": "source"}
    # The end past the source (the start inside): InvalidRange, not a clamp.
    for bad in ("bytes=0-21", "bytes=2-5", "bytes=7-9"):
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.upload_part_copy(Bucket="upc", Key="dest", UploadId=uid, PartNumber=1,
                                CopySource=src, CopySourceRange=bad)
        assert code_of(e) == ("InvalidRange", 400), (bad, code_of(e))
    # Malformed: InvalidArgument.
    for bad in ("0-2", "bytes=0", "bytes=hello-world", "bytes=0-bar", "bytes=hello-", "bytes=0-2,3-5"):
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.upload_part_copy(Bucket="upc", Key="dest", UploadId=uid, PartNumber=1,
                                CopySource=src, CopySourceRange=bad)
        assert code_of(e) == ("InvalidArgument", 400), (bad, code_of(e))
    assert s3.list_parts(Bucket="upc", Key="dest", UploadId=uid).get("Parts", []) == []
    # The last byte exactly: recorded.
    s3.upload_part_copy(Bucket="upc", Key="dest", UploadId=uid, PartNumber=1,
                        CopySource=src, CopySourceRange="bytes=1-4")
    parts = s3.list_parts(Bucket="upc", Key="dest", UploadId=uid)["Parts"]
    assert [(p["PartNumber"], p["Size"]) for p in parts] == [(1, 4)]


@pytest.mark.parametrize("kind", ["FULL_OBJECT", "COMPOSITE"])
def test_multipart_checksum_type_everywhere(s3server, s3, kind):
    """ChecksumType on CreateMultipartUpload, CompleteMultipartUpload, HEAD,
    GetObjectAttributes and part reads; a composite value keeps its -N."""
    s3.create_bucket(Bucket="mpck")
    bodies = [os.urandom(5 * MIB), os.urandom(5 * MIB), b"tail" * 100]
    up = s3.create_multipart_upload(Bucket="mpck", Key="o", ChecksumAlgorithm="CRC32", ChecksumType=kind)
    assert (up["ChecksumAlgorithm"], up["ChecksumType"]) == ("CRC32", kind)
    parts = []
    for n, body in enumerate(bodies, 1):
        p = s3.upload_part(Bucket="mpck", Key="o", UploadId=up["UploadId"], PartNumber=n, Body=body,
                           ChecksumAlgorithm="CRC32", ChecksumCRC32=crc32_b64(body))
        assert p["ChecksumCRC32"] == crc32_b64(body)
        parts.append({"PartNumber": n, "ETag": p["ETag"], "ChecksumCRC32": p["ChecksumCRC32"]})
    if kind == "FULL_OBJECT":
        whole = crc32_b64(b"".join(bodies))
    else:
        raw = b"".join(zlib.crc32(b).to_bytes(4, "big") for b in bodies)
        whole = crc32_b64(raw) + "-3"
    done = s3.complete_multipart_upload(Bucket="mpck", Key="o", UploadId=up["UploadId"],
                                        MultipartUpload={"Parts": parts}, ChecksumCRC32=whole)
    assert (done["ChecksumCRC32"], done["ChecksumType"]) == (whole, kind)
    head = s3.head_object(Bucket="mpck", Key="o", ChecksumMode="ENABLED")
    assert (head["ChecksumCRC32"], head["ChecksumType"]) == (whole, kind)
    assert "ChecksumCRC32" not in s3.head_object(Bucket="mpck", Key="o")
    attrs = s3.get_object_attributes(Bucket="mpck", Key="o", ObjectAttributes=["Checksum"])["Checksum"]
    assert (attrs["ChecksumCRC32"], attrs["ChecksumType"]) == (whole, kind)
    for n, body in enumerate(bodies, 1):
        got = s3.get_object(Bucket="mpck", Key="o", PartNumber=n)
        assert got["Body"].read() == body
        assert (got["ChecksumCRC32"], got["ChecksumType"]) == (crc32_b64(body), kind), n


def test_quoted_prefix_in_v1_is_xml_escaped(s3server, s3):
    """The raw v1 Prefix is still XML-escaped (never url-encoded)."""
    s3.create_bucket(Bucket="esc")
    s3.put_object(Bucket="esc", Key="<a&b>/k", Body=b"x")
    assert s3.list_objects(Bucket="esc", Prefix="<a&b>")["Prefix"] == "<a&b>"
    r = signed_raw(s3server, "GET", "/esc?encoding-type=url&prefix=" + urllib.parse.quote("<a&b>"))
    assert b"<Prefix>&lt;a&amp;b&gt;</Prefix>" in r.body, r.body


def test_every_error_carries_a_message(s3server):
    """Errors s3s answers without a <Message> (a wrong secret key, a bucket
    name out of the rules) get one: clients showed "Unknown"."""
    wrong = boto3.client(
        "s3", endpoint_url=s3server.endpoint, aws_access_key_id=s3server.access_key,
        aws_secret_access_key="not-the-secret", region_name=s3server.ready["region"],
        config=botocore.config.Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
    with pytest.raises(botocore.exceptions.ClientError) as e:
        wrong.list_buckets()
    err = e.value.response["Error"]
    assert err["Code"] == "SignatureDoesNotMatch" and "secret key" in err["Message"], err
    r = requests.get(f"{s3server.endpoint}/ab")
    assert r.status_code == 400 and "<Code>InvalidBucketName</Code>" in r.text
    message = re.search(r"<Message>([^<]+)</Message>", r.text)
    assert message and "not valid" in message.group(1), r.text
    assert r.text.count("<RequestId>") == 1
