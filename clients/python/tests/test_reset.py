"""``Session.reset()`` and the ``stow_s3_server``/``stow_s3_clean`` fixtures, through the package's
public names only: a suite of 200 tests on one server, each seeing an empty one."""

from __future__ import annotations

import pytest
from test_plugin import _plugin_args

import stow_s3

SUITE = """
import pytest

SEEN = set()


@pytest.fixture(scope="session")
def s3(stow_s3_server):
    return stow_s3_server.s3_client()


@pytest.mark.parametrize("n", range(200))
def test_sees_an_empty_server(stow_s3_clean, s3, n):
    SEEN.add(stow_s3_clean.pid)
    assert s3.list_buckets()["Buckets"] == []
    # The same names every time: nothing of the previous test is left.
    s3.create_bucket(Bucket="shared")
    assert s3.list_objects_v2(Bucket="shared")["KeyCount"] == 0
    assert s3.list_multipart_uploads(Bucket="shared").get("Uploads", []) == []
    s3.put_object(Bucket="shared", Key=f"object-{n}", Body=b"x" * (n * 700))
    upload = s3.create_multipart_upload(Bucket="shared", Key="in-flight")["UploadId"]
    s3.upload_part(Bucket="shared", Key="in-flight", UploadId=upload, PartNumber=1, Body=b"part")
    s3.create_bucket(Bucket=f"only-in-{n}")


def test_zz_one_server_served_them_all(stow_s3_server):
    assert SEEN == {stow_s3_server.pid}
"""


def test_two_hundred_tests_each_see_an_empty_server(pytester: pytest.Pytester) -> None:
    pytest.importorskip("boto3")
    pytester.makepyfile(test_clean_suite=SUITE)
    pytester.runpytest(*_plugin_args(), "-p", "no:randomly").assert_outcomes(passed=201)


def test_reset_reports_what_it_removed() -> None:
    pytest.importorskip("boto3")
    with stow_s3.with_session() as session:
        bucket = session.create_bucket()
        s3 = session.s3_client()
        s3.put_object(Bucket=bucket, Key="a", Body=b"12345")
        s3.put_object(Bucket=bucket, Key="b", Body=b"x" * 100_000)
        s3.create_multipart_upload(Bucket=bucket, Key="c")
        assert session.reset() == {
            "reset": True, "buckets": 1, "objects": 2, "bytes": 100_005, "uploads": 1, "receipts": 0,
        }
        assert s3.list_buckets()["Buckets"] == []
        assert session.reset()["buckets"] == 0
        # Still serving, the same names free again.
        assert session.create_bucket(bucket) == bucket
        s3.put_object(Bucket=bucket, Key="a", Body=b"again")
        assert s3.get_object(Bucket=bucket, Key="a")["Body"].read() == b"again"


def test_memory_sessions_reset_too() -> None:
    with stow_s3.with_session(backend="memory") as session:
        session.create_bucket("kept-until-reset")
        assert session.reset()["buckets"] == 1
        assert session.reset()["buckets"] == 0


def test_a_session_started_without_reset_refuses_it() -> None:
    pytest.importorskip("boto3")
    with stow_s3.with_session(allow_reset=False) as session:
        session.create_bucket("stays")
        with pytest.raises(stow_s3.StowSessionError) as caught:
            session.reset()
        assert caught.value.code == "MethodNotAllowed"
        assert "--allow-reset" in str(caught.value)
        # Nothing changed.
        assert [b["Name"] for b in session.s3_client().list_buckets()["Buckets"]] == ["stays"]


def test_reset_after_close_is_refused() -> None:
    session = stow_s3.open_session()
    session.close()
    with pytest.raises(stow_s3.StowSessionError) as caught:
        session.reset()
    assert caught.value.code == "closed"
