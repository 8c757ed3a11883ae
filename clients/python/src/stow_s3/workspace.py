"""Workspace helpers: each runs ``stow-s3 workspace <verb>`` (or ``stow-s3 remote <verb>``; no shell)
and returns its JSON object. The attached-workspace helpers (attach, detach, log, status, rewind)
live in :mod:`stow_s3.attached` and are exported here too."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Mapping
from typing import Any

from ._binary import resolve_stow_binary
from ._command import (
    PathLike,
    WorkspaceCommandError,
    WorkspaceJSON,
    _Args,
    _decode_error,
    _duration,
    _remote,
    _run,
    _stderr_message,
    _tagged_code,
    run_workspace_command,
)
from ._process import StowProtocolError, read_ready_line, read_tail, stop_process
from .attached import attach_workspace, detach_workspace, rewind_workspace, workspace_log, workspace_status

__all__ = [
    "WorkspaceJSON",
    "WorkspaceCommandError",
    "ServedWorkspace",
    "run_workspace_command",
    "prepare_workspace",
    "list_workspaces",
    "resume_workspace",
    "handoff_workspace",
    "adopt_workspace_handoff",
    "checkpoint_workspace",
    "resolve_checkpoint",
    "attach_workspace",
    "detach_workspace",
    "workspace_log",
    "workspace_status",
    "rewind_workspace",
    "diff_workspaces",
    "restore_workspace_checkpoint",
    "export_workspace_checkpoint",
    "preview_workspace_archive",
    "import_workspace_checkpoint",
    "create_workspace_delta",
    "apply_workspace_delta",
    "delete_workspace_checkpoint",
    "destroy_workspace",
    "collect_workspaces",
    "prune_workspaces",
    "gc_workspaces",
    "workspace_policy_show",
    "workspace_policy_set",
    "add_remote",
    "list_remotes",
    "remove_remote",
    "push_workspace_checkpoint",
    "pull_workspace_checkpoint",
    "list_remote_checkpoints",
    "adopt_workspace_remote",
    "serve_workspace",
]


def prepare_workspace(manifest: PathLike | Mapping[str, Any], *, env: Mapping[str, str] | None = None) -> WorkspaceJSON:
    """``prepare --manifest``. ``manifest`` is a path, or a mapping written to a temp file.

    With a mapping, a relative ``root`` resolves against the current directory (as
    with a manifest file there), not the temp file's directory.
    """
    if isinstance(manifest, Mapping):
        doc = dict(manifest)
        for key in ("root", "working_directory", "registry_dir"):
            if isinstance(doc.get(key), str) and doc[key] and not os.path.isabs(doc[key]):
                doc[key] = os.path.abspath(doc[key])
        for inp in doc.get("inputs") or []:
            if isinstance(inp, dict) and isinstance(inp.get("source"), str) and not os.path.isabs(inp["source"]):
                inp["source"] = os.path.abspath(inp["source"])
        fd, path = tempfile.mkstemp(prefix="stow-manifest-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(doc, f)
            return _Args("prepare").opt("--manifest", path).run(env)
        finally:
            os.unlink(path)
    return _Args("prepare").opt("--manifest", manifest).run(env)


def list_workspaces(
    *, registry_dir: PathLike | None = None, team: str | None = None, env: Mapping[str, str] | None = None
) -> WorkspaceJSON:
    """``list``: the records of a registry partition."""
    return _Args("list").registry(registry_dir, team).run(env)


def resume_workspace(
    id: str | None = None,
    *,
    handoff: PathLike | None = None,
    registry_dir: PathLike | None = None,
    team: str | None = None,
    env: Mapping[str, str] | None = None,
) -> WorkspaceJSON:
    """``resume --id`` or ``resume --handoff`` (the CLI refuses both at once)."""
    return _Args("resume").opt("--id", id).opt("--handoff", handoff).registry(registry_dir, team).run(env)


def handoff_workspace(
    id: str,
    checkpoint_id: str | None = None,
    archive: PathLike | None = None,
    output: PathLike | None = None,
    *,
    remote: str | None = None,
    timeout: float | str | None = None,
    registry_dir: PathLike | None = None,
    team: str | None = None,
    env: Mapping[str, str] | None = None,
) -> WorkspaceJSON:
    """``handoff``; with ``output=`` the CLI prints nothing and the written document is read back.

    ``remote=`` (with ``checkpoint_id``, not with ``archive``) pushes the checkpoint to that
    remote and names it in the (version-2) document; ``timeout=`` bounds the push."""
    args = _Args("handoff").opt("--id", id).opt("--checkpoint-id", checkpoint_id)
    args.opt("--archive", archive).opt("--remote", remote).opt("--timeout", _duration(timeout))
    args.opt("--output", output).registry(registry_dir, team)
    if output is None:
        return args.run(env)
    _run(args.argv, allow_empty=True, env=env)
    with open(output, encoding="utf-8") as f:
        doc = json.load(f)
    if not isinstance(doc, dict):
        raise ValueError(f"handoff document {os.fspath(output)} is not a JSON object")
    return doc


def adopt_workspace_handoff(
    handoff: PathLike,
    root: PathLike,
    *,
    timeout: float | str | None = None,
    max_bytes: int | None = None,
    max_files: int | None = None,
    include_sensitive: bool = False,
    registry_dir: PathLike | None = None,
    team: str | None = None,
    env: Mapping[str, str] | None = None,
) -> WorkspaceJSON:
    """``adopt --handoff --root``: a new, adopted workspace from a portable handoff (an archive,
    or a remote it names: ``timeout=`` bounds that traffic, ``env=`` carries its credentials)."""
    args = _Args("adopt").opt("--handoff", handoff).opt("--root", root).opt("--timeout", _duration(timeout))
    args.limits(max_bytes, max_files).flag("--include-sensitive", include_sensitive)
    return args.registry(registry_dir, team).run(env)


def _checkpoint_args(
    id: str | None,
    message: str | None,
    parent: str | None,
    portable: bool,
    request_key: str | None,
    timeout: float | str | None,
    max_bytes: int | None,
    max_files: int | None,
    include_sensitive: bool,
    no_ignore: bool,
    registry_dir: PathLike | None,
    team: str | None,
) -> _Args:
    args = _Args("checkpoint").opt("--id", id).opt("--message", message).opt("--parent", parent).limits(max_bytes, max_files)
    args.flag("--include-sensitive", include_sensitive).flag("--portable", portable).flag("--no-ignore", no_ignore)
    return args.opt("--request-key", request_key).opt("--timeout", _duration(timeout)).registry(registry_dir, team)


def checkpoint_workspace(
    id: str | None = None,
    parent: str | None = None,
    portable: bool = False,
    request_key: str | None = None,
    timeout: float | str | None = None,
    *,
    max_bytes: int | None = None,
    max_files: int | None = None,
    include_sensitive: bool = False,
    no_ignore: bool = False,
    message: str | None = None,
    registry_dir: PathLike | None = None,
    team: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: PathLike | None = None,
) -> WorkspaceJSON:
    """``checkpoint``. With ``request_key=`` (and ``timeout=``, seconds or ``"30s"``) a keyed
    capture: the result is the envelope ``{"version", "result": {...}}``; an envelope with
    an error raises :class:`WorkspaceCommandError` with ``code`` and ``envelope`` set.

    ``message=`` is stored with the checkpoint (at most 4096 bytes of UTF-8; the CLI refuses
    a longer one with ``invalid_request``). Without ``id`` the CLI captures the workspace
    holding ``cwd`` (default: the current directory), and its registry and team come from
    that workspace's identity; outside any workspace that is a ``usage`` error (exit 2)."""
    return _checkpoint_args(
        id, message, parent, portable, request_key, timeout, max_bytes, max_files, include_sensitive, no_ignore,
        registry_dir, team,
    ).run(env, cwd)


def resolve_checkpoint(
    id: str,
    request_key: str,
    timeout: float | str,
    parent: str | None = None,
    portable: bool = False,
    *,
    max_bytes: int | None = None,
    max_files: int | None = None,
    include_sensitive: bool = False,
    no_ignore: bool = False,
    message: str | None = None,
    registry_dir: PathLike | None = None,
    team: str | None = None,
    env: Mapping[str, str] | None = None,
) -> WorkspaceJSON:
    """``checkpoint --resolve``: what happened to a keyed capture (pass the same options).

    Never captures. An unknown key raises :class:`WorkspaceCommandError` with code ``not_found``."""
    args = _checkpoint_args(
        id, message, parent, portable, request_key, timeout, max_bytes, max_files, include_sensitive, no_ignore,
        registry_dir, team,
    )
    return args.flag("--resolve", True).run(env)



def diff_workspaces(
    from_id: str,
    to_id: str,
    *,
    registry_dir: PathLike | None = None,
    team: str | None = None,
    env: Mapping[str, str] | None = None,
) -> WorkspaceJSON:
    """``diff --from --to``."""
    return _Args("diff").opt("--from", from_id).opt("--to", to_id).registry(registry_dir, team).run(env)


def restore_workspace_checkpoint(
    checkpoint_id: str,
    root: PathLike,
    *,
    max_bytes: int | None = None,
    max_files: int | None = None,
    registry_dir: PathLike | None = None,
    team: str | None = None,
    env: Mapping[str, str] | None = None,
) -> WorkspaceJSON:
    """``restore --checkpoint-id --root``: a new workspace from a checkpoint."""
    args = _Args("restore").opt("--checkpoint-id", checkpoint_id).opt("--root", root)
    return args.limits(max_bytes, max_files).registry(registry_dir, team).run(env)


def export_workspace_checkpoint(
    checkpoint_id: str,
    output: PathLike,
    *,
    max_bytes: int | None = None,
    max_files: int | None = None,
    include_sensitive: bool = False,
    registry_dir: PathLike | None = None,
    team: str | None = None,
    env: Mapping[str, str] | None = None,
) -> WorkspaceJSON:
    """``export --checkpoint-id --output``: a new gzip tar archive."""
    args = _Args("export").opt("--checkpoint-id", checkpoint_id).opt("--output", output).limits(max_bytes, max_files)
    return args.flag("--include-sensitive", include_sensitive).registry(registry_dir, team).run(env)


def preview_workspace_archive(
    archive: PathLike,
    *,
    max_bytes: int | None = None,
    max_files: int | None = None,
    env: Mapping[str, str] | None = None,
) -> WorkspaceJSON:
    """``preview --archive``: validate an archive, extracting nothing."""
    return _Args("preview").opt("--archive", archive).limits(max_bytes, max_files).run(env)


def import_workspace_checkpoint(
    archive: PathLike,
    *,
    max_bytes: int | None = None,
    max_files: int | None = None,
    include_sensitive: bool = False,
    registry_dir: PathLike | None = None,
    team: str | None = None,
    env: Mapping[str, str] | None = None,
) -> WorkspaceJSON:
    """``import --archive``."""
    args = _Args("import").opt("--archive", archive).limits(max_bytes, max_files)
    return args.flag("--include-sensitive", include_sensitive).registry(registry_dir, team).run(env)


def create_workspace_delta(
    from_id: str,
    to_id: str,
    output: PathLike,
    *,
    max_bytes: int | None = None,
    max_files: int | None = None,
    include_sensitive: bool = False,
    registry_dir: PathLike | None = None,
    team: str | None = None,
    env: Mapping[str, str] | None = None,
) -> WorkspaceJSON:
    """``delta --from --to --output``."""
    args = _Args("delta").opt("--from", from_id).opt("--to", to_id).opt("--output", output)
    args.limits(max_bytes, max_files).flag("--include-sensitive", include_sensitive)
    return args.registry(registry_dir, team).run(env)


def apply_workspace_delta(
    delta: PathLike,
    base: str,
    expect_sha256: str | None = None,
    *,
    include_sensitive: bool = False,
    registry_dir: PathLike | None = None,
    team: str | None = None,
    env: Mapping[str, str] | None = None,
) -> WorkspaceJSON:
    """``apply --delta --base [--expect-sha256]``: a new checkpoint whose parent is ``base``."""
    args = _Args("apply").opt("--delta", delta).opt("--base", base).opt("--expect-sha256", expect_sha256)
    return args.flag("--include-sensitive", include_sensitive).registry(registry_dir, team).run(env)


def delete_workspace_checkpoint(
    checkpoint_id: str, *, registry_dir: PathLike | None = None, team: str | None = None, env: Mapping[str, str] | None = None
) -> WorkspaceJSON:
    """``checkpoint-delete --checkpoint-id``."""
    return _Args("checkpoint-delete").opt("--checkpoint-id", checkpoint_id).registry(registry_dir, team).run(env)


def destroy_workspace(
    id: str, *, registry_dir: PathLike | None = None, team: str | None = None, env: Mapping[str, str] | None = None
) -> WorkspaceJSON:
    """``destroy --id``: an owned, idle workspace with its checkpoints."""
    return _Args("destroy").opt("--id", id).registry(registry_dir, team).run(env)


def collect_workspaces(
    *, registry_dir: PathLike | None = None, team: str | None = None, env: Mapping[str, str] | None = None
) -> WorkspaceJSON:
    """``collect``: destroy expired (TTL) workspaces of a partition."""
    return _Args("collect").registry(registry_dir, team).run(env)


def prune_workspaces(
    include_adopted: bool = False,
    *,
    registry_dir: PathLike | None = None,
    team: str | None = None,
    env: Mapping[str, str] | None = None,
) -> WorkspaceJSON:
    """``prune [--include-adopted]``: forget records whose directory is gone."""
    return _Args("prune").flag("--include-adopted", include_adopted).registry(registry_dir, team).run(env)


def gc_workspaces(
    *, registry_dir: PathLike | None = None, team: str | None = None, env: Mapping[str, str] | None = None
) -> WorkspaceJSON:
    """``gc``: remove blobs no published checkpoint names."""
    return _Args("gc").registry(registry_dir, team).run(env)


def workspace_policy_show(
    *, registry_dir: PathLike | None = None, team: str | None = None, env: Mapping[str, str] | None = None
) -> WorkspaceJSON:
    """``policy show``: the standing registry policy and usage."""
    return _Args(["policy", "show"]).registry(registry_dir, team).run(env)


def workspace_policy_set(
    *,
    max_workspaces: int | None = None,
    max_checkpoints: int | None = None,
    max_checkpoint_bytes: int | None = None,
    registry_dir: PathLike | None = None,
    team: str | None = None,
    env: Mapping[str, str] | None = None,
) -> WorkspaceJSON:
    """``policy set`` (0 = unlimited; only the bounds given are sent)."""
    args = _Args(["policy", "set"]).opt("--max-workspaces", max_workspaces).opt("--max-checkpoints", max_checkpoints)
    return args.opt("--max-checkpoint-bytes", max_checkpoint_bytes).registry(registry_dir, team).run(env)


# ---- remotes -----------------------------------------------------------------
# A remote names an S3 location (s3://BUCKET[/PREFIX]) of a registry partition. The CLI stores
# no credentials: a command that reaches the remote takes them from the standard AWS chain of
# its environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ...) -- pass ``env=``.


def add_remote(
    name: str,
    url: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    profile: str | None = None,
    registry_dir: PathLike | None = None,
    team: str | None = None,
    env: Mapping[str, str] | None = None,
) -> WorkspaceJSON:
    """``remote add NAME URL``: name an S3 location (``url`` is ``s3://BUCKET[/PREFIX]``)."""
    args = _remote("add").opt("--endpoint-url", endpoint_url).opt("--region", region).opt("--profile", profile)
    return args.registry(registry_dir, team).operands(name, url).run(env)


def list_remotes(
    *, registry_dir: PathLike | None = None, team: str | None = None, env: Mapping[str, str] | None = None
) -> WorkspaceJSON:
    """``remote list``: the partition's remotes."""
    return _remote("list").registry(registry_dir, team).run(env)


def remove_remote(
    name: str, *, registry_dir: PathLike | None = None, team: str | None = None, env: Mapping[str, str] | None = None
) -> WorkspaceJSON:
    """``remote remove NAME``: forget a remote (nothing on the remote is touched)."""
    return _remote("remove").registry(registry_dir, team).operands(name).run(env)


def push_workspace_checkpoint(
    checkpoint_id: str,
    remote: str,
    timeout: float | str | None = None,
    *,
    include_sensitive: bool = False,
    registry_dir: PathLike | None = None,
    team: str | None = None,
    env: Mapping[str, str] | None = None,
) -> WorkspaceJSON:
    """``push --checkpoint-id --remote``: upload the blobs the remote lacks, then the manifest."""
    args = _Args("push").opt("--checkpoint-id", checkpoint_id).opt("--remote", remote).opt("--timeout", _duration(timeout))
    return args.flag("--include-sensitive", include_sensitive).registry(registry_dir, team).run(env)


def pull_workspace_checkpoint(
    checkpoint_id: str,
    remote: str,
    timeout: float | str | None = None,
    *,
    max_bytes: int | None = None,
    max_files: int | None = None,
    include_sensitive: bool = False,
    registry_dir: PathLike | None = None,
    team: str | None = None,
    env: Mapping[str, str] | None = None,
) -> WorkspaceJSON:
    """``pull --checkpoint-id --remote``: download a remote checkpoint, verified before it is published."""
    args = _Args("pull").opt("--checkpoint-id", checkpoint_id).opt("--remote", remote).opt("--timeout", _duration(timeout))
    args.limits(max_bytes, max_files).flag("--include-sensitive", include_sensitive)
    return args.registry(registry_dir, team).run(env)


def list_remote_checkpoints(
    remote: str,
    timeout: float | str | None = None,
    *,
    registry_dir: PathLike | None = None,
    team: str | None = None,
    env: Mapping[str, str] | None = None,
) -> WorkspaceJSON:
    """``remote-list --remote`` (as ``remote checkpoints NAME``): the checkpoints a remote holds."""
    args = _Args("remote-list").opt("--remote", remote).opt("--timeout", _duration(timeout))
    return args.registry(registry_dir, team).run(env)


def adopt_workspace_remote(
    checkpoint_id: str,
    remote: str,
    root: PathLike,
    timeout: float | str | None = None,
    *,
    max_bytes: int | None = None,
    max_files: int | None = None,
    include_sensitive: bool = False,
    registry_dir: PathLike | None = None,
    team: str | None = None,
    env: Mapping[str, str] | None = None,
) -> WorkspaceJSON:
    """``adopt --remote --checkpoint-id --root``: pull a remote checkpoint and restore it as a new, adopted workspace."""
    args = _Args("adopt").opt("--remote", remote).opt("--checkpoint-id", checkpoint_id).opt("--root", root)
    args.opt("--timeout", _duration(timeout)).limits(max_bytes, max_files).flag("--include-sensitive", include_sensitive)
    return args.registry(registry_dir, team).run(env)


_SERVE_REQUIRED = ("workspace_id", "root", "bucket", "endpoint", "region", "access_key_id", "secret_access_key")


class ServedWorkspace:
    """A running ``stow-s3 workspace serve``; ``ready`` is its readiness record.

    Use as a context manager, or call :meth:`close` (idempotent). Closing stops the
    server (SIGTERM, then SIGKILL after ``grace`` seconds); the workspace's data is kept.
    """

    def __init__(self, proc: subprocess.Popen[bytes], ready: WorkspaceJSON, logs: Any) -> None:
        self._proc = proc
        self._logs = logs
        self.ready: WorkspaceJSON = ready
        self.closed = False

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def endpoint(self) -> str:
        return str(self.ready["endpoint"])

    @property
    def bucket(self) -> str:
        return str(self.ready["bucket"])

    def s3_client(self, **kwargs: Any) -> Any:
        """A boto3 S3 client for the workspace bucket (needs the ``boto3`` extra)."""
        from .session import _boto3_client

        return _boto3_client(
            self.endpoint, self.ready["access_key_id"], self.ready["secret_access_key"], self.ready["region"], **kwargs
        )

    def close(self, grace: float = 11.0) -> int | None:
        if self.closed:
            return self._proc.returncode
        self.closed = True
        try:
            return stop_process(self._proc, grace)
        finally:
            for handle in self._logs:
                handle.close()

    def __enter__(self) -> ServedWorkspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # best effort; the server also watches --parent-pid
        try:
            if not self.closed and self._proc.poll() is None:
                self._proc.kill()
        except Exception:
            pass


def serve_workspace(
    id: str,
    *,
    registry_dir: PathLike | None = None,
    team: str | None = None,
    max_bytes: int | None = None,
    max_objects: int | None = None,
    timeout: float = 15.0,
    env: Mapping[str, str] | None = None,
) -> ServedWorkspace:
    """Start ``workspace serve --id`` (readiness over a pipe, ``--parent-pid`` this process)."""
    read_fd, write_fd = os.pipe()
    args = _Args("serve").opt("--id", id).registry(registry_dir, team)
    args.opt("--max-bytes", max_bytes).opt("--max-objects", max_objects)
    args.opt("--ready-fd", write_fd).opt("--parent-pid", os.getpid())
    command = [resolve_stow_binary(), "workspace", *args.argv]
    out = tempfile.TemporaryFile()
    err = tempfile.TemporaryFile()
    try:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            pass_fds=(write_fd,),
            env=None if env is None else dict(env),
        )
    except BaseException:
        os.close(read_fd)
        out.close()
        err.close()
        raise
    finally:
        os.close(write_fd)
    try:
        ready = read_ready_line(read_fd, proc, timeout, "stow-s3 workspace serve")
        if ready.get("version") != 1 or any(not isinstance(ready.get(k), str) or not ready[k] for k in _SERVE_REQUIRED):
            raise StowProtocolError("protocol_mismatch", "workspace serve readiness lacks a required field")
    except StowProtocolError as failure:
        stop_process(proc, 5)
        stderr = read_tail(err)
        err.close()
        stdout = read_tail(out)
        out.close()
        if failure.code == "exited":
            code, message, _ = _decode_error(stdout)
            message = message or _stderr_message(stderr)
            code = code or _tagged_code(message)
            raise WorkspaceCommandError(command, proc.returncode or 1, stderr, code, message) from failure
        raise
    except BaseException:
        stop_process(proc, 5)
        out.close()
        err.close()
        raise
    return ServedWorkspace(proc, ready, [out, err])
