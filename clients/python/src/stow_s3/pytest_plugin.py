"""pytest plugin (entry point ``pytest11``): private S3 endpoints for tests.

Fixtures:

* ``stow_session`` — an open :class:`stow_s3.Session` of its own per test, closed after it;
* ``stow_s3_client`` — a boto3 S3 client for it (only when boto3 is installed);
* ``stow_s3_server`` — one :class:`stow_s3.Session` shared by the whole test run
  (session scope), closed at the end;
* ``stow_s3_clean`` — that shared session, emptied (:meth:`stow_s3.Session.reset`)
  before each test that asks for it: a clean S3 state per test without a server
  start per test (moto's ``mock_aws``/``/moto-api/reset`` pattern).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .session import Session, open_session


@pytest.fixture
def stow_session() -> Iterator[Session]:
    """A private stow-s3 server (filesystem backend in a temp dir), closed after the test."""
    session = open_session()
    try:
        yield session
    finally:
        session.close()


@pytest.fixture(scope="session")
def stow_s3_server() -> Iterator[Session]:
    """One stow-s3 server for the whole test run (started with ``--allow-reset``), closed at its end.

    Tests that share it see each other's objects; ask for ``stow_s3_clean`` for an empty one."""
    session = open_session()
    try:
        yield session
    finally:
        session.close()


@pytest.fixture
def stow_s3_clean(stow_s3_server: Session) -> Session:
    """The shared ``stow_s3_server``, emptied before this test: no buckets, objects, uploads or receipts."""
    stow_s3_server.reset()
    return stow_s3_server


try:
    import boto3 as _boto3  # noqa: F401
except ImportError:  # pragma: no cover - depends on the environment
    pass
else:

    @pytest.fixture
    def stow_s3_client(stow_session: Session) -> Any:
        """A boto3 S3 client for ``stow_session``."""
        return stow_session.s3_client()
