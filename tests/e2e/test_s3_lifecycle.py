"""S3 lifecycle through boto3 against the real binary, served with
`--lifecycle-day-seconds 1` (a lifecycle day is one second): Terraform-
shaped configurations put, read back and deleted, validation refusals with
S3's codes, the x-amz-expiration header, and the server's background
expiry really removing current versions, noncurrent versions, lone delete
markers and incomplete multipart uploads, never a locked version; the
workspace bucket view refuses lifecycle rules."""

import datetime
import re
import time

import botocore
import pytest

from s3server import S3Server

DEADLINE = 6.0


def code_of(excinfo):
    err = excinfo.value.response
    return err["Error"]["Code"], err["ResponseMetadata"]["HTTPStatusCode"]


@pytest.fixture
def fast(stow_bin, tmp_path):
    """A server whose lifecycle day is one second."""
    server = S3Server(stow_bin, tmp_path / "data", "--lifecycle-day-seconds", "1")
    yield server.client()
    assert server.stop() == 0


def wait_for(check, deadline=DEADLINE):
    """Polls `check` until it returns truthy or the deadline passes."""
    end = time.monotonic() + deadline
    while True:
        got = check()
        if got or time.monotonic() > end:
            return got
        time.sleep(0.1)


def keys(s3, bucket):
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


def versions(s3, bucket):
    r = s3.list_object_versions(Bucket=bucket)
    return ([(v["Key"], v["VersionId"]) for v in r.get("Versions", [])],
            [(m["Key"], m["VersionId"]) for m in r.get("DeleteMarkers", [])])


# What Terraform's aws_s3_bucket_lifecycle_configuration sends for a
# typical module: filters of every shape, transitions, noncurrent rules
# and an upload abort.
TERRAFORM_RULES = [
    {"ID": "logs", "Status": "Enabled", "Filter": {"Prefix": "logs/"},
     "Expiration": {"Days": 90},
     "Transitions": [{"Days": 30, "StorageClass": "STANDARD_IA"},
                     {"Days": 60, "StorageClass": "GLACIER"}]},
    {"ID": "tmp-tagged", "Status": "Enabled",
     "Filter": {"And": {"Prefix": "tmp/", "Tags": [{"Key": "class", "Value": "scratch"}],
                        "ObjectSizeGreaterThan": 10}},
     "Expiration": {"Date": datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)}},
    {"ID": "versions", "Status": "Enabled", "Filter": {},
     "NoncurrentVersionExpiration": {"NoncurrentDays": 30, "NewerNoncurrentVersions": 3},
     "NoncurrentVersionTransitions": [{"NoncurrentDays": 10, "StorageClass": "GLACIER"}],
     "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7}},
    {"ID": "markers", "Status": "Disabled", "Filter": {"Prefix": ""},
     "Expiration": {"ExpiredObjectDeleteMarker": True}},
    {"ID": "legacy", "Status": "Enabled", "Prefix": "old/", "Expiration": {"Days": 1}},
]


def test_configuration_round_trip(s3):
    s3.create_bucket(Bucket="lcb")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_bucket_lifecycle_configuration(Bucket="lcb")
    assert code_of(e) == ("NoSuchLifecycleConfiguration", 404)
    s3.put_bucket_lifecycle_configuration(
        Bucket="lcb", LifecycleConfiguration={"Rules": TERRAFORM_RULES},
        TransitionDefaultMinimumObjectSize="varies_by_storage_class")
    got = s3.get_bucket_lifecycle_configuration(Bucket="lcb")
    assert got["Rules"] == TERRAFORM_RULES
    assert got["TransitionDefaultMinimumObjectSize"] == "varies_by_storage_class"
    # A rule sent without an ID gets one.
    s3.put_bucket_lifecycle_configuration(Bucket="lcb", LifecycleConfiguration={"Rules": [
        {"Status": "Enabled", "Filter": {"Prefix": "a/"}, "Expiration": {"Days": 3}}]})
    (rule,) = s3.get_bucket_lifecycle_configuration(Bucket="lcb")["Rules"]
    assert rule["ID"]
    assert s3.delete_bucket_lifecycle(Bucket="lcb")["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_bucket_lifecycle_configuration(Bucket="lcb")
    assert code_of(e) == ("NoSuchLifecycleConfiguration", 404)
    # Deleting none is fine; a missing bucket is not.
    s3.delete_bucket_lifecycle(Bucket="lcb")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_bucket_lifecycle_configuration(Bucket="nope")
    assert code_of(e) == ("NoSuchBucket", 404)


@pytest.mark.parametrize("rule, code", [
    ({"ID": "x" * 256, "Status": "Enabled", "Prefix": "", "Expiration": {"Days": 1}},
     "InvalidArgument"),
    ({"ID": "a", "Status": "enabled", "Prefix": "", "Expiration": {"Days": 1}}, "MalformedXML"),
    ({"ID": "a", "Status": "Enabled", "Prefix": "", "Expiration": {"Days": 0}}, "InvalidArgument"),
    ({"ID": "a", "Status": "Enabled", "Prefix": ""}, "InvalidRequest"),
    ({"ID": "a", "Status": "Enabled", "Expiration": {"Days": 1}}, "MalformedXML"),
    ({"ID": "a", "Status": "Enabled", "Prefix": "", "Filter": {}, "Expiration": {"Days": 1}},
     "MalformedXML"),
    ({"ID": "a", "Status": "Enabled", "Filter": {"Prefix": "p", "ObjectSizeLessThan": 5},
      "Expiration": {"Days": 1}}, "MalformedXML"),
    ({"ID": "a", "Status": "Enabled", "Filter": {"And": {"Prefix": "p"}},
      "Expiration": {"Days": 1}}, "MalformedXML"),
    ({"ID": "a", "Status": "Enabled", "Prefix": "",
      "Expiration": {"Date": datetime.datetime(2030, 1, 1, 12, tzinfo=datetime.timezone.utc)}},
     "InvalidArgument"),
    ({"ID": "a", "Status": "Enabled", "Prefix": "", "Expiration": {"Days": 1,
      "ExpiredObjectDeleteMarker": True}}, "MalformedXML"),
    ({"ID": "a", "Status": "Enabled", "Filter": {"Tag": {"Key": "k", "Value": "v"}},
      "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}}, "InvalidArgument"),
    ({"ID": "a", "Status": "Enabled", "Prefix": "",
      "Transitions": [{"Days": 1, "StorageClass": "PLATINUM"}]}, "MalformedXML"),
])
def test_invalid_rules_are_refused_and_change_nothing(s3, rule, code):
    s3.create_bucket(Bucket="lcb")
    s3.put_bucket_lifecycle_configuration(Bucket="lcb", LifecycleConfiguration={"Rules": [
        {"ID": "kept", "Status": "Enabled", "Prefix": "", "Expiration": {"Days": 5}}]})
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_bucket_lifecycle_configuration(Bucket="lcb", LifecycleConfiguration={"Rules": [rule]})
    assert code_of(e) == (code, 400)
    assert [r["ID"] for r in s3.get_bucket_lifecycle_configuration(Bucket="lcb")["Rules"]] == ["kept"]


def test_duplicate_ids_are_refused(s3):
    s3.create_bucket(Bucket="lcb")
    rule = {"ID": "same", "Status": "Enabled", "Prefix": "", "Expiration": {"Days": 1}}
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_bucket_lifecycle_configuration(Bucket="lcb", LifecycleConfiguration={"Rules": [rule, rule]})
    assert code_of(e) == ("InvalidArgument", 400)


def expiry_of(response):
    value = response["ResponseMetadata"]["HTTPHeaders"].get("x-amz-expiration")
    if value is None:
        return None
    m = re.fullmatch(r'expiry-date="(.+)", rule-id="(.+)"', value)
    date = datetime.datetime.strptime(m.group(1), "%a, %d %b %Y %H:%M:%S GMT")
    return date.replace(tzinfo=datetime.timezone.utc), m.group(2)


def test_expiration_header_names_the_rule_and_s3s_date(s3):
    s3.create_bucket(Bucket="lcb")
    s3.put_bucket_lifecycle_configuration(Bucket="lcb", LifecycleConfiguration={"Rules": [
        {"ID": "week", "Status": "Enabled", "Filter": {"Prefix": "logs/"}, "Expiration": {"Days": 7}},
        {"ID": "tagged", "Status": "Enabled", "Filter": {"Tag": {"Key": "t", "Value": "1"}},
         "Expiration": {"Days": 1}},
        {"ID": "abort", "Status": "Enabled", "Filter": {"Prefix": "up/"},
         "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 2}},
    ]})
    put = s3.put_object(Bucket="lcb", Key="logs/a", Body=b"x")
    modified = s3.head_object(Bucket="lcb", Key="logs/a")["LastModified"]
    date, rule = expiry_of(put)
    assert rule == "week"
    # Seven days on, rounded up to the next midnight UTC.
    assert (date.hour, date.minute, date.second) == (0, 0, 0)
    assert datetime.timedelta(days=7) < date - modified <= datetime.timedelta(days=8)
    for r in (s3.head_object(Bucket="lcb", Key="logs/a"), s3.get_object(Bucket="lcb", Key="logs/a"),
              s3.copy_object(Bucket="lcb", Key="logs/b", CopySource="lcb/logs/a")):
        assert expiry_of(r)[1] == "week"
    # The earliest matching rule wins; tags count.
    s3.put_object_tagging(Bucket="lcb", Key="logs/a", Tagging={"TagSet": [{"Key": "t", "Value": "1"}]})
    assert expiry_of(s3.head_object(Bucket="lcb", Key="logs/a"))[1] == "tagged"
    assert expiry_of(s3.head_object(Bucket="lcb", Key="logs/b"))[1] == "week"
    assert expiry_of(s3.put_object(Bucket="lcb", Key="other", Body=b"x")) is None
    # A new upload names when its rule aborts it (x-amz-abort-date).
    started = s3.create_multipart_upload(Bucket="lcb", Key="up/x")
    assert started["AbortRuleId"] == "abort"
    abort = started["AbortDate"]
    assert (abort.hour, abort.minute, abort.second) == (0, 0, 0)
    now = datetime.datetime.now(datetime.timezone.utc)
    assert datetime.timedelta(days=2) < abort - now <= datetime.timedelta(days=3)
    created = s3.create_multipart_upload(Bucket="lcb", Key="logs/big")
    assert "AbortDate" not in created
    up = created["UploadId"]
    etag = s3.upload_part(Bucket="lcb", Key="logs/big", UploadId=up, PartNumber=1, Body=b"p")["ETag"]
    done = s3.complete_multipart_upload(Bucket="lcb", Key="logs/big", UploadId=up,
                                        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    assert expiry_of(done)[1] == "week"
    s3.delete_bucket_lifecycle(Bucket="lcb")
    assert expiry_of(s3.head_object(Bucket="lcb", Key="logs/a")) is None


def test_objects_really_expire(fast):
    s3 = fast
    s3.create_bucket(Bucket="lcb")
    for key in ("tmp/a", "tmp/b", "keep/c"):
        s3.put_object(Bucket="lcb", Key=key, Body=b"x")
    s3.put_object(Bucket="lcb", Key="big/x", Body=b"x" * 3000)
    s3.put_object(Bucket="lcb", Key="big/y", Body=b"x" * 10)
    s3.put_bucket_lifecycle_configuration(Bucket="lcb", LifecycleConfiguration={"Rules": [
        {"ID": "tmp", "Status": "Enabled", "Filter": {"Prefix": "tmp/"}, "Expiration": {"Days": 1}},
        {"ID": "big", "Status": "Enabled", "Filter": {"ObjectSizeGreaterThan": 2000},
         "Expiration": {"Days": 1}},
        {"ID": "off", "Status": "Disabled", "Filter": {"Prefix": "keep/"}, "Expiration": {"Days": 1}},
    ]})
    assert wait_for(lambda: keys(s3, "lcb") == ["big/y", "keep/c"]), keys(s3, "lcb")
    # They were due as soon as the others: a few more runs keep them.
    time.sleep(0.5)
    assert keys(s3, "lcb") == ["big/y", "keep/c"]


def test_versions_markers_and_uploads_expire(fast):
    s3 = fast
    s3.create_bucket(Bucket="ver")
    s3.put_bucket_versioning(Bucket="ver", VersioningConfiguration={"Status": "Enabled"})
    for i in range(6):
        s3.put_object(Bucket="ver", Key="many", Body=f"v{i}".encode())
    s3.put_object(Bucket="ver", Key="gone", Body=b"x")
    s3.delete_object(Bucket="ver", Key="gone")
    s3.put_object(Bucket="ver", Key="cur/a", Body=b"x")
    old = s3.create_multipart_upload(Bucket="ver", Key="up/a")["UploadId"]
    s3.create_multipart_upload(Bucket="ver", Key="keep/b")
    s3.put_bucket_lifecycle_configuration(Bucket="ver", LifecycleConfiguration={"Rules": [
        {"ID": "nc", "Status": "Enabled", "Filter": {"Prefix": "many"},
         "NoncurrentVersionExpiration": {"NoncurrentDays": 1, "NewerNoncurrentVersions": 2}},
        {"ID": "dm", "Status": "Enabled", "Filter": {"Prefix": "gone"},
         "NoncurrentVersionExpiration": {"NoncurrentDays": 1},
         "Expiration": {"ExpiredObjectDeleteMarker": True}},
        {"ID": "cur", "Status": "Enabled", "Filter": {"Prefix": "cur/"}, "Expiration": {"Days": 1}},
        {"ID": "up", "Status": "Enabled", "Filter": {"Prefix": "up/"},
         "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}},
    ]})

    def settled():
        vs, ms = versions(s3, "ver")
        uploads = [u["UploadId"] for u in s3.list_multipart_uploads(Bucket="ver").get("Uploads", [])]
        many = [v for v in vs if v[0] == "many"]
        # 1 current + the 2 newest noncurrent kept; "gone" entirely (its
        # version, then its lone marker); "cur/a" hidden behind a marker.
        return (len(many) == 3 and not any(k == "gone" for k, _ in vs + ms)
                and [k for k, _ in ms] == ["cur/a"] and old not in uploads and len(uploads) == 1)
    assert wait_for(settled), (versions(s3, "ver"), s3.list_multipart_uploads(Bucket="ver").get("Uploads"))
    assert s3.get_object(Bucket="ver", Key="many")["Body"].read() == b"v5"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_object(Bucket="ver", Key="cur/a")
    assert code_of(e) == ("404", 404)


def test_locked_versions_survive_expiry(fast):
    s3 = fast
    s3.create_bucket(Bucket="vault", ObjectLockEnabledForBucket=True)
    held = s3.put_object(Bucket="vault", Key="held", Body=b"old")["VersionId"]
    s3.put_object_legal_hold(Bucket="vault", Key="held", VersionId=held, LegalHold={"Status": "ON"})
    kept = s3.put_object(Bucket="vault", Key="kept", Body=b"old", ObjectLockMode="COMPLIANCE",
                         ObjectLockRetainUntilDate=datetime.datetime.now(datetime.timezone.utc)
                         + datetime.timedelta(hours=1))["VersionId"]
    free = s3.put_object(Bucket="vault", Key="free", Body=b"old")["VersionId"]
    for key in ("held", "kept", "free"):
        s3.put_object(Bucket="vault", Key=key, Body=b"new")
    s3.put_bucket_lifecycle_configuration(Bucket="vault", LifecycleConfiguration={"Rules": [
        {"ID": "all", "Status": "Enabled", "Filter": {},
         "Expiration": {"Days": 1}, "NoncurrentVersionExpiration": {"NoncurrentDays": 1}}]})

    def free_gone():
        return free not in [v for _, v in versions(s3, "vault")[0]]
    assert wait_for(free_gone)
    # Due as soon as "free": a few more runs keep them.
    time.sleep(0.5)
    for key, vid in (("held", held), ("kept", kept)):
        body = s3.get_object(Bucket="vault", Key=key, VersionId=vid)["Body"].read()
        assert body == b"old"


def test_workspace_bucket_view_refuses_lifecycle(stow_bin, workdir):
    from test_workspace_serve import prepare
    from s3server import WorkspaceServer

    p = prepare(stow_bin, workdir, {"seed.txt": b"seed"})
    server = WorkspaceServer(stow_bin, p["workspace_id"], workdir / "reg")
    try:
        s3, bucket = server.client(), server.bucket
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.get_bucket_lifecycle_configuration(Bucket=bucket)
        assert code_of(e) == ("NoSuchLifecycleConfiguration", 404)
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [
                {"ID": "a", "Status": "Enabled", "Prefix": "", "Expiration": {"Days": 1}}]})
        assert code_of(e) == ("NotImplemented", 501)
        assert "lifecycle" in e.value.response["Error"]["Message"]
        # Removing none succeeds; the files are untouched, no header.
        s3.delete_bucket_lifecycle(Bucket=bucket)
        head = s3.head_object(Bucket=bucket, Key="seed.txt")
        assert "x-amz-expiration" not in head["ResponseMetadata"]["HTTPHeaders"]
    finally:
        assert server.stop() == 0
