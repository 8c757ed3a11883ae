"""The web console (issue 31): a real `stow-s3 serve`, driven by headless
Chromium from Debian's packages through Playwright, checked with boto3.

Each browser test saves a screenshot under target/console-shots/. Without
Playwright or /usr/bin/chromium the browser tests are skipped with the
reason; the HTTP-level checks run regardless.
"""

import http.client
import json
import os
import pathlib
import re
import secrets
import socket
import urllib.parse

import botocore
import pytest
from s3server import S3Server

ROOT = pathlib.Path(__file__).resolve().parents[2]
SHOTS = ROOT / "target" / "console-shots"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--no-sandbox",
    "--disable-dev-shm-usage",
]
XSS_NAME = "<img src=x onerror=alert(1)>"


# ---- fixtures ----


@pytest.fixture
def console(stow_bin, tmp_path):
    """A server with its console; `.console` is the console's URL."""
    server = S3Server(stow_bin, tmp_path / "data")
    server.console = server.ready["console"]
    yield server
    rc = server.stop()
    log = server.proc.stderr.read().decode()
    assert rc == 0, f"server exited with {rc}: {log}"
    assert server.secret_key not in log, "the secret is never logged"


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright (pip) is not installed: pip install -r tests/e2e/requirements.txt")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, request):
    context = browser.new_context(accept_downloads=True, viewport={"width": 1280, "height": 800})
    pg = context.new_page()
    pg.set_default_timeout(15_000)
    alerts = []
    pg.on("dialog", lambda d: (alerts.append(d.message), d.dismiss()))
    pg.alerts = alerts
    yield pg
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(SHOTS / f"{request.node.name}.png"), full_page=True)
    context.close()


# ---- helpers ----


def sign_in(pg, server):
    pg.goto(server.console)
    pg.get_by_label("Access key").fill(server.access_key)
    pg.get_by_label("Secret key").fill(server.secret_key)
    pg.get_by_role("button", name="Sign in").click()
    pg.get_by_role("heading", name="Buckets").wait_for()


def confirm_delete(pg):
    dialog = pg.get_by_role("dialog")
    dialog.wait_for()
    dialog.get_by_role("button", name="Delete", exact=True).click()


class Api:
    """Plain HTTP to the console's API, as a browser-less client would."""

    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.netloc, self.base = u.netloc, u.path

    def call(self, method, route, body=None, headers=None, cookie=None):
        conn = http.client.HTTPConnection(self.netloc, timeout=10)
        h = dict(headers or {})
        if cookie:
            h["Cookie"] = f"stow_console={cookie}"
        data = None
        if isinstance(body, bytes):
            data = body
        elif body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        conn.request(method, self.base + "api/" + route, body=data, headers=h)
        resp = conn.getresponse()
        raw = resp.read()
        conn.close()
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        return resp, doc

    def sign_in(self, server):
        resp, doc = self.call("POST", "session", {"access_key": server.access_key, "secret_key": server.secret_key})
        assert resp.status == 200, doc
        cookie = resp.getheader("Set-Cookie")
        value = re.match(r"stow_console=([0-9a-f]+);", cookie).group(1)
        return cookie, value, doc["csrf"]


def bucket_names(s3):
    return [b["Name"] for b in s3.list_buckets()["Buckets"]]


# ---- tests ----


def test_console_buckets_and_objects(console, page, tmp_path):
    s3 = console.client()
    pg = page
    sign_in(pg, console)
    assert console.secret_key not in pg.content(), "the secret is never put in the page"

    # Create a bucket; the S3 API sees it.
    pg.get_by_label("New bucket").fill("photos")
    pg.get_by_role("button", name="Create bucket").click()
    pg.get_by_role("link", name="photos", exact=True).wait_for()
    assert bucket_names(s3) == ["photos"]

    # An invalid name shows S3's error.
    pg.get_by_label("New bucket").fill("Bad_Name")
    pg.get_by_role("button", name="Create bucket").click()
    pg.get_by_role("alert").filter(has_text="InvalidBucketName").wait_for()

    # Upload through the file picker: the bytes arrive unchanged.
    pg.get_by_role("link", name="photos", exact=True).click()
    pg.get_by_role("button", name="Upload").wait_for()
    payload = secrets.token_bytes(300 * 1024)
    (tmp_path / "report.bin").write_bytes(payload)
    with pg.expect_file_chooser() as chooser:
        pg.get_by_role("button", name="Upload").click()
    chooser.value.set_files(str(tmp_path / "report.bin"))
    pg.get_by_role("cell", name="report.bin", exact=True).wait_for()
    assert s3.get_object(Bucket="photos", Key="report.bin")["Body"].read() == payload

    # Names are text: an XSS-named object and an HTML object render inert.
    s3.put_object(Bucket="photos", Key=XSS_NAME, Body=b"not markup")
    s3.put_object(Bucket="photos", Key="docs/page.html", Body=b"<script>alert(2)</script>",
                  ContentType="text/html")
    pg.get_by_role("button", name="Refresh").click()
    cell = pg.get_by_role("cell", name=XSS_NAME, exact=True)
    cell.wait_for()
    assert cell.inner_text() == XSS_NAME
    assert pg.locator("#object-rows img").count() == 0
    pg.get_by_role("link", name="docs/", exact=True).wait_for()

    # Download: an attachment with the object's bytes.
    with pg.expect_download() as dl:
        pg.get_by_role("link", name=f"Download {XSS_NAME}", exact=True).click()
    assert pathlib.Path(dl.value.path()).read_bytes() == b"not markup"

    # Folders and the HTML object: downloaded, never rendered.
    pg.get_by_role("link", name="docs/", exact=True).click()
    pg.get_by_role("cell", name="page.html", exact=True).wait_for()
    with pg.expect_download() as dl:
        pg.get_by_role("link", name="Download docs/page.html", exact=True).click()
    assert pathlib.Path(dl.value.path()).read_bytes() == b"<script>alert(2)</script>"
    pg.get_by_role("navigation", name="Folder").get_by_role("link", name="photos").click()
    pg.get_by_role("cell", name=XSS_NAME, exact=True).wait_for()

    # Delete with confirmation; a cancelled confirmation deletes nothing.
    pg.get_by_role("button", name=f"Delete {XSS_NAME}", exact=True).click()
    pg.get_by_role("dialog").get_by_role("button", name="Cancel").click()
    s3.head_object(Bucket="photos", Key=XSS_NAME)
    pg.get_by_role("button", name=f"Delete {XSS_NAME}", exact=True).click()
    confirm_delete(pg)
    pg.get_by_role("cell", name=XSS_NAME, exact=True).wait_for(state="detached")
    with pytest.raises(botocore.exceptions.ClientError):
        s3.head_object(Bucket="photos", Key=XSS_NAME)

    # A bucket that is not empty cannot be deleted: S3's error is shown.
    pg.get_by_role("link", name="Buckets").first.click()
    pg.get_by_role("button", name="Delete bucket photos").click()
    confirm_delete(pg)
    pg.get_by_role("alert").filter(has_text="BucketNotEmpty").wait_for()
    assert bucket_names(s3) == ["photos"]
    assert pg.alerts == [], f"script ran from object data: {pg.alerts}"


def put_many(server, bucket, keys, threads=8):
    """PUTs a one-byte object at each key, from several clients at once."""
    from concurrent.futures import ThreadPoolExecutor

    clients = [server.client() for _ in range(threads)]
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda ik: clients[ik[0] % threads].put_object(Bucket=bucket, Key=ik[1], Body=b"x"),
                      enumerate(keys)))


# Arms `window.stowRender`: it resolves, once the object rows have
# changed and again once they number `rows`, with the time of the frame
# after each minus the end of the latest `api/objects` response — how
# long the page took to show a listing's first rows, and all of them,
# once it had arrived.
RENDER_MS = """(rows) => { window.stowRender = new Promise((resolve) => {
    const tbody = document.getElementById("object-rows");
    const since = () => {
        const lists = performance.getEntriesByType("resource").filter((e) => e.name.includes("api/objects"));
        // No entry (the timing buffer full): no figure, never a stall.
        return lists.length ? performance.now() - lists[lists.length - 1].responseEnd : NaN;
    };
    const painted = (then) => requestAnimationFrame(() => setTimeout(() => then(since())));
    let first = null;
    const seen = new MutationObserver(() => {
        if (first === null) {
            first = -1;
            painted((ms) => { first = ms; });
        }
        if (tbody.rows.length >= rows) {
            seen.disconnect();
            painted((all) => {
                const wait = () => (first < 0 ? setTimeout(wait, 5) : resolve([first, all]));
                wait();
            });
        }
    });
    seen.observe(tbody, { childList: true });
}); }"""

FIRST_NAME = "() => (document.querySelector('#object-rows td.name') || {}).textContent"

# Awaits `window.stowRender`, bounded: a render the observer missed fails
# the test in 30 s instead of hanging it.
RENDERED = """() => Promise.race([window.stowRender, new Promise((_, fail) =>
    setTimeout(() => fail(new Error("the rows were not seen rendered within 30 s")), 30000))])"""


def test_console_paging(console, page):
    # Pages of 1,000 keys, every row in the table, with Next and Previous.
    s3 = console.client()
    s3.create_bucket(Bucket="many")
    put_many(console, "many", [f"k{i:04d}" for i in range(2005)])
    sign_in(page, console)
    # Timed first, with CSS-only waits: once Playwright has matched roles
    # over a big page, its injected script slows every later DOM change of
    # that page (by 10-20× here), which a real browser would not see.
    page.evaluate(RENDER_MS, 1000)
    page.evaluate("() => { location.hash = 'b=many'; }")
    first = page.evaluate(RENDERED)
    page.wait_for_function(FIRST_NAME + " === 'k0000'")
    assert page.locator("#object-rows tr").count() == 1000
    page.evaluate(RENDER_MS, 1000)
    page.locator("#next-page").click()
    second = page.evaluate(RENDERED)
    page.wait_for_function(FIRST_NAME + " === 'k1000'")
    # Timings never gate tests: bench/scripts/console_render.py measures
    # them with repetitions and spreads.
    print(f"a page of 1,000 keys after its response: first rows {first[0]:.0f}/{second[0]:.0f} ms, "
          f"all 1,000 {first[1]:.0f}/{second[1]:.0f} ms")

    page.get_by_role("cell", name="k1999", exact=True).wait_for()
    assert page.get_by_role("cell", name="k2000", exact=True).count() == 0
    page.get_by_role("button", name="Next page").click()
    page.get_by_role("cell", name="k2004", exact=True).wait_for()
    assert page.get_by_role("button", name="Next page").is_hidden()
    page.get_by_role("button", name="Previous page").click()
    page.get_by_role("cell", name="k1000", exact=True).wait_for()
    page.get_by_role("button", name="Previous page").click()
    page.get_by_role("cell", name="k0000", exact=True).wait_for()


def test_console_security(console, page):
    s3 = console.client()
    api = Api(console.console)

    # The page: strict CSP, nosniff, never framed.
    resp, _ = api.call("GET", "session")
    assert resp.status == 401
    conn = http.client.HTTPConnection(api.netloc, timeout=10)
    conn.request("GET", api.base)
    r = conn.getresponse()
    r.read()
    csp = r.getheader("Content-Security-Policy")
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    assert r.getheader("X-Content-Type-Options") == "nosniff"
    assert r.getheader("ETag") and r.getheader("Cache-Control")

    # Sign-in: only the server's pair; the cookie's flags.
    resp, doc = api.call("POST", "session", {"access_key": console.access_key, "secret_key": console.secret_key + "x"})
    assert resp.status == 401 and doc["error"]["code"] == "bad_credentials"
    cookie, session, csrf = api.sign_in(console)
    assert len(session) == 64
    for flag in ("HttpOnly", "SameSite=Strict", "Path=/_stow/console/"):
        assert flag in cookie, cookie
    resp, doc = api.call("GET", "buckets", cookie=session)
    assert resp.status == 200 and doc == {"buckets": []}

    # State-changing requests: refused cross-origin (even with the token),
    # without the token, or with a forged session.
    create = {"name": "forged"}
    s3_origin = console.endpoint
    for headers, code in [
        ({"X-Stow-CSRF": csrf, "Origin": s3_origin}, "cross_origin"),
        ({"X-Stow-CSRF": csrf, "Sec-Fetch-Site": "same-site"}, "cross_origin"),
        ({"X-Stow-CSRF": csrf, "Sec-Fetch-Site": "cross-site"}, "cross_origin"),
        ({}, "csrf"),
        ({"X-Stow-CSRF": "0" * 64}, "csrf"),
    ]:
        resp, doc = api.call("POST", "buckets", create, headers=headers, cookie=session)
        assert resp.status == 403 and doc["error"]["code"] == code, (headers, doc)
    resp, doc = api.call("POST", "buckets", create, headers={"X-Stow-CSRF": csrf}, cookie=secrets.token_hex(32))
    assert resp.status == 401 and doc["error"]["code"] == "unauthenticated"
    resp, doc = api.call("GET", "buckets", headers={"Host": "evil.example:80"}, cookie=session)
    assert resp.status == 421
    assert bucket_names(s3) == []

    # In the browser: the cookie is invisible to script, and a page on the
    # S3 port's origin (same site, other origin) cannot create a bucket
    # with the cookie the browser sends along.
    sign_in(page, console)
    assert page.evaluate("document.cookie") == ""
    s3.create_bucket(Bucket="site")
    s3.put_object(Bucket="site", Key="x.html", Body=b"<p>s3 origin</p>", ContentType="text/html")
    page.goto(console.endpoint + "/site/" + "x.html")
    status = page.evaluate(
        """async (url) => {
            try {
                const r = await fetch(url, {method: "POST", mode: "no-cors", credentials: "include",
                    headers: {"Content-Type": "text/plain"}, body: JSON.stringify({name: "csrfed"})});
                return r.status;
            } catch (e) {
                return "blocked";
            }
        }""",
        console.console + "api/buckets",
    )
    # The request is sent (with the same-site cookie) and refused; its
    # answer is unreadable too (Cross-Origin-Resource-Policy: same-origin).
    assert status in (0, "blocked"), status
    assert "csrfed" not in bucket_names(s3)

    # A download is an attachment, typed as opaque bytes, sandboxed.
    resp, _ = api.call("GET", "object?bucket=site&key=x.html", cookie=session)
    assert resp.getheader("Content-Disposition").startswith("attachment;")
    assert resp.getheader("Content-Type") == "application/octet-stream"
    assert "sandbox" in resp.getheader("Content-Security-Policy")

    # Logout ends the session on the server; the old cookie is refused.
    page.goto(console.console)
    page.get_by_role("button", name="Sign out").click()
    page.get_by_role("button", name="Sign in").wait_for()
    resp, _ = api.call("DELETE", "session", headers={"X-Stow-CSRF": csrf}, cookie=session)
    assert resp.status == 200 and "Max-Age=0" in resp.getheader("Set-Cookie")
    resp, doc = api.call("GET", "buckets", cookie=session)
    assert resp.status == 401
    assert page.alerts == []


def test_console_planted_cookie(console, page):
    """Cookies are not kept apart by port: an HTML object on the S3 port can
    set a `stow_console` cookie with a narrower path, which the browser
    sends before the real one. The console looks at every value, so the
    planted one neither shadows the session nor gets it cleared."""
    s3 = console.client()
    api = Api(console.console)
    _, session, _ = api.sign_in(console)
    for cookie in (f"{'0' * 64}; stow_console={session}", f"junk; stow_console={session}; stow_console=x"):
        resp, doc = api.call("GET", "buckets", cookie=cookie)
        assert resp.status == 200 and doc == {"buckets": []}, doc
        assert resp.getheader("Set-Cookie") is None, "a live session's cookie is never cleared"
    resp, doc = api.call("GET", "buckets", cookie=f"junk; stow_console={'0' * 64}")
    assert resp.status == 401 and doc["error"]["code"] == "unauthenticated"

    # In the browser: plant a long-lived cookie from the S3 port, sign in,
    # and the console keeps working.
    s3.create_bucket(Bucket="site")
    planted = 'document.cookie = "stow_console=planted; Path=/_stow/console/api/; Max-Age=31536000"'
    s3.put_object(Bucket="site", Key="evil.html", Body=f"<script>{planted}</script>".encode(), ContentType="text/html")
    page.goto(s3.generate_presigned_url("get_object", Params={"Bucket": "site", "Key": "evil.html"}))
    cookies = {(c["name"], c["path"], c["value"]) for c in page.context.cookies()}
    assert ("stow_console", "/_stow/console/api/", "planted") in cookies, cookies
    sign_in(page, console)
    page.get_by_role("link", name="site", exact=True).click()
    page.get_by_role("link", name="Download evil.html", exact=True).wait_for()
    assert page.alerts == []


def test_console_read_only(stow_bin, tmp_path, page):
    # Seed a bucket, then serve the same data read-only: the console shows
    # it without any control that would change it, and the API refuses a
    # change as the S3 port does.
    seed = S3Server(stow_bin, tmp_path / "data")
    try:
        s3 = seed.client()
        s3.create_bucket(Bucket="frozen")
        s3.put_object(Bucket="frozen", Key="a.txt", Body=b"a")
    finally:
        assert seed.stop() == 0
    server = S3Server(stow_bin, tmp_path / "data", "--read-only")
    server.console = server.ready["console"]
    try:
        sign_in(page, server)
        page.get_by_text("(read-only)").wait_for()
        assert not page.get_by_role("button", name="Create bucket").is_visible()
        page.get_by_role("link", name="frozen", exact=True).click()
        page.get_by_role("cell", name="a.txt", exact=True).wait_for()
        assert not page.get_by_role("button", name="Upload").is_visible()
        assert page.get_by_role("button", name="Delete a.txt").count() == 0, "hidden controls are not offered"
        page.get_by_role("link", name="Download a.txt").wait_for()
        # No drop zone, no selection, no Delete selected; details, the
        # preview and share links (reads) are there.
        assert not page.get_by_role("region", name="Drop files here to upload").is_visible()
        assert not page.get_by_role("button", name="Delete selected").is_visible()
        assert page.locator("#objects input[type=checkbox]:visible").count() == 0
        page.get_by_role("button", name="Details a.txt").click()
        page.get_by_label("Text preview of a.txt").filter(has_text="a").wait_for()
        page.get_by_role("button", name="Share link").click()
        page.get_by_label("Share link URL").wait_for()
        api = Api(server.console)
        _, session, csrf = api.sign_in(server)
        resp, doc = api.call("POST", "buckets", {"name": "nope"}, headers={"X-Stow-CSRF": csrf}, cookie=session)
        assert resp.status == 403 and doc["error"]["code"] == "AccessDenied", doc
    finally:
        assert server.stop() == 0


def test_console_dark_and_narrow(console, browser):
    # The system's dark setting is followed; a phone-sized window works.
    context = browser.new_context(color_scheme="dark", viewport={"width": 390, "height": 844})
    try:
        pg = context.new_page()
        pg.set_default_timeout(15_000)
        console.client().create_bucket(Bucket="phone")
        sign_in(pg, console)
        pg.get_by_role("link", name="phone", exact=True).wait_for()
        background = pg.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(21, 24, 28)", background
        pg.get_by_role("button", name="Delete bucket phone").wait_for()
        assert pg.evaluate("document.documentElement.scrollWidth") <= 390
        SHOTS.mkdir(parents=True, exist_ok=True)
        pg.screenshot(path=str(SHOTS / "test_console_dark_and_narrow.png"), full_page=True)
    finally:
        context.close()


def test_console_flags(stow_bin, tmp_path):
    # Loopback binds serve it on a port of its own; --no-console and other
    # binds do not; --console-port chooses the port.
    on = S3Server(stow_bin, tmp_path / "a")
    try:
        url = urllib.parse.urlparse(on.ready["console"])
        assert url.path == "/_stow/console/" and url.port != urllib.parse.urlparse(on.endpoint).port
        conn = http.client.HTTPConnection(urllib.parse.urlparse(on.endpoint).netloc, timeout=10)
        conn.request("GET", "/_stow/console/")
        resp = conn.getresponse()
        assert b"<html" not in resp.read(), "never on the S3 port"
    finally:
        assert on.stop() == 0
    off = S3Server(stow_bin, tmp_path / "b", "--no-console")
    try:
        assert off.ready["console"] is None
    finally:
        assert off.stop() == 0
    wide = S3Server(stow_bin, tmp_path / "c", "--host", "0.0.0.0")
    try:
        assert wide.ready["console"] is None
    finally:
        assert wide.stop() == 0
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    chosen = S3Server(stow_bin, tmp_path / "d", "--console-port", str(port))
    try:
        assert chosen.ready["console"] == f"http://127.0.0.1:{port}/_stow/console/"
    finally:
        assert chosen.stop() == 0
