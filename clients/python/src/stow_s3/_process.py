"""Shared process plumbing: readiness over a pipe, stopping a server."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from typing import IO, Any

READY_LIMIT = 256 * 1024
TAIL_LIMIT = 64 * 1024


class StowProtocolError(RuntimeError):
    """A server did not report readiness as expected; ``code`` says how."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(f"{message} ({code})")


def read_tail(handle: IO[bytes] | None, limit: int = TAIL_LIMIT) -> str:
    """The last ``limit`` bytes written to a temp-file handle, decoded."""
    if handle is None:
        return ""
    try:
        handle.flush()
        size = os.fstat(handle.fileno()).st_size
        start = max(0, size - limit)
        return os.pread(handle.fileno(), size - start, start).decode("utf-8", "replace")
    except (OSError, ValueError):
        return ""


def read_ready_line(
    fd: int, proc: subprocess.Popen[bytes], timeout: float, what: str
) -> dict[str, Any]:
    """Read one JSON line from ``fd`` (which is closed afterwards); fail on exit or timeout."""
    deadline = time.monotonic() + timeout
    buf = b""
    try:
        while b"\n" not in buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise StowProtocolError("timeout", f"{what} did not report readiness within {timeout:g}s")
            readable, _, _ = select.select([fd], [], [], min(remaining, 0.2))
            if not readable:
                if proc.poll() is not None:
                    raise StowProtocolError("exited", f"{what} exited with status {proc.returncode} before it was ready")
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                try:
                    proc_rc: int | None = proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc_rc = None
                raise StowProtocolError("exited", f"{what} exited with status {proc_rc} before it was ready")
            buf += chunk
            if len(buf) > READY_LIMIT:
                raise StowProtocolError("protocol_mismatch", f"{what} readiness record is over {READY_LIMIT} bytes")
    finally:
        os.close(fd)
    line = buf.split(b"\n", 1)[0]
    try:
        record = json.loads(line)
    except ValueError as err:
        raise StowProtocolError("protocol_mismatch", f"{what} readiness is not JSON: {line[:200]!r}") from err
    if not isinstance(record, dict):
        raise StowProtocolError("protocol_mismatch", f"{what} readiness is not a JSON object")
    return record


def stop_process(proc: subprocess.Popen[bytes], grace: float = 10.0) -> int | None:
    """SIGTERM, wait ``grace`` seconds, then SIGKILL. Returns the exit status."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode
