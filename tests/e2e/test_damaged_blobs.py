"""A blob damaged on disk (a flipped byte, a truncation) is found and named
by `stow-s3 check`, which reads every object's bytes against its ETag
(`check --quick` checks only the bookkeeping); a GET of a whole small
object checks it as it reads and answers an error. `workspace check` names
exactly the damaged checkpoints."""

import glob
import hashlib
import json
import os
import subprocess

import botocore.exceptions

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
        s3.put_object(Bucket="bkt", Key="smallfile", Body=os.urandom(100 * 1024))
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

    # A whole small object is checked as it is read: a GET of damaged bytes
    # is an error, never the wrong bytes.
    small = files[100 * 1024]
    os.chmod(small, 0o600)
    with open(small, "r+b") as f:
        f.seek(777)
        b = f.read(1)
        f.seek(777)
        f.write(bytes([b[0] ^ 1]))
    server = S3Server(stow_bin, data)
    try:
        s3 = server.client()
        try:
            s3.get_object(Bucket="bkt", Key="smallfile")["Body"].read()
            raise AssertionError("a damaged object was served")
        except botocore.exceptions.ClientError as e:
            assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 500, e.response
        assert s3.get_object(Bucket="bkt", Key="small")["Body"].read() == b"inline bytes"
    finally:
        assert server.stop() == 0


def test_workspace_check_names_exactly_the_damaged_checkpoints(stow_bin, workdir):
    from test_workspace_transfer import fail, ok, prepare_tree

    files = {"a.txt": b"alpha" * 100, "deep/er/b.txt": b"bravo" * 100, "c.txt": b"charlie" * 100}
    p = prepare_tree(stow_bin, workdir, files)
    wsid, root, reg = p["workspace_id"], workdir / "w", ["--registry-dir", workdir / "reg"]
    c1 = ok(stow_bin, "checkpoint", "--id", wsid, *reg)["checkpoint_id"]
    (root / "c.txt").write_bytes(b"only in c2" * 50)
    c2 = ok(stow_bin, "checkpoint", "--id", wsid, *reg)["checkpoint_id"]
    (root / "deep" / "er" / "new.txt").write_bytes(b"only in c3" * 50)
    c3 = ok(stow_bin, "checkpoint", "--id", wsid, *reg)["checkpoint_id"]
    good = ok(stow_bin, "check", *reg)
    assert (good["checkpoints"], good["damaged"]) == (3, []), good
    assert good["payloads"] == 5 and good["bytes_read"] > 0, good

    blobs = workdir / "reg" / ".stow" / "blobs"

    def blob(body):
        return blobs / hashlib.sha256(body).hexdigest()[:2] / hashlib.sha256(body).hexdigest()

    # A flipped byte in the payload c2 introduced (c3 keeps it): c2 and c3
    # are damaged, c1 is not.
    only_c2 = blob(b"only in c2" * 50)
    os.chmod(only_c2, 0o600)
    data = bytearray(only_c2.read_bytes())
    data[7] ^= 1
    only_c2.write_bytes(bytes(data))
    err = fail(stow_bin, "check", *reg)
    assert err["code"] == "inconsistent" and err["message"].startswith("2 of 3 checkpoints"), err
    assert c2 in err["message"] and c3 in err["message"] and c1 not in err["message"], err
    assert "c.txt" in err["message"], err
    # The quick check sees no size change.
    assert ok(stow_bin, "check", "--quick", *reg)["damaged"] == []

    # A truncated payload every checkpoint shares: all three, by path.
    shared = blob(b"alpha" * 100)
    os.chmod(shared, 0o600)
    shared.write_bytes(b"alph")
    err = fail(stow_bin, "check", "--quick", *reg)
    assert all(c in err["message"] for c in (c1, c2, c3)) and "a.txt" in err["message"], err

    # A missing tree node: the checkpoint's manifest cannot be read back.
    shared.write_bytes(b"alpha" * 100)
    only_c2.write_bytes(b"only in c2" * 50)
    assert ok(stow_bin, "check", *reg)["damaged"] == []
    doc = json.loads((workdir / "reg" / ".stow" / "checkpoints" / c3 / "manifest.json").read_text())
    (blobs / doc["tree"][:2] / doc["tree"]).unlink()
    err = fail(stow_bin, "check", *reg)
    assert c3 in err["message"] and "manifest" in err["message"], err
    assert c1 not in err["message"] and c2 not in err["message"], err
