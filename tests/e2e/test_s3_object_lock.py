"""S3 Object Lock through boto3 against the real binary: buckets created
with object lock (versioned for good), the lock configuration and its
validation, default retention, per-version retention (GOVERNANCE with the
bypass header, COMPLIANCE never shortened or removed), legal holds, the
x-amz-object-lock-* headers on writes and reads, deletes of locked
versions refused (DeleteObject, DeleteObjects, DeleteBucket), the lock
kept across a restart, and the workspace bucket view refusing it."""

import datetime
import pathlib

import botocore
import pytest

from s3server import S3Server


def code_of(excinfo):
    err = excinfo.value.response
    return err["Error"]["Code"], err["ResponseMetadata"]["HTTPStatusCode"]


def in_days(days):
    return datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=days)


def locked_bucket(s3, name):
    s3.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)


def rule(mode="GOVERNANCE", **period):
    return {"ObjectLockEnabled": "Enabled",
            "Rule": {"DefaultRetention": {"Mode": mode, **period}}}


def test_bucket_with_object_lock_is_versioned_for_good(s3):
    locked_bucket(s3, "vault")
    assert s3.get_bucket_versioning(Bucket="vault")["Status"] == "Enabled"
    got = s3.get_object_lock_configuration(Bucket="vault")["ObjectLockConfiguration"]
    assert got == {"ObjectLockEnabled": "Enabled"}
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_bucket_versioning(Bucket="vault", VersioningConfiguration={"Status": "Suspended"})
    assert code_of(e) == ("InvalidBucketState", 409)

    s3.create_bucket(Bucket="plain")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object_lock_configuration(Bucket="plain")
    assert code_of(e) == ("ObjectLockConfigurationNotFoundError", 404)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object_lock_configuration(Bucket="plain", ObjectLockConfiguration=rule(Days=1))
    assert code_of(e) == ("InvalidBucketState", 409)
    # As on AWS, a bucket whose versioning is enabled takes object lock
    # (suspended it does not), and then keeps versioning for good.
    s3.put_bucket_versioning(Bucket="plain", VersioningConfiguration={"Status": "Suspended"})
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object_lock_configuration(Bucket="plain", ObjectLockConfiguration=rule(Days=1))
    assert code_of(e) == ("InvalidBucketState", 409)
    s3.put_bucket_versioning(Bucket="plain", VersioningConfiguration={"Status": "Enabled"})
    s3.put_object_lock_configuration(Bucket="plain", ObjectLockConfiguration=rule(Days=1))
    assert s3.put_object(Bucket="plain", Key="k", Body=b"x")["VersionId"]
    assert s3.get_object_retention(Bucket="plain", Key="k")["Retention"]["Mode"] == "GOVERNANCE"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_bucket_versioning(Bucket="plain", VersioningConfiguration={"Status": "Suspended"})
    assert code_of(e) == ("InvalidBucketState", 409)


@pytest.mark.parametrize("config,code", [
    ({"ObjectLockEnabled": "Disabled"}, "MalformedXML"),
    (rule("abc", Days=1), "MalformedXML"),
    (rule(Days=1, Years=1), "MalformedXML"),
    ({"ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE"}}},
     "MalformedXML"),
    (rule(Days=0), "InvalidRetentionPeriod"),
    (rule(Years=-1), "InvalidRetentionPeriod"),
])
def test_lock_configuration_validation(s3, config, code):
    locked_bucket(s3, "vault")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object_lock_configuration(Bucket="vault", ObjectLockConfiguration=config)
    assert code_of(e) == (code, 400)


def test_default_retention_applies_to_new_versions(s3):
    locked_bucket(s3, "vault")
    s3.put_object_lock_configuration(Bucket="vault", ObjectLockConfiguration=rule(Days=2))
    got = s3.get_object_lock_configuration(Bucket="vault")["ObjectLockConfiguration"]
    assert got["Rule"]["DefaultRetention"] == {"Mode": "GOVERNANCE", "Days": 2}
    v = s3.put_object(Bucket="vault", Key="k", Body=b"one")["VersionId"]
    r = s3.get_object_retention(Bucket="vault", Key="k", VersionId=v)["Retention"]
    assert r["Mode"] == "GOVERNANCE"
    assert in_days(1.9) < r["RetainUntilDate"] < in_days(2.1)
    head = s3.head_object(Bucket="vault", Key="k")
    assert head["ObjectLockMode"] == "GOVERNANCE"
    assert head["ObjectLockRetainUntilDate"] == r["RetainUntilDate"]
    # No legal hold was ever set on it.
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object_legal_hold(Bucket="vault", Key="k")
    assert code_of(e) == ("NoSuchObjectLockConfiguration", 404)


def test_lock_headers_on_writes_and_reads(s3):
    locked_bucket(s3, "vault")
    until = in_days(1).replace(microsecond=0)
    v = s3.put_object(Bucket="vault", Key="k", Body=b"x", ObjectLockMode="COMPLIANCE",
                      ObjectLockRetainUntilDate=until, ObjectLockLegalHoldStatus="ON")["VersionId"]
    got = s3.get_object(Bucket="vault", Key="k", VersionId=v)
    assert got["ObjectLockMode"] == "COMPLIANCE"
    assert got["ObjectLockRetainUntilDate"] == until
    assert got["ObjectLockLegalHoldStatus"] == "ON"
    assert s3.get_object_legal_hold(Bucket="vault", Key="k")["LegalHold"]["Status"] == "ON"
    # A copy gets its own lock, never the source's.
    s3.copy_object(Bucket="vault", Key="copy", CopySource={"Bucket": "vault", "Key": "k"},
                   ObjectLockMode="GOVERNANCE", ObjectLockRetainUntilDate=in_days(3))
    copied = s3.head_object(Bucket="vault", Key="copy")
    assert copied["ObjectLockMode"] == "GOVERNANCE" and "ObjectLockLegalHoldStatus" not in copied
    # A multipart upload takes the headers at its creation.
    up = s3.create_multipart_upload(Bucket="vault", Key="mp", ObjectLockMode="GOVERNANCE",
                                    ObjectLockRetainUntilDate=in_days(1))
    part = s3.upload_part(Bucket="vault", Key="mp", UploadId=up["UploadId"], PartNumber=1, Body=b"p")
    s3.complete_multipart_upload(Bucket="vault", Key="mp", UploadId=up["UploadId"],
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    assert s3.get_object_retention(Bucket="vault", Key="mp")["Retention"]["Mode"] == "GOVERNANCE"

    # Mode without a date (or the reverse), a date in the past: InvalidArgument.
    for extra in [{"ObjectLockMode": "GOVERNANCE"}, {"ObjectLockRetainUntilDate": in_days(1)}]:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.put_object(Bucket="vault", Key="bad", Body=b"x", **extra)
        assert code_of(e) == ("InvalidArgument", 400)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket="vault", Key="bad", Body=b"x", ObjectLockMode="GOVERNANCE",
                      ObjectLockRetainUntilDate=in_days(-1))
    assert code_of(e) == ("InvalidArgument", 400)

    # Lock asked of a bucket without it: InvalidRequest.
    s3.create_bucket(Bucket="plain")
    s3.put_object(Bucket="plain", Key="k", Body=b"x")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket="plain", Key="k2", Body=b"x", ObjectLockMode="GOVERNANCE",
                      ObjectLockRetainUntilDate=in_days(1))
    assert code_of(e) == ("InvalidRequest", 400)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object_legal_hold(Bucket="plain", Key="k", LegalHold={"Status": "ON"})
    assert code_of(e) == ("InvalidRequest", 400)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object_retention(Bucket="plain", Key="k")
    assert code_of(e) == ("InvalidRequest", 400)


def test_governance_yields_to_the_bypass_only(s3):
    locked_bucket(s3, "vault")
    v = s3.put_object(Bucket="vault", Key="k", Body=b"x", ObjectLockMode="GOVERNANCE",
                      ObjectLockRetainUntilDate=in_days(2))["VersionId"]
    # Extending needs nothing; shortening needs the bypass.
    s3.put_object_retention(Bucket="vault", Key="k", VersionId=v,
                            Retention={"Mode": "GOVERNANCE", "RetainUntilDate": in_days(3)})
    # Changing the mode, even to COMPLIANCE, needs the bypass too (as AWS).
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object_retention(Bucket="vault", Key="k", VersionId=v,
                                Retention={"Mode": "COMPLIANCE", "RetainUntilDate": in_days(3)})
    assert code_of(e) == ("AccessDenied", 403)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object_retention(Bucket="vault", Key="k", VersionId=v,
                                Retention={"Mode": "GOVERNANCE", "RetainUntilDate": in_days(1)})
    assert code_of(e) == ("AccessDenied", 403)
    s3.put_object_retention(Bucket="vault", Key="k", VersionId=v, BypassGovernanceRetention=True,
                            Retention={"Mode": "GOVERNANCE", "RetainUntilDate": in_days(1)})
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.delete_object(Bucket="vault", Key="k", VersionId=v)
    assert code_of(e) == ("AccessDenied", 403)
    # A delete without a version ID only adds a marker.
    assert s3.delete_object(Bucket="vault", Key="k")["DeleteMarker"] is True
    s3.delete_object(Bucket="vault", Key="k", VersionId=v, BypassGovernanceRetention=True)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_object(Bucket="vault", Key="k", VersionId=v)
    assert code_of(e)[1] == 404


def test_compliance_is_never_shortened_or_removed(s3):
    locked_bucket(s3, "vault")
    v = s3.put_object(Bucket="vault", Key="k", Body=b"x", ObjectLockMode="COMPLIANCE",
                      ObjectLockRetainUntilDate=in_days(2))["VersionId"]
    for retention in [{"Mode": "COMPLIANCE", "RetainUntilDate": in_days(1)},
                      {"Mode": "GOVERNANCE", "RetainUntilDate": in_days(5)}]:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.put_object_retention(Bucket="vault", Key="k", VersionId=v, Retention=retention,
                                    BypassGovernanceRetention=True)
        assert code_of(e) == ("AccessDenied", 403)
    s3.put_object_retention(Bucket="vault", Key="k", VersionId=v,
                            Retention={"Mode": "COMPLIANCE", "RetainUntilDate": in_days(4)})
    r = s3.get_object_retention(Bucket="vault", Key="k", VersionId=v)["Retention"]
    assert r["Mode"] == "COMPLIANCE" and r["RetainUntilDate"] > in_days(3.9)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.delete_object(Bucket="vault", Key="k", VersionId=v, BypassGovernanceRetention=True)
    assert code_of(e) == ("AccessDenied", 403)
    # An overwrite is a new version; the locked one stays.
    s3.put_object(Bucket="vault", Key="k", Body=b"newer")
    assert s3.get_object(Bucket="vault", Key="k", VersionId=v)["Body"].read() == b"x"


def test_legal_hold_and_delete_objects(s3):
    locked_bucket(s3, "vault")
    held = s3.put_object(Bucket="vault", Key="held", Body=b"x")["VersionId"]
    free = s3.put_object(Bucket="vault", Key="free", Body=b"y")["VersionId"]
    s3.put_object_legal_hold(Bucket="vault", Key="held", VersionId=held, LegalHold={"Status": "ON"})
    assert s3.head_object(Bucket="vault", Key="held")["ObjectLockLegalHoldStatus"] == "ON"
    out = s3.delete_objects(Bucket="vault", Delete={"Objects": [
        {"Key": "held", "VersionId": held}, {"Key": "free", "VersionId": free}]})
    assert [(d["Key"], d["VersionId"]) for d in out["Deleted"]] == [("free", free)]
    assert [(e["Key"], e["Code"]) for e in out["Errors"]] == [("held", "AccessDenied")]
    # Even with the bypass: a legal hold is not retention.
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.delete_object(Bucket="vault", Key="held", VersionId=held, BypassGovernanceRetention=True)
    assert code_of(e) == ("AccessDenied", 403)
    # A bucket holding a version is not empty.
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.delete_bucket(Bucket="vault")
    assert code_of(e) == ("BucketNotEmpty", 409)
    s3.put_object_legal_hold(Bucket="vault", Key="held", VersionId=held, LegalHold={"Status": "OFF"})
    assert s3.get_object_legal_hold(Bucket="vault", Key="held")["LegalHold"]["Status"] == "OFF"
    s3.delete_object(Bucket="vault", Key="held", VersionId=held)
    s3.delete_bucket(Bucket="vault")


def test_lock_survives_a_restart(stow_bin, tmp_path):
    data = tmp_path / "data"
    server = S3Server(stow_bin, data)
    s3 = server.client()
    locked_bucket(s3, "vault")
    s3.put_object_lock_configuration(Bucket="vault", ObjectLockConfiguration=rule("COMPLIANCE", Years=1))
    v = s3.put_object(Bucket="vault", Key="k", Body=b"x")["VersionId"]
    assert server.stop() == 0
    server = S3Server(stow_bin, data)
    try:
        s3 = server.client()
        conf = s3.get_object_lock_configuration(Bucket="vault")["ObjectLockConfiguration"]
        assert conf["Rule"]["DefaultRetention"] == {"Mode": "COMPLIANCE", "Years": 1}
        assert s3.get_object_retention(Bucket="vault", Key="k")["Retention"]["Mode"] == "COMPLIANCE"
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.delete_object(Bucket="vault", Key="k", VersionId=v, BypassGovernanceRetention=True)
        assert code_of(e) == ("AccessDenied", 403)
    finally:
        assert server.stop() == 0


def test_workspace_bucket_view_refuses_object_lock(stow_bin, workdir):
    from test_workspace_serve import prepare
    from s3server import WorkspaceServer

    p = prepare(stow_bin, workdir, {"seed.txt": b"seed"})
    server = WorkspaceServer(stow_bin, p["workspace_id"], workdir / "reg")
    try:
        s3, bucket = server.client(), server.bucket
        # The view has no lock configuration, and refuses to keep one.
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.get_object_lock_configuration(Bucket=bucket)
        assert code_of(e) == ("ObjectLockConfigurationNotFoundError", 404)
        refusals = [
            lambda: s3.put_object_lock_configuration(Bucket=bucket,
                                                     ObjectLockConfiguration=rule(Days=1)),
            lambda: s3.put_object_retention(Bucket=bucket, Key="seed.txt", Retention={
                "Mode": "GOVERNANCE", "RetainUntilDate": in_days(1)}),
            lambda: s3.get_object_retention(Bucket=bucket, Key="seed.txt"),
            lambda: s3.put_object_legal_hold(Bucket=bucket, Key="seed.txt",
                                             LegalHold={"Status": "ON"}),
            lambda: s3.get_object_legal_hold(Bucket=bucket, Key="seed.txt"),
            lambda: s3.put_object(Bucket=bucket, Key="new.txt", Body=b"x",
                                  ObjectLockLegalHoldStatus="ON"),
            lambda: s3.create_bucket(Bucket="vault", ObjectLockEnabledForBucket=True),
        ]
        for refused in refusals:
            with pytest.raises(botocore.exceptions.ClientError) as e:
                refused()
            assert code_of(e) == ("NotImplemented", 501)
            assert "object lock" in e.value.response["Error"]["Message"]
        assert not (pathlib.Path(server.root) / "new.txt").exists()
    finally:
        assert server.stop() == 0
