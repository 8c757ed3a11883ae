"""Canned ACLs (issue 29): `private`, `public-read`, `public-read-write` and
`authenticated-read` accepted on CreateBucket, PutObject, CopyObject,
CreateMultipartUpload, PutBucketAcl and PutObjectAcl, kept durably,
answered by Get*Acl as AWS writes them, and honoured for anonymous reads:
an unsigned GET/HEAD of a public object (or of a missing key in a public
bucket: 404), or ListObjects of a public bucket, is served, and so is an
unsigned PutObject or POST form into a public-read-write bucket; every
other unsigned request is 403 AccessDenied."""

import boto3
import botocore
import pytest
from botocore.config import Config
import requests

from s3server import S3Server

ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"
AUTHENTICATED = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers"

EXPECTED = {
    "private": [],
    "public-read": [(ALL_USERS, "READ")],
    "public-read-write": [(ALL_USERS, "READ"), (ALL_USERS, "WRITE")],
    "authenticated-read": [(AUTHENTICATED, "READ")],
}


def grants(acl):
    """(owner FULL_CONTROL present, the group grants) of a Get*Acl answer."""
    owner = acl["Owner"]["ID"]
    own = [g for g in acl["Grants"] if g["Grantee"].get("ID") == owner]
    assert [(g["Grantee"]["Type"], g["Permission"]) for g in own] == [("CanonicalUser", "FULL_CONTROL")], acl
    groups = [g for g in acl["Grants"] if g["Grantee"].get("ID") != owner]
    for g in groups:
        assert g["Grantee"]["Type"] == "Group", g
    return [(g["Grantee"]["URI"], g["Permission"]) for g in groups]


def test_canned_acls_are_kept_and_answered(s3server, s3):
    for i, name in enumerate(EXPECTED):
        bucket = f"acl-{i}"
        s3.create_bucket(Bucket=bucket, ACL=name)
        assert grants(s3.get_bucket_acl(Bucket=bucket)) == EXPECTED[name], name
        s3.put_object(Bucket=bucket, Key="put", Body=b"x", ACL=name)
        assert grants(s3.get_object_acl(Bucket=bucket, Key="put")) == EXPECTED[name], name
        # A copy takes the request's ACL, never the source's.
        s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "put"})
        assert grants(s3.get_object_acl(Bucket=bucket, Key="copy")) == [], name
        s3.copy_object(Bucket=bucket, Key="copy2", CopySource={"Bucket": "acl-0", "Key": "put"}, ACL=name)
        assert grants(s3.get_object_acl(Bucket=bucket, Key="copy2")) == EXPECTED[name], name
        up = s3.create_multipart_upload(Bucket=bucket, Key="mp", ACL=name)
        part = s3.upload_part(Bucket=bucket, Key="mp", UploadId=up["UploadId"], PartNumber=1, Body=b"p")
        s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up["UploadId"],
                                     MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
        assert grants(s3.get_object_acl(Bucket=bucket, Key="mp")) == EXPECTED[name], name
    # Put*Acl replaces; an object's data and time stay as they were.
    before = s3.head_object(Bucket="acl-0", Key="put")
    for name in EXPECTED:
        s3.put_bucket_acl(Bucket="acl-0", ACL=name)
        assert grants(s3.get_bucket_acl(Bucket="acl-0")) == EXPECTED[name], name
        s3.put_object_acl(Bucket="acl-0", Key="put", ACL=name)
        assert grants(s3.get_object_acl(Bucket="acl-0", Key="put")) == EXPECTED[name], name
    after = s3.head_object(Bucket="acl-0", Key="put")
    assert (after["ETag"], after["LastModified"]) == (before["ETag"], before["LastModified"])
    # A policy whose grants are a canned ACL's sets that ACL.
    acl = s3.get_object_acl(Bucket="acl-1", Key="put")
    s3.put_object_acl(Bucket="acl-0", Key="put", AccessControlPolicy={"Owner": acl["Owner"], "Grants": acl["Grants"]})
    assert grants(s3.get_object_acl(Bucket="acl-0", Key="put")) == EXPECTED["public-read"]
    # bucket-owner-* are what private is on a one-owner server.
    s3.put_object(Bucket="acl-0", Key="bof", Body=b"x", ACL="bucket-owner-full-control")
    assert grants(s3.get_object_acl(Bucket="acl-0", Key="bof")) == []


def test_canned_acls_survive_a_restart(stow_bin, tmp_path):
    data = tmp_path / "data"
    server = S3Server(stow_bin, data)
    try:
        s3 = server.client()
        s3.create_bucket(Bucket="kept", ACL="public-read-write")
        s3.put_object(Bucket="kept", Key="o", Body=b"x", ACL="authenticated-read")
    finally:
        assert server.stop() == 0
    server = S3Server(stow_bin, data)
    try:
        s3 = server.client()
        assert grants(s3.get_bucket_acl(Bucket="kept")) == EXPECTED["public-read-write"]
        assert grants(s3.get_object_acl(Bucket="kept", Key="o")) == EXPECTED["authenticated-read"]
    finally:
        assert server.stop() == 0


def denied(r):
    assert r.status_code == 403, (r.status_code, r.text)
    if r.request.method != "HEAD":
        assert "<Code>AccessDenied</Code>" in r.text, r.text


def test_anonymous_reads_follow_the_acls(s3server, s3):
    ep = s3server.endpoint
    s3.create_bucket(Bucket="pub", ACL="public-read")
    s3.create_bucket(Bucket="priv")
    for bucket in ("pub", "priv"):
        s3.put_object(Bucket=bucket, Key="open", Body=b"open body", ACL="public-read")
        s3.put_object(Bucket=bucket, Key="rw", Body=b"rw body", ACL="public-read-write")
        s3.put_object(Bucket=bucket, Key="closed", Body=b"closed body")
        s3.put_object(Bucket=bucket, Key="auth", Body=b"auth body", ACL="authenticated-read")
    for bucket in ("pub", "priv"):
        # A public object reads anonymously, whatever the bucket's ACL.
        r = requests.get(f"{ep}/{bucket}/open", timeout=10)
        assert (r.status_code, r.content) == (200, b"open body"), r.text
        assert requests.get(f"{ep}/{bucket}/rw", timeout=10).content == b"rw body"
        r = requests.head(f"{ep}/{bucket}/open", timeout=10)
        assert r.status_code == 200 and r.headers["Content-Length"] == "9"
        r = requests.get(f"{ep}/{bucket}/open", headers={"Range": "bytes=0-3"}, timeout=10)
        assert (r.status_code, r.content) == (206, b"open")
        # Private and authenticated-read objects: 403.
        for key in ("closed", "auth"):
            denied(requests.get(f"{ep}/{bucket}/{key}", timeout=10))
            denied(requests.head(f"{ep}/{bucket}/{key}", timeout=10))
        # A missing key: 404 where anyone may list the bucket (as S3
        # answers), else 403.
        if bucket == "pub":
            r = requests.get(f"{ep}/{bucket}/missing", timeout=10)
            assert r.status_code == 404 and "<Code>NoSuchKey</Code>" in r.text, r.text
            assert requests.head(f"{ep}/{bucket}/missing", timeout=10).status_code == 404
        else:
            denied(requests.get(f"{ep}/{bucket}/missing", timeout=10))
            denied(requests.head(f"{ep}/{bucket}/missing", timeout=10))
        # Anything else anonymous: 403, nothing changes.
        denied(requests.put(f"{ep}/{bucket}/open", data=b"overwritten", timeout=10))
        denied(requests.put(f"{ep}/{bucket}/rw", data=b"overwritten", timeout=10))
        denied(requests.delete(f"{ep}/{bucket}/open", timeout=10))
        denied(requests.get(f"{ep}/{bucket}/open?acl", timeout=10))
        denied(requests.get(f"{ep}/{bucket}/open?tagging", timeout=10))
        denied(requests.get(f"{ep}/{bucket}?acl", timeout=10))
        assert s3.get_object(Bucket=bucket, Key="open")["Body"].read() == b"open body"
    # A public-read bucket lists anonymously (v1 and v2); a private one does not.
    for query in ("", "?list-type=2"):
        r = requests.get(f"{ep}/pub{query}", timeout=10)
        assert r.status_code == 200, r.text
        assert all(f"<Key>{k}</Key>" in r.text for k in ("open", "rw", "closed", "auth")), r.text
        denied(requests.get(f"{ep}/priv{query}", timeout=10))
    denied(requests.get(f"{ep}/", timeout=10))
    denied(requests.put(f"{ep}/newbucket", timeout=10))
    denied(requests.post(f"{ep}/pub?delete", data=b"<Delete/>", timeout=10))
    # A public-read-write bucket takes anonymous writes (AllUsers WRITE).
    s3.create_bucket(Bucket="drop", ACL="public-read-write")
    r = requests.put(f"{ep}/drop/anon", data=b"dropped", timeout=10)
    assert r.status_code == 200, r.text
    assert s3.get_object(Bucket="drop", Key="anon")["Body"].read() == b"dropped"
    denied(requests.delete(f"{ep}/drop/anon", timeout=10))
        # Made private again: no longer readable anonymously.
    s3.put_object_acl(Bucket="pub", Key="open", ACL="private")
    denied(requests.get(f"{ep}/pub/open", timeout=10))
    s3.put_bucket_acl(Bucket="pub", ACL="private")
    denied(requests.get(f"{ep}/pub", timeout=10))
    # Signed requests are unaffected by ACLs.
    assert s3.get_object(Bucket="priv", Key="closed")["Body"].read() == b"closed body"


def test_unsigned_boto3_client_reads_public_objects(s3server, s3):
    """boto3 with UNSIGNED signatures (what s3-tests' unauthenticated client
    uses) reads a public object and is refused a private one."""
    s3.create_bucket(Bucket="boto", ACL="public-read")
    s3.put_object(Bucket="boto", Key="foo", Body=b"bar", ACL="public-read")
    s3.put_object(Bucket="boto", Key="secret", Body=b"no")
    anon = boto3.client("s3", endpoint_url=s3server.endpoint, region_name=s3server.ready["region"],
                        config=Config(signature_version=botocore.UNSIGNED, s3={"addressing_style": "path"},
                                      retries={"max_attempts": 1}))
    assert anon.get_object(Bucket="boto", Key="foo")["Body"].read() == b"bar"
    assert [o["Key"] for o in anon.list_objects(Bucket="boto")["Contents"]] == ["foo", "secret"]
    with pytest.raises(botocore.exceptions.ClientError) as e:
        anon.get_object(Bucket="boto", Key="secret")
    assert e.value.response["Error"]["Code"] == "AccessDenied"
