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
the crafting. A seeded fuzz run closes the file. The sandbox, the snapshots and the
crafting helpers are in archivekit.py.
"""

import gzip
import os
import random
import shutil
import tarfile

import pytest

from archivekit import (  # noqa: F401  (base and sb are fixtures)
    DAMAGE_CODES,
    FILES,
    LISTING,
    MANIFEST,
    MANIFEST_LIMIT,
    TOTAL,
    add,
    assert_unchanged,
    base,
    build,
    compact,
    drop,
    dup,
    flip,
    gz,
    host_passwd,
    inject,
    make_checkpoint,
    manifest_doc,
    member,
    pack,
    payload,
    preview_files,
    read_entries,
    rename,
    replace,
    sb,
    set_checkpoint,
    set_file,
    set_top,
    sha256,
    tar_bytes,
    with_manifest,
    zeros,
)


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


def test_deep_and_long_paths(sb):
    """A deep directory chain is counted before it is validated (it took
    seconds per thousand levels), and a path no file system here could hold
    (a name over 255 bytes, a path over 4096) is refused, not imported to
    fail at restore."""
    def deep(doc):
        chain = [{"path": "/".join(["x"] * n), "mode": 0o755} for n in range(1, 2001)]
        # Also invalid: over the bound, it is the bound that answers.
        doc["manifest"]["dirs"] = chain + [{"path": "../escape", "mode": 0o755}]
    sb.assert_refused(pack(with_manifest(sb.base.entries, deep)), "capacity_exceeded",
                      flags=["--max-files", "5"])
    def long_name(doc):
        doc["manifest"]["dirs"] = [{"path": "n" * 300, "mode": 0o755}]
    sb.assert_refused(pack(with_manifest(sb.base.entries, long_name)), "invalid_archive")
    def long_path(doc):
        doc["manifest"]["dirs"] = [{"path": "/".join(["d" * 200] * 25), "mode": 0o755}]
    sb.assert_refused(pack(with_manifest(sb.base.entries, long_path)), "invalid_archive")


def test_a_link_with_a_sensitive_name_needs_include_sensitive(sb):
    """A link named .env restores a credential as a file would: preview
    lists it, import refuses it without --include-sensitive."""
    def links(doc):
        doc["manifest"]["links"] = [{"path": ".env", "target": "/etc/passwd"}]
    archive = sb.write("links.tar.gz", pack(with_manifest(sb.base.entries, links)))
    assert sb.ok("preview", "--archive", archive)["sensitive_paths"] == [".env"]
    before = sb.snapshot()
    sb.refused("sensitive_path", "import", "--archive", archive, "--registry-dir", sb.registry)
    assert_unchanged(before, sb.snapshot(), "import without --include-sensitive")
    doc = sb.ok("import", "--archive", archive, "--include-sensitive", "--registry-dir", sb.registry)
    assert doc["checkpoint_id"] == sb.base.cp


def test_limits_at_the_boundary_are_accepted(sb):
    archive = sb.write("base.tar.gz", sb.base.raw)
    flags = ["--max-files", str(len(FILES)), "--max-bytes", str(TOTAL)]
    assert sb.ok("preview", "--archive", archive, *flags)["bytes"] == TOTAL
    sb.assert_is_base_import(sb.ok("import", "--archive", archive, *flags, "--registry-dir", sb.registry))


def test_a_foreign_child_never_pins_a_checkpoint(sb):
    """An archive whose checkpoint names as parent a checkpoint of another
    workspace is refused when that parent is here; imported first, it
    neither blocks the parent's import nor keeps the parent from
    deletion (it could otherwise pin any checkpoint whose ID it knows)."""
    _, child = make_checkpoint(sb.ok, sb.root, "other", {"o.txt": b"other\n"}, "other-registry")
    out = sb.root / "archives" / "other.tar.gz"
    sb.ok("export", "--checkpoint-id", child, "--output", out, "--registry-dir", sb.root / "other-registry")
    foreign = sb.write("foreign.tar.gz", pack(with_manifest(read_entries(out.read_bytes()),
                                                            set_checkpoint(parent_id=sb.base.cp))))
    base = sb.write("base.tar.gz", sb.base.raw)
    # The parent here first: the foreign child is refused.
    sb.ok("import", "--archive", base, "--registry-dir", sb.registry)
    sb.refused("invalid_archive", "import", "--archive", foreign, "--registry-dir", sb.registry)
    # The child first: both import, and the parent can still be deleted.
    sb.reset_registry()
    sb.ok("import", "--archive", foreign, "--registry-dir", sb.registry)
    sb.assert_is_base_import(sb.ok("import", "--archive", base, "--registry-dir", sb.registry))
    deleted = sb.ok("checkpoint-delete", "--checkpoint-id", sb.base.cp, "--registry-dir", sb.registry)
    assert deleted["deleted"] is True


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
