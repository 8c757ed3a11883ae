"""`stow-s3 workspace checkpoint --hook` fed the payloads agent hosts send
(issue 27): Claude Code's Stop and PreToolUse (recorded shapes), Codex's
notify argument, Cursor's stop; keyed per payload, silent on stdout, exit
0 where there is no workspace and 1 (never 2, which blocks a host) on
failure. The README's configurations are run as written."""

import json
import os
import re
import subprocess
import time
import tomllib
from pathlib import Path

from test_workspace_attach import default_registry, env, make_repo, ok  # noqa: F401  (env is a fixture)

README = Path(__file__).resolve().parents[2] / "README.md"
SESSION = "3f9a7c1e-5b2d-4e8f-9a61-0c4b2d7e8f10"


def claude_stop(cwd, transcript):
    return {
        "session_id": SESSION,
        "transcript_path": str(transcript),
        "cwd": str(cwd),
        "permission_mode": "default",
        "hook_event_name": "Stop",
        "stop_hook_active": False,
    }


def claude_pre_bash(cwd, transcript, tool_use_id):
    return {
        "session_id": SESSION,
        "transcript_path": str(transcript),
        "cwd": str(cwd),
        "permission_mode": "acceptEdits",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "npm install && rm -rf build", "description": "Install dependencies"},
        "tool_use_id": tool_use_id,
    }


def hook(stow_bin, payload, env, *extra, argv_payload=False, cwd=None, shell=None):
    """Runs the hook as a host would: payload on stdin (or as the last
    argument); returns (rc, stdout, stderr)."""
    text = payload if isinstance(payload, str) else json.dumps(payload)
    path_env = {**env, "PATH": f"{Path(stow_bin).parent}:{env['PATH']}"}
    if shell is not None:
        cmd = ["sh", "-c", shell]
    else:
        cmd = [stow_bin, "workspace", "checkpoint", "--hook", *extra] + ([text] if argv_payload else [])
    out = subprocess.run(cmd, input=None if argv_payload else text, capture_output=True, text=True,
                         env=path_env, cwd=cwd or "/", timeout=120, check=False)
    return out.returncode, out.stdout, out.stderr


def log(stow_bin, repo, env):
    return ok(stow_bin, "log", env=env, cwd=repo)["checkpoints"]


def test_claude_code_payloads_take_keyed_silent_checkpoints(stow_bin, workdir, env):
    repo = make_repo(workdir / "repo", env)
    ok(stow_bin, "attach", env=env, cwd=repo)
    transcript = workdir / "transcript.jsonl"
    transcript.write_text('{"type":"user"}\n')

    stop = claude_stop(repo / "src", transcript)
    assert hook(stow_bin, stop, env) == (0, "", "")
    [first] = log(stow_bin, repo, env)
    assert first["message"] == f"Stop hook (session {SESSION})" and first["origin"] == "capture"

    # The same delivery again: one checkpoint.
    (repo / "README.md").write_text("changed by the agent\n")
    assert hook(stow_bin, stop, env)[:2] == (0, "")
    assert len(log(stow_bin, repo, env)) == 1
    # The next turn (the transcript grew): a new checkpoint, parent the head.
    with transcript.open("a") as t:
        t.write('{"type":"assistant"}\n')
    assert hook(stow_bin, stop, env)[:2] == (0, "")
    second = log(stow_bin, repo, env)[0]
    assert second["checkpoint_id"] != first["checkpoint_id"] and second["parent_id"] == first["checkpoint_id"]

    pre = claude_pre_bash(repo, transcript, "toolu_01XyZ")
    rc, out, _ = hook(stow_bin, pre, env, "--print")
    assert rc == 0
    printed = json.loads(out)
    assert printed["result"]["outcome"] == "committed" and printed["result"]["replayed"] is False
    entries = log(stow_bin, repo, env)
    assert entries[0]["message"] == f"PreToolUse hook before Bash (session {SESSION}, tool use toolu_01XyZ)"
    # A clean tree still gets its own checkpoint per tool use: each is a point to rewind to.
    assert hook(stow_bin, claude_pre_bash(repo, transcript, "toolu_02"), env)[:2] == (0, "")
    assert len(log(stow_bin, repo, env)) == len(entries) + 1


def test_no_workspace_is_silent_success_and_failures_never_exit_2(stow_bin, workdir, env):
    elsewhere = workdir / "elsewhere"
    elsewhere.mkdir()
    transcript = workdir / "t.jsonl"
    assert hook(stow_bin, claude_stop(elsewhere, transcript), env) == (0, "", "")
    assert not default_registry(workdir).exists()
    # A payload without a directory: nothing to do.
    rc, out, err = hook(stow_bin, {"hook_event_name": "Stop"}, env)
    assert (rc, out) == (0, "") and "no directory" in err
    # Not JSON, or too large: exit 1 (non-blocking), stderr says why, stdout stays empty.
    rc, out, err = hook(stow_bin, "{not json", env)
    assert (rc, out) == (1, "") and "not JSON" in err and "(invalid_request)" in err
    rc, out, err = hook(stow_bin, json.dumps({"cwd": str(elsewhere), "pad": "x" * (1 << 20)}), env)
    assert (rc, out) == (1, "") and "invalid_request" in err
    # A workspace busy for a while (its capture lock held, as a rewind
    # holds it): the hook waits, then checkpoints; busy past its wait
    # (10 s), exit 1 (not 2: never blocking the agent) with in_progress.
    repo = make_repo(workdir / "repo", env)
    ws = ok(stow_bin, "attach", env=env, cwd=repo)["workspace_id"]
    import fcntl
    import threading

    lock = default_registry(workdir) / ".stow" / "capture-locks" / f"{ws}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        release = threading.Timer(1.5, fcntl.flock, (held, fcntl.LOCK_UN))
        release.start()
        started = time.monotonic()
        rc, out, err = hook(stow_bin, claude_stop(repo, transcript), env)
        waited = time.monotonic() - started
        release.join()
    assert (rc, out, err) == (0, "", "") and waited >= 1.4, (rc, out, err, waited)
    assert log(stow_bin, repo, env)[0]["message"] == f"Stop hook (session {SESSION})"
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        rc, out, err = hook(stow_bin, claude_pre_bash(repo, transcript, "toolu_busy"), env)
    assert (rc, out) == (1, "") and "in_progress" in err


def test_codex_and_cursor_payloads(stow_bin, workdir, env):
    repo = make_repo(workdir / "repo", env)
    ok(stow_bin, "attach", env=env, cwd=repo)
    codex = {
        "type": "agent-turn-complete",
        "thread-id": "b5f6c1d2-0000-4000-8000-000000000001",
        "turn-id": "12345",
        "cwd": str(repo),
        "input-messages": ["Rename foo to bar"],
        "last-assistant-message": "Renamed.",
    }
    assert hook(stow_bin, codex, env, argv_payload=True) == (0, "", "")
    assert log(stow_bin, repo, env)[0]["message"] == (
        "agent-turn-complete hook (session b5f6c1d2-0000-4000-8000-000000000001, turn 12345)"
    )
    cursor = {
        "conversation_id": "c-1",
        "generation_id": "g-7",
        "hook_event_name": "stop",
        "status": "completed",
        "workspace_roots": [str(repo)],
    }
    assert hook(stow_bin, cursor, env) == (0, "", "")
    assert log(stow_bin, repo, env)[0]["message"] == "stop hook (session c-1, turn g-7)"


def readme_block(marker):
    text = README.read_text()
    m = re.search(rf"<!-- hook-config: {marker} -->\n```(\w+)\n(.*?)```", text, re.S)
    assert m, f"README has no {marker} hook configuration"
    return m.group(1), m.group(2)


def test_the_readme_configurations_run_as_written(stow_bin, workdir, env):
    repo = make_repo(workdir / "repo", env)
    ok(stow_bin, "attach", env=env, cwd=repo)
    transcript = workdir / "t.jsonl"
    transcript.write_text("{}\n")

    lang, text = readme_block("claude")
    assert lang == "json"
    settings = json.loads(text)["hooks"]
    assert set(settings) == {"Stop", "PreToolUse"}
    assert settings["PreToolUse"][0]["matcher"] == "Bash"
    payloads = {"Stop": claude_stop(repo, transcript), "PreToolUse": claude_pre_bash(repo, transcript, "toolu_9")}
    for event, groups in settings.items():
        for h in groups[0]["hooks"]:
            assert h["type"] == "command"
            assert hook(stow_bin, payloads[event], env, shell=h["command"], cwd=repo) == (0, "", "")
    assert {e["message"].split(" hook")[0] for e in log(stow_bin, repo, env)} == {"Stop", "PreToolUse"}

    lang, text = readme_block("cursor")
    cfg = json.loads(text)
    assert cfg["version"] == 1
    cursor = {"conversation_id": "c", "generation_id": "g", "hook_event_name": "stop", "workspace_roots": [str(repo)]}
    assert hook(stow_bin, cursor, env, shell=cfg["hooks"]["stop"][0]["command"]) == (0, "", "")

    lang, text = readme_block("codex")
    argv = tomllib.loads(text)["notify"]
    assert argv[0] == "stow-s3"
    payload = json.dumps({"type": "agent-turn-complete", "turn-id": "77", "cwd": str(repo)})
    out = subprocess.run([str(Path(stow_bin).parent / argv[0]), *argv[1:], payload], capture_output=True,
                         text=True, env=env, timeout=120, check=False)
    assert (out.returncode, out.stdout) == (0, ""), out.stderr
    assert log(stow_bin, repo, env)[0]["message"] == "agent-turn-complete hook (turn 77)"
