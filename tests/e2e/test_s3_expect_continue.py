"""`Expect: 100-continue` answered so that clients cannot desynchronise: a
request whose body is never read (announced empty, or refused early) gets
`Connection: close`; one whose body is read gets `100 Continue` first and
keeps its connection. And the AWS CLI v1 (whose botocore misreads the next
response otherwise, boto/botocore#3755) syncs trees holding empty files
without its 30-second stall."""

import socket
import subprocess
import time

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials


def signed_put(server, path, body, extra=None):
    """The raw bytes of a SigV4-signed PUT carrying `Expect: 100-continue`
    (headers only; the caller sends the body when it chooses)."""
    url = f"{server.endpoint}{path}"
    headers = {"Expect": "100-continue", "Content-Length": str(len(body)), **(extra or {})}
    req = AWSRequest(method="PUT", url=url, data=body, headers=headers)
    S3SigV4Auth(Credentials(server.access_key, server.secret_key), "s3", server.ready["region"]).add_auth(req)
    host = server.endpoint.removeprefix("http://")
    lines = [f"PUT {path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{k}: {v}" for k, v in req.headers.items() if k.lower() != "host"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_response(sock):
    """One response: (status line, {header: value}, body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed mid-response: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    status, *lines = head.decode().split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        rest += sock.recv(65536)
    return status, headers, rest[:length], rest[length:]


def connect(server):
    host, port = server.endpoint.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=5)
    return s


def test_expect_continue_response_sequences(s3server, s3):
    s3.create_bucket(Bucket="expect")

    # An announced body: 100 Continue first, then the final response; the
    # connection stays usable.
    sock = connect(s3server)
    sock.sendall(signed_put(s3server, "/expect/full.txt", b"hello"))
    status, _, _, left = read_response(sock)
    assert status == "HTTP/1.1 100 Continue" and left == b""
    sock.sendall(b"hello")
    status, headers, _, _ = read_response(sock)
    assert status.startswith("HTTP/1.1 200"), status
    assert headers.get("connection", "").lower() != "close"
    sock.sendall(signed_put(s3server, "/expect/again.txt", b"x"))
    status, _, _, _ = read_response(sock)
    assert status == "HTTP/1.1 100 Continue"
    sock.sendall(b"x")
    assert read_response(sock)[0].startswith("HTTP/1.1 200")
    sock.close()

    # An empty body is never read, so no 100 Continue: the final response
    # closes the connection.
    sock = connect(s3server)
    sock.sendall(signed_put(s3server, "/expect/empty.txt", b""))
    status, headers, _, _ = read_response(sock)
    assert status.startswith("HTTP/1.1 200"), status
    assert headers.get("connection", "").lower() == "close", headers
    assert sock.recv(1) == b"", "the server closed the connection"
    sock.close()

    # Refused before its body is read (no such bucket): closed as well.
    sock = connect(s3server)
    sock.sendall(signed_put(s3server, "/no-such-bucket/k", b"body that is never read"))
    status, headers, _, _ = read_response(sock)
    if status == "HTTP/1.1 100 Continue":
        sock.sendall(b"body that is never read")
        status, headers, _, _ = read_response(sock)
    assert status.startswith("HTTP/1.1 404"), status
    assert headers.get("connection", "").lower() == "close", headers
    sock.close()

    assert s3.get_object(Bucket="expect", Key="full.txt")["Body"].read() == b"hello"
    assert s3.get_object(Bucket="expect", Key="empty.txt")["Body"].read() == b""


def test_aws_cli_syncs_trees_with_empty_files_without_stalling(s3server, s3, workdir):
    """20 syncs, each to a fresh prefix, of a tree holding empty files: the
    AWS CLI v1 stalled for 30 s in about half of them before the fix. A run
    over 10 s is that stall (the runs take well under a second here)."""
    s3.create_bucket(Bucket="sync")
    tree = workdir / "tree"
    (tree / ".stow").mkdir(parents=True)
    (tree / ".stow" / "session.lock").write_bytes(b"")
    (tree / ".stow" / "workspace.json").write_text("{}\n")
    (tree / "a.txt").write_text("hi\n")
    (tree / "sub").mkdir()
    (tree / "sub" / "empty").write_bytes(b"")
    env = s3server.aws_env()
    took = []
    for i in range(20):
        t = time.monotonic()
        out = subprocess.run(
            ["aws", "s3", "sync", str(tree), f"s3://sync/run{i}", "--only-show-errors"],
            env=env, capture_output=True, text=True, timeout=120,
        )
        took.append(time.monotonic() - t)
        assert out.returncode == 0, out.stderr
    assert max(took) < 10, f"a sync stalled: {[round(t, 2) for t in took]}"
    listed = s3.list_objects_v2(Bucket="sync", Prefix="run19/")
    assert sorted(o["Key"] for o in listed["Contents"]) == [
        "run19/.stow/session.lock", "run19/.stow/workspace.json", "run19/a.txt", "run19/sub/empty",
    ]
