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
