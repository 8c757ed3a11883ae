"""Deletes on a full disk (issue 29): a server on a small ext4 filesystem,
filled through PUTs and multipart parts until 507, must still delete
objects (DeleteObject, DeleteObjects), abort uploads and delete buckets,
and then take writes again, without a restart.

Mounting a loop device needs root (CI runs as root); elsewhere the test
skips and says why."""

import contextlib
import os
import shutil
import subprocess

import botocore
import pytest

from s3server import S3Server

MIB = 1024 * 1024


@contextlib.contextmanager
def small_ext4(tmp_path, size_mib):
    """A fresh ext4 filesystem of `size_mib` MiB loop-mounted for the block."""
    if os.geteuid() != 0:
        pytest.skip("mounting a loop filesystem needs root (CI runs as root)")
    if not shutil.which("mkfs.ext4"):
        pytest.skip("mkfs.ext4 is not installed")
    img, mnt = tmp_path / "disk.img", tmp_path / "mnt"
    mnt.mkdir()
    with open(img, "wb") as f:
        f.truncate(size_mib * MIB)
    made = subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"mkfs.ext4 failed: {made.stderr.strip()}")
    done = subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot loop-mount here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def full(e):
    r = e.value.response
    return (r["ResponseMetadata"]["HTTPStatusCode"], r["Error"]["Code"]) == (507, "InsufficientStorage")


def fill(s3, bucket, prefix, size):
    """PUTs of `size` bytes until the disk refuses; returns the keys stored."""
    stored = []
    with pytest.raises(botocore.exceptions.ClientError) as e:
        for i in range(10_000):
            key = f"{prefix}{i:05d}"
            s3.put_object(Bucket=bucket, Key=key, Body=os.urandom(size))
            stored.append(key)
    assert full(e), e.value.response
    return stored


def test_deletes_work_on_a_full_disk(stow_bin, tmp_path):
    with small_ext4(tmp_path, 64) as mnt:
        data = mnt / "data"
        server = S3Server(stow_bin, data)
        try:
            s3 = server.client()
            for b in ("big", "small", "gone"):
                s3.create_bucket(Bucket=b)
            s3.put_object(Bucket="gone", Key="only", Body=b"x")
            # Uploads holding parts, then large objects, then small ones
            # (inline in the database) until nothing fits at all.
            uploads = []
            for u in range(2):
                up = s3.create_multipart_upload(Bucket="big", Key=f"mp{u}")["UploadId"]
                uploads.append((f"mp{u}", up))
                s3.upload_part(Bucket="big", Key=f"mp{u}", UploadId=up, PartNumber=1, Body=os.urandom(5 * MIB))
            big = fill(s3, "big", "o", 1 * MIB)
            with pytest.raises(botocore.exceptions.ClientError) as e:
                for n in range(2, 20):
                    s3.upload_part(Bucket="big", Key="mp0", UploadId=uploads[0][1], PartNumber=n,
                                   Body=os.urandom(5 * MIB))
            assert full(e)
            small = fill(s3, "small", "s", 16 * 1024)
            small += fill(s3, "small", "t", 512)
            assert len(big) >= 5 and small, (len(big), len(small))

            # Full: every kind of delete still commits.
            s3.delete_object(Bucket="small", Key=small[0])
            s3.delete_object(Bucket="big", Key=big[0])
            gone = s3.delete_objects(Bucket="small", Delete={"Objects": [{"Key": k} for k in small[1:40]]})
            assert not gone.get("Errors"), gone
            assert len(gone["Deleted"]) == len(small[1:40])
            for key, up in uploads:
                s3.abort_multipart_upload(Bucket="big", Key=key, UploadId=up)
            s3.delete_object(Bucket="gone", Key="only")
            s3.delete_bucket(Bucket="gone")
            for key in big[1:]:
                s3.delete_object(Bucket="big", Key=key)

            # The space came back: writes work again, same process.
            listed = [o["Key"] for o in s3.list_objects_v2(Bucket="big").get("Contents", [])]
            assert listed == []
            assert s3.list_multipart_uploads(Bucket="big").get("Uploads", []) == []
            body = os.urandom(3 * MIB)
            s3.put_object(Bucket="big", Key="after", Body=body)
            assert s3.get_object(Bucket="big", Key="after")["Body"].read() == body
            s3.put_object(Bucket="small", Key="after", Body=b"small again")
        finally:
            assert server.stop() == 0
        check = subprocess.run([stow_bin, "check", "--data-dir", str(data)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
