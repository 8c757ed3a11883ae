"""Browser POST uploads (issue 29): POST Object with a policy document,
signed as boto3's `generate_presigned_post` signs it (SigV4 fields) or in
the legacy `AWSAccessKeyId`/`signature` form (HMAC-SHA1), checked fully:
the expiration (malformed → 400, expired → 403), every condition (`eq`,
`starts-with`, `content-length-range`, `success_action_status`/`_redirect`,
`x-amz-meta-*`), checksum fields, `${filename}` in the key, fields no
condition names and the bucket — each refusal with S3's code."""

import base64
import datetime
import hashlib
import hmac
import json
import xml.etree.ElementTree as ET

import pytest
import requests
import urllib3


def later(seconds=3600):
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def xml_error(r):
    """(status, <Code>, <Message>) of an S3 error answer."""
    root = ET.fromstring(r.content)
    return r.status_code, root.findtext("Code"), root.findtext("Message")


BASE = [["starts-with", "$key", "up/"], {"acl": "private"},
        ["starts-with", "$Content-Type", "text/"], ["content-length-range", 0, 1024]]
FIELDS = {"key": "up/a.txt", "acl": "private", "Content-Type": "text/plain"}


@pytest.fixture
def post_v2(s3server, s3):
    """Posts a legacy-signed (AWSAccessKeyId/signature) form to bucket `forms`."""
    s3.create_bucket(Bucket="forms")

    def post(conditions=None, fields=None, file=("a.txt", b"hello"), expiration=None,
             bucket="forms", doc=None, secret=None):
        if doc is None:
            doc = {"expiration": expiration or later(),
                   "conditions": [{"bucket": "forms"}, *(BASE if conditions is None else conditions)]}
        policy = base64.b64encode(json.dumps(doc).encode())
        key = (secret or s3server.secret_key).encode()
        signature = base64.b64encode(hmac.new(key, policy, hashlib.sha1).digest())
        form = dict(FIELDS if fields is None else fields)
        form.update(AWSAccessKeyId=s3server.access_key, signature=signature, policy=policy)
        return requests.post(f"{s3server.endpoint}/{bucket}", files=[*form.items(), ("file", file)],
                             allow_redirects=False)
    return post


def test_boto3_presigned_post(s3server, s3):
    s3.create_bucket(Bucket="forms")
    p = s3.generate_presigned_post(
        "forms", "up/${filename}",
        Fields={"Content-Type": "text/plain", "x-amz-meta-owner": "ada", "success_action_status": "201"},
        Conditions=[["starts-with", "$key", "up/"], ["starts-with", "$Content-Type", "text/"],
                    {"x-amz-meta-owner": "ada"}, {"success_action_status": "201"},
                    ["content-length-range", 1, 100]],
        ExpiresIn=300)
    assert {"x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-signature", "policy"} <= set(p["fields"])
    r = requests.post(p["url"], data=p["fields"], files={"file": ("photo one.txt", b"hello")})
    assert r.status_code == 201, r.text
    root = ET.fromstring(r.content)
    assert root.findtext("Key") == "up/photo one.txt"
    assert root.findtext("Bucket") == "forms"
    head = s3.head_object(Bucket="forms", Key="up/photo one.txt")
    assert root.findtext("ETag") == head["ETag"] == '"5d41402abc4b2a76b9719d911017c592"'
    assert head["Metadata"] == {"owner": "ada"}
    assert head["ContentType"] == "text/plain"

    # The same form, one byte over the range: EntityTooLarge; none: EntityTooSmall.
    r = requests.post(p["url"], data=p["fields"], files={"file": ("big.txt", b"x" * 101)})
    assert xml_error(r)[:2] == (400, "EntityTooLarge")
    r = requests.post(p["url"], data=p["fields"], files={"file": ("empty.txt", b"")})
    assert xml_error(r)[:2] == (400, "EntityTooSmall")
    # A field changed after signing: the condition fails.
    r = requests.post(p["url"], data={**p["fields"], "x-amz-meta-owner": "eve"}, files={"file": ("a.txt", b"x")})
    status, code, message = xml_error(r)
    assert (status, code) == (403, "AccessDenied")
    assert message.startswith("Invalid according to Policy: Policy Condition failed")
    # A signature that is not the policy's.
    r = requests.post(p["url"], data={**p["fields"], "x-amz-signature": "0" * 64}, files={"file": ("a.txt", b"x")})
    assert xml_error(r)[:2] == (403, "SignatureDoesNotMatch")
    # To another bucket: the policy names this one.
    s3.create_bucket(Bucket="other")
    r = requests.post(p["url"].replace("/forms", "/other"), data=p["fields"], files={"file": ("a.txt", b"x")})
    assert xml_error(r)[:2] == (403, "AccessDenied")
    assert s3.list_objects_v2(Bucket="other")["KeyCount"] == 0


def test_legacy_signature_and_success_statuses(post_v2, s3server, s3):
    r = post_v2()
    assert (r.status_code, r.content) == (204, b"")
    # The ETag is named in a header, as S3 does (a browser page reads it).
    assert r.headers["ETag"] == '"5d41402abc4b2a76b9719d911017c592"'
    assert s3.get_object(Bucket="forms", Key="up/a.txt")["Body"].read() == b"hello"
    status = [["starts-with", "$success_action_status", ""]] + BASE
    r = post_v2(status, {**FIELDS, "success_action_status": "200"})
    assert (r.status_code, r.content) == (200, b"")
    r = post_v2(status, {**FIELDS, "success_action_status": "201"})
    assert r.status_code == 201 and ET.fromstring(r.content).findtext("Key") == "up/a.txt"
    # Anything else answers 204, as on S3.
    r = post_v2(status, {**FIELDS, "success_action_status": "404"})
    assert (r.status_code, r.content) == (204, b"")
    # success_action_redirect: 303 to it, with bucket, key and the quoted ETag.
    done = f"{s3server.endpoint}/forms?done=1"
    r = post_v2([["eq", "$success_action_redirect", done]] + BASE, {**FIELDS, "success_action_redirect": done})
    assert r.status_code == 303
    assert r.headers["Location"] == (f"{done}&bucket=forms&key=up%2Fa.txt"
                                     "&etag=%225d41402abc4b2a76b9719d911017c592%22")
    # A wrong secret.
    r = post_v2(secret="not-the-secret")
    assert xml_error(r)[:2] == (403, "SignatureDoesNotMatch")


def test_key_from_filename_and_metadata(post_v2, s3):
    r = post_v2(fields={**FIELDS, "key": "up/${filename}"}, file=("report.txt", b"r"))
    assert r.status_code == 204, r.text
    assert s3.get_object(Bucket="forms", Key="up/report.txt")["Body"].read() == b"r"
    # The condition sees the substituted key.
    r = post_v2(fields={**FIELDS, "key": "${filename}"}, file=("report.txt", b"r"))
    status, code, message = xml_error(r)
    assert (status, code) == (403, "AccessDenied")
    assert '["starts-with","$key","up/"]' in message
    meta = BASE + [["starts-with", "$x-amz-meta-tag", "bar"]]
    r = post_v2(meta, {**FIELDS, "x-amz-meta-tag": "barclamp"})
    assert r.status_code == 204
    assert s3.head_object(Bucket="forms", Key="up/a.txt")["Metadata"] == {"tag": "barclamp"}
    # The field a condition names is missing; its value differs.
    r = post_v2(meta, FIELDS)
    assert xml_error(r)[:2] == (403, "AccessDenied")
    r = post_v2(BASE + [["eq", "$x-amz-meta-tag", ""]], {**FIELDS, "x-amz-meta-tag": "barclamp"})
    assert xml_error(r)[:2] == (403, "AccessDenied")


def test_tags_from_the_tagging_field(post_v2, s3):
    tagging = ("<Tagging><TagSet><Tag><Key>team</Key><Value>a b</Value></Tag>"
               "<Tag><Key>k&#64;1</Key><Value>v=1</Value></Tag></TagSet></Tagging>")
    r = post_v2(BASE + [["starts-with", "$tagging", ""]], {**FIELDS, "tagging": tagging})
    assert r.status_code == 204, r.text
    got = s3.get_object_tagging(Bucket="forms", Key="up/a.txt")["TagSet"]
    assert sorted((t["Key"], t["Value"]) for t in got) == [("k@1", "v=1"), ("team", "a b")]
    # A tag AWS refuses (`&` is not a tag character) is refused here too.
    bad = "<Tagging><TagSet><Tag><Key>k&amp;1</Key><Value>v</Value></Tag></TagSet></Tagging>"
    r = post_v2(BASE + [["starts-with", "$tagging", ""]], {**FIELDS, "tagging": bad})
    assert xml_error(r)[:2] == (400, "InvalidTag")
    r = post_v2(BASE + [["starts-with", "$tagging", ""]], {**FIELDS, "tagging": "team=a"})
    assert xml_error(r)[:2] == (400, "MalformedXML")


def test_fields_no_condition_names(post_v2):
    r = post_v2(fields={**FIELDS, "x-amz-meta-extra": "1"})
    status, code, message = xml_error(r)
    assert (status, code) == (403, "AccessDenied")
    assert message == "Invalid according to Policy: Extra input fields: x-amz-meta-extra"
    # x-ignore-* fields need none.
    assert post_v2(fields={**FIELDS, "x-ignore-me": "z"}).status_code == 204


def test_checksum_fields(post_v2, s3):
    good = base64.b64encode(hashlib.sha256(b"hello").digest()).decode()
    r = post_v2(fields={**FIELDS, "x-amz-checksum-sha256": good})
    assert r.status_code == 204, r.text
    got = s3.head_object(Bucket="forms", Key="up/a.txt", ChecksumMode="ENABLED")
    assert got["ChecksumSHA256"] == good
    wrong = base64.b64encode(hashlib.sha256(b"other").digest()).decode()
    r = post_v2(fields={**FIELDS, "x-amz-checksum-sha256": wrong})
    assert xml_error(r)[:2] == (400, "BadDigest")
    # A checksum field a condition names is checked by it too.
    named = BASE + [["eq", "$x-amz-checksum-sha256", good]]
    assert post_v2(named, {**FIELDS, "x-amz-checksum-sha256": good}).status_code == 204
    r = post_v2(named, {**FIELDS, "x-amz-checksum-sha256": wrong})
    assert xml_error(r)[:2] == (403, "AccessDenied")


def test_policy_documents_refused(post_v2, s3):
    r = post_v2(expiration="2099-01-01 00:00:00")
    status, code, message = xml_error(r)
    assert (status, code) == (400, "InvalidPolicyDocument")
    assert "expiration" in message
    r = post_v2(expiration="2020-01-01T00:00:00Z")
    assert xml_error(r) == (403, "AccessDenied", "Invalid according to Policy: Policy expired.")
    for doc in [{"conditions": [{"bucket": "forms"}]},
                {"expiration": later()},
                {"expiration": later(), "CONDITIONS": [{"bucket": "forms"}]},
                {"expiration": later(), "conditions": [{}]},
                {"expiration": later(), "conditions": [{"bucket": "forms"}, ["content-length-range", -1, 0]]},
                {"expiration": later(), "conditions": [{"bucket": "forms"}, ["content-length-range", 0]]}]:
        r = post_v2(doc=doc)
        assert xml_error(r)[:2] == (400, "InvalidPolicyDocument"), doc
    # A policy that does not name the bucket.
    r = post_v2(doc={"expiration": later(), "conditions": BASE})
    assert xml_error(r)[:2] == (403, "AccessDenied")
    # The policy's bucket is not the one posted to.
    s3.create_bucket(Bucket="elsewhere")
    r = post_v2(bucket="elsewhere")
    assert xml_error(r)[:2] == (403, "AccessDenied")
    assert s3.list_objects_v2(Bucket="elsewhere")["KeyCount"] == 0


def test_malformed_forms(s3server, s3):
    s3.create_bucket(Bucket="forms")
    url = f"{s3server.endpoint}/forms"
    policy = base64.b64encode(json.dumps({"expiration": later(), "conditions": [{"bucket": "forms"}]}).encode())
    # A policy without a signature; a form without a key.
    r = requests.post(url, files=[("key", "k"), ("AWSAccessKeyId", s3server.access_key), ("policy", policy),
                                  ("file", b"x")])
    assert xml_error(r)[:2] == (400, "InvalidArgument")
    r = requests.post(url, files=[("acl", "private"), ("file", b"x")])
    status, code, message = xml_error(r)
    assert (status, code) == (400, "InvalidArgument") and "'key'" in message
    # No file; not multipart at all past the headers.
    r = requests.post(url, data=b"--B\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nk\r\n--B--\r\n",
                      headers={"Content-Type": "multipart/form-data; boundary=B"})
    assert xml_error(r)[:2] == (400, "InvalidArgument")
    r = requests.post(url, data=b"not a form", headers={"Content-Type": "multipart/form-data; boundary=B"})
    assert xml_error(r)[:2] == (400, "MalformedPOSTRequest")
    # An unsigned form to a private bucket.
    r = requests.post(url, files=[("key", "k"), ("file", b"x")])
    assert xml_error(r)[:2] == (403, "AccessDenied")
    assert s3.list_objects_v2(Bucket="forms")["KeyCount"] == 0
    # An unsigned form (no policy) into a public-read-write bucket: taken,
    # with its success_action_status, as S3 takes it.
    s3.create_bucket(Bucket="drop", ACL="public-read-write")
    r = requests.post(f"{s3server.endpoint}/drop",
                      files=[("key", "anon.txt"), ("success_action_status", "201"), ("file", b"anon")])
    assert r.status_code == 201, r.text
    assert s3.get_object(Bucket="drop", Key="anon.txt")["Body"].read() == b"anon"


def send_form_head(endpoint, bucket, key, declared):
    """Opens a POST form to `bucket` declaring `declared` body bytes, sends its
    unsigned fields and the first KiB of the file, and returns the socket
    (the rest of the body never comes)."""
    import socket
    import urllib.parse
    url = urllib.parse.urlparse(endpoint)
    head = (f"--B\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\n{key}\r\n"
            "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\n").encode()
    sock = socket.create_connection((url.hostname, url.port), timeout=10)
    sock.sendall((f"POST /{bucket} HTTP/1.1\r\nHost: {url.netloc}\r\n"
                  "Content-Type: multipart/form-data; boundary=B\r\n"
                  f"Content-Length: {declared}\r\n\r\n").encode() + head + b"x" * 1024)
    return sock


def answer_of(sock):
    """(status, <Code>) of the answer on `sock`, read before the body ends."""
    data = b""
    while b"</Error>" not in data:
        chunk = sock.recv(65536)  # a timeout here: the server waited for the file
        if not chunk:
            break
        data += chunk
    status = int(data.split(b" ", 2)[1])
    body = data.split(b"\r\n\r\n", 1)[1]
    return status, ET.fromstring(body[body.index(b"<"):]).findtext("Code")


def test_unsigned_forms_are_judged_before_their_file(s3server, s3):
    """An unsigned form that no policy or ACL lets in is refused as soon as
    its fields are read: the server used to read the whole declared file
    into memory (up to 5 GiB) before its 403."""
    s3.create_bucket(Bucket="private")
    s3.create_bucket(Bucket="drop")
    s3.put_bucket_policy(Bucket="drop", Policy=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:PutObject",
                       "Resource": "arn:aws:s3:::drop/in/*"}]}))
    declared = 1 << 30
    for bucket, key, expected in [("private", "k", (403, "AccessDenied")),
                                  ("drop", "out/k", (403, "AccessDenied")),
                                  ("missing", "k", (404, "NoSuchBucket"))]:
        with send_form_head(s3server.endpoint, bucket, key, declared) as sock:
            assert answer_of(sock) == expected, (bucket, key)
    # Two keys: refused, for the check and the store must see one.
    r = requests.post(f"{s3server.endpoint}/drop", data=[("key", "in/a"), ("KEY", "out/b")],
                      files={"file": ("f", b"x")})
    assert xml_error(r)[:2] == (400, "InvalidArgument") and "more than once" in xml_error(r)[2]
    # What the policy opens still uploads, unsigned.
    r = requests.post(f"{s3server.endpoint}/drop", data={"key": "in/k"}, files={"file": ("f", b"dropped")})
    assert r.status_code == 204, r.text
    assert s3.get_object(Bucket="drop", Key="in/k")["Body"].read() == b"dropped"
    assert "Contents" not in s3.list_objects_v2(Bucket="private")


def test_a_form_file_is_bounded_by_max_request_bytes(stow_bin, tmp_path):
    """A form sent without a length (chunked) is held to --max-request-bytes
    too: its file is refused once past it, not read on to 5 GiB."""
    from s3server import S3Server
    server = S3Server(stow_bin, tmp_path / "d", "--max-request-bytes", "65536")
    try:
        c = server.client()
        c.create_bucket(Bucket="forms")
        p = c.generate_presigned_post("forms", "big", ExpiresIn=300)
        body, content_type = urllib3.encode_multipart_formdata(
            [*p["fields"].items(), ("file", ("f", b"x" * 100_000))])

        def chunks():
            for at in range(0, len(body), 8192):
                yield body[at:at + 8192]
        r = requests.post(p["url"], data=chunks(), headers={"Content-Type": content_type})
        assert "Content-Length" not in r.request.headers
        assert xml_error(r)[:2] == (400, "EntityTooLarge")
        small, content_type = urllib3.encode_multipart_formdata(
            [*p["fields"].items(), ("file", ("f", b"x" * 60_000))])
        r = requests.post(p["url"], data=iter([small]), headers={"Content-Type": content_type})
        assert r.status_code == 204, r.text
        assert c.head_object(Bucket="forms", Key="big")["ContentLength"] == 60_000
    finally:
        assert server.stop() == 0


def test_the_acl_field_sets_the_object_acl(s3server, s3):
    """A form's `acl` field is the new object's canned ACL (it was dropped):
    public-read opens it to unsigned reads, an ACL this server does not
    know is refused as a PUT's is, and BlockPublicAcls refuses a public one."""
    s3.create_bucket(Bucket="aclforms")

    def post(acl):
        p = s3.generate_presigned_post("aclforms", f"k-{acl}", Fields={"acl": acl}, Conditions=[{"acl": acl}])
        return requests.post(p["url"], data=p["fields"], files={"file": ("a", b"hi")})
    assert post("public-read").status_code == 204
    assert requests.get(f"{s3server.endpoint}/aclforms/k-public-read").content == b"hi"
    assert post("private").status_code == 204
    assert requests.get(f"{s3server.endpoint}/aclforms/k-private").status_code == 403
    assert xml_error(post("bogus-acl"))[:2] == (501, "NotImplemented")
    s3.put_public_access_block(Bucket="aclforms", PublicAccessBlockConfiguration={
        "BlockPublicAcls": True, "IgnorePublicAcls": False,
        "BlockPublicPolicy": False, "RestrictPublicBuckets": False})
    assert xml_error(post("public-read-write"))[:2] == (403, "AccessDenied")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="aclforms")["Contents"]]
    assert keys == ["k-private", "k-public-read"]
