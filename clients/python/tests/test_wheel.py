"""The package builds as one wheel that carries the stow-s3 binary (maturin,
`bindings = "bin"`): installed into a fresh venv, away from the repository
and without STOW_BIN, it finds its own binary and serves a session."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1]
REPO = PACKAGE.parents[1]
# Read at import, before a fixture points HOME at a scratch directory:
# rustup and cargo find their toolchain and registry through it.
REAL_HOME = os.path.expanduser("~")

PROBE = """
import json, urllib.request
from stow_s3 import with_session
from stow_s3._binary import resolve_stow_binary_detailed
found = resolve_stow_binary_detailed()
with with_session() as s:
    health = urllib.request.urlopen(s.endpoint + "/_stow/health", timeout=10).status
print(json.dumps({"path": str(found.path), "source": found.source, "health": health}))
"""


def test_the_wheel_carries_the_binary(tmp_path):
    maturin = shutil.which("maturin")
    if maturin is None:
        pytest.skip("maturin is not installed (.ci/run installs it from tests/e2e/requirements.txt)")
    # The dev profile reuses the debug build make test already made.
    env = {
        **os.environ,
        "CARGO_TARGET_DIR": os.environ.get("CARGO_TARGET_DIR", str(REPO / "target")),
        "RUSTUP_HOME": os.environ.get("RUSTUP_HOME", os.path.join(REAL_HOME, ".rustup")),
        "CARGO_HOME": os.environ.get("CARGO_HOME", os.path.join(REAL_HOME, ".cargo")),
    }
    built = subprocess.run([maturin, "build", "--profile", "dev", "--out", str(tmp_path / "wheels")],
                           cwd=PACKAGE, env=env, timeout=600, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "wheels").glob("stow_s3-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=120)
    py = tmp_path / "venv" / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", str(wheel)],
                   check=True, timeout=300)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("STOW_", "PYTHONPATH"))}
    clean["PATH"] = "/usr/bin:/bin"
    out = subprocess.run([str(py), "-c", PROBE], cwd=tmp_path, env=clean,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    import json
    got = json.loads(out.stdout)
    assert got["health"] == 200
    assert pathlib.Path(got["path"]).is_relative_to(tmp_path / "venv"), got
