"""Attached workspaces (issue 26, first part) through the Python helpers:
attach_workspace, checkpoint_workspace(message=), workspace_log and
detach_workspace, against the real binary."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import stow_s3
from stow_s3 import WorkspaceCommandError


def files_under(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (``.stow`` included), by relative path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "src" / "deep").mkdir(parents=True)
    (root / "README.md").write_text("# project\n")
    (root / "src" / "main.py").write_text("print('hi')\n")
    (root / "src" / "deep" / "data.txt").write_text("data\n")
    return root


def test_attach_checkpoint_log_detach(tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reg = tmp_path / "reg"
    before = files_under(tree)
    # The current directory by default.
    monkeypatch.chdir(tree)
    ws = stow_s3.attach_workspace(registry_dir=reg, team="platform")
    ws_id = ws["workspace_id"]
    assert ws_id.startswith("ws_") and ws["root"] == str(tree.resolve()) and ws["team"] == "platform"
    assert (ws["seeded_objects"], ws["seeded_bytes"]) == (3, 27)
    assert (tree / ".stow" / ".gitignore").read_text() == "*\n"
    assert {k: v for k, v in files_under(tree).items() if not k.startswith(".stow")} == before

    # From a subdirectory, neither id nor registry: the identity names them.
    monkeypatch.chdir(tmp_path)
    first = stow_s3.checkpoint_workspace(message="first", cwd=tree / "src" / "deep")
    assert first["workspace_id"] == ws_id and first["message"] == "first" and "parent_checkpoint_id" not in first
    (tree / "src" / "main.py").write_text("print('hello')\n")
    second = stow_s3.checkpoint_workspace(message="second\nline two", cwd=tree)
    assert second["parent_checkpoint_id"] == first["checkpoint_id"]

    # The tree matches the head; then one edit shows, read by the capture rules.
    assert stow_s3.workspace_status(cwd=tree)["clean"] is True
    (tree / "src" / "main.py").write_text("print('changed')\n")
    st = stow_s3.workspace_status(cwd=tree / "src")
    assert (st["clean"], st["checkpoint_id"], st["changed"]) == (False, second["checkpoint_id"], 1)
    assert [(c["path"], c["kind"]) for c in st["changes"]] == [("src/main.py", "modified")]
    against_first = stow_s3.workspace_status(ws_id, against=first["checkpoint_id"], registry_dir=reg, team="platform")
    assert [(c["path"], c["kind"]) for c in against_first["changes"]] == [("src/main.py", "modified")]
    assert against_first["checkpoint_id"] == first["checkpoint_id"]
    (tree / "src" / "main.py").write_text("print('hello')\n")

    log = stow_s3.workspace_log(cwd=tree / "src")
    assert log["workspace_id"] == ws_id and log["head"] == second["checkpoint_id"]
    assert [(e["checkpoint_id"], e["message"], e["head"]) for e in log["checkpoints"]] == [
        (second["checkpoint_id"], "second\nline two", True),
        (first["checkpoint_id"], "first", False),
    ]
    assert log["checkpoints"][0]["parent_id"] == first["checkpoint_id"]
    assert stow_s3.workspace_log(ws_id, registry_dir=reg, team="platform") == log
    page = stow_s3.workspace_log(ws_id, limit=1, registry_dir=reg, team="platform")
    assert [e["checkpoint_id"] for e in page["checkpoints"]] == [second["checkpoint_id"]]
    rest = stow_s3.workspace_log(limit=1, cursor=page["next_cursor"], cwd=tree)
    assert [e["checkpoint_id"] for e in rest["checkpoints"]] == [first["checkpoint_id"]] and "next_cursor" not in rest

    # A message over 4096 bytes of UTF-8 is refused; nothing is published.
    with pytest.raises(WorkspaceCommandError) as too_long:
        stow_s3.checkpoint_workspace(message="€" * 1366, cwd=tree)  # 4098 bytes
    assert (too_long.value.code, too_long.value.returncode) == ("invalid_request", 1)
    assert stow_s3.workspace_log(cwd=tree) == log

    # Attaching it again is refused by name.
    with pytest.raises(WorkspaceCommandError) as again:
        stow_s3.attach_workspace(tree, registry_dir=reg, team="platform")
    assert again.value.code == "already_exists" and ws_id in str(again.value.message)

    # detach from inside: .stow, the record and the checkpoints go.
    detached = stow_s3.detach_workspace(cwd=tree / "src")
    assert detached["workspace_id"] == ws_id
    assert (detached["deleted_checkpoints"], detached["kept_checkpoints"]) == (2, False)
    assert not (tree / ".stow").exists()
    assert files_under(tree) == {**before, "src/main.py": b"print('hello')\n"}
    assert stow_s3.list_workspaces(registry_dir=reg, team="platform")["count"] == 0
    assert stow_s3.workspace_policy_show(registry_dir=reg, team="platform")["usage"]["checkpoints"] == 0
    # Now no workspace holds the tree: leaving out the id is a usage error.
    with pytest.raises(WorkspaceCommandError) as usage:
        stow_s3.workspace_log(cwd=tree)
    assert (usage.value.code, usage.value.returncode) == ("usage", 2)


def test_attach_options_and_kept_checkpoints(tree: Path, tmp_path: Path) -> None:
    reg = tmp_path / "reg"
    ws = stow_s3.attach_workspace(tree, registry_dir=reg, ttl_seconds=3600, max_bytes=1 << 20, max_objects=7,
                                  no_gitignore=True)
    listed = stow_s3.list_workspaces(registry_dir=reg)["results"]
    assert [r["id"] for r in listed] == [ws["workspace_id"]]
    assert ws["capabilities"]["max_bytes"] == 1 << 20 and ws["capabilities"]["max_objects"] == 7
    cp = stow_s3.checkpoint_workspace(ws["workspace_id"], message="kept", registry_dir=reg)
    out = stow_s3.detach_workspace(ws["workspace_id"], keep_checkpoints=True, registry_dir=reg)
    assert (out["deleted_checkpoints"], out["kept_checkpoints"]) == (0, True)
    assert not (tree / ".stow").exists()
    restored = stow_s3.restore_workspace_checkpoint(cp["checkpoint_id"], tmp_path / "restored", registry_dir=reg)
    assert files_under(Path(restored["root"])).get("src/deep/data.txt") == b"data\n"


def test_refusals(tree: Path, tmp_path: Path) -> None:
    reg = tmp_path / "reg"
    with pytest.raises(WorkspaceCommandError) as not_dir:
        stow_s3.attach_workspace(tree / "README.md", registry_dir=reg)
    assert not_dir.value.code == "invalid_root"
    assert not reg.exists() and not (tree / ".stow").exists()
    with pytest.raises(WorkspaceCommandError) as home:
        stow_s3.attach_workspace(os.environ["HOME"], registry_dir=reg)
    assert home.value.code == "refused"

    ws = stow_s3.attach_workspace(tree, registry_dir=reg)
    with pytest.raises(WorkspaceCommandError) as inside:
        stow_s3.attach_workspace(tree / "src", registry_dir=reg)
    assert inside.value.code == "refused" and not (tree / "src" / ".stow").exists()
    with pytest.raises(WorkspaceCommandError) as containing:
        stow_s3.attach_workspace(tmp_path, registry_dir=reg)
    assert containing.value.code == "refused" and not (tmp_path / ".stow").exists()

    stow_s3.workspace_policy_set(max_workspaces=1, registry_dir=reg)
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(WorkspaceCommandError) as full:
        stow_s3.attach_workspace(other, registry_dir=reg)
    assert full.value.code == "capacity_exceeded" and not (other / ".stow").exists()

    # A foreign cursor; a prepared workspace is not detached.
    stow_s3.workspace_policy_set(max_workspaces=0, registry_dir=reg)
    ws2 = stow_s3.attach_workspace(other, registry_dir=reg)
    for _ in range(2):
        stow_s3.checkpoint_workspace(ws2["workspace_id"], registry_dir=reg)
    cursor = stow_s3.workspace_log(ws2["workspace_id"], limit=1, registry_dir=reg)["next_cursor"]
    with pytest.raises(WorkspaceCommandError) as foreign:
        stow_s3.workspace_log(ws["workspace_id"], cursor=cursor, registry_dir=reg)
    assert foreign.value.code == "invalid_request"
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("a")
    prepared = stow_s3.prepare_workspace(
        {"version": 1, "root": str(tmp_path / "prepared"), "registry_dir": str(reg),
         "inputs": [{"source": str(tmp_path / "in"), "destination": "."}]}
    )
    with pytest.raises(WorkspaceCommandError) as owned:
        stow_s3.detach_workspace(prepared["workspace_id"], registry_dir=reg)
    assert owned.value.code == "refused" and (tmp_path / "prepared" / ".stow").is_dir()
