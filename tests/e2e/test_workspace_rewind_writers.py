"""Rewinding while something else writes, through the real binary (issue
27): a concurrent writer never loses a write, a file written after the
rewind moved it aside is kept, and read-only directories (run as an
unprivileged user) are opened for the steps inside them and closed again,
a write into one going back to its path."""

import json
import os
import pathlib
import shutil
import stat
import subprocess
import tempfile
import threading
import time

from test_workspace_attach import (  # noqa: F401  (env is a fixture)
    default_registry,
    env,
    ok,
    refused,
)


def rewind_in_background(stow_bin, repo, env, cp, fault, **user):
    """Starts `workspace rewind --to cp` in `repo`, paused at the test fault
    point `fault` (`point@ms`) so a writer surely overlaps it; `user` runs
    it as another user (`subprocess.Popen`'s user/group arguments)."""
    return subprocess.Popen([stow_bin, "workspace", "rewind", "--to", cp], cwd=repo,
                            env={**env, "STOW_TEST_FAULT": fault}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **user)


def test_a_concurrent_writer_never_loses_a_write(stow_bin, workdir, env):
    """A writer rewrites files (in place and by rename) from the moment the
    rewind's undo checkpoint is taken (the rewind pauses 1.5 s after its
    journal, at a test fault point, so the writer surely overlaps it):
    every file's last write is in the tree at the end, every file nobody
    wrote is the checkpoint's, and the paths left alone are reported."""
    repo = workdir / "repo"
    (repo / "d").mkdir(parents=True)
    names = [f"d/f{i:04}.txt" for i in range(600)]
    for n in names:
        (repo / n).write_text("original " * 50)
    ws = ok(stow_bin, "attach", "--root", repo, env=env)["workspace_id"]
    cp = ok(stow_bin, "checkpoint", env=env, cwd=repo)["checkpoint_id"]
    for n in names:
        (repo / n).write_text("agent edit " * 60)

    proc = rewind_in_background(stow_bin, repo, env, cp, "rewind.journaled@1500")
    journal = default_registry(workdir) / ".stow" / "rewind" / f"{ws}.json"
    deadline = time.monotonic() + 60
    while not journal.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.01)

    last = {}
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            n = names[(i * 7) % len(names)]
            data = f"writer {i} ".encode() * 40
            if i % 2:
                with open(repo / n, "wb") as f:
                    f.write(data)
            else:
                tmp = repo / "d" / f".w{i}"
                tmp.write_bytes(data)
                os.replace(tmp, repo / n)
            last[n] = data
            i += 1
            time.sleep(0.002)

    t = threading.Thread(target=writer)
    t.start()
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        stop.set()
        t.join()
    doc = json.loads(out)
    assert proc.returncode == 1, (out, err)
    assert "workspace_changed" in err
    conflicts = {c["path"] for c in doc["conflicts"]}
    assert conflicts and conflicts <= set(last), conflicts - set(last)
    assert doc["written"] + len(conflicts) >= len(names) - len(last)
    for n, data in last.items():
        assert (repo / n).read_bytes() == data, n
    for n in set(names) - set(last):
        assert (repo / n).read_text() == "original " * 50, n
    assert not (repo / ".stow" / "rewind").exists()


def test_a_file_written_after_it_was_moved_aside_is_kept_when_its_directory_went(stow_bin, workdir, env):
    """A process appends to logs/app.log while the rewind removes it and
    its directory (the checkpoint has no logs/): its bytes cannot go back
    to their path, so they are kept under .stow/kept, which the conflict
    names, and survive the stage's removal."""
    repo = workdir / "repo"
    repo.mkdir()
    (repo / "base").write_text("base\n")
    ok(stow_bin, "attach", "--root", repo, env=env)
    cp = ok(stow_bin, "checkpoint", env=env, cwd=repo)["checkpoint_id"]
    (repo / "logs").mkdir()
    log = open(repo / "logs" / "app.log", "ab")
    log.write(b"started\n")
    log.flush()
    proc = rewind_in_background(stow_bin, repo, env, cp, "rewind.step@1500")
    deadline = time.monotonic() + 60
    while (repo / "logs" / "app.log").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.01)
    # Moved aside, not yet deleted: the writer's descriptor still reaches it.
    log.write(b"IMPORTANT\n")
    log.close()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "workspace_changed" in err, (out, err)
    doc = json.loads(out)
    assert doc["error"]["code"] == "workspace_changed" and "rewind" in doc["error"]["message"], doc
    [conflict] = doc["conflicts"]
    assert conflict["path"] == "logs/app.log", doc
    kept = conflict["reason"].split("kept at ", 1)[1]
    assert kept.startswith(str(repo / ".stow" / "kept")), conflict
    assert open(kept, "rb").read() == b"started\nIMPORTANT\n"
    assert not (repo / "logs").exists() and (repo / "base").read_text() == "base\n"
    assert not (repo / ".stow" / "rewind").exists()
    # Detach will not delete what was kept; moved out, it goes ahead.
    refused(stow_bin, "detach", env=env, cwd=repo, code="refused")
    shutil.rmtree(repo / ".stow" / "kept")
    ok(stow_bin, "detach", env=env, cwd=repo)
    assert not (repo / ".stow").exists()


class Unprivileged:
    """A scratch tree and registry for runs as an unprivileged user: uid
    65534 when the test runs as root (whose writes ignore modes), else the
    test's own user."""

    def __init__(self, stow_bin, env):
        self.as_root = os.geteuid() == 0
        self.base = pathlib.Path(tempfile.mkdtemp(prefix="stow-ro-"))
        (self.base / "home").mkdir()
        self.repo = self.base / "repo"
        self.repo.mkdir()
        self.user = {"user": 65534, "group": 65534, "extra_groups": []} if self.as_root else {}
        self.env = {**env, "HOME": str(self.base / "home"), "XDG_CONFIG_HOME": str(self.base / "xdg")}
        self.bin = stow_bin

    def give(self, path):
        if self.as_root:
            for p in [path, *path.rglob("*")]:
                os.lchown(p, 65534, 65534)

    def stow(self, *args):
        out = subprocess.run([self.bin, "workspace", *args], cwd=self.repo, env=self.env, capture_output=True,
                             text=True, timeout=120, **self.user)
        return out.returncode, json.loads(out.stdout), out.stderr

    def rewind_in_background(self, cp, fault):
        return rewind_in_background(self.bin, self.repo, self.env, cp, fault, **self.user)

    def cleanup(self):
        for p in [self.base, *self.base.rglob("*")]:
            if p.is_dir() and not p.is_symlink():
                os.chmod(p, 0o755)
        shutil.rmtree(self.base, ignore_errors=True)


def test_a_read_only_directory_is_rewound_inside_and_keeps_its_mode(stow_bin, workdir, env):
    """Directories whose mode keeps their owner from writing (0555) are
    opened up before the steps inside them and closed again after: to the
    checkpoint's mode, or (outside --paths) to their own."""
    u = Unprivileged(stow_bin, env)
    repo = u.repo
    try:
        (repo / "ro").mkdir()
        (repo / "rw").mkdir()
        (repo / "ro" / "f").write_text("v1")
        (repo / "rw" / "g").write_text("v1")
        os.chmod(repo / "ro", 0o555)
        u.give(u.base)
        assert u.stow("attach")[0] == 0
        rc, doc, err = u.stow("checkpoint")
        assert rc == 0, err
        cp = doc["checkpoint_id"]
        # The agent's edits: ro/ stays read-only, rw/ becomes read-only.
        os.chmod(repo / "ro", 0o755)
        (repo / "ro" / "f").write_text("v2")
        (repo / "ro" / "h").write_text("new")
        (repo / "rw" / "g").write_text("v2")
        u.give(repo)
        os.chmod(repo / "ro", 0o555)
        os.chmod(repo / "rw", 0o555)
        rc, doc, err = u.stow("rewind", "--to", cp)
        assert rc == 0 and doc["conflicts"] == [], (doc, err)
        assert (repo / "ro" / "f").read_text() == "v1" and not (repo / "ro" / "h").exists()
        assert (repo / "rw" / "g").read_text() == "v1"
        assert stat.S_IMODE(os.stat(repo / "ro").st_mode) == 0o555
        assert stat.S_IMODE(os.stat(repo / "rw").st_mode) == 0o755
        rc, doc, err = u.stow("status")
        assert rc == 0 and doc["clean"] is True, (doc, err)
        # A read-only directory the checkpoint does not hold, rewound
        # inside by --paths: it keeps its own mode.
        (repo / "late").mkdir()
        (repo / "late" / "x").write_text("x")
        u.give(repo / "late")
        os.chmod(repo / "late", 0o555)
        rc, doc, err = u.stow("rewind", "--to", cp, "--paths", "late/x")
        assert rc == 0 and doc["deleted"] == 1, (doc, err)
        assert not (repo / "late" / "x").exists()
        assert stat.S_IMODE(os.stat(repo / "late").st_mode) == 0o555
    finally:
        u.cleanup()


def test_a_write_into_a_read_only_directory_during_a_rewind_goes_back_to_its_path(stow_bin, workdir, env):
    """A writer holding ro/f open writes after the rewind replaced it: the
    written file goes back to its path (the directory is still open then),
    not to .stow/kept, and the directory is closed again after."""
    u = Unprivileged(stow_bin, env)
    repo = u.repo
    try:
        (repo / "ro").mkdir()
        (repo / "ro" / "f").write_text("v1\n")
        os.chmod(repo / "ro", 0o555)
        u.give(u.base)
        assert u.stow("attach")[0] == 0
        cp = u.stow("checkpoint")[1]["checkpoint_id"]
        os.chmod(repo / "ro", 0o755)
        (repo / "ro" / "f").write_text("v2 agent\n")
        u.give(repo)
        os.chmod(repo / "ro", 0o555)
        ino = os.stat(repo / "ro" / "f").st_ino
        writer = open(repo / "ro" / "f", "a")
        proc = u.rewind_in_background(cp, "rewind.step@1500")
        deadline = time.monotonic() + 60
        while os.stat(repo / "ro" / "f").st_ino == ino:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.01)
        writer.write("IMPORTANT\n")
        writer.close()
        out, err = proc.communicate(timeout=120)
        doc = json.loads(out)
        assert proc.returncode == 1 and [c["path"] for c in doc["conflicts"]] == ["ro/f"], (doc, err)
        assert "put back" in doc["conflicts"][0]["reason"], doc
        assert (repo / "ro" / "f").read_text() == "v2 agent\nIMPORTANT\n"
        assert not (repo / ".stow" / "kept").exists()
        assert stat.S_IMODE(os.stat(repo / "ro").st_mode) == 0o555
    finally:
        u.cleanup()
