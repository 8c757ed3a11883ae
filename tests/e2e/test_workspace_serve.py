"""`stow-s3 workspace serve`: the S3 server over a workspace's bucket view
(D4), driven with boto3 and the AWS CLI against the real binary."""

import hashlib
import json
import os
import pathlib
import subprocess
import threading

import pytest
from botocore.exceptions import ClientError

from s3server import WorkspaceServer, kill_under_write_load


def prepare(stow_bin, workdir, files, **limits):
    src = workdir / "src"
    for rel, body in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(body)
    manifest = workdir / "task.json"
    manifest.write_text(json.dumps({
        "version": 1, "root": "ws", "registry_dir": "reg",
        "inputs": [{"source": "src", "destination": "."}], **limits,
    }))
    out = subprocess.run([stow_bin, "workspace", "prepare", "--manifest", str(manifest)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def code_of(err: ClientError) -> str:
    return err.response["Error"]["Code"]


def md5_etag(body: bytes) -> str:
    return '"' + hashlib.md5(body).hexdigest() + '"'


@pytest.fixture
def served(stow_bin, workdir):
    p = prepare(stow_bin, workdir, {"seed.txt": b"seed", "docs/readme.md": b"# hi"})
    server = WorkspaceServer(stow_bin, p["workspace_id"], workdir / "reg")
    yield p, server
    rc = server.stop()
    assert rc == 0, server.proc.stderr.read().decode()


def test_readiness_names_the_workspace(served):
    p, server = served
    assert server.ready["version"] == 1
    assert server.ready["workspace_id"] == p["workspace_id"]
    assert server.ready["bucket"] == p["bucket"]
    assert server.ready["root"] == p["root"]
    assert server.ready["endpoint"].startswith("http://127.0.0.1:")
    # The rest of the prepare-shaped description, and the server's limits.
    assert server.ready["working_directory"] == p["working_directory"]
    assert server.ready["capabilities"] == p["capabilities"]
    assert server.ready["authority"] == p["authority"]
    assert server.ready["base_identity"]
    assert (server.ready["max_bytes"], server.ready["max_objects"]) == (
        p["capabilities"]["max_bytes"], p["capabilities"]["max_objects"])
    assert server.ready["max_multipart_uploads"] == 1024
    assert server.ready["max_concurrent_requests"] == 16


def test_files_are_objects_and_objects_are_files(served):
    p, server = served
    s3, bucket, root = server.client(), server.bucket, pathlib.Path(server.root)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert keys == ["docs/readme.md", "seed.txt"]
    got = s3.get_object(Bucket=bucket, Key="seed.txt")
    assert got["Body"].read() == b"seed"
    assert got["ETag"] == md5_etag(b"seed")
    assert got["ContentType"] == "application/octet-stream"

    # An object PUT with a portable key appears as a file, properties kept.
    put = s3.put_object(Bucket=bucket, Key="out/report.json", Body=b'{"ok":1}',
                        ContentType="application/json", Metadata={"run": "7"})
    assert (root / "out" / "report.json").read_bytes() == b'{"ok":1}'
    head = s3.head_object(Bucket=bucket, Key="out/report.json")
    assert (head["ContentType"], head["Metadata"], head["ETag"]) == (
        "application/json", {"run": "7"}, put["ETag"])

    # A file the agent writes is an object.
    (root / "agent.txt").write_bytes(b"written by the agent")
    assert s3.get_object(Bucket=bucket, Key="agent.txt")["Body"].read() == b"written by the agent"

    # A file changed behind the store's back: default properties, fresh ETag.
    (root / "out" / "report.json").write_bytes(b'{"ok":2}')
    head = s3.head_object(Bucket=bucket, Key="out/report.json")
    assert head["ContentType"] == "application/octet-stream"
    assert head["Metadata"] == {}
    assert head["ETag"] == md5_etag(b'{"ok":2}') != put["ETag"]

    # Keys that are not portable paths live in the private store.
    s3.put_object(Bucket=bucket, Key="odd:key", Body=b"private")
    assert not (root / "odd:key").exists()
    assert s3.get_object(Bucket=bucket, Key="odd:key")["Body"].read() == b"private"

    listing = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [o["Key"] for o in listing["Contents"]] == ["agent.txt", "odd:key", "seed.txt"]
    assert [c["Prefix"] for c in listing["CommonPrefixes"]] == ["docs/", "out/"]
    page = s3.list_objects_v2(Bucket=bucket, MaxKeys=2)
    assert page["IsTruncated"] and [o["Key"] for o in page["Contents"]] == ["agent.txt", "docs/readme.md"]
    rest = s3.list_objects_v2(Bucket=bucket, ContinuationToken=page["NextContinuationToken"])
    assert [o["Key"] for o in rest["Contents"]] == ["odd:key", "out/report.json", "seed.txt"]
    etags = {o["Key"]: o["ETag"] for o in rest["Contents"]}
    assert etags["out/report.json"] == md5_etag(b'{"ok":2}')

    # Deleting the last file of a directory removes the directory too.
    s3.delete_object(Bucket=bucket, Key="out/report.json")
    assert not (root / "out").exists()
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="out/report.json")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404

    # Other buckets live in the private store; copies cross between them.
    s3.create_bucket(Bucket="scratch")
    s3.copy_object(Bucket="scratch", Key="seed-copy", CopySource={"Bucket": bucket, "Key": "seed.txt"})
    s3.copy_object(Bucket=bucket, Key="back/seed.txt", CopySource={"Bucket": "scratch", "Key": "seed-copy"})
    assert (root / "back" / "seed.txt").read_bytes() == b"seed"
    assert s3.get_object(Bucket="scratch", Key="seed-copy")["Body"].read() == b"seed"
    assert "scratch" not in os.listdir(root) and "seed-copy" not in os.listdir(root)


def test_range_conditions_and_conditional_writes_on_files(served):
    p, server = served
    s3, bucket = server.client(), server.bucket
    etag = md5_etag(b"seed")
    assert s3.get_object(Bucket=bucket, Key="seed.txt", Range="bytes=1-2")["Body"].read() == b"ee"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="seed.txt", Range="bytes=10-20")
    assert code_of(e.value) == "InvalidRange"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="seed.txt", IfNoneMatch=etag)
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 304
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="seed.txt", Body=b"x", IfNoneMatch="*")
    assert code_of(e.value) == "PreconditionFailed"
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="seed.txt", Body=b"x", IfMatch='"0000"')
    assert code_of(e.value) == "PreconditionFailed"
    assert (pathlib.Path(server.root) / "seed.txt").read_bytes() == b"seed"
    s3.put_object(Bucket=bucket, Key="seed.txt", Body=b"next", IfMatch=etag)
    assert (pathlib.Path(server.root) / "seed.txt").read_bytes() == b"next"


def test_concurrent_create_only_puts_of_a_file_have_one_winner(served):
    p, server = served
    bucket = server.bucket
    results = []

    def attempt(i):
        s3 = server.client()
        try:
            s3.put_object(Bucket=bucket, Key="race/once.txt", Body=f"writer {i}".encode(), IfNoneMatch="*")
            results.append(("ok", i))
        except ClientError as e:
            results.append((code_of(e), i))

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for code, i in results if code == "ok"]
    assert len(winners) == 1, results
    assert {code for code, _ in results if code != "ok"} <= {"PreconditionFailed", "ConditionalRequestConflict"}
    body = (pathlib.Path(server.root) / "race" / "once.txt").read_bytes()
    assert body == f"writer {winners[0]}".encode()


def test_multipart_upload_becomes_one_file_and_keeps_its_etag(served, workdir):
    p, server = served
    s3, bucket, root = server.client(), server.bucket, pathlib.Path(server.root)
    from boto3.s3.transfer import TransferConfig

    data = os.urandom(11 * 1024 * 1024)
    local = workdir / "big.bin"
    local.write_bytes(data)
    cfg = TransferConfig(multipart_threshold=5 << 20, multipart_chunksize=5 << 20)
    s3.upload_file(str(local), bucket, "data/big.bin", Config=cfg)
    assert (root / "data" / "big.bin").read_bytes() == data
    head = s3.head_object(Bucket=bucket, Key="data/big.bin")
    assert head["ETag"].endswith('-3"')
    assert s3.get_object(Bucket=bucket, Key="data/big.bin", PartNumber=3)["ContentLength"] == len(data) - (10 << 20)
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    # No staged copy of the body is left in the private store.
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="data/")["Contents"]] == ["data/big.bin"]


def test_aws_cli_sync_writes_files(served, workdir):
    p, server = served
    local = workdir / "upload"
    (local / "a" / "b").mkdir(parents=True)
    (local / "top.txt").write_text("top")
    (local / "a" / "b" / "leaf.txt").write_text("leaf")
    out = subprocess.run(["aws", "s3", "sync", str(local), f"s3://{server.bucket}/synced"],
                         env=server.aws_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    root = pathlib.Path(server.root)
    assert (root / "synced" / "top.txt").read_text() == "top"
    assert (root / "synced" / "a" / "b" / "leaf.txt").read_text() == "leaf"
    out = subprocess.run(["aws", "s3", "ls", "--recursive", f"s3://{server.bucket}/synced/"],
                         env=server.aws_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "synced/a/b/leaf.txt" in out.stdout and "synced/top.txt" in out.stdout


def test_symlinks_never_expose_files_outside_the_root(served, workdir):
    p, server = served
    s3, bucket, root = server.client(), server.bucket, pathlib.Path(server.root)
    secret = workdir / "outside.txt"
    secret.write_text("outside")
    os.symlink(secret, root / "link.txt")
    os.symlink(workdir, root / "linkdir")
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="link.txt")
    assert code_of(e.value) == "NoSuchKey"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="linkdir/outside.txt")
    assert code_of(e.value) == "NoSuchKey"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert "link.txt" not in keys and not any(k.startswith("linkdir") for k in keys)
    # A write through a link is refused: it would land where the link points.
    for key in ("linkdir/new.txt", "link.txt"):
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket=bucket, Key=key, Body=b"inside")
        assert code_of(e.value) == "InvalidArgument", key
    assert not (workdir / "new.txt").exists()
    assert secret.read_text() == "outside"


def test_workspace_is_claimed_while_served_and_released_after(stow_bin, workdir):
    p = prepare(stow_bin, workdir, {"seed.txt": b"seed"})
    server = WorkspaceServer(stow_bin, p["workspace_id"], workdir / "reg")
    try:
        s3 = server.client()
        s3.put_object(Bucket=server.bucket, Key="kept.txt", Body=b"kept", ContentType="text/plain")
        second = subprocess.run(
            [stow_bin, "workspace", "serve", "--id", p["workspace_id"], "--registry-dir", str(workdir / "reg")],
            capture_output=True, text=True, timeout=30)
        assert second.returncode != 0
        assert json.loads(second.stdout)["error"]["code"] == "in_use"
        resume = subprocess.run(
            [stow_bin, "workspace", "resume", "--id", p["workspace_id"], "--registry-dir", str(workdir / "reg")],
            capture_output=True, text=True, timeout=30)
        assert resume.returncode != 0
    finally:
        assert server.stop() == 0
    resume = subprocess.run(
        [stow_bin, "workspace", "resume", "--id", p["workspace_id"], "--registry-dir", str(workdir / "reg")],
        capture_output=True, text=True, timeout=30)
    assert resume.returncode == 0, resume.stderr
    # Properties written through S3 outlive the server.
    again = WorkspaceServer(stow_bin, p["workspace_id"], workdir / "reg")
    try:
        head = again.client().head_object(Bucket=again.bucket, Key="kept.txt")
        assert head["ContentType"] == "text/plain"
    finally:
        assert again.stop() == 0
    # A portable checkpoint then captures files and private objects together.
    cp = subprocess.run(
        [stow_bin, "workspace", "checkpoint", "--id", p["workspace_id"], "--registry-dir",
         str(workdir / "reg"), "--portable"], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert json.loads(cp.stdout)["files"] == 2
    # ... and a restore serves the file with the properties it was written with.
    restored = subprocess.run(
        [stow_bin, "workspace", "restore", "--checkpoint-id", json.loads(cp.stdout)["checkpoint_id"],
         "--root", str(workdir / "restored"), "--registry-dir", str(workdir / "reg")],
        capture_output=True, text=True, timeout=60)
    assert restored.returncode == 0, restored.stderr
    twin = WorkspaceServer(stow_bin, json.loads(restored.stdout)["workspace_id"], workdir / "reg")
    try:
        head = twin.client().head_object(Bucket=twin.bucket, Key="kept.txt")
        assert head["ContentType"] == "text/plain"
        assert head["ETag"] == md5_etag(b"kept")
    finally:
        assert twin.stop() == 0


def test_workspace_quotas_hold_for_files_and_objects(stow_bin, workdir):
    p = prepare(stow_bin, workdir, {"seed.txt": b"s" * 1000}, max_bytes=100_000, max_objects=10)
    reg = str(workdir / "reg")
    # A server may narrow the workspace's quotas, never widen them.
    wider = subprocess.run(
        [stow_bin, "workspace", "serve", "--id", p["workspace_id"], "--registry-dir", reg,
         "--max-bytes", "200000"], capture_output=True, text=True, timeout=30)
    assert wider.returncode != 0
    assert json.loads(wider.stdout)["error"]["code"] == "invalid_request"
    server = WorkspaceServer(stow_bin, p["workspace_id"], workdir / "reg", "--max-objects", "3")
    try:
        assert (server.ready["max_bytes"], server.ready["max_objects"]) == (100_000, 3)
        s3 = server.client()
        s3.put_object(Bucket=server.bucket, Key="a.bin", Body=b"a" * 60_000)
        for key in ("b.bin", "odd:key"):  # a file, and a private object
            with pytest.raises(ClientError) as e:
                s3.put_object(Bucket=server.bucket, Key=key, Body=b"b" * 50_000)
            assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 507
            assert code_of(e.value) == "InsufficientStorage"
        assert not (pathlib.Path(p["root"]) / "b.bin").exists()
        # Upload parts count as they arrive.
        up = s3.create_multipart_upload(Bucket=server.bucket, Key="big.bin")
        with pytest.raises(ClientError) as e:
            s3.upload_part(Bucket=server.bucket, Key="big.bin", UploadId=up["UploadId"],
                           PartNumber=1, Body=b"p" * 50_000)
        assert code_of(e.value) == "InsufficientStorage"
        s3.abort_multipart_upload(Bucket=server.bucket, Key="big.bin", UploadId=up["UploadId"])
        # The object count: seed, a.bin, one more.
        s3.put_object(Bucket=server.bucket, Key="c.txt", Body=b"c")
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket=server.bucket, Key="d.txt", Body=b"d")
        assert code_of(e.value) == "InsufficientStorage"
        # Deleting frees room at once.
        s3.delete_object(Bucket=server.bucket, Key="a.bin")
        s3.put_object(Bucket=server.bucket, Key="b.bin", Body=b"b" * 50_000)
        assert (pathlib.Path(p["root"]) / "b.bin").stat().st_size == 50_000
    finally:
        assert server.stop() == 0


def test_kill_9_under_write_load_leaves_no_torn_file(stow_bin, workdir):
    p = prepare(stow_bin, workdir, {"seed.txt": b"seed"})
    server = WorkspaceServer(stow_bin, p["workspace_id"], workdir / "reg")
    root = pathlib.Path(server.root)
    acked, in_flight = kill_under_write_load(
        server, server.bucket, lambda t, i: f"load/t{t}/{i % 10}.bin", writers=6, enough=40)
    for key, (body, _) in acked.items():
        on_disk = (root / key).read_bytes()
        # An acknowledged file may only have been replaced by its writer's
        # one write in flight, never torn or lost.
        assert on_disk in (body, in_flight.get(key)), f"{key} is torn or lost"
    stray = [str(q) for q in root.rglob("*") if ".stow" not in q.parts and q.name.startswith(".stow-")]
    assert stray == []
    # The next server finds every file and sweeps the staged leftovers.
    again = WorkspaceServer(stow_bin, p["workspace_id"], workdir / "reg")
    try:
        c = again.client()
        for key in list(acked)[:10]:
            got = c.get_object(Bucket=again.bucket, Key=key)
            data = got["Body"].read()
            assert got["ETag"] == md5_etag(data)
        assert list((root / ".stow" / "objects" / "tmp").iterdir()) == []
    finally:
        assert again.stop() == 0


@pytest.mark.parametrize("point", ["bucket-complete-joined", "bucket-complete-installed"])
def test_kill_9_during_a_file_keys_multipart_completion_leaves_no_object(stow_bin, workdir, point):
    """A server killed (SIGKILL at the fault point STOW_TEST_FAULT names)
    between the steps of a file key's multipart completion leaves no
    private-store object: after a restart the upload is still in flight, the
    client's retry completes it into the file, a second retry answers the
    same, and the quota has room for exactly what is stored."""
    quota = 12 << 20
    p = prepare(stow_bin, workdir, {"seed.txt": b"seed", "big.bin": b"old"},
                max_bytes=quota, max_objects=100)
    armed = WorkspaceServer(stow_bin, p["workspace_id"], workdir / "reg",
                            env={**os.environ, "STOW_TEST_FAULT": point})
    s3, bucket, root = armed.client(), armed.bucket, pathlib.Path(armed.root)
    body = [os.urandom(5 << 20), b"tail"]
    up = s3.create_multipart_upload(Bucket=bucket, Key="big.bin")["UploadId"]
    listed = {"Parts": [
        {"PartNumber": n, "ETag": s3.upload_part(Bucket=bucket, Key="big.bin", UploadId=up,
                                                 PartNumber=n, Body=part)["ETag"]}
        for n, part in enumerate(body, 1)]}
    with pytest.raises(Exception):  # the connection drops with the server
        s3.complete_multipart_upload(Bucket=bucket, Key="big.bin", UploadId=up, MultipartUpload=listed)
    assert armed.proc.wait(timeout=30) == -9
    joined = b"".join(body)
    assert (root / "big.bin").read_bytes() == (b"old" if point.endswith("joined") else joined)

    again = WorkspaceServer(stow_bin, p["workspace_id"], workdir / "reg")
    try:
        c = again.client()
        assert [u["UploadId"] for u in c.list_multipart_uploads(Bucket=bucket).get("Uploads", [])] == [up]
        done = c.complete_multipart_upload(Bucket=bucket, Key="big.bin", UploadId=up, MultipartUpload=listed)
        assert done["ETag"].endswith('-2"')
        assert (root / "big.bin").read_bytes() == joined
        retried = c.complete_multipart_upload(Bucket=bucket, Key="big.bin", UploadId=up, MultipartUpload=listed)
        assert retried["ETag"] == done["ETag"]
        assert c.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
        listing = c.list_objects_v2(Bucket=bucket)["Contents"]
        assert [(o["Key"], o["Size"]) for o in listing] == [("big.bin", len(joined)), ("seed.txt", 4)]
        # Stored: the two files. A leftover object of the upload's bytes
        # would leave no room for this one.
        room = quota - len(joined) - 4
        c.put_object(Bucket=bucket, Key="fill.bin", Body=b"f" * room)
        with pytest.raises(ClientError) as e:
            c.put_object(Bucket=bucket, Key="one-more.bin", Body=b"x")
        assert code_of(e.value) == "InsufficientStorage"
    finally:
        assert again.stop() == 0
