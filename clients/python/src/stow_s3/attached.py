"""Attached-workspace helpers: a directory you already have (a git checkout, say) registered
as a workspace in place (``attach``), its checkpoints (``log``), the tree against one
(``status``), put back to one (``rewind``) and forgotten (``detach``).

Each runs ``stow-s3 workspace <verb>`` (no shell) and returns its JSON object; all are
exported from :mod:`stow_s3` and :mod:`stow_s3.workspace` too."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from ._command import PathLike, WorkspaceJSON, _Args

__all__ = [
    "attach_workspace",
    "detach_workspace",
    "workspace_log",
    "workspace_status",
    "rewind_workspace",
]


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
    "changes": [...], "links"?}``), each change's ``kind`` one of ``added``, ``deleted``,
    ``modified``, ``mode_changed``, ``type_changed``; changes nothing. Without ``id``, the
    workspace holding ``cwd``."""
    args = _Args("status").opt("--id", id).opt("--against", against)
    return args.registry(registry_dir, team).run(env, cwd)



def rewind_workspace(
    id: str | None = None,
    *,
    to: str,
    paths: Sequence[PathLike] | None = None,
    dry_run: bool = False,
    message: str | None = None,
    request_key: str | None = None,
    registry_dir: PathLike | None = None,
    team: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: PathLike | None = None,
) -> WorkspaceJSON:
    """``rewind --to [--id] [--paths] [--dry-run]``: put the live tree back to checkpoint ``to``
    in place. The tree is captured first (the undo checkpoint, stored with ``message``,
    default ``"before rewind to CP"``): rewind to ``undo_checkpoint_id`` to undo. Returns
    ``{"version", "workspace_id", "checkpoint_id", "undo_checkpoint_id", "head", "dry_run",
    "paths"?, "written", "deleted", "unchanged", "conflicts": [], "replayed"}``.

    ``paths`` limits it to those files or directories (relative to the root; the head then
    stays on the undo checkpoint). ``dry_run=True`` changes nothing and adds ``status``'s
    ``changes`` (and ``links``); there is no undo checkpoint. The same ``request_key`` with the
    same inputs answers the first rewind's result (``"replayed": true``). Without ``id``, the
    workspace holding ``cwd``.

    As a failed keyed checkpoint does, a rewind that left paths alone because they changed
    meanwhile (the CLI exits 1) raises :class:`WorkspaceCommandError` with ``code``
    ``workspace_changed`` and the result document (its ``conflicts``, ``[{"path",
    "reason"}]``, and counts) in ``envelope``; everything else was rewound. Refusals raise it
    with the CLI's code (``not_found``, ``invalid_path``, ``in_progress``, ...)."""
    args = _Args("rewind").opt("--to", to).opt("--id", id)
    if paths is not None:
        listed = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
        if not listed:
            raise ValueError("paths must name at least one file or directory (None rewinds the whole tree)")
        args.argv += [f"--paths={os.fspath(p)}" for p in listed]  # a path may start with '-'
    args.flag("--dry-run", dry_run).opt("--message", message).opt("--request-key", request_key)
    return args.registry(registry_dir, team).run(env, cwd)
