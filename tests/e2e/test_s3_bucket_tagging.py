"""Tagging (issue 29): Put/Get/DeleteBucketTagging kept by the store (a
bucket without tags answers NoSuchTagSet), object tags by version, AWS's
limits and codes (InvalidTag: at most 50 tags on a bucket and 10 on an
object, keys of 1 to 128 and values of at most 256 Unicode characters, no
duplicate keys, no `aws:` prefix, the allowed characters), the same rules
for the `x-amz-tagging` header, `x-amz-tagging-count` on GET and HEAD, and
the workspace bucket view keeping tags too."""

import pathlib

import botocore
import pytest

from s3server import S3Server


def code_of(e):
    err = e.value.response
    return err["Error"]["Code"], err["ResponseMetadata"]["HTTPStatusCode"]


def tagset(pairs):
    return {"TagSet": [{"Key": k, "Value": v} for k, v in pairs]}


def refused(call, code, status=400):
    with pytest.raises(botocore.exceptions.ClientError) as e:
        call()
    assert code_of(e) == (code, status), e.value.response


def test_bucket_tags_are_kept_replaced_and_removed(s3server, s3):
    s3.create_bucket(Bucket="tagged")
    refused(lambda: s3.get_bucket_tagging(Bucket="tagged"), "NoSuchTagSet", 404)
    refused(lambda: s3.get_bucket_tagging(Bucket="missing"), "NoSuchBucket", 404)
    refused(lambda: s3.put_bucket_tagging(Bucket="missing", Tagging=tagset([("a", "1")])),
            "NoSuchBucket", 404)
    fifty = [(f"key{i}", "é" * 256) for i in range(50)]
    s3.put_bucket_tagging(Bucket="tagged", Tagging=tagset(fifty))
    got = s3.get_bucket_tagging(Bucket="tagged")["TagSet"]
    assert sorted((t["Key"], t["Value"]) for t in got) == sorted(fifty)
    # Replaced whole.
    s3.put_bucket_tagging(Bucket="tagged", Tagging=tagset([("team", "blue sky"), ("cost:centre", "a/b@c+d=e-f_g.h")]))
    got = s3.get_bucket_tagging(Bucket="tagged")["TagSet"]
    assert sorted((t["Key"], t["Value"]) for t in got) == [("cost:centre", "a/b@c+d=e-f_g.h"), ("team", "blue sky")]
    # Removed: NoSuchTagSet again; removing twice is fine.
    assert s3.delete_bucket_tagging(Bucket="tagged")["ResponseMetadata"]["HTTPStatusCode"] == 204
    refused(lambda: s3.get_bucket_tagging(Bucket="tagged"), "NoSuchTagSet", 404)
    s3.delete_bucket_tagging(Bucket="tagged")


def test_bucket_tags_survive_a_restart(stow_bin, tmp_path):
    server = S3Server(stow_bin, tmp_path / "data")
    try:
        s3 = server.client()
        s3.create_bucket(Bucket="kept")
        s3.put_bucket_tagging(Bucket="kept", Tagging=tagset([("a", "1")]))
    finally:
        assert server.stop() == 0
    server = S3Server(stow_bin, tmp_path / "data")
    try:
        s3 = server.client()
        assert s3.get_bucket_tagging(Bucket="kept")["TagSet"] == [{"Key": "a", "Value": "1"}]
    finally:
        assert server.stop() == 0


def test_tag_rules_are_aws_rules(s3server):
    # The server's rules, not botocore's own checks, are under test.
    s3 = s3server.client(parameter_validation=False)
    s3.create_bucket(Bucket="rules")
    s3.put_object(Bucket="rules", Key="k", Body=b"x")
    s3.put_bucket_tagging(Bucket="rules", Tagging=tagset([("keep", "me")]))
    s3.put_object_tagging(Bucket="rules", Key="k", Tagging=tagset([("keep", "me")]))
    bad = {
        "51 on a bucket": [(f"k{i}", "v") for i in range(51)],
        "a key of 129": [("k" * 129, "v")],
        "a value of 257": [("k", "v" * 257)],
        "an empty key": [("", "v")],
        "aws: prefix": [("aws:cloudformation:stack", "v")],
        "a character outside the set (key)": [("k!", "v")],
        "a character outside the set (value)": [("k", "<v>")],
        "a duplicate key": [("k", "1"), ("k", "2")],
    }
    for name, pairs in bad.items():
        refused(lambda: s3.put_bucket_tagging(Bucket="rules", Tagging=tagset(pairs)), "InvalidTag")
    # An object carries at most 10; the same rules otherwise.
    bad["11 on an object"] = [(f"k{i}", "v") for i in range(11)]
    for name, pairs in bad.items():
        refused(lambda: s3.put_object_tagging(Bucket="rules", Key="k", Tagging=tagset(pairs)), "InvalidTag")
    # Nothing refused changed anything.
    assert s3.get_bucket_tagging(Bucket="rules")["TagSet"] == [{"Key": "keep", "Value": "me"}]
    assert s3.get_object_tagging(Bucket="rules", Key="k")["TagSet"] == [{"Key": "keep", "Value": "me"}]
    # Ten on an object, 128-character keys and 256-character values (in
    # characters, not bytes) are fine.
    ten = [(("ü" * 127) + str(i), "ß" * 256) for i in range(10)]
    s3.put_object_tagging(Bucket="rules", Key="k", Tagging=tagset(ten))
    got = s3.get_object_tagging(Bucket="rules", Key="k")["TagSet"]
    assert sorted((t["Key"], t["Value"]) for t in got) == sorted(ten)
    # The x-amz-tagging header of uploads follows the object's rules.
    eleven = "&".join(f"k{i}=v" for i in range(11))
    for header in (eleven, "aws%3Ak=v", "k=%3Cv%3E", "a=1&a=2", "=v"):
        refused(lambda: s3.put_object(Bucket="rules", Key="new", Body=b"x", Tagging=header), "InvalidTag")
        refused(lambda: s3.create_multipart_upload(Bucket="rules", Key="new", Tagging=header), "InvalidTag")
        refused(lambda: s3.copy_object(Bucket="rules", Key="new", CopySource={"Bucket": "rules", "Key": "k"},
                                       TaggingDirective="REPLACE", Tagging=header), "InvalidTag")
    refused(lambda: s3.head_object(Bucket="rules", Key="new"), "404", 404)


def test_tagging_count_on_get_and_head(s3server, s3):
    s3.create_bucket(Bucket="counts")
    s3.put_object(Bucket="counts", Key="two", Body=b"x", Tagging="a=1&b=2")
    s3.put_object(Bucket="counts", Key="none", Body=b"x")
    for call in (s3.get_object, s3.head_object):
        headers = call(Bucket="counts", Key="two")["ResponseMetadata"]["HTTPHeaders"]
        assert headers["x-amz-tagging-count"] == "2"
        headers = call(Bucket="counts", Key="none")["ResponseMetadata"]["HTTPHeaders"]
        assert "x-amz-tagging-count" not in headers
    s3.put_object_tagging(Bucket="counts", Key="none", Tagging=tagset([("c", "3")]))
    assert s3.head_object(Bucket="counts", Key="none")["ResponseMetadata"]["HTTPHeaders"][
        "x-amz-tagging-count"] == "1"
    assert s3.get_object(Bucket="counts", Key="none")["TagCount"] == 1


def test_object_tags_by_version(s3server, s3):
    s3.create_bucket(Bucket="vtagged")
    s3.put_bucket_versioning(Bucket="vtagged", VersioningConfiguration={"Status": "Enabled"})
    v1 = s3.put_object(Bucket="vtagged", Key="k", Body=b"1")["VersionId"]
    v2 = s3.put_object(Bucket="vtagged", Key="k", Body=b"2", Tagging="now=2")["VersionId"]
    put = s3.put_object_tagging(Bucket="vtagged", Key="k", VersionId=v1, Tagging=tagset([("then", "1")]))
    assert put["VersionId"] == v1
    assert s3.get_object_tagging(Bucket="vtagged", Key="k", VersionId=v1)["TagSet"] == [
        {"Key": "then", "Value": "1"}]
    latest = s3.get_object_tagging(Bucket="vtagged", Key="k")
    assert (latest["VersionId"], latest["TagSet"]) == (v2, [{"Key": "now", "Value": "2"}])
    assert s3.head_object(Bucket="vtagged", Key="k", VersionId=v1)["ResponseMetadata"]["HTTPHeaders"][
        "x-amz-tagging-count"] == "1"
    deleted = s3.delete_object_tagging(Bucket="vtagged", Key="k", VersionId=v1)
    assert deleted["VersionId"] == v1
    assert s3.get_object_tagging(Bucket="vtagged", Key="k", VersionId=v1)["TagSet"] == []
    assert s3.get_object_tagging(Bucket="vtagged", Key="k")["TagSet"] == [{"Key": "now", "Value": "2"}]
    refused(lambda: s3.put_object_tagging(Bucket="vtagged", Key="k", VersionId="0" * 32,
                                          Tagging=tagset([("x", "y")])), "NoSuchVersion", 404)


def test_workspace_bucket_view_keeps_tags(stow_bin, workdir):
    from test_workspace_serve import prepare
    from s3server import WorkspaceServer

    p = prepare(stow_bin, workdir, {"seed.txt": b"seed"})
    server = WorkspaceServer(stow_bin, p["workspace_id"], workdir / "reg")
    try:
        s3, bucket = server.client(), server.bucket
        refused(lambda: s3.get_bucket_tagging(Bucket=bucket), "NoSuchTagSet", 404)
        s3.put_bucket_tagging(Bucket=bucket, Tagging=tagset([("team", "blue")]))
        assert s3.get_bucket_tagging(Bucket=bucket)["TagSet"] == [{"Key": "team", "Value": "blue"}]
        # A file's tags are kept with its properties while it is unchanged.
        s3.put_object_tagging(Bucket=bucket, Key="seed.txt", Tagging=tagset([("a", "1")]))
        assert s3.get_object_tagging(Bucket=bucket, Key="seed.txt")["TagSet"] == [{"Key": "a", "Value": "1"}]
        assert s3.get_object(Bucket=bucket, Key="seed.txt")["Body"].read() == b"seed"
        assert s3.head_object(Bucket=bucket, Key="seed.txt")["ResponseMetadata"]["HTTPHeaders"][
            "x-amz-tagging-count"] == "1"
        s3.put_object(Bucket=bucket, Key="new.txt", Body=b"n", Tagging="b=2")
        assert s3.get_object_tagging(Bucket=bucket, Key="new.txt")["TagSet"] == [{"Key": "b", "Value": "2"}]
        s3.delete_object_tagging(Bucket=bucket, Key="seed.txt")
        assert s3.get_object_tagging(Bucket=bucket, Key="seed.txt")["TagSet"] == []
        refused(lambda: s3.put_object_tagging(Bucket=bucket, Key="absent.txt", Tagging=tagset([("a", "1")])),
                "NoSuchKey", 404)
        refused(lambda: s3.put_object_tagging(Bucket=bucket, Key="seed.txt", Tagging=tagset([("aws:x", "1")])),
                "InvalidTag")
        assert (pathlib.Path(server.root) / "seed.txt").read_bytes() == b"seed"
        s3.delete_bucket_tagging(Bucket=bucket)
        refused(lambda: s3.get_bucket_tagging(Bucket=bucket), "NoSuchTagSet", 404)
    finally:
        assert server.stop() == 0
