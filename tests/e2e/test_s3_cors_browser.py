"""Bucket CORS in a real browser (issue 29): headless Chromium (Debian's
/usr/bin/chromium, driven by Playwright) on a page served from another
origin (a python http.server on its own port) uploads through a presigned
PUT (a preflighted request) and through a POST form with fetch, reads the
ETag header where the bucket's rule exposes it, and is refused where the
rules say so. Skipped, with the reason, without Playwright or Chromium."""

import functools
import http.server
import os
import threading

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--no-sandbox",
    "--disable-dev-shm-usage",
]

PAGE = b"<!doctype html><meta charset=utf-8><title>uploader</title><p>an app on another origin</p>"

# Runs in the page: a presigned PUT, a POST form, and a PUT the rules refuse.
UPLOADS = """async ({putUrl, post, refusedUrl, readUrl}) => {
  const out = {};
  const put = await fetch(putUrl, {method: 'PUT', body: 'hello from the page'});
  out.put = {status: put.status, etag: put.headers.get('ETag')};
  const form = new FormData();
  for (const [k, v] of Object.entries(post.fields)) form.append(k, v);
  form.append('file', new Blob(['posted from the page'], {type: 'text/plain'}), 'note.txt');
  const posted = await fetch(post.url, {method: 'POST', body: form});
  out.post = {status: posted.status, etag: posted.headers.get('ETag'), body: await posted.text()};
  try {
    const r = await fetch(refusedUrl, {method: 'PUT', body: 'nope'});
    out.refused = 'answered ' + r.status;
  } catch (e) {
    out.refused = e.name;
  }
  const read = await fetch(readUrl);
  out.read = {status: read.status, body: await read.text(), etag: read.headers.get('ETag')};
  return out;
}"""


@pytest.fixture
def other_origin(tmp_path):
    """A page served by python's http.server on a port of its own."""
    root = tmp_path / "site"
    root.mkdir()
    (root / "index.html").write_bytes(PAGE)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
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


def test_a_page_on_another_origin_uploads_by_the_bucket_rules(s3server, s3, other_origin, browser):
    # `uploads`: the page may PUT, POST and GET, and read the ETag.
    s3.create_bucket(Bucket="uploads")
    s3.put_bucket_cors(Bucket="uploads", CORSConfiguration={"CORSRules": [{
        "AllowedMethods": ["PUT", "POST", "GET"], "AllowedOrigins": [other_origin],
        "AllowedHeaders": ["*"], "ExposeHeaders": ["ETag"], "MaxAgeSeconds": 60,
    }]})
    # `readonly`: the page may only GET, and reads no ETag.
    s3.create_bucket(Bucket="readonly")
    s3.put_object(Bucket="readonly", Key="public.txt", Body=b"read me")
    s3.put_bucket_cors(Bucket="readonly", CORSConfiguration={"CORSRules": [{
        "AllowedMethods": ["GET"], "AllowedOrigins": [other_origin],
    }]})
    put_url = s3.generate_presigned_url("put_object", Params={"Bucket": "uploads", "Key": "put.txt"}, ExpiresIn=300)
    post = s3.generate_presigned_post("uploads", "posted/${filename}",
                                      Fields={"success_action_status": "201"},
                                      Conditions=[["starts-with", "$key", "posted/"],
                                                  {"success_action_status": "201"},
                                                  ["content-length-range", 1, 1000]], ExpiresIn=300)
    refused_url = s3.generate_presigned_url("put_object", Params={"Bucket": "readonly", "Key": "no.txt"},
                                            ExpiresIn=300)
    read_url = s3.generate_presigned_url("get_object", Params={"Bucket": "readonly", "Key": "public.txt"},
                                         ExpiresIn=300)

    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        page.goto(f"{other_origin}/index.html")
        assert page.evaluate("location.origin") == other_origin
        out = page.evaluate(UPLOADS, {"putUrl": put_url, "post": post, "refusedUrl": refused_url,
                                      "readUrl": read_url})
    finally:
        context.close()

    put_etag = s3.head_object(Bucket="uploads", Key="put.txt")["ETag"]
    assert out["put"] == {"status": 200, "etag": put_etag}
    assert s3.get_object(Bucket="uploads", Key="put.txt")["Body"].read() == b"hello from the page"

    posted = s3.head_object(Bucket="uploads", Key="posted/note.txt")
    assert out["post"]["status"] == 201
    assert out["post"]["etag"] == posted["ETag"]
    assert "<Key>posted/note.txt</Key>" in out["post"]["body"]
    assert s3.get_object(Bucket="uploads", Key="posted/note.txt")["Body"].read() == b"posted from the page"

    # The preflight of the PUT was refused (403), so the browser never sent it.
    assert out["refused"] == "TypeError"
    assert s3.list_objects_v2(Bucket="readonly", Prefix="no.txt")["KeyCount"] == 0
    # A GET the rule allows is readable, but its ETag is not exposed.
    assert out["read"] == {"status": 200, "body": "read me", "etag": None}
