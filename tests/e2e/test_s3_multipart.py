"""Multipart uploads: transfer managers, the AWS CLI, failure cases, part copy."""

import hashlib
import os
import subprocess

import boto3.s3.transfer
import botocore
import pytest

MIB = 1024 * 1024


def code_of(excinfo):
    return excinfo.value.response["Error"]["Code"], excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"]


def test_transfer_manager_round_trip(s3, tmp_path):
    s3.create_bucket(Bucket="mpu")
    data = os.urandom(23 * MIB + 123)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    config = boto3.s3.transfer.TransferConfig(multipart_threshold=8 * MIB, multipart_chunksize=8 * MIB, max_concurrency=4)
    s3.upload_file(str(src), "mpu", "big.bin", Config=config)
    head = s3.head_object(Bucket="mpu", Key="big.bin")
    assert head["ContentLength"] == len(data)
    assert head["ETag"].endswith('-3"')
    dst = tmp_path / "dst.bin"
    s3.download_file("mpu", "big.bin", str(dst), Config=config)
    assert hashlib.sha256(dst.read_bytes()).digest() == hashlib.sha256(data).digest()
    part2 = s3.get_object(Bucket="mpu", Key="big.bin", PartNumber=2)
    assert part2["Body"].read() == data[8 * MIB:16 * MIB]
    assert part2["PartsCount"] == 3
    attrs = s3.get_object_attributes(Bucket="mpu", Key="big.bin", ObjectAttributes=["ObjectSize", "ObjectParts", "ETag"])
    assert attrs["ObjectSize"] == len(data)
    assert attrs["ObjectParts"]["TotalPartsCount"] == 3


def test_multipart_exact_etag_and_properties(s3):
    s3.create_bucket(Bucket="mpx")
    up = s3.create_multipart_upload(Bucket="mpx", Key="k", ContentType="application/json", Metadata={"foo": "bar", "owner": "dev"})
    uid = up["UploadId"]
    p1 = s3.upload_part(Bucket="mpx", Key="k", UploadId=uid, PartNumber=1, Body=b"A" * 5242880)
    p2 = s3.upload_part(Bucket="mpx", Key="k", UploadId=uid, PartNumber=2, Body=b"final-part")
    uploads = s3.list_multipart_uploads(Bucket="mpx")["Uploads"]
    assert [u["UploadId"] for u in uploads] == [uid]
    parts = s3.list_parts(Bucket="mpx", Key="k", UploadId=uid)["Parts"]
    assert [p["PartNumber"] for p in parts] == [1, 2]
    s3.complete_multipart_upload(Bucket="mpx", Key="k", UploadId=uid, MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": p1["ETag"]}, {"PartNumber": 2, "ETag": p2["ETag"]}]})
    head = s3.head_object(Bucket="mpx", Key="k")
    assert head["ContentLength"] == 5242890
    assert head["ETag"] == '"3769d23f4d727b90eb9d3be85d01ce35-2"'
    assert head["ContentType"] == "application/json"
    assert head["Metadata"] == {"foo": "bar", "owner": "dev"}
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.complete_multipart_upload(Bucket="mpx", Key="k", UploadId=uid, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": p1["ETag"]}]})
    assert code_of(e) == ("NoSuchUpload", 404)


def test_multipart_failures(s3):
    s3.create_bucket(Bucket="mpf")
    uid = s3.create_multipart_upload(Bucket="mpf", Key="k")["UploadId"]
    small = s3.upload_part(Bucket="mpf", Key="k", UploadId=uid, PartNumber=1, Body=b"abcd")["ETag"]
    last = s3.upload_part(Bucket="mpf", Key="k", UploadId=uid, PartNumber=2, Body=b"efgh")["ETag"]
    bad_lists = [
        # A part named twice or out of order is InvalidPartOrder, as AWS
        # answers (it was InvalidPart).
        ([{"PartNumber": 1, "ETag": small}, {"PartNumber": 1, "ETag": small}], "InvalidPartOrder"),
        ([{"PartNumber": 2, "ETag": last}, {"PartNumber": 1, "ETag": small}], "InvalidPartOrder"),
        ([{"PartNumber": 1, "ETag": '"00000000000000000000000000000000"'}], "InvalidPart"),
        ([{"PartNumber": 1, "ETag": small}, {"PartNumber": 2, "ETag": last}], "EntityTooSmall"),
    ]
    for parts, code in bad_lists:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.complete_multipart_upload(Bucket="mpf", Key="k", UploadId=uid, MultipartUpload={"Parts": parts})
        assert code_of(e) == (code, 400), parts
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.upload_part(Bucket="mpf", Key="k", UploadId=uid, PartNumber=10001, Body=b"x")
    assert code_of(e)[1] == 400
    listed = s3.list_parts(Bucket="mpf", Key="k", UploadId=uid, MaxParts=1)
    assert [p["PartNumber"] for p in listed["Parts"]] == [1] and listed["IsTruncated"]
    assert listed["NextPartNumberMarker"] == 1
    s3.abort_multipart_upload(Bucket="mpf", Key="k", UploadId=uid)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.abort_multipart_upload(Bucket="mpf", Key="k", UploadId=uid)
    assert code_of(e) == ("NoSuchUpload", 404)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.upload_part(Bucket="mpf", Key="k", UploadId=uid, PartNumber=1, Body=b"x")
    assert code_of(e) == ("NoSuchUpload", 404)


def test_upload_part_copy(s3):
    s3.create_bucket(Bucket="mpc")
    source = os.urandom(6 * MIB)
    s3.put_object(Bucket="mpc", Key="src", Body=source)
    uid = s3.create_multipart_upload(Bucket="mpc", Key="dst")["UploadId"]
    a = s3.upload_part_copy(Bucket="mpc", Key="dst", UploadId=uid, PartNumber=1, CopySource="mpc/src",
                            CopySourceRange=f"bytes=0-{5 * MIB - 1}")["CopyPartResult"]["ETag"]
    b = s3.upload_part_copy(Bucket="mpc", Key="dst", UploadId=uid, PartNumber=2, CopySource="mpc/src",
                            CopySourceRange=f"bytes={5 * MIB}-{6 * MIB - 1}")["CopyPartResult"]["ETag"]
    s3.complete_multipart_upload(Bucket="mpc", Key="dst", UploadId=uid, MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": a}, {"PartNumber": 2, "ETag": b}]})
    assert s3.get_object(Bucket="mpc", Key="dst")["Body"].read() == source


def test_composite_checksum_multipart(s3):
    s3.create_bucket(Bucket="mps")
    uid = s3.create_multipart_upload(Bucket="mps", Key="k", ChecksumAlgorithm="SHA256")["UploadId"]
    p1 = s3.upload_part(Bucket="mps", Key="k", UploadId=uid, PartNumber=1, Body=b"a" * (5 * MIB), ChecksumAlgorithm="SHA256")
    p2 = s3.upload_part(Bucket="mps", Key="k", UploadId=uid, PartNumber=2, Body=b"tail", ChecksumAlgorithm="SHA256")
    done = s3.complete_multipart_upload(Bucket="mps", Key="k", UploadId=uid, MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": p1["ETag"], "ChecksumSHA256": p1["ChecksumSHA256"]},
        {"PartNumber": 2, "ETag": p2["ETag"], "ChecksumSHA256": p2["ChecksumSHA256"]}]})
    import base64
    raw = base64.b64decode(p1["ChecksumSHA256"]) + base64.b64decode(p2["ChecksumSHA256"])
    expect = base64.b64encode(hashlib.sha256(raw).digest()).decode() + "-2"
    head = s3.head_object(Bucket="mps", Key="k", ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == expect
    assert done["ChecksumSHA256"] == expect


def test_aws_cli_round_trip(s3server, tmp_path):
    env = s3server.aws_env()
    aws = ["aws", "--endpoint-url", s3server.endpoint]
    subprocess.run([*aws, "s3", "mb", "s3://cli-bucket"], check=True, env=env, capture_output=True, timeout=60)
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_text("alpha")
    (tree / "sub" / "b.bin").write_bytes(os.urandom(20 * MIB))
    subprocess.run([*aws, "s3", "sync", str(tree), "s3://cli-bucket/t"], check=True, env=env, capture_output=True, timeout=120)
    out = subprocess.run([*aws, "s3", "ls", "--recursive", "s3://cli-bucket/"], check=True, env=env,
                         capture_output=True, text=True, timeout=60).stdout
    assert "t/a.txt" in out and "t/sub/b.bin" in out
    back = tmp_path / "back"
    subprocess.run([*aws, "s3", "cp", "--recursive", "s3://cli-bucket/t", str(back)], check=True, env=env, capture_output=True, timeout=120)
    assert (back / "sub" / "b.bin").read_bytes() == (tree / "sub" / "b.bin").read_bytes()
    head = subprocess.run([*aws, "s3api", "head-object", "--bucket", "cli-bucket", "--key", "t/a.txt"],
                          check=True, env=env, capture_output=True, text=True, timeout=60).stdout
    assert '"ContentLength": 5' in head
    subprocess.run([*aws, "s3", "rm", "--recursive", "s3://cli-bucket/t"], check=True, env=env, capture_output=True, timeout=60)
    subprocess.run([*aws, "s3", "rb", "s3://cli-bucket"], check=True, env=env, capture_output=True, timeout=60)


def test_completion_retried_after_a_kill_answers_the_same(stow_bin, tmp_path):
    """An SDK retries a completion whose reply it lost. Here the server is
    SIGKILLed right after the completion committed (the reply is never
    read), restarted on the same data, and the retry gets 200 with the same
    ETag; one object, no leftover parts, a consistent store."""
    import signal

    from s3server import S3Server

    data_dir = tmp_path / "data"
    keys = ("--access-key", "retrier", "--secret-key", "retrier-secret-key")
    server = S3Server(stow_bin, data_dir, *keys)
    s3 = server.client()
    s3.create_bucket(Bucket="retry")
    up = s3.create_multipart_upload(Bucket="retry", Key="k")
    body = [os.urandom(5 * MIB), b"tail"]
    parts = []
    for n, b in enumerate(body, start=1):
        r = s3.upload_part(Bucket="retry", Key="k", UploadId=up["UploadId"], PartNumber=n, Body=b)
        parts.append({"PartNumber": n, "ETag": r["ETag"]})
    done = s3.complete_multipart_upload(Bucket="retry", Key="k", UploadId=up["UploadId"],
                                        MultipartUpload={"Parts": parts})
    server.stop(sig=signal.SIGKILL)
    server = S3Server(stow_bin, data_dir, *keys)
    try:
        s3 = server.client()
        again = s3.complete_multipart_upload(Bucket="retry", Key="k", UploadId=up["UploadId"],
                                             MultipartUpload={"Parts": parts})
        assert again["ETag"] == done["ETag"] and again["Key"] == "k"
        assert s3.get_object(Bucket="retry", Key="k")["Body"].read() == b"".join(body)
        assert [o["Key"] for o in s3.list_objects_v2(Bucket="retry")["Contents"]] == ["k"]
        assert s3.list_multipart_uploads(Bucket="retry").get("Uploads", []) == []
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.complete_multipart_upload(Bucket="retry", Key="k", UploadId=up["UploadId"],
                                         MultipartUpload={"Parts": parts[:1]})
        assert code_of(e) == ("NoSuchUpload", 404)
    finally:
        assert server.stop() == 0
    check = subprocess.run([stow_bin, "check", "--data-dir", str(data_dir)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
