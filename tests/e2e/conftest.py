"""Shared fixtures for end-to-end tests that drive the real stow-s3 binary."""

import os
import pathlib
import shutil

import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

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


@pytest.fixture
def s3server(stow_bin, tmp_path):
    """A filesystem-backed server on a fresh data directory."""
    from s3server import S3Server

    server = S3Server(stow_bin, tmp_path / "data")
    yield server
    rc = server.stop()
    assert rc == 0, f"server exited with {rc}: {server.proc.stderr.read().decode()}"


@pytest.fixture
def s3(s3server):
    """A boto3 client for the running server."""
    return s3server.client()
