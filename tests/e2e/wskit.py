"""Workspaces for the MCP workspace-profile tests: one prepared from a
manifest, its registry's checkpoint directories, the CLI's keyed
checkpoint and resolution, the request key -> checkpoint ID derivation,
and a listing of a tree that follows no link."""

from __future__ import annotations

import os
import pathlib
import stat

from mcpkit import sha
from test_workspace import manifest, ok, ws

SMALL = {"a.txt": b"alpha", "nested/b.txt": b"bravo!"}


def write_files(root, files):
    for rel, data in files.items():
        p = pathlib.Path(root) / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def prepare(stow_bin, workdir, files, root="w", registry="reg", **fields):
    """Prepares a workspace seeded with `files` ({rel: bytes}); returns the
    prepare document (workspace_id, root, bucket, ...)."""
    src = workdir / f"{root}-input"
    write_files(src, files)
    m = manifest(workdir / f"{root}.task.json", root=root, registry_dir=registry,
                 inputs=[{"source": src.name, "destination": "."}], **fields)
    return ok(stow_bin, "prepare", "--manifest", m)


def checkpoint_dirs(registry) -> list[str]:
    """Everything in the registry's checkpoints directory (hidden stages too)."""
    d = pathlib.Path(registry) / ".stow" / "checkpoints"
    return sorted(os.listdir(d)) if d.is_dir() else []


def visible_checkpoints(registry) -> list[str]:
    return [n for n in checkpoint_dirs(registry) if not n.startswith(".")]


def derived_id(ws_id: str, key: str) -> str:
    """The checkpoint ID a request key derives (the keyed engine the CLI
    shares: cp_ + 24 hex of SHA-256 over a domain tag, workspace and key)."""
    digest = sha(b"stow-checkpoint-request-v1\0" + ws_id.encode() + b"\0" + key.encode())
    return "cp_" + digest[:24]


def listing(root) -> list[tuple]:
    """Every entry under root (directories, links, FIFOs included) without
    following links or opening anything but regular files."""
    out = []
    root = str(root)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as fh:
                    out.append((rel, "file", st.st_mode & 0o777, sha(fh.read())))
            elif stat.S_ISLNK(st.st_mode):
                out.append((rel, "link", os.readlink(p)))
            elif stat.S_ISDIR(st.st_mode):
                out.append((rel, "dir"))
            else:
                out.append((rel, "other", stat.S_IFMT(st.st_mode)))
    return out


def cli_checkpoint(stow_bin, registry, ws_id, *args, check=True):
    """`stow-s3 workspace checkpoint` (keyed when args carry a key)."""
    return ws(stow_bin, "checkpoint", "--id", ws_id, "--registry-dir", registry, *args, check=check)


def cli_resolve(stow_bin, registry, ws_id, key):
    """The CLI's keyed resolution of an MCP-created (portable) checkpoint."""
    _, doc, _ = cli_checkpoint(stow_bin, registry, ws_id, "--request-key", key, "--resolve",
                               "--portable", "--timeout", "30s")
    return doc
