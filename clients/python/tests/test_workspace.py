"""The workspace scenario of workspace.md §14, through the Python helpers."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

import stow_s3
from stow_s3 import WorkspaceCommandError

HEX64 = re.compile(r"^[0-9a-f]{64}$")


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "src"
    (src / "nested").mkdir(parents=True)
    (src / "seed.txt").write_text("seed")
    (src / "nested" / "second.txt").write_text("second")
    return tmp_path


def write_manifest(work: Path, name: str, root: str, inputs: list[dict], registry: Path) -> Path:
    path = work / name
    path.write_text(json.dumps({"version": 1, "root": root, "inputs": inputs,
                                "registry_dir": str(registry), "team": "platform"}))
    return path


def test_scenario(work: Path) -> None:
    reg = work / "registry"
    # 1. prepare
    ws = stow_s3.prepare_workspace(write_manifest(work, "task.json", "task1", [{"source": "src", "destination": "."}], reg))
    ws_id = ws["workspace_id"]
    assert re.match(r"^ws_[0-9a-f]+$", ws_id)
    assert (ws["seeded_objects"], ws["seeded_bytes"], ws["team"]) == (2, 10, "platform")
    assert Path(ws["root"]) == work / "task1"
    assert Path(ws["registry_dir"]).is_relative_to(work)
    assert (work / "task1" / "nested" / "second.txt").read_text() == "second"
    rd = dict(registry_dir=reg, team="platform")

    # 2. serve: the workspace's bucket over S3; files are objects
    with stow_s3.serve_workspace(ws_id, **rd) as served:
        ready = served.ready
        assert ready["workspace_id"] == ws_id and Path(ready["root"]) == work / "task1"
        assert re.match(r"^http://127\.0\.0\.1:\d+$", ready["endpoint"])
        assert ready["region"] == "us-east-1" and ready["capabilities"]["persistent"] is True
        assert ready["capabilities"]["upstream"] is False
        pytest.importorskip("boto3")
        s3 = served.s3_client()
        assert s3.get_object(Bucket=ready["bucket"], Key="seed.txt")["Body"].read() == b"seed"
        # the workspace is claimed while served
        with pytest.raises(WorkspaceCommandError) as claimed:
            stow_s3.resume_workspace(ws_id, **rd)
        assert claimed.value.code == "in_use"
    assert served.closed and served._proc.returncode is not None

    # 3. checkpoint, add notes.txt, checkpoint --parent, diff
    cp1 = stow_s3.checkpoint_workspace(ws_id, **rd)
    assert cp1["checkpoint_id"].startswith("cp_") and (cp1["files"], cp1["bytes"]) == (2, 10)
    (work / "task1" / "notes.txt").write_text("twenty bytes of note")
    cp2 = stow_s3.checkpoint_workspace(ws_id, parent=cp1["checkpoint_id"], **rd)
    assert cp2["checkpoint_id"] != cp1["checkpoint_id"] and (cp2["files"], cp2["bytes"]) == (3, 30)
    assert cp2.get("parent_id", cp1["checkpoint_id"]) == cp1["checkpoint_id"]
    diff = stow_s3.diff_workspaces(cp1["checkpoint_id"], cp2["checkpoint_id"], **rd)
    changes = diff.get("changes") or diff.get("files")
    assert [(c["path"], c["kind"]) for c in changes] == [("notes.txt", "added")]

    # 4. a second workspace of the team; a delta across workspaces is refused
    (work / "other").mkdir()
    (work / "other" / "only.txt").write_text("only-file")
    ws2 = stow_s3.prepare_workspace(write_manifest(work, "task2.json", "task2", [{"source": "other", "destination": "."}], reg))
    assert ws2["workspace_id"] != ws_id and ws2["seeded_objects"] == 1
    cp_other = stow_s3.checkpoint_workspace(ws2["workspace_id"], **rd)
    assert (cp_other["files"], cp_other["bytes"]) == (1, 9)
    with pytest.raises(WorkspaceCommandError) as crossed:
        stow_s3.create_workspace_delta(cp1["checkpoint_id"], cp_other["checkpoint_id"], work / "x.json", **rd)
    assert "crosses workspaces" in str(crossed.value) and crossed.value.code
    assert crossed.value.returncode == 1 and crossed.value.command[1:3] == ["workspace", "delta"]

    # 5. handoff --output (v1), then --checkpoint-id --archive (v2)
    out = work / "out"
    out.mkdir()
    h1 = stow_s3.handoff_workspace(ws_id, output=out / "h1.json", **rd)
    assert (out / "h1.json").exists() and h1["version"] == 1 and h1["team"] == "platform"
    assert "checkpoint_id" not in h1 or h1["checkpoint_id"] is None
    h2 = stow_s3.handoff_workspace(ws_id, checkpoint_id=cp2["checkpoint_id"], archive=out / "checkpoint.tar.gz",
                                   output=out / "handoff.json", **rd)
    assert h2["version"] == 2 and h2["archive"]["path"] == "checkpoint.tar.gz"
    assert HEX64.match(h2["archive"]["sha256"]) and h2["archive"]["files"] == 3 and h2["archive"]["bytes"] >= 1
    preview = stow_s3.preview_workspace_archive(out / "checkpoint.tar.gz")
    assert isinstance(preview, dict)

    # 6. adopt into the default registry (isolated HOME)
    adopted = stow_s3.adopt_workspace_handoff(out / "handoff.json", work / "adopted")
    assert adopted["workspace_id"] != ws_id and adopted["checkpoint_id"] == cp2["checkpoint_id"]
    assert adopted["team"] == "platform" and Path(adopted["root"]) == work / "adopted"
    assert (work / "adopted" / "notes.txt").exists() and (work / "adopted" / "nested" / "second.txt").exists()

    # 7. resume --handoff keeps the sender's identity; with --registry-dir it is refused
    resumed = stow_s3.resume_workspace(handoff=out / "handoff.json")
    assert resumed["workspace_id"] == ws_id and resumed["checkpoint_id"] == cp2["checkpoint_id"]
    with pytest.raises(WorkspaceCommandError) as both:
        stow_s3.resume_workspace(handoff=out / "handoff.json", registry_dir=reg)
    assert "not both" in str(both.value)

    # 8. delta cp1 -> cp2
    delta = stow_s3.create_workspace_delta(cp1["checkpoint_id"], cp2["checkpoint_id"], out / "d.json", **rd)
    assert delta["version"] == 1 and (delta["base_id"], delta["target_id"]) == (cp1["checkpoint_id"], cp2["checkpoint_id"])
    assert Path(delta["document"]).is_absolute() and HEX64.match(delta["sha256"])
    assert (delta["files"], delta["bytes"]) == (1, 20)
    on_disk = json.loads((out / "d.json").read_text())
    assert on_disk != delta and (on_disk["base_id"], on_disk["target_id"]) == (delta["base_id"], delta["target_id"])

    # 9. apply: to its base; to cp2 (diverged); tampered; renamed in transit
    applied = stow_s3.apply_workspace_delta(out / "d.json", cp1["checkpoint_id"], expect_sha256=delta["sha256"], **rd)
    assert applied["checkpoint_id"] not in (cp1["checkpoint_id"], cp2["checkpoint_id"])
    assert applied.get("parent_id", cp1["checkpoint_id"]) == cp1["checkpoint_id"]
    assert (applied["files"], applied["bytes"]) == (3, 30)
    with pytest.raises(WorkspaceCommandError) as diverged:
        stow_s3.apply_workspace_delta(out / "d.json", cp2["checkpoint_id"], **rd)
    assert "diverged" in str(diverged.value) and diverged.value.code == "delta_conflict"
    tampered = dict(on_disk)
    path = next(iter(tampered["content"]))
    tampered["content"] = {path: "dGFtcGVyZWQgYnl0ZXMgb2YgbGVuZ3RoMjA="}
    (out / "tampered.json").write_text(json.dumps(tampered))
    with pytest.raises(WorkspaceCommandError) as bad:
        stow_s3.apply_workspace_delta(out / "tampered.json", cp1["checkpoint_id"], **rd)
    assert "disagrees with" in str(bad.value)
    shutil.copy(out / "d.json", out / "renamed.json")
    assert stow_s3.apply_workspace_delta(out / "renamed.json", cp1["checkpoint_id"], **rd)["checkpoint_id"]
    with pytest.raises(WorkspaceCommandError) as digest:
        stow_s3.apply_workspace_delta(out / "renamed.json", cp1["checkpoint_id"], expect_sha256="0" * 64, **rd)
    assert "does not match the digest" in str(digest.value)

    # 10. collect on the partition; destroy ws
    collected = stow_s3.collect_workspaces(**rd)
    assert len(collected["results"]) >= 2
    assert {"id", "dir", "removed", "reason"} <= set(collected["results"][0])
    assert all(r["removed"] is False and r["reason"] == "no-ttl" for r in collected["results"])
    assert stow_s3.destroy_workspace(ws_id, **rd)["destroyed"] is True

    # 11. prune and list
    pruned = stow_s3.prune_workspaces(**rd)
    assert (pruned["count"], pruned["removed"]) == (1, 0) and pruned["results"][0]["reason"] == "present"
    listed = stow_s3.list_workspaces(**rd)
    assert listed["count"] == 1 and listed["results"][0]["id"] == ws2["workspace_id"] and listed["results"][0]["readable"]
    shutil.rmtree(work / "task2")
    pruned = stow_s3.prune_workspaces(**rd)
    assert [r["reason"] for r in pruned["results"]] == ["pruned"]
    shutil.rmtree(work / "adopted")
    kept = stow_s3.prune_workspaces(team="platform")
    assert [r["reason"] for r in kept["results"]] == ["gone-adopted"]
    gone = stow_s3.prune_workspaces(include_adopted=True, team="platform")
    assert [r["reason"] for r in gone["results"]] == ["pruned-adopted"] and gone["removed"] == 1


def test_keyed_checkpoint_and_resolve(work: Path) -> None:
    reg = work / "registry"
    ws = stow_s3.prepare_workspace({"version": 1, "root": "task1", "inputs": [{"source": "src", "destination": "."}],
                                    "registry_dir": str(reg)})
    ws_id = ws["workspace_id"]
    with pytest.raises(WorkspaceCommandError) as missing:
        stow_s3.resolve_checkpoint(ws_id, "task-1/cp-1", 30, portable=True, registry_dir=reg)
    assert missing.value.code == "not_found" and missing.value.returncode == 1
    assert missing.value.envelope is not None and missing.value.envelope["result"]["replayed"] is False

    first = stow_s3.checkpoint_workspace(ws_id, portable=True, request_key="task-1/cp-1", timeout=30, registry_dir=reg)
    assert first["result"]["outcome"] == "committed" and first["result"]["replayed"] is False
    again = stow_s3.checkpoint_workspace(ws_id, portable=True, request_key="task-1/cp-1", timeout="30s", registry_dir=reg)
    assert again["result"]["replayed"] is True
    assert again["result"]["checkpoint"]["id"] == first["result"]["checkpoint"]["id"]
    resolved = stow_s3.resolve_checkpoint(ws_id, "task-1/cp-1", 1.5, portable=True, registry_dir=reg)
    assert resolved["result"]["outcome"] == "committed"

    with pytest.raises(WorkspaceCommandError) as conflict:  # same key, different options
        stow_s3.checkpoint_workspace(ws_id, request_key="task-1/cp-1", timeout=30, registry_dir=reg)
    assert conflict.value.code == "request_conflict" and conflict.value.envelope["error"]["phase"]

    with pytest.raises(WorkspaceCommandError) as scope:
        stow_s3.checkpoint_workspace("ws_0000000000000000", request_key="k", timeout=30, registry_dir=reg)
    assert scope.value.code == "invalid_scope"


def test_refusals_and_other_verbs(work: Path) -> None:
    reg = work / "registry"
    ws = stow_s3.prepare_workspace({"version": 1, "root": "task1", "inputs": [{"source": "src", "destination": "."}],
                                    "registry_dir": str(reg)})
    cp = stow_s3.checkpoint_workspace(ws["workspace_id"], registry_dir=reg)

    with pytest.raises(WorkspaceCommandError) as bad_id:
        stow_s3.diff_workspaces("cp_nope", cp["checkpoint_id"], registry_dir=reg)
    err = bad_id.value
    assert err.code == "invalid_request" and "invalid checkpoint id" in err.message
    assert err.returncode == 1 and "invalid_request" in err.stderr and err.command[0] == stow_s3.resolve_stow_binary()

    # export / import into another registry; importing twice is already_exists
    exported = stow_s3.export_workspace_checkpoint(cp["checkpoint_id"], work / "cp.tar.gz", registry_dir=reg)
    assert isinstance(exported, dict) and (work / "cp.tar.gz").exists()
    with pytest.raises(WorkspaceCommandError):  # never replaces
        stow_s3.export_workspace_checkpoint(cp["checkpoint_id"], work / "cp.tar.gz", registry_dir=reg)
    other = work / "other-registry"
    stow_s3.import_workspace_checkpoint(work / "cp.tar.gz", registry_dir=other)
    with pytest.raises(WorkspaceCommandError) as dup:
        stow_s3.import_workspace_checkpoint(work / "cp.tar.gz", registry_dir=other)
    assert dup.value.code == "already_exists"
    (work / "junk.tar.gz").write_bytes(b"not a gzip")
    with pytest.raises(WorkspaceCommandError) as junk:
        stow_s3.preview_workspace_archive(work / "junk.tar.gz")
    assert junk.value.code == "invalid_archive"

    restored = stow_s3.restore_workspace_checkpoint(cp["checkpoint_id"], work / "again", registry_dir=reg)
    assert (work / "again" / "seed.txt").read_text() == "seed" and restored["workspace_id"] != ws["workspace_id"]

    assert isinstance(stow_s3.gc_workspaces(registry_dir=reg), dict)
    policy = stow_s3.workspace_policy_set(max_checkpoints=10, registry_dir=reg)
    assert isinstance(policy, dict)
    assert stow_s3.workspace_policy_show(registry_dir=reg)["policy"]["max_checkpoints"] == 10
    with pytest.raises(WorkspaceCommandError) as bad_team:
        stow_s3.list_workspaces(registry_dir=reg, team="../x")
    assert bad_team.value.returncode != 0

    # run_workspace_command: any verb; a usage error (exit 2) has no JSON code
    assert stow_s3.run_workspace_command("list", "--registry-dir", reg)["count"] == 2
    with pytest.raises(WorkspaceCommandError) as usage:
        stow_s3.run_workspace_command("bogus")
    assert usage.value.returncode == 2 and usage.value.code is None and "bogus" in usage.value.stderr


def test_serve_refusal_is_a_command_error(work: Path) -> None:
    with pytest.raises(WorkspaceCommandError) as missing:
        stow_s3.serve_workspace("ws_0000000000000000", registry_dir=work / "registry")
    assert missing.value.returncode != 0 and missing.value.message


def test_remotes_push_pull_adopt(work: Path) -> None:
    """Checkpoints through an S3 service: a throwaway session holds the remote's bucket."""
    pytest.importorskip("boto3")
    reg_a, reg_b, reg_c = work / "reg-a", work / "reg-b", work / "reg-c"
    ws = stow_s3.prepare_workspace({"version": 1, "root": "task1", "inputs": [{"source": "src", "destination": "."}],
                                    "registry_dir": str(reg_a), "team": "platform"})
    ws_id = ws["workspace_id"]
    a = dict(registry_dir=reg_a, team="platform")
    cp = stow_s3.checkpoint_workspace(ws_id, **a)
    cp_id = cp["checkpoint_id"]
    assert (cp["files"], cp["bytes"]) == (2, 10)

    with stow_s3.with_session() as session:
        session.s3_client().create_bucket(Bucket="checkpoints")
        # The CLI stores no credentials: they reach it through the command's environment.
        env = {**stow_s3.build_child_env(), "AWS_ACCESS_KEY_ID": session.access_key,
               "AWS_SECRET_ACCESS_KEY": session.secret_key, "AWS_DEFAULT_REGION": session.region}

        added = stow_s3.add_remote("origin", "s3://checkpoints/team", endpoint_url=session.endpoint, region=session.region, **a)
        assert added == {"name": "origin", "url": "s3://checkpoints/team", "endpoint_url": session.endpoint,
                         "region": session.region}
        for reg in (reg_b, reg_c):
            assert stow_s3.add_remote("origin", "s3://checkpoints/team", endpoint_url=session.endpoint,
                                      registry_dir=reg)["name"] == "origin"
        listed = stow_s3.list_remotes(**a)
        assert listed["team"] == "platform" and [r["name"] for r in listed["remotes"]] == ["origin"]
        assert "team" not in stow_s3.list_remotes(registry_dir=reg_b)
        with pytest.raises(WorkspaceCommandError) as dup:
            stow_s3.add_remote("origin", "s3://checkpoints/other", **a)
        assert dup.value.code == "already_exists" and dup.value.command[1:3] == ["remote", "add"]
        assert str(dup.value).startswith("stow-s3 remote add exited 1")
        with pytest.raises(WorkspaceCommandError) as bad_url:
            stow_s3.add_remote("elsewhere", "https://example.com/bucket", **a)
        assert bad_url.value.code == "invalid_request"
        with pytest.raises(WorkspaceCommandError) as dashed:  # after "--": the CLI's own refusal, not a usage error
            stow_s3.add_remote("-x", "s3://checkpoints/x", **a)
        assert dashed.value.code == "invalid_request" and dashed.value.returncode == 1

        # push: the blobs, then the manifest; a rerun sends nothing twice
        def counts(doc: dict) -> tuple[int, int, int, int]:
            return doc["uploaded_blobs"], doc["uploaded_bytes"], doc["skipped_blobs"], doc["skipped_bytes"]

        pushed = stow_s3.push_workspace_checkpoint(cp_id, "origin", 30, env=env, **a)
        assert (pushed["checkpoint_id"], pushed["workspace_id"]) == (cp_id, ws_id)
        assert pushed["remote_url"] == "s3://checkpoints/team" and pushed["manifest"] == "uploaded"
        assert counts(pushed) == (2, 10, 0, 0)
        again = stow_s3.push_workspace_checkpoint(cp_id, "origin", "30s", env=env, **a)
        assert again["manifest"] == "already_present"
        assert counts(again) == (0, 0, 2, 10)
        keys = [o["Key"] for o in session.s3_client().list_objects_v2(Bucket="checkpoints")["Contents"]]
        assert f"team/checkpoints/{cp_id}.json" in keys

        remote_cps = stow_s3.list_remote_checkpoints("origin", 1.5, env=env, **a)
        assert remote_cps["remote_url"] == "s3://checkpoints/team"
        assert [(c["checkpoint_id"], c["workspace_id"], c["files"], c["bytes"]) for c in remote_cps["checkpoints"]] == [
            (cp_id, ws_id, 2, 10)
        ]

        # pull into a second registry; a second pull is refused
        pulled = stow_s3.pull_workspace_checkpoint(cp_id, "origin", env=env, registry_dir=reg_b)
        assert pulled["checkpoint_id"] == cp_id and (pulled["files"], pulled["bytes"]) == (2, 10)
        assert (pulled["downloaded_blobs"], pulled["downloaded_bytes"], pulled["local_blobs"]) == (2, 10, 0)
        with pytest.raises(WorkspaceCommandError) as twice:
            stow_s3.pull_workspace_checkpoint(cp_id, "origin", env=env, registry_dir=reg_b)
        assert twice.value.code == "already_exists"
        restored = stow_s3.restore_workspace_checkpoint(cp_id, work / "restored", registry_dir=reg_b)
        assert restored["workspace_id"] != ws_id and (work / "restored" / "nested" / "second.txt").read_text() == "second"

        # adopt straight from the remote into a new root of a third registry
        adopted = stow_s3.adopt_workspace_remote(cp_id, "origin", work / "adopted", 30, env=env, registry_dir=reg_c)
        assert adopted["checkpoint_id"] == cp_id and adopted["workspace_id"] != ws_id
        assert Path(adopted["root"]) == work / "adopted"
        for rel in ("seed.txt", "nested/second.txt"):
            assert (work / "adopted" / rel).read_bytes() == (work / "src" / rel).read_bytes()

        # handoff --remote: pushes (already there) and names the remote; adopted from the document alone
        handoff = stow_s3.handoff_workspace(ws_id, checkpoint_id=cp_id, output=work / "handoff.json", remote="origin",
                                            timeout=30, env=env, **a)
        assert handoff["version"] == 2 and handoff["checkpoint_id"] == cp_id
        assert handoff["remote"] == {"url": "s3://checkpoints/team", "endpoint_url": session.endpoint, "region": session.region}
        printed = stow_s3.handoff_workspace(ws_id, cp_id, remote="origin", env=env, **a)
        assert printed == handoff
        via_doc = stow_s3.adopt_workspace_handoff(work / "handoff.json", work / "via-doc", timeout="30s", env=env,
                                                  registry_dir=work / "reg-d")
        assert via_doc["checkpoint_id"] == cp_id and (work / "via-doc" / "seed.txt").read_text() == "seed"

        # refusals carry the CLI's code
        with pytest.raises(WorkspaceCommandError) as unknown_cp:
            stow_s3.pull_workspace_checkpoint("cp_" + "0" * 24, "origin", env=env, registry_dir=reg_b)
        assert unknown_cp.value.code == "not_found" and unknown_cp.value.command[1:3] == ["workspace", "pull"]
        with pytest.raises(WorkspaceCommandError) as unknown_remote:
            stow_s3.pull_workspace_checkpoint(cp_id, "nowhere", env=env, registry_dir=reg_c)
        assert unknown_remote.value.code == "not_found" and "remote nowhere not found" in str(unknown_remote.value)
        with pytest.raises(WorkspaceCommandError) as wrong_secret:
            stow_s3.list_remote_checkpoints("origin", env={**env, "AWS_SECRET_ACCESS_KEY": "wrong"}, **a)
        assert wrong_secret.value.code == "remote_auth"
        with pytest.raises(WorkspaceCommandError) as no_keys:
            stow_s3.push_workspace_checkpoint(cp_id, "origin", env=stow_s3.build_child_env(), **a)
        assert no_keys.value.code == "remote_auth" and "credentials" in (no_keys.value.message or "")
        assert stow_s3.add_remote("gone", "s3://no-such-bucket", endpoint_url=session.endpoint, **a)["name"] == "gone"
        with pytest.raises(WorkspaceCommandError) as no_bucket:
            stow_s3.list_remote_checkpoints("gone", env=env, **a)
        assert no_bucket.value.code == "remote_no_bucket"

    removed = stow_s3.remove_remote("gone", **a)
    assert removed["name"] == "gone"
    with pytest.raises(WorkspaceCommandError) as not_there:
        stow_s3.remove_remote("gone", **a)
    assert not_there.value.code == "not_found" and str(not_there.value).startswith("stow-s3 remote remove exited 1")
    assert [r["name"] for r in stow_s3.list_remotes(**a)["remotes"]] == ["origin"]
