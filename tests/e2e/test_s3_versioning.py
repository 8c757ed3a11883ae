"""S3 versioning through boto3 against the real binary: bucket state,
version IDs, delete markers (404 with x-amz-delete-marker, 405 by ID),
the null version, ListObjectVersions paging, DeleteObjects and copies by
version, multipart completions, and versions kept across a restart."""

import re

import botocore
import pytest

from s3server import S3Server


def code_of(excinfo):
    err = excinfo.value.response
    return err["Error"]["Code"], err["ResponseMetadata"]["HTTPStatusCode"]


def headers_of(excinfo):
    return excinfo.value.response["ResponseMetadata"]["HTTPHeaders"]


def enable(s3, bucket, status="Enabled"):
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": status})


def test_bucket_versioning_state(s3):
    s3.create_bucket(Bucket="vstate")
    assert "Status" not in s3.get_bucket_versioning(Bucket="vstate")
    enable(s3, "vstate")
    assert s3.get_bucket_versioning(Bucket="vstate")["Status"] == "Enabled"
    enable(s3, "vstate", "Suspended")
    assert s3.get_bucket_versioning(Bucket="vstate")["Status"] == "Suspended"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        enable(s3, "vstate", "Bogus")
    assert code_of(e) == ("MalformedXML", 400)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        enable(s3, "nobucket")
    assert code_of(e) == ("NoSuchBucket", 404)


def test_versions_and_delete_markers(s3):
    s3.create_bucket(Bucket="vers")
    enable(s3, "vers")
    v1 = s3.put_object(Bucket="vers", Key="k", Body=b"one")["VersionId"]
    v2 = s3.put_object(Bucket="vers", Key="k", Body=b"two" * 20000)["VersionId"]
    assert v1 != v2 and v1 != "null"
    got = s3.get_object(Bucket="vers", Key="k")
    assert got["VersionId"] == v2 and got["Body"].read() == b"two" * 20000
    old = s3.get_object(Bucket="vers", Key="k", VersionId=v1)
    assert old["VersionId"] == v1 and old["Body"].read() == b"one"
    assert s3.head_object(Bucket="vers", Key="k", VersionId=v1)["ContentLength"] == 3
    attrs = s3.get_object_attributes(Bucket="vers", Key="k", VersionId=v1, ObjectAttributes=["ObjectSize"])
    assert attrs["ObjectSize"] == 3 and attrs["VersionId"] == v1

    deleted = s3.delete_object(Bucket="vers", Key="k")
    assert deleted["DeleteMarker"] is True
    marker = deleted["VersionId"]
    # The key reads as deleted: 404 NoSuchKey, saying it is a delete marker.
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket="vers", Key="k")
    assert code_of(e) == ("NoSuchKey", 404)
    assert headers_of(e)["x-amz-delete-marker"] == "true"
    assert headers_of(e)["x-amz-version-id"] == marker
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_object(Bucket="vers", Key="k")
    assert code_of(e)[1] == 404 and headers_of(e)["x-amz-delete-marker"] == "true"
    # The marker itself, by ID: 405.
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket="vers", Key="k", VersionId=marker)
    assert code_of(e) == ("MethodNotAllowed", 405)
    assert headers_of(e)["x-amz-delete-marker"] == "true"
    assert s3.list_objects_v2(Bucket="vers")["KeyCount"] == 0

    listed = s3.list_object_versions(Bucket="vers")
    assert [(m["VersionId"], m["IsLatest"]) for m in listed["DeleteMarkers"]] == [(marker, True)]
    assert [(v["VersionId"], v["IsLatest"], v["Size"]) for v in listed["Versions"]] == [
        (v2, False, 60000), (v1, False, 3)]

    # Removing the marker by ID brings the object back.
    gone = s3.delete_object(Bucket="vers", Key="k", VersionId=marker)
    assert gone["DeleteMarker"] is True and gone["VersionId"] == marker
    assert s3.get_object(Bucket="vers", Key="k")["Body"].read() == b"two" * 20000
    # Removing the current version makes the one before it current.
    s3.delete_object(Bucket="vers", Key="k", VersionId=v2)
    assert s3.get_object(Bucket="vers", Key="k")["VersionId"] == v1
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket="vers", Key="k", VersionId=v2)
    assert code_of(e) == ("NoSuchVersion", 404)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket="vers", Key="k", VersionId="not-a-version")
    assert code_of(e) == ("InvalidArgument", 400)
    # A bucket with versions left is not empty.
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.delete_bucket(Bucket="vers")
    assert code_of(e) == ("BucketNotEmpty", 409)


def test_suspended_and_the_null_version(s3):
    s3.create_bucket(Bucket="vnull")
    s3.put_object(Bucket="vnull", Key="k", Body=b"before")
    assert "VersionId" not in s3.head_object(Bucket="vnull", Key="k")
    enable(s3, "vnull")
    assert s3.head_object(Bucket="vnull", Key="k")["VersionId"] == "null"
    v = s3.put_object(Bucket="vnull", Key="k", Body=b"enabled")["VersionId"]
    assert s3.get_object(Bucket="vnull", Key="k", VersionId="null")["Body"].read() == b"before"
    enable(s3, "vnull", "Suspended")
    # A write of the null version answers no version ID (as AWS); reads say "null".
    assert "VersionId" not in s3.put_object(Bucket="vnull", Key="k", Body=b"s1")
    assert s3.head_object(Bucket="vnull", Key="k")["VersionId"] == "null"
    s3.put_object(Bucket="vnull", Key="k", Body=b"s22")
    ids = [x["VersionId"] for x in s3.list_object_versions(Bucket="vnull")["Versions"]]
    assert ids == ["null", v], "the null version replaced, the enabled one kept"
    assert s3.get_object(Bucket="vnull", Key="k", VersionId="null")["Body"].read() == b"s22"
    d = s3.delete_object(Bucket="vnull", Key="k")
    assert d["DeleteMarker"] is True and d["VersionId"] == "null"
    listed = s3.list_object_versions(Bucket="vnull")
    assert [m["VersionId"] for m in listed["DeleteMarkers"]] == ["null"]
    assert [x["VersionId"] for x in listed["Versions"]] == [v]


def test_list_object_versions_pages(s3):
    s3.create_bucket(Bucket="vpage")
    enable(s3, "vpage")
    expected = []
    for key in ["a", "b/1", "b/2", "c"]:
        ids = [s3.put_object(Bucket="vpage", Key=key, Body=key.encode() * n)["VersionId"] for n in range(1, 4)]
        expected += [(key, i) for i in reversed(ids)]
    seen = []
    kwargs = {"Bucket": "vpage", "MaxKeys": 2}
    while True:
        page = s3.list_object_versions(**kwargs)
        seen += [(v["Key"], v["VersionId"]) for v in page.get("Versions", [])]
        if not page["IsTruncated"]:
            break
        kwargs.update(KeyMarker=page["NextKeyMarker"], VersionIdMarker=page["NextVersionIdMarker"])
    assert seen == expected
    paginator = s3.get_paginator("list_object_versions")
    pages = list(paginator.paginate(Bucket="vpage", Delimiter="/", PaginationConfig={"PageSize": 1}))
    prefixes = [p["Prefix"] for page in pages for p in page.get("CommonPrefixes", [])]
    assert prefixes == ["b/"]
    assert [v["Key"] for page in pages for v in page.get("Versions", [])] == ["a"] * 3 + ["c"] * 3
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.list_object_versions(Bucket="vpage", VersionIdMarker="null")
    assert code_of(e) == ("InvalidArgument", 400)


def test_delete_objects_and_copies_by_version(s3):
    s3.create_bucket(Bucket="vmulti")
    enable(s3, "vmulti")
    v1 = s3.put_object(Bucket="vmulti", Key="k", Body=b"first")["VersionId"]
    v2 = s3.put_object(Bucket="vmulti", Key="k", Body=b"second")["VersionId"]
    copied = s3.copy_object(Bucket="vmulti", Key="copy", CopySource={"Bucket": "vmulti", "Key": "k", "VersionId": v1})
    assert copied["CopySourceVersionId"] == v1 and copied["VersionId"] not in (v1, v2)
    assert s3.get_object(Bucket="vmulti", Key="copy")["Body"].read() == b"first"
    out = s3.delete_objects(Bucket="vmulti", Delete={"Objects": [
        {"Key": "k", "VersionId": v1}, {"Key": "copy"}, {"Key": "k", "VersionId": "bad id"}]})
    by_key = {(d["Key"], d.get("VersionId")): d for d in out["Deleted"]}
    assert ("k", v1) in by_key and "DeleteMarker" not in by_key[("k", v1)]
    marker = by_key[("copy", None)]
    assert marker["DeleteMarker"] is True and marker["DeleteMarkerVersionId"]
    assert [(e["Key"], e["Code"]) for e in out["Errors"]] == [("k", "InvalidArgument")]
    assert [v["VersionId"] for v in s3.list_object_versions(Bucket="vmulti", Prefix="k")["Versions"]] == [v2]
    # Delete the marker through DeleteObjects: the copy is back.
    out = s3.delete_objects(Bucket="vmulti", Delete={"Objects": [
        {"Key": "copy", "VersionId": marker["DeleteMarkerVersionId"]}]})
    assert out["Deleted"][0]["DeleteMarker"] is True
    assert s3.get_object(Bucket="vmulti", Key="copy")["Body"].read() == b"first"


def test_multipart_completion_makes_a_version(s3):
    s3.create_bucket(Bucket="vmpu")
    enable(s3, "vmpu")
    old = s3.put_object(Bucket="vmpu", Key="big", Body=b"old")["VersionId"]
    up = s3.create_multipart_upload(Bucket="vmpu", Key="big")["UploadId"]
    part = s3.upload_part(Bucket="vmpu", Key="big", UploadId=up, PartNumber=1, Body=b"new" * 1000)
    done = s3.complete_multipart_upload(Bucket="vmpu", Key="big", UploadId=up,
                                        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    assert done["VersionId"] not in (None, old)
    assert s3.get_object(Bucket="vmpu", Key="big")["Body"].read() == b"new" * 1000
    assert s3.get_object(Bucket="vmpu", Key="big", VersionId=old)["Body"].read() == b"old"


def test_versions_survive_a_restart(stow_bin, tmp_path):
    data = tmp_path / "data"
    server = S3Server(stow_bin, data)
    try:
        s3 = server.client()
        s3.create_bucket(Bucket="vkeep")
        enable(s3, "vkeep")
        v1 = s3.put_object(Bucket="vkeep", Key="k", Body=b"x" * 100_000)["VersionId"]
        marker = s3.delete_object(Bucket="vkeep", Key="k")["VersionId"]
    finally:
        assert server.stop() == 0
    server = S3Server(stow_bin, data)
    try:
        s3 = server.client()
        assert s3.get_bucket_versioning(Bucket="vkeep")["Status"] == "Enabled"
        assert s3.get_object(Bucket="vkeep", Key="k", VersionId=v1)["Body"].read() == b"x" * 100_000
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.get_object(Bucket="vkeep", Key="k")
        assert headers_of(e)["x-amz-version-id"] == marker
    finally:
        assert server.stop() == 0


def test_a_workspace_view_keeps_no_versions(stow_bin, workdir):
    """`workspace serve`: versioning cannot be enabled (501, said so), the
    view answers as an unversioned bucket, and only the null version exists."""
    from test_workspace_serve import prepare
    from s3server import WorkspaceServer

    p = prepare(stow_bin, workdir, {"seed.txt": b"seed"})
    server = WorkspaceServer(stow_bin, p["workspace_id"], workdir / "reg")
    try:
        s3, bucket = server.client(), server.bucket
        with pytest.raises(botocore.exceptions.ClientError) as e:
            enable(s3, bucket)
        assert code_of(e) == ("NotImplemented", 501)
        assert "versions" in e.value.response["Error"]["Message"]
        assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)
        assert s3.get_object(Bucket=bucket, Key="seed.txt", VersionId="null")["Body"].read() == b"seed"
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.get_object(Bucket=bucket, Key="seed.txt", VersionId="0" * 32)
        assert code_of(e) == ("NoSuchVersion", 404)
        listed = s3.list_object_versions(Bucket=bucket)["Versions"]
        assert [(v["Key"], v["VersionId"], v["IsLatest"]) for v in listed] == [("seed.txt", "null", True)]
    finally:
        assert server.stop() == 0


def test_tags_and_acls_by_version(s3):
    s3.create_bucket(Bucket="vtags")
    enable(s3, "vtags")
    v1 = s3.put_object(Bucket="vtags", Key="k", Body=b"one", Tagging="a=1")["VersionId"]
    v2 = s3.put_object(Bucket="vtags", Key="k", Body=b"two", Tagging="b=2")["VersionId"]
    # Reads by version answer that version's tags and name it.
    got = s3.get_object_tagging(Bucket="vtags", Key="k", VersionId=v1)
    assert (got["TagSet"], got["VersionId"]) == ([{"Key": "a", "Value": "1"}], v1)
    got = s3.get_object_tagging(Bucket="vtags", Key="k")
    assert (got["TagSet"], got["VersionId"]) == ([{"Key": "b", "Value": "2"}], v2)
    assert s3.get_object_acl(Bucket="vtags", Key="k", VersionId=v1)["Grants"]
    # A write to a noncurrent version changes that version alone.
    got = s3.put_object_tagging(Bucket="vtags", Key="k", VersionId=v1,
                                Tagging={"TagSet": [{"Key": "x", "Value": "y"}]})
    assert got["VersionId"] == v1
    s3.put_object_acl(Bucket="vtags", Key="k", VersionId=v1, ACL="public-read")
    assert s3.get_object_tagging(Bucket="vtags", Key="k")["TagSet"] == [{"Key": "b", "Value": "2"}]
    assert s3.get_object_tagging(Bucket="vtags", Key="k", VersionId=v1)["TagSet"] == [{"Key": "x", "Value": "y"}]
    uris = lambda v: [g["Grantee"].get("URI") for g in s3.get_object_acl(  # noqa: E731
        Bucket="vtags", Key="k", **v)["Grants"]]
    assert "http://acs.amazonaws.com/groups/global/AllUsers" in uris({"VersionId": v1})
    assert "http://acs.amazonaws.com/groups/global/AllUsers" not in uris({})
    assert s3.head_object(Bucket="vtags", Key="k", VersionId=v1)[
        "ResponseMetadata"]["HTTPHeaders"]["x-amz-tagging-count"] == "1"
    s3.delete_object_tagging(Bucket="vtags", Key="k", VersionId=v1)
    assert s3.get_object_tagging(Bucket="vtags", Key="k", VersionId=v1)["TagSet"] == []
    assert s3.get_object_tagging(Bucket="vtags", Key="k")["TagSet"] == [{"Key": "b", "Value": "2"}]
    # The current version by its ID is written; an unknown ID is NoSuchVersion.
    s3.put_object_tagging(Bucket="vtags", Key="k", VersionId=v2,
                          Tagging={"TagSet": [{"Key": "c", "Value": "3"}]})
    assert s3.get_object_tagging(Bucket="vtags", Key="k")["TagSet"] == [{"Key": "c", "Value": "3"}]
    missing = "0" * 32
    for call in (
        lambda: s3.get_object_tagging(Bucket="vtags", Key="k", VersionId=missing),
        lambda: s3.put_object_tagging(Bucket="vtags", Key="k", VersionId=missing,
                                      Tagging={"TagSet": []}),
    ):
        with pytest.raises(botocore.exceptions.ClientError) as e:
            call()
        assert code_of(e) == ("NoSuchVersion", 404), code_of(e)


def test_a_missing_key_says_it_is_no_delete_marker(s3):
    # HEAD and GET of a key that is gone from an unversioned bucket answer
    # 404 with `x-amz-delete-marker: false` (ceph/s3-tests
    # test_delete_marker_nonversioned); under a delete marker it is `true`.
    s3.create_bucket(Bucket="plainmarker")
    s3.put_object(Bucket="plainmarker", Key="k", Body=b"x")
    s3.delete_object(Bucket="plainmarker", Key="k")
    for call in (lambda: s3.head_object(Bucket="plainmarker", Key="k"),
                 lambda: s3.get_object(Bucket="plainmarker", Key="k")):
        with pytest.raises(botocore.exceptions.ClientError) as e:
            call()
        assert code_of(e)[1] == 404
        assert headers_of(e)["x-amz-delete-marker"] == "false"
        assert "x-amz-version-id" not in headers_of(e)
    s3.put_bucket_versioning(Bucket="plainmarker", VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket="plainmarker", Key="k", Body=b"y")
    s3.delete_object(Bucket="plainmarker", Key="k")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_object(Bucket="plainmarker", Key="k")
    assert headers_of(e)["x-amz-delete-marker"] == "true"


def test_list_object_versions_keeps_versions_and_markers_in_one_order(s3):
    # S3 lists versions and delete markers as one sequence (by key, newest
    # first); the XML used to hold every <Version> before every
    # <DeleteMarker>. boto3 splits the two, so the raw body is read.
    s3.create_bucket(Bucket="vorder")
    s3.put_bucket_versioning(Bucket="vorder", VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket="vorder", Key="a", Body=b"1")
    s3.delete_object(Bucket="vorder", Key="a")
    s3.put_object(Bucket="vorder", Key="a", Body=b"2")
    s3.put_object(Bucket="vorder", Key="b", Body=b"3")
    s3.delete_object(Bucket="vorder", Key="c")
    bodies = []

    def keep(http_response, **_):
        bodies.append(http_response.content.decode())

    s3.meta.events.register("after-call.s3.ListObjectVersions", keep)
    try:
        listed = s3.list_object_versions(Bucket="vorder")
    finally:
        s3.meta.events.unregister("after-call.s3.ListObjectVersions", keep)
    entries = re.findall(r"<(Version|DeleteMarker)>(?:(?!</(?:Version|DeleteMarker)>).)*?<Key>([^<]*)</Key>",
                         bodies[0])
    assert entries == [("Version", "a"), ("DeleteMarker", "a"), ("Version", "a"),
                       ("Version", "b"), ("DeleteMarker", "c")]
    assert "x-stow-version-order" not in listed["ResponseMetadata"]["HTTPHeaders"]
    assert int(listed["ResponseMetadata"]["HTTPHeaders"]["content-length"]) == len(bodies[0].encode())
    # Paged one entry at a time, the same sequence.
    seen, kwargs = [], {"Bucket": "vorder", "MaxKeys": 1}
    while True:
        page = s3.list_object_versions(**kwargs)
        seen += [("Version", v["Key"]) for v in page.get("Versions", [])]
        seen += [("DeleteMarker", m["Key"]) for m in page.get("DeleteMarkers", [])]
        if not page["IsTruncated"]:
            break
        kwargs.update(KeyMarker=page["NextKeyMarker"], VersionIdMarker=page["NextVersionIdMarker"])
    assert seen == entries


def test_a_copy_from_a_delete_marker_by_version_is_invalid_request(s3):
    """A delete marker named as a copy's source by its version ID has no
    bytes: 400 InvalidRequest (as S3 answers; a GET of it is 405), for
    CopyObject and UploadPartCopy alike; the version it hides still copies."""
    s3.create_bucket(Bucket="vcopy")
    enable(s3, "vcopy")
    old = s3.put_object(Bucket="vcopy", Key="k", Body=b"kept bytes")["VersionId"]
    marker = s3.delete_object(Bucket="vcopy", Key="k")["VersionId"]
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.copy_object(Bucket="vcopy", Key="copy", CopySource={"Bucket": "vcopy", "Key": "k", "VersionId": marker})
    assert code_of(e) == ("InvalidRequest", 400)
    assert "delete marker" in e.value.response["Error"]["Message"]
    up = s3.create_multipart_upload(Bucket="vcopy", Key="parts")["UploadId"]
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.upload_part_copy(Bucket="vcopy", Key="parts", UploadId=up, PartNumber=1,
                            CopySource={"Bucket": "vcopy", "Key": "k", "VersionId": marker})
    assert code_of(e) == ("InvalidRequest", 400)
    # The latest version being the marker: 404 NoSuchKey, as before.
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.copy_object(Bucket="vcopy", Key="copy", CopySource={"Bucket": "vcopy", "Key": "k"})
    assert code_of(e) == ("NoSuchKey", 404)
    s3.copy_object(Bucket="vcopy", Key="copy", CopySource={"Bucket": "vcopy", "Key": "k", "VersionId": old})
    assert s3.get_object(Bucket="vcopy", Key="copy")["Body"].read() == b"kept bytes"
    assert [v["Key"] for v in s3.list_object_versions(Bucket="vcopy", Prefix="copy").get("Versions", [])] == ["copy"]
