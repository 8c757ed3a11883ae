"""Engine `s3`: `stow-s3 serve` under concurrent boto3 load — PUTs small
(inline, the detached path) and large, streamed PUTs (a presigned URL, the
body sent slowly so the kill can land inside it), multipart uploads and
completions, CopyObject, DeleteObject and DeleteObjects, reads checked
while running — killed with SIGKILL at a random moment (sometimes inside a
streamed body, sometimes during the restart's recovery), then checked:
`stow-s3 check`, every key against the model (bytes and ETag), the
listing, the open uploads and their acknowledged parts, the usage.

Versioning and object lock (issue 29, engine `s3` only): a versioned
bucket and an object-lock bucket (default retention GOVERNANCE, 1 day;
some versions with a legal hold) take new versions (PUT, CopyObject of a
version, multipart completion), delete markers, deletions by version ID
(in the lock bucket with or without the governance bypass: a locked
version's must be refused) and legal hold changes. The model keeps every
acknowledged version (ID, bytes or marker) and every acknowledged
deletion; a write in flight at the kill may or may not be there. After
the restart ListObjectVersions (paged, wire order) and GET by versionId
must show every acknowledged version whole, no deleted one, nothing
unacknowledged except the in-flight write (whole, newest), IsLatest on the
newest only; a locked version's DELETE by versionId without the bypass is
refused (AccessDenied) and it stays; every stored version counts in the
usage. That half lives in `engine_s3_versions`."""

from __future__ import annotations

import hashlib
import http.client
import subprocess
import threading
import time
import urllib.parse
from collections import Counter

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from engine_s3_versions import (
    LBUCKET,
    VBUCKET,
    VersionChecks,
    VersionedLoad,
    VKey,
)
from soakkit import (
    ABSENT,
    MIB,
    History,
    Stop,
    Upload,
    Value,
    check_store,
    clean_env,
    judge,
    kill_delay,
    multipart_etag,
    sigkill,
    spawn_ready,
    strip_etag,
    value_of,
)

BUCKETS = ("soak-a", "soak-b")
ACCESS, SECRET = "AKIDSOAKS3KILL9TEST", "soak-s3-secret-kill-9-recover"


class Worker(VersionedLoad, threading.Thread):
    WEIGHTS = {
        "put_small": 30, "put_large": 12, "put_stream": 6, "multipart": 3, "copy": 10,
        "delete": 7, "delete_objects": 7, "shared_put": 10, "shared_delete": 3, "read": 8,
    }
    # Versioned buckets (only when the engine has some): about a fifth of the load.
    V_WEIGHTS = {
        "v_put": 10, "v_delete": 4, "v_delete_version": 5, "v_delete_objects": 2, "v_copy": 4, "v_multipart": 1,
        "v_hold": 2, "v_read": 2,
    }

    def __init__(self, eng: S3Engine, n: int, first=None):
        super().__init__(daemon=True, name=f"s3-worker-{n}")
        self.eng, self.n, self.first = eng, n, first
        self.ctx = eng.ctx
        self.rng = eng.ctx.rng("worker", n)
        self.client = eng.client()
        self.own = eng.own_keys(n)
        self.shared = eng.shared_keys()
        self.mine = {k: eng.state.get(k, ABSENT) for k in self.own}
        self.mine_ctype = {k: eng.ctypes.get(k) for k in self.own}
        self.vkeys: list[VKey] = eng.vkeys_of(n)
        self.vstats = Counter()
        self.error = None
        self.i = 0
        self.acked = 0

    def body(self, size):
        self.i += 1
        head = f"c{self.ctx.cycle}/t{self.n}/{self.i}|".encode()
        return head + self.rng.randbytes(max(0, size - len(head)))

    # ---------------------------------------------------------------- plumbing

    def call(self, key, op, fn):
        try:
            return fn()
        except ClientError as e:
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if 400 <= status < 500 and op is not None:
                self.eng.history.refused(key, op)
                return None
            raise Stop(f"{status} {e}") from e
        except Exception as e:  # connection reset, refused, read timeout: the kill
            raise Stop(repr(e)) from e

    def acked_write(self, key, op, etag, kind):
        if op.value is not ABSENT and strip_etag(etag) != op.value.etag:
            self.eng.ctx.fail(f"{kind} answered a wrong ETag", key, expected=op.value.etag, found=etag)
        self.eng.history.ack(op)
        self.acked += 1
        if key in self.mine:
            self.mine[key] = op.value
            self.mine_ctype[key] = getattr(op, "ctype", None)

    def run(self):
        try:
            if self.first:
                getattr(self, self.first[0])(**self.first[1])
            table = {**self.WEIGHTS, **(self.V_WEIGHTS if self.vkeys else {})}
            ops, weights = zip(*table.items(), strict=False)
            while not self.eng.stopping.is_set():
                getattr(self, self.rng.choices(ops, weights)[0])()
        except Stop:
            pass
        except BaseException as e:  # a failure found while running
            self.error = e

    # ---------------------------------------------------------------- operations

    def put(self, key, data, kind):
        bucket, k = key
        ctype = self.rng.choice([None, None, "text/plain", "application/json"])
        op = self.eng.history.begin(key, value_of(data), kind)
        op.ctype = ctype or "application/octet-stream"
        extra = {"ContentType": ctype} if ctype else {}
        r = self.call(key, op, lambda: self.client.put_object(Bucket=bucket, Key=k, Body=data, **extra))
        if r is not None:
            self.acked_write(key, op, r["ETag"], kind)

    def put_small(self):
        self.put(self.rng.choice(self.own), self.body(self.rng.choice([0, 40, self.rng.randint(1, 32 << 10)])),
                 "put")

    def put_large(self):
        self.put(self.rng.choice(self.own), self.body(self.rng.randint(33 << 10, 600 << 10)), "put")

    def put_stream(self, size=None, signal_at=None):
        """A streamed PUT: presigned (UNSIGNED-PAYLOAD), the body sent in
        64 KiB pieces with pauses; `signal_at` (a fraction) tells the main
        thread when that much of the body is on the wire."""
        key = self.rng.choice(self.own)
        bucket, k = key
        data = self.body(size or self.rng.randint(256 << 10, 3 * MIB))
        url = urllib.parse.urlsplit(self.client.generate_presigned_url(
            "put_object", Params={"Bucket": bucket, "Key": k}, ExpiresIn=3600))
        op = self.eng.history.begin(key, value_of(data), "streamed put")
        op.ctype = None
        try:
            conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
            conn.putrequest("PUT", f"{url.path}?{url.query}", skip_accept_encoding=True)
            conn.putheader("Content-Length", str(len(data)))
            conn.endheaders()
            step = 64 << 10
            for off in range(0, len(data), step):
                conn.send(data[off:off + step])
                if signal_at is not None and off + step >= signal_at * len(data):
                    self.eng.mid_body.set()
                    signal_at = None
                time.sleep(0.001)
            resp = conn.getresponse()
            resp.read()
            status, etag = resp.status, resp.getheader("ETag")
            conn.close()
        except Exception as e:
            raise Stop(repr(e)) from e
        if 400 <= status < 500:
            self.eng.history.refused(key, op)
            return
        if status != 200:
            raise Stop(f"streamed put answered {status}")
        self.acked_write(key, op, etag, "streamed put")

    def multipart(self):
        key = self.rng.choice(self.own)
        bucket, k = key
        u = Upload(bucket, key)
        self.eng.uploads.append(u)
        self.eng.creating.add(key)
        r = self.call(key, None, lambda: self.client.create_multipart_upload(Bucket=bucket, Key=k))
        u.id = r["UploadId"]
        nparts = self.rng.choice([2, 2, 3])
        parts = [self.body(5 * MIB + self.rng.randint(0, 1000)) for _ in range(nparts - 1)]
        parts.append(self.body(self.rng.randint(1, 200 << 10)))
        for n, data in enumerate(parts, 1):
            u.in_flight = (n, hashlib.md5(data).hexdigest(), len(data))
            r = self.call(key, None, lambda n=n, data=data: self.client.upload_part(
                Bucket=bucket, Key=k, UploadId=u.id, PartNumber=n, Body=data))
            if strip_etag(r["ETag"]) != hashlib.md5(data).hexdigest():
                self.ctx.fail("UploadPart answered a wrong ETag", key, expected=hashlib.md5(data).hexdigest(),
                              found=r["ETag"])
            u.parts[n] = (strip_etag(r["ETag"]), len(data))
            u.in_flight = None
        if self.rng.random() < 0.25:
            return  # left open: the check finds it with its parts, then aborts it
        whole = b"".join(parts)
        value = Value(hashlib.sha256(whole).hexdigest(), len(whole), multipart_etag(parts))
        op = self.eng.history.begin(key, value, "multipart completion")
        op.ctype = "application/octet-stream"
        u.completion = "in flight"
        r = self.call(key, op, lambda: self.client.complete_multipart_upload(
            Bucket=bucket, Key=k, UploadId=u.id,
            MultipartUpload={"Parts": [{"PartNumber": n, "ETag": f'"{e}"'} for n, (e, _) in u.parts.items()]}))
        if r is None:
            self.ctx.fail("a valid multipart completion was refused", key, expected="completed", found="4xx")
        u.completion = "acked"
        self.acked_write(key, op, r["ETag"], "multipart completion")

    def copy(self):
        sources = [k for k in self.own if self.mine[k] is not ABSENT]
        if not sources:
            return self.put_small()
        src = self.rng.choice(sources)
        dst = self.rng.choice([k for k in self.own if k != src])
        value = self.mine[src]
        op = self.eng.history.begin(dst, value, "copy")
        op.ctype = self.mine_ctype[src]
        r = self.call(dst, op, lambda: self.client.copy_object(
            Bucket=dst[0], Key=dst[1], CopySource={"Bucket": src[0], "Key": src[1]}))
        if r is not None:
            self.acked_write(dst, op, r["CopyObjectResult"]["ETag"], "copy")

    def delete(self):
        key = self.rng.choice(self.own)
        op = self.eng.history.begin(key, ABSENT, "delete")
        r = self.call(key, op, lambda: self.client.delete_object(Bucket=key[0], Key=key[1]))
        if r is not None:
            self.acked_write(key, op, None, "delete")

    def delete_objects(self):
        bucket = self.rng.choice(sorted({b for b, _ in self.own}))
        mine = [k for k in self.own if k[0] == bucket]
        keys = self.rng.sample(mine, min(len(mine), self.rng.randint(1, 3)))
        ops = [(key, self.eng.history.begin(key, ABSENT, "delete_objects")) for key in keys]
        try:
            r = self.client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for _, k in keys]})
        except Exception as e:
            raise Stop(repr(e)) from e
        if r.get("Errors"):
            self.ctx.fail("DeleteObjects reported errors", keys, expected="all deleted", found=r["Errors"])
        deleted = {d["Key"] for d in r.get("Deleted", [])}
        if deleted != {k for _, k in keys}:
            self.ctx.fail("DeleteObjects did not report every key", keys, expected=keys, found=deleted)
        for key, op in ops:
            self.acked_write(key, op, None, "delete_objects")

    def shared_put(self):
        key = self.rng.choice(self.shared)
        self.put(key, self.body(self.rng.choice([10, self.rng.randint(1, 100 << 10)])), "shared put")

    def shared_delete(self):
        key = self.rng.choice(self.shared)
        op = self.eng.history.begin(key, ABSENT, "shared delete")
        r = self.call(key, op, lambda: self.client.delete_object(Bucket=key[0], Key=key[1]))
        if r is not None:
            self.acked_write(key, op, None, "shared delete")

    def read(self):
        """While running, a key only this worker writes reads exactly as its
        last acknowledged write left it."""
        key = self.rng.choice(self.own)
        want = self.mine[key]
        found = self.eng.fetch(self.client, key, stop=True).value
        if found != want:
            self.ctx.fail("a read while running disagrees with the acknowledged state", key,
                          expected=want, found=found)


class Found:
    """What a GET found: the value (ABSENT on NoSuchKey), content type, and
    the MD5 of the bytes."""

    def __init__(self, value, ctype=None, md5=None):
        self.value, self.ctype, self.md5 = value, ctype, md5


class S3LoadEngine:
    """Concurrent S3 writers against a server that is killed each cycle; the
    server and the key layout come from the subclass."""

    THREADS = 4
    OPERATION_SPAN = 0.15
    # Whether a workspace view's file properties (content type, a
    # multipart ETag) are checked after a restart: they are keyed to the
    # file's inode and ctime, which a real file system keeps across a crash
    # but the power-loss harness cannot (it rewrites a file it rebuilds).
    file_props_kept = True

    def __init__(self, ctx, bin_, workdir):
        self.ctx, self.bin, self.dir = ctx, bin_, workdir
        self.history = History()
        self.state = {}
        self.ctypes = {}
        self.uploads: list[Upload] = []
        self.creating = set()
        self.vkeys: dict[int, list[VKey]] = {}  # worker -> its keys in versioned buckets
        self.vuploads: list[Upload] = []
        self.stopping = threading.Event()
        self.mid_body = threading.Event()
        self.proc = None

    # hooks --------------------------------------------------------------

    def args(self):
        raise NotImplementedError

    def buckets(self):
        raise NotImplementedError

    def own_keys(self, n):
        raise NotImplementedError

    def shared_keys(self):
        raise NotImplementedError

    def after_kill(self, rng):
        """Checks while the server is down; returns the store's usage."""
        raise NotImplementedError

    def after_restart(self, found):
        pass

    def vkeys_of(self, n) -> list[VKey]:
        """Worker n's keys in versioned buckets (none unless the engine has some)."""
        return self.vkeys.get(n, [])

    def verify_versions(self, c) -> tuple[int, int]:
        """Checks the versioned buckets after a restart; returns the bytes
        and objects they hold (every stored version, open uploads' parts)."""
        return 0, 0

    def usage_of(self, present: dict, part_bytes: int):
        return {"bytes": sum(v.size for v in present.values()) + part_bytes, "objects": len(present)}

    def during_load(self, rng):
        """Something else to run (and kill) beside the S3 load."""
        return None

    def after_load(self, extra):
        pass

    # server -------------------------------------------------------------

    def start(self):
        try:
            self.proc, ready = spawn_ready(self.args(), env=clean_env())
        except TimeoutError as e:
            self.ctx.fail("hang on restart: the server is not ready", key=str(self.dir),
                          expected="ready within 30 s", found=str(e))
        self.ready = ready
        self.endpoint = ready["endpoint"]

    def client(self):
        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS,
                            aws_secret_access_key=SECRET, region_name="us-east-1",
                            config=Config(signature_version="s3v4", s3={"addressing_style": "path"},
                                          retries={"total_max_attempts": 1, "mode": "standard"},
                                          connect_timeout=5, read_timeout=30, max_pool_connections=4))

    def fetch(self, client, key, stop=False) -> Found:
        try:
            r = client.get_object(Bucket=key[0], Key=key[1])
            data = r["Body"].read()
        except ClientError as e:
            if e.response["Error"]["Code"] == "NoSuchKey":
                return Found(ABSENT)
            if stop:
                raise Stop(repr(e)) from e
            raise
        except Exception as e:
            if stop:
                raise Stop(repr(e)) from e
            raise
        if len(data) != r["ContentLength"]:
            self.ctx.fail("GET returned fewer bytes than its Content-Length", key, expected=r["ContentLength"],
                          found=len(data))
        return Found(Value(hashlib.sha256(data).hexdigest(), len(data), strip_etag(r["ETag"])),
                     r.get("ContentType"), hashlib.md5(data).hexdigest())

    # cycle --------------------------------------------------------------

    def cycle(self):
        ctx, rng = self.ctx, self.ctx.rng("main")
        self.stopping.clear()
        self.mid_body.clear()
        mid_stream = rng.random() < 0.15
        first = {0: ("put_stream", {"size": rng.randint(2 * MIB, 4 * MIB), "signal_at": rng.uniform(0.05, 0.95)})} \
            if mid_stream else {}
        workers = [Worker(self, n, first.get(n)) for n in range(self.THREADS)]
        for w in workers:
            w.start()
        extra = self.during_load(rng)
        if mid_stream:
            if not self.mid_body.wait(20):
                ctx.fail("a streamed body never got going", expected="part of the body sent", found="nothing")
            time.sleep(rng.uniform(0, 0.005))
            ctx.stats["kills_mid_stream"] += 1
        else:
            time.sleep(kill_delay(rng, self.OPERATION_SPAN))
        sigkill(self.proc)
        if extra is not None:
            extra.kill()
        self.stopping.set()
        ctx.stats["kills"] += 1
        for w in workers:
            w.join(60)
            if w.is_alive():
                ctx.fail("a client did not return after the server was killed", key=w.name,
                         expected="connection error", found="still waiting after 60 s")
            if w.error:
                raise w.error
            ctx.stats["acked_writes"] += w.acked
            ctx.stats.update(w.vstats)
        in_flight = [op for k in self.history.keys() for op in self.history.ops[k] if not op.acked]
        ctx.stats["in_flight_at_kill"] += len(in_flight)
        if extra is not None:
            self.after_load(extra.finish())

        usage = self.after_kill(rng)
        if rng.random() < 0.1:  # a kill during the restart's recovery
            p = subprocess.Popen(self.args(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=clean_env())
            time.sleep(rng.uniform(0, 0.03))
            sigkill(p)
            ctx.stats["kills_during_recovery"] += 1
            usage = self.after_kill(rng)
        self.start()
        self.verify(usage)

    def verify(self, usage):
        ctx, c = self.ctx, self.client()
        found = {}
        for key in self.history.keys():
            f = self.fetch(c, key)
            op = judge(ctx, self.history, key, f.value, file_md5=f.md5 if self.is_file(key) else None)
            if not op.acked:
                ctx.stats["in_flight_found_applied"] += 1
            elif op.kind != "verified":
                ctx.stats["acked_verified"] += 1
            if op.acked and f.value is not ABSENT and getattr(op, "ctype", None):
                if self.is_file(key) and not self.file_props_kept:
                    ctx.stats["file_ctype_unchecked"] += 1
                else:
                    ctx.check(f.ctype == op.ctype, "an acknowledged write lost its content type", key,
                              expected=op.ctype, found=f.ctype)
            found[key] = f
        values = {k: f.value for k, f in found.items()}
        present = {k: v for k, v in values.items() if v is not ABSENT}
        for b in self.buckets():
            listed = {}
            for page in c.get_paginator("list_objects_v2").paginate(Bucket=b):
                for o in page.get("Contents", []):
                    listed[(b, o["Key"])] = (o["Size"], strip_etag(o["ETag"]))
            want = {k: (v.size, v.etag) for k, v in present.items() if k[0] == b}
            if listed != want:
                extra = {k: v for k, v in listed.items() if k not in want}
                ctx.fail("the listing disagrees with the objects (an unacknowledged object half there?)",
                         key=b, expected=want, found=f"{listed}; not in the model: {extra}")
        # Open uploads: acknowledged parts are there; a completed upload is gone.
        open_uploads = {}
        for b in self.buckets():
            for page in c.get_paginator("list_multipart_uploads").paginate(Bucket=b):
                for u in page.get("Uploads", []):
                    open_uploads[u["UploadId"]] = (b, u["Key"])
        part_bytes = 0
        parts_of = {}
        for uid, (b, k) in open_uploads.items():
            parts = {}
            for page in c.get_paginator("list_parts").paginate(Bucket=b, Key=k, UploadId=uid):
                for p in page.get("Parts", []):
                    parts[p["PartNumber"]] = (strip_etag(p["ETag"]), p["Size"])
            parts_of[uid] = parts
            part_bytes += sum(s for _, s in parts.values())
        known = {u.id for u in self.uploads if u.id}
        for u in self.uploads:
            if u.id is None:
                continue
            if u.completion == "acked":
                ctx.check(u.id not in open_uploads, "an acknowledged completion left its upload open",
                          key=u.key, expected="upload gone", found=u.id)
            elif u.id in open_uploads:
                for n, (etag, size) in u.parts.items():
                    got = parts_of[u.id].get(n)
                    ctx.check(got == (etag, size), "an acknowledged part is lost or changed",
                              key=(u.key, u.id, n), expected=(etag, size), found=got)
                for n, got in parts_of[u.id].items():
                    if n not in u.parts:
                        want = u.in_flight[1:] if u.in_flight and u.in_flight[0] == n else None
                        ctx.check(got == want, "an upload holds a part nobody sent whole (torn part?)",
                                  key=(u.key, u.id, n), expected=want, found=got)
            elif u.completion is None:
                ctx.fail("an open upload is lost", key=u.key, expected=f"upload {u.id} open", found="not listed")
        for uid, (b, k) in open_uploads.items():
            if uid not in known:
                ctx.check((b, k) in self.creating, "an upload nobody created is open", key=(b, k),
                          expected="none", found=uid)
                ctx.check(parts_of[uid] == {}, "an upload whose creation was never answered holds parts",
                          key=(b, k), expected={}, found=parts_of[uid])
        want_usage = self.usage_of(present, part_bytes)
        vbytes, vobjects = self.verify_versions(c)
        if vbytes or vobjects:
            want_usage["bytes"] += vbytes
            want_usage["objects"] += vobjects
        ctx.check({k: usage.get(k) for k in want_usage} == want_usage,
                  "usage counters differ from what is stored", key="usage", expected=want_usage, found=usage)
        self.after_restart(found)
        for uid, (b, k) in open_uploads.items():
            c.abort_multipart_upload(Bucket=b, Key=k, UploadId=uid)
        self.uploads, self.creating = [], set()
        for key, f in found.items():
            self.history.baseline(key, f.value)
            self.history.ops[key][0].ctype = f.ctype if f.value is not ABSENT else None
        self.state = values
        self.ctypes = {k: f.ctype for k, f in found.items()}

    def is_file(self, key):
        return False

    def teardown(self):
        if self.proc is not None:
            sigkill(self.proc)


class S3Engine(VersionChecks, S3LoadEngine):
    name = "s3"

    def __init__(self, ctx, bin_, workdir):
        super().__init__(ctx, bin_, workdir)
        self.data = workdir / "data"

    def args(self):
        return [self.bin, "serve", "--port", "0", "--data-dir", str(self.data), "--backend", "filesystem",
                "--access-key", ACCESS, "--secret-key", SECRET, "--max-concurrent-requests", "64"]

    def buckets(self):
        return BUCKETS

    def own_keys(self, n):
        return [(BUCKETS[0], f"t{n}/k{j}") for j in range(6)] + [(BUCKETS[1], f"t{n}/c{j}") for j in range(3)]

    def shared_keys(self):
        return [(BUCKETS[0], f"shared/s{j}") for j in range(3)]

    def setup(self):
        self.start()
        c = self.client()
        for b in BUCKETS:
            c.create_bucket(Bucket=b)
        c.create_bucket(Bucket=VBUCKET)
        c.put_bucket_versioning(Bucket=VBUCKET, VersioningConfiguration={"Status": "Enabled"})
        c.create_bucket(Bucket=LBUCKET, ObjectLockEnabledForBucket=True)
        c.put_object_lock_configuration(Bucket=LBUCKET, ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}})
        for b in (VBUCKET, LBUCKET):
            got = c.get_bucket_versioning(Bucket=b).get("Status")
            self.ctx.check(got == "Enabled", "a versioned bucket is not versioned", key=b, expected="Enabled",
                           found=got)
        self.vkeys = {n: [VKey(VBUCKET, f"t{n}/v{j}") for j in range(2)] + [VKey(LBUCKET, f"t{n}/l0")]
                      for n in range(self.THREADS)}

    def after_kill(self, rng):
        return check_store(self.ctx, self.bin, self.data)
