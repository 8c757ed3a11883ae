"""What test_workspace_archive_hostile.py builds hostile archives with: a
sandboxed run of the binary, snapshots of every path it could write, the
crafting of archives from a real export (tar entries as (name, TarInfo,
bytes) triples, re-written with `tarfile` and `gzip`), and the `base`
(module) and `sb` (per test) fixtures."""

import gzip
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import tarfile

import pytest

from test_workspace import manifest

TIMEOUT = 60
MANIFEST = "manifest.json"
MANIFEST_LIMIT = 16 * 1024 * 1024
# Codes a randomly damaged archive may be refused with (a damaged tar
# header may claim an entry over the default byte limit).
DAMAGE_CODES = {"invalid_archive", "capacity_exceeded"}
# Paths outside the sandbox a traversal or an absolute name would aim at.
HOST_PATHS = ["/etc/passwd", "/etc/x", "/files", "/x"]


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def noise(n, seed=b"stow-archive"):
    """n deterministic, incompressible bytes."""
    out = bytearray()
    counter = 0
    while len(out) < n:
        out += hashlib.sha256(seed + counter.to_bytes(8, "big")).digest()
        counter += 1
    return bytes(out[:n])


def zeros(n):
    return b"\0" * n


# The reference workspace. c.bin is incompressible, so the archive is larger
# than its payload and one byte limit is below both.
FILES = {
    "a.txt": b"alpha\n",
    "dir/b.txt": b"bravo bravo\n",
    "dir/sub/c.bin": noise(4096),
}
TOTAL = sum(len(d) for d in FILES.values())
LISTING = [(path, len(FILES[path])) for path in sorted(FILES)]


# ---------------------------------------------------------------- running


def run(stow_bin, args, env, cwd):
    """Runs `stow-s3 workspace ARGS`; returns (returncode, document, stderr).

    Whatever the input, the binary must exit 0 or 1 without panicking and
    print exactly one JSON document (json.loads refuses none or several)."""
    out = subprocess.run(
        [stow_bin, "workspace", *[str(a) for a in args]],
        capture_output=True,
        timeout=TIMEOUT,
        env=env,
        cwd=cwd,
    )
    err = out.stderr.decode("utf-8", "replace")
    assert out.returncode in (0, 1), f"{args}: exit {out.returncode}\n{err}"
    assert "panicked" not in err, f"{args}: {err}"
    try:
        doc = json.loads(out.stdout.decode("utf-8"))
    except ValueError as e:
        pytest.fail(f"{args}: stdout is not one JSON document ({e}): {out.stdout[:300]!r}\n{err}")
    if out.returncode == 1:
        e = doc.get("error")
        assert set(doc) == {"error"}, f"{args}: {doc}"
        assert isinstance(e.get("code"), str) and isinstance(e.get("message"), str), f"{args}: {doc}"
    return out.returncode, doc, err


def sandbox_env(root):
    """The environment with HOME, XDG_CONFIG_HOME and TMPDIR under root."""
    env = dict(os.environ)
    for var, sub in (("HOME", "home"), ("XDG_CONFIG_HOME", "xdg"), ("TMPDIR", "tmp")):
        (root / sub).mkdir(exist_ok=True)
        env[var] = str(root / sub)
    return env


def make_checkpoint(ok, root, name, files, registry, extra=None, flags=()):
    """Prepares workspace `name` under root from `files` (path -> bytes),
    writes `extra` into it afterwards (prepare refuses sensitive sources)
    and checkpoints it into root/registry; returns (workspace, checkpoint)."""
    src = root / f"{name}-src"
    for rel, data in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    m = manifest(root / f"{name}.json", root=name, registry_dir=registry,
                 inputs=[{"source": src.name, "destination": "."}])
    p = ok("prepare", "--manifest", m)
    for rel, data in (extra or {}).items():
        (root / name / rel).write_bytes(data)
    c = ok("checkpoint", "--id", p["workspace_id"], "--registry-dir", root / registry, *flags)
    return p["workspace_id"], c["checkpoint_id"]


# --------------------------------------------------------------- snapshots


def describe(path):
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return ("link", os.readlink(path))
    if stat.S_ISDIR(st.st_mode):
        return ("dir",)
    if stat.S_ISREG(st.st_mode):
        with open(path, "rb") as f:
            return ("file", st.st_size, sha256(f.read()))
    return ("other", stat.S_IFMT(st.st_mode))


def snapshot(root):
    """Every path under root (hidden ones too) and the host paths."""
    tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            tree[os.path.relpath(path, root)] = describe(path)
    for path in HOST_PATHS:
        tree["host:" + path] = describe(path) if os.path.lexists(path) else None
    return tree


def assert_unchanged(before, after, what):
    added = sorted(after.keys() - before.keys())
    removed = sorted(before.keys() - after.keys())
    changed = sorted(k for k in before.keys() & after.keys() if before[k] != after[k])
    assert not (added or removed or changed), (
        f"{what} changed the disk: added {added}, removed {removed}, changed {changed}")


# ------------------------------------------------------- crafting archives


def member(name, data=b"", like=None, kind=tarfile.REGTYPE, pax=None, **attrs):
    """A (name, TarInfo, bytes) triple. Header fields come from `like` (else
    the export's: mode 0600, mtime 0, owner 0); `pax` records are written
    as given (tarfile adds `path` itself for long names)."""
    info = tarfile.TarInfo(name)
    info.mode, info.mtime, info.uid, info.gid, info.uname, info.gname = 0o600, 0, 0, 0, "", ""
    if like is not None:
        for field in ("mode", "uid", "gid", "uname", "gname"):
            setattr(info, field, getattr(like, field))
        info.mtime = int(like.mtime)
    info.type = kind
    info.size = len(data) if kind in (tarfile.REGTYPE, tarfile.AREGTYPE) else 0
    info.pax_headers = dict(pax or {})
    for field, value in attrs.items():
        setattr(info, field, value)
    return (name, info, data)


def read_entries(archive):
    """The triples of an archive, in order, with fresh TarInfos (so a
    rename is never undone by a PAX `path` record carried over)."""
    out = []
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tf:
        for info in tf:
            data = tf.extractfile(info).read() if info.isreg() else b""
            out.append(member(info.name, data, like=info, kind=info.type, linkname=info.linkname,
                              devmajor=info.devmajor, devminor=info.devminor))
    return out


def tar_bytes(entries):
    """A PAX tar of the triples: (bytes as tarfile ends them, with two zero
    blocks and record padding; offset where the last entry ends)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for _, info, data in entries:
            tf.addfile(info, io.BytesIO(data) if info.size else None)
        end = buf.tell()
    return buf.getvalue(), end


def gz(tar, members=1):
    """tar compressed as `members` concatenated gzip members."""
    step = -(-len(tar) // members)
    return b"".join(gzip.compress(tar[i:i + step], mtime=0) for i in range(0, len(tar), step))


def pack(entries, after_end=None, append=b"", members=1):
    """The archive of `entries`. `after_end` replaces everything tarfile
    writes after the last entry; `append` is added after the tar's end."""
    tar, end = tar_bytes(entries)
    if after_end is not None:
        tar = tar[:end] + after_end
    return gz(tar + append, members)


def flip(data, pos, mask=0xFF):
    pos %= len(data)
    return data[:pos] + bytes([data[pos] ^ mask]) + data[pos + 1:]


def payload(path):
    return "files/" + path


def index(entries, name):
    return [e[0] for e in entries].index(name)


def resort(entries):
    """The manifest entry first, then the payloads sorted by name (stable)."""
    head = [e for e in entries if e[0] == MANIFEST]
    rest = [e for e in entries if e[0] != MANIFEST]
    return head + sorted(rest, key=lambda e: e[0].encode())


def rename(entries, old, new):
    i = index(entries, old)
    _, info, data = entries[i]
    return resort(entries[:i] + [member(new, data, like=info)] + entries[i + 1:])


def replace(entries, name, data=None, **kw):
    """entries with `name` rebuilt from new data and/or member() keywords."""
    i = index(entries, name)
    _, info, old = entries[i]
    return entries[:i] + [member(name, old if data is None else data, like=info, **kw)] + entries[i + 1:]


def drop(entries, name):
    i = index(entries, name)
    return entries[:i] + entries[i + 1:]


def add(entries, name, data=b"", **kw):
    return resort(entries + [member(name, data, **kw)])


def dup(entries, name, data=None):
    """entries with a second `name` right after the first."""
    i = index(entries, name)
    extra = entries[i] if data is None else member(name, data, like=entries[i][1])
    return entries[:i + 1] + [extra] + entries[i + 1:]


def manifest_doc(entries):
    return json.loads(entries[index(entries, MANIFEST)][2])


def compact(doc):
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def with_manifest(entries, change):
    """entries with the manifest document passed through change(doc), which
    edits it in place or returns its replacement (bytes are used verbatim,
    anything else is encoded as compact JSON)."""
    doc = manifest_doc(entries)
    out = change(doc)
    out = doc if out is None else out
    return replace(entries, MANIFEST, out if isinstance(out, bytes) else compact(out))


def listed(doc, path):
    return next(f for f in doc["manifest"]["files"] if f["path"] == path)


def set_file(path, /, **fields):
    return lambda doc: listed(doc, path).update(fields)


def set_checkpoint(**fields):
    return lambda doc: doc["manifest"].update(fields)


def set_top(**fields):
    return lambda doc: doc.update(fields)


def inject(entries, files):
    """entries with more files (path -> bytes), in the manifest and as
    payloads, both kept sorted."""
    def change(doc):
        rows = doc["manifest"]["files"]
        for path, data in files.items():
            rows.append({"path": path, "size": len(data), "mode": 0o644, "sha256": sha256(data)})
        rows.sort(key=lambda f: f["path"].encode())
    out = with_manifest(entries, change)
    for path, data in files.items():
        out = add(out, payload(path), data)
    return out


def host_passwd():
    """The host's own /etc/passwd, the payload of an entry naming it: were
    the name ever honoured, the file would keep its content."""
    try:
        with open("/etc/passwd", "rb") as f:
            return f.read()
    except OSError:
        return b"root:x:0:0:root:/root:/bin/sh\n"


def build(sb, case):
    """A case's archive bytes; a case returns triples (packed here) or bytes."""
    out = case(sb.base, sb.root)
    return out if isinstance(out, bytes) else pack(out)


def preview_files(doc):
    return [(f["path"], f["size"]) for f in doc["files"]]


# ---------------------------------------------------------------- fixtures


class Base:
    """The reference checkpoint and the archive the binary exported of it."""


@pytest.fixture(scope="module")
def base(stow_bin, tmp_path_factory):
    root = tmp_path_factory.mktemp("archive-base")
    env = sandbox_env(root)

    def ok(*args):
        rc, doc, err = run(stow_bin, args, env, root)
        assert rc == 0, f"{args}: {doc} {err}"
        return doc

    b = Base()
    b.registry = root / "registry"
    b.ws, b.cp = make_checkpoint(ok, root, "task1", FILES, "registry")
    b.export = ok("export", "--checkpoint-id", b.cp, "--output", root / "base.tar.gz",
                  "--registry-dir", b.registry)
    b.raw = (root / "base.tar.gz").read_bytes()
    b.tar = gzip.decompress(b.raw)
    b.gz = gzip.compress(b.tar, mtime=0)  # one member: 10-byte header, 8-byte trailer
    b.entries = read_entries(b.raw)
    b.modes = {f["path"]: f["mode"] for f in manifest_doc(b.entries)["manifest"]["files"]}
    # The target registry template already holds an unrelated checkpoint.
    _, warm = make_checkpoint(ok, root, "warm", {"warm.txt": b"warm\n"}, "warm-registry")
    ok("export", "--checkpoint-id", warm, "--output", root / "warm.tar.gz",
       "--registry-dir", root / "warm-registry")
    b.template = root / "template-registry"
    ok("import", "--archive", root / "warm.tar.gz", "--registry-dir", b.template)
    yield b
    shutil.rmtree(root, ignore_errors=True)


class Sandbox:
    """One test's world: every path the binary might write lies under root."""

    def __init__(self, stow_bin, root, base):
        self.bin, self.root, self.base = stow_bin, root, base
        self.env = sandbox_env(root)
        self.cwd = root / "cwd" / "deep" / "er"
        self.cwd.mkdir(parents=True)
        (root / "archives").mkdir()
        self.registry = root / "registry"
        shutil.copytree(base.template, self.registry, symlinks=True)

    def run(self, *args):
        return run(self.bin, args, self.env, self.cwd)

    def ok(self, *args):
        rc, doc, err = self.run(*args)
        assert rc == 0, f"{args}: {doc} {err}"
        return doc

    def refused(self, code, *args):
        rc, doc, _ = self.run(*args)
        assert rc == 1, f"{args} was accepted: {doc}"
        assert doc["error"]["code"] == code, f"{args}: {doc['error']}"
        return doc["error"]

    def write(self, name, data):
        path = self.root / "archives" / name
        path.write_bytes(data)
        return path

    def snapshot(self):
        return snapshot(self.root)

    def reset_registry(self):
        shutil.rmtree(self.registry)
        shutil.copytree(self.base.template, self.registry, symlinks=True)

    def assert_refused(self, data, code, flags=()):
        """preview and import both refuse the archive with `code` and change nothing."""
        archive = self.write("hostile.tar.gz", data)
        before = self.snapshot()
        self.refused(code, "preview", "--archive", archive, *flags)
        assert_unchanged(before, self.snapshot(), "refused preview")
        self.refused(code, "import", "--archive", archive, *flags, "--registry-dir", self.registry)
        assert_unchanged(before, self.snapshot(), "refused import")

    def assert_is_base_import(self, doc):
        assert doc["checkpoint_id"] == self.base.cp and doc["workspace_id"] == self.base.ws, doc
        assert (doc["files"], doc["bytes"]) == (len(FILES), TOTAL), doc

    def assert_restores_base(self, name):
        """The base checkpoint, restored from this registry, holds FILES."""
        root = self.root / name
        self.ok("restore", "--checkpoint-id", self.base.cp, "--root", root,
                "--registry-dir", self.registry)
        for rel, data in FILES.items():
            assert (root / rel).read_bytes() == data, rel
            assert stat.S_IMODE(os.stat(root / rel).st_mode) == self.base.modes[rel], rel


@pytest.fixture
def sb(stow_bin, workdir, base):
    return Sandbox(stow_bin, workdir, base)
