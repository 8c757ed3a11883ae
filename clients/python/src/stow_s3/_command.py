"""How the workspace helpers run the CLI: ``stow-s3 workspace <verb>`` (or ``stow-s3 remote <verb>``;
no shell), its JSON object decoded, a failure raised as :class:`WorkspaceCommandError`.

Shared by :mod:`stow_s3.workspace` and :mod:`stow_s3.attached` (the public names are exported there)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any, Union

from ._binary import resolve_stow_binary

WorkspaceJSON = dict[str, Any]
PathLike = Union[str, "os.PathLike[str]"]


class WorkspaceCommandError(RuntimeError):
    """A ``stow-s3 workspace`` (or ``stow-s3 remote``) command failed.

    ``command`` is the argv run, ``returncode`` its exit status, ``stderr`` its
    diagnostics; ``code``/``message`` come from the CLI's ``{"error": {...}}``
    document when it printed one (``None`` otherwise). A document with more than
    the error is kept in ``envelope``: a keyed checkpoint's envelope (``{"version",
    "result", "error"}``), or a rewind's result that left concurrently changed paths
    alone (its ``error`` is ``workspace_changed``). A result printed with a failing
    exit and no ``error`` in it is kept too, its ``code`` the one stderr ends with.
    """

    def __init__(
        self,
        command: Sequence[str],
        returncode: int,
        stderr: str,
        code: str | None = None,
        message: str | None = None,
        envelope: WorkspaceJSON | None = None,
    ) -> None:
        self.command = list(command)
        self.returncode = returncode
        self.stderr = stderr
        self.code = code
        self.message = message
        self.envelope = envelope
        detail = message or _stderr_message(stderr) or "failed"
        tag = f" ({code})" if code and f"({code})" not in detail else ""
        verb = " ".join(self.command[1:3])
        super().__init__(f"stow-s3 {verb} exited {returncode}: {detail}{tag}")


def _decode_error(stdout: str) -> tuple[str | None, str | None, WorkspaceJSON | None]:
    try:
        doc = json.loads(stdout)
    except ValueError:
        return None, None, None
    if not isinstance(doc, dict):
        return None, None, None
    err = doc.get("error")
    if not isinstance(err, dict):
        return None, None, None
    code = err.get("code") if isinstance(err.get("code"), str) else None
    message = err.get("message") if isinstance(err.get("message"), str) else None
    # More than the error: a keyed checkpoint's envelope, or a result that
    # is also a refusal (a rewind with conflicts).
    envelope = doc if set(doc) != {"error"} else None
    return code, message, envelope


def _decode_object(stdout: str) -> WorkspaceJSON | None:
    """``stdout`` as a JSON object without an ``error`` member, else ``None``."""
    try:
        doc = json.loads(stdout)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and "error" not in doc else None


def _tagged_code(message: str | None) -> str | None:
    """The machine code a CLI diagnostic ends with: ``... (workspace_changed)``."""
    if message and message.endswith(")") and "(" in message:
        return message.rsplit("(", 1)[1][:-1] or None
    return None


def _stderr_message(stderr: str) -> str | None:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    if not lines:
        return None
    last = lines[-1]
    return last[len("stow-s3: ") :] if last.startswith("stow-s3: ") else last


_WORKSPACE = ("workspace",)


def _run(
    args: Sequence[str],
    *,
    prefix: Sequence[str] = _WORKSPACE,
    allow_empty: bool = False,
    env: Mapping[str, str] | None = None,
    cwd: PathLike | None = None,
) -> WorkspaceJSON | None:
    """Run ``stow-s3 <prefix…> <args…>``: ``prefix`` is ``("workspace",)``, or ``()`` for a top-level command.

    ``cwd`` is the child's working directory (default: this process's)."""
    command = [resolve_stow_binary(), *prefix, *args]
    label = "stow-s3 " + " ".join(command[1:3])
    proc = subprocess.run(
        command,
        capture_output=True,
        env=None if env is None else dict(env),
        cwd=None if cwd is None else os.fspath(cwd),
        check=False,
    )
    stdout = proc.stdout.decode("utf-8", "replace")
    stderr = proc.stderr.decode("utf-8", "replace")
    if proc.returncode != 0:
        code, message, envelope = _decode_error(stdout)
        if message is None:
            message = _stderr_message(stderr)
        if code is None and envelope is None:
            # A result printed with exit 1 (a rewind with conflicts): keep it; stderr names the code.
            envelope = _decode_object(stdout)
            code = _tagged_code(message) if envelope is not None else None
        raise WorkspaceCommandError(command, proc.returncode, stderr, code, message, envelope)
    if allow_empty and not stdout.strip():
        return None
    try:
        doc = json.loads(stdout)
    except ValueError as err:
        raise ValueError(f"{label} printed no JSON: {stdout[:200]!r}") from err
    if not isinstance(doc, dict):
        raise ValueError(f"{label} printed a JSON {type(doc).__name__}, not an object")
    # A keyed checkpoint reports failures in its envelope; normally with exit 1, but be strict.
    if isinstance(doc.get("error"), dict) and "result" in doc:
        code, message, envelope = _decode_error(stdout)
        raise WorkspaceCommandError(command, proc.returncode, stderr, code, message or _stderr_message(stderr), envelope)
    return doc


def run_workspace_command(*args: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> WorkspaceJSON:
    """Run ``stow-s3 workspace <args>`` and return its stdout decoded as a JSON object.

    Raises :class:`WorkspaceCommandError` on a non-zero exit and ``ValueError`` when
    stdout is not a JSON object.
    """
    doc = _run([os.fspath(a) for a in args], env=env)
    assert doc is not None
    return doc


class _Args:
    def __init__(self, verb: str | Sequence[str], *, prefix: Sequence[str] = _WORKSPACE) -> None:
        self.argv: list[str] = [verb] if isinstance(verb, str) else list(verb)
        self.prefix = tuple(prefix)

    def opt(self, flag: str, value: Any) -> _Args:
        if value is not None:
            self.argv += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
        return self

    def flag(self, flag: str, on: bool) -> _Args:
        if on:
            self.argv.append(flag)
        return self

    def registry(self, registry_dir: PathLike | None, team: str | None) -> _Args:
        return self.opt("--registry-dir", registry_dir).opt("--team", team)

    def limits(self, max_bytes: int | None, max_files: int | None) -> _Args:
        return self.opt("--max-bytes", max_bytes).opt("--max-files", max_files)

    def operands(self, *values: PathLike) -> _Args:
        """Positional arguments, after ``--`` (a value starting with ``-`` is not taken for a flag)."""
        self.argv += ["--", *(os.fspath(v) for v in values)]
        return self

    def run(self, env: Mapping[str, str] | None = None, cwd: PathLike | None = None) -> WorkspaceJSON:
        doc = _run(self.argv, prefix=self.prefix, env=env, cwd=cwd)
        assert doc is not None
        return doc


def _remote(verb: str) -> _Args:
    """``stow-s3 remote <verb>`` (a top-level command, not under ``workspace``)."""
    return _Args(["remote", verb], prefix=())


def _duration(timeout: float | str | None) -> str | None:
    if timeout is None or isinstance(timeout, str):
        return timeout
    if timeout <= 0:
        raise ValueError("timeout must be positive")
    if float(timeout).is_integer():
        return f"{int(timeout)}s"
    return f"{max(1, round(timeout * 1000))}ms"

