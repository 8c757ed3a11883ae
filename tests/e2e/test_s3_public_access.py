"""Object Ownership and the public access block (issue 29), as AWS has
them for ACL-enabled buckets: Put/Get/DeleteBucketOwnershipControls and
Put/Get/DeletePublicAccessBlock kept (a bucket without them answers
OwnershipControlsNotFoundError / NoSuchPublicAccessBlockConfiguration,
404) and enforced. BucketOwnerEnforced refuses every ACL but
bucket-owner-full-control, a named private one too
(AccessControlListNotSupported, 400), and makes ACLs grant nothing;
it cannot be set while the bucket's ACL is public
(InvalidBucketAclWithObjectOwnership). BlockPublicAcls refuses a request
setting a public ACL (AccessDenied, 403); IgnorePublicAcls and
RestrictPublicBuckets make public ACLs grant nothing to anonymous
requests. New buckets have neither (ACLs enabled), unlike AWS's new
buckets. Anonymous requests come from an unsigned boto3 client."""

import boto3
import botocore
import pytest
import requests
from botocore.config import Config

from s3server import S3Server

ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"
ENFORCED = {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}


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


def block(acls=False, ignore=False, policy=False, restrict=False):
    return {"BlockPublicAcls": acls, "IgnorePublicAcls": ignore,
            "BlockPublicPolicy": policy, "RestrictPublicBuckets": restrict}


def ownership(s3, bucket):
    rules = s3.get_bucket_ownership_controls(Bucket=bucket)["OwnershipControls"]["Rules"]
    assert len(rules) == 1
    return rules[0]["ObjectOwnership"]


def test_settings_are_kept_and_removed(s3server, s3):
    s3.create_bucket(Bucket="settings")
    # New buckets: ACLs enabled, no block (where AWS now defaults to
    # BucketOwnerEnforced with every block on).
    refused(lambda: s3.get_bucket_ownership_controls(Bucket="settings"), "OwnershipControlsNotFoundError", 404)
    refused(lambda: s3.get_public_access_block(Bucket="settings"), "NoSuchPublicAccessBlockConfiguration", 404)
    for value in ("BucketOwnerPreferred", "ObjectWriter", "BucketOwnerEnforced"):
        s3.put_bucket_ownership_controls(Bucket="settings",
                                         OwnershipControls={"Rules": [{"ObjectOwnership": value}]})
        assert ownership(s3, "settings") == value
    refused(lambda: s3.put_bucket_ownership_controls(
        Bucket="settings", OwnershipControls={"Rules": [{"ObjectOwnership": "Anyone"}]}), "MalformedXML", 400)
    assert ownership(s3, "settings") == "BucketOwnerEnforced"
    conf = block(acls=True, policy=True)
    s3.put_public_access_block(Bucket="settings", PublicAccessBlockConfiguration=conf)
    assert s3.get_public_access_block(Bucket="settings")["PublicAccessBlockConfiguration"] == conf
    assert s3.delete_bucket_ownership_controls(Bucket="settings")["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert s3.delete_public_access_block(Bucket="settings")["ResponseMetadata"]["HTTPStatusCode"] == 204
    refused(lambda: s3.get_bucket_ownership_controls(Bucket="settings"), "OwnershipControlsNotFoundError", 404)
    refused(lambda: s3.get_public_access_block(Bucket="settings"), "NoSuchPublicAccessBlockConfiguration", 404)
    # Deleting what is not there is fine; a missing bucket is not.
    s3.delete_bucket_ownership_controls(Bucket="settings")
    s3.delete_public_access_block(Bucket="settings")
    refused(lambda: s3.get_public_access_block(Bucket="nobucket"), "NoSuchBucket", 404)
    refused(lambda: s3.put_bucket_ownership_controls(Bucket="nobucket", OwnershipControls=ENFORCED),
            "NoSuchBucket", 404)
    # CreateBucket's x-amz-object-ownership is kept too.
    s3.create_bucket(Bucket="owned", ObjectOwnership="BucketOwnerPreferred")
    assert ownership(s3, "owned") == "BucketOwnerPreferred"


def test_settings_survive_a_restart(stow_bin, tmp_path):
    server = S3Server(stow_bin, tmp_path / "data")
    try:
        s3 = server.client()
        s3.create_bucket(Bucket="kept")
        s3.put_bucket_ownership_controls(Bucket="kept", OwnershipControls=ENFORCED)
        s3.put_public_access_block(Bucket="kept", PublicAccessBlockConfiguration=block(ignore=True))
    finally:
        assert server.stop() == 0
    server = S3Server(stow_bin, tmp_path / "data")
    try:
        s3 = server.client()
        assert ownership(s3, "kept") == "BucketOwnerEnforced"
        assert s3.get_public_access_block(Bucket="kept")["PublicAccessBlockConfiguration"] == block(ignore=True)
        refused(lambda: s3.put_object(Bucket="kept", Key="k", Body=b"x", ACL="public-read"),
                "AccessControlListNotSupported", 400)
    finally:
        assert server.stop() == 0


def test_bucket_owner_enforced_disables_acls(s3server, s3):
    anon = anonymous(s3server)
    # Not while the bucket's ACL is public.
    s3.create_bucket(Bucket="enforced", ACL="public-read")
    s3.put_object(Bucket="enforced", Key="open", Body=b"open", ACL="public-read")
    assert anon.get_object(Bucket="enforced", Key="open")["Body"].read() == b"open"
    refused(lambda: s3.put_bucket_ownership_controls(Bucket="enforced", OwnershipControls=ENFORCED),
            "InvalidBucketAclWithObjectOwnership", 400)
    refused(lambda: s3.get_bucket_ownership_controls(Bucket="enforced"), "OwnershipControlsNotFoundError", 404)
    refused(lambda: s3.create_bucket(Bucket="enforced2", ACL="public-read", ObjectOwnership="BucketOwnerEnforced"),
            "InvalidBucketAclWithObjectOwnership", 400)
    refused(lambda: s3.head_bucket(Bucket="enforced2"), "404", 404)
    s3.put_bucket_acl(Bucket="enforced", ACL="private")
    s3.put_bucket_ownership_controls(Bucket="enforced", OwnershipControls=ENFORCED)
    # ACLs grant nothing now: the public object is closed to anonymous reads.
    refused(lambda: anon.get_object(Bucket="enforced", Key="open"), "AccessDenied", 403)
    # Every ACL-setting request but bucket-owner-full-control (or none):
    # 400, nothing changes; a named `private` too, as AWS takes only the
    # former.
    for acl in ("public-read", "public-read-write", "authenticated-read", "private"):
        refused(lambda: s3.put_object(Bucket="enforced", Key="k", Body=b"x", ACL=acl),
                "AccessControlListNotSupported", 400)
        refused(lambda: s3.put_bucket_acl(Bucket="enforced", ACL=acl), "AccessControlListNotSupported", 400)
        refused(lambda: s3.put_object_acl(Bucket="enforced", Key="open", ACL=acl),
                "AccessControlListNotSupported", 400)
        refused(lambda: s3.copy_object(Bucket="enforced", Key="c", ACL=acl,
                                       CopySource={"Bucket": "enforced", "Key": "open"}),
                "AccessControlListNotSupported", 400)
        refused(lambda: s3.create_multipart_upload(Bucket="enforced", Key="m", ACL=acl),
                "AccessControlListNotSupported", 400)
    refused(lambda: s3.put_bucket_acl(Bucket="enforced", GrantRead=f'uri="{ALL_USERS}"'),
            "AccessControlListNotSupported", 400)
    refused(lambda: s3.head_object(Bucket="enforced", Key="k"), "404", 404)
    # The owner's own are fine, and ACLs are still read.
    s3.put_object(Bucket="enforced", Key="k", Body=b"x")
    s3.put_object(Bucket="enforced", Key="k", Body=b"x", ACL="bucket-owner-full-control")
    s3.put_object_acl(Bucket="enforced", Key="k", ACL="bucket-owner-full-control")
    s3.put_bucket_acl(Bucket="enforced", ACL="bucket-owner-full-control")
    assert s3.get_object_acl(Bucket="enforced", Key="k")["Grants"]
    # Removing the setting enables ACLs again.
    s3.delete_bucket_ownership_controls(Bucket="enforced")
    assert anon.get_object(Bucket="enforced", Key="open")["Body"].read() == b"open"
    s3.put_object(Bucket="enforced", Key="k", Body=b"x", ACL="public-read")


def test_block_public_acls_refuses_public_acls(s3server, s3):
    s3.create_bucket(Bucket="blocked")
    s3.put_object(Bucket="blocked", Key="src", Body=b"x")
    s3.put_public_access_block(Bucket="blocked", PublicAccessBlockConfiguration=block(acls=True))
    for acl in ("public-read", "public-read-write", "authenticated-read"):
        refused(lambda: s3.put_bucket_acl(Bucket="blocked", ACL=acl), "AccessDenied", 403)
        refused(lambda: s3.put_object(Bucket="blocked", Key="k", Body=b"", ACL=acl), "AccessDenied", 403)
        refused(lambda: s3.put_object_acl(Bucket="blocked", Key="src", ACL=acl), "AccessDenied", 403)
        refused(lambda: s3.copy_object(Bucket="blocked", Key="c", ACL=acl,
                                       CopySource={"Bucket": "blocked", "Key": "src"}), "AccessDenied", 403)
        refused(lambda: s3.create_multipart_upload(Bucket="blocked", Key="m", ACL=acl), "AccessDenied", 403)
        refused(lambda: s3.create_bucket(Bucket="blocked", ACL=acl), "AccessDenied", 403)
    assert s3.list_objects_v2(Bucket="blocked")["KeyCount"] == 1
    assert [g["Grantee"].get("URI") for g in s3.get_bucket_acl(Bucket="blocked")["Grants"]] == [None]
    s3.put_object(Bucket="blocked", Key="k", Body=b"", ACL="private")
    s3.put_bucket_acl(Bucket="blocked", ACL="private")
    # Other settings leave public ACLs alone.
    s3.put_public_access_block(Bucket="blocked", PublicAccessBlockConfiguration=block(policy=True))
    s3.put_object(Bucket="blocked", Key="k", Body=b"", ACL="public-read")


def test_ignore_and_restrict_make_acls_grant_nothing(s3server, s3):
    anon = anonymous(s3server)
    ep = s3server.endpoint
    for conf in (block(ignore=True), block(restrict=True)):
        s3.create_bucket(Bucket="pub", ACL="public-read-write")
        s3.put_object(Bucket="pub", Key="open", Body=b"open", ACL="public-read")
        assert anon.get_object(Bucket="pub", Key="open")["Body"].read() == b"open"
        assert [o["Key"] for o in anon.list_objects(Bucket="pub")["Contents"]] == ["open"]
        s3.put_public_access_block(Bucket="pub", PublicAccessBlockConfiguration=conf)
        refused(lambda: anon.get_object(Bucket="pub", Key="open"), "AccessDenied", 403)
        refused(lambda: anon.list_objects(Bucket="pub"), "AccessDenied", 403)
        refused(lambda: anon.get_object(Bucket="pub", Key="missing"), "AccessDenied", 403)
        r = requests.put(f"{ep}/pub/anon", data=b"dropped", timeout=10)
        assert r.status_code == 403, r.text
        # The owner still reads; public ACLs may still be set (BlockPublicAcls is off).
        assert s3.get_object(Bucket="pub", Key="open")["Body"].read() == b"open"
        s3.put_object_acl(Bucket="pub", Key="open", ACL="public-read")
        s3.delete_public_access_block(Bucket="pub")
        assert anon.get_object(Bucket="pub", Key="open")["Body"].read() == b"open"
        s3.delete_object(Bucket="pub", Key="open")
        s3.delete_bucket(Bucket="pub")


def test_workspace_bucket_view_keeps_settings(stow_bin, workdir):
    from test_workspace_serve import prepare
    from s3server import WorkspaceServer

    p = prepare(stow_bin, workdir, {"seed.txt": b"seed"})
    server = WorkspaceServer(stow_bin, p["workspace_id"], workdir / "reg")
    try:
        s3, bucket = server.client(), server.bucket
        refused(lambda: s3.get_bucket_ownership_controls(Bucket=bucket), "OwnershipControlsNotFoundError", 404)
        refused(lambda: s3.get_public_access_block(Bucket=bucket), "NoSuchPublicAccessBlockConfiguration", 404)
        s3.put_bucket_ownership_controls(Bucket=bucket, OwnershipControls=ENFORCED)
        assert ownership(s3, bucket) == "BucketOwnerEnforced"
        s3.put_public_access_block(Bucket=bucket, PublicAccessBlockConfiguration=block(acls=True))
        assert s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"] == block(acls=True)
        refused(lambda: s3.put_object(Bucket=bucket, Key="x.txt", Body=b"x", ACL="public-read"),
                "AccessControlListNotSupported", 400)
        s3.delete_bucket_ownership_controls(Bucket=bucket)
        s3.delete_public_access_block(Bucket=bucket)
        # The view keeps no public ACLs: refused plainly, never kept private.
        refused(lambda: s3.put_object(Bucket=bucket, Key="x.txt", Body=b"x", ACL="public-read"),
                "NotImplemented", 501)
        refused(lambda: s3.put_object_acl(Bucket=bucket, Key="seed.txt", ACL="public-read"),
                "NotImplemented", 501)
        refused(lambda: s3.get_object(Bucket=bucket, Key="x.txt"), "NoSuchKey", 404)
    finally:
        assert server.stop() == 0


def test_grants_to_unknown_grantees_are_refused(s3server, s3):
    """A grant naming an account this one-owner server does not know is
    refused as AWS refuses an unknown account, and changes nothing."""
    s3.create_bucket(Bucket="grants")
    acl = s3.get_bucket_acl(Bucket="grants")
    for grantee, code in (({"ID": "_foo", "Type": "CanonicalUser"}, "InvalidArgument"),
                          ({"EmailAddress": "nobody@example.invalid", "Type": "AmazonCustomerByEmail"},
                           "UnresolvableGrantByEmailAddress")):
        policy = {"Owner": acl["Owner"],
                  "Grants": acl["Grants"] + [{"Grantee": grantee, "Permission": "FULL_CONTROL"}]}
        refused(lambda: s3.put_bucket_acl(Bucket="grants", AccessControlPolicy=policy), code, 400)
    assert s3.get_bucket_acl(Bucket="grants")["Grants"] == acl["Grants"]


def test_unsigned_requests_to_a_gone_bucket_are_told_it_is_gone(s3server, s3):
    # S3 answers NoSuchBucket to anyone for a bucket that does not exist
    # (ceph/s3-tests test_object_raw_get_bucket_gone,
    # test_object_delete_key_bucket_gone); it was AccessDenied.
    s3.create_bucket(Bucket="gone", ACL="public-read")
    s3.put_object(Bucket="gone", Key="foo", Body=b"x", ACL="public-read")
    anon = anonymous(s3server)
    assert anon.get_object(Bucket="gone", Key="foo")["Body"].read() == b"x"
    s3.delete_object(Bucket="gone", Key="foo")
    s3.delete_bucket(Bucket="gone")
    refused(lambda: anon.get_object(Bucket="gone", Key="foo"), "NoSuchBucket", 404)
    refused(lambda: anon.delete_object(Bucket="gone", Key="foo"), "NoSuchBucket", 404)
    refused(lambda: anon.list_objects_v2(Bucket="gone"), "NoSuchBucket", 404)
    # Making the bucket is still not for anonymous callers, and the refusal
    # makes nothing.
    refused(lambda: anon.create_bucket(Bucket="gone"), "AccessDenied", 403)
    assert "gone" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    # A bucket that exists but is private still says nothing more.
    s3.create_bucket(Bucket="private")
    refused(lambda: anon.delete_object(Bucket="private", Key="foo"), "AccessDenied", 403)
