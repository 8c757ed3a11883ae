"""Bucket policies (issue 29): Put/Get/DeleteBucketPolicy keep the
document as the client sent it (NoSuchBucketPolicy, 404, when there is
none), PutBucketPolicy refuses what AWS refuses (MalformedPolicy, 400) and
a public policy under BlockPublicPolicy (AccessDenied, 403), and
GetBucketPolicyStatus says whether the bucket is public. The access check
enforces them: a Deny statement refuses everyone, the bucket's owner (the
one key pair) included, except for the owner's own policy calls; an Allow
statement opens requests to anonymous callers (an unsigned boto3 client),
unless RestrictPublicBuckets takes a public policy's grants away."""

import json

import boto3
import botocore
import pytest
from botocore.config import Config

from s3server import S3Server

SSE_C = {
    "SSECustomerAlgorithm": "AES256",
    "SSECustomerKey": "pO3upElrwuEXSoFwCfnZPdSsmt/xWeFa0N9KgDijwVs=",
    "SSECustomerKeyMD5": "DWygnHRtgiJ77HCm+1rvHw==",
}


def code_of(e):
    err = e.value.response
    return err["Error"]["Code"], err["ResponseMetadata"]["HTTPStatusCode"]


def refused(call, code, status):
    with pytest.raises(botocore.exceptions.ClientError) as e:
        call()
    assert code_of(e) == (code, status), e.value.response


def anonymous(server):
    return boto3.client("s3", endpoint_url=server.endpoint, region_name=server.ready["region"],
                        config=Config(signature_version=botocore.UNSIGNED, s3={"addressing_style": "path"},
                                      retries={"max_attempts": 1}))


def policy(*statements):
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def statement(action, resource, effect="Allow", principal="*", condition=None):
    s = {"Effect": effect, "Principal": principal, "Action": action, "Resource": resource}
    if condition is not None:
        s["Condition"] = condition
    return s


def arn(path):
    return "arn:aws:s3:::" + path


def status(s3, bucket):
    return s3.get_bucket_policy_status(Bucket=bucket)["PolicyStatus"]["IsPublic"]


def test_policy_is_kept_as_sent_across_restarts_and_goes_with_its_bucket(stow_bin, tmp_path):
    server = S3Server(stow_bin, tmp_path / "data")
    try:
        s3 = server.client()
        s3.create_bucket(Bucket="kept")
        refused(lambda: s3.get_bucket_policy(Bucket="kept"), "NoSuchBucketPolicy", 404)
        # Spacing and key order are the client's: the bytes come back.
        text = ('{ "Statement" : [ {"Resource": "arn:aws:s3:::kept/*", "Action": ["s3:GetObject"],\n'
                '   "Principal": {"AWS": "*"}, "Effect": "Allow", "Sid": "one"} ] }')
        resp = s3.put_bucket_policy(Bucket="kept", Policy=text)
        assert resp["ResponseMetadata"]["HTTPStatusCode"] == 204
        assert s3.get_bucket_policy(Bucket="kept")["Policy"] == text
        refused(lambda: s3.put_bucket_policy(Bucket="nobucket", Policy=text), "NoSuchBucket", 404)
        refused(lambda: s3.get_bucket_policy(Bucket="nobucket"), "NoSuchBucket", 404)
    finally:
        assert server.stop() == 0
    server = S3Server(stow_bin, tmp_path / "data")
    try:
        s3 = server.client()
        assert s3.get_bucket_policy(Bucket="kept")["Policy"] == text
        assert s3.delete_bucket_policy(Bucket="kept")["ResponseMetadata"]["HTTPStatusCode"] == 204
        refused(lambda: s3.get_bucket_policy(Bucket="kept"), "NoSuchBucketPolicy", 404)
        s3.delete_bucket_policy(Bucket="kept")
        # A deleted bucket takes its policy with it.
        s3.put_bucket_policy(Bucket="kept", Policy=text)
        s3.delete_bucket(Bucket="kept")
        s3.create_bucket(Bucket="kept")
        refused(lambda: s3.get_bucket_policy(Bucket="kept"), "NoSuchBucketPolicy", 404)
    finally:
        assert server.stop() == 0


def test_what_aws_refuses_is_malformed_and_changes_nothing(s3):
    s3.create_bucket(Bucket="strict")
    good = policy(statement("s3:GetObject", arn("strict/*")))
    s3.put_bucket_policy(Bucket="strict", Policy=good)
    bad = [
        "{not json",
        json.dumps({"Version": "2012-10-17"}),
        json.dumps({"Version": "2012-10-17", "Statement": []}),
        policy(statement("s3:GetObject", arn("strict/*"), effect="Maybe")),
        policy(statement("iam:CreateUser", arn("strict/*"))),
        policy(statement("s3:GetObject", arn("another-bucket/*"))),
        policy(statement("s3:GetObject", "strict/*")),
        policy({"Effect": "Allow", "Action": "s3:GetObject", "Resource": arn("strict/*")}),
        policy({"Effect": "Allow", "NotPrincipal": {"AWS": "arn:aws:iam::1:root"},
                "Action": "s3:GetObject", "Resource": arn("strict/*")}),
        policy(statement("s3:GetObject", arn("strict/*"), condition={"StringSortOf": {"s3:prefix": "a"}})),
        policy(statement("s3:GetObject", arn("strict/*"), condition={"IpAddress": {"aws:SourceIp": "300.1.1.1"}})),
        # Over 20 KiB.
        policy(*[statement("s3:GetObject", arn("strict/k%05d" % i)) for i in range(400)]),
    ]
    for text in bad:
        refused(lambda: s3.put_bucket_policy(Bucket="strict", Policy=text), "MalformedPolicy", 400)
    # Valid for AWS, not evaluated here: refused, never stored unenforced.
    dated = policy(statement("s3:GetObject", arn("strict/*"),
                             condition={"DateLessThan": {"aws:CurrentTime": "2030-01-01T00:00:00Z"}}))
    refused(lambda: s3.put_bucket_policy(Bucket="strict", Policy=dated), "NotImplemented", 501)
    assert s3.get_bucket_policy(Bucket="strict")["Policy"] == good
    # Wildcards that can name this bucket are fine.
    s3.put_bucket_policy(Bucket="strict", Policy=policy(statement("*", [arn("*"), arn("*/*")])))


def test_deny_binds_the_owner_but_never_locks_the_policy(s3):
    s3.create_bucket(Bucket="denied")
    s3.put_object(Bucket="denied", Key="keep", Body=b"k")
    s3.put_object(Bucket="denied", Key="loose", Body=b"l")
    s3.put_bucket_policy(Bucket="denied", Policy=policy(
        statement("s3:ListBucket", [arn("denied"), arn("denied/*")], effect="Deny", principal={"AWS": "*"}),
        statement("s3:DeleteObject", arn("denied/keep"), effect="Deny"),
        statement("s3:PutObject", arn("denied/*"), effect="Deny",
                  condition={"StringLike": {"s3:x-amz-acl": "public*"}}),
        statement("s3:GetBucketPublicAccessBlock", arn("denied"), effect="Deny"),
        # Even a policy denying every action leaves its owner the policy.
        statement(["s3:GetBucketPolicy", "s3:PutBucketPolicy", "s3:DeleteBucketPolicy"],
                  arn("denied"), effect="Deny"),
    ))
    refused(lambda: s3.list_objects(Bucket="denied"), "AccessDenied", 403)
    refused(lambda: s3.list_objects_v2(Bucket="denied"), "AccessDenied", 403)
    refused(lambda: s3.delete_object(Bucket="denied", Key="keep"), "AccessDenied", 403)
    s3.delete_object(Bucket="denied", Key="loose")
    # DeleteObjects is judged key by key, and refused whole.
    s3.put_object(Bucket="denied", Key="loose", Body=b"l")
    refused(lambda: s3.delete_objects(Bucket="denied", Delete={"Objects": [{"Key": "loose"}, {"Key": "keep"}]}),
            "AccessDenied", 403)
    assert s3.get_object(Bucket="denied", Key="loose")["Body"].read() == b"l"
    refused(lambda: s3.put_object(Bucket="denied", Key="pub", Body=b"p", ACL="public-read"), "AccessDenied", 403)
    s3.put_object(Bucket="denied", Key="priv", Body=b"p", ACL="private")
    refused(lambda: s3.get_public_access_block(Bucket="denied"), "AccessDenied", 403)
    assert "s3:DeleteBucketPolicy" in s3.get_bucket_policy(Bucket="denied")["Policy"]
    s3.delete_bucket_policy(Bucket="denied")
    assert len(s3.list_objects(Bucket="denied")["Contents"]) == 3
    s3.delete_object(Bucket="denied", Key="keep")


def test_conditions_on_sse_c_and_copy_sources(s3):
    s3.create_bucket(Bucket="sealed")
    s3.put_bucket_policy(Bucket="sealed", Policy=policy(
        statement("s3:PutObject", arn("sealed/*"), effect="Deny",
                  condition={"Null": {"s3:x-amz-server-side-encryption-customer-algorithm": "true"}})))
    refused(lambda: s3.put_object(Bucket="sealed", Key="plain", Body=b"x"), "AccessDenied", 403)
    s3.put_object(Bucket="sealed", Key="sealed", Body=b"x", **SSE_C)
    # The copy's source is judged as a read of it, in its own bucket.
    s3.create_bucket(Bucket="src")
    s3.put_object(Bucket="src", Key="public/a", Body=b"a")
    s3.put_object(Bucket="src", Key="private/a", Body=b"b")
    s3.put_bucket_policy(Bucket="src", Policy=policy(
        statement("s3:GetObject", arn("src/private/*"), effect="Deny")))
    s3.create_bucket(Bucket="dst")
    s3.copy_object(Bucket="dst", Key="a", CopySource={"Bucket": "src", "Key": "public/a"})
    refused(lambda: s3.copy_object(Bucket="dst", Key="b", CopySource={"Bucket": "src", "Key": "private/a"}),
            "AccessDenied", 403)
    # And the destination's condition on the source names it.
    s3.put_bucket_policy(Bucket="dst", Policy=policy(
        statement("s3:PutObject", arn("dst/*"), effect="Deny",
                  condition={"StringNotLike": {"s3:x-amz-copy-source": "src/public/*"}})))
    s3.copy_object(Bucket="dst", Key="c", CopySource={"Bucket": "src", "Key": "public/a"})
    s3.delete_bucket_policy(Bucket="src")
    refused(lambda: s3.copy_object(Bucket="dst", Key="d", CopySource={"Bucket": "src", "Key": "private/a"}),
            "AccessDenied", 403)


def test_allow_opens_anonymous_requests(s3server, s3):
    anon = anonymous(s3server)
    s3.create_bucket(Bucket="open")
    for key in ("public/a", "public/tagged", "private/a"):
        s3.put_object(Bucket="open", Key=key, Body=key.encode())
    s3.put_object_tagging(Bucket="open", Key="public/tagged",
                          Tagging={"TagSet": [{"Key": "security", "Value": "public"}]})
    refused(lambda: anon.get_object(Bucket="open", Key="public/a"), "AccessDenied", 403)
    s3.put_bucket_policy(Bucket="open", Policy=policy(
        statement("s3:GetObject", arn("open/public/*")),
        statement("s3:GetObjectTagging", arn("open/*"),
                  condition={"StringEquals": {"s3:ExistingObjectTag/security": "public"}}),
        statement("s3:ListBucket", arn("open"), principal={"AWS": "*"},
                  condition={"StringLike": {"s3:prefix": "public/*"}}),
        statement("s3:PutObject", arn("open/drop/*"),
                  condition={"StringEquals": {"s3:RequestObjectTag/security": "public"}}),
    ))
    assert anon.get_object(Bucket="open", Key="public/a")["Body"].read() == b"public/a"
    refused(lambda: anon.get_object(Bucket="open", Key="private/a"), "AccessDenied", 403)
    assert anon.get_object_tagging(Bucket="open", Key="public/tagged")["TagSet"] == [
        {"Key": "security", "Value": "public"}]
    refused(lambda: anon.get_object_tagging(Bucket="open", Key="public/a"), "AccessDenied", 403)
    assert [o["Key"] for o in anon.list_objects_v2(Bucket="open", Prefix="public/")["Contents"]] == [
        "public/a", "public/tagged"]
    refused(lambda: anon.list_objects_v2(Bucket="open", Prefix="private/"), "AccessDenied", 403)
    refused(lambda: anon.list_objects_v2(Bucket="open"), "AccessDenied", 403)
    refused(lambda: anon.put_object(Bucket="open", Key="drop/x", Body=b"x"), "AccessDenied", 403)
    anon.put_object(Bucket="open", Key="drop/x", Body=b"x", Tagging="security=public")
    assert s3.get_object(Bucket="open", Key="drop/x")["Body"].read() == b"x"
    refused(lambda: anon.delete_object(Bucket="open", Key="public/a"), "AccessDenied", 403)
    # DeleteObjects is judged by key too: nothing here allows it.
    refused(lambda: anon.delete_objects(Bucket="open", Delete={"Objects": [{"Key": "public/a"}]}),
            "AccessDenied", 403)
    # A bucket that does not exist is NoSuchBucket, to anyone.
    refused(lambda: anon.delete_objects(Bucket="gone", Delete={"Objects": [{"Key": "k"}]}), "NoSuchBucket", 404)
    # RestrictPublicBuckets takes a public policy's grants away; the
    # owner keeps its access.
    s3.put_public_access_block(Bucket="open", PublicAccessBlockConfiguration={
        "BlockPublicAcls": False, "IgnorePublicAcls": False,
        "BlockPublicPolicy": False, "RestrictPublicBuckets": True})
    refused(lambda: anon.get_object(Bucket="open", Key="public/a"), "AccessDenied", 403)
    assert s3.get_object(Bucket="open", Key="public/a")["Body"].read() == b"public/a"


def test_source_ip_conditions_see_the_caller(s3server, s3):
    anon = anonymous(s3server)
    s3.create_bucket(Bucket="local")
    s3.put_object(Bucket="local", Key="k", Body=b"v")
    near = policy(statement("s3:GetObject", arn("local/*"),
                            condition={"IpAddress": {"aws:SourceIp": "127.0.0.0/8"}}))
    s3.put_bucket_policy(Bucket="local", Policy=near)
    assert anon.get_object(Bucket="local", Key="k")["Body"].read() == b"v"
    s3.put_bucket_policy(Bucket="local", Policy=near.replace("127.0.0.0/8", "10.0.0.0/8"))
    refused(lambda: anon.get_object(Bucket="local", Key="k"), "AccessDenied", 403)


def test_block_public_policy_and_policy_status(s3):
    s3.create_bucket(Bucket="status")
    assert status(s3, "status") is False
    public = policy(statement("s3:ListBucket", [arn("status"), arn("status/*")], principal={"AWS": "*"}))
    s3.put_bucket_policy(Bucket="status", Policy=public)
    assert status(s3, "status") is True
    fixed = policy(statement("s3:ListBucket", arn("status"),
                             condition={"IpAddress": {"aws:SourceIp": "10.0.0.0/32"}}))
    s3.put_bucket_policy(Bucket="status", Policy=fixed)
    assert status(s3, "status") is False
    named = policy(statement("s3:GetObject", arn("status/*"), principal={"AWS": "arn:aws:iam::s3tenant1:root"}))
    s3.put_bucket_policy(Bucket="status", Policy=named)
    assert status(s3, "status") is False
    s3.put_public_access_block(Bucket="status", PublicAccessBlockConfiguration={
        "BlockPublicAcls": False, "IgnorePublicAcls": False,
        "BlockPublicPolicy": True, "RestrictPublicBuckets": False})
    refused(lambda: s3.put_bucket_policy(Bucket="status", Policy=public), "AccessDenied", 403)
    assert s3.get_bucket_policy(Bucket="status")["Policy"] == named
    s3.put_bucket_policy(Bucket="status", Policy=fixed)
    # Public ACLs count too (as ceph/s3-tests expect).
    s3.delete_bucket_policy(Bucket="status")
    for acl, public_acl in (("public-read", True), ("authenticated-read", True), ("private", False)):
        s3.put_bucket_acl(Bucket="status", ACL=acl)
        assert status(s3, "status") is public_acl
    refused(lambda: s3.get_bucket_policy_status(Bucket="nobucket"), "NoSuchBucket", 404)


def test_memory_backend_keeps_and_enforces_policies(stow_bin, tmp_path):
    server = S3Server(stow_bin, tmp_path / "data", backend="memory")
    try:
        s3 = server.client()
        s3.create_bucket(Bucket="mem")
        s3.put_object(Bucket="mem", Key="k", Body=b"v")
        text = policy(statement("s3:GetObject", arn("mem/*")))
        s3.put_bucket_policy(Bucket="mem", Policy=text)
        assert s3.get_bucket_policy(Bucket="mem")["Policy"] == text
        assert anonymous(server).get_object(Bucket="mem", Key="k")["Body"].read() == b"v"
        s3.put_bucket_policy(Bucket="mem", Policy=policy(statement("s3:GetObject", arn("mem/*"), effect="Deny")))
        refused(lambda: s3.get_object(Bucket="mem", Key="k"), "AccessDenied", 403)
    finally:
        assert server.stop() == 0


def test_workspace_bucket_view_keeps_and_enforces_policies(stow_bin, workdir):
    from test_workspace_serve import prepare
    from s3server import WorkspaceServer

    p = prepare(stow_bin, workdir, {"seed.txt": b"seed"})
    server = WorkspaceServer(stow_bin, p["workspace_id"], workdir / "reg")
    try:
        s3, bucket = server.client(), server.bucket
        refused(lambda: s3.get_bucket_policy(Bucket=bucket), "NoSuchBucketPolicy", 404)
        text = policy(statement("s3:PutObject", arn(bucket + "/locked/*"), effect="Deny"))
        s3.put_bucket_policy(Bucket=bucket, Policy=text)
        assert s3.get_bucket_policy(Bucket=bucket)["Policy"] == text
        refused(lambda: s3.put_object(Bucket=bucket, Key="locked/x", Body=b"x"), "AccessDenied", 403)
        s3.put_object(Bucket=bucket, Key="free/x", Body=b"x")
        assert s3.get_object(Bucket=bucket, Key="seed.txt")["Body"].read() == b"seed"
        s3.delete_bucket_policy(Bucket=bucket)
        s3.put_object(Bucket=bucket, Key="locked/x", Body=b"x")
    finally:
        assert server.stop() == 0


def test_versions_and_copy_sources_are_judged_as_the_operation_reads_them(s3server, s3):
    """Three ways a request could be judged as another than the one run:
    a version read under the latest version's ACL, a `versionId` whose name
    is percent-encoded (judged as s3:GetObject, run as a version read), and
    a copy source whose key holds `?` (judged as the key before it)."""
    import requests

    anon = anonymous(s3server)
    ep = s3server.endpoint
    # 1. A private old version under a public-read latest one.
    s3.create_bucket(Bucket="acl-versions")
    s3.put_bucket_versioning(Bucket="acl-versions", VersioningConfiguration={"Status": "Enabled"})
    old = s3.put_object(Bucket="acl-versions", Key="k", Body=b"private v1")["VersionId"]
    s3.put_object(Bucket="acl-versions", Key="k", Body=b"public v2", ACL="public-read")
    assert anon.get_object(Bucket="acl-versions", Key="k")["Body"].read() == b"public v2"
    refused(lambda: anon.get_object(Bucket="acl-versions", Key="k", VersionId=old), "AccessDenied", 403)

    # 2. Public GetObject only: no version read, however the name is spelled.
    s3.create_bucket(Bucket="no-versions")
    s3.put_bucket_versioning(Bucket="no-versions", VersioningConfiguration={"Status": "Enabled"})
    old = s3.put_object(Bucket="no-versions", Key="k", Body=b"overwritten secret")["VersionId"]
    s3.put_object(Bucket="no-versions", Key="k", Body=b"current")
    s3.put_bucket_policy(Bucket="no-versions", Policy=policy(statement("s3:GetObject", arn("no-versions/*"))))
    assert requests.get(f"{ep}/no-versions/k", timeout=10).content == b"current"
    for name in ("versionId", "version%49d", "%76ersionId"):
        r = requests.get(f"{ep}/no-versions/k?{name}={old}", timeout=10)
        assert r.status_code == 403 and b"overwritten" not in r.content, (name, r.status_code)

    # 3. A copy source key holding `?`: judged as that key, not `x`.
    s3.create_bucket(Bucket="src-q")
    s3.put_object(Bucket="src-q", Key="x", Body=b"public", ACL="public-read")
    s3.put_object(Bucket="src-q", Key="x?y", Body=b"PRIVATE-SECRET")
    s3.create_bucket(Bucket="dst-q")
    s3.put_bucket_policy(Bucket="dst-q", Policy=policy(statement(["s3:PutObject", "s3:GetObject"], arn("dst-q/*"))))
    r = requests.put(f"{ep}/dst-q/copied", headers={"x-amz-copy-source": "src-q/x?y"}, timeout=10)
    assert r.status_code == 403, r.content
    refused(lambda: s3.head_object(Bucket="dst-q", Key="copied"), "404", 404)
    r = requests.put(f"{ep}/dst-q/copied", headers={"x-amz-copy-source": "src-q/x"}, timeout=10)
    assert r.status_code == 200, r.content
    assert s3.get_object(Bucket="dst-q", Key="copied")["Body"].read() == b"public"


def test_only_the_owner_reads_or_changes_the_policy(s3server, s3):
    """Get/Put/DeleteBucketPolicy are the owner's alone, as on AWS: an
    `Allow "*" s3:*` does not let an unsigned caller lift the Deny beside it."""
    anon = anonymous(s3server)
    s3.create_bucket(Bucket="star")
    s3.put_object(Bucket="star", Key="keep", Body=b"kept")
    text = policy(statement("s3:*", [arn("star"), arn("star/*")]),
                  statement("s3:DeleteObject", arn("star/*"), effect="Deny"))
    s3.put_bucket_policy(Bucket="star", Policy=text)
    assert anon.get_object(Bucket="star", Key="keep")["Body"].read() == b"kept"
    refused(lambda: anon.delete_object(Bucket="star", Key="keep"), "AccessDenied", 403)
    refused(lambda: anon.delete_bucket_policy(Bucket="star"), "AccessDenied", 403)
    refused(lambda: anon.get_bucket_policy(Bucket="star"), "AccessDenied", 403)
    refused(lambda: anon.put_bucket_policy(Bucket="star", Policy=policy(statement("s3:*", arn("star/*")))),
            "AccessDenied", 403)
    assert json.loads(s3.get_bucket_policy(Bucket="star")["Policy"]) == json.loads(text)
    refused(lambda: anon.delete_object(Bucket="star", Key="keep"), "AccessDenied", 403)


def test_conditions_anyone_meets_leave_a_policy_public(s3server, s3):
    """IfExists and ForAllValues conditions on principal keys (never present
    here) and SourceIp ranges that together hold every address do not make
    a grant to everyone private: BlockPublicPolicy refuses them."""
    s3.create_bucket(Bucket="wide")
    s3.put_public_access_block(Bucket="wide", PublicAccessBlockConfiguration={
        "BlockPublicAcls": False, "IgnorePublicAcls": False,
        "BlockPublicPolicy": True, "RestrictPublicBuckets": False})
    for condition in [{"IpAddress": {"aws:SourceIp": ["0.0.0.0/1", "128.0.0.0/1"]}},
                      {"StringEqualsIfExists": {"aws:PrincipalArn": "arn:aws:iam::1:root"}},
                      {"ForAllValues:StringEquals": {"aws:PrincipalAccount": "111122223333"}}]:
        doc = policy(statement("s3:GetObject", arn("wide/*"), condition=condition))
        refused(lambda: s3.put_bucket_policy(Bucket="wide", Policy=doc), "AccessDenied", 403)
    narrow = policy(statement("s3:GetObject", arn("wide/*"),
                              condition={"IpAddress": {"aws:SourceIp": "10.1.0.0/16"}}))
    s3.put_bucket_policy(Bucket="wide", Policy=narrow)
    assert status(s3, "wide") is False


def test_setting_an_acl_on_a_write_is_judged_as_put_object_acl(s3server, s3):
    """A PUT or copy carrying x-amz-acl (or a grant header) is also an
    s3:PutObjectAcl: an unsigned one needs the policy to allow both, and a
    Deny of PutObjectAcl refuses even the owner's."""
    s3.create_bucket(Bucket="aclw")
    s3.put_bucket_policy(Bucket="aclw", Policy=policy(
        statement("s3:PutObject", arn("aclw/*")),
        statement("s3:PutObjectAcl", arn("aclw/locked/*"), effect="Deny")))
    anon = anonymous(s3server)
    anon.put_object(Bucket="aclw", Key="plain", Body=b"x")
    refused(lambda: anon.put_object(Bucket="aclw", Key="pub", Body=b"x", ACL="public-read"), "AccessDenied", 403)
    refused(lambda: s3.put_object(Bucket="aclw", Key="locked/a", Body=b"x", ACL="public-read"),
            "AccessDenied", 403)
    refused(lambda: s3.copy_object(Bucket="aclw", Key="locked/b", CopySource={"Bucket": "aclw", "Key": "plain"},
                                   ACL="public-read"), "AccessDenied", 403)
    s3.put_object(Bucket="aclw", Key="locked/c", Body=b"x")
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket="aclw")["Contents"]]
    assert listed == ["locked/c", "plain"]
    # Allowed as well, the unsigned PUT with an ACL goes through.
    s3.put_bucket_policy(Bucket="aclw", Policy=policy(statement(["s3:PutObject", "s3:PutObjectAcl"], arn("aclw/*"))))
    anon.put_object(Bucket="aclw", Key="pub", Body=b"x", ACL="public-read")
    grants = s3.get_object_acl(Bucket="aclw", Key="pub")["Grants"]
    assert any(g["Grantee"].get("URI", "").endswith("AllUsers") for g in grants), grants
