"""`stow-s3 mcp` startup: help, flag refusals before the directory is
touched, missing buckets, quotas (spec/mcp.md §2, §14 item 13)."""

import pytest

from mcpkit import RawServer, run, session, stow


def test_help_lists_both_profiles(stow_bin):
    out = stow(stow_bin, "mcp", "--help")
    assert out.returncode == 0
    for flag in ("--object-dir", "--bucket", "--create-bucket", "--read-only", "--browser", "--registry-dir"):
        assert flag in out.stdout
    assert "mcp" in stow(stow_bin, "--help").stdout


@pytest.mark.parametrize(
    "extra, word",
    [
        (["--read-only", "--create-bucket"], "read-only"),
        (["--create-bucket", "--max-object-bytes", "65537"], "max-object-bytes"),
        (["--create-bucket", "--max-observations", "257"], "max-observations"),
        (["--create-bucket", "--max-object-bytes", "-1"], "max-object-bytes"),
        (["--create-bucket", "--max-observations", "-3"], "max-observations"),
        (["--create-bucket", "--max-objects", "-1"], "max-objects"),
        (["--create-bucket", "--max-bytes", "-1"], "max-bytes"),
        (["--create-bucket", "--timeout", "0s"], "incompatible"),
        (["--create-bucket", "--registry-dir", ""], "incompatible"),
        (["--create-bucket", "--workspace-id", "w"], "incompatible"),
    ],
)
def test_bad_settings_are_refused_before_the_directory_exists(stow_bin, workdir, extra, word):
    objs = workdir / "objs"
    out = stow(stow_bin, "mcp", "--object-dir", str(objs), "--bucket", "files", *extra)
    assert out.returncode == 2, out.stderr
    assert word in out.stderr
    assert out.stdout == ""
    assert not objs.exists()


@pytest.mark.parametrize("bucket", ["", "Bad_Name", "ab"])
def test_bad_bucket_names(stow_bin, workdir, bucket):
    objs = workdir / "objs"
    out = stow(stow_bin, "mcp", "--object-dir", str(objs), "--bucket", bucket, "--create-bucket")
    assert out.returncode == 2 and "bucket" in out.stderr
    assert not objs.exists()


def test_object_flags_in_workspace_mode_are_incompatible(stow_bin, workdir):
    out = stow(stow_bin, "mcp", "--registry-dir", str(workdir), "--workspace-id", "w", "--create-bucket=false")
    assert out.returncode == 2 and "incompatible" in out.stderr
    out = stow(stow_bin, "mcp", "--registry-dir", str(workdir), "--workspace-id", "w", "--browser")
    assert out.returncode == 2 and "incompatible" in out.stderr


def test_missing_directory_or_bucket_needs_consent(stow_bin, workdir):
    objs = workdir / "objs"
    out = stow(stow_bin, "mcp", "--object-dir", str(objs), "--bucket", "files")
    assert out.returncode == 1 and "--create-bucket" in out.stderr and out.stdout == ""
    assert not objs.exists()

    async def make():
        async with session(stow_bin, objs, bucket="first"):
            pass

    run(make())
    out = stow(stow_bin, "mcp", "--object-dir", str(objs), "--bucket", "second")
    assert out.returncode == 1 and "second" in out.stderr and "--create-bucket" in out.stderr
    out = stow(stow_bin, "mcp", "--object-dir", str(objs), "--bucket", "second", "--read-only")
    assert out.returncode == 1

    async def consent():
        async with session(stow_bin, objs, bucket="second") as s:
            assert (await s.read("k"))["absent"] is True

    run(consent())


def test_store_over_quota_refuses_to_open(stow_bin, workdir):
    objs = workdir / "objs"

    async def fill():
        async with session(stow_bin, objs) as s:
            for i in range(3):
                await s.save(f"k{i}", b"x", f"r{i}", replace=True)
            over = await s.save("k3", b"x", "r3", replace=True)
            assert over["outcome"] == "committed"

    run(fill())
    srv = RawServer(stow_bin, objs, create=False, extra=["--max-objects", "2"])
    assert srv.wait() == 1
    assert b"quota" in srv.stderr

    async def quota():
        async with session(stow_bin, objs, create=False, extra=["--max-objects", "5"]) as s:
            assert (await s.save("k4", b"x", "r4", replace=True))["outcome"] == "committed"
            full = await s.save("k5", b"x", "r5", replace=True)
            assert (full["outcome"], full["error"]["code"]) == ("not_committed", "quota_exceeded")

    run(quota())
