"""Bucket CORS (issue 29): Put/Get/DeleteBucketCors with S3's validation,
kept durably; preflights answered from the bucket's rules before any
signature check (403 AccessForbidden when no rule allows them); the
`Access-Control-*` headers of the matching rule on actual requests,
presigned ones included; the server-wide origins for buckets without
rules; and a workspace's bucket view refusing rules with 501."""

import botocore
import pytest
import requests

from s3server import S3Server


def code_of(e):
    err = e.value.response
    return err["Error"]["Code"], err["ResponseMetadata"]["HTTPStatusCode"]


def xml_code(r):
    """The <Code> of an S3 error body."""
    return r.text.split("<Code>", 1)[1].split("</Code>", 1)[0]


def rules(*specs):
    return {"CORSRules": list(specs)}


UPLOADS = {
    "ID": "uploads",
    "AllowedMethods": ["PUT", "POST"],
    "AllowedOrigins": ["http://*.example.com"],
    "AllowedHeaders": ["content-*", "x-amz-meta-*"],
    "ExposeHeaders": ["ETag", "x-amz-version-id"],
    "MaxAgeSeconds": 3000,
}
READS = {"AllowedMethods": ["GET", "HEAD"], "AllowedOrigins": ["*"]}


def test_put_get_delete_bucket_cors(s3):
    s3.create_bucket(Bucket="web")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_bucket_cors(Bucket="web")
    assert code_of(e) == ("NoSuchCORSConfiguration", 404)

    s3.put_bucket_cors(Bucket="web", CORSConfiguration=rules(UPLOADS, READS))
    got = s3.get_bucket_cors(Bucket="web")["CORSRules"]
    assert got == [UPLOADS, READS]

    # Replaced whole.
    s3.put_bucket_cors(Bucket="web", CORSConfiguration=rules(READS))
    assert s3.get_bucket_cors(Bucket="web")["CORSRules"] == [READS]

    s3.delete_bucket_cors(Bucket="web")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_bucket_cors(Bucket="web")
    assert code_of(e) == ("NoSuchCORSConfiguration", 404)
    # Deleting what is not there succeeds, as on S3.
    s3.delete_bucket_cors(Bucket="web")

    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_bucket_cors(Bucket="nope")
    assert code_of(e) == ("NoSuchBucket", 404)


@pytest.mark.parametrize("rule, code, words", [
    ({"AllowedMethods": ["PATCH"], "AllowedOrigins": ["*"]}, "InvalidRequest", "Unsupported method is PATCH"),
    ({"AllowedMethods": ["get"], "AllowedOrigins": ["*"]}, "InvalidRequest", "Unsupported method"),
    ({"AllowedMethods": ["GET"], "AllowedOrigins": ["http://*.*.com"]}, "InvalidRequest", "more than one wildcard"),
    ({"AllowedMethods": ["GET"], "AllowedOrigins": ["*"], "AllowedHeaders": ["x-*-*"]},
     "InvalidRequest", "more than one wildcard"),
    ({"ID": "i" * 256, "AllowedMethods": ["GET"], "AllowedOrigins": ["*"]}, "InvalidRequest", "255"),
    ({"AllowedMethods": ["GET"], "AllowedOrigins": ["*"], "MaxAgeSeconds": -1}, "InvalidRequest", "MaxAgeSeconds"),
])
def test_put_bucket_cors_validation(s3, rule, code, words):
    s3.create_bucket(Bucket="web")
    s3.put_bucket_cors(Bucket="web", CORSConfiguration=rules(READS))
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_bucket_cors(Bucket="web", CORSConfiguration=rules(rule))
    assert code_of(e) == (code, 400)
    assert words in e.value.response["Error"]["Message"]
    # The refused configuration changed nothing.
    assert s3.get_bucket_cors(Bucket="web")["CORSRules"] == [READS]


def test_put_bucket_cors_rule_count(s3):
    s3.create_bucket(Bucket="web")
    s3.put_bucket_cors(Bucket="web", CORSConfiguration=rules(*[READS] * 100))
    assert len(s3.get_bucket_cors(Bucket="web")["CORSRules"]) == 100
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_bucket_cors(Bucket="web", CORSConfiguration=rules(*[READS] * 101))
    assert code_of(e) == ("MalformedXML", 400)
    assert "at most 100" in e.value.response["Error"]["Message"]


def preflight(url, origin=None, method=None, headers=None):
    h = {}
    if origin:
        h["Origin"] = origin
    if method:
        h["Access-Control-Request-Method"] = method
    if headers:
        h["Access-Control-Request-Headers"] = headers
    return requests.options(url, headers=h)


def test_preflights_follow_the_bucket_rules(s3server, s3):
    s3.create_bucket(Bucket="web")
    s3.put_bucket_cors(Bucket="web", CORSConfiguration=rules(UPLOADS, READS))
    obj = f"{s3server.endpoint}/web/photo.jpg"

    # Unsigned preflights are answered, before any signature check.
    r = preflight(obj, "http://app.example.com", "PUT", "Content-Type, x-amz-meta-owner")
    assert r.status_code == 200, r.text
    assert r.headers["Access-Control-Allow-Origin"] == "http://app.example.com"
    assert r.headers["Access-Control-Allow-Methods"] == "PUT, POST"
    assert r.headers["Access-Control-Allow-Headers"] == "Content-Type, x-amz-meta-owner"
    assert r.headers["Access-Control-Expose-Headers"] == "ETag, x-amz-version-id"
    assert r.headers["Access-Control-Max-Age"] == "3000"
    assert r.headers["Access-Control-Allow-Credentials"] == "true"
    assert "Origin" in r.headers["Vary"]

    # The second rule: any origin may GET; `*` is answered as `*`.
    r = preflight(obj, "http://elsewhere.test", "GET")
    assert r.status_code == 200
    assert r.headers["Access-Control-Allow-Origin"] == "*"
    assert r.headers["Access-Control-Allow-Methods"] == "GET, HEAD"

    # Refused: a method no rule allows for the origin, a header no rule
    # allows, an origin no rule names.
    for args in [
        ("http://elsewhere.test", "PUT", None),
        ("http://app.example.com", "PUT", "x-custom"),
        ("http://app.example.com", "DELETE", None),
        ("http://example.com", "PUT", None),
    ]:
        r = preflight(obj, *args)
        assert r.status_code == 403, args
        assert xml_code(r) == "AccessForbidden"
        assert "CORSResponse: This CORS request is not allowed" in r.text
        assert f"<Method>{args[1]}</Method><ResourceType>OBJECT</ResourceType>" in r.text
        assert "Access-Control-Allow-Origin" not in r.headers
    r = preflight(f"{s3server.endpoint}/web", "http://example.com", "PUT")
    assert r.status_code == 403 and "<ResourceType>BUCKET</ResourceType>" in r.text

    # No Origin, or no method asked for: not a preflight.
    r = preflight(obj)
    assert (r.status_code, xml_code(r)) == (400, "BadRequest")
    r = preflight(obj, "http://app.example.com")
    assert (r.status_code, xml_code(r)) == (400, "BadRequest")

    # Virtual-host addressing finds the same rules.
    port = s3server.endpoint.rsplit(":", 1)[1]
    r = requests.options(f"{s3server.endpoint}/photo.jpg",
                         headers={"Origin": "http://app.example.com",
                                  "Access-Control-Request-Method": "POST",
                                  "Host": f"web.localhost:{port}"})
    assert r.status_code == 200
    assert r.headers["Access-Control-Allow-Origin"] == "http://app.example.com"


def test_actual_requests_carry_the_rule_headers(s3server, s3):
    s3.create_bucket(Bucket="web")
    s3.put_bucket_cors(Bucket="web", CORSConfiguration=rules(UPLOADS, READS))
    # A presigned PUT from an allowed origin: the rule's headers, ETag exposed.
    url = s3.generate_presigned_url("put_object", Params={"Bucket": "web", "Key": "k"}, ExpiresIn=300)
    r = requests.put(url, data=b"hello", headers={"Origin": "http://app.example.com"})
    assert r.status_code == 200, r.text
    assert r.headers["Access-Control-Allow-Origin"] == "http://app.example.com"
    assert r.headers["Access-Control-Allow-Methods"] == "PUT, POST"
    assert r.headers["Access-Control-Expose-Headers"] == "ETag, x-amz-version-id"
    assert r.headers["Access-Control-Max-Age"] == "3000"
    assert r.headers["ETag"] == '"5d41402abc4b2a76b9719d911017c592"'
    assert "Origin" in r.headers["Vary"]

    # A presigned GET from any origin: the READS rule, which exposes nothing.
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "web", "Key": "k"}, ExpiresIn=300)
    r = requests.get(url, headers={"Origin": "http://elsewhere.test"})
    assert r.status_code == 200 and r.content == b"hello"
    assert r.headers["Access-Control-Allow-Origin"] == "*"
    assert "Access-Control-Expose-Headers" not in r.headers

    # A PUT from an origin that may only GET: served (CORS is the browser's
    # to enforce), but without any Access-Control-* header.
    url = s3.generate_presigned_url("put_object", Params={"Bucket": "web", "Key": "k2"}, ExpiresIn=300)
    r = requests.put(url, data=b"x", headers={"Origin": "http://elsewhere.test"})
    assert r.status_code == 200
    assert not [h for h in r.headers if h.lower().startswith("access-control-")]
    assert "Origin" in r.headers["Vary"]

    # Errors carry them too (an unsigned GET of a private object).
    r = requests.get(f"{s3server.endpoint}/web/k", headers={"Origin": "http://elsewhere.test"})
    assert r.status_code == 403
    assert r.headers["Access-Control-Allow-Origin"] == "*"

    # The bucket's rules replace the server-wide loopback default.
    r = requests.get(url, headers={"Origin": "http://localhost:5173"})
    assert r.headers["Access-Control-Allow-Origin"] == "*"


def test_buckets_without_rules_keep_the_server_wide_origins(s3server, s3):
    s3.create_bucket(Bucket="plain")
    s3.put_object(Bucket="plain", Key="k", Body=b"v")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "plain", "Key": "k"}, ExpiresIn=300)
    r = requests.get(url, headers={"Origin": "http://localhost:5173"})
    assert r.headers["Access-Control-Allow-Origin"] == "http://localhost:5173"
    assert "ETag" in r.headers["Access-Control-Expose-Headers"]
    r = requests.get(url, headers={"Origin": "http://example.com"})
    assert "Access-Control-Allow-Origin" not in r.headers
    r = preflight(f"{s3server.endpoint}/plain/k", "http://localhost:5173", "PUT")
    assert r.status_code == 200
    assert r.headers["Access-Control-Allow-Origin"] == "http://localhost:5173"


def test_rules_survive_a_restart(stow_bin, tmp_path):
    server = S3Server(stow_bin, tmp_path / "data")
    try:
        s3 = server.client()
        s3.create_bucket(Bucket="web")
        s3.put_bucket_cors(Bucket="web", CORSConfiguration=rules(UPLOADS))
    finally:
        assert server.stop() == 0
    server = S3Server(stow_bin, tmp_path / "data")
    try:
        assert server.client().get_bucket_cors(Bucket="web")["CORSRules"] == [UPLOADS]
        r = preflight(f"{server.endpoint}/web/k", "http://a.example.com", "PUT")
        assert r.status_code == 200
    finally:
        assert server.stop() == 0


def test_a_workspace_view_keeps_no_cors_rules(stow_bin, workdir):
    """`workspace serve`: PutBucketCors is 501 with its reason; the view
    has no rules (404), and deleting none succeeds."""
    from test_workspace_serve import prepare
    from s3server import WorkspaceServer

    p = prepare(stow_bin, workdir, {"seed.txt": b"seed"})
    server = WorkspaceServer(stow_bin, p["workspace_id"], workdir / "reg")
    try:
        s3, bucket = server.client(), server.bucket
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.put_bucket_cors(Bucket=bucket, CORSConfiguration=rules(READS))
        assert code_of(e) == ("NotImplemented", 501)
        assert "keeps no bucket CORS rules" in e.value.response["Error"]["Message"]
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.get_bucket_cors(Bucket=bucket)
        assert code_of(e) == ("NoSuchCORSConfiguration", 404)
        s3.delete_bucket_cors(Bucket=bucket)
    finally:
        assert server.stop() == 0
