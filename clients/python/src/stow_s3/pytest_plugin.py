"""pytest plugin (entry point ``pytest11``): a private S3 endpoint per test.

Fixtures:

* ``stow_session`` — an open :class:`stow_s3.Session`, closed after the test;
* ``stow_s3_client`` — a boto3 S3 client for it (only when boto3 is installed).
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


try:
    import boto3 as _boto3  # noqa: F401
except ImportError:  # pragma: no cover - depends on the environment
    pass
else:

    @pytest.fixture
    def stow_s3_client(stow_session: Session) -> Any:
        """A boto3 S3 client for ``stow_session``."""
        return stow_session.s3_client()
