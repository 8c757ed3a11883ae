"""A checkpoint holding a 2 GiB file exports and imports with the process's
peak RSS under 100 MiB: export, preview and import stream every payload."""

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from test_workspace import manifest, ok

SIZE = 2 << 30
MIB = 1 << 20


def block(i):
    """1 MiB of incompressible bytes, different for every i."""
    seed = hashlib.sha256(i.to_bytes(8, "little")).digest()
    return hashlib.shake_256(seed).digest(MIB)


def peak_rss_mib(argv):
    """Runs argv in a fresh Python whose only child is argv; returns
    (returncode, stdout, peak RSS of the child in MiB)."""
    probe = (
        "import resource, subprocess, sys\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "sys.stderr.write(p.stderr)\n"
        "print(p.returncode)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "print(p.stdout)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe, *map(str, argv)],
                         capture_output=True, text=True, timeout=900)
    rc, kib, stdout = out.stdout.split("\n", 2)
    return int(rc), stdout, int(kib) / 1024, out.stderr


def test_two_gib_checkpoint_streams_through_export_and_import(stow_bin, workdir):
    free = shutil.disk_usage(workdir).free
    if free < 5 * SIZE:
        pytest.skip(f"needs {5 * SIZE >> 30} GiB free for a 2 GiB checkpoint, {free >> 30} GiB free here")
    (workdir / "in").mkdir()
    (workdir / "in" / "small.txt").write_text("small")
    m = manifest(workdir / "task.json", root="ws", registry_dir="reg",
                 max_bytes=3 * SIZE, inputs=[{"source": "in", "destination": "."}])
    p = ok(stow_bin, "prepare", "--manifest", m)
    digest = hashlib.sha256()
    with open(workdir / "ws" / "big.bin", "wb") as f:
        for i in range(SIZE // MIB):
            b = block(i)
            digest.update(b)
            f.write(b)
    reg = ["--registry-dir", workdir / "reg"]
    limits = ["--max-bytes", 3 * SIZE]
    c = ok(stow_bin, "checkpoint", "--id", p["workspace_id"], *reg)
    assert c["bytes"] == SIZE + 5
    os.remove(workdir / "ws" / "big.bin")

    archive = workdir / "big.tar.gz"
    rc, out, rss, err = peak_rss_mib([stow_bin, "workspace", "export", "--checkpoint-id",
                                      c["checkpoint_id"], "--output", archive, *limits, *reg])
    assert rc == 0, err
    assert json.loads(out)["files"] == 2
    assert rss < 100, f"export peak RSS {rss:.1f} MiB"

    rc, out, rss, err = peak_rss_mib([stow_bin, "workspace", "preview", "--archive", archive, *limits])
    assert rc == 0, err
    assert {f["path"]: f["size"] for f in json.loads(out)["files"]} == {"big.bin": SIZE, "small.txt": 5}
    assert rss < 100, f"preview peak RSS {rss:.1f} MiB"

    rc, out, rss, err = peak_rss_mib([stow_bin, "workspace", "import", "--archive", archive, *limits,
                                      "--registry-dir", workdir / "reg2"])
    assert rc == 0, err
    assert json.loads(out)["bytes"] == SIZE + 5
    assert rss < 100, f"import peak RSS {rss:.1f} MiB"
    os.remove(archive)

    # The imported payload is the file, byte for byte.
    r = ok(stow_bin, "restore", "--checkpoint-id", c["checkpoint_id"], "--root", workdir / "back",
           "--registry-dir", workdir / "reg2")
    back = hashlib.sha256()
    with open(os.path.join(r["root"], "big.bin"), "rb") as f:
        while chunk := f.read(8 * MIB):
            back.update(chunk)
    assert back.hexdigest() == digest.hexdigest()
