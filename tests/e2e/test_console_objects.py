"""The web console's object half (issue 31): drag-and-drop and multipart
uploads with cancel, delete of many, the details panel, previews, share
links, the prefix filter, usage figures, session expiry and logout.

A real `stow-s3 serve`, driven by Debian's Chromium through Playwright;
bytes are checked through boto3. Each test saves a screenshot under
target/console-shots/.
"""

import pathlib
import struct
import time
import urllib.parse
import zlib

import botocore
import pytest
from s3server import S3Server
from test_console import SHOTS, XSS_NAME, Api, browser, confirm_delete, console, page, sign_in  # noqa: F401

MiB = 1024 * 1024
DROP_ZONE = "Drop files here to upload"


def pattern(size):
    """The bytes the page's `pattern` files hold: (i * 31 + 7) mod 256."""
    assert size % 256 == 0
    return bytes((i * 31 + 7) & 255 for i in range(256)) * (size // 256)


def drop_files(pg, specs):
    """Drops files on the drop zone as a user's drag would: each spec is
    {name, text} or {name, size} (pattern bytes), with an optional type."""
    transfer = pg.evaluate_handle(
        """(specs) => {
            const dt = new DataTransfer();
            for (const s of specs) {
                let body = s.text;
                if (s.size !== undefined) {
                    body = new Uint8Array(s.size);
                    for (let i = 0; i < s.size; i++) body[i] = (i * 31 + 7) & 255;
                }
                dt.items.add(new File([body], s.name, { type: s.type || "" }));
            }
            return dt;
        }""",
        specs,
    )
    zone = pg.get_by_role("region", name=DROP_ZONE)
    zone.dispatch_event("dragenter", {"dataTransfer": transfer})
    zone.dispatch_event("drop", {"dataTransfer": transfer})


def open_bucket(pg, server, bucket):
    sign_in(pg, server)
    pg.get_by_role("link", name=bucket, exact=True).click()
    pg.get_by_role("heading", name=bucket).wait_for()


def png_1x1():
    """A valid 1×1 red PNG."""

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = zlib.compress(b"\x00\xff\x00\x00")
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", raw) + chunk(b"IEND", b""))


# Every visible control of the object page: one without a name (its text,
# aria-label, or a <label>) is returned.
UNNAMED_CONTROLS = """() => [...document.querySelectorAll(
        "#objects button, #objects input, #objects select, #objects a, #objects [role=region]")]
    .filter((c) => c.offsetParent !== null || c.getClientRects().length > 0)
    .filter((c) => !((c.getAttribute("aria-label") || "").trim()
        || (c.labels && [...c.labels].some((l) => l.textContent.trim()))
        || (c.tagName !== "INPUT" && c.tagName !== "SELECT" && c.textContent.trim())))
    .map((c) => c.outerHTML.slice(0, 120))"""


def shot(pg, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


# ---- uploads ----


def test_console_drop_upload_and_multipart(console, page):
    s3 = console.client()
    s3.create_bucket(Bucket="drops")
    open_bucket(page, console, "drops")
    # A small text file and a 20 MiB file (three 8 MiB parts) dropped at once.
    big = 20 * MiB
    drop_files(page, [{"name": "notes.txt", "text": "dropped text\n", "type": "text/plain"},
                      {"name": "big.bin", "size": big}])
    page.get_by_role("cell", name="big.bin", exact=True).wait_for(timeout=60_000)
    page.get_by_role("cell", name="notes.txt", exact=True).wait_for()
    assert s3.get_object(Bucket="drops", Key="notes.txt")["Body"].read() == b"dropped text\n"
    got = s3.get_object(Bucket="drops", Key="big.bin")
    assert got["ETag"].strip('"').endswith("-3"), "sent as a three-part multipart upload"
    assert got["Body"].read() == pattern(big)
    assert "Uploads" not in s3.list_multipart_uploads(Bucket="drops")
    # Usage figures follow the uploads.
    page.get_by_text("This bucket: 2 objects").wait_for()
    assert page.alerts == []


def test_console_uploads_fit_the_servers_request_limit(stow_bin, tmp_path, page):
    """With --max-request-bytes under 8 MiB, a 7 MiB file goes in parts of
    the limit (not as one PUT it would refuse); with a limit under S3's
    5 MiB part minimum, a larger file is refused and nothing is left."""
    for limit, size, parts in [(6 * MiB, 7 * MiB, 2), (1 * MiB, 2 * MiB, None)]:
        server = S3Server(stow_bin, tmp_path / f"data-{limit}", "--max-request-bytes", str(limit))
        server.console = server.ready["console"]
        try:
            s3 = server.client()
            s3.create_bucket(Bucket="limits")
            open_bucket(page, server, "limits")
            drop_files(page, [{"name": "f.bin", "size": size}])
            if parts:
                page.get_by_role("cell", name="f.bin", exact=True).wait_for(timeout=60_000)
                got = s3.get_object(Bucket="limits", Key="f.bin")
                assert got["ETag"].strip('"').endswith(f"-{parts}"), got["ETag"]
                assert got["Body"].read() == pattern(size)
                assert page.alerts == []
            else:
                page.get_by_role("alert").filter(has_text="cannot be sent in parts").wait_for()
                assert "Contents" not in s3.list_objects_v2(Bucket="limits")
            assert "Uploads" not in s3.list_multipart_uploads(Bucket="limits")
        finally:
            assert server.stop() == 0


def test_console_upload_cancel_aborts(console, page):
    s3 = console.client()
    s3.create_bucket(Bucket="slow")
    open_bucket(page, console, "slow")
    # Slow the browser's uploads down so the cancel lands mid-upload.
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send("Network.emulateNetworkConditions", {
        "offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": 4 * MiB})
    drop_files(page, [{"name": "huge.bin", "size": 32 * MiB}])
    bar = page.get_by_role("progressbar", name="Upload progress of huge.bin")
    page.wait_for_function(
        "() => { const b = document.querySelector('#uploads progress'); return b && b.value > 0; }",
        timeout=30_000)
    assert float(bar.get_attribute("value") or 0) < 1
    assert len(s3.list_multipart_uploads(Bucket="slow").get("Uploads", [])) == 1
    page.get_by_role("button", name="Cancel upload of huge.bin").click()
    page.locator("#uploads li").filter(has_text="cancelled").wait_for()
    shot(page, "test_console_upload_cancel_aborts_cancelled")
    page.get_by_role("button", name="Dismiss huge.bin").click()
    assert page.locator("#uploads li").count() == 0
    # The upload is aborted on the server: nothing in flight, no object.
    deadline = time.monotonic() + 10
    while s3.list_multipart_uploads(Bucket="slow").get("Uploads") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "Uploads" not in s3.list_multipart_uploads(Bucket="slow")
    with pytest.raises(botocore.exceptions.ClientError):
        s3.head_object(Bucket="slow", Key="huge.bin")

    # Leaving the page mid-upload aborts it too (a keepalive request).
    drop_files(page, [{"name": "left.bin", "size": 32 * MiB}])
    page.wait_for_function(
        """() => { const b = document.querySelector('[aria-label="Upload progress of left.bin"]');
                   return b && b.value > 0; }""",
        timeout=30_000)
    assert len(s3.list_multipart_uploads(Bucket="slow").get("Uploads", [])) == 1
    page.goto("about:blank")
    deadline = time.monotonic() + 10
    while s3.list_multipart_uploads(Bucket="slow").get("Uploads") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "Uploads" not in s3.list_multipart_uploads(Bucket="slow")
    cdp.send("Network.emulateNetworkConditions", {
        "offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})


# ---- delete many ----


def test_console_delete_many(console, page):
    s3 = console.client()
    s3.create_bucket(Bucket="tidy")
    for key in ("a.txt", "b.txt", "c.txt", XSS_NAME):
        s3.put_object(Bucket="tidy", Key=key, Body=b"x")
    open_bucket(page, console, "tidy")
    delete = page.get_by_role("button", name="Delete selected")
    assert delete.is_disabled(), "nothing selected, nothing to delete"
    page.get_by_label("Select a.txt", exact=True).check()
    # Keyboard: Space on the focused checkbox selects it.
    page.get_by_label(f"Select {XSS_NAME}", exact=True).focus()
    page.keyboard.press("Space")
    page.get_by_text("2 selected").wait_for()
    # A cancelled confirmation deletes nothing.
    delete.click()
    page.get_by_role("dialog").get_by_role("button", name="Cancel").click()
    assert len(s3.list_objects_v2(Bucket="tidy")["Contents"]) == 4
    delete.click()
    confirm_delete(page)
    page.get_by_role("cell", name="a.txt", exact=True).wait_for(state="detached")
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="tidy")["Contents"])
    assert keys == ["b.txt", "c.txt"]
    # S3's error is shown: the bucket went away under the page.
    page.get_by_label("Select all on this page").check()
    for key in keys:
        s3.delete_object(Bucket="tidy", Key=key)
    s3.delete_bucket(Bucket="tidy")
    delete.click()
    confirm_delete(page)
    page.get_by_role("alert").filter(has_text="NoSuchBucket").wait_for()
    shot(page, "test_console_delete_many_error")
    assert page.alerts == []


# ---- details, previews, share links ----


def test_console_details_and_versions(console, page):
    s3 = console.client()
    s3.create_bucket(Bucket="ledger")
    s3.put_bucket_versioning(Bucket="ledger", VersioningConfiguration={"Status": "Enabled"})
    first = s3.put_object(Bucket="ledger", Key="notes.txt", Body=b"first\n")["VersionId"]
    second = s3.put_object(Bucket="ledger", Key="notes.txt", Body=b"second version\n",
                           ContentType="text/plain", Metadata={"owner": "ana"},
                           ChecksumAlgorithm="SHA256")
    s3.put_object_tagging(Bucket="ledger", Key="notes.txt",
                          Tagging={"TagSet": [{"Key": "team", "Value": "blue"}]})
    head = s3.head_object(Bucket="ledger", Key="notes.txt", ChecksumMode="ENABLED")
    open_bucket(page, console, "ledger")
    # Keyboard: Enter on the row's Details button opens the panel.
    page.get_by_role("button", name="Details notes.txt", exact=True).focus()
    page.keyboard.press("Enter")
    panel = page.get_by_role("region", name="Details notes.txt")
    panel.wait_for()
    fields = page.locator("#details-fields")
    text = fields.inner_text()
    assert "15 bytes" in text and head["ETag"].strip('"') in text
    assert "text/plain" in text and "ana" in text and "blue" in text
    assert second["VersionId"] in text
    assert head["ChecksumSHA256"] in text
    versions = page.locator("#version-rows tr")
    assert versions.count() == 2
    assert second["VersionId"] in versions.nth(0).inner_text() and "latest" in versions.nth(0).inner_text()
    assert first in versions.nth(1).inner_text()
    # An older version downloads as it was.
    with page.expect_download() as dl:
        page.get_by_role("link", name=f"Download version {first}", exact=True).click()
    assert pathlib.Path(dl.value.path()).read_bytes() == b"first\n"
    page.get_by_label("Text preview of notes.txt").filter(has_text="second version").wait_for()
    # 1280×800: nothing runs off the side; every control is named.
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    assert page.evaluate(UNNAMED_CONTROLS) == []
    shot(page, "test_console_details_and_versions_panel")
    # Escape closes the panel; the focus goes back to the row's Details.
    page.get_by_role("button", name="Close details").focus()
    page.keyboard.press("Escape")
    assert page.locator("#details").is_hidden()
    assert page.evaluate("document.activeElement.getAttribute('aria-label')") == "Details notes.txt"


def test_console_previews_are_inert(console, page):
    s3 = console.client()
    s3.create_bucket(Bucket="gallery")
    s3.put_object(Bucket="gallery", Key=XSS_NAME, Body=b"<img src=x onerror=alert(3)>",
                  ContentType="text/html")
    s3.put_object(Bucket="gallery", Key="pic.svg", ContentType="image/svg+xml",
                  Body=b"<svg xmlns='http://www.w3.org/2000/svg' onload='alert(4)'/>")
    s3.put_object(Bucket="gallery", Key="dot.png", Body=png_1x1(), ContentType="text/html")
    s3.put_object(Bucket="gallery", Key="long.log", Body=b"0123456789abcdef" * 8192)
    s3.put_object(Bucket="gallery", Key="blob.bin", Body=bytes(range(256)))
    open_bucket(page, console, "gallery")

    # The XSS-named HTML object: name and bytes shown as text.
    page.get_by_role("button", name=f"Details {XSS_NAME}", exact=True).click()
    preview = page.get_by_label(f"Text preview of {XSS_NAME}", exact=True)
    preview.wait_for()
    assert preview.inner_text() == "<img src=x onerror=alert(3)>"
    assert page.locator("#details-key").inner_text() == XSS_NAME
    assert page.locator("#details img, #object-rows img").count() == 0

    # SVG is shown as its source text, never rendered.
    page.get_by_role("button", name="Details pic.svg", exact=True).click()
    page.get_by_label("Text preview of pic.svg").filter(has_text="<svg").wait_for()
    assert page.locator("#details svg, #details img").count() == 0

    # A PNG (whatever type it was stored with) is shown as an image.
    page.get_by_role("button", name="Details dot.png", exact=True).click()
    img = page.get_by_role("img", name="Preview of dot.png")
    img.wait_for()
    page.wait_for_function("() => document.querySelector('#preview img').naturalWidth === 1")
    page.get_by_text("image/png, 1 × 1 px").wait_for()
    shot(page, "test_console_previews_are_inert_image")

    # Text: the first 64 KiB; binary: no preview.
    page.get_by_role("button", name="Details long.log", exact=True).click()
    page.get_by_text("The first 64 KiB of 128.0 KiB.").wait_for()
    assert len(page.get_by_label("Text preview of long.log").inner_text()) == 64 * 1024
    page.get_by_role("button", name="Details blob.bin", exact=True).click()
    page.get_by_text("No preview: not text or a PNG").wait_for()

    # The image route: typed by the bytes, nosniff, sandboxed; others refused.
    api = Api(console.console)
    _, session, _ = api.sign_in(console)
    resp, _ = api.call("GET", "image?bucket=gallery&key=dot.png", cookie=session)
    assert resp.status == 200 and resp.getheader("Content-Type") == "image/png"
    assert resp.getheader("X-Content-Type-Options") == "nosniff"
    assert "sandbox" in resp.getheader("Content-Security-Policy")
    for key in ("pic.svg", urllib.parse.quote(XSS_NAME)):
        resp, doc = api.call("GET", f"image?bucket=gallery&key={key}", cookie=session)
        assert resp.status == 422 and doc["error"]["code"] == "no_preview", doc
    assert page.alerts == [], f"script ran from object data: {page.alerts}"


def test_console_share_link(console, page, browser):  # noqa: F811
    s3 = console.client()
    s3.create_bucket(Bucket="share")
    body = b"shared bytes \xe2\x9c\x93\n"
    s3.put_object(Bucket="share", Key="dir/report 1+1.txt", Body=body)
    open_bucket(page, console, "share")
    page.get_by_role("link", name="dir/", exact=True).click()
    page.get_by_role("button", name="Details dir/report 1+1.txt", exact=True).click()
    page.get_by_label("Link expires in").select_option(label="7 days")
    page.get_by_role("button", name="Share link").click()
    page.get_by_label("Share link URL").wait_for()
    url = page.get_by_label("Share link URL").input_value()
    assert url.startswith(console.endpoint + "/share/dir/"), url
    assert "X-Amz-Expires=604800" in url and "X-Amz-Signature=" in url
    shot(page, "test_console_share_link_panel")
    # A fresh browser context, no session cookie: the link works against
    # the S3 port.
    fresh = browser.new_context()
    try:
        assert fresh.cookies() == []
        resp = fresh.request.get(url)
        assert resp.status == 200 and resp.body() == body
        tampered = fresh.request.get(url.replace("share/dir/report", "share/dir/other"))
        assert tampered.status == 403
    finally:
        fresh.close()
    # Longer than 7 days, or a missing object, is refused.
    api = Api(console.console)
    _, session, csrf = api.sign_in(console)
    resp, doc = api.call("POST", "share", {"bucket": "share", "key": "dir/report 1+1.txt", "expires": 604801},
                         headers={"X-Stow-CSRF": csrf}, cookie=session)
    assert resp.status == 400 and doc["error"]["code"] == "bad_request"
    resp, doc = api.call("POST", "share", {"bucket": "share", "key": "nope", "expires": 60},
                         headers={"X-Stow-CSRF": csrf}, cookie=session)
    assert resp.status == 404, doc
    resp, doc = api.call("POST", "share", {"bucket": "share", "key": "nope", "expires": 60}, cookie=session)
    assert resp.status == 403 and doc["error"]["code"] == "csrf"
    # A key with a dot segment: a browser would ask for another path, so no
    # link (the object itself is fine, and S3 clients reach it).
    for key in ["x/../y.txt", "d/./e"]:
        s3.put_object(Bucket="share", Key=key, Body=b"dots")
        resp, doc = api.call("POST", "share", {"bucket": "share", "key": key, "expires": 60},
                             headers={"X-Stow-CSRF": csrf}, cookie=session)
        assert resp.status == 400 and doc["error"]["code"] == "bad_request" and "segment" in doc["error"]["message"]
        assert s3.get_object(Bucket="share", Key=key)["Body"].read() == b"dots"
    # A key holding "%2E" is no dot segment (its "%" is sent as %25): shared.
    s3.put_object(Bucket="share", Key="d/%2E%2e/e", Body=b"percent")
    resp, doc = api.call("POST", "share", {"bucket": "share", "key": "d/%2E%2e/e", "expires": 60},
                         headers={"X-Stow-CSRF": csrf}, cookie=session)
    assert resp.status == 200, doc
    fresh = browser.new_context()
    try:
        got = fresh.request.get(doc["url"])
        assert got.status == 200 and got.body() == b"percent"
    finally:
        fresh.close()


# ---- filter and usage ----


def test_console_filter_and_usage(stow_bin, tmp_path, page):
    server = S3Server(stow_bin, tmp_path / "data", "--max-bytes", str(10 * MiB), "--max-objects", "50")
    server.console = server.ready["console"]
    try:
        s3 = server.client()
        s3.create_bucket(Bucket="logs")
        s3.create_bucket(Bucket="other")
        s3.put_object(Bucket="other", Key="elsewhere", Body=b"z" * 1000)
        for key in ("app-1.log", "app-2.log", "web-1.log", "old/app-0.log"):
            s3.put_object(Bucket="logs", Key=key, Body=b"y" * 100)
        open_bucket(page, server, "logs")
        page.get_by_text("This bucket: 4 objects, 400 B.").wait_for()
        usage = page.locator("#usage").inner_text()
        assert "Store: 5 of 50 objects, 1.4 KiB of 10.0 MiB." in usage, usage
        page.get_by_label("Filter by prefix").fill("app")
        page.get_by_role("cell", name="web-1.log", exact=True).wait_for(state="detached")
        assert page.get_by_role("cell", name="app-1.log", exact=True).is_visible()
        assert page.get_by_role("cell", name="app-2.log", exact=True).is_visible()
        assert page.get_by_role("link", name="old/", exact=True).count() == 0
        page.get_by_label("Filter by prefix").fill("")
        page.get_by_role("cell", name="web-1.log", exact=True).wait_for()
        page.get_by_role("link", name="old/", exact=True).wait_for()
        shot(page, "test_console_filter_and_usage_filtered")
    finally:
        assert server.stop() == 0


# ---- session expiry and logout ----


def test_console_session_expiry_and_logout(stow_bin, tmp_path, page):
    import os

    env = dict(os.environ, STOW_TEST_CONSOLE_SESSION_SECS="2")
    server = S3Server(stow_bin, tmp_path / "data", env=env)
    server.console = server.ready["console"]
    try:
        server.client().create_bucket(Bucket="kept")
        sign_in(page, server)
        cookie = next(c for c in page.context.cookies() if c["name"] == "stow_console")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        api = Api(server.console)
        resp, _ = api.call("GET", "buckets", cookie=cookie["value"])
        assert resp.status == 200
        time.sleep(2.5)
        # Expired on the server: the API refuses it, and the page goes back
        # to sign-in with the reason.
        resp, doc = api.call("GET", "buckets", cookie=cookie["value"])
        assert resp.status == 401 and doc["error"]["code"] == "unauthenticated"
        page.get_by_role("link", name="kept", exact=True).click()
        page.get_by_role("alert").filter(has_text="Your session has ended").wait_for()
        page.get_by_role("button", name="Sign in").wait_for()

        # Logout: the server forgets the session; a reload stays signed out.
        sign_in(page, server)
        cookie = next(c for c in page.context.cookies() if c["name"] == "stow_console")
        page.get_by_role("button", name="Sign out").click()
        page.get_by_role("button", name="Sign in").wait_for()
        resp, _ = api.call("GET", "buckets", cookie=cookie["value"])
        assert resp.status == 401
        page.reload()
        page.get_by_role("button", name="Sign in").wait_for()
        assert page.get_by_role("heading", name="Buckets").count() == 0 or \
            page.get_by_role("heading", name="Buckets").is_hidden()
        shot(page, "test_console_session_expiry_and_logout_signed_out")
    finally:
        assert server.stop() == 0


# ---- small screens, dark ----


def test_console_objects_narrow_dark(console, browser):  # noqa: F811
    context = browser.new_context(color_scheme="dark", viewport={"width": 390, "height": 844})
    try:
        pg = context.new_page()
        pg.set_default_timeout(15_000)
        s3 = console.client()
        s3.create_bucket(Bucket="phone")
        s3.put_object(Bucket="phone", Key="a-rather-long-object-name-for-a-phone-screen.txt", Body=b"hi\n",
                      Metadata={"a-long-metadata-name": "and-a-long-value-" * 4})
        open_bucket(pg, console, "phone")
        pg.get_by_role("button", name="Details a-rather-long-object-name-for-a-phone-screen.txt").click()
        pg.get_by_label("Text preview of a-rather-long-object-name-for-a-phone-screen.txt").wait_for()
        pg.get_by_role("button", name="Share link").click()
        pg.get_by_label("Share link URL").wait_for()
        for name in ("Upload", "Delete selected", "Share link", "Close details"):
            assert pg.get_by_role("button", name=name, exact=True).is_visible(), name
        assert pg.evaluate("document.documentElement.scrollWidth") <= 390
        assert pg.evaluate(UNNAMED_CONTROLS) == []
        panel = pg.evaluate("getComputedStyle(document.getElementById('details')).borderTopColor")
        assert panel == "rgb(48, 56, 64)", panel  # the dark palette's line colour
        shot(pg, "test_console_objects_narrow_dark")
    finally:
        context.close()


# ---- sign-in rate limit ----


def test_console_sign_in_rate_limit(console, page):
    from concurrent.futures import ThreadPoolExecutor

    api = Api(console.console)
    wrong = {"access_key": console.access_key, "secret_key": "guess"}
    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda _: api.call("POST", "session", wrong)[0].status, range(10)))
    assert answers == [401] * 10
    # Now every attempt is refused unchecked, even the right pair.
    resp, doc = api.call("POST", "session", {"access_key": console.access_key, "secret_key": console.secret_key})
    assert resp.status == 429 and doc["error"]["code"] == "too_many_sign_ins", doc
    assert 1 <= int(resp.getheader("Retry-After")) <= 60
    assert resp.getheader("Set-Cookie") is None
    page.goto(console.console)
    page.get_by_label("Access key").fill(console.access_key)
    page.get_by_label("Secret key").fill(console.secret_key)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("alert").filter(has_text="too_many_sign_ins").wait_for()
    assert page.get_by_role("heading", name="Buckets").is_hidden()


def test_console_object_routes_are_guarded(console):
    # Every new route wants a session; every state-changing one the CSRF
    # token and the console's own origin — nothing changes otherwise.
    s3 = console.client()
    s3.create_bucket(Bucket="guarded")
    s3.put_object(Bucket="guarded", Key="k", Body=b"v")
    api = Api(console.console)
    _, session, csrf = api.sign_in(console)
    reads = ["details?bucket=guarded&key=k", "preview?bucket=guarded&key=k",
             "image?bucket=guarded&key=k", "usage?bucket=guarded"]
    for route in reads:
        resp, doc = api.call("GET", route)
        assert resp.status == 401 and doc["error"]["code"] == "unauthenticated", route
    writes = [
        ("POST", "delete", {"bucket": "guarded", "keys": ["k"]}),
        ("POST", "share", {"bucket": "guarded", "key": "k", "expires": 60}),
        ("POST", "multipart", {"bucket": "guarded", "key": "m"}),
        ("PUT", "part?bucket=guarded&key=m&upload=x&number=1", b"bytes"),
        ("POST", "complete", {"bucket": "guarded", "key": "m", "upload": "x", "parts": []}),
        ("DELETE", "multipart?bucket=guarded&key=m&upload=x", None),
    ]
    for method, route, body in writes:
        resp, doc = api.call(method, route, body, cookie=session)
        assert resp.status == 403 and doc["error"]["code"] == "csrf", (route, doc)
        resp, doc = api.call(method, route, body, cookie=session,
                             headers={"X-Stow-CSRF": csrf, "Origin": console.endpoint})
        assert resp.status == 403 and doc["error"]["code"] == "cross_origin", (route, doc)
    assert s3.get_object(Bucket="guarded", Key="k")["Body"].read() == b"v"
    assert "Uploads" not in s3.list_multipart_uploads(Bucket="guarded")
    # With the token: a part number out of range, or a bad expiry, is a
    # plain bad request.
    h = {"X-Stow-CSRF": csrf}
    resp, doc = api.call("PUT", "part?bucket=guarded&key=m&upload=x&number=10001", b"x", headers=h, cookie=session)
    assert resp.status == 400 and doc["error"]["code"] == "bad_request", doc
    resp, doc = api.call("POST", "delete", {"bucket": "guarded", "keys": []}, headers=h, cookie=session)
    assert resp.status == 400, doc
