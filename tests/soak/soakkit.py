"""The soak harness's shared parts: failures that name engine, seed, cycle
and key; the model of acceptable states; processes started, killed with
SIGKILL and restarted; the readers of what a store or registry holds after
a crash (`stow-s3 check`, the registry's manifests and blobs, trees)."""

from __future__ import annotations

import collections
import hashlib
import json
import os
import pathlib
import random
import shutil
import signal
import socket
import stat
import struct
import subprocess
import threading
import time
from dataclasses import dataclass, field

ROOT = pathlib.Path(__file__).resolve().parents[2]
E2E = ROOT / "tests" / "e2e"

MIB = 1024 * 1024
INF = float("inf")


def stow_bin() -> str:
    path = os.environ.get("STOW_BIN") or str(ROOT / "target" / "debug" / "stow-s3")
    if not os.access(path, os.X_OK):
        raise SystemExit(f"stow-s3 binary not found at {path}; build it or set STOW_BIN")
    return path


# ---------------------------------------------------------------- failures


class SoakFailure(AssertionError):
    """A broken crash rule: says engine, seed, cycle, key, expected and found,
    and how to replay."""

    def __init__(self, ctx: Ctx, what: str, key=None, expected=None, found=None):
        self.engine, self.seed, self.cycle = ctx.engine, ctx.seed, ctx.cycle
        self.what, self.key, self.expected, self.found = what, key, expected, found
        lines = [
            f"SOAK FAILURE engine={ctx.engine} seed={ctx.seed} cycle={ctx.cycle}: {what}",
            f"  key:      {key!r}",
            f"  expected: {short(expected)}",
            f"  found:    {short(found)}",
            f"  replay:   python3 tests/soak/soak.py --engine {ctx.engine} --seed {ctx.seed} "
            f"--cycles {ctx.cycle + 1}",
        ]
        if ctx.workdir:
            lines.append(f"  workdir:  {ctx.workdir} (kept)")
        super().__init__("\n".join(lines))


def short(v, limit=600):
    s = v if isinstance(v, str) else repr(v)
    return s if len(s) <= limit else s[:limit] + f"... ({len(s)} chars)"


@dataclass
class Ctx:
    """Where a run is: every failure is raised through `fail` with it."""

    engine: str
    seed: int
    cycle: int = -1
    workdir: str = ""
    stats: collections.Counter = field(default_factory=collections.Counter)

    def fail(self, what, key=None, expected=None, found=None):
        raise SoakFailure(self, what, key, expected, found)

    def check(self, cond, what, key=None, expected=None, found=None):
        if not cond:
            self.fail(what, key, expected, found)

    def rng(self, *role) -> random.Random:
        """A generator of its own for each (cycle, role): a thread's choices
        do not depend on how far the others got."""
        return random.Random(":".join(str(p) for p in (self.seed, self.engine, self.cycle, *role)))


# ---------------------------------------------------------------- values and the model


class _Absent:
    def __repr__(self):
        return "ABSENT"


ABSENT = _Absent()


@dataclass(frozen=True)
class Value:
    """An object's (or file's) content: SHA-256, size, ETag (None: not
    compared, e.g. a file read from disk)."""

    sha: str
    size: int
    etag: str | None = None

    def __repr__(self):
        return f"Value(sha={self.sha[:16]}, size={self.size}, etag={self.etag})"

    def same_bytes(self, other) -> bool:
        return isinstance(other, Value) and (self.sha, self.size) == (other.sha, other.size)


def md5_hex(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def value_of(data: bytes, etag: str | None = "md5") -> Value:
    if etag == "md5":
        etag = md5_hex(data)
    return Value(hashlib.sha256(data).hexdigest(), len(data), etag)


def multipart_etag(parts: list[bytes]) -> str:
    return md5_hex(b"".join(hashlib.md5(p).digest() for p in parts)) + f"-{len(parts)}"


def strip_etag(etag: str | None) -> str | None:
    return etag.strip('"') if etag else etag


@dataclass
class Op:
    value: object  # Value or ABSENT
    start: float
    end: float = INF  # time the acknowledgement arrived; INF while unacknowledged
    acked: bool = False
    kind: str = ""


class History:
    """Per key, the writes since the state was last verified. After a crash
    the acceptable states are the values of every write not superseded: a
    write W is superseded when another write was acknowledged and started
    after W was acknowledged. The last acknowledged value and any write in
    flight remain; nothing else (and nothing torn) may be there."""

    def __init__(self):
        self.ops: dict[object, list[Op]] = {}
        self.lock = threading.Lock()

    def baseline(self, key, value):
        with self.lock:
            self.ops[key] = [Op(value, -INF, -INF, True, "verified")]

    def begin(self, key, value, kind="") -> Op:
        op = Op(value, time.monotonic(), kind=kind)
        with self.lock:
            self.ops.setdefault(key, [Op(ABSENT, -INF, -INF, True, "never written")]).append(op)
        return op

    def ack(self, op: Op):
        op.end = time.monotonic()
        op.acked = True

    def refused(self, key, op: Op):
        """A definite refusal (an S3 4xx): the write did nothing."""
        with self.lock:
            self.ops[key].remove(op)

    def acceptable(self, key) -> list[Op]:
        with self.lock:
            ops = list(self.ops.get(key, [Op(ABSENT, -INF, -INF, True)]))
        return [op for op in ops if not any(o.acked and o.start > op.end for o in ops)]

    def keys(self):
        with self.lock:
            return list(self.ops)


def judge(ctx: Ctx, history: History, key, found, *, file_md5=None):
    """`found` must be one of the acceptable values of `key`; returns the
    matching op. `file_md5` (workspace view): the MD5 of the file found; a
    file written by a write in flight at the crash may have lost its
    properties and then reads with its MD5 as ETag."""
    ok = history.acceptable(key)
    for op in ok:
        if op.value is ABSENT or found is ABSENT:
            if op.value is found:
                return op
            continue
        if not op.value.same_bytes(found):
            continue
        if found.etag is None or op.value.etag is None or op.value.etag == found.etag:
            return op
        if file_md5 is not None and not op.acked and found.etag == file_md5:
            return op
    acked = [op for op in ok if op.acked and op.end > -INF]
    in_flight = [op for op in ok if not op.acked]
    if found is ABSENT:
        what = "an acknowledged write is lost (object absent)"
    elif any(isinstance(op.value, Value) and op.value.same_bytes(found) for op in ok):
        what = "right bytes, wrong ETag"
    elif any(isinstance(op.value, Value) and op.value.size == found.size for op in ok):
        what = "torn or foreign object (bytes match no acknowledged or in-flight write)"
    else:
        what = "object matches no acceptable state (lost, torn or resurrected)"
    ctx.stats["failures"] += 1
    ctx.fail(what, key,
             expected=" | ".join(f"{op.kind}{'' if op.acked else '(in flight)'}={op.value!r}" for op in ok),
             found=repr(found) + f"; acked this cycle: {len(acked)}, in flight: {len(in_flight)}")


# ---------------------------------------------------------------- processes


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull, NO_COLOR="1",
               STOW_LOG=os.environ.get("STOW_LOG", "warn"))
    env.update(extra)
    return env


def run(bin_, *args, env=None, timeout=120, cwd=None):
    """Runs `stow-s3 ...` to completion: (returncode, parsed stdout or None, stderr)."""
    out = subprocess.run([bin_, *[str(a) for a in args]], capture_output=True, text=True,
                         timeout=timeout, env=env or clean_env(), cwd=cwd)
    try:
        doc = json.loads(out.stdout) if out.stdout.strip() else None
    except json.JSONDecodeError:
        doc = {"unparsable_stdout": out.stdout}
    return out.returncode, doc, out.stderr


class Cli:
    """A CLI command started now, to be killed at some point (or not)."""

    def __init__(self, bin_, *args, env=None, tag=""):
        self.args = [str(a) for a in args]
        self.tag = tag or " ".join(self.args[:2])
        self.started = time.monotonic()
        self.proc = subprocess.Popen([bin_, *self.args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env or clean_env())
        self.killed = False  # killed while it still ran
        self.rc = None
        self.doc = None
        self.stderr = ""

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.killed = True

    def finish(self, timeout=120):
        out, err = self.proc.communicate(timeout=timeout)
        self.rc = self.proc.returncode
        self.stderr = err.decode(errors="replace")
        text = out.decode(errors="replace")
        try:
            self.doc = json.loads(text) if text.strip() else None
        except json.JSONDecodeError:
            self.doc = None
        return self

    @property
    def acked(self):
        """Finished on its own with success and a complete answer."""
        return not self.killed and self.rc == 0 and self.doc is not None


def kill_delay(rng: random.Random, span: float) -> float:
    """When to SIGKILL, from "immediately" to well past a typical operation
    (`span`, the engine's typical operation time): 10% at once, 50% within
    the span, 40% anywhere in 0-300 ms."""
    r = rng.random()
    if r < 0.1:
        return 0.0
    if r < 0.6:
        return rng.uniform(0, span)
    return rng.uniform(0, 0.3)


def spawn_ready(args, env=None, timeout=30.0):
    """Starts `args` + `--ready-fd N` and returns (process, readiness record);
    a server that is not ready within `timeout` is a hang."""
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen([*args, "--ready-fd", str(write_fd)], pass_fds=(write_fd,),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env or clean_env())
    os.close(write_fd)
    line = b""
    with os.fdopen(read_fd, "rb") as ready:
        box = {}

        def reader():
            box["line"] = ready.readline()

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        t.join(timeout)
        if t.is_alive():
            proc.kill()
            proc.wait()
            raise TimeoutError(f"{' '.join(map(str, args[:2]))} not ready after {timeout}s")
        line = box["line"]
    if not line:
        err = proc.stderr.read().decode(errors="replace")
        proc.wait()
        raise RuntimeError(f"{args[1]} did not become ready: rc={proc.returncode} {err[-2000:]}")
    # stderr is drained so a chatty server never blocks on a full pipe.
    threading.Thread(target=proc.stderr.read, daemon=True).start()
    return proc, json.loads(line)


def sigkill(proc: subprocess.Popen):
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait()


def stop(proc: subprocess.Popen, timeout=20):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return "hung"
    return proc.returncode


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- stores


def check_store(ctx: Ctx, bin_, data_dir, what="stow-s3 check") -> dict:
    """`stow-s3 check` (bookkeeping and every object's bytes) must pass;
    returns its usage."""
    rc, doc, err = run(bin_, "check", "--data-dir", data_dir)
    ctx.stats["store_checks"] += 1
    if rc != 0 or not doc or doc.get("consistent") is not True or doc.get("problems"):
        ctx.stats["failures"] += 1
        ctx.fail(f"{what} failed (rc={rc})", key=str(data_dir), expected="consistent, no problems",
                 found=json.dumps(doc) + " " + err[-1000:])
    return doc["usage"]


# ---------------------------------------------------------------- trees and registries


def tree_of(root) -> dict:
    """{slash path: (mode, sha256, size)} of every file under root, the
    root's .stow excluded; anything else than files and dirs is reported."""
    out = {}
    root = str(root)
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == root:
            dirnames[:] = [d for d in dirnames if d != ".stow"]
        for name in filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            if not stat.S_ISREG(st.st_mode):
                out[rel] = ("not-a-file", oct(st.st_mode), 0)
                continue
            with open(path, "rb") as fh:
                data = fh.read()
            out[rel] = (st.st_mode & 0o777, hashlib.sha256(data).hexdigest(), len(data))
    return out


def diff_trees(want: dict, got: dict) -> str:
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    changed = sorted(k for k in set(want) & set(got) if want[k] != got[k])
    return f"missing={missing[:5]} extra={extra[:5]} changed={[(k, want[k], got[k]) for k in changed[:3]]}"


def checkpoint_dirs(reg) -> list[str]:
    d = pathlib.Path(reg) / ".stow" / "checkpoints"
    return sorted(p.name for p in d.iterdir() if not p.name.startswith(".")) if d.exists() else []


def hidden_checkpoint_dirs(reg) -> list[str]:
    d = pathlib.Path(reg) / ".stow" / "checkpoints"
    return sorted(p.name for p in d.iterdir() if p.name.startswith(".")) if d.exists() else []


def staged_files(reg) -> list[str]:
    tmp = pathlib.Path(reg) / ".stow" / "tmp"
    return sorted(str(p) for p in tmp.rglob("*")) if tmp.exists() else []


def _blob_refs(manifest: dict):
    """(sha256, size) of every payload a manifest names (files, and a v2
    manifest's objects)."""
    for f in manifest.get("files", []):
        yield f["sha256"], f["size"], f["path"]
    for o in manifest.get("objects", []) or []:
        if isinstance(o, dict) and "sha256" in o and "size" in o:
            yield o["sha256"], o["size"], f"object {o.get('bucket')}/{o.get('key')}"


NODE_MAGIC = b"stow-node\0\x01"


def parse_node(data: bytes):
    """A tree-manifest node (checkpoint/tree.rs): (files, dirs) with files
    as (name, size, mode, sha256) and dirs as (name, mode, node sha256)."""
    if not data.startswith(NODE_MAGIC):
        raise ValueError("no node magic")
    pos = len(NODE_MAGIC)

    def u32():
        nonlocal pos
        (v,) = struct.unpack_from("<I", data, pos)
        pos += 4
        return v

    def take(n):
        nonlocal pos
        if pos + n > len(data):
            raise ValueError("truncated node")
        b = data[pos:pos + n]
        pos += n
        return b

    def name():
        return take(u32()).decode()

    files, dirs = [], []
    for _ in range(u32()):
        n = name()
        (size,) = struct.unpack("<Q", take(8))
        mode, sha = u32(), take(32).hex()
        flags = take(1)[0]
        if flags & 1:
            take(u32())
        if flags & 2:
            for _ in range(u32()):
                take(u32())
                take(u32())
        files.append((n, size, mode, sha))
    for _ in range(u32()):
        dirs.append((name(), u32(), take(32).hex()))
    for _ in range(u32()):  # links
        name()
        take(u32())
    for _ in range(u32()):  # skipped
        name()
        take(u32())
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} bytes after the node")
    return files, dirs


def expand_tree(ctx: Ctx, blobs: pathlib.Path, cache: BlobCache, sha: str, where: str, prefix=""):
    """The files of a tree manifest, every node checked by digest first."""
    path = blobs / sha[:2] / sha
    problem = cache.verify(path, sha, None)
    if problem:
        ctx.stats["failures"] += 1
        ctx.fail(f"a checkpoint's tree node is {problem}", key=f"{where}:{prefix or '/'}",
                 expected=f"node blob {sha}", found=problem)
    try:
        files, dirs = parse_node(path.read_bytes())
    except (ValueError, UnicodeDecodeError, struct.error) as e:
        ctx.fail("a checkpoint's tree node does not parse", key=f"{where}:{prefix or '/'}",
                 expected="a node", found=repr(e))
    out = [{"path": prefix + n, "size": size, "mode": mode, "sha256": fsha} for n, size, mode, fsha in files]
    for n, _, dsha in dirs:
        out += expand_tree(ctx, blobs, cache, dsha, where, prefix + n + "/")
    return out


class BlobCache:
    """Blob files already hashed (content-addressed, immutable): keyed by
    (path, size, mtime_ns, inode) so a replaced or damaged file is hashed
    again."""

    def __init__(self):
        self.ok = set()

    def verify(self, path: pathlib.Path, sha: str, size: int | None) -> str | None:
        try:
            st = path.stat()
        except FileNotFoundError:
            return "missing"
        ident = (str(path), st.st_size, st.st_mtime_ns, st.st_ino)
        if ident in self.ok:
            return None
        if size is not None and st.st_size != size:
            return f"size {st.st_size} != {size}"
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        if h.hexdigest() != sha:
            return f"sha256 {h.hexdigest()} != {sha}"
        self.ok.add(ident)
        return None


def verify_registry(ctx: Ctx, bin_, reg, cache: BlobCache, *, after_gc=True) -> dict:
    """The registry verifies: every published checkpoint's manifest and
    summary are whole and agree, every payload it names is a blob of the
    right size and digest; the policy's usage counts what is stored; after
    a gc nothing staged is left. Returns {cp: manifest}."""
    reg = pathlib.Path(reg)
    blobs = reg / ".stow" / "blobs"
    manifests = {}
    total_bytes = 0
    for cp in checkpoint_dirs(reg):
        d = reg / ".stow" / "checkpoints" / cp
        try:
            manifest = json.loads((d / "manifest.json").read_text())
            summary = json.loads((d / "summary.json").read_text())
        except (OSError, ValueError) as e:
            ctx.stats["failures"] += 1
            ctx.fail("a published checkpoint is not whole (manifest/summary unreadable)", key=f"{reg}:{cp}",
                     expected="manifest.json and summary.json", found=repr(e))
        ctx.check(manifest.get("id") == cp and summary.get("id") == cp, "checkpoint ids disagree",
                  key=f"{reg}:{cp}", expected=cp, found=(manifest.get("id"), summary.get("id")))
        if "tree" in manifest:  # the tree layout: files live in content-addressed nodes
            manifest = dict(manifest, files=expand_tree(ctx, blobs, cache, manifest["tree"], f"{reg}:{cp}"))
        files = manifest.get("files", [])
        nbytes = sum(f["size"] for f in files)
        ctx.check((summary.get("files"), summary.get("bytes")) == (len(files), nbytes),
                  "summary disagrees with manifest", key=f"{reg}:{cp}",
                  expected=(len(files), nbytes), found=(summary.get("files"), summary.get("bytes")))
        for sha, size, path in _blob_refs(manifest):
            problem = cache.verify(blobs / sha[:2] / sha, sha, size)
            if problem:
                ctx.stats["failures"] += 1
                ctx.fail(f"checkpoint names a blob that is {problem}", key=f"{reg}:{cp}:{path}",
                         expected=f"blob {sha} of {size} bytes", found=problem)
        manifests[cp] = manifest
        total_bytes += summary.get("bytes", 0)
    rc, doc, err = run(bin_, "workspace", "policy", "show", "--registry-dir", reg)
    ctx.check(rc == 0, "policy show failed", key=str(reg), expected="rc 0", found=f"{rc} {doc} {err[-500:]}")
    usage = doc["usage"]
    ctx.check(usage["checkpoints"] == len(manifests), "registry usage: checkpoint count differs from what is stored",
              key=str(reg), expected=len(manifests), found=usage)
    ctx.check(usage["checkpoint_bytes"] == total_bytes, "registry usage: checkpoint bytes differ from what is stored",
              key=str(reg), expected=total_bytes, found=usage)
    records = len(list(reg.glob("*.json")))
    ctx.check(usage["workspaces"] == records, "registry usage: workspace count differs from the records stored",
              key=str(reg), expected=records, found=usage)
    if after_gc:
        ctx.check(staged_files(reg) == [], "staged leftovers after gc", key=str(reg), expected=[],
                  found=staged_files(reg))
        ctx.check(hidden_checkpoint_dirs(reg) == [], "half-published or half-deleted checkpoint directories left",
                  key=str(reg), expected=[], found=hidden_checkpoint_dirs(reg))
    ctx.stats["registry_checks"] += 1
    return manifests


def gc(ctx: Ctx, bin_, reg):
    rc, doc, err = run(bin_, "workspace", "gc", "--registry-dir", reg)
    ctx.check(rc == 0, "workspace gc failed after a crash", key=str(reg), expected="rc 0",
              found=f"{rc} {doc} {err[-800:]}")
    return doc


def restore_tree(ctx: Ctx, bin_, reg, cp, scratch: pathlib.Path, *, keep=False):
    """Restores `cp` into a fresh root; returns the tree (and destroys the
    restored workspace again unless `keep`)."""
    scratch.mkdir(parents=True, exist_ok=True)
    root = scratch / f"r-{cp}-{time.monotonic_ns()}"
    rc, doc, err = run(bin_, "workspace", "restore", "--checkpoint-id", cp, "--root", root, "--registry-dir", reg)
    ctx.check(rc == 0, "a published checkpoint does not restore", key=f"{reg}:{cp}", expected="rc 0",
              found=f"{rc} {doc} {err[-800:]}")
    got = tree_of(root)
    ctx.stats["restores"] += 1
    if not keep:
        rc2, doc2, err2 = run(bin_, "workspace", "destroy", "--id", doc["workspace_id"], "--registry-dir", reg)
        ctx.check(rc2 == 0, "destroy of a restored workspace failed", key=doc["workspace_id"], expected="rc 0",
                  found=f"{rc2} {doc2} {err2[-500:]}")
        shutil.rmtree(root, ignore_errors=True)
    return got, doc


def write_tree(root: pathlib.Path, files: dict):
    for rel, body in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(body)


def prepare_workspace(ctx: Ctx, bin_, base: pathlib.Path, name: str, files: dict, registry: pathlib.Path, **fields):
    src = base / f"{name}-src"
    write_tree(src, files)
    m = base / f"{name}.task.json"
    m.write_text(json.dumps({"version": 1, "root": str(base / name), "registry_dir": str(registry),
                             "inputs": [{"source": str(src), "destination": "."}], **fields}))
    rc, doc, err = run(bin_, "workspace", "prepare", "--manifest", m)
    ctx.check(rc == 0, "workspace prepare failed", key=name, expected="rc 0", found=f"{rc} {doc} {err[-800:]}")
    return doc


def mutate_tree(rng: random.Random, root: pathlib.Path, *, tag: str, big_every=4, big=(1 * MIB, 4 * MIB),
                dirs=("", "a", "a/b", "c"), max_files=40):
    """A few edits a task might make: new files, rewrites, deletions, now
    and then a large one so a capture takes long enough to be killed."""
    current = sorted(tree_of(root))
    for _ in range(rng.randint(2, 6)):
        r = rng.random()
        if current and (r < 0.2 or len(current) >= max_files):
            rel = rng.choice(current)
            (root / rel).unlink()
            current.remove(rel)
            continue
        if current and r < 0.55:
            rel = rng.choice(current)
        else:
            d = rng.choice(dirs)
            rel = f"{d}/f{rng.randrange(10**6):06d}.txt" if d else f"f{rng.randrange(10**6):06d}.txt"
            current.append(rel)
        size = rng.choice([0, rng.randint(1, 300), rng.randint(300, 40_000)])
        body = f"{tag} {rel}\n".encode() + rng.randbytes(size)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(body)
    if rng.randrange(big_every) == 0:
        rel = f"big/b{rng.randrange(4)}.bin"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(tag.encode() + rng.randbytes(rng.randint(*big)))
    return tree_of(root)


class Stop(Exception):
    """The server is gone (or answered with something other than a clean
    refusal): the worker stops, its write stays in flight."""


class Upload:
    """A multipart upload the model follows: its acknowledged parts, the
    part in flight, and whether its completion was sent or acknowledged."""

    def __init__(self, bucket, key):
        self.bucket, self.key = bucket, key
        self.id = None
        self.parts = {}  # acknowledged: number -> (etag, size)
        self.in_flight = None  # (number, etag, size) of a part being sent
        self.completion = None  # None, "in flight", "acked"
