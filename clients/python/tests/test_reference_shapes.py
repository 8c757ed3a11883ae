"""The call shapes of the reference's documentation (s3.md §8.4, the Python column), as written there.

Every helper of the table runs against the real binary in the default registry (under the
isolated HOME of conftest.py), so the calls need no ``registry_dir=`` where the table shows none.
Only the package's public names are used.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import stow_s3


def test_every_helper_in_the_reference_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "seed.txt").write_text("seed")
    manifest = tmp_path / "task.json"
    manifest.write_text(json.dumps({"version": 1, "root": str(tmp_path / "task1"),
                                    "inputs": [{"source": str(src), "destination": "."}]}))

    # prepare_workspace(path)
    ws = stow_s3.prepare_workspace(manifest)
    ws_id = ws["workspace_id"]
    root = Path(ws["root"])

    # run_workspace_command(*args); list_workspaces()
    assert [r["id"] for r in stow_s3.run_workspace_command("list")["results"]] == [ws_id]
    assert stow_s3.list_workspaces()["count"] == 1

    # checkpoint_workspace(id, parent=…) with the common option flags
    cp1 = stow_s3.checkpoint_workspace(ws_id)["checkpoint_id"]
    (root / "notes.txt").write_text("agent output")
    c2 = stow_s3.checkpoint_workspace(ws_id, parent=cp1, max_bytes=1 << 20, max_files=100, include_sensitive=False)
    cp2 = c2["checkpoint_id"]
    assert c2["parent_checkpoint_id"] == cp1
    unknown = re.sub(r"[0-9a-f]+$", lambda m: "0" * len(m.group()), ws_id)
    with pytest.raises(stow_s3.WorkspaceCommandError) as refused:
        stow_s3.checkpoint_workspace(unknown)
    assert refused.value.code == "not_found"

    # diff_workspaces(from_id, to_id)
    diff = stow_s3.diff_workspaces(cp1, cp2)
    assert [(c["kind"], c["path"]) for c in diff["changes"]] == [("added", "notes.txt")]

    # resume_workspace(id=, handoff=, registry_dir=)
    assert stow_s3.resume_workspace(id=ws_id)["workspace_id"] == ws_id

    # handoff_workspace(...) and adopt_workspace_handoff(handoff, root, …)
    handoff = stow_s3.handoff_workspace(ws_id, checkpoint_id=cp2, archive=tmp_path / "h.tar.gz", output=tmp_path / "h.json")
    assert handoff["workspace_id"] == ws_id
    adopted = stow_s3.adopt_workspace_handoff(tmp_path / "h.json", tmp_path / "adopted", registry_dir=tmp_path / "other")
    assert (tmp_path / "adopted" / "notes.txt").read_text() == "agent output"
    assert adopted["workspace_id"] != ws_id

    # resume_workspace(handoff=…): the document names the workspace
    assert stow_s3.resume_workspace(handoff=tmp_path / "h.json")["workspace_id"] == ws_id

    # create_workspace_delta(from_id=, to_id=, output=) and apply_workspace_delta(delta, base=, expect_sha256=)
    delta = stow_s3.create_workspace_delta(from_id=cp1, to_id=cp2, output=tmp_path / "d.json")
    applied = stow_s3.apply_workspace_delta(tmp_path / "d.json", base=cp1, expect_sha256=delta["sha256"])
    assert applied["parent_checkpoint_id"] == cp1

    # restore_workspace_checkpoint(cp, root); destroy_workspace(id)
    restored = stow_s3.restore_workspace_checkpoint(cp2, tmp_path / "restored")
    assert (tmp_path / "restored" / "notes.txt").read_text() == "agent output"
    assert stow_s3.destroy_workspace(restored["workspace_id"])
    assert stow_s3.list_workspaces()["count"] == 1

    # export_workspace_checkpoint(cp, output); import_workspace_checkpoint(archive) into another default registry
    stow_s3.export_workspace_checkpoint(cp2, tmp_path / "cp.tar.gz")
    with monkeypatch.context() as m:  # only this HOME change is undone, not conftest's isolated one
        m.setenv("HOME", str(tmp_path / "home2"))
        m.setenv("XDG_CONFIG_HOME", str(tmp_path / "home2" / ".config"))
        assert stow_s3.import_workspace_checkpoint(tmp_path / "cp.tar.gz")["checkpoint_id"] == cp2
    assert stow_s3.list_workspaces()["count"] == 1

    # collect_workspaces()
    assert isinstance(stow_s3.collect_workspaces(), dict)

    # serve_workspace(id, …, timeout=15)
    with stow_s3.serve_workspace(ws_id, timeout=15) as served:
        assert served.ready["workspace_id"] == ws_id
        assert served.bucket == served.ready["bucket"]


def test_session_has_no_bucket_and_create_bucket_makes_one() -> None:
    boto3 = pytest.importorskip("boto3")
    assert boto3
    with stow_s3.with_session() as session:
        s3 = session.s3_client()
        assert s3.list_buckets()["Buckets"] == []  # the documented behaviour: no bucket of its own
        name = session.create_bucket()
        assert re.fullmatch(r"stow-session-[0-9a-f]{16}", name)
        assert session.create_bucket("chosen-bucket") == "chosen-bucket"
        assert sorted(b["Name"] for b in s3.list_buckets()["Buckets"]) == sorted([name, "chosen-bucket"])
        s3.put_object(Bucket=name, Key="k", Body=b"v")
        assert s3.get_object(Bucket=name, Key="k")["Body"].read() == b"v"
        assert session.create_bucket() != name


def test_create_bucket_refusals() -> None:
    with stow_s3.with_session(backend="memory", region="eu-west-1") as session:
        # Signed for the session's region (the server checks the credential scope).
        assert session.create_bucket("in-eu") == "in-eu"
        with pytest.raises(stow_s3.StowSessionError) as bad:
            session.create_bucket("Not_A_Bucket")
        assert bad.value.code == "InvalidBucketName"
    with pytest.raises(stow_s3.StowSessionError) as closed:
        session.create_bucket()
    assert closed.value.code == "closed"
