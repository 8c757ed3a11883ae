"""A retried CompleteMultipartUpload (an SDK retry after a lost reply)
answers as the first completion did (issue 29): in a versioned bucket the
same version ID and ETag, and no second version; after a restart too."""

from s3server import S3Server

MIB5 = 5 * 1024 * 1024


def upload(s3, bucket, key):
    """An upload of two parts: its ID and the part list to complete it."""
    up = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    parts = []
    for n, body in ((1, b"a" * MIB5), (2, b"tail")):
        etag = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=n, Body=body)["ETag"]
        parts.append({"PartNumber": n, "ETag": etag})
    return up, {"Parts": parts}


def test_retried_completion_answers_the_same_version(stow_bin, tmp_path):
    server = S3Server(stow_bin, tmp_path / "data")
    try:
        s3 = server.client()
        s3.create_bucket(Bucket="vretry")
        s3.put_bucket_versioning(Bucket="vretry", VersioningConfiguration={"Status": "Enabled"})
        up, parts = upload(s3, "vretry", "big")
        first = s3.complete_multipart_upload(Bucket="vretry", Key="big", UploadId=up, MultipartUpload=parts)
        assert first["VersionId"] not in (None, "", "null")
        second = s3.complete_multipart_upload(Bucket="vretry", Key="big", UploadId=up, MultipartUpload=parts)
        assert (second["VersionId"], second["ETag"]) == (first["VersionId"], first["ETag"])
        assert second["ResponseMetadata"]["HTTPHeaders"]["x-amz-version-id"] == first["VersionId"]
        versions = s3.list_object_versions(Bucket="vretry")["Versions"]
        assert [v["VersionId"] for v in versions] == [first["VersionId"]]
        # An unversioned bucket's retry names no version, as the first did.
        s3.create_bucket(Bucket="plain")
        up2, parts2 = upload(s3, "plain", "big")
        for _ in range(2):
            done = s3.complete_multipart_upload(Bucket="plain", Key="big", UploadId=up2, MultipartUpload=parts2)
            assert "VersionId" not in done
    finally:
        assert server.stop() == 0
    server = S3Server(stow_bin, tmp_path / "data")
    try:
        s3 = server.client()
        third = s3.complete_multipart_upload(Bucket="vretry", Key="big", UploadId=up, MultipartUpload=parts)
        assert (third["VersionId"], third["ETag"]) == (first["VersionId"], first["ETag"])
    finally:
        assert server.stop() == 0
