"""Private, throwaway S3 sessions: ``stow-s3 serve`` on 127.0.0.1, port 0."""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import hmac
import http.client
import json
import os
import re
import secrets
import shutil
import string
import subprocess
import tempfile
import threading
import urllib.parse
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ._binary import resolve_stow_binary
from ._process import StowProtocolError, read_ready_line, read_tail, stop_process

READY_PROTOCOL_VERSION = 1
STRIPPED_ENV_PREFIXES = ("AWS_", "S3_", "STOW_")
DEFAULT_READY_TIMEOUT = 15.0

__all__ = [
    "READY_PROTOCOL_VERSION",
    "Session",
    "StowCapabilities",
    "StowReady",
    "StowSessionError",
    "build_child_env",
    "open_session",
    "parse_ready_message",
    "with_session",
]


class StowSessionError(RuntimeError):
    """A session failed: its server did not start (``stderr`` holds the tail of its diagnostics), it
    was used after :meth:`Session.close` (``code`` ``closed``), or a request it made was refused
    (``code``: S3's error code)."""

    def __init__(self, message: str, stderr: str = "", code: str | None = None) -> None:
        self.stderr = stderr
        self.code = code
        super().__init__(message + (f"\n--- stow-s3 stderr (tail) ---\n{stderr}" if stderr.strip() else ""))


@dataclass(frozen=True)
class StowCapabilities:
    persistent: bool
    multipart: bool
    upstream: bool
    conditional_writes: bool
    presigned_urls: bool
    max_bytes: int
    max_objects: int
    max_request_bytes: int
    max_concurrent_requests: int | None = None


@dataclass(frozen=True)
class StowReady:
    """The readiness record ``serve --ready-fd`` writes (protocol 1)."""

    protocol_version: int
    binary_version: str
    endpoint: str
    region: str
    access_key_id: str
    secret_access_key: str
    mode: str
    backend: str
    capabilities: StowCapabilities


def _field(doc: Mapping[str, Any], key: str, kind: type) -> Any:
    value = doc.get(key)
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if kind is str:
        ok = ok and bool(value)
    if not ok:
        raise StowProtocolError("protocol_mismatch", f"readiness field {key!r} is missing or not a {kind.__name__}")
    return value


def parse_ready_message(doc: Mapping[str, Any]) -> StowReady:
    """Strictly parse a readiness record; raise :class:`StowProtocolError` (``protocol_mismatch``)."""
    version = doc.get("protocolVersion")
    if version != READY_PROTOCOL_VERSION or isinstance(version, bool):
        raise StowProtocolError("protocol_mismatch", f"unsupported readiness protocolVersion {version!r}")
    caps = doc.get("capabilities")
    if not isinstance(caps, dict):
        raise StowProtocolError("protocol_mismatch", "readiness field 'capabilities' is missing")
    mcr = caps.get("maxConcurrentRequests")
    capabilities = StowCapabilities(
        persistent=_field(caps, "persistent", bool),
        multipart=_field(caps, "multipart", bool),
        upstream=_field(caps, "upstream", bool),
        conditional_writes=_field(caps, "conditionalWrites", bool),
        presigned_urls=_field(caps, "presignedUrls", bool),
        max_bytes=_field(caps, "maxBytes", int),
        max_objects=_field(caps, "maxObjects", int),
        max_request_bytes=_field(caps, "maxRequestBytes", int),
        max_concurrent_requests=_field(caps, "maxConcurrentRequests", int) if mcr is not None else None,
    )
    return StowReady(
        protocol_version=version,
        binary_version=_field(doc, "binaryVersion", str),
        endpoint=_field(doc, "endpoint", str),
        region=_field(doc, "region", str),
        access_key_id=_field(doc, "accessKeyId", str),
        secret_access_key=_field(doc, "secretAccessKey", str),
        mode=_field(doc, "mode", str),
        backend=_field(doc, "backend", str),
        capabilities=capabilities,
    )


def build_child_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default ``os.environ``) without any ``AWS_*``, ``S3_*`` or ``STOW_*`` variable."""
    source = os.environ if base is None else base
    return {k: v for k, v in source.items() if not k.upper().startswith(STRIPPED_ENV_PREFIXES)}


def _generate_keys() -> tuple[str, str]:
    alphabet = string.ascii_uppercase + string.digits
    access = "STOW" + "".join(secrets.choice(alphabet) for _ in range(16))
    return access, secrets.token_urlsafe(30)


_BOTO3_LOCK = threading.Lock()
_BOTO3: Any = None


def _private_boto3() -> Any:
    """One boto3 session per process, cut off from the caller's AWS files and
    profile: its loader (the parsed service models, ~100 ms to build) serves
    every client made here. Hold ``_BOTO3_LOCK`` while using it (sessions
    are not thread-safe; the clients they make are)."""
    global _BOTO3
    if _BOTO3 is None:
        import boto3
        import botocore.session

        # Instance settings win over the environment (AWS_PROFILE,
        # AWS_CONFIG_FILE, AWS_SHARED_CREDENTIALS_FILE): a config file holding
        # one empty default profile, and no credentials file.
        fd, config = tempfile.mkstemp(prefix="stow-s3-aws-config-")
        try:
            with os.fdopen(fd, "w") as f:
                f.write("[default]\n")
            core = botocore.session.Session()
            core.set_config_variable("config_file", config)
            core.set_config_variable("credentials_file", os.devnull)
            core.set_config_variable("profile", "default")
            core.get_scoped_config()  # read now: the file can go
        finally:
            os.unlink(config)
        _BOTO3 = boto3.session.Session(botocore_session=core)
    return _BOTO3


def _boto3_client(endpoint: str, access_key: str, secret_key: str, region: str, **kwargs: Any) -> Any:
    try:
        import boto3  # noqa: F401
        from botocore.config import Config
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("s3_client() needs boto3: pip install 'stow-s3[boto3]'") from err
    kwargs.setdefault("config", Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}))
    with _BOTO3_LOCK:
        return _private_boto3().client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            region_name=region,
            **kwargs,
        )


def _signed_request(
    endpoint: str, region: str, access_key: str, secret_key: str, method: str, path: str, timeout: float, what: str
) -> tuple[int, str]:
    """``method path`` with an empty body, signed with SigV4 (path-style); returns (status, body text)."""
    url = urllib.parse.urlsplit(endpoint)
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    payload = hashlib.sha256(b"").hexdigest()
    headers = {"host": url.netloc, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
    signed = ";".join(sorted(headers))
    canonical_headers = "".join(f"{k}:{headers[k]}\n" for k in sorted(headers))
    canonical = "\n".join([method, path, "", canonical_headers, signed, payload])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + secret_key).encode()
    for part in (day, region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={signed}, Signature={signature}"
    )
    headers["content-length"] = "0"
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=timeout)
    try:
        conn.request(method, path, body=b"", headers=headers)
        response = conn.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    except OSError as err:
        raise StowSessionError(f"{what}: {err}", code="network") from err
    finally:
        conn.close()


def _refusal(what: str, status: int, body: str) -> StowSessionError:
    """The error for a refused request: S3's code and message from its XML body."""
    found = re.search(r"<Code>([^<]*)</Code>", body)
    code = found.group(1) if found else f"http_{status}"
    message = re.search(r"<Message>([^<]*)</Message>", body)
    detail = f": {message.group(1)}" if message else ""
    return StowSessionError(f"{what} failed: {status} {code}{detail}", code=code)


def _create_bucket(endpoint: str, region: str, access_key: str, secret_key: str, bucket: str, timeout: float) -> None:
    """``PUT /<bucket>`` signed with SigV4 (path-style, empty body)."""
    path = "/" + urllib.parse.quote(bucket, safe="-_.~")
    what = f"CreateBucket {bucket!r}"
    status, body = _signed_request(endpoint, region, access_key, secret_key, "PUT", path, timeout, what)
    if status != 200:
        raise _refusal(what, status, body)


def _cleanup(proc: subprocess.Popen[bytes], logs: list[Any], data_dir: str | None, grace: float) -> None:
    try:
        stop_process(proc, grace)
    finally:
        for handle in logs:
            with contextlib.suppress(Exception):
                handle.close()
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)


class Session:
    """A private ``stow-s3 serve``. Close it with :meth:`close` (idempotent) or ``with``.

    ``endpoint``, ``access_key``/``access_key_id``, ``secret_key``/``secret_access_key``,
    ``region``, ``data_dir`` and ``ready`` (the parsed readiness record) describe it.
    """

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        ready: StowReady,
        raw_ready: dict[str, Any],
        data_dir: str,
        owns_data_dir: bool,
        logs: list[Any],
    ) -> None:
        self._proc = proc
        self._logs = logs
        self.ready = ready
        self.raw_ready = raw_ready
        self.data_dir = data_dir
        self.owns_data_dir = owns_data_dir
        self._finalizer = weakref.finalize(self, _cleanup, proc, logs, data_dir if owns_data_dir else None, 10.0)

    endpoint = property(lambda self: self.ready.endpoint)
    access_key = property(lambda self: self.ready.access_key_id)
    secret_key = property(lambda self: self.ready.secret_access_key)
    access_key_id = access_key
    secret_access_key = secret_key
    region = property(lambda self: self.ready.region)
    capabilities = property(lambda self: self.ready.capabilities)
    backend = property(lambda self: self.ready.backend)

    @property
    def pid(self) -> int:
        """The server's process ID."""
        return self._proc.pid

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    @property
    def stderr_text(self) -> str:
        return read_tail(self._logs[1]) if not self.closed else ""

    def new_bucket_name(self, prefix: str = "stow-session") -> str:
        """A fresh bucket name (nothing is created)."""
        return f"{prefix}-{secrets.token_hex(8)}"

    def create_bucket(self, name: str | None = None, *, timeout: float = 15.0) -> str:
        """Create a bucket (default name: :meth:`new_bucket_name`, ``stow-session-<16 hex>``) and return its name.

        The session itself creates none; this is the TypeScript ``openStow()``'s bucket, on
        request. A signed S3 ``CreateBucket`` with the standard library (boto3 is not needed).
        A refusal raises :class:`StowSessionError` whose ``code`` is S3's error code
        (``InvalidBucketName``, ...)."""
        if self.closed:
            raise StowSessionError("session is closed", code="closed")
        bucket = self.new_bucket_name() if name is None else name
        if not isinstance(bucket, str) or not bucket:
            raise ValueError("bucket name must be a non-empty string")
        _create_bucket(self.endpoint, self.region, self.access_key, self.secret_key, bucket, timeout)
        return bucket

    def reset(self, *, timeout: float = 30.0) -> dict[str, Any]:
        """Empty the server: every bucket, object, multipart upload and save receipt goes, at once.

        ``POST /_stow/reset``, SigV4-signed with the session's keys; the server answers it because
        :func:`open_session` starts it with ``--allow-reset`` (a server started without that flag
        refuses with ``MethodNotAllowed``). One transaction on the server, no work per object: the
        per-test isolation of the ``stow_s3_clean`` fixture. Returns what was removed:
        ``{"reset": True, "buckets", "objects", "bytes", "uploads", "receipts"}``. A refusal raises
        :class:`StowSessionError` whose ``code`` is S3's error code."""
        if self.closed:
            raise StowSessionError("session is closed", code="closed")
        status, body = _signed_request(
            self.endpoint, self.region, self.access_key, self.secret_key, "POST", "/_stow/reset", timeout, "reset"
        )
        if status != 200:
            raise _refusal("reset", status, body)
        result: dict[str, Any] = json.loads(body)
        return result

    def environ(self) -> dict[str, str]:
        """Environment variables that point an AWS SDK or CLI at this session."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    def s3_client(self, **kwargs: Any) -> Any:
        """A boto3 S3 client for this session (path-style; extra ``stow-s3[boto3]``)."""
        if self.closed:
            raise StowSessionError("session is closed", code="closed")
        return _boto3_client(self.endpoint, self.access_key, self.secret_key, self.region, **kwargs)

    def close(self) -> None:
        """Stop the server (SIGTERM, SIGKILL after 10 s) and remove a data dir the session created."""
        self._finalizer()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            with contextlib.suppress(Exception):  # never hide the caller's error
                self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"pid={self.pid}"
        return f"<stow_s3.Session {self.endpoint} {state}>"


def open_session(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    max_bytes: int | None = None,
    max_objects: int | None = None,
    region: str | None = None,
    timeout: float = DEFAULT_READY_TIMEOUT,
    backend: str = "filesystem",
    allow_reset: bool = True,
) -> Session:
    """Start a private server: ``serve --port 0 --ready-fd FD --parent-pid <this process> --allow-reset``.

    Filesystem backend in ``data_dir`` (kept) or a new temp dir ``stow-session-*``
    (removed on close); generated keys; the child's environment has no ``AWS_*``,
    ``S3_*`` or ``STOW_*`` variable. The server exits by itself if this process dies.
    ``backend="memory"`` keeps everything in the server's memory (nothing is
    fsynced: the fastest throwaway endpoint; the temp dir still holds its logs).
    ``allow_reset`` (default on) lets :meth:`Session.reset` empty the server; pass ``False``
    to start one that refuses it (a ``data_dir`` you keep is emptied by a reset too).
    """
    if backend not in ("filesystem", "memory"):
        raise ValueError(f"backend must be 'filesystem' or 'memory', not {backend!r}")
    binary = resolve_stow_binary()
    owns = data_dir is None
    directory = tempfile.mkdtemp(prefix="stow-session-") if owns else os.fspath(data_dir)  # type: ignore[arg-type]
    if not owns:
        os.makedirs(directory, exist_ok=True)
    access, secret = _generate_keys()
    read_fd, write_fd = os.pipe()
    command = [
        binary, "serve",
        "--host", "127.0.0.1", "--port", "0",
        "--backend", backend, "--data-dir", directory,
        f"--access-key={access}", f"--secret-key={secret}",
        "--ready-fd", str(write_fd), "--parent-pid", str(os.getpid()),
    ]  # fmt: skip
    if max_bytes is not None:
        command += ["--max-bytes", str(max_bytes)]
    if max_objects is not None:
        command += ["--max-objects", str(max_objects)]
    if region is not None:
        command += ["--region", region]
    if allow_reset:
        command.append("--allow-reset")
    logs: list[Any] = [
        tempfile.TemporaryFile(),
        tempfile.TemporaryFile(),
    ]
    proc: subprocess.Popen[bytes] | None = None
    try:
        try:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=logs[0],
                stderr=logs[1],
                pass_fds=(write_fd,),
                env=build_child_env(),
                cwd=directory,
            )
        finally:
            os.close(write_fd)
        try:
            raw = read_ready_line(read_fd, proc, timeout, "stow-s3 serve")
            ready = parse_ready_message(raw)
        except StowProtocolError as err:
            stop_process(proc, 5)
            raise StowSessionError(f"stow-s3 serve did not start: {err}", read_tail(logs[1]), err.code) from err
    except BaseException:
        if proc is None:
            os.close(read_fd)
        else:
            stop_process(proc, 5)
        for handle in logs:
            handle.close()
        if owns:
            shutil.rmtree(directory, ignore_errors=True)
        raise
    return Session(proc, ready, raw, directory, owns, logs)


@contextlib.contextmanager
def with_session(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    max_bytes: int | None = None,
    max_objects: int | None = None,
    region: str | None = None,
    timeout: float = DEFAULT_READY_TIMEOUT,
    backend: str = "filesystem",
    allow_reset: bool = True,
) -> Iterator[Session]:
    """``with with_session() as s:`` — a session that is always closed; the body's exception propagates."""
    session = open_session(
        data_dir,
        max_bytes=max_bytes,
        max_objects=max_objects,
        region=region,
        timeout=timeout,
        backend=backend,
        allow_reset=allow_reset,
    )
    try:
        yield session
    except BaseException:
        with contextlib.suppress(Exception):  # never hide the caller's error
            session.close()
        raise
    session.close()
