"""Workspace helpers: each runs ``stow-s3 workspace <verb>`` (or ``stow-s3 remote <verb>``; no shell)
and returns its JSON object."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any, Union

from ._binary import resolve_stow_binary
from ._process import StowProtocolError, read_ready_line, read_tail, stop_process

WorkspaceJSON = dict[str, Any]
PathLike = Union[str, "os.PathLike[str]"]

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


class WorkspaceCommandError(RuntimeError):
    """A ``stow-s3 workspace`` (or ``stow-s3 remote``) command failed.

    ``command`` is the argv run, ``returncode`` its exit status, ``stderr`` its
    diagnostics; ``code``/``message`` come from the CLI's ``{"error": {...}}``
    document when it printed one (``None`` otherwise). A keyed checkpoint's
    envelope (``{"version", "result", "error"}``) is kept in ``envelope``.
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
    envelope = doc if "result" in doc else None
    return code, message, envelope


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


def attach_workspace(
    root: PathLike | None = None,
    *,
    registry_dir: PathLike | None = None,
    team: str | None = None,
    ttl_seconds: int | None = None,
    max_bytes: int | None = None,
    max_objects: int | None = None,
    no_gitignore: bool = False,
    env: Mapping[str, str] | None = None,
) -> WorkspaceJSON:
    """``attach [--root]``: register an existing directory (default: the current one) as a
    workspace in place. Nothing is copied; only ``ROOT/.stow`` is written. Returns the
    prepare-shaped result (``workspace_id``, ``bucket``, ``root``, ``base_identity``, ...).

    Refusals raise :class:`WorkspaceCommandError` with a stable ``code``: ``invalid_root``,
    ``already_exists`` (the message names the workspace), ``refused`` (``/``, the home
    directory, inside or containing a workspace, the registry) or ``capacity_exceeded``."""
    args = _Args("attach").opt("--root", root).opt("--ttl-seconds", ttl_seconds)
    args.opt("--max-bytes", max_bytes).opt("--max-objects", max_objects).flag("--no-gitignore", no_gitignore)
    return args.registry(registry_dir, team).run(env)


def detach_workspace(
    id: str | None = None,
    *,
    keep_checkpoints: bool = False,
    registry_dir: PathLike | None = None,
    team: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: PathLike | None = None,
) -> WorkspaceJSON:
    """``detach [--id]``: forget an attached workspace (its record, its ``.stow`` and, unless
    ``keep_checkpoints``, its checkpoints); nothing else in its tree is touched. Without
    ``id``, the workspace holding ``cwd`` (default: the current directory). A prepared
    workspace is refused (``refused``: use :func:`destroy_workspace`)."""
    args = _Args("detach").opt("--id", id).flag("--keep-checkpoints", keep_checkpoints)
    return args.registry(registry_dir, team).run(env, cwd)


def workspace_log(
    id: str | None = None,
    *,
    limit: int | None = None,
    cursor: str | None = None,
    registry_dir: PathLike | None = None,
    team: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: PathLike | None = None,
) -> WorkspaceJSON:
    """``log [--id]``: one page of the workspace's checkpoints, newest first
    (``{"version", "workspace_id", "head"?, "checkpoints": [...], "next_cursor"?}``). Pass
    ``next_cursor`` back as ``cursor`` for the next page; a cursor of another workspace's log
    is refused (``invalid_request``). Without ``id``, the workspace holding ``cwd``."""
    args = _Args("log").opt("--id", id).opt("--limit", limit).opt("--cursor", cursor)
    return args.registry(registry_dir, team).run(env, cwd)


def workspace_status(
    id: str | None = None,
    *,
    against: str | None = None,
    registry_dir: PathLike | None = None,
    team: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: PathLike | None = None,
) -> WorkspaceJSON:
    """``status [--id] [--against]``: the live tree against a checkpoint (default: the head),
    as ``diff``'s changes (``{"checkpoint_id", "clean", "added", "changed", "deleted",
    "changes": [...], "links"?}``); changes nothing. Without ``id``, the workspace holding
    ``cwd``."""
    args = _Args("status").opt("--id", id).opt("--against", against)
    return args.registry(registry_dir, team).run(env, cwd)


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
    """``remote-list --remote`` (as ``remote ls NAME``): the checkpoints a remote holds."""
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
            if code is None and message and message.endswith(")") and "(" in message:
                code = message.rsplit("(", 1)[1][:-1]
            raise WorkspaceCommandError(command, proc.returncode or 1, stderr, code, message) from failure
        raise
    except BaseException:
        stop_process(proc, 5)
        out.close()
        err.close()
        raise
    return ServedWorkspace(proc, ready, [out, err])
