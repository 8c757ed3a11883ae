import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { openStow, withStow, parseReadyMessage, StowProtocolError, StowSessionClosedError } from "@chester-hill-solutions/stow-s3";

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function waitGone(pid, ms) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (!alive(pid)) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return !alive(pid);
}

test("openStow: endpoint answers, config shape, close idempotent, temp dir removed", async () => {
  const s = await openStow();
  assert.match(s.endpoint, /^http:\/\/127\.0\.0\.1:\d+$/);
  assert.equal(s.region, "us-east-1");
  assert.ok(s.accessKeyId.length > 0 && s.secretAccessKey.length > 0);
  assert.deepEqual(s.awsSdkV3Config(), {
    endpoint: s.endpoint,
    region: s.region,
    credentials: { accessKeyId: s.accessKeyId, secretAccessKey: s.secretAccessKey },
    forcePathStyle: true,
  });
  assert.equal(s.ready.protocolVersion, 1);
  assert.ok(existsSync(s.dataDir));
  const res = await fetch(`${s.endpoint}/_stow/health`);
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), { status: "ok" });
  // An unsigned S3 request is refused: the server checks signatures.
  const anon = await fetch(`${s.endpoint}/some-bucket`, { method: "PUT" });
  assert.equal(anon.status, 403);
  await Promise.all([s.close(), s.close()]);
  await s.close();
  assert.equal(alive(s.pid), false);
  assert.equal(existsSync(s.dataDir), false);
  assert.throws(() => s.awsSdkV3Config(), StowSessionClosedError);
});

test("the server's environment has no AWS_*, S3_* or STOW_* from ours", async (t) => {
  if (process.platform !== "linux") return t.skip("reads /proc");
  process.env.AWS_SECRET_ACCESS_KEY = "leak";
  process.env.S3_ENDPOINT = "leak";
  process.env.STOW_MODE = "run-through";
  try {
    await withStow(async (s) => {
      const vars = readFileSync(`/proc/${s.pid}/environ`, "utf8").split("\0").filter(Boolean);
      const names = vars.map((v) => v.slice(0, v.indexOf("=")));
      assert.deepEqual(names.filter((n) => /^(AWS_|S3_)/i.test(n)), []);
      // Only the two key variables the session sets itself.
      assert.deepEqual(names.filter((n) => /^STOW_/i.test(n)).sort(), ["STOW_LOCAL_ACCESS_KEY_ID", "STOW_LOCAL_SECRET_ACCESS_KEY"]);
      assert.equal(s.ready.mode, "local");
      assert.ok(!readFileSync(`/proc/${s.pid}/cmdline`, "utf8").includes(s.secretAccessKey), "secret not in argv");
    });
  } finally {
    delete process.env.AWS_SECRET_ACCESS_KEY;
    delete process.env.S3_ENDPOINT;
    delete process.env.STOW_MODE;
  }
});

test("withStow closes after success and returns the callback's value", async () => {
  let seen;
  const value = await withStow(async (s) => {
    seen = s;
    return 42;
  });
  assert.equal(value, 42);
  assert.equal(alive(seen.pid), false);
  assert.equal(existsSync(seen.dataDir), false);
});

test("withStow closes and rethrows the callback's error unchanged", async () => {
  const boom = new Error("boom");
  let seen;
  await assert.rejects(
    withStow(async (s) => {
      seen = s;
      throw boom;
    }),
    (e) => e === boom,
  );
  assert.equal(alive(seen.pid), false);
  assert.equal(existsSync(seen.dataDir), false);
  // A non-Error throw passes through as is too.
  await assert.rejects(withStow(() => Promise.reject("plain")), (e) => e === "plain");
});

test("a caller-given data dir is kept", async () => {
  const dir = mkdtempSync(join(tmpdir(), "stow-ts-keep-"));
  try {
    const s = await openStow({ dataDir: dir });
    assert.equal(s.dataDir, dir);
    assert.equal(s.ownsDataDir, false);
    await s.close();
    assert.ok(existsSync(dir));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("memory backend and quotas are passed through", async () => {
  await withStow(
    (s) => {
      assert.equal(s.ready.backend, "memory");
      assert.equal(s.ready.capabilities.persistent, false);
      assert.equal(s.ready.capabilities.maxBytes, 1024);
      assert.equal(s.ready.capabilities.maxObjects, 3);
    },
    { backend: "memory", maxBytes: 1024, maxObjects: 3 },
  );
  await assert.rejects(openStow({ maxBytes: -1 }), RangeError);
});

test("the server exits by itself when its parent is SIGKILLed", async () => {
  const fixture = fileURLToPath(new URL("./fixtures/parent.mjs", import.meta.url));
  const child = spawn(process.execPath, [fixture], { stdio: ["ignore", "pipe", "inherit"] });
  const info = await new Promise((resolve, reject) => {
    let buf = "";
    child.stdout.on("data", (c) => {
      buf += c;
      const nl = buf.indexOf("\n");
      if (nl !== -1) resolve(JSON.parse(buf.slice(0, nl)));
    });
    child.on("exit", (code) => reject(new Error(`fixture exited early (${code})`)));
  });
  assert.ok(alive(info.pid));
  assert.equal((await fetch(`${info.endpoint}/_stow/health`)).status, 200);
  const exited = new Promise((r) => child.once("exit", r));
  child.kill("SIGKILL");
  await exited;
  assert.ok(await waitGone(info.pid, 5000), `server ${info.pid} still running 5 s after its parent died`);
  // The parent could not clean up; the temp dir is left for the OS tmp cleaner.
  rmSync(info.dataDir, { recursive: true, force: true });
});

test("parseReadyMessage is strict", () => {
  const ok = {
    protocolVersion: 1, binaryVersion: "0.1.0", endpoint: "http://127.0.0.1:1", region: "us-east-1",
    accessKeyId: "a", secretAccessKey: "s", mode: "local", backend: "memory",
    capabilities: { persistent: false, multipart: true, upstream: false, conditionalWrites: true, presignedUrls: true, maxBytes: 0, maxObjects: 0, maxRequestBytes: 1 },
  };
  assert.equal(parseReadyMessage(JSON.stringify(ok)).endpoint, ok.endpoint);
  for (const bad of [
    { ...ok, protocolVersion: 2 },
    { ...ok, endpoint: "" },
    { ...ok, capabilities: { ...ok.capabilities, multipart: "yes" } },
    { ...ok, capabilities: { ...ok.capabilities, maxBytes: null } },
  ]) {
    assert.throws(() => parseReadyMessage(JSON.stringify(bad)), (e) => e instanceof StowProtocolError && e.code === "protocol_mismatch");
  }
  assert.throws(() => parseReadyMessage("STOW_READY endpoint=x"), StowProtocolError);
});
