"""Server-managed encryption (SSE-S3) and SSE-KMS on the wire (issue 29).

`x-amz-server-side-encryption: AES256` is kept with the object and
answered on PUT, GET, HEAD, copies and multipart uploads, as S3 does
(tools such as Terraform read it back and compare). The bytes are not
encrypted by the server (SECURITY.md). SSE-KMS needs a key service that
stow-s3 does not have: it is refused with NotImplemented, and nothing is
written."""

import botocore
import pytest

AES = "AES256"


def code_of(excinfo):
    err = excinfo.value.response
    return err["Error"]["Code"], err["ResponseMetadata"]["HTTPStatusCode"]


def sse_of(resp):
    return resp.get("ServerSideEncryption")


def test_aes256_is_kept_and_answered(s3):
    s3.create_bucket(Bucket="sses3")
    put = s3.put_object(Bucket="sses3", Key="enc", Body=b"secret", ServerSideEncryption=AES)
    assert sse_of(put) == AES
    assert sse_of(s3.head_object(Bucket="sses3", Key="enc")) == AES
    got = s3.get_object(Bucket="sses3", Key="enc")
    assert sse_of(got) == AES and got["Body"].read() == b"secret"
    plain = s3.put_object(Bucket="sses3", Key="plain", Body=b"x")
    assert sse_of(plain) is None
    assert sse_of(s3.head_object(Bucket="sses3", Key="plain")) is None

    # Copies: the request's own setting (else the destination bucket's
    # default, none here), never the source's, whatever the directive.
    copied = s3.copy_object(Bucket="sses3", Key="c1", CopySource={"Bucket": "sses3", "Key": "plain"},
                            ServerSideEncryption=AES)
    assert sse_of(copied) == AES
    assert sse_of(s3.head_object(Bucket="sses3", Key="c1")) == AES
    c2 = s3.copy_object(Bucket="sses3", Key="c2", CopySource={"Bucket": "sses3", "Key": "enc"})
    assert sse_of(c2) is None
    assert sse_of(s3.head_object(Bucket="sses3", Key="c2")) is None
    s3.copy_object(Bucket="sses3", Key="c3", CopySource={"Bucket": "sses3", "Key": "enc"},
                   MetadataDirective="REPLACE", ContentType="text/plain")
    assert sse_of(s3.head_object(Bucket="sses3", Key="c3")) is None
    # Encrypting an object in place is a change S3 accepts as a copy onto itself.
    s3.copy_object(Bucket="sses3", Key="plain", CopySource={"Bucket": "sses3", "Key": "plain"},
                   ServerSideEncryption=AES)
    assert sse_of(s3.head_object(Bucket="sses3", Key="plain")) == AES
    assert s3.get_object(Bucket="sses3", Key="plain")["Body"].read() == b"x"


def test_multipart_uploads_keep_it(s3):
    s3.create_bucket(Bucket="sses3mp")
    up = s3.create_multipart_upload(Bucket="sses3mp", Key="big", ServerSideEncryption=AES)
    assert sse_of(up) == AES
    # Each part's answer names the upload's setting, as S3's does.
    part = s3.upload_part(Bucket="sses3mp", Key="big", UploadId=up["UploadId"], PartNumber=1,
                          Body=b"a" * (5 << 20))
    assert sse_of(part) == AES
    s3.put_object(Bucket="sses3mp", Key="src", Body=b"b" * 10)
    copied = s3.upload_part_copy(Bucket="sses3mp", Key="big", UploadId=up["UploadId"], PartNumber=2,
                                 CopySource={"Bucket": "sses3mp", "Key": "src"})
    assert sse_of(copied) == AES
    parts = [{"PartNumber": 1, "ETag": part["ETag"]},
             {"PartNumber": 2, "ETag": copied["CopyPartResult"]["ETag"]}]
    done = s3.complete_multipart_upload(Bucket="sses3mp", Key="big", UploadId=up["UploadId"],
                                        MultipartUpload={"Parts": parts})
    assert sse_of(done) == AES
    assert sse_of(s3.head_object(Bucket="sses3mp", Key="big")) == AES
    # A plain upload's parts name none.
    plain = s3.create_multipart_upload(Bucket="sses3mp", Key="plain")
    part = s3.upload_part(Bucket="sses3mp", Key="plain", UploadId=plain["UploadId"], PartNumber=1, Body=b"c")
    assert sse_of(plain) is None and sse_of(part) is None


def test_kms_and_unknown_methods_are_refused_and_write_nothing(s3):
    s3.create_bucket(Bucket="ssekms")
    for kwargs, code in [
        ({"ServerSideEncryption": "aws:kms"}, ("NotImplemented", 501)),
        ({"ServerSideEncryption": "aws:kms:dsse"}, ("NotImplemented", 501)),
        ({"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "alias/x"}, ("NotImplemented", 501)),
        ({"ServerSideEncryption": "AES512"}, ("InvalidArgument", 400)),
    ]:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.put_object(Bucket="ssekms", Key="k", Body=b"x", **kwargs)
        assert code_of(e) == code, kwargs
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.create_multipart_upload(Bucket="ssekms", Key="k", **kwargs)
        assert code_of(e) == code, kwargs
    assert s3.list_objects_v2(Bucket="ssekms")["KeyCount"] == 0
    assert s3.list_multipart_uploads(Bucket="ssekms").get("Uploads", []) == []
    s3.put_object(Bucket="ssekms", Key="src", Body=b"x")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.copy_object(Bucket="ssekms", Key="dst", CopySource={"Bucket": "ssekms", "Key": "src"},
                       ServerSideEncryption="aws:kms")
    assert code_of(e) == ("NotImplemented", 501)
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="ssekms")["Contents"]] == ["src"]


def test_reads_naming_server_side_encryption_are_refused(s3):
    """S3 answers 400 to a GET or HEAD carrying x-amz-server-side-encryption
    (an object's own setting decides how it is read)."""
    s3.create_bucket(Bucket="sseread")
    s3.put_object(Bucket="sseread", Key="k", Body=b"x", ServerSideEncryption=AES)

    def add_header(params, **_):
        params["headers"]["x-amz-server-side-encryption"] = AES

    s3.meta.events.register("before-call.s3.HeadObject", add_header)
    s3.meta.events.register("before-call.s3.GetObject", add_header)
    try:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.head_object(Bucket="sseread", Key="k")
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.get_object(Bucket="sseread", Key="k")
        assert code_of(e) == ("InvalidArgument", 400)
    finally:
        s3.meta.events.unregister("before-call.s3.HeadObject", add_header)
        s3.meta.events.unregister("before-call.s3.GetObject", add_header)
    assert s3.get_object(Bucket="sseread", Key="k")["Body"].read() == b"x"
