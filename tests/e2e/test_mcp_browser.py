"""The `--browser` extension: browser and mentions tools, the MCP Apps UI
resource and object resources (spec/mcp.md §10, §14 items 20-22)."""

import base64

import pytest
from mcp.shared.exceptions import MCPError

from mcpkit import ERAS, code, run, session


def uri_of(key: str) -> str:
    return "stow://objects/files/" + base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


@pytest.mark.parametrize("era", ERAS)
def test_tool_annotations_and_meta(stow_bin, workdir, era):
    async def go():
        async with session(stow_bin, workdir / "objs", era, browser=True) as s:
            tools = {t.name: t for t in (await s.client.list_tools()).tools}
            b, m = tools["stow_browser"], tools["stow_object_mentions"]
            assert b.title == "Stow bucket browser"
            for t in (b, m):
                assert t.annotations.read_only_hint is True and t.annotations.open_world_hint is False
            assert b.meta["ui"]["resourceUri"] == "ui://stow/browser-v1"
            assert b.meta["openai/ui"]["entrypoints"] == [{"type": "global"}, {"type": "thread"}]
            assert m.meta["ui"]["visibility"] == ["app"]
            assert m.meta["openai/extensions"] == {"mentions/search": {}}
            for name in ("stow_object_save", "stow_object_read_for_save"):
                assert tools[name].annotations is None
            r = await s.raw("stow_object_mentions", {"query": ""})
            assert r.structured_content == {"items": []} and r.content == [] and not r.is_error

    run(go())


def test_browser_pages_51_keys_without_minting_tokens(stow_bin, workdir):
    objs = workdir / "objs"

    async def fill():
        async with session(stow_bin, objs) as s:
            for i in range(51):
                await s.save(f"notes/{i:02d}", b"n", f"r{i}", replace=True, content_type="text/markdown")
            await s.save("other", b"o", "ro", replace=True)

    run(fill())

    async def browse(read_only):
        async with session(
            stow_bin, objs, create=False, browser=True, read_only=read_only, extra=["--max-observations", "1"]
        ) as s:
            r = await s.raw("stow_browser", {"prefix": "notes/"})
            page = r.structured_content
            assert r.content == [] and not r.is_error
            assert page["bucket"] == "files" and page["max_bytes"] == 65536
            assert len(page["items"]) == 50 and page["truncated"] is True
            first = page["items"][0]
            assert first == {
                "type": "resource_link",
                "uri": uri_of("notes/00"),
                "name": "notes/00",
                "mimeType": "text/markdown",
                "size": 1,
            }
            r2 = await s.raw("stow_browser", {"prefix": "notes/", "cursor": page["next_cursor"]})
            page2 = r2.structured_content
            assert [i["name"] for i in page2["items"]] == ["notes/50"]
            assert page2["truncated"] is False and "next_cursor" not in page2
            m = await s.raw("stow_object_mentions", {"query": "notes/0"})
            assert len(m.structured_content["items"]) == 10
            refused = await s.raw("stow_browser", {"prefix": "notes/", "bucket": "other"})
            assert refused.is_error and refused.structured_content is None
            too_long = await s.raw("stow_browser", {"prefix": "p" * 1025})
            assert too_long.is_error and too_long.structured_content is None
            # No observation was minted: the pool of one is still free.
            assert code(await s.read("notes/00")) is None

    run(browse(False))
    run(browse(True))


def test_object_and_ui_resources(stow_bin, workdir):
    objs = workdir / "objs"
    snow = "notes/☃?fragment#"

    async def fill():
        async with session(stow_bin, objs) as s:
            await s.save(snow, b"hello", "r1", replace=True, content_type="text/plain")
            await s.save("empty", b"", "r2", replace=True, content_type="text/plain")
            await s.save("bin", b"\xff\x00\x01", "r3", replace=True)
            await s.save("json", b'{"a":1}', "r4", replace=True, content_type="application/json")
            await s.save("big", b"b" * 2000, "r5", replace=True, content_type="text/plain")

    run(fill())

    async def go():
        async with session(stow_bin, objs, create=False, browser=True, extra=["--max-object-bytes", "1999"]) as s:
            res = (await s.client.list_resources()).resources
            assert [(r.uri, r.name, r.mime_type) for r in res] == [
                ("ui://stow/browser-v1", "Stow bucket browser", "text/html;profile=mcp-app")
            ]
            templates = (await s.client.list_resource_templates()).resource_templates
            assert [(t.uri_template, t.name) for t in templates] == [
                ("stow://objects/{bucket}/{key}", "Configured bucket object")
            ]
            ui = (await s.client.read_resource("ui://stow/browser-v1")).contents[0]
            assert ui.mime_type == "text/html;profile=mcp-app"
            assert "Stow bucket browser" in ui.text
            assert ui.meta["ui"]["csp"] == {"connectDomains": [], "resourceDomains": []}
            assert "http://" not in ui.text and "https://" not in ui.text

            text = (await s.client.read_resource(uri_of(snow))).contents[0]
            assert (text.text, text.mime_type) == ("hello", "text/plain")
            empty = (await s.client.read_resource(uri_of("empty"))).contents[0]
            assert empty.blob == ""
            binary = (await s.client.read_resource(uri_of("bin"))).contents[0]
            assert base64.b64decode(binary.blob) == b"\xff\x00\x01"
            assert binary.mime_type == "application/octet-stream"
            js = (await s.client.read_resource(uri_of("json"))).contents[0]
            assert js.text == '{"a":1}'
            for bad in (
                uri_of("big"),  # over the (narrowed) body limit
                uri_of("missing"),
                "stow://objects/other/" + uri_of(snow).rsplit("/", 1)[1],
                uri_of(snow) + "?x=1",
                uri_of(snow) + "=",
                "file:///etc/passwd",
            ):
                with pytest.raises(MCPError):
                    await s.client.read_resource(bad)
            # References resolve current bytes.
            await s.save(snow, b"changed", "r6", replace=True, content_type="text/plain")
            again = (await s.client.read_resource(uri_of(snow))).contents[0]
            assert again.text == "changed"

    run(go())


def test_no_resources_without_browser(stow_bin, workdir):
    async def go():
        async with session(stow_bin, workdir / "objs") as s:
            assert s.client.server_capabilities.resources is None
            with pytest.raises(MCPError):
                await s.client.read_resource("ui://stow/browser-v1")

    run(go())
