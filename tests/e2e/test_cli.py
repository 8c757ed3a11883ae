"""The binary as a user runs it: version, help, JSON on stdout, exit codes."""

import json
import subprocess


def run(stow_bin, *args):
    return subprocess.run([stow_bin, *args], capture_output=True, text=True, timeout=60)


def test_version_and_help(stow_bin):
    out = run(stow_bin, "--version")
    assert out.returncode == 0
    assert out.stdout.startswith("stow-s3 ")
    assert "receipts" in run(stow_bin, "--help").stdout


def test_refusal_is_one_json_document_with_a_code(stow_bin, workdir):
    missing = workdir / "nothing-here"
    out = run(stow_bin, "receipts", "list", "--data-dir", str(missing))
    assert out.returncode == 1
    doc = json.loads(out.stdout)
    assert doc["error"]["code"] == "no_such_store"
    assert not missing.exists()


def test_usage_error_exits_2(stow_bin):
    out = run(stow_bin, "receipts", "frobnicate")
    assert out.returncode == 2
    assert out.stdout == ""


def test_logs_to_a_file_are_plain_text(stow_bin, workdir):
    """Logs go to stderr; captured (not a terminal) they carry no colour
    escapes, so a log file or an MCP host's captured stderr reads plainly."""
    import os

    (workdir / "src").mkdir()
    (workdir / "src" / "a.txt").write_text("a\n")
    task = workdir / "task.json"
    task.write_text(json.dumps({"version": 1, "root": str(workdir / "w"), "registry_dir": str(workdir / "reg"),
                                "inputs": [{"source": str(workdir / "src"), "destination": "."}]}))
    out = subprocess.run([stow_bin, "workspace", "prepare", "--manifest", str(task)], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "STOW_LOG": "debug"})
    assert out.returncode == 0 and json.loads(out.stdout)["seeded_objects"] == 1
    assert "DEBUG" in out.stderr or "INFO" in out.stderr, out.stderr
    assert "\x1b[" not in out.stderr, out.stderr[:300]
