"""Remotes over real transports and hostile services: HTTPS (a TLS proxy in
front of `stow-s3 serve`, trusted through SSL_CERT_FILE), a service that
keeps answering 503 SlowDown, and one that never answers (the --timeout
deadline)."""

import json
import os
import socket
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from s3server import S3Server
from test_workspace import manifest, ok, ws


def stow(stow_bin, *args, env=None):
    out = subprocess.run(
        [stow_bin, *[str(a) for a in args]], capture_output=True, text=True, timeout=120, env=env
    )
    doc = json.loads(out.stdout) if out.stdout.strip() else None
    return out.returncode, doc, out.stderr


def checkpointed(stow_bin, workdir):
    """A workspace with a few files and one checkpoint; (registry, cp)."""
    src = workdir / "src"
    (src / "d").mkdir(parents=True)
    (src / "a.txt").write_text("alpha")
    (src / "d" / "b.bin").write_bytes(os.urandom(50_000))
    m = manifest(workdir / "t.json", root="ws", registry_dir="reg",
                 inputs=[{"source": "src", "destination": "."}])
    p = ok(stow_bin, "prepare", "--manifest", m)
    reg = workdir / "reg"
    cp = ok(stow_bin, "checkpoint", "--id", p["workspace_id"], "--registry-dir", reg)["checkpoint_id"]
    return reg, cp


def keys_env(access="AKFAULTS", secret="fault-secret-key"):
    env = dict(os.environ)
    env.update(AWS_ACCESS_KEY_ID=access, AWS_SECRET_ACCESS_KEY=secret,
               AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null")
    env.pop("AWS_PROFILE", None)
    env.pop("AWS_ENDPOINT_URL", None)
    return env


class TlsProxy:
    """Terminates TLS on a local port and relays bytes to a plain backend."""

    def __init__(self, cert, key, backend):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        self.backend = backend
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.handshakes = 0
        self.stopped = False
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while not self.stopped:
            try:
                raw, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(raw,), daemon=True).start()

    def serve(self, raw):
        try:
            tls = self.ctx.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            raw.close()
            return
        self.handshakes += 1
        up = socket.create_connection(self.backend)

        def pump(a, b):
            try:
                while True:
                    data = a.recv(65536)
                    if not data:
                        break
                    b.sendall(data)
            except OSError:
                pass
            finally:
                for s in (a, b):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        threading.Thread(target=pump, args=(up, tls), daemon=True).start()
        pump(tls, up)

    def close(self):
        self.stopped = True
        self.sock.close()


def private_ca(workdir):
    """A private CA and a server certificate for 127.0.0.1 it signed
    (webpki refuses a CA certificate used as the server's own)."""
    ca_key, ca, key, csr, cert = (workdir / n for n in ("ca.key", "ca.pem", "srv.key", "srv.csr", "srv.pem"))
    ext = workdir / "srv.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    run = lambda *a: subprocess.run(["openssl", *map(str, a)], check=True, capture_output=True)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=stow test CA",
        "-keyout", ca_key, "-out", ca)
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", key, "-out", csr)
    run("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-days", "1",
        "-extfile", ext, "-out", cert)
    return ca, cert, key


def test_push_and_pull_over_https(stow_bin, workdir):
    """Real services are HTTPS: push and pull through TLS (rustls with
    ring), trusting a private CA through SSL_CERT_FILE; an untrusted
    certificate is a clear refusal, not a hang or a crash."""
    server = S3Server(stow_bin, workdir / "srv")
    try:
        server.client().create_bucket(Bucket="tls")
        host, port = server.endpoint.removeprefix("http://").split(":")
        ca, cert, key = private_ca(workdir)
        proxy = TlsProxy(cert, key, (host, int(port)))
        reg, cp = checkpointed(stow_bin, workdir)
        endpoint = f"https://127.0.0.1:{proxy.port}"
        env = keys_env(server.access_key, server.secret_key)
        for r in (reg, workdir / "reg-b"):
            rc, _, err = stow(stow_bin, "remote", "add", "secure", "s3://tls/cps",
                              "--endpoint-url", endpoint, "--registry-dir", r, env=env)
            assert rc == 0, err

        rc, out, _ = stow(stow_bin, "workspace", "push", "--checkpoint-id", cp, "--remote", "secure",
                          "--registry-dir", reg, "--timeout", "20s", env=env)
        assert rc == 1 and out["error"]["code"] in ("remote_unreachable", "remote_failed"), out
        assert "certificate" in out["error"]["message"].lower() or "tls" in out["error"]["message"].lower(), out
        assert proxy.handshakes == 0

        trusted = {**env, "SSL_CERT_FILE": str(ca)}
        rc, out, err = stow(stow_bin, "workspace", "push", "--checkpoint-id", cp, "--remote", "secure",
                            "--registry-dir", reg, env=trusted)
        assert rc == 0, err
        assert out["uploaded_blobs"] == 2 and out["manifest"] == "uploaded"
        rc, out, err = stow(stow_bin, "workspace", "pull", "--checkpoint-id", cp, "--remote", "secure",
                            "--registry-dir", workdir / "reg-b", env=trusted)
        assert rc == 0, err
        assert out["downloaded_blobs"] == 2 and out["checkpoint_id"] == cp
        assert proxy.handshakes >= 2
        proxy.close()
    finally:
        server.stop()


class Recorder(BaseHTTPRequestHandler):
    """Answers every request with the server's canned reply."""

    protocol_version = "HTTP/1.1"

    def handle_one(self):
        self.server.requests += 1
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if self.server.hang:
            time.sleep(30)
            return
        body = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
                b"<Message>Please reduce your request rate.</Message></Error>")
        self.send_response(503)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = handle_one

    def log_message(self, *args):
        pass


@pytest.fixture
def canned():
    servers = []

    def start(hang=False):
        srv = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
        srv.daemon_threads = True
        srv.requests = 0
        srv.hang = hang
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return srv

    yield start
    for s in servers:
        s.shutdown()


def test_throttling_is_retried_with_backoff_then_refused(stow_bin, workdir, canned):
    srv = canned()
    reg, cp = checkpointed(stow_bin, workdir)
    env = keys_env()
    rc, _, err = stow(stow_bin, "remote", "add", "busy", "s3://busy",
                      "--endpoint-url", f"http://127.0.0.1:{srv.server_address[1]}",
                      "--registry-dir", reg, env=env)
    assert rc == 0, err
    before = (reg / ".stow" / "remotes.json").read_bytes()
    t = time.monotonic()
    rc, out, _ = stow(stow_bin, "workspace", "push", "--checkpoint-id", cp, "--remote", "busy",
                      "--registry-dir", reg, env=env)
    took = time.monotonic() - t
    assert rc == 1 and out["error"]["code"] == "remote_throttled", out
    # Bounded retries: more than one attempt, a few seconds at most.
    assert srv.requests >= 3, srv.requests
    assert took < 20, took
    assert (reg / ".stow" / "remotes.json").read_bytes() == before


def test_a_service_that_never_answers_meets_the_deadline(stow_bin, workdir, canned):
    srv = canned(hang=True)
    reg, cp = checkpointed(stow_bin, workdir)
    env = keys_env()
    for r in (reg, workdir / "reg-b"):
        rc, _, err = stow(stow_bin, "remote", "add", "stuck", "s3://stuck",
                          "--endpoint-url", f"http://127.0.0.1:{srv.server_address[1]}",
                          "--registry-dir", r, env=env)
        assert rc == 0, err
    for verb, reg_dir in (("push", reg), ("pull", workdir / "reg-b")):
        t = time.monotonic()
        rc, out, _ = stow(stow_bin, "workspace", verb, "--checkpoint-id", cp, "--remote", "stuck",
                          "--registry-dir", reg_dir, "--timeout", "2s", env=env)
        took = time.monotonic() - t
        assert rc == 1 and out["error"]["code"] == "remote_timeout", out
        assert took < 8, (verb, took)
    # The pull that timed out published nothing.
    assert not (workdir / "reg-b" / ".stow" / "checkpoints" / cp).exists()
    rc, out, _ = stow(stow_bin, "workspace", "push", "--checkpoint-id", cp, "--remote", "stuck",
                      "--registry-dir", reg, "--timeout", "soon", env=env)
    assert rc == 1 and out["error"]["code"] == "invalid_request", out
