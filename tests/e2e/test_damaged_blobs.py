"""A blob damaged on disk (a flipped byte, a truncation) is found and named
by `stow-s3 check`, which reads every object's bytes against its ETag;
`check --quick` checks only the bookkeeping."""

import glob
import json
import os
import subprocess

from s3server import S3Server

MIB = 1024 * 1024


def check(stow_bin, data_dir, *extra):
    out = subprocess.run([stow_bin, "check", "--data-dir", str(data_dir), *extra],
                         capture_output=True, text=True, timeout=120)
    return out.returncode, json.loads(out.stdout)


def test_check_names_exactly_the_damaged_objects(stow_bin, tmp_path):
    data = tmp_path / "data"
    server = S3Server(stow_bin, data)
    try:
        s3 = server.client()
        s3.create_bucket(Bucket="bkt")
        s3.put_object(Bucket="bkt", Key="small", Body=b"inline bytes")
        s3.put_object(Bucket="bkt", Key="flipped", Body=os.urandom(2 * MIB))
        s3.put_object(Bucket="bkt", Key="cut", Body=os.urandom(3 * MIB))
        s3.put_object(Bucket="bkt", Key="intact", Body=os.urandom(4 * MIB))
        up = s3.create_multipart_upload(Bucket="bkt", Key="multi")
        parts = []
        for n, body in enumerate([os.urandom(5 * MIB), os.urandom(1234)], start=1):
            r = s3.upload_part(Bucket="bkt", Key="multi", UploadId=up["UploadId"], PartNumber=n, Body=body)
            parts.append({"PartNumber": n, "ETag": r["ETag"]})
        s3.complete_multipart_upload(Bucket="bkt", Key="multi", UploadId=up["UploadId"],
                                     MultipartUpload={"Parts": parts})
    finally:
        assert server.stop() == 0
    rc, out = check(stow_bin, data)
    assert rc == 0 and out["consistent"] and out["problems"] == [], out

    # Blob files by size: 2 MiB is "flipped", 3 MiB is "cut".
    files = {os.path.getsize(p): p for p in glob.glob(str(data / "blobs" / "**" / "*"), recursive=True)
             if os.path.isfile(p)}
    flipped, cut = files[2 * MIB], files[3 * MIB]
    os.chmod(flipped, 0o600)
    with open(flipped, "r+b") as f:
        f.seek(12345)
        b = f.read(1)
        f.seek(12345)
        f.write(bytes([b[0] ^ 0x40]))
    os.chmod(cut, 0o600)
    os.truncate(cut, MIB)

    rc, out = check(stow_bin, data)
    assert rc == 1 and out["error"]["code"] == "inconsistent", out
    message = out["error"]["message"]
    assert "bkt/flipped" in message and "ETag" in message, message
    assert "bkt/cut" in message, message
    for fine in ("bkt/small", "bkt/intact", "bkt/multi"):
        assert fine not in message, (fine, message)

    # --quick reads no bytes: the truncation still shows (a size check), the
    # flipped byte does not.
    rc, out = check(stow_bin, data, "--quick")
    assert rc == 1 and "bkt/flipped" not in out["error"]["message"], out
