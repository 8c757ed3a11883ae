"""The versioned half of engine `s3` (issue 29): the model of a versioned
bucket's keys (`VKey`, its versions `VRec`), the load a worker puts on
them (`VersionedLoad`, mixed into `engine_s3.Worker`) and the checks after
each restart (`VersionChecks`, mixed into `engine_s3.S3Engine`): paged
ListObjectVersions in wire order, GET by versionId, IsLatest, locked
versions refused, and the trimming of long version histories. The
engine's docstring says what is checked."""

from __future__ import annotations

import hashlib
import xml.etree.ElementTree as ET
from datetime import UTC, datetime

from botocore.exceptions import ClientError

from soakkit import (
    ABSENT,
    MIB,
    Stop,
    Upload,
    Value,
    multipart_etag,
    strip_etag,
    value_of,
)

VBUCKET, LBUCKET = "soak-v", "soak-lock"  # versioned; object lock (versioned, default retention)
MARKER = "MARKER"  # a delete marker's place in the versioned model
MAX_VERSIONS = 3  # a key with more is trimmed (oldest first) after the check


class VRec:
    """A version the model knows: its ID, its Value (or MARKER) and, in
    the lock bucket, its legal hold (None: unknown, a change was in flight)."""

    def __init__(self, vid, value, hold=False):
        self.vid, self.value, self.hold = vid, value, hold

    def __repr__(self):
        return f"{self.vid}:{'marker' if self.value is MARKER else self.value}"


class VKey:
    """A key of a versioned bucket, written by one worker only: its
    versions oldest first (acknowledged, or found by the last check), the
    IDs whose deletion is in flight or was acknowledged, and the new
    version (Value or MARKER) of a write in flight."""

    def __init__(self, bucket, key):
        self.bucket, self.key = bucket, key
        self.locked = bucket == LBUCKET
        self.versions: list[VRec] = []
        self.deleting = set()
        self.gone = set()
        self.gone_now = set()  # deletions acknowledged since the last check
        self.pending = None

    def ident(self):
        return (self.bucket, self.key)


class VersionedLoad:
    """A worker's load on its keys of the versioned buckets (`self.vkeys`)."""

    def vcall(self, what, vk, fn, expect=None):
        """A call on a versioned key: an answer, None for the expected
        refusal (`expect`, an S3 code); any other refusal is a failure;
        no answer (the kill) stops the worker with the call in flight."""
        try:
            return fn()
        except ClientError as e:
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            code = e.response.get("Error", {}).get("Code")
            if expect is not None and code == expect:
                return None
            if 400 <= status < 500:
                self.ctx.fail(f"{what} was refused", vk.ident(), expected=expect or "success",
                              found=f"{status} {code}")
            raise Stop(f"{status} {e}") from e
        except Exception as e:
            raise Stop(repr(e)) from e

    def v_created(self, vk, r, value, etag, kind, hold=False):
        vid = r.get("VersionId")
        if not vid or vid == "null" or vid in {v.vid for v in vk.versions} or vid in vk.gone:
            self.ctx.fail(f"{kind} in a versioned bucket answered no new version ID", vk.ident(),
                          expected="a new version ID", found=vid)
        if value is not MARKER and strip_etag(etag) != value.etag:
            self.ctx.fail(f"{kind} answered a wrong ETag", vk.ident(), expected=value.etag, found=etag)
        vk.versions.append(VRec(vid, value, hold))
        vk.pending = None
        self.acked += 1
        self.vstats["version_writes_acked"] += 1

    def v_put(self):
        vk = self.rng.choice(self.vkeys)
        data = self.body(self.rng.choice([0, 30, self.rng.randint(1, 20 << 10), self.rng.randint(20 << 10, 200 << 10)]))
        value = value_of(data)
        hold = vk.locked and self.rng.random() < 0.2
        extra = {"ObjectLockLegalHoldStatus": "ON"} if hold else {}
        vk.pending = value
        r = self.vcall("a PUT in a versioned bucket", vk, lambda: self.client.put_object(
            Bucket=vk.bucket, Key=vk.key, Body=data, **extra))
        self.v_created(vk, r, value, r["ETag"], "put", hold)

    def v_delete(self):
        """DELETE without a version ID: a delete marker."""
        vk = self.rng.choice(self.vkeys)
        vk.pending = MARKER
        r = self.vcall("a DELETE (delete marker)", vk, lambda: self.client.delete_object(
            Bucket=vk.bucket, Key=vk.key))
        if r.get("DeleteMarker") is not True:
            self.ctx.fail("a DELETE in a versioned bucket wrote no delete marker", vk.ident(),
                          expected="x-amz-delete-marker: true", found=r.get("DeleteMarker"))
        self.v_created(vk, r, MARKER, None, "delete marker")

    def v_delete_version(self):
        have = [vk for vk in self.vkeys if vk.versions]
        if not have:
            return self.v_put()
        vk = self.rng.choice(have)
        rec = vk.versions[0] if len(vk.versions) > 2 and self.rng.random() < 0.6 else self.rng.choice(vk.versions)
        locked = vk.locked and rec.value is not MARKER
        bypass = vk.locked and self.rng.random() < 0.6
        extra = {"BypassGovernanceRetention": True} if bypass else {}
        if locked and (not bypass or rec.hold):
            # Retention without the bypass, or a legal hold: refused, and
            # the version stays even if the kill interrupts the call.
            r = self.vcall("a DELETE of a locked version", vk, lambda: self.client.delete_object(
                Bucket=vk.bucket, Key=vk.key, VersionId=rec.vid, **extra), expect="AccessDenied")
            if r is not None:
                self.ctx.fail("a locked version's DELETE by versionId was not refused", vk.ident(),
                              expected="403 AccessDenied", found=f"deleted {rec!r} (bypass={bypass}, hold={rec.hold})")
            self.vstats["locked_deletes_refused"] += 1
            return
        vk.deleting.add(rec.vid)
        r = self.vcall("a DELETE by versionId", vk, lambda: self.client.delete_object(
            Bucket=vk.bucket, Key=vk.key, VersionId=rec.vid, **extra))
        if r.get("VersionId") != rec.vid or bool(r.get("DeleteMarker")) != (rec.value is MARKER):
            self.ctx.fail("a DELETE by versionId answered another version", vk.ident(), expected=rec,
                          found=(r.get("VersionId"), r.get("DeleteMarker")))
        vk.versions.remove(rec)
        vk.deleting.discard(rec.vid)
        vk.gone.add(rec.vid)
        vk.gone_now.add(rec.vid)
        self.acked += 1
        self.vstats["version_deletes_acked"] += 1

    def v_delete_objects(self):
        """DeleteObjects in the versioned bucket: per key either a version
        ID (that version goes) or none (a delete marker)."""
        keys = [vk for vk in self.vkeys if not vk.locked]
        keys = self.rng.sample(keys, self.rng.randint(1, len(keys)))
        asked = []
        for vk in keys:
            if vk.versions and self.rng.random() < 0.6:
                rec = self.rng.choice(vk.versions)
                vk.deleting.add(rec.vid)
                asked.append((vk, rec))
            else:
                vk.pending = MARKER
                asked.append((vk, None))
        objects = [{"Key": vk.key, **({"VersionId": rec.vid} if rec else {})} for vk, rec in asked]
        r = self.vcall("DeleteObjects with version IDs", keys[0], lambda: self.client.delete_objects(
            Bucket=keys[0].bucket, Delete={"Objects": objects}))
        if r.get("Errors") or len(r.get("Deleted", [])) != len(asked):
            self.ctx.fail("DeleteObjects did not delete every entry", [vk.ident() for vk in keys],
                          expected=objects, found=r)
        answered = {d["Key"]: d for d in r["Deleted"]}
        for vk, rec in asked:
            d = answered.get(vk.key, {})
            if rec is None:
                if d.get("DeleteMarker") is not True:
                    self.ctx.fail("DeleteObjects without a version ID wrote no delete marker", vk.ident(),
                                  expected="DeleteMarker", found=d)
                self.v_created(vk, {"VersionId": d.get("DeleteMarkerVersionId")}, MARKER, None,
                               "DeleteObjects (marker)")
            else:
                if d.get("VersionId") != rec.vid or bool(d.get("DeleteMarker")) != (rec.value is MARKER):
                    self.ctx.fail("DeleteObjects answered another version", vk.ident(), expected=rec, found=d)
                vk.versions.remove(rec)
                vk.deleting.discard(rec.vid)
                vk.gone.add(rec.vid)
                vk.gone_now.add(rec.vid)
                self.acked += 1
                self.vstats["version_deletes_acked"] += 1

    def v_copy(self):
        sources = [(vk, rec) for vk in self.vkeys for rec in vk.versions if rec.value is not MARKER]
        if not sources:
            return self.v_put()
        svk, rec = self.rng.choice(sources)
        dvk = self.rng.choice(self.vkeys)
        dvk.pending = rec.value
        r = self.vcall("a CopyObject of a version", dvk, lambda: self.client.copy_object(
            Bucket=dvk.bucket, Key=dvk.key, CopySource={"Bucket": svk.bucket, "Key": svk.key, "VersionId": rec.vid}))
        if r.get("CopySourceVersionId") != rec.vid:
            self.ctx.fail("a CopyObject answered another source version", dvk.ident(), expected=rec.vid,
                          found=r.get("CopySourceVersionId"))
        self.v_created(dvk, r, rec.value, r["CopyObjectResult"]["ETag"], "copy")

    def v_multipart(self):
        vk = self.rng.choice(self.vkeys)
        u = Upload(vk.bucket, vk.ident())
        self.eng.vuploads.append(u)
        r = self.vcall("CreateMultipartUpload", vk, lambda: self.client.create_multipart_upload(
            Bucket=vk.bucket, Key=vk.key))
        u.id = r["UploadId"]
        parts = [self.body(5 * MIB + self.rng.randint(0, 1000))] if self.rng.random() < 0.1 else []
        parts.append(self.body(self.rng.randint(1, 100 << 10)))
        for n, data in enumerate(parts, 1):
            r = self.vcall("UploadPart", vk, lambda n=n, data=data: self.client.upload_part(
                Bucket=vk.bucket, Key=vk.key, UploadId=u.id, PartNumber=n, Body=data))
            u.parts[n] = (strip_etag(r["ETag"]), len(data))
        whole = b"".join(parts)
        value = Value(hashlib.sha256(whole).hexdigest(), len(whole), multipart_etag(parts))
        vk.pending = value
        u.completion = "in flight"
        r = self.vcall("a multipart completion", vk, lambda: self.client.complete_multipart_upload(
            Bucket=vk.bucket, Key=vk.key, UploadId=u.id,
            MultipartUpload={"Parts": [{"PartNumber": n, "ETag": f'"{e}"'} for n, (e, _) in u.parts.items()]}))
        u.completion = "acked"
        self.v_created(vk, r, value, r["ETag"], "multipart completion")

    def v_hold(self):
        recs = [(vk, rec) for vk in self.vkeys if vk.locked for rec in vk.versions if rec.value is not MARKER]
        if not recs:
            return self.v_put()
        vk, rec = self.rng.choice(recs)
        on = not rec.hold
        rec.hold = None
        self.vcall("PutObjectLegalHold", vk, lambda: self.client.put_object_legal_hold(
            Bucket=vk.bucket, Key=vk.key, VersionId=rec.vid, LegalHold={"Status": "ON" if on else "OFF"}))
        rec.hold = on
        self.vstats["legal_holds_set" if on else "legal_holds_released"] += 1

    def v_read(self):
        recs = [(vk, rec) for vk in self.vkeys for rec in vk.versions if rec.value is not MARKER]
        if not recs:
            return
        vk, rec = self.rng.choice(recs)
        try:
            r = self.client.get_object(Bucket=vk.bucket, Key=vk.key, VersionId=rec.vid)
            data = r["Body"].read()
        except Exception as e:
            raise Stop(repr(e)) from e
        if value_of(data, etag=None) != Value(rec.value.sha, rec.value.size) or r.get("VersionId") != rec.vid:
            self.ctx.fail("a version read while running disagrees with its acknowledged bytes", vk.ident(),
                          expected=rec, found=(r.get("VersionId"), value_of(data, etag=None)))


class VersionChecks:
    """The engine's checks of the versioned buckets after a restart."""

    def list_versions(self, c, bucket):
        """Every version and delete marker of `bucket` in the order the
        wire gives them (ListObjectVersions, paged by key and version-id
        markers): [(key, vid, marker, latest, size, etag)]."""
        raw = []

        def grab(http_response, **_):
            raw.append(http_response.content)

        c.meta.events.register("after-call.s3.ListObjectVersions", grab)
        out, kw, pages = [], {"Bucket": bucket, "MaxKeys": 6}, 0
        try:
            while True:
                r = c.list_object_versions(**kw)
                pages += 1
                page = []
                for el in ET.fromstring(raw[-1]):
                    tag = el.tag.rsplit("}", 1)[-1]
                    if tag not in ("Version", "DeleteMarker"):
                        continue
                    f = {ch.tag.rsplit("}", 1)[-1]: ch.text for ch in el}
                    page.append((f["Key"], f["VersionId"], tag == "DeleteMarker", f["IsLatest"] == "true",
                                 int(f.get("Size") or 0), strip_etag(f.get("ETag"))))
                n = len(r.get("Versions", [])) + len(r.get("DeleteMarkers", []))
                self.ctx.check(len(page) == n, "ListObjectVersions: the wire and boto3 disagree", key=bucket,
                               expected=n, found=page)
                out += page
                if not r.get("IsTruncated"):
                    break
                kw["KeyMarker"] = r["NextKeyMarker"]
                if r.get("NextVersionIdMarker"):
                    kw["VersionIdMarker"] = r["NextVersionIdMarker"]
                else:
                    kw.pop("VersionIdMarker", None)
                self.ctx.check(pages < 1000, "ListObjectVersions pages without end", key=bucket,
                               expected="an end", found=kw)
        finally:
            c.meta.events.unregister("after-call.s3.ListObjectVersions", grab)
        seen = set()
        for e in out:
            self.ctx.check((e[0], e[1]) not in seen, "ListObjectVersions lists a version twice (paging)",
                           key=(bucket, e[0]), expected="once", found=e[1])
            seen.add((e[0], e[1]))
        self.ctx.stats["version_list_pages"] += pages
        return out

    def read_version(self, c, vk, vid):
        """GET by versionId: (Value of the bytes, answered version ID), or
        the S3 error code."""
        try:
            r = c.get_object(Bucket=vk.bucket, Key=vk.key, VersionId=vid)
            data = r["Body"].read()
        except ClientError as e:
            return e.response["Error"]["Code"], None
        if len(data) != r["ContentLength"]:
            self.ctx.fail("GET by versionId returned fewer bytes than its Content-Length", vk.ident(),
                          expected=r["ContentLength"], found=len(data))
        return Value(hashlib.sha256(data).hexdigest(), len(data), strip_etag(r["ETag"])), r.get("VersionId")

    def verify_versions(self, c):
        ctx = self.ctx
        self.vclient = c
        keys = {vk.ident(): vk for ks in self.vkeys.values() for vk in ks}
        nbytes = nobjects = 0
        for bucket in (VBUCKET, LBUCKET):
            listed = {}
            for key, vid, marker, latest, size, etag in self.list_versions(c, bucket):
                ctx.check((bucket, key) in keys, "ListObjectVersions lists a key nobody wrote", key=(bucket, key),
                          expected=None, found=vid)
                listed.setdefault((bucket, key), []).append((vid, marker, latest, size, etag))
                if not marker:
                    nbytes += size
                    nobjects += 1
            # The lock checks that cost requests (retention, a refused
            # DELETE) on one key of the lock bucket per cycle.
            probes = sorted(k for k, es in listed.items() if any(not e[1] for e in es))
            self.lock_probe = ctx.rng("lock-probe").choice(probes) if probes else None
            for ident, vk in keys.items():
                if ident[0] == bucket:
                    self.verify_key(c, vk, listed.get(ident, []))
        # Open uploads in versioned buckets: only ones whose completion was
        # never answered; their parts count in the usage.
        known = {u.id: u for u in self.vuploads if u.id}
        unknown_creations = {u.key for u in self.vuploads if not u.id}
        self.vopen = []
        for bucket in (VBUCKET, LBUCKET):
            for page in c.get_paginator("list_multipart_uploads").paginate(Bucket=bucket):
                for up in page.get("Uploads", []):
                    uid, ident = up["UploadId"], (bucket, up["Key"])
                    u = known.get(uid)
                    if u is None:
                        ctx.check(ident in unknown_creations, "an upload nobody created is open (versioned bucket)",
                                  key=ident, expected="none", found=uid)
                    else:
                        ctx.check(u.completion != "acked", "an acknowledged completion left its upload open",
                                  key=ident, expected="upload gone", found=uid)
                    parts = {}
                    for pp in c.get_paginator("list_parts").paginate(Bucket=bucket, Key=up["Key"], UploadId=uid):
                        for p in pp.get("Parts", []):
                            parts[p["PartNumber"]] = (strip_etag(p["ETag"]), p["Size"])
                    if u is not None:
                        for n, got in parts.items():
                            ok = n in u.parts and u.parts[n] == got or n not in u.parts
                            ctx.check(ok, "an acknowledged part changed (versioned bucket)", key=(ident, uid, n),
                                      expected=u.parts.get(n), found=got)
                        for n, want in u.parts.items():
                            ctx.check(parts.get(n) == want, "an acknowledged part is lost (versioned bucket)",
                                      key=(ident, uid, n), expected=want, found=parts.get(n))
                    nbytes += sum(s for _, s in parts.values())
                    self.vopen.append((bucket, up["Key"], uid))
        self.vuploads = []
        return nbytes, nobjects

    def verify_key(self, c, vk, listed):
        """One key's versions (listed newest first) against the model, then
        the model rebased on what is there."""
        ctx, ident = self.ctx, vk.ident()
        st = ctx.stats
        model = {v.vid: v for v in vk.versions}
        vids = [e[0] for e in listed]
        for rec in vk.versions:
            if rec.vid not in vids and rec.vid not in vk.deleting:
                st["failures"] += 1
                ctx.fail("an acknowledged version is lost", ident, expected=rec, found=listed)
        for vid in vids:
            ctx.check(vid not in vk.gone, "a version whose deletion was acknowledged is back", ident,
                      expected="deleted", found=vid)
        for vid in sorted(vk.gone_now):
            got, _ = self.read_version(c, vk, vid)
            ctx.check(got == "NoSuchVersion", "a version whose deletion was acknowledged still reads by versionId",
                      ident, expected="NoSuchVersion", found=(vid, got))
        vk.gone_now = set()
        strangers = [e for e in listed if e[0] not in model]
        if strangers:
            ctx.check(vk.pending is not None and len(strangers) == 1,
                      "a version nobody wrote (an unacknowledged write half there?)", ident,
                      expected=f"the model's {vk.versions} and at most the write in flight ({vk.pending!r})",
                      found=listed)
            st["version_in_flight_found_applied"] += 1
        elif vk.pending is not None:
            st["version_in_flight_found_absent"] += 1
        # Newest first: the write in flight if it happened, then the model's
        # versions still there. The wire lists a page's versions before its
        # delete markers (s3s keeps them in two lists; AWS interleaves), so
        # the order is checked within each kind.
        expected = [e[0] for e in strangers] + [v.vid for v in reversed(vk.versions) if v.vid in vids]
        kind = {e[0]: e[1] for e in listed}
        for is_marker in (False, True):
            got = [e[0] for e in listed if e[1] == is_marker]
            want = [vid for vid in expected if kind[vid] == is_marker]
            ctx.check(got == want, "versions listed out of order", ident, expected=want, found=got)
        latest = [e[0] for e in listed if e[2]]
        ctx.check(latest == expected[:1], "IsLatest is not on the newest version only", ident,
                  expected=expected[:1], found=listed)
        listed = sorted(listed, key=lambda e: expected.index(e[0]))
        rebased = []
        for vid, marker, _, size, etag in reversed(listed):
            rec = model.get(vid)
            want = rec.value if rec is not None else vk.pending
            ctx.check(marker == (want is MARKER), "a version listed as marker/object against the model", ident,
                      expected=want, found=(vid, "marker" if marker else "object"))
            got, answered = self.read_version(c, vk, vid)
            if marker:
                ctx.check(got == "MethodNotAllowed", "GET of a delete marker's version is not 405", ident,
                          expected="MethodNotAllowed", found=(vid, got))
            else:
                ctx.check((size, etag) == (want.size, want.etag), "a listed version's size or ETag is wrong",
                          ident, expected=want, found=(vid, size, etag))
                if got != want or answered != vid:
                    st["failures"] += 1
                    ctx.fail("a version does not read back whole by versionId" if isinstance(got, Value)
                             else "a listed version cannot be read by versionId", ident,
                             expected=(vid, want), found=(answered, got))
                st["versions_verified"] += 1
            rebased.append(VRec(vid, want, rec.hold if rec is not None else None))
        # A plain GET reads the newest version, or is 404 under a delete marker.
        newest = rebased[-1].value if rebased else MARKER
        f = self.fetch(c, ident)
        want = ABSENT if newest is MARKER else newest
        ctx.check(f.value == want, "a plain GET does not read the newest version", ident, expected=want, found=f.value)
        if vk.locked:
            for rec in rebased:
                if rec.value is MARKER:
                    continue
                if rec.hold is None or ident == self.lock_probe:
                    try:
                        on = c.get_object_legal_hold(Bucket=vk.bucket, Key=vk.key,
                                                     VersionId=rec.vid)["LegalHold"]["Status"]
                    except ClientError as e:  # never set: as AWS, no configuration
                        if e.response["Error"]["Code"] != "NoSuchObjectLockConfiguration":
                            raise
                        on = "OFF"
                    ctx.check(rec.hold is None or rec.hold == (on == "ON"), "a legal hold changed by itself", ident,
                              expected=rec.hold, found=(rec.vid, on))
                    rec.hold = on == "ON"
            objs = [rec for rec in rebased if rec.value is not MARKER]
            if objs and ident == self.lock_probe:
                rec = objs[-1]
                ret = c.get_object_retention(Bucket=vk.bucket, Key=vk.key, VersionId=rec.vid)["Retention"]
                ctx.check(ret["Mode"] == "GOVERNANCE" and ret["RetainUntilDate"] > datetime.now(UTC),
                          "a version in the lock bucket lacks its default retention", ident,
                          expected="GOVERNANCE, in the future", found=(rec.vid, ret))
                try:
                    c.delete_object(Bucket=vk.bucket, Key=vk.key, VersionId=rec.vid)
                    refused = None
                except ClientError as e:
                    refused = e.response["Error"]["Code"]
                if refused != "AccessDenied":
                    st["failures"] += 1
                    ctx.fail("a locked version's DELETE by versionId without the bypass was not refused", ident,
                             expected="AccessDenied", found=(rec.vid, refused or "deleted"))
                got, answered = self.read_version(c, vk, rec.vid)
                ctx.check(got == rec.value, "a locked version is gone after a refused DELETE", ident,
                          expected=rec, found=got)
                st["locked_deletes_refused_after_restart"] += 1
        vk.versions, vk.deleting, vk.pending = rebased, set(), None

    def after_restart(self, found):
        """Not under the kill: open uploads in the versioned buckets are
        aborted, and keys with many versions trimmed (oldest first; a
        locked version released from its hold and deleted with the
        governance bypass)."""
        c = self.vclient
        for bucket, key, uid in self.vopen:
            c.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=uid)
        self.vopen = []
        for ks in self.vkeys.values():
            for vk in ks:
                while len(vk.versions) > MAX_VERSIONS:
                    rec = vk.versions[0]
                    extra = {}
                    if vk.locked and rec.value is not MARKER:
                        if rec.hold:
                            c.put_object_legal_hold(Bucket=vk.bucket, Key=vk.key, VersionId=rec.vid,
                                                    LegalHold={"Status": "OFF"})
                        extra = {"BypassGovernanceRetention": True}
                    c.delete_object(Bucket=vk.bucket, Key=vk.key, VersionId=rec.vid, **extra)
                    vk.versions.pop(0)
                    vk.gone.add(rec.vid)
                    self.ctx.stats["versions_trimmed"] += 1
