"""Tests run against the real binary: STOW_BIN (the Makefile sets it), else the repository's target/."""

from __future__ import annotations

import os

import pytest

import stow_s3

pytest_plugins = ["pytester"]


def pytest_configure(config: pytest.Config) -> None:
    # Fail loudly (not skip) when there is no binary: these tests are the proof.
    stow_s3.resolve_stow_binary()


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """The binary's default registry lives under an isolated HOME / XDG_CONFIG_HOME."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    yield home


@pytest.fixture
def stow_bin() -> str:
    return stow_s3.resolve_stow_binary()


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
