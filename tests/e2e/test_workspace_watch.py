"""`stow-s3 workspace watch`: a long-lived inotify watch over a workspace's
tree that serves `workspace checkpoint` over a Unix socket
(`<registry>/.stow/watch/<ws>.sock`, owned through the flock on
`<ws>.lock`). Driven through the real binary: readiness and shutdown,
checkpoints that stay equal to the tree under random edits, a stale socket
left by kill -9, a second watcher refused, keyed captures, `workspace serve`
hosting the watch, and an unknown workspace.

That a capture went through a watcher is seen from the watcher process
itself: a CLI capture runs without a monitor, so only a capture served by
the watcher leaves an inotify descriptor in the watcher (read from
/proc/PID/fdinfo), watching every directory of the tree."""

import hashlib
import json
import os
import pathlib
import random
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time

import pytest
from s3server import WorkspaceServer

CLI_TIMEOUT = 60


# ---------------------------------------------------------------- helpers


def ws(stow_bin, *args, check=True):
    """Runs `stow-s3 workspace ...`; returns (returncode, parsed stdout or None, stderr)."""
    out = subprocess.run([stow_bin, "workspace", *[str(a) for a in args]],
                         check=False, capture_output=True, text=True, timeout=CLI_TIMEOUT)
    doc = json.loads(out.stdout) if out.stdout.strip() else None
    if check:
        assert out.returncode == 0, f"{args}: rc={out.returncode} {out.stdout} {out.stderr}"
    return out.returncode, doc, out.stderr


def prepare(stow_bin, workdir, files=None, modes=None, dirs=()):
    """Prepares a workspace (root workdir/ws, registry workdir/reg) seeded
    from `files` ({rel: bytes}), with `modes` ({rel: mode}) and extra empty
    `dirs`."""
    src = workdir / "src"
    src.mkdir(parents=True, exist_ok=True)
    for rel, body in (files or {}).items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(body)
    for rel, mode in (modes or {}).items():
        os.chmod(src / rel, mode)
    for rel in dirs:
        (src / rel).mkdir(parents=True, exist_ok=True)
    manifest = workdir / "task.json"
    manifest.write_text(json.dumps({
        "version": 1, "root": "ws", "registry_dir": "reg",
        "inputs": [{"source": "src", "destination": "."}],
    }))
    _, doc, _ = ws(stow_bin, "prepare", "--manifest", manifest)
    return doc


def socket_path(reg, ws_id) -> pathlib.Path:
    return pathlib.Path(reg).resolve() / ".stow" / "watch" / f"{ws_id}.sock"


def lock_path(reg, ws_id) -> pathlib.Path:
    return pathlib.Path(reg).resolve() / ".stow" / "watch" / f"{ws_id}.lock"


def is_socket(path) -> bool:
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def answers(path) -> bool:
    """Whether a process accepts connections on the Unix socket at `path`
    (a path past the sun_path limit is reached through /proc/self/fd)."""
    path = pathlib.Path(path)
    dirfd = None
    target = str(path)
    if len(target) > 100:
        dirfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        target = f"/proc/self/fd/{dirfd}/{path.name}"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(5)
        s.connect(target)
        return True
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    finally:
        s.close()
        if dirfd is not None:
            os.close(dirfd)


def flock_holders(path) -> set:
    """PIDs holding a flock on `path`, from /proc/locks."""
    ino = os.stat(path).st_ino
    holders = set()
    with open("/proc/locks") as f:
        for line in f:
            parts = line.split()
            if "FLOCK" not in parts:
                continue
            i = parts.index("FLOCK")
            try:
                pid, dev_ino = int(parts[i + 3]), parts[i + 4]
            except (IndexError, ValueError):
                continue
            if int(dev_ino.rsplit(":", 1)[1]) == ino:
                holders.add(pid)
    return holders


def inotify_watches(pid):
    """The number of inotify watches process `pid` holds, or None when it
    has no inotify descriptor."""
    total, found = 0, False
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            if os.readlink(f"{fd_dir}/{fd}") != "anon_inode:inotify":
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                total += sum(1 for line in f if line.startswith("inotify wd:"))
            found = True
        except FileNotFoundError:
            continue
    return total if found else None


def snapshot(root):
    """{files: {rel: (sha256, size, mode)}, dirs: {rel}} of a tree, without
    the root's `.stow`."""
    root = pathlib.Path(root)
    files, dirs = {}, set()
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d != ".stow"]
        for d in dirnames:
            dirs.add(os.path.normpath(os.path.join(rel_dir, d)))
        for name in filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            assert stat.S_ISREG(st.st_mode), p
            with open(p, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            files[os.path.normpath(os.path.join(rel_dir, name))] = (
                digest, st.st_size, stat.S_IMODE(st.st_mode))
    return {"files": files, "dirs": dirs}


def differences(want, got):
    """A short description of how two snapshots differ."""
    out = []
    for rel in sorted(set(want["files"]) | set(got["files"])):
        a, b = want["files"].get(rel), got["files"].get(rel)
        if a != b:
            out.append(f"file {rel}: tree {a and (a[1], oct(a[2]), a[0][:8])} "
                       f"restored {b and (b[1], oct(b[2]), b[0][:8])}")
    for rel in sorted(want["dirs"] ^ got["dirs"]):
        out.append(f"dir {rel}: {'only in tree' if rel in want['dirs'] else 'only restored'}")
    return out[:20]


class Restorer:
    """Restores checkpoints into fresh roots and compares them with a tree."""

    def __init__(self, stow_bin, workdir, reg):
        self.stow_bin, self.reg = stow_bin, reg
        self.base = workdir / "restored"
        self.base.mkdir(exist_ok=True)
        self.n = 0

    def check(self, checkpoint, root, context=""):
        """Restores `checkpoint` (a `workspace checkpoint` result) and
        asserts it equals the tree at `root`, and that its counts do."""
        self.n += 1
        new_root = self.base / f"r{self.n}"
        assert not new_root.exists()
        _, r, _ = ws(self.stow_bin, "restore", "--checkpoint-id", checkpoint["checkpoint_id"],
                     "--root", new_root, "--registry-dir", self.reg)
        want, got = snapshot(root), snapshot(new_root)
        diff = differences(want, got)
        assert not diff, f"{context}: checkpoint {checkpoint['checkpoint_id']} is not the tree:\n" + "\n".join(diff)
        assert checkpoint["files"] == len(want["files"]), context
        assert checkpoint["bytes"] == sum(s for _, s, _ in want["files"].values()), context
        assert r["workspace_id"] != checkpoint["workspace_id"]
        shutil.rmtree(new_root, ignore_errors=True)
        return want


def tree_dirs(root) -> int:
    """Directories of the tree, the root included (what a watch covers)."""
    return len(snapshot_dirs(root)) + 1


def snapshot_dirs(root):
    root = pathlib.Path(root)
    dirs = set()
    for dirpath, dirnames, _ in os.walk(root):
        if pathlib.Path(dirpath) == root:
            dirnames[:] = [d for d in dirnames if d != ".stow"]
        for d in dirnames:
            dirs.add(os.path.relpath(os.path.join(dirpath, d), root))
    return dirs


class Watcher:
    """A running `stow-s3 workspace watch`, its readiness line read."""

    def __init__(self, stow_bin, ws_id, reg, log, env_extra=None):
        self.log = log
        self.err = open(log, "wb")  # noqa: SIM115 (closed by cleanup)
        self.proc = subprocess.Popen(
            [stow_bin, "workspace", "watch", "--id", ws_id, "--registry-dir", str(reg)],
            stdout=subprocess.PIPE, stderr=self.err, env={**os.environ, **(env_extra or {})})
        ready, _, _ = select.select([self.proc.stdout], [], [], 20)
        if not ready:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"workspace watch printed nothing in 20 s: {self.stderr()}")
        line = self.proc.stdout.readline()
        if not line:
            rc = self.proc.wait(timeout=10)
            raise AssertionError(f"workspace watch exited (rc={rc}) before ready: {self.stderr()}")
        self.ready = json.loads(line)

    @property
    def pid(self):
        return self.proc.pid

    def stderr(self) -> str:
        self.err.flush()
        return pathlib.Path(self.log).read_text(errors="replace")

    def stop(self, sig=signal.SIGTERM, timeout=10):
        """Sends `sig` and returns (returncode, seconds to exit, the rest of stdout)."""
        start = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"workspace watch did not exit {timeout} s after signal {sig}")
        took = time.monotonic() - start
        rest = self.proc.stdout.read()
        return self.proc.returncode, took, rest

    def kill9(self):
        self.proc.kill()
        self.proc.wait()

    def cleanup(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.err.close()


@pytest.fixture
def watch(stow_bin, workdir, request):
    """`watch(ws_id)` starts a watcher over workdir/reg; every watcher still
    running at the end is killed."""
    started = []

    def cleanup():
        for w in started:
            w.cleanup()

    request.addfinalizer(cleanup)

    def start(ws_id, reg=None, env_extra=None):
        w = Watcher(stow_bin, ws_id, reg or workdir / "reg", workdir / f"watch-{len(started)}.log", env_extra)
        started.append(w)
        return w

    return start


def checkpoint(stow_bin, reg, ws_id, *extra):
    return ws(stow_bin, "checkpoint", "--id", ws_id, "--registry-dir", reg, *extra)[1]


def second_watch(stow_bin, reg, ws_id):
    """Runs a `workspace watch` expected to be refused (it must exit)."""
    out = subprocess.run([stow_bin, "workspace", "watch", "--id", ws_id, "--registry-dir", str(reg)],
                         check=False, capture_output=True, text=True, timeout=20)
    return out


# ------------------------------------------------------------ random edits

MODES = (0o644, 0o755, 0o600)


class Editor:
    """Random edits of a tree (never under the root's `.stow`)."""

    def __init__(self, root, rnd):
        self.root, self.rnd, self.n = pathlib.Path(root), rnd, 0

    def _name(self, prefix):
        self.n += 1
        return f"{prefix}{self.n}"

    def _files(self):
        s = snapshot_dirs(self.root)
        files = []
        for d in [""] + sorted(s):
            for e in sorted(os.listdir(self.root / d)):
                p = os.path.join(d, e)
                if d == "" and e == ".stow":
                    continue
                if (self.root / p).is_file():
                    files.append(p)
        return files

    def _dirs(self):
        return sorted(snapshot_dirs(self.root))

    def _write(self, path, body, mode=None):
        path.write_bytes(body)
        os.chmod(path, mode if mode is not None else self.rnd.choice(MODES))

    def create(self):
        d = self.rnd.choice([""] + self._dirs())
        rel = os.path.join(d, self._name("new") + ".txt")
        self._write(self.root / rel, self.rnd.randbytes(self.rnd.choice([0, 1, 100, 4000])))
        return f"create {rel}"

    def modify_same_size(self):
        files = [f for f in self._files() if (self.root / f).stat().st_size > 0]
        if not files:
            return self.create()
        rel = self.rnd.choice(files)
        p = self.root / rel
        st = p.stat()
        off = self.rnd.randrange(st.st_size)
        with open(p, "r+b") as f:
            f.seek(off)
            b = f.read(1)
            f.seek(off)
            f.write(bytes([b[0] ^ 0xFF]))
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert p.stat().st_mtime_ns == st.st_mtime_ns and p.stat().st_size == st.st_size
        return f"modify in place {rel} @ {off} (size and mtime kept)"

    def modify_resize(self):
        files = self._files()
        if not files:
            return self.create()
        rel = self.rnd.choice(files)
        with open(self.root / rel, "ab") as f:
            f.write(self.rnd.randbytes(self.rnd.randint(1, 500)))
        return f"append {rel}"

    def rename_file(self):
        files = self._files()
        if not files:
            return self.create()
        rel = self.rnd.choice(files)
        d = self.rnd.choice([""] + self._dirs())
        if self.rnd.random() < 0.3 and len(files) > 1:
            dst = self.rnd.choice([f for f in files if f != rel])  # over an existing file
        else:
            dst = os.path.join(d, self._name("mv") + ".dat")
        os.replace(self.root / rel, self.root / dst)
        return f"rename {rel} -> {dst}"

    def rename_dir(self):
        dirs = self._dirs()
        if not dirs:
            return self.mkdir_nested()
        src = self.rnd.choice(dirs)
        parents = [d for d in [""] + dirs if d != src and not d.startswith(src + "/")]
        dst = os.path.join(self.rnd.choice(parents), self._name("dm"))
        os.rename(self.root / src, self.root / dst)
        return f"rename dir {src} -> {dst}"

    def delete(self):
        files = self._files()
        if not files:
            return self.create()
        rel = self.rnd.choice(files)
        os.unlink(self.root / rel)
        return f"delete {rel}"

    def chmod(self):
        files = self._files()
        if not files:
            return self.create()
        rel = self.rnd.choice(files)
        p = self.root / rel
        old = stat.S_IMODE(p.stat().st_mode)
        new = self.rnd.choice([m for m in MODES if m != old])
        os.chmod(p, new)
        return f"chmod {rel} {oct(old)} -> {oct(new)}"

    def file_to_dir(self):
        files = self._files()
        if not files:
            return self.create()
        rel = self.rnd.choice(files)
        os.unlink(self.root / rel)
        (self.root / rel).mkdir()
        inner = os.path.join(rel, "inside.txt")
        self._write(self.root / inner, b"now a directory " + rel.encode())
        return f"file -> dir {rel}"

    def dir_to_file(self):
        dirs = self._dirs()
        if not dirs:
            return self.mkdir_nested()
        rel = self.rnd.choice(dirs)
        shutil.rmtree(self.root / rel)
        self._write(self.root / rel, b"now a file " + rel.encode())
        return f"dir -> file {rel}"

    def mkdir_nested(self):
        d = self.rnd.choice([""] + self._dirs())
        rel = os.path.join(d, self._name("n"), self._name("m"), self._name("k"))
        (self.root / rel).mkdir(parents=True)
        if self.rnd.random() < 0.5:
            self._write(self.root / rel / "leaf.txt", self.rnd.randbytes(64))
            return f"mkdir -p {rel} (with leaf.txt)"
        return f"mkdir -p {rel} (empty)"

    OPS = ("create", "modify_same_size", "modify_resize", "rename_file", "rename_dir", "delete",
           "chmod", "file_to_dir", "dir_to_file", "mkdir_nested")

    def round(self, count):
        return [getattr(self, self.rnd.choice(self.OPS))() for _ in range(count)]


def seeded_tree(rnd):
    """~200 files in nested directories, three of ~1 MB, modes 0644/0755/0600."""
    dirs = ["lib", "lib/core", "lib/core/deep", "docs", "docs/api", "assets", "tools/bin", "empty/leaf"]
    files, modes = {}, {}
    for i in range(200):
        rel = os.path.join(rnd.choice(["", *dirs[:-1]]), f"f{i}.txt")
        files[rel] = rnd.randbytes(rnd.choice([0, 10, 300, 2000, 9000]))
        modes[rel] = rnd.choice(MODES)
    for i in range(3):
        rel = f"assets/big{i}.bin"
        files[rel] = rnd.randbytes((1 << 20) + rnd.randint(-1000, 1000))
        modes[rel] = 0o644
    return files, modes, ["empty/leaf"]


# ------------------------------------------------------------------ tests


def test_readiness_socket_and_sigterm(stow_bin, workdir, watch):
    p = prepare(stow_bin, workdir, {"a.txt": b"alpha", "d/b.txt": b"beta"})
    ws_id, reg = p["workspace_id"], workdir / "reg"
    w = watch(ws_id)
    assert set(w.ready) == {"version", "workspace_id", "socket", "pid"}, w.ready
    assert w.ready["version"] == 1
    assert w.ready["workspace_id"] == ws_id
    assert w.ready["pid"] == w.pid
    assert pathlib.Path(w.ready["socket"]) == socket_path(reg, ws_id)
    assert is_socket(w.ready["socket"]), "the socket file is missing while the watch runs"
    assert answers(w.ready["socket"])
    assert flock_holders(lock_path(reg, ws_id)) == {w.pid}
    # Nothing is watched before the first capture; the first capture it
    # serves leaves its watch over every directory.
    assert inotify_watches(w.pid) is None
    cp = checkpoint(stow_bin, reg, ws_id)
    assert (cp["files"], cp["bytes"], cp["workspace_id"]) == (2, 9, ws_id)
    assert inotify_watches(w.pid) == 2  # the root and d/
    assert w.proc.poll() is None

    rc, took, rest = w.stop(signal.SIGTERM, timeout=10)
    assert rc == 0, w.stderr()
    assert took < 5, f"SIGTERM took {took:.1f} s"
    assert rest == b"", f"more than the readiness line on stdout: {rest!r}"
    assert not os.path.lexists(w.ready["socket"]), "the socket outlived the watch"
    # Without a watcher, the capture runs in process, same form.
    again = checkpoint(stow_bin, reg, ws_id)
    assert set(again) == set(cp) and again["files"] == 2


def test_checkpoints_equal_the_tree_under_random_edits(stow_bin, workdir, watch):
    seed = int(os.environ.get("STOW_WATCH_SEED") or random.randrange(1 << 32))
    print(f"seed {seed} (rerun with STOW_WATCH_SEED={seed})")
    rnd = random.Random(seed)
    files, modes, dirs = seeded_tree(rnd)
    p = prepare(stow_bin, workdir, files, modes, dirs)
    ws_id, reg, root = p["workspace_id"], workdir / "reg", pathlib.Path(p["root"])
    restorer = Restorer(stow_bin, workdir, reg)
    w = watch(ws_id)
    assert inotify_watches(w.pid) is None

    cp = checkpoint(stow_bin, reg, ws_id)
    restorer.check(cp, root, f"seed {seed}, before any edit")
    editor = Editor(root, rnd)
    for n in range(15):
        done = editor.round(rnd.randint(4, 10))
        context = f"seed {seed}, round {n}: " + "; ".join(done)
        cp = checkpoint(stow_bin, reg, ws_id)
        restorer.check(cp, root, context)
        # The capture was served by the watcher: it watches exactly the
        # tree's directories as they are now.
        assert inotify_watches(w.pid) == tree_dirs(root), context
        assert w.proc.poll() is None, w.stderr()
    # All along the watcher held the workspace's watch.
    assert flock_holders(lock_path(reg, ws_id)) == {w.pid}
    refused = second_watch(stow_bin, reg, ws_id)
    assert refused.returncode == 1 and json.loads(refused.stdout)["error"]["code"] == "in_use"
    rc, _, _ = w.stop()
    assert rc == 0, w.stderr()


def test_kill_9_leaves_a_stale_socket_that_is_replaced(stow_bin, workdir, watch):
    p = prepare(stow_bin, workdir,
                {"a.txt": b"alpha", "lib/x.py": b"print(1)\n", "lib/deep/y.bin": os.urandom(5000)},
                {"lib/x.py": 0o755})
    ws_id, reg, root = p["workspace_id"], workdir / "reg", pathlib.Path(p["root"])
    restorer = Restorer(stow_bin, workdir, reg)
    sock = socket_path(reg, ws_id)
    w = watch(ws_id)
    served = checkpoint(stow_bin, reg, ws_id)
    assert inotify_watches(w.pid) == 3
    restorer.check(served, root, "through the first watcher")

    (root / "after-watch.txt").write_bytes(b"written while a watcher ran")
    w.kill9()
    assert is_socket(sock), "kill -9 cannot remove the socket; it must still be there"
    assert not answers(sock)
    assert flock_holders(lock_path(reg, ws_id)) == set()

    # The stale socket is ignored: the capture runs in process.
    (root / "lib" / "x.py").write_bytes(b"print(2)\n")
    os.chmod(root / "lib" / "x.py", 0o600)
    os.unlink(root / "a.txt")
    (root / "newdir" / "sub").mkdir(parents=True)
    (root / "newdir" / "sub" / "z.txt").write_bytes(b"zzz")
    start = time.monotonic()
    fallback = checkpoint(stow_bin, reg, ws_id)
    assert time.monotonic() - start < 20
    assert set(fallback) == set(served), "the in-process result differs in form"
    assert fallback["checkpoint_id"] != served["checkpoint_id"]
    restorer.check(fallback, root, "in process, beside a stale socket")

    # The next watcher replaces the stale socket and serves captures.
    w2 = watch(ws_id)
    assert w2.ready["socket"] == str(sock) and w2.pid != w.pid
    assert is_socket(sock) and answers(sock)
    assert flock_holders(lock_path(reg, ws_id)) == {w2.pid}
    assert inotify_watches(w2.pid) is None
    first = checkpoint(stow_bin, reg, ws_id)
    restorer.check(first, root, "first capture through the second watcher")
    assert inotify_watches(w2.pid) == tree_dirs(root)
    shutil.rmtree(root / "newdir")
    (root / "lib" / "deep" / "y.bin").write_bytes(os.urandom(7000))
    second = checkpoint(stow_bin, reg, ws_id)
    restorer.check(second, root, "second capture through the second watcher")
    assert inotify_watches(w2.pid) == tree_dirs(root)
    rc, _, _ = w2.stop()
    assert rc == 0, w2.stderr()
    assert not os.path.lexists(sock)


def test_second_watcher_is_refused_in_use(stow_bin, workdir, watch):
    p = prepare(stow_bin, workdir, {"a.txt": b"alpha", "d/e/b.txt": b"beta"})
    ws_id, reg, root = p["workspace_id"], workdir / "reg", pathlib.Path(p["root"])
    w = watch(ws_id)
    sock = pathlib.Path(w.ready["socket"])
    before = os.lstat(sock)

    second = second_watch(stow_bin, reg, ws_id)
    assert second.returncode == 1, (second.stdout, second.stderr)
    doc = json.loads(second.stdout)  # one JSON document, nothing else
    assert doc["error"]["code"] == "in_use", doc
    assert ws_id in doc["error"]["message"]
    assert "in_use" in second.stderr

    # Nothing changed: the first watcher still owns and serves the socket.
    assert w.proc.poll() is None, w.stderr()
    after = os.lstat(sock)
    assert stat.S_ISSOCK(after.st_mode) and (after.st_ino, after.st_ctime_ns) == (before.st_ino, before.st_ctime_ns)
    assert answers(sock)
    assert flock_holders(lock_path(reg, ws_id)) == {w.pid}
    assert inotify_watches(w.pid) is None
    (root / "d" / "e" / "c.txt").write_bytes(b"gamma")
    cp = checkpoint(stow_bin, reg, ws_id)
    assert (cp["files"], cp["bytes"]) == (3, 14)
    assert inotify_watches(w.pid) == 3, "the capture did not go through the first watcher"
    rc, _, _ = w.stop()
    assert rc == 0, w.stderr()


def test_keyed_capture_through_the_watch_and_replay(stow_bin, workdir, watch):
    p = prepare(stow_bin, workdir, {"a.txt": b"alpha", "d/b.txt": b"beta"})
    ws_id, reg, root = p["workspace_id"], workdir / "reg", pathlib.Path(p["root"])
    w = watch(ws_id)
    keyed = ["--timeout", "30s", "--request-key"]

    first = checkpoint(stow_bin, reg, ws_id, *keyed, "k-1")
    assert first["version"] == 1 and "error" not in first, first
    assert first["result"]["outcome"] == "committed" and first["result"]["replayed"] is False
    cp = first["result"]["checkpoint"]
    assert (cp["files"], cp["bytes"]) == (2, 9)
    assert inotify_watches(w.pid) == 2, "the keyed capture did not go through the watcher"

    (root / "later.txt").write_bytes(b"later")
    again = checkpoint(stow_bin, reg, ws_id, *keyed, "k-1")
    assert again["result"]["replayed"] is True, again
    assert again["result"]["outcome"] == "committed"
    assert again["result"]["checkpoint"]["id"] == cp["id"]
    assert again["result"]["checkpoint"]["files"] == 2  # the replay, not a new capture

    resolved = checkpoint(stow_bin, reg, ws_id, "--resolve", *keyed, "k-1")
    assert resolved["result"]["outcome"] == "committed", resolved
    assert resolved["result"]["checkpoint"]["id"] == cp["id"]

    fresh = checkpoint(stow_bin, reg, ws_id, *keyed, "k-2")
    assert fresh["result"]["replayed"] is False
    assert fresh["result"]["checkpoint"]["id"] != cp["id"]
    assert fresh["result"]["checkpoint"]["files"] == 3

    # SIGINT stops the watch as SIGTERM does; the key still replays in
    # process, in the same form.
    rc, took, _ = w.stop(signal.SIGINT)
    assert rc == 0 and took < 5, w.stderr()
    assert not os.path.lexists(w.ready["socket"])
    offline = checkpoint(stow_bin, reg, ws_id, *keyed, "k-1")
    assert set(offline) == set(again) and set(offline["result"]) == set(again["result"])
    assert offline["result"]["replayed"] is True and offline["result"]["checkpoint"]["id"] == cp["id"]


def test_workspace_serve_hosts_the_watch(stow_bin, workdir, watch):
    p = prepare(stow_bin, workdir, {"seed.txt": b"seed", "docs/readme.md": b"# hi"})
    ws_id, reg, root = p["workspace_id"], workdir / "reg", pathlib.Path(p["root"])
    restorer = Restorer(stow_bin, workdir, reg)
    sock = socket_path(reg, ws_id)
    server = WorkspaceServer(stow_bin, ws_id, reg, "--port", "0")
    try:
        assert is_socket(sock) and answers(sock)
        assert flock_holders(lock_path(reg, ws_id)) == {server.proc.pid}
        refused = second_watch(stow_bin, reg, ws_id)
        assert refused.returncode == 1, (refused.stdout, refused.stderr)
        assert json.loads(refused.stdout)["error"]["code"] == "in_use"
        assert is_socket(sock)

        assert inotify_watches(server.proc.pid) is None
        s3 = server.client()
        s3.put_object(Bucket=server.bucket, Key="notes/a.txt", Body=b"through s3")
        assert (root / "notes" / "a.txt").read_bytes() == b"through s3"
        (root / "direct.txt").write_bytes(b"written on disk")
        cp = checkpoint(stow_bin, reg, ws_id)
        assert cp["files"] == 4, cp
        restorer.check(cp, root, "captured through serve's watch")
        assert inotify_watches(server.proc.pid) == tree_dirs(root), \
            "the capture did not go through the server's watch"

        # Later writes are seen by the kept watch.
        s3.delete_object(Bucket=server.bucket, Key="docs/readme.md")
        s3.put_object(Bucket=server.bucket, Key="notes/deeper/b.txt", Body=b"b")
        cp2 = checkpoint(stow_bin, reg, ws_id)
        restorer.check(cp2, root, "second capture through serve's watch")
        assert not (root / "docs").exists()
        assert inotify_watches(server.proc.pid) == tree_dirs(root)
    finally:
        rc = server.stop()
    assert rc == 0, server.proc.stderr.read().decode()
    assert not os.path.lexists(sock), "the socket outlived the server"

    w = watch(ws_id)
    assert w.ready["socket"] == str(sock) and answers(sock)
    rc, _, _ = w.stop()
    assert rc == 0, w.stderr()


def test_a_rewind_goes_through_the_watch_and_one_it_lost_is_finished(stow_bin, workdir, watch):
    files = {"a.txt": b"alpha", "d/b.txt": b"beta", "d/e/c.txt": b"gamma"}
    p = prepare(stow_bin, workdir, files)
    ws_id, reg, root = p["workspace_id"], workdir / "reg", pathlib.Path(p["root"])
    cp = checkpoint(stow_bin, reg, ws_id)["checkpoint_id"]
    at_cp = snapshot(root)

    def edit():
        (root / "a.txt").write_bytes(b"edited")
        shutil.rmtree(root / "d" / "e")
        (root / "new.txt").write_bytes(b"new")

    w = watch(ws_id)
    assert inotify_watches(w.pid) is None
    edit()
    edited = snapshot(root)
    r = ws(stow_bin, "rewind", "--id", ws_id, "--registry-dir", reg, "--to", cp)[1]
    assert r["conflicts"] == [] and snapshot(root) == at_cp
    assert inotify_watches(w.pid) is not None, "the rewind did not go through the watcher"
    rc, _, _ = w.stop()
    assert rc == 0, w.stderr()

    # A watcher killed in the middle of a rewind it serves: a plain rewind
    # reports outcome_unknown, and the next status finishes it.
    edit()
    w = watch(ws_id, env_extra={"STOW_TEST_FAULT": "rewind.step#2"})
    rc, doc, err = ws(stow_bin, "rewind", "--id", ws_id, "--registry-dir", reg, "--to", cp, check=False)
    assert (rc, doc["error"]["code"]) == (1, "outcome_unknown"), (doc, err)
    assert w.proc.wait(timeout=10) == -9
    st = ws(stow_bin, "status", "--id", ws_id, "--registry-dir", reg)[1]
    assert st["clean"] is True and st["checkpoint_id"] == cp and snapshot(root) == at_cp

    # A keyed one is run again in process: the journal is finished first,
    # and the key answers the finished rewind.
    edit()
    assert snapshot(root) == edited
    w = watch(ws_id, env_extra={"STOW_TEST_FAULT": "rewind.step#2"})
    key = ["--request-key", "rw-lost"]
    r = ws(stow_bin, "rewind", "--id", ws_id, "--registry-dir", reg, "--to", cp, *key)[1]
    assert w.proc.wait(timeout=10) == -9
    assert r["replayed"] is True and r["checkpoint_id"] == cp and snapshot(root) == at_cp


def test_unknown_workspace_is_not_found(stow_bin, workdir):
    p = prepare(stow_bin, workdir, {"a.txt": b"alpha"})
    reg = workdir / "reg"
    out = subprocess.run(
        [stow_bin, "workspace", "watch", "--id", "ws_0000000000000000", "--registry-dir", str(reg)],
        check=False, capture_output=True, text=True, timeout=20)
    assert out.returncode == 1, (out.stdout, out.stderr)
    doc = json.loads(out.stdout)
    assert doc["error"]["code"] == "not_found", doc
    assert "ws_0000000000000000" in doc["error"]["message"]
    assert not os.path.lexists(socket_path(reg, "ws_0000000000000000"))
    watch_dir = reg / ".stow" / "watch"
    assert not watch_dir.exists() or not any(watch_dir.glob("*.sock"))
    # The real workspace is untouched: its capture runs in process.
    cp = checkpoint(stow_bin, reg, p["workspace_id"])
    assert cp["files"] == 1


def test_parent_pid_stops_the_watch_with_its_parent(stow_bin, workdir):
    p = prepare(stow_bin, workdir, {"a.txt": b"alpha"})
    reg = workdir / "reg"
    sock = socket_path(reg, p["workspace_id"])
    args = [stow_bin, "workspace", "watch", "--id", p["workspace_id"], "--registry-dir", str(reg)]
    # A pid that is not the parent is refused before anything starts.
    out = subprocess.run([*args, "--parent-pid", "1"], check=False, capture_output=True, text=True,
                         timeout=20)
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert json.loads(out.stdout)["error"]["code"] == "invalid_argument"
    assert not os.path.lexists(sock)
    # An intermediate parent starts the watch with its own pid, reports the
    # watcher's readiness line, then dies: the watch stops cleanly with it.
    parent = subprocess.Popen(
        [sys.executable, "-c",
         ("import os, subprocess, sys, time\n"
          "w = subprocess.Popen(sys.argv[1:] + ['--parent-pid', str(os.getpid())], stdout=subprocess.PIPE)\n"
          "print(w.pid, w.stdout.readline().decode().strip(), flush=True)\n"
          "time.sleep(120)\n"),
         *[str(a) for a in args]],
        stdout=subprocess.PIPE, text=True)
    try:
        line = parent.stdout.readline().split(" ", 1)
        watcher, ready = int(line[0]), json.loads(line[1])
        assert ready["pid"] == watcher and answers(sock)
        assert checkpoint(stow_bin, reg, p["workspace_id"])["files"] == 1
        assert (inotify_watches(watcher) or 0) >= 1, "the capture did not go through the watcher"
        parent.kill()
        parent.wait(timeout=20)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and os.path.exists(f"/proc/{watcher}"):
            try:
                with open(f"/proc/{watcher}/stat") as f:
                    if f.read().split(") ", 1)[1].startswith("Z"):
                        break  # exited; a zombie until init reaps it
            except FileNotFoundError:
                break
            time.sleep(0.05)
        else:
            if os.path.exists(f"/proc/{watcher}"):
                os.kill(watcher, signal.SIGKILL)
                pytest.fail("the watch outlived its parent")
        assert not os.path.lexists(sock), "the watch did not remove its socket on its parent's death"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(timeout=20)
