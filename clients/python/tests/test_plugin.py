"""The pytest plugin's fixtures, used from a sample test file."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest


def _plugin_args() -> list[str]:
    installed = any(ep.name == "stow_s3" for ep in entry_points(group="pytest11"))
    return [] if installed else ["-p", "stow_s3.pytest_plugin"]


def test_fixtures_from_a_sample_file(pytester: pytest.Pytester) -> None:
    pytest.importorskip("boto3")
    pytester.makepyfile(
        """
        import os
        import urllib.request

        def test_session(stow_session):
            with urllib.request.urlopen(stow_session.endpoint + "/_stow/health") as r:
                assert r.status == 200
            assert os.path.isdir(stow_session.data_dir)

        def test_client(stow_s3_client):
            stow_s3_client.create_bucket(Bucket="fixture-bucket")
            stow_s3_client.put_object(Bucket="fixture-bucket", Key="k", Body=b"v")
            assert stow_s3_client.get_object(Bucket="fixture-bucket", Key="k")["Body"].read() == b"v"

        def test_isolated(stow_s3_client):
            names = [b["Name"] for b in stow_s3_client.list_buckets()["Buckets"]]
            assert "fixture-bucket" not in names
        """
    )
    result = pytester.runpytest(*_plugin_args())
    result.assert_outcomes(passed=3)
