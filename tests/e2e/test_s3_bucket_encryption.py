"""Default bucket encryption (issue 29): Put/Get/DeleteBucketEncryption
keep a bucket's SSE-S3 default (`AES256`), as Terraform's
aws_s3_bucket_server_side_encryption_configuration sets it; a bucket
without one answers 404 ServerSideEncryptionConfigurationNotFoundError.
Writes that name no encryption of their own (PUT, copy, multipart, POST
forms) get the default and answer `x-amz-server-side-encryption: AES256`;
a customer key (SSE-C) stays what the write asked for. SSE-KMS defaults
are refused with 501 (no KMS here) and what AWS refuses is refused with
its code; nothing is stored by a refusal. The bytes are not encrypted by
the server (SECURITY.md)."""

import botocore
import pytest
import requests

from s3server import S3Server

AES = "AES256"
NOT_FOUND = ("ServerSideEncryptionConfigurationNotFoundError", 404)
SSE_C = {
    "SSECustomerAlgorithm": "AES256",
    "SSECustomerKey": "pO3upElrwuEXSoFwCfnZPdSsmt/xWeFa0N9KgDijwVs=",
    "SSECustomerKeyMD5": "DWygnHRtgiJ77HCm+1rvHw==",
}


def code_of(e):
    err = e.value.response
    return err["Error"]["Code"], err["ResponseMetadata"]["HTTPStatusCode"]


def refused(call, expected):
    with pytest.raises(botocore.exceptions.ClientError) as e:
        call()
    assert code_of(e) == expected, e.value.response


def config(algorithm=AES, key_id=None, bucket_key=None, rules=1):
    by_default = {"SSEAlgorithm": algorithm}
    if key_id is not None:
        by_default["KMSMasterKeyID"] = key_id
    rule = {"ApplyServerSideEncryptionByDefault": by_default}
    if bucket_key is not None:
        rule["BucketKeyEnabled"] = bucket_key
    return {"Rules": [rule] * rules}


def rules_of(s3, bucket):
    return s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]


def test_the_default_is_kept_across_restarts_and_goes_with_its_bucket(stow_bin, tmp_path):
    server = S3Server(stow_bin, tmp_path / "data")
    try:
        s3 = server.client()
        s3.create_bucket(Bucket="enc")
        refused(lambda: s3.get_bucket_encryption(Bucket="enc"), NOT_FOUND)
        put = s3.put_bucket_encryption(Bucket="enc", ServerSideEncryptionConfiguration=config(bucket_key=True))
        assert put["ResponseMetadata"]["HTTPStatusCode"] == 200
        refused(lambda: s3.put_bucket_encryption(Bucket="nobucket", ServerSideEncryptionConfiguration=config()),
                ("NoSuchBucket", 404))
        refused(lambda: s3.get_bucket_encryption(Bucket="nobucket"), ("NoSuchBucket", 404))
    finally:
        assert server.stop() == 0
    server = S3Server(stow_bin, tmp_path / "data")
    try:
        s3 = server.client()
        [rule] = rules_of(s3, "enc")
        assert rule["ApplyServerSideEncryptionByDefault"] == {"SSEAlgorithm": AES}
        assert rule["BucketKeyEnabled"] is True
        deleted = s3.delete_bucket_encryption(Bucket="enc")
        assert deleted["ResponseMetadata"]["HTTPStatusCode"] == 204
        refused(lambda: s3.get_bucket_encryption(Bucket="enc"), NOT_FOUND)
        s3.delete_bucket_encryption(Bucket="enc")
        # A bucket made again under the same name starts without one.
        s3.put_bucket_encryption(Bucket="enc", ServerSideEncryptionConfiguration=config())
        s3.delete_bucket(Bucket="enc")
        s3.create_bucket(Bucket="enc")
        refused(lambda: s3.get_bucket_encryption(Bucket="enc"), NOT_FOUND)
    finally:
        assert server.stop() == 0


def test_what_aws_refuses_is_refused_and_changes_nothing(s3):
    s3.create_bucket(Bucket="encbad")
    for bad, expected in [
        (config(algorithm="aws:kms"), ("NotImplemented", 501)),
        (config(algorithm="aws:kms", key_id="alias/x"), ("NotImplemented", 501)),
        (config(algorithm="aws:kms:dsse"), ("NotImplemented", 501)),
        (config(algorithm="AES512"), ("MalformedXML", 400)),
        (config(key_id="alias/x"), ("InvalidArgument", 400)),
        (config(rules=2), ("MalformedXML", 400)),
        ({"Rules": []}, ("MalformedXML", 400)),
        ({"Rules": [{"BucketKeyEnabled": True}]}, ("MalformedXML", 400)),
    ]:
        refused(lambda: s3.put_bucket_encryption(Bucket="encbad", ServerSideEncryptionConfiguration=bad), expected)
        refused(lambda: s3.get_bucket_encryption(Bucket="encbad"), NOT_FOUND)
        assert "ServerSideEncryption" not in s3.put_object(Bucket="encbad", Key="k", Body=b"x")
    # A refusal leaves a default already set as it was.
    s3.put_bucket_encryption(Bucket="encbad", ServerSideEncryptionConfiguration=config())
    refused(lambda: s3.put_bucket_encryption(Bucket="encbad", ServerSideEncryptionConfiguration=config("aws:kms")),
            ("NotImplemented", 501))
    assert rules_of(s3, "encbad")[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == AES


def test_writes_without_their_own_encryption_get_the_default(s3server, s3):
    s3.create_bucket(Bucket="plain")
    s3.create_bucket(Bucket="dflt")
    s3.put_object(Bucket="plain", Key="src", Body=b"source")
    s3.put_bucket_encryption(Bucket="dflt", ServerSideEncryptionConfiguration=config())

    put = s3.put_object(Bucket="dflt", Key="put", Body=b"body")
    assert put["ServerSideEncryption"] == AES
    assert s3.head_object(Bucket="dflt", Key="put")["ServerSideEncryption"] == AES
    got = s3.get_object(Bucket="dflt", Key="put")
    assert got["ServerSideEncryption"] == AES and got["Body"].read() == b"body"

    copied = s3.copy_object(Bucket="dflt", Key="copy", CopySource={"Bucket": "plain", "Key": "src"})
    assert copied["ServerSideEncryption"] == AES
    assert s3.head_object(Bucket="dflt", Key="copy")["ServerSideEncryption"] == AES
    replaced = s3.copy_object(Bucket="dflt", Key="copy2", CopySource={"Bucket": "plain", "Key": "src"},
                              MetadataDirective="REPLACE", ContentType="text/plain")
    assert replaced["ServerSideEncryption"] == AES
    # The copy's setting is never the source's: out of the bucket with the
    # default, a copy has none; under a customer key, only that.
    out = s3.copy_object(Bucket="plain", Key="out", CopySource={"Bucket": "dflt", "Key": "put"})
    assert "ServerSideEncryption" not in out
    assert "ServerSideEncryption" not in s3.head_object(Bucket="plain", Key="out")
    keyed = s3.copy_object(Bucket="dflt", Key="keyed", CopySource={"Bucket": "dflt", "Key": "put"}, **SSE_C)
    assert "ServerSideEncryption" not in keyed and keyed["SSECustomerAlgorithm"] == "AES256"
    head = s3.head_object(Bucket="dflt", Key="keyed", **SSE_C)
    assert "ServerSideEncryption" not in head and head["SSECustomerAlgorithm"] == "AES256"
    # A copy onto itself under a default set with PutBucketEncryption is
    # taken, as S3 takes it: the way to encrypt what was written before.
    s3.create_bucket(Bucket="late")
    s3.put_object(Bucket="late", Key="old", Body=b"old")
    refused(lambda: s3.copy_object(Bucket="late", Key="old", CopySource={"Bucket": "late", "Key": "old"}),
            ("InvalidRequest", 400))
    s3.put_bucket_encryption(Bucket="late", ServerSideEncryptionConfiguration=config())
    assert "ServerSideEncryption" not in s3.head_object(Bucket="late", Key="old")
    again = s3.copy_object(Bucket="late", Key="old", CopySource={"Bucket": "late", "Key": "old"})
    assert again["ServerSideEncryption"] == AES
    got = s3.get_object(Bucket="late", Key="old")
    assert got["ServerSideEncryption"] == AES and got["Body"].read() == b"old"

    up = s3.create_multipart_upload(Bucket="dflt", Key="mp")
    assert up["ServerSideEncryption"] == AES
    part = s3.upload_part(Bucket="dflt", Key="mp", UploadId=up["UploadId"], PartNumber=1, Body=b"p" * (5 << 20))
    assert part["ServerSideEncryption"] == AES
    part2 = s3.upload_part_copy(Bucket="dflt", Key="mp", UploadId=up["UploadId"], PartNumber=2,
                                CopySource={"Bucket": "plain", "Key": "src"})
    assert part2["ServerSideEncryption"] == AES
    parts = [{"PartNumber": 1, "ETag": part["ETag"]},
             {"PartNumber": 2, "ETag": part2["CopyPartResult"]["ETag"]}]
    done = s3.complete_multipart_upload(Bucket="dflt", Key="mp", UploadId=up["UploadId"],
                                        MultipartUpload={"Parts": parts})
    assert done["ServerSideEncryption"] == AES

    # A browser POST form.
    form = s3.generate_presigned_post(Bucket="dflt", Key="posted")
    resp = requests.post(form["url"], data=form["fields"], files={"file": ("f", b"posted")})
    assert resp.status_code == 204, resp.text
    assert s3.head_object(Bucket="dflt", Key="posted")["ServerSideEncryption"] == AES

    # A customer key is the write's own choice: no SSE-S3 beside it.
    sealed = s3.put_object(Bucket="dflt", Key="sealed", Body=b"s", **SSE_C)
    assert "ServerSideEncryption" not in sealed
    assert s3.get_object(Bucket="dflt", Key="sealed", **SSE_C)["Body"].read() == b"s"

    # Objects written before the default keep what they had; after a
    # delete, new writes have none.
    assert "ServerSideEncryption" not in s3.head_object(Bucket="plain", Key="src")
    s3.delete_bucket_encryption(Bucket="dflt")
    assert "ServerSideEncryption" not in s3.put_object(Bucket="dflt", Key="after", Body=b"a")
    assert s3.head_object(Bucket="dflt", Key="put")["ServerSideEncryption"] == AES


def test_memory_backend_keeps_the_default(stow_bin, tmp_path):
    server = S3Server(stow_bin, tmp_path / "data", backend="memory")
    try:
        s3 = server.client()
        s3.create_bucket(Bucket="mem")
        s3.put_bucket_encryption(Bucket="mem", ServerSideEncryptionConfiguration=config())
        assert s3.put_object(Bucket="mem", Key="k", Body=b"x")["ServerSideEncryption"] == AES
        assert rules_of(s3, "mem")[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == AES
    finally:
        assert server.stop() == 0


def test_workspace_bucket_view_keeps_the_default(stow_bin, workdir):
    from test_workspace_serve import prepare
    from s3server import WorkspaceServer

    p = prepare(stow_bin, workdir, {"seed.txt": b"seed"})
    server = WorkspaceServer(stow_bin, p["workspace_id"], workdir / "reg")
    try:
        s3, bucket = server.client(), server.bucket
        refused(lambda: s3.get_bucket_encryption(Bucket=bucket), NOT_FOUND)
        s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration=config())
        assert rules_of(s3, bucket)[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == AES
        assert s3.put_object(Bucket=bucket, Key="new.txt", Body=b"n")["ServerSideEncryption"] == AES
        assert (workdir / "ws" / "new.txt").read_bytes() == b"n"
        assert s3.head_object(Bucket=bucket, Key="new.txt")["ServerSideEncryption"] == AES
        copied = s3.copy_object(Bucket=bucket, Key="copied.txt", CopySource={"Bucket": bucket, "Key": "seed.txt"})
        assert copied["ServerSideEncryption"] == AES
        assert (workdir / "ws" / "copied.txt").read_bytes() == b"seed"
        assert "ServerSideEncryption" not in s3.head_object(Bucket=bucket, Key="seed.txt")
        s3.delete_bucket_encryption(Bucket=bucket)
        refused(lambda: s3.get_bucket_encryption(Bucket=bucket), NOT_FOUND)
    finally:
        assert server.stop() == 0
