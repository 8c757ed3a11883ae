// The strict consumer (test/consumer/shapes.ts: every helper in both call
// shapes, the session's bucket) compiled by tsc and run against the real binary.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { promisify } from "node:util";
import * as w from "@chester-hill-solutions/stow-s3/workspace";

const pkgDir = fileURLToPath(new URL("..", import.meta.url));
const consumerDir = join(pkgDir, "test", "consumer");
const outDir = join(consumerDir, ".out");

// The binary's default registry (listWorkspaces(), destroyWorkspace(id)) under a temp HOME.
const work = mkdtempSync(join(tmpdir(), "stow-ts-shapes-"));
process.env.HOME = join(work, "home");
process.env.XDG_CONFIG_HOME = join(work, "home", ".config");
test.after(() => {
  rmSync(work, { recursive: true, force: true });
  rmSync(outDir, { recursive: true, force: true });
});

let consumer;
test.before(async () => {
  // Emitted inside the package, so that its imports by name resolve to the package (self-reference).
  const tsc = createRequire(join(pkgDir, "package.json")).resolve("typescript/bin/tsc");
  rmSync(outDir, { recursive: true, force: true });
  await promisify(execFile)(process.execPath, [tsc, "-p", join(consumerDir, "tsconfig.json"), "--noEmit", "false", "--noEmitOnError"], {
    cwd: pkgDir,
  });
  consumer = await import(pathToFileURL(join(outDir, "shapes.js")).href);
});

const fresh = (name) => ({ work: mkdtempSync(join(work, `${name}-`)) });

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

test("openStow creates its bucket (default stow-session-<16 hex>, or opts.bucket) before returning", () => consumer.sessionBucket());

test("session.reset() empties the server and keeps session.bucket (typed); refused without allowReset", () => consumer.sessionReset());

test("withStow: the bucket exists in the callback; a throw closes the server and comes back unchanged", async () => {
  const seen = await consumer.withStowBucket();
  assert.equal(alive(seen.pid), false);
  assert.equal(existsSync(seen.dataDir), false);
});

test("every table helper in both call shapes", () => consumer.workspaceShapes(fresh("ws")));

test("every remote helper in both call shapes", () => consumer.remoteShapes(fresh("remote")));

test("a wrong call shape is a TypeError, never an ID of \"[object Object]\"", async () => {
  const cases = [
    () => w.checkpointWorkspace({ id: "ws_1" }, { registryDir: "r" }),
    () => w.checkpointWorkspace(42),
    () => w.serveWorkspace({ registryDir: "r" }),
    () => w.serveWorkspace(["ws_1"]),
    () => w.diffWorkspaces({ from: "cp_1" }),
    () => w.diffWorkspaces("cp_1", "cp_2", "reg", { team: "t" }),
    () => w.handoffWorkspace("ws_1", "not options"),
    () => w.destroyWorkspace(),
    () => w.pushWorkspaceCheckpoint({ checkpointId: "cp_1" }),
    () => w.collectWorkspaces(7),
  ];
  for (const call of cases) {
    // Refused before any process is started: no binary is needed.
    await assert.rejects(call(), (e) => e instanceof TypeError && !e.message.includes("[object Object]"), String(call));
  }
});
