"""Shared fixtures for end-to-end tests that drive the real stow-s3 binary."""

import os
import pathlib
import shutil

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def stow_bin() -> str:
    """Path of the stow-s3 binary under test (STOW_BIN, else target/debug)."""
    path = os.environ.get("STOW_BIN") or str(ROOT / "target" / "debug" / "stow-s3")
    if not os.access(path, os.X_OK):
        pytest.fail(f"stow-s3 binary not found at {path}; run `cargo build` or set STOW_BIN")
    return path


@pytest.fixture
def workdir(tmp_path):
    """A scratch directory removed after the test."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)
