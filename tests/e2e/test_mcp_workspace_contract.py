"""`stow-s3 mcp` workspace profile, its contract through the official
Python MCP client: the tool list is seed 000's verbatim (the rewind tools
beyond it are test_mcp_rewind.py's), every tool refuses unknown
properties, the checkpoint guide is a resource and the instructions, and
startup refusals (spec/mcp.md §11-12, §14 items 23-25; spec/README.md
"Interface decisions")."""

from __future__ import annotations

import json
import subprocess

import pytest

from mcpkit import (ADOPT_TOOL, CALL_TIMEOUT, ERAS, EXPORT_TOOL, REWIND_TOOLS, SEED_000, SUBPROCESS_TIMEOUT,
                    WORKSPACE_TOOLS, WsRawServer, arun, assert_refused, server_env, structured, ws_session)
from test_mcp_object import seed_tools
from wskit import SMALL, checkpoint_dirs, cli_checkpoint, listing, prepare


# ---------------------------------------------------------------- tool list


@pytest.mark.skipif(not SEED_000.exists(), reason="../shared/seeds is not beside the repository")
@pytest.mark.parametrize("era", ERAS)
def test_tools_are_the_seeds_verbatim(stow_bin, workdir, era):
    seed = seed_tools()
    p = prepare(stow_bin, workdir, SMALL)
    reg, wid = workdir / "reg", p["workspace_id"]
    (workdir / "export").mkdir()
    (workdir / "adopt").mkdir()

    async def go():
        lists = []
        for extra in ([], ["--export-root", workdir / "export"],
                      ["--export-root", workdir / "export", "--adopt-root", workdir / "adopt"]):
            async with ws_session(stow_bin, reg, wid, era, extra) as s:
                lists.append((await s.client.list_tools()).tools)
        return lists

    bare, export, both = arun(go())
    assert [t.name for t in bare] == WORKSPACE_TOOLS + REWIND_TOOLS
    assert [t.name for t in export] == WORKSPACE_TOOLS + [EXPORT_TOOL] + REWIND_TOOLS
    assert [t.name for t in both] == WORKSPACE_TOOLS + [EXPORT_TOOL, ADOPT_TOOL] + REWIND_TOOLS
    for tools in (bare, export, both):
        for t in tools:
            if t.name in REWIND_TOOLS:
                continue
            desc, inp, out = seed[t.name]
            assert t.description == desc, t.name
            assert t.input_schema == inp, t.name
            assert t.output_schema == out, t.name


# ---------------------------------------------------------------- unknown properties


@pytest.mark.parametrize("era", ERAS)
def test_every_tool_refuses_unknown_properties(stow_bin, workdir, era):
    p = prepare(stow_bin, workdir, SMALL)
    reg, wid = workdir / "reg", p["workspace_id"]
    cp = cli_checkpoint(stow_bin, reg, wid, "--portable")[1]["checkpoint_id"]
    exp, adp = workdir / "export", workdir / "adopt"
    exp.mkdir()
    adp.mkdir()

    async def go():
        async with ws_session(stow_bin, reg, wid, era, ["--export-root", exp, "--adopt-root", adp]) as s:
            # A real bundle, so a refused adopt is refused for its property.
            assert (await s.export(wid, cp, "b1"))["outcome"] == "committed"
            before_cps, before_exp = checkpoint_dirs(reg), listing(exp)
            base = {
                "stow_workspace_inspect": {"workspace_id": wid},
                "stow_checkpoint_create": {"workspace_id": wid, "request_key": "rk-unknown"},
                "stow_checkpoint_resolve": {"workspace_id": wid, "request_key": "rk-unknown"},
                "stow_checkpoint_inspect": {"checkpoint_id": cp},
                "stow_checkpoint_diff": {"from_id": cp, "to_id": cp},
                EXPORT_TOOL: {"workspace_id": wid, "checkpoint_id": cp, "bundle": "b-unknown"},
                ADOPT_TOOL: {"bundle": "b1", "destination": "d-unknown"},
            }
            assert set(base) == set(WORKSPACE_TOOLS + [EXPORT_TOOL, ADOPT_TOOL])
            refused = [(name, {**args, "surprise": 1}) for name, args in base.items()]
            refused += [
                ("stow_checkpoint_create", {**base["stow_checkpoint_create"], "registry_dir": str(workdir)}),
                ("stow_checkpoint_create", {**base["stow_checkpoint_create"], "portable": False}),
                ("stow_checkpoint_create", {**base["stow_checkpoint_create"], "include_sensitive": True}),
                ("stow_checkpoint_inspect", {**base["stow_checkpoint_inspect"], "workspace_id": wid}),
                (EXPORT_TOOL, {**base[EXPORT_TOOL], "export_root": str(workdir)}),
                (ADOPT_TOOL, {**base[ADOPT_TOOL], "adopt_root": str(workdir)}),
                (ADOPT_TOOL, {**base[ADOPT_TOOL], "team": "platform"}),
            ]
            for name, args in refused:
                r = await s.raw(name, args)
                assert r.is_error, (name, args, r)
                if r.structured_content is not None:
                    assert "error" in r.structured_content, (name, r.structured_content)
                    assert r.structured_content.get("outcome") != "committed"
            # None of the refused calls had an effect.
            assert checkpoint_dirs(reg) == before_cps
            assert listing(exp) == before_exp
            assert listing(adp) == []
            missing = await s.resolve(wid, "rk-unknown")
            assert_refused(missing, "unknown", "not_found")

    arun(go())


# ---------------------------------------------------------------- startup refusals


def _object_flag_cases():
    return [
        ("bucket", ["--bucket", "x"], "--bucket"),
        ("create-bucket", ["--create-bucket"], "--create-bucket"),
        ("browser", ["--browser"], "--browser"),
        ("read-only", ["--read-only"], "--read-only"),
        ("object-dir", ["--object-dir", "{workdir}/objs"], "--object-dir"),
    ]


STARTUP_CASES = [
    # (id, argv template); run with cwd = workdir, so "reg" exists relatively.
    ("relative-registry", ["--registry-dir", "reg", "--workspace-id", "{wid}", "--timeout", "30s"]),
    ("missing-registry", ["--registry-dir", "{workdir}/nope", "--workspace-id", "{wid}", "--timeout", "30s"]),
    ("unknown-workspace", ["--registry-dir", "{reg}", "--workspace-id", "ws_0000000000000000", "--timeout", "30s"]),
    ("timeout-missing", ["--registry-dir", "{reg}", "--workspace-id", "{wid}"]),
    ("timeout-zero", ["--registry-dir", "{reg}", "--workspace-id", "{wid}", "--timeout", "0s"]),
    ("timeout-unparsable", ["--registry-dir", "{reg}", "--workspace-id", "{wid}", "--timeout", "soon"]),
    ("export-root-missing", ["--registry-dir", "{reg}", "--workspace-id", "{wid}", "--timeout", "30s",
                             "--export-root", "{workdir}/no-export"]),
    ("adopt-root-missing", ["--registry-dir", "{reg}", "--workspace-id", "{wid}", "--timeout", "30s",
                            "--export-root", "{workdir}/export", "--adopt-root", "{workdir}/no-adopt"]),
    ("adopt-without-export", ["--registry-dir", "{reg}", "--workspace-id", "{wid}", "--timeout", "30s",
                              "--adopt-root", "{workdir}/adopt"]),
]


def _start_refused(stow_bin, workdir, argv):
    out = subprocess.run(
        [stow_bin, "mcp", *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
        cwd=workdir,
        env=server_env(),
    )
    assert out.returncode != 0, f"{argv}: started (rc 0); stderr {out.stderr!r}"
    assert out.stdout == "", f"{argv}: stdout must stay empty: {out.stdout!r}"
    assert out.stderr.strip(), f"{argv}: no message on stderr"
    return out.stderr


@pytest.fixture
def startup_ws(stow_bin, workdir):
    p = prepare(stow_bin, workdir, SMALL)
    (workdir / "export").mkdir()
    (workdir / "adopt").mkdir()
    return {"workdir": str(workdir), "reg": str(workdir / "reg"), "wid": p["workspace_id"]}


@pytest.mark.parametrize("case", STARTUP_CASES, ids=[c[0] for c in STARTUP_CASES])
def test_startup_refusals(stow_bin, workdir, startup_ws, case):
    _, template = case
    argv = [a.format(**startup_ws) for a in template]
    _start_refused(stow_bin, workdir, argv)
    assert not (workdir / "nope").exists()
    assert not (workdir / "no-export").exists() and not (workdir / "no-adopt").exists()
    # The checkpoints directory was not touched by a refused start.
    assert checkpoint_dirs(workdir / "reg") == []


@pytest.mark.parametrize("case", _object_flag_cases(), ids=[c[0] for c in _object_flag_cases()])
def test_object_flags_are_incompatible(stow_bin, workdir, startup_ws, case):
    _, flag_argv, flag = case
    base = ["--registry-dir", startup_ws["reg"], "--workspace-id", startup_ws["wid"], "--timeout", "30s"]
    argv = base + [a.format(**startup_ws) for a in flag_argv]
    err = _start_refused(stow_bin, workdir, argv)
    assert "incompatible" in err and flag in err, err
    assert not (workdir / "objs").exists()


def test_a_valid_start_serves_and_eof_exits_zero(stow_bin, workdir, startup_ws):
    """The control of the refusals: the same base arguments serve."""
    srv = WsRawServer(stow_bin, startup_ws["reg"], startup_ws["wid"])
    try:
        info = srv.initialize()
        assert "serverInfo" in info and info["capabilities"].get("tools") is not None, info
        env = structured(srv.tool("stow_workspace_inspect", {"workspace_id": startup_ws["wid"]}, CALL_TIMEOUT))
        assert env["outcome"] == "ok" and "error" not in env
        srv.close_stdin()
        assert srv.wait(CALL_TIMEOUT) == 0
        for line in srv.stdout_lines:
            assert json.loads(line)["jsonrpc"] == "2.0"
    finally:
        srv.ensure_dead()


# ---------------------------------------------------------------- checkpoint guide


@pytest.mark.parametrize("era", ERAS)
def test_the_checkpoint_guide_is_a_resource_and_the_instructions(stow_bin, workdir, era):
    p = prepare(stow_bin, workdir, {"a.txt": b"a"})

    async def go():
        async with ws_session(stow_bin, workdir / "reg", p["workspace_id"], era) as s:
            listed = (await s.client.list_resources()).resources
            read = await s.client.read_resource("stow://guides/checkpoints/v1")
            return listed, read

    listed, read = arun(go())
    assert [(str(r.uri), r.mime_type) for r in listed] == [("stow://guides/checkpoints/v1", "text/plain")]
    (content,) = read.contents
    assert content.mime_type == "text/plain"
    text = content.text
    # The workflow the guide must teach.
    for phrase in ("request_key", "committed", "stow_checkpoint_resolve", "pause", "not evidence"):
        assert phrase in text, phrase
