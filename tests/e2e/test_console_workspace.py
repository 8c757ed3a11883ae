"""The web console's workspace pages (issue 31) on `stow-s3 workspace serve`:
a checkpoint taken by the CLI in the timeline, the live tree's status, a
diff, a rewind with its dry-run plan shown first, and its undo, checked on
disk; driven by Debian's headless Chromium through Playwright.

The browser test saves a screenshot under target/console-shots/; without
Playwright or /usr/bin/chromium it is skipped with the reason (the
HTTP-level checks run regardless).
"""

import pathlib
import urllib.parse

import pytest
from s3server import S3Server, WorkspaceServer
from test_console import SHOTS, Api, browser, page  # noqa: F401  (fixtures)
from wskit import prepare, write_files
from test_workspace import ws

SEED = {"a.txt": b"alpha\n", "docs/readme.md": b"# readme\n", "keep.txt": b"kept\n"}


def files_of(root):
    """Every file under `root` but `.stow`, as {rel: bytes}."""
    root = pathlib.Path(root)
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.relative_to(root).parts[0] != ".stow"
    }


def edit(root):
    """The agent's edits: one changed, one added, one deleted."""
    root = pathlib.Path(root)
    (root / "a.txt").write_bytes(b"alpha, edited\n")
    (root / "new.txt").write_bytes(b"brand new\n")
    (root / "docs" / "readme.md").unlink()


@pytest.fixture
def served(stow_bin, workdir):
    """A prepared workspace checkpointed by the CLI, then edited, served
    with its console. Yields (server, checkpoint id, files at the
    checkpoint, files after the edits)."""
    p = prepare(stow_bin, workdir, SEED)
    reg = str(workdir / "reg")
    _, cp, _ = ws(stow_bin, "checkpoint", "--id", p["workspace_id"], "--registry-dir", reg,
                  "--message", "before the agent's edits")
    root = pathlib.Path(p["root"])
    at_cp = files_of(root)
    edit(root)
    edited = files_of(root)
    server = WorkspaceServer(stow_bin, p["workspace_id"], reg)
    assert server.ready["console"].startswith("http://127.0.0.1:"), server.ready
    server.console = server.ready["console"]
    yield server, cp["checkpoint_id"], at_cp, edited
    rc = server.stop()
    log = server.proc.stderr.read().decode()
    assert rc == 0, f"server exited with {rc}: {log}"
    assert server.secret_key not in log, "the secret is never logged"


def sign_in(pg, server):
    pg.goto(server.console)
    pg.get_by_label("Access key").fill(server.access_key)
    pg.get_by_label("Secret key").fill(server.secret_key)
    pg.get_by_role("button", name="Sign in").click()
    pg.get_by_role("heading", name="Buckets").wait_for()


def test_checkpoints_status_diff_rewind_and_undo(served, page):
    server, cp, at_cp, edited = served
    root = pathlib.Path(server.root)
    pg = page
    sign_in(pg, server)
    # The workspace's bucket through the object pages.
    pg.get_by_role("link", name=server.bucket).click()
    pg.get_by_role("cell", name="new.txt", exact=True).wait_for()

    # The timeline: the CLI's checkpoint, its message, origin and head marker.
    pg.get_by_role("link", name="Checkpoints").click()
    pg.get_by_role("heading", name="Checkpoints").wait_for()
    row = pg.locator("#ws-rows tr").filter(has_text="before the agent's edits")
    row.wait_for()
    assert "head" in row.inner_text()
    assert "capture" in row.inner_text()

    # Status: the live tree against the head.
    pg.get_by_role("button", name="Status").click()
    summary = pg.locator("#ws-status-summary")
    summary.wait_for()
    assert "1 added, 1 changed, 1 deleted" in summary.inner_text()
    status_rows = pg.locator("#ws-status-rows").inner_text()
    for path in ["new.txt", "a.txt", "docs/readme.md"]:
        assert path in status_rows

    # Diff: the checkpoint against the live tree, files with kinds.
    pg.get_by_role("combobox", name="From", exact=True).select_option(cp)
    pg.get_by_role("combobox", name="To", exact=True).select_option("live")
    pg.get_by_role("button", name="Diff", exact=True).click()
    pg.locator("#ws-diff-rows tr").first.wait_for()
    diff_rows = {r.split("\t")[1]: r.split("\t")[0]
                 for r in pg.locator("#ws-diff-rows tr").all_inner_texts()}
    assert diff_rows == {"a.txt": "modified", "docs/readme.md": "deleted", "new.txt": "added"}
    # A text file's line diff.
    pg.locator("#ws-diff-rows").get_by_role("button", name="Text diff of a.txt").click()
    lines = pg.locator("#ws-file-lines")
    lines.get_by_text("+ alpha, edited").wait_for()
    assert lines.inner_text().splitlines() == ["- alpha", "+ alpha, edited"]

    # Rewind: the plan first, nothing changed on disk yet.
    row.get_by_role("button", name="Rewind to").click()
    pg.get_by_text("Plan (nothing has changed yet)").wait_for()
    assert "new.txt" in pg.locator("#ws-rewind-rows").inner_text()
    assert files_of(root) == edited, "a dry run changes nothing"
    pg.get_by_role("button", name="Rewind", exact=True).click()
    pg.locator("#ws-rewind-summary").filter(has_text="Rewound to").wait_for()
    result = pg.locator("#ws-rewind-summary").inner_text()
    assert "0 conflicts" in result, result
    assert files_of(root) == at_cp, "the files are as the checkpoint has them"
    # The diff against the live tree shown before is stale now: it is gone.
    assert pg.locator("#ws-diff").is_hidden()
    assert pg.locator("#ws-diff-rows tr").count() == 0

    # Undo: back to the edits.
    pg.get_by_role("button", name="Undo").click()
    pg.locator("#ws-rewind-summary").filter(has_text="Rewound to the undo checkpoint").wait_for()
    assert files_of(root) == edited, "undo brings the edits back"
    # The head is now the undo checkpoint, which holds the edits.
    pg.get_by_role("button", name="Status").click()
    pg.locator("#ws-status-summary").filter(has_text="matches the head").wait_for()
    assert not pg.alerts


def test_workspace_api_refusals(served, stow_bin, workdir):
    server, cp, _, edited = served
    # Another workspace of the same registry, and its checkpoint.
    other = prepare(stow_bin, workdir, {"secret.txt": b"not yours"}, root="other")
    _, other_cp, _ = ws(stow_bin, "checkpoint", "--id", other["workspace_id"],
                        "--registry-dir", str(workdir / "reg"))
    other_cp = other_cp["checkpoint_id"]
    api = Api(server.console)
    _, cookie, csrf = api.sign_in(server)
    same = {"Sec-Fetch-Site": "same-origin"}
    resp, doc = api.call("GET", "checkpoints", headers=same, cookie=cookie)
    assert resp.status == 200 and doc["checkpoints"][0]["checkpoint_id"] == cp, doc
    # A rewind is a state change: no CSRF token, no rewind.
    resp, doc = api.call("POST", "rewind", {"to": cp, "dry_run": False, "request_key": "k1"},
                         headers=same, cookie=cookie)
    assert resp.status == 403 and doc["error"]["code"] == "csrf", doc
    # A rewind without a key is refused before the engine is asked.
    with_csrf = {**same, "X-Stow-CSRF": csrf}
    resp, doc = api.call("POST", "rewind", {"to": cp, "dry_run": False},
                         headers=with_csrf, cookie=cookie)
    assert resp.status == 400 and doc["error"]["code"] == "bad_request", doc
    # The engine's own code for an unknown checkpoint.
    missing = cp[:-1] + ("0" if cp[-1] != "0" else "1")
    resp, doc = api.call("POST", "rewind", {"to": missing}, headers=with_csrf, cookie=cookie)
    assert resp.status == 404 and doc["error"]["code"] == "not_found", doc
    resp, doc = api.call("POST", "rewind", {"to": "cp_bad"}, headers=with_csrf, cookie=cookie)
    assert resp.status == 400 and doc["error"]["code"] == "invalid_request", doc
    resp, doc = api.call("GET", "diff?from=" + cp + "&to=live", headers=same, cookie=cookie)
    assert resp.status == 200 and {c["path"] for c in doc["changes"]} == {"a.txt", "docs/readme.md", "new.txt"}
    # One file's text diff against the live tree; a binary file is not text.
    resp, doc = api.call("GET", f"filediff?from={cp}&to=live&path=new.txt", headers=same, cookie=cookie)
    assert resp.status == 200 and doc["text"] and doc["from_size"] is None, doc
    assert doc["lines"] == [{"op": "+", "text": "brand new"}], doc
    (pathlib.Path(server.root) / "bin.dat").write_bytes(b"\x00\x01\x02")
    resp, doc = api.call("GET", f"filediff?from={cp}&to=live&path=bin.dat", headers=same, cookie=cookie)
    assert resp.status == 200 and doc["text"] is False and doc["reason"] == "binary", doc
    (pathlib.Path(server.root) / "bin.dat").unlink()
    # A changed line ending shows: CRLF, and a last line without newline.
    keep = pathlib.Path(server.root) / "keep.txt"
    for data, shown in [(b"kept\r\n", "kept\u240d"), (b"kept", "kept \u2205 no newline at end of file")]:
        keep.write_bytes(data)
        resp, doc = api.call("GET", f"filediff?from={cp}&to=live&path=keep.txt", headers=same, cookie=cookie)
        assert resp.status == 200 and doc["lines"] == [{"op": "-", "text": "kept"}, {"op": "+", "text": shown}], doc
    keep.write_bytes(b"kept\n")
    # A path no checkpoint can name is refused; one in neither side is not found.
    for bad in ["../outside.txt", "/etc/passwd", ".stow/workspace.json", "docs/../a.txt", "a//b"]:
        resp, doc = api.call("GET", f"filediff?from={cp}&to=live&path={urllib.parse.quote(bad)}", headers=same,
                             cookie=cookie)
        assert resp.status == 400 and doc["error"]["code"] == "invalid_path", (bad, doc)
    resp, doc = api.call("GET", f"filediff?from={cp}&to=live&path=no/such.txt", headers=same, cookie=cookie)
    assert resp.status == 404 and doc["error"]["code"] == "not_found", doc
    resp, doc = api.call("GET", f"filediff?from={other_cp}&to=live&path=secret.txt", headers=same,
                         cookie=cookie)
    assert resp.status == 400 and doc["error"]["code"] == "invalid_request", doc
    # Another workspace's checkpoints are not this console's to show.
    for query in [f"diff?from={other_cp}&to={cp}", f"diff?from={cp}&to={other_cp}",
                  f"diff?from={other_cp}&to=live"]:
        resp, doc = api.call("GET", query, headers=same, cookie=cookie)
        assert resp.status == 400 and doc["error"]["code"] == "invalid_request", (query, doc)
    resp, doc = api.call("POST", "rewind", {"to": other_cp}, headers=with_csrf, cookie=cookie)
    assert resp.status == 400 and doc["error"]["code"] == "invalid_request", doc
    # Without a session nothing is answered.
    resp, doc = api.call("GET", "status", headers=same)
    assert resp.status == 401
    assert files_of(server.root) == edited


def test_plain_serve_has_no_workspace_pages(stow_bin, tmp_path):
    server = S3Server(stow_bin, tmp_path / "data")
    try:
        api = Api(server.ready["console"])
        _, cookie, _ = api.sign_in(server)
        resp, doc = api.call("GET", "checkpoints", headers={"Sec-Fetch-Site": "same-origin"}, cookie=cookie)
        assert resp.status == 404 and doc["error"]["code"] == "not_found", doc
    finally:
        assert server.stop() == 0


def test_workspace_serve_no_console(stow_bin, workdir):
    p = prepare(stow_bin, workdir, {"a.txt": b"a"})
    server = WorkspaceServer(stow_bin, p["workspace_id"], str(workdir / "reg"), "--no-console")
    try:
        assert server.ready.get("console") is None
    finally:
        assert server.stop() == 0


def test_checkpoints_dark_and_narrow(served, browser):  # noqa: F811  (fixture)
    # The Checkpoints page on a phone-sized window in the dark setting.
    server, _, _, _ = served
    context = browser.new_context(color_scheme="dark", viewport={"width": 390, "height": 844})
    try:
        pg = context.new_page()
        pg.set_default_timeout(15_000)
        sign_in(pg, server)
        pg.get_by_role("link", name="Checkpoints").click()
        pg.locator("#ws-rows tr").first.wait_for()
        pg.get_by_role("button", name="Status").click()
        pg.locator("#ws-status-rows tr").first.wait_for()
        pg.locator("#ws-rows tr").first.get_by_role("button", name="Rewind to").click()
        pg.get_by_role("button", name="Rewind", exact=True).wait_for()
        SHOTS.mkdir(parents=True, exist_ok=True)
        pg.screenshot(path=str(SHOTS / "test_checkpoints_dark_and_narrow.png"), full_page=True)
        assert pg.evaluate("document.documentElement.scrollWidth") <= 390
    finally:
        context.close()


def test_a_rewind_is_keyed(served):
    # The page sends one request key per confirmation: the same key again
    # replays the first rewind's result instead of rewinding twice.
    server, cp, at_cp, _ = served
    api = Api(server.console)
    _, cookie, csrf = api.sign_in(server)
    headers = {"Sec-Fetch-Site": "same-origin", "X-Stow-CSRF": csrf}
    body = {"to": cp, "dry_run": False, "request_key": "console-test-key-1"}
    resp, first = api.call("POST", "rewind", body, headers=headers, cookie=cookie)
    assert resp.status == 200 and not first["replayed"] and first["undo_checkpoint_id"], first
    assert files_of(server.root) == at_cp
    resp, again = api.call("POST", "rewind", body, headers=headers, cookie=cookie)
    assert resp.status == 200 and again["replayed"], again
    assert again["undo_checkpoint_id"] == first["undo_checkpoint_id"]
    # The same key for another checkpoint is the engine's request_conflict.
    resp, doc = api.call("POST", "rewind", {**body, "to": first["undo_checkpoint_id"]},
                         headers=headers, cookie=cookie)
    assert resp.status == 409 and doc["error"]["code"] == "request_conflict", doc


def test_a_portable_diff_lists_objects(served, page, stow_bin, workdir):
    # Objects of the workspace's private store (another bucket) travel in a
    # portable checkpoint; the Diff page lists them beside the files.
    server, cp, _, _ = served
    s3 = server.client()
    s3.create_bucket(Bucket="side")
    s3.put_object(Bucket="side", Key="notes/today.txt", Body=b"object body")
    _, portable, _ = ws(stow_bin, "checkpoint", "--id", server.ready["workspace_id"],
                        "--registry-dir", str(workdir / "reg"), "--portable", "--message", "portable")
    pg = page
    sign_in(pg, server)
    pg.get_by_role("link", name="Checkpoints").click()
    pg.locator("#ws-rows tr").filter(has_text="portable").wait_for()
    pg.get_by_role("combobox", name="From", exact=True).select_option(cp)
    pg.get_by_role("combobox", name="To", exact=True).select_option(portable["checkpoint_id"])
    pg.get_by_role("button", name="Diff", exact=True).click()
    pg.locator("#ws-diff-rows").get_by_text("object side/notes/today.txt").wait_for()
    assert "bucket side" in pg.locator("#ws-diff-rows").inner_text()


def test_the_timeline_pages_with_its_cursor(served, stow_bin, workdir):
    server, cp, _, _ = served
    for i in range(2):
        (pathlib.Path(server.root) / f"more{i}.txt").write_bytes(b"x" * i)
        ws(stow_bin, "checkpoint", "--id", server.ready["workspace_id"],
           "--registry-dir", str(workdir / "reg"), "--message", f"more {i}")
    api = Api(server.console)
    _, cookie, _ = api.sign_in(server)
    same = {"Sec-Fetch-Site": "same-origin"}
    seen, cursor = [], ""
    for _ in range(5):
        resp, doc = api.call("GET", f"checkpoints?limit=1&cursor={cursor}", headers=same, cookie=cookie)
        assert resp.status == 200 and len(doc["checkpoints"]) == 1, doc
        seen.append(doc["checkpoints"][0]["message"])
        cursor = doc.get("next_cursor")
        if not cursor:
            break
    assert seen == ["more 1", "more 0", "before the agent's edits"]
    resp, doc = api.call("GET", "checkpoints?limit=0", headers=same, cookie=cookie)
    assert resp.status == 400 and doc["error"]["code"] == "bad_request", doc
    resp, doc = api.call("GET", "checkpoints?cursor=nonsense", headers=same, cookie=cookie)
    assert resp.status == 400 and doc["error"]["code"] == "invalid_request", doc


def test_workspace_bucket_object_pages(served):
    # The object pages work on a workspace's bucket view too: details,
    # preview, usage against the workspace's quotas, a share link on the
    # S3 port, and a multipart upload that lands as a file in the tree.
    import urllib.parse
    import urllib.request

    server, _, _, _ = served
    api = Api(server.console)
    _, session, csrf = api.sign_in(server)
    b = server.bucket
    q = urllib.parse.urlencode({"bucket": b, "key": "keep.txt"})
    resp, doc = api.call("GET", "details?" + q, cookie=session)
    assert resp.status == 200 and doc["size"] == 5 and doc["versioning"] is None, doc
    resp, doc = api.call("GET", "preview?" + q, cookie=session)
    assert doc == {"kind": "text", "text": "kept\n", "truncated": False, "size": 5}
    resp, doc = api.call("GET", f"usage?bucket={b}", cookie=session)
    assert doc["store"]["max_bytes"] == server.ready["max_bytes"], doc
    assert doc["bucket"]["objects"] == doc["store"]["objects"]
    resp, doc = api.call("POST", "share", {"bucket": b, "key": "keep.txt", "expires": 60},
                         headers={"X-Stow-CSRF": csrf}, cookie=session)
    assert urllib.request.urlopen(doc["url"]).read() == b"kept\n"

    h = {"X-Stow-CSRF": csrf}
    resp, doc = api.call("POST", "multipart", {"bucket": b, "key": "up/parts.bin"}, headers=h, cookie=session)
    assert resp.status == 200, doc
    upload = doc["upload"]
    part = urllib.parse.urlencode({"bucket": b, "key": "up/parts.bin", "upload": upload, "number": 1})
    resp, doc = api.call("PUT", "part?" + part, b"in one part\n", headers=h, cookie=session)
    assert resp.status == 200, doc
    resp, doc = api.call("POST", "complete", {"bucket": b, "key": "up/parts.bin", "upload": upload,
                                              "parts": [{"number": 1, "etag": doc["etag"]}]},
                         headers=h, cookie=session)
    assert resp.status == 200 and doc["etag"].endswith("-1"), doc
    assert (pathlib.Path(server.root) / "up" / "parts.bin").read_bytes() == b"in one part\n"
