"""Hostile checkpoint transfer archives against the real binary
(`workspace export`, `workspace preview`, `workspace import`).

Every archive here starts as a REAL archive exported by the binary. It is
read with `tarfile` into (name, TarInfo, bytes) triples, given exactly one
defect, and written back with `tarfile` (PAX format) and `gzip`; defects at
the gzip level edit the compressed bytes directly. `preview` and `import`
must both refuse the result with a stable error code and leave the disk as
it was. Every path the binary could write lies inside the test's sandbox:
the target registry (hidden `.stow` state included), the directory holding
the archive, the working directory, `TMPDIR`, and `HOME`/`XDG_CONFIG_HOME`
(so a default registry would show). The sandbox's full listing (path, type,
size, sha256, link target), plus a few host paths a traversal would aim
at, must be identical before and after.

The target registry is a copy of one that already holds an unrelated
imported checkpoint, so its lock file and state directories exist before
the test: a leftover stage, temporary file or blob shows in the listing,
while taking the lock does not.

Families (one test each, parametrized): traversal, absolute names,
non-regular entries, the entry set (duplicate, unexpected, missing),
payload integrity, data after the tar end, gzip damage, the manifest entry,
capacity limits, an existing checkpoint ID and sensitive paths. Positive
controls show the exported archive, and archives re-written by this file's
own writer, are accepted, so each refusal comes from its defect and not from
the crafting. A seeded fuzz run closes the file.
"""

import gzip
import hashlib
import io
import json
import os
import random
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


# -------------------------------------------------------- positive controls


def test_exported_archive_matches_the_format(base):
    assert [n for n, _, _ in base.entries] == [MANIFEST] + [payload(p) for p in sorted(FILES)]
    assert base.entries[0][1].isreg()
    for name, info, data in base.entries[1:]:
        assert info.isreg() and info.mode == 0o600 and info.mtime == 0, name
        assert data == FILES[name[len("files/"):]], name
    doc = manifest_doc(base.entries)
    assert base.entries[0][2].rstrip(b"\n") == compact(doc)
    assert set(doc) == {"format_version", "manifest"}
    m = doc["manifest"]
    assert doc["format_version"] == m["version"] == 1
    assert (m["id"], m["workspace_id"]) == (base.cp, base.ws)
    assert [(f["path"], f["size"], f["sha256"]) for f in m["files"]] == [
        (p, len(FILES[p]), sha256(FILES[p])) for p in sorted(FILES)]
    e = base.export
    assert (e["version"], e["checkpoint_id"], e["files"]) == (1, base.cp, len(FILES))
    assert e["sha256"].removeprefix("sha256:") == sha256(base.raw)


def test_export_is_deterministic_and_never_overwrites(sb):
    b = sb.base
    again = sb.root / "archives" / "again.tar.gz"
    doc = sb.ok("export", "--checkpoint-id", b.cp, "--output", again, "--registry-dir", b.registry)
    assert again.read_bytes() == b.raw
    assert os.path.samefile(os.path.join(sb.cwd, doc["archive"]), again)
    assert doc["sha256"].removeprefix("sha256:") == sha256(b.raw)
    precious = sb.write("precious.tar.gz", b"precious")
    before = sb.snapshot()
    sb.refused("already_exists", "export", "--checkpoint-id", b.cp, "--output", precious,
               "--registry-dir", b.registry)
    assert_unchanged(before, sb.snapshot(), "refused export")


def test_exported_archive_previews_and_imports(sb):
    archive = sb.write("base.tar.gz", sb.base.raw)
    before = sb.snapshot()
    p = sb.ok("preview", "--archive", archive)
    assert_unchanged(before, sb.snapshot(), "preview")
    assert (p["version"], p["checkpoint_id"], p["workspace_id"]) == (1, sb.base.cp, sb.base.ws)
    assert preview_files(p) == LISTING
    assert p["bytes"] == TOTAL and p["sensitive_paths"] == []
    sb.assert_is_base_import(sb.ok("import", "--archive", archive, "--registry-dir", sb.registry))
    assert archive.read_bytes() == sb.base.raw
    sb.assert_restores_base("restored")


ACCEPTED = [
    pytest.param(lambda b, r: b.gz, id="recompressed-original-tar"),
    pytest.param(lambda b, r: b.entries, id="rewritten"),
    pytest.param(lambda b, r: with_manifest(b.entries, lambda d: None), id="reserialized-manifest"),
    pytest.param(lambda b, r: pack(b.entries, members=3), id="three-gzip-members"),
    pytest.param(lambda b, r: pack(b.entries, after_end=zeros(1024)), id="no-record-padding"),
    pytest.param(lambda b, r: pack(b.entries, append=zeros(65536)), id="extra-zero-padding"),
]


@pytest.mark.parametrize("case", ACCEPTED)
def test_crafted_valid_archive_is_accepted(sb, case):
    archive = sb.write("valid.tar.gz", build(sb, case))
    p = sb.ok("preview", "--archive", archive)
    assert p["checkpoint_id"] == sb.base.cp and preview_files(p) == LISTING
    sb.assert_is_base_import(sb.ok("import", "--archive", archive, "--registry-dir", sb.registry))


def test_long_names_use_pax_and_round_trip(sb):
    # The last segment alone is over ustar's 100-byte name field.
    long = "deep/" + "n" * 40 + "/" + "m" * 120 + ".txt"
    files = {long: b"long\n", "short.txt": b"s"}
    _, cp = make_checkpoint(sb.ok, sb.root, "long", files, "long-registry")
    out = sb.root / "archives" / "long.tar.gz"
    sb.ok("export", "--checkpoint-id", cp, "--output", out, "--registry-dir", sb.root / "long-registry")
    raw = out.read_bytes()
    assert b" path=" + payload(long).encode() + b"\n" in gzip.decompress(raw)
    entries = read_entries(raw)
    assert [n for n, _, _ in entries] == [MANIFEST, payload(long), payload("short.txt")]
    assert preview_files(sb.ok("preview", "--archive", out)) == [(long, 5), ("short.txt", 1)]
    rewritten = sb.write("long-rewritten.tar.gz", pack(entries))
    doc = sb.ok("import", "--archive", rewritten, "--registry-dir", sb.registry)
    assert (doc["checkpoint_id"], doc["files"]) == (cp, 2)


# ------------------------------------------------------------ refusals


TRAVERSAL = [
    pytest.param(lambda b, r: rename(b.entries, "files/a.txt", "files/../../x"), id="payload-up-up"),
    pytest.param(lambda b, r: rename(b.entries, "files/a.txt", "../x"), id="top-level-up"),
    pytest.param(lambda b, r: rename(b.entries, "files/a.txt", "files/a/../../../etc/x"),
                 id="payload-deep-up-to-etc"),
    pytest.param(lambda b, r: rename(with_manifest(b.entries, set_file("a.txt", path="../x")),
                                     "files/a.txt", "files/../x"), id="manifest-path-up"),
    pytest.param(lambda b, r: rename(with_manifest(b.entries, set_file("dir/b.txt", path="dir/../../x")),
                                     "files/dir/b.txt", "files/dir/../../x"), id="manifest-path-dir-up-up"),
    # The ustar name is harmless; the PAX path record, which readers honour, is not.
    pytest.param(lambda b, r: replace(b.entries, "files/a.txt", pax={"path": "../../x"}),
                 id="pax-path-overrides-ustar-name"),
]


@pytest.mark.parametrize("case", TRAVERSAL)
def test_traversal_refused(sb, case):
    sb.assert_refused(build(sb, case), "invalid_archive")


ABSOLUTE = [
    pytest.param(lambda b, r: add(b.entries, "/etc/passwd", host_passwd()), id="etc-passwd"),
    pytest.param(lambda b, r: rename(b.entries, "files/a.txt", "/files/a.txt"), id="slash-files-a"),
    pytest.param(lambda b, r: rename(b.entries, "files/a.txt", str(r / "escaped.txt")), id="into-sandbox"),
    pytest.param(lambda b, r: rename(with_manifest(b.entries, set_file("a.txt", path=str(r / "escaped.txt"))),
                                     "files/a.txt", payload(str(r / "escaped.txt"))), id="manifest-path"),
]


@pytest.mark.parametrize("case", ABSOLUTE)
def test_absolute_names_refused(sb, case):
    sb.assert_refused(build(sb, case), "invalid_archive")


NON_REGULAR = [
    pytest.param(lambda b, r: replace(b.entries, "files/a.txt", kind=tarfile.SYMTYPE, linkname="/etc/passwd"),
                 id="symlink-absolute"),
    pytest.param(lambda b, r: replace(b.entries, "files/a.txt", kind=tarfile.SYMTYPE, linkname="../../../x"),
                 id="symlink-relative"),
    # A directory symlink, then a file written "through" it.
    pytest.param(lambda b, r: add(b.entries, "files/dir", kind=tarfile.SYMTYPE, linkname=str(r)),
                 id="symlink-then-file"),
    pytest.param(lambda b, r: replace(b.entries, MANIFEST, kind=tarfile.SYMTYPE, linkname="/etc/passwd"),
                 id="symlink-manifest"),
    pytest.param(lambda b, r: replace(b.entries, "files/a.txt", kind=tarfile.LNKTYPE, linkname="files/dir/b.txt"),
                 id="hardlink"),
    pytest.param(lambda b, r: replace(b.entries, "files/a.txt", kind=tarfile.LNKTYPE, linkname="/etc/passwd"),
                 id="hardlink-absolute"),
    pytest.param(lambda b, r: replace(b.entries, "files/a.txt", kind=tarfile.CHRTYPE, devmajor=1, devminor=3),
                 id="char-device"),
    pytest.param(lambda b, r: replace(b.entries, "files/a.txt", kind=tarfile.BLKTYPE, devmajor=7, devminor=0),
                 id="block-device"),
    pytest.param(lambda b, r: replace(b.entries, "files/a.txt", kind=tarfile.FIFOTYPE), id="fifo"),
    pytest.param(lambda b, r: add(b.entries, "files/dir", kind=tarfile.DIRTYPE, mode=0o700),
                 id="directory-entry"),
    pytest.param(lambda b, r: replace(b.entries, "files/a.txt", kind=tarfile.DIRTYPE, mode=0o700),
                 id="file-as-directory"),
]


@pytest.mark.parametrize("case", NON_REGULAR)
def test_non_regular_entries_refused(sb, case):
    sb.assert_refused(build(sb, case), "invalid_archive")


ENTRY_SET = [
    pytest.param(lambda b, r: dup(b.entries, "files/dir/b.txt"), id="duplicate-payload"),
    pytest.param(lambda b, r: dup(b.entries, "files/dir/b.txt", b"E" * len(FILES["dir/b.txt"])), id="duplicate-evil-second"),
    pytest.param(lambda b, r: dup(b.entries, MANIFEST), id="duplicate-manifest"),
    pytest.param(lambda b, r: dup(with_manifest(b.entries, lambda d: d["manifest"]["files"].insert(
        0, dict(d["manifest"]["files"][0]))), "files/a.txt"), id="duplicate-path-listed-twice"),
    pytest.param(lambda b, r: add(b.entries, "files/extra.txt", b"extra\n"), id="unexpected-payload"),
    pytest.param(lambda b, r: add(b.entries, "notes.txt", b"notes\n"), id="unexpected-top-level"),
    pytest.param(lambda b, r: add(b.entries, "objects/" + sha256(FILES["a.txt"]), FILES["a.txt"]),
                 id="object-in-v1-archive"),
    pytest.param(lambda b, r: drop(b.entries, "files/dir/b.txt"), id="missing-payload"),
    pytest.param(lambda b, r: drop(b.entries, MANIFEST), id="missing-manifest"),
    pytest.param(lambda b, r: [], id="no-entries"),
]


@pytest.mark.parametrize("case", ENTRY_SET)
def test_entry_set_refused(sb, case):
    sb.assert_refused(build(sb, case), "invalid_archive")


C_BIN = payload("dir/sub/c.bin")
INTEGRITY = [
    pytest.param(lambda b, r: replace(b.entries, C_BIN, flip(FILES["dir/sub/c.bin"], 2048, 0x01)),
                 id="digest-mismatch"),
    pytest.param(lambda b, r: with_manifest(b.entries, set_file("a.txt", sha256=sha256(FILES["dir/b.txt"]))),
                 id="manifest-names-other-digest"),
    pytest.param(lambda b, r: replace(b.entries, C_BIN, FILES["dir/sub/c.bin"] + b"!"), id="entry-longer"),
    pytest.param(lambda b, r: replace(b.entries, C_BIN, FILES["dir/sub/c.bin"][:-1]), id="entry-shorter"),
    pytest.param(lambda b, r: replace(b.entries, "files/a.txt", b""), id="entry-empty"),
    pytest.param(lambda b, r: replace(with_manifest(b.entries, set_file("dir/sub/c.bin", size=4097)),
                                      C_BIN, FILES["dir/sub/c.bin"] + b"!"), id="size-fixed-digest-not"),
]


@pytest.mark.parametrize("case", INTEGRITY)
def test_payload_integrity_refused(sb, case):
    sb.assert_refused(build(sb, case), "invalid_archive")


def second_tar():
    return tar_bytes([member("files/extra.txt", b"extra\n")])[0]


AFTER_END = [
    pytest.param(lambda b, r: pack(b.entries, after_end=zeros(1024) + b"garbage!" + zeros(504)),
                 id="garbage-block"),
    pytest.param(lambda b, r: pack(b.entries, after_end=zeros(1024) + b"\x01" + zeros(511)), id="one-byte"),
    pytest.param(lambda b, r: pack(b.entries, after_end=zeros(1024 + 8191) + b"\x01"), id="deep-in-padding"),
    pytest.param(lambda b, r: pack(b.entries, append=b"trailing"), id="after-record-padding"),
    pytest.param(lambda b, r: pack(b.entries, append=second_tar()), id="second-archive"),
    pytest.param(lambda b, r: pack(b.entries, after_end=zeros(512) + second_tar()),
                 id="entry-after-lone-zero-block"),
    pytest.param(lambda b, r: gz(b.tar + b"\x01" + zeros(511)), id="exported-tar-plus-byte"),
]


@pytest.mark.parametrize("case", AFTER_END)
def test_data_after_tar_end_refused(sb, case):
    sb.assert_refused(build(sb, case), "invalid_archive")


GZIP = [
    pytest.param(lambda b, r: b"", id="empty-file"),
    pytest.param(lambda b, r: b.gz[:3], id="cut-in-header"),
    pytest.param(lambda b, r: b.gz[:9], id="cut-end-of-header"),
    pytest.param(lambda b, r: b.gz[:10], id="header-only"),
    pytest.param(lambda b, r: b.gz[:len(b.gz) // 2], id="cut-mid-stream"),
    pytest.param(lambda b, r: b.gz[:-8], id="cut-before-trailer"),
    pytest.param(lambda b, r: b.gz[:-4], id="cut-in-trailer"),
    pytest.param(lambda b, r: b.gz[:-1], id="cut-last-byte"),
    pytest.param(lambda b, r: b.gz + gzip.compress(b"", mtime=0)[:6], id="cut-second-member"),
    pytest.param(lambda b, r: flip(b.gz, len(b.gz) // 2), id="flip-mid-stream"),
    pytest.param(lambda b, r: flip(b.gz, -8), id="bad-crc"),
    pytest.param(lambda b, r: flip(b.gz, -1), id="bad-isize"),
    pytest.param(lambda b, r: flip(b.gz, 0), id="bad-magic"),
    pytest.param(lambda b, r: flip(b.gz, 2), id="bad-method"),
    pytest.param(lambda b, r: b.gz + b"junk", id="junk-after-member"),
    pytest.param(lambda b, r: b.tar, id="not-compressed"),
]


@pytest.mark.parametrize("case", GZIP)
def test_damaged_gzip_refused(sb, case):
    sb.assert_refused(build(sb, case), "invalid_archive")


BAD_MANIFEST = [
    pytest.param(lambda b, r: with_manifest(b.entries, lambda d: compact(d) + b" " * MANIFEST_LIMIT),
                 id="over-16MiB-whitespace"),
    pytest.param(lambda b, r: with_manifest(b.entries, set_checkpoint(excluded=["x" * MANIFEST_LIMIT])),
                 id="over-16MiB-excluded"),
    pytest.param(lambda b, r: b.entries[1:2] + b.entries[:1] + b.entries[2:], id="second-entry"),
    pytest.param(lambda b, r: b.entries[1:] + b.entries[:1], id="last-entry"),
    pytest.param(lambda b, r: rename(b.entries, MANIFEST, "Manifest.json"), id="other-name"),
    pytest.param(lambda b, r: with_manifest(b.entries, lambda d: b"{not json"), id="not-json"),
    pytest.param(lambda b, r: with_manifest(b.entries, lambda d: b""), id="empty"),
    pytest.param(lambda b, r: with_manifest(b.entries, lambda d: b"[]"), id="not-an-object"),
    pytest.param(lambda b, r: with_manifest(b.entries, lambda d: compact(d) + b"{}"), id="two-documents"),
    pytest.param(lambda b, r: with_manifest(b.entries, lambda d: {"format_version": 1}), id="no-manifest-key"),
    pytest.param(lambda b, r: with_manifest(b.entries, lambda d: {"manifest": d["manifest"]}),
                 id="no-format-version"),
    pytest.param(lambda b, r: with_manifest(b.entries, set_top(extra=1)), id="unknown-top-field"),
    pytest.param(lambda b, r: with_manifest(b.entries, set_checkpoint(bogus=1)), id="unknown-manifest-field"),
    pytest.param(lambda b, r: with_manifest(b.entries, set_file("a.txt", bogus=1)), id="unknown-file-field"),
    pytest.param(lambda b, r: with_manifest(b.entries, set_top(format_version=2)), id="format-2-manifest-1"),
    pytest.param(lambda b, r: with_manifest(b.entries, set_checkpoint(version=2)), id="format-1-manifest-2"),
    pytest.param(lambda b, r: with_manifest(b.entries, lambda d: {
        "format_version": 99, "manifest": {**d["manifest"], "version": 99}}), id="unknown-version"),
    pytest.param(lambda b, r: with_manifest(b.entries, set_file("a.txt", sha256="0" * 63)), id="sha-63-hex"),
    pytest.param(lambda b, r: with_manifest(b.entries, set_file("a.txt", sha256="g" * 64)), id="sha-not-hex"),
    pytest.param(lambda b, r: with_manifest(b.entries, set_file("a.txt", mode=0o4755)), id="mode-setuid"),
    pytest.param(lambda b, r: with_manifest(b.entries, set_file("a.txt", mode=0o1000)), id="mode-over-0777"),
    pytest.param(lambda b, r: with_manifest(b.entries, set_file("a.txt", size=-1)), id="negative-size"),
    pytest.param(lambda b, r: with_manifest(b.entries, set_checkpoint(id="../../escape")), id="id-traversal"),
    pytest.param(lambda b, r: with_manifest(b.entries, set_checkpoint(id="cp_" + "0" * 20 + "/../")),
                 id="id-with-slash"),
    pytest.param(lambda b, r: with_manifest(b.entries, set_checkpoint(workspace_id="ws_../../x")),
                 id="workspace-id-traversal"),
    pytest.param(lambda b, r: rename(with_manifest(b.entries, set_file("a.txt", path="")),
                                     "files/a.txt", "files/"), id="empty-path"),
]


@pytest.mark.parametrize("case", BAD_MANIFEST)
def test_bad_manifest_entry_refused(sb, case):
    sb.assert_refused(build(sb, case), "invalid_archive")


@pytest.mark.parametrize("flags", [
    ["--max-files", "2"],
    ["--max-files", "1"],
    ["--max-bytes", str(TOTAL - 1)],
    ["--max-bytes", "1"],
], ids=lambda f: "=".join(f))
def test_over_limit_archive_refused(sb, flags):
    sb.assert_refused(sb.base.raw, "capacity_exceeded", flags=flags)


def test_directories_and_links_are_bounded_too(sb):
    """--max-files bounds the entries without a payload apart: a small
    archive must not make a restore create any number of directories."""
    def many(doc):
        extra = [{"path": f"empty{i}", "mode": 0o755} for i in range(len(FILES) + 1)]
        doc["manifest"]["dirs"] = doc["manifest"].get("dirs", []) + extra
    sb.assert_refused(pack(with_manifest(sb.base.entries, many)), "capacity_exceeded",
                      flags=["--max-files", str(len(FILES))])


def test_limits_at_the_boundary_are_accepted(sb):
    archive = sb.write("base.tar.gz", sb.base.raw)
    flags = ["--max-files", str(len(FILES)), "--max-bytes", str(TOTAL)]
    assert sb.ok("preview", "--archive", archive, *flags)["bytes"] == TOTAL
    sb.assert_is_base_import(sb.ok("import", "--archive", archive, *flags, "--registry-dir", sb.registry))


def test_existing_checkpoint_id_refused(sb):
    archive = sb.write("base.tar.gz", sb.base.raw)
    sb.assert_is_base_import(sb.ok("import", "--archive", archive, "--registry-dir", sb.registry))
    before = sb.snapshot()
    sb.refused("already_exists", "import", "--archive", archive, "--registry-dir", sb.registry)
    assert_unchanged(before, sb.snapshot(), "second import")
    # Preview touches no registry: the archive itself is still fine.
    assert sb.ok("preview", "--archive", archive)["checkpoint_id"] == sb.base.cp
    # So is importing into (a copy of) the registry it was exported from.
    source = sb.root / "source-registry"
    shutil.copytree(sb.base.registry, source, symlinks=True)
    before = sb.snapshot()
    sb.refused("already_exists", "import", "--archive", archive, "--registry-dir", source)
    assert_unchanged(before, sb.snapshot(), "import into the source registry")
    sb.assert_restores_base("restored")


def test_sensitive_paths_need_include_sensitive(sb):
    _, cp = make_checkpoint(sb.ok, sb.root, "secret", {"a.txt": b"alpha\n"}, "secret-registry",
                            extra={".env": b"TOKEN=1\n"}, flags=["--include-sensitive"])
    reg = ["--registry-dir", sb.root / "secret-registry"]
    out = sb.root / "archives" / "secret.tar.gz"
    before = sb.snapshot()
    sb.refused("sensitive_path", "export", "--checkpoint-id", cp, "--output", out, *reg)
    assert_unchanged(before, sb.snapshot(), "refused export")
    sb.ok("export", "--checkpoint-id", cp, "--output", out, "--include-sensitive", *reg)
    p = sb.ok("preview", "--archive", out)
    assert [f["path"] for f in p["files"]] == [".env", "a.txt"]
    assert p["sensitive_paths"] == [".env"]
    before = sb.snapshot()
    sb.refused("sensitive_path", "import", "--archive", out, "--registry-dir", sb.registry)
    assert_unchanged(before, sb.snapshot(), "import without --include-sensitive")
    doc = sb.ok("import", "--archive", out, "--include-sensitive", "--registry-dir", sb.registry)
    assert (doc["checkpoint_id"], doc["files"]) == (cp, 2)


def test_injected_sensitive_paths_are_detected(sb):
    # A hand-made archive may carry credentials its exporter never flagged.
    secrets = {".env": b"TOKEN=1\n", "dir/id_rsa": b"-----BEGIN KEY-----\n"}
    archive = sb.write("injected.tar.gz", pack(inject(sb.base.entries, secrets)))
    p = sb.ok("preview", "--archive", archive)
    assert p["sensitive_paths"] == [".env", "dir/id_rsa"]
    assert preview_files(p) == sorted(LISTING + [(k, len(v)) for k, v in secrets.items()])
    before = sb.snapshot()
    sb.refused("sensitive_path", "import", "--archive", archive, "--registry-dir", sb.registry)
    assert_unchanged(before, sb.snapshot(), "import without --include-sensitive")
    doc = sb.ok("import", "--archive", archive, "--include-sensitive", "--registry-dir", sb.registry)
    assert (doc["checkpoint_id"], doc["files"]) == (sb.base.cp, len(FILES) + len(secrets))


# ------------------------------------------------------------------- fuzz


def test_random_damage_never_crashes_or_leaks(sb):
    rng = random.Random(0x570A)
    raw = sb.base.raw
    cases = []
    for _ in range(40):
        pos, mask = rng.randrange(len(raw)), rng.randrange(1, 256)
        cases.append((f"flip@{pos}^{mask:#04x}", flip(raw, pos, mask)))
    for _ in range(20):
        cut = rng.randrange(len(raw))
        cases.append((f"cut@{cut}", raw[:cut]))
    archive = sb.root / "archives" / "fuzz.tar.gz"
    for i, (label, data) in enumerate(cases):
        archive.write_bytes(data)
        before = sb.snapshot()
        prc, pdoc, _ = sb.run("preview", "--archive", archive)
        assert_unchanged(before, sb.snapshot(), f"{label}: preview")
        irc, idoc, _ = sb.run("import", "--archive", archive, "--registry-dir", sb.registry)
        assert prc == irc, f"{label}: preview {pdoc}, import {idoc}"
        if irc == 1:
            for doc in (pdoc, idoc):
                assert doc["error"]["code"] in DAMAGE_CODES, f"{label}: {doc}"
            assert_unchanged(before, sb.snapshot(), f"{label}: import")
        else:
            # The damage hit bytes gzip ignores: the archive is the original.
            assert preview_files(pdoc) == LISTING, label
            sb.assert_is_base_import(idoc)
            sb.assert_restores_base(f"restored-{i}")
            sb.reset_registry()
