"""Rewind (issue 27) through the Python helper: rewind_workspace puts an
attached workspace's tree back to a checkpoint in place, against the real
binary -- undo, dry run, paths, keyed replay, conflicts and refusals."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from test_attach import files_under

import stow_s3
from stow_s3 import WorkspaceCommandError


def tree_files(root: Path) -> dict[str, bytes]:
    """The tree's files without ``.stow``."""
    return {k: v for k, v in files_under(root).items() if not k.startswith(".stow")}


@pytest.fixture
def attached(tmp_path: Path) -> tuple[Path, Path, str, str]:
    """An attached tree with one checkpoint: (root, registry, workspace id, checkpoint id)."""
    root = tmp_path / "project"
    (root / "src" / "deep").mkdir(parents=True)
    (root / "README.md").write_text("# project\n")
    (root / "src" / "main.py").write_text("print('hi')\n")
    (root / "src" / "deep" / "data.txt").write_text("data\n")
    (root / "src" / "deep" / "more.txt").write_text("more\n")
    reg = tmp_path / "reg"
    ws_id = stow_s3.attach_workspace(root, registry_dir=reg)["workspace_id"]
    cp = stow_s3.checkpoint_workspace(ws_id, message="as found", registry_dir=reg)["checkpoint_id"]
    return root, reg, ws_id, cp


def agent_edits(root: Path) -> None:
    """Change a file, add one, delete a whole directory."""
    (root / "src" / "main.py").write_text("print('agent was here')\n")
    (root / "notes.txt").write_text("scratch\n")
    for p in (root / "src" / "deep").iterdir():
        p.unlink()
    (root / "src" / "deep").rmdir()


def test_rewind_and_undo(attached: tuple[Path, Path, str, str]) -> None:
    root, reg, ws_id, cp = attached
    original = tree_files(root)
    agent_edits(root)
    edited = tree_files(root)

    # From inside the tree: no id, no registry.
    out = stow_s3.rewind_workspace(to=cp, message="agent's attempt", cwd=root / "src")
    assert tree_files(root) == original
    assert (out["workspace_id"], out["checkpoint_id"], out["head"]) == (ws_id, cp, cp)
    assert (out["written"], out["deleted"], out["unchanged"]) == (3, 1, 1)  # main.py, data, more; notes; README
    assert out["conflicts"] == [] and out["dry_run"] is False and out["replayed"] is False
    assert "paths" not in out and "changes" not in out
    undo = out["undo_checkpoint_id"]
    assert undo.startswith("cp_") and undo != cp
    log = stow_s3.workspace_log(ws_id, registry_dir=reg)
    assert log["head"] == cp
    assert {e["checkpoint_id"]: e.get("message") for e in log["checkpoints"]}[undo] == "agent's attempt"
    assert stow_s3.workspace_status(cwd=root)["clean"] is True

    # Undo: rewind to the undo checkpoint; the edits are back, the directory stays deleted.
    back = stow_s3.rewind_workspace(ws_id, to=undo, registry_dir=reg)
    assert tree_files(root) == edited and not (root / "src" / "deep").exists()
    assert (back["checkpoint_id"], back["head"]) == (undo, undo)
    assert (back["written"], back["deleted"]) == (2, 2)  # main.py, notes; data, more (their directory goes uncounted)
    assert stow_s3.workspace_status(ws_id, registry_dir=reg)["clean"] is True


def test_dry_run_changes_nothing(attached: tuple[Path, Path, str, str]) -> None:
    root, reg, ws_id, cp = attached
    agent_edits(root)
    edited = files_under(root)
    checkpoints = stow_s3.workspace_log(ws_id, registry_dir=reg)["checkpoints"]
    plan = stow_s3.rewind_workspace(ws_id, to=cp, dry_run=True, registry_dir=reg)
    assert plan["dry_run"] is True and "undo_checkpoint_id" not in plan
    assert (plan["written"], plan["deleted"], plan["unchanged"]) == (3, 1, 1)
    assert sorted((c["path"], c["kind"]) for c in plan["changes"]) == [
        ("notes.txt", "added"),
        ("src/deep/data.txt", "deleted"),
        ("src/deep/more.txt", "deleted"),
        ("src/main.py", "modified"),
    ]
    assert files_under(root) == edited
    assert stow_s3.workspace_log(ws_id, registry_dir=reg)["checkpoints"] == checkpoints


def test_paths_limit_the_rewind(attached: tuple[Path, Path, str, str]) -> None:
    root, reg, ws_id, cp = attached
    original = tree_files(root)
    agent_edits(root)
    out = stow_s3.rewind_workspace(ws_id, to=cp, paths=["src/deep"], registry_dir=reg)
    assert out["paths"] == ["src/deep"] and (out["written"], out["deleted"]) == (2, 0)
    # Only the directory came back; the head stays on the undo checkpoint.
    assert (root / "src" / "deep" / "data.txt").read_text() == "data\n"
    assert (root / "src" / "main.py").read_text() == "print('agent was here')\n"
    assert (root / "notes.txt").exists()
    assert out["head"] == out["undo_checkpoint_id"] != cp
    # One path given as a plain string; Path objects work too.
    stow_s3.rewind_workspace(to=cp, paths="notes.txt", cwd=root)
    stow_s3.rewind_workspace(to=cp, paths=[Path("src") / "main.py"], cwd=root)
    assert tree_files(root) == original
    with pytest.raises(ValueError):
        stow_s3.rewind_workspace(to=cp, paths=[], cwd=root)


def test_keyed_rewind_replays(attached: tuple[Path, Path, str, str]) -> None:
    root, reg, ws_id, cp = attached
    agent_edits(root)
    first = stow_s3.rewind_workspace(ws_id, to=cp, request_key="task-1/rewind", registry_dir=reg)
    (root / "notes.txt").write_text("written after the rewind\n")
    again = stow_s3.rewind_workspace(ws_id, to=cp, request_key="task-1/rewind", registry_dir=reg)
    assert again["replayed"] is True and first["replayed"] is False
    assert again["undo_checkpoint_id"] == first["undo_checkpoint_id"]
    assert (root / "notes.txt").read_text() == "written after the rewind\n"  # a replay changes nothing


def test_a_concurrent_write_is_kept_and_reported(attached: tuple[Path, Path, str, str]) -> None:
    """A file written while the rewind runs (it pauses at a test fault point after
    its journal) is left alone: the helper raises workspace_changed carrying the
    result document, and everything else was rewound."""
    root, reg, ws_id, cp = attached
    agent_edits(root)
    journal = reg / ".stow" / "rewind" / f"{ws_id}.json"

    def writer() -> None:
        deadline = time.monotonic() + 30
        while not journal.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        (root / "src" / "main.py").write_text("print('written meanwhile')\n")

    t = threading.Thread(target=writer)
    t.start()
    env = {**os.environ, "STOW_TEST_FAULT": "rewind.journaled@1500"}
    try:
        with pytest.raises(WorkspaceCommandError) as changed:
            stow_s3.rewind_workspace(ws_id, to=cp, registry_dir=reg, env=env)
    finally:
        t.join()
    err = changed.value
    assert (err.code, err.returncode) == ("workspace_changed", 1)
    doc = err.envelope
    assert doc is not None and doc["error"]["code"] == "workspace_changed" and "rewind" in doc["error"]["message"]
    assert [c["path"] for c in doc["conflicts"]] == ["src/main.py"] and doc["conflicts"][0]["reason"]
    assert doc["undo_checkpoint_id"].startswith("cp_") and doc["checkpoint_id"] == cp
    assert (doc["written"], doc["deleted"]) == (2, 1)
    assert (root / "src" / "main.py").read_text() == "print('written meanwhile')\n"
    assert (root / "src" / "deep" / "data.txt").read_text() == "data\n" and not (root / "notes.txt").exists()


def test_refusals(attached: tuple[Path, Path, str, str], tmp_path: Path) -> None:
    root, reg, ws_id, cp = attached
    agent_edits(root)
    edited = tree_files(root)
    with pytest.raises(WorkspaceCommandError) as unknown:
        stow_s3.rewind_workspace(ws_id, to="cp_" + "0" * 24, registry_dir=reg)
    assert (unknown.value.code, unknown.value.returncode) == ("not_found", 1)
    assert unknown.value.envelope is None and "not found" in str(unknown.value.message)
    with pytest.raises(WorkspaceCommandError) as outside:
        stow_s3.rewind_workspace(to=cp, paths=["../elsewhere"], cwd=root)
    assert outside.value.code == "invalid_path"
    with pytest.raises(WorkspaceCommandError) as usage:
        stow_s3.rewind_workspace(to=cp, cwd=tmp_path)
    assert (usage.value.code, usage.value.returncode) == ("usage", 2)
    assert tree_files(root) == edited
