// The workspace scenario of workspace.md §14 through the ./workspace helpers, against the real binary.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as w from "@chester-hill-solutions/stow-s3/workspace";
import { withStow } from "@chester-hill-solutions/stow-s3";

const work = mkdtempSync(join(tmpdir(), "stow-ts-ws-"));
const home = join(work, "home");
mkdirSync(home);
// "default" registry = the binary's default under an isolated HOME.
const env = { ...process.env, HOME: home, XDG_CONFIG_HOME: join(home, ".config") };
const regA = join(work, "a");
const A = { registryDir: regA, team: "platform", env };

test.after(() => rmSync(work, { recursive: true, force: true }));

async function refused(promise, code, text, group = "workspace") {
  const err = await promise.then(
    () => assert.fail("expected a refusal"),
    (e) => e,
  );
  assert.ok(err instanceof w.WorkspaceCommandError, `not a WorkspaceCommandError: ${err}`);
  assert.equal(err.exitCode, 1);
  if (code) assert.equal(err.code, code);
  if (text) assert.match(err.message + err.stderr, text);
  assert.ok(Array.isArray(err.command) && err.command[1] === group);
  return err;
}

test("workspace scenario (§14)", async (t) => {
  const src = join(work, "src");
  mkdirSync(join(src, "nested"), { recursive: true });
  writeFileSync(join(src, "seed.txt"), "seed");
  writeFileSync(join(src, "nested", "second.txt"), "second");
  const root = join(work, "task1");

  // 1. prepare
  const p = await w.prepareWorkspace(
    { version: 1, root, registry_dir: regA, team: "platform", inputs: [{ source: src, destination: "." }] },
    { env },
  );
  assert.match(p.workspace_id, /^ws_[0-9a-f]+$/);
  assert.equal(p.seeded_objects, 2);
  assert.equal(p.seeded_bytes, 10);
  assert.equal(p.team, "platform");
  assert.equal(p.root, root);
  assert.ok(p.registry_dir.startsWith(work));
  assert.equal(readFileSync(join(root, "nested", "second.txt"), "utf8"), "second");
  const ws = p.workspace_id;

  // 2. serve
  await t.test("serveWorkspace", async () => {
    const served = await w.serveWorkspace(ws, A);
    try {
      assert.equal(served.ready.version, 1);
      assert.equal(served.ready.workspace_id, ws);
      assert.equal(served.ready.root, root);
      assert.match(served.ready.endpoint, /^http:\/\/127\.0\.0\.1:\d+$/);
      assert.equal(served.ready.region, "us-east-1");
      assert.equal(served.ready.capabilities.persistent, true);
      assert.equal(served.ready.capabilities.upstream, false);
      const health = await fetch(`${served.ready.endpoint}/_stow/health`);
      assert.equal(health.status, 200);
      // The server claims the workspace.
      await refused(w.resumeWorkspace({ id: ws, ...A }), "in_use");
    } finally {
      await served.close();
      await served.close();
    }
    assert.equal(existsSync(join(root, "seed.txt")), true, "data kept after close");
  });

  // 3. checkpoints and diff
  const cp1 = await w.checkpointWorkspace(ws, A);
  assert.match(cp1.checkpoint_id, /^cp_/);
  assert.equal(cp1.files, 2);
  assert.equal(cp1.bytes, 10);
  writeFileSync(join(root, "notes.txt"), "twenty bytes of text");
  const cp2 = await w.checkpointWorkspace(ws, { ...A, parent: cp1.checkpoint_id });
  assert.equal(cp2.parent_checkpoint_id, cp1.checkpoint_id);
  assert.notEqual(cp2.checkpoint_id, cp1.checkpoint_id);
  assert.equal(cp2.files, 3);
  assert.equal(cp2.bytes, 30);
  const diff = await w.diffWorkspaces(cp1.checkpoint_id, cp2.checkpoint_id, A);
  assert.deepEqual(diff.changes.map((c) => [c.path, c.kind]), [["notes.txt", "added"]]);

  // 4. a second workspace; a delta across workspaces is refused
  const src2 = join(work, "src2");
  mkdirSync(src2);
  writeFileSync(join(src2, "only.txt"), "nine byte");
  const p2 = await w.prepareWorkspace(
    { version: 1, root: join(work, "task2"), registry_dir: regA, team: "platform", inputs: [{ source: src2, destination: "." }] },
    { env },
  );
  assert.notEqual(p2.workspace_id, ws);
  assert.equal(p2.seeded_objects, 1);
  const ws2cp = await w.checkpointWorkspace(p2.workspace_id, A);
  assert.equal(ws2cp.files, 1);
  assert.equal(ws2cp.bytes, 9);
  await refused(
    w.createWorkspaceDelta({ ...A, from: cp1.checkpoint_id, to: ws2cp.checkpoint_id, output: join(work, "x.json") }),
    null,
    /crosses workspaces/,
  );

  // 5. handoff: same-machine (v1) with output, then portable (v2) with an archive
  const h1Path = join(work, "h1.json");
  const h1 = await w.handoffWorkspace(ws, { ...A, output: h1Path });
  assert.equal(h1.version, 1);
  assert.equal(h1.team, "platform");
  assert.equal(h1.checkpoint_id, undefined);
  assert.deepEqual(JSON.parse(readFileSync(h1Path, "utf8")), h1);
  const out = join(work, "out");
  mkdirSync(out);
  const h2Path = join(out, "handoff.json");
  const h2 = await w.handoffWorkspace(ws, {
    ...A,
    checkpointId: cp2.checkpoint_id,
    archive: join(out, "checkpoint.tar.gz"),
    output: h2Path,
  });
  assert.equal(h2.version, 2);
  assert.equal(h2.archive.path, "checkpoint.tar.gz");
  assert.match(h2.archive.sha256, /^[0-9a-f]{64}$/);
  assert.equal(h2.archive.files, 3);
  assert.ok(h2.archive.bytes >= 1);
  const preview = await w.previewWorkspaceArchive(join(out, "checkpoint.tar.gz"), { env });
  assert.equal(preview.checkpoint_id, cp2.checkpoint_id);

  // 6. adopt into the default registry
  const adoptedRoot = join(work, "adopted");
  const adopted = await w.adoptWorkspaceHandoff({ handoffPath: h2Path, root: adoptedRoot, team: "platform", env });
  assert.notEqual(adopted.workspace_id, ws);
  assert.equal(adopted.checkpoint_id, cp2.checkpoint_id);
  assert.equal(adopted.team, "platform");
  assert.equal(adopted.root, adoptedRoot);
  assert.equal(readFileSync(join(adoptedRoot, "notes.txt"), "utf8"), "twenty bytes of text");
  assert.equal(readFileSync(join(adoptedRoot, "nested", "second.txt"), "utf8"), "second");

  // 7. resume from the handoff; not both with a registry
  const resumed = await w.resumeWorkspace({ handoffPath: h2Path, env });
  assert.equal(resumed.workspace_id, ws);
  await refused(w.resumeWorkspace({ handoffPath: h2Path, registryDir: regA, env }), null, /not both/);

  // 8. delta
  const deltaPath = join(work, "d.json");
  const delta = await w.createWorkspaceDelta({ ...A, from: cp1.checkpoint_id, to: cp2.checkpoint_id, output: deltaPath });
  assert.equal(delta.version, 1);
  assert.equal(delta.base_id, cp1.checkpoint_id);
  assert.equal(delta.target_id, cp2.checkpoint_id);
  assert.equal(delta.document, deltaPath);
  assert.match(delta.sha256, /^[0-9a-f]{64}$/);
  assert.equal(delta.sha256, createHash("sha256").update(readFileSync(deltaPath)).digest("hex"));
  assert.equal(delta.files, 1);
  assert.equal(delta.bytes, 20);

  // 9. apply
  const applied = await w.applyWorkspaceDelta({ ...A, delta: deltaPath, base: cp1.checkpoint_id, expectSHA256: delta.sha256 });
  assert.notEqual(applied.checkpoint_id, cp2.checkpoint_id);
  assert.equal(applied.parent_checkpoint_id, cp1.checkpoint_id);
  assert.equal(applied.files, 3);
  assert.equal(applied.bytes, 30);
  await refused(w.applyWorkspaceDelta({ ...A, delta: deltaPath, base: cp2.checkpoint_id }), "delta_conflict", /diverged/);
  const moved = join(work, "moved.json");
  renameSync(deltaPath, moved);
  await w.applyWorkspaceDelta({ ...A, delta: moved, base: cp1.checkpoint_id });
  const wrongDigest = "0".repeat(64);
  await refused(
    w.applyWorkspaceDelta({ ...A, delta: moved, base: cp1.checkpoint_id, expectSHA256: wrongDigest }),
    null,
    /does not match the digest/,
  );

  // keyed checkpoint and its resolution
  const keyed = await w.checkpointWorkspace(ws, { ...A, requestKey: "task-1/cp", timeout: "30s" });
  assert.equal(keyed.result.outcome, "committed");
  assert.equal(keyed.result.replayed, false);
  const resolved = await w.resolveCheckpoint(ws, "task-1/cp", A);
  assert.equal(resolved.result.checkpoint.id, keyed.result.checkpoint.id);
  const unknownKey = await refused(w.resolveCheckpoint(ws, "never-used", A), "not_found");
  assert.equal(unknownKey.document.version, 1, "the keyed envelope is kept on the error");
  assert.equal(unknownKey.document.result.outcome, "unknown");
  // A portable keyed capture is resolved with portable too (the key is bound to it).
  const portable = await w.checkpointWorkspace(ws, { ...A, requestKey: "task-1/p", timeout: "30s", portable: true });
  assert.equal(portable.result.outcome, "committed");
  const again = await w.resolveCheckpoint({ ...A, id: ws, requestKey: "task-1/p", portable: true });
  assert.equal(again.result.checkpoint.id, portable.result.checkpoint.id);
  await refused(w.resolveCheckpoint(ws, "task-1/p", A), "request_conflict");

  // policy, gc, list
  const pol = await w.workspacePolicySet({ ...A, maxWorkspaces: 10 });
  assert.equal(pol.policy.max_workspaces, 10);
  assert.equal((await w.workspacePolicyShow(A)).policy.max_workspaces, 10);
  assert.equal((await w.gcWorkspaces(A)).version, 1);

  // 10. collect on the partition path; destroy
  const collected = await w.collectWorkspaces({ registryDir: join(regA, "teams", "platform"), env });
  assert.ok(collected.results.length >= 2);
  assert.match(collected.results[0].id, /^ws_/);
  assert.equal(collected.results[0].removed, false);
  assert.equal(collected.results[0].reason, "no-ttl");
  assert.equal((await w.destroyWorkspace(ws, A)).destroyed, true);

  // 11. prune and list
  const pruned = await w.pruneWorkspaces(A);
  assert.equal(pruned.count, 1);
  assert.equal(pruned.removed, 0);
  assert.equal(pruned.results[0].reason, "present");
  const listed = await w.listWorkspaces(A);
  assert.equal(listed.count, 1);
  assert.equal(listed.results[0].readable, true);
  rmSync(join(work, "task2"), { recursive: true, force: true });
  assert.equal((await w.pruneWorkspaces(A)).results[0].reason, "pruned");
  rmSync(adoptedRoot, { recursive: true, force: true });
  const keep = await w.pruneWorkspaces({ team: "platform", env });
  assert.equal(keep.results[0].reason, "gone-adopted");
  const forget = await w.pruneWorkspaces({ team: "platform", includeAdopted: true, env });
  assert.equal(forget.results[0].reason, "pruned-adopted");
  assert.equal(forget.removed, 1);
});

test("refusals carry the CLI's code and message", async () => {
  const err = await refused(w.diffWorkspaces("cp_nope", "cp_x", { registryDir: regA, env }), "invalid_request", /invalid checkpoint id/);
  assert.match(err.message, /invalid checkpoint id "cp_nope"/);
  assert.equal(err.document.error.code, "invalid_request");
  await refused(w.destroyWorkspace("ws_0000", { registryDir: regA, env }));
  await refused(w.listWorkspaces({ registryDir: regA, team: "../bad", env }));
  await assert.rejects(w.runWorkspaceCommand(["no-such-verb"], { env }), (e) => {
    assert.ok(e instanceof w.WorkspaceCommandError);
    assert.equal(e.exitCode, 2);
    assert.equal(e.code, "usage");
    return true;
  });
  await assert.rejects(w.checkpointWorkspace("ws_0", { maxBytes: -1 }), RangeError);
});

test("decodeWorkspaceJSON accepts only one JSON object", () => {
  assert.deepEqual(w.decodeWorkspaceJSON('{"a":1}\n'), { a: 1 });
  assert.throws(() => w.decodeWorkspaceJSON("[1]"), TypeError);
  assert.throws(() => w.decodeWorkspaceJSON(""), TypeError);
  assert.throws(() => w.decodeWorkspaceJSON('{"a":1}{"b":2}'), TypeError);
});

test("parseWorkspaceReady requires version 1 and the non-empty fields", () => {
  const ok = { version: 1, workspace_id: "ws_1", root: "/r", bucket: "b", endpoint: "http://x", region: "r", access_key_id: "a", secret_access_key: "s" };
  assert.equal(w.parseWorkspaceReady(JSON.stringify(ok)).bucket, "b");
  assert.throws(() => w.parseWorkspaceReady(JSON.stringify({ ...ok, version: 2 })), w.WorkspaceReadyError);
  assert.throws(() => w.parseWorkspaceReady(JSON.stringify({ ...ok, bucket: "" })), w.WorkspaceReadyError);
  const { secret_access_key, ...missing } = ok;
  assert.throws(() => w.parseWorkspaceReady(JSON.stringify(missing)), w.WorkspaceReadyError);
});

test("remotes: push, pull and adopt through a throwaway S3 session", async (t) => {
  let sdk;
  try {
    sdk = await import("@aws-sdk/client-s3");
  } catch {
    t.skip("@aws-sdk/client-s3 not installed");
    return;
  }
  const dir = join(work, "remotes");
  const src = join(dir, "src");
  mkdirSync(join(src, "nested"), { recursive: true });
  writeFileSync(join(src, "seed.txt"), "seed");
  writeFileSync(join(src, "nested", "second.txt"), "second");
  const regA = join(dir, "reg-a");
  const regB = join(dir, "reg-b");
  const regC = join(dir, "reg-c");
  const A = { registryDir: regA, team: "platform", env };
  const p = await w.prepareWorkspace(
    { version: 1, root: join(dir, "task"), registry_dir: regA, team: "platform", inputs: [{ source: src, destination: "." }] },
    { env },
  );
  const ws = p.workspace_id;
  const cp = await w.checkpointWorkspace(ws, A);
  const cpId = cp.checkpoint_id;
  assert.equal(cp.files, 2);
  assert.equal(cp.bytes, 10);

  await withStow(async (stow) => {
    const s3 = new sdk.S3Client(stow.awsSdkV3Config());
    await s3.send(new sdk.CreateBucketCommand({ Bucket: "checkpoints" }));
    // The CLI stores no credentials: they reach it through the command's environment.
    // (Only AWS_* is dropped: STOW_BIN in `env` still picks the binary.)
    const noAws = Object.fromEntries(Object.entries(env).filter(([k]) => !k.toUpperCase().startsWith("AWS_")));
    const keys = {
      ...noAws,
      AWS_ACCESS_KEY_ID: stow.accessKeyId,
      AWS_SECRET_ACCESS_KEY: stow.secretAccessKey,
      AWS_DEFAULT_REGION: stow.region,
    };
    const withKeys = (o) => ({ ...o, env: keys });

    const added = await w.addRemote("origin", "s3://checkpoints/team", { ...A, endpointUrl: stow.endpoint, region: stow.region });
    assert.deepEqual(added, { name: "origin", url: "s3://checkpoints/team", endpoint_url: stow.endpoint, region: stow.region });
    for (const registryDir of [regB, regC]) {
      assert.equal((await w.addRemote("origin", "s3://checkpoints/team", { registryDir, endpointUrl: stow.endpoint, env })).name, "origin");
    }
    const listed = await w.listRemotes(A);
    assert.equal(listed.team, "platform");
    assert.deepEqual(listed.remotes.map((r) => r.name), ["origin"]);
    assert.equal("team" in (await w.listRemotes({ registryDir: regB, env })), false);
    const dup = await refused(w.addRemote("origin", "s3://checkpoints/other", A), "already_exists", /already exists/, "remote");
    assert.deepEqual(dup.command.slice(1, 3), ["remote", "add"]);
    assert.match(dup.message, /^stow-s3 remote add failed \(already_exists\)/);
    await refused(w.addRemote("elsewhere", "https://example.com/b", A), "invalid_request", /s3:\/\/BUCKET/, "remote");
    // After "--": the CLI's own refusal, not a usage error.
    await refused(w.addRemote("-x", "s3://checkpoints/x", A), "invalid_request", /remote name/, "remote");

    // push: the blobs, then the manifest; a rerun sends nothing twice
    const counts = (d) => [d.uploaded_blobs, d.uploaded_bytes, d.skipped_blobs, d.skipped_bytes];
    const pushed = await w.pushWorkspaceCheckpoint(cpId, "origin", withKeys({ ...A, timeout: 30 }));
    assert.equal(pushed.checkpoint_id, cpId);
    assert.equal(pushed.workspace_id, ws);
    assert.equal(pushed.remote_url, "s3://checkpoints/team");
    assert.equal(pushed.manifest, "uploaded");
    assert.deepEqual(counts(pushed), [2, 10, 0, 0]);
    const again = await w.pushWorkspaceCheckpoint(cpId, "origin", withKeys({ ...A, timeout: "30s" }));
    assert.equal(again.manifest, "already_present");
    assert.deepEqual(counts(again), [0, 0, 2, 10]);
    const objects = await s3.send(new sdk.ListObjectsV2Command({ Bucket: "checkpoints" }));
    assert.ok(objects.Contents.some((o) => o.Key === `team/checkpoints/${cpId}.json`));

    const held = await w.listRemoteCheckpoints("origin", withKeys({ ...A, timeout: 1.5 }));
    assert.equal(held.remote_url, "s3://checkpoints/team");
    assert.deepEqual(held.checkpoints.map((c) => [c.checkpoint_id, c.workspace_id, c.files, c.bytes]), [[cpId, ws, 2, 10]]);

    // pull into a second registry; a second pull is refused
    const pulled = await w.pullWorkspaceCheckpoint(cpId, "origin", withKeys({ registryDir: regB }));
    assert.equal(pulled.checkpoint_id, cpId);
    assert.deepEqual([pulled.downloaded_blobs, pulled.downloaded_bytes, pulled.local_blobs], [2, 10, 0]);
    await refused(w.pullWorkspaceCheckpoint(cpId, "origin", withKeys({ registryDir: regB })), "already_exists");
    const restoredRoot = join(dir, "restored");
    await w.restoreWorkspaceCheckpoint(cpId, restoredRoot, { registryDir: regB, env });
    assert.equal(readFileSync(join(restoredRoot, "nested", "second.txt"), "utf8"), "second");

    // adopt straight from the remote into a new root of a third registry
    const adoptedRoot = join(dir, "adopted");
    const adopted = await w.adoptWorkspaceRemote(withKeys({ remote: "origin", checkpointId: cpId, root: adoptedRoot, registryDir: regC, timeout: 30 }));
    assert.equal(adopted.checkpoint_id, cpId);
    assert.notEqual(adopted.workspace_id, ws);
    assert.equal(adopted.root, adoptedRoot);
    for (const rel of ["seed.txt", join("nested", "second.txt")]) {
      assert.deepEqual(readFileSync(join(adoptedRoot, rel)), readFileSync(join(src, rel)));
    }

    // handoff with a remote: pushes (already there) and names it; adopted from the document alone
    const handoffPath = join(dir, "handoff.json");
    const handoff = await w.handoffWorkspace(ws, withKeys({ ...A, checkpointId: cpId, remote: "origin", timeout: "30s", output: handoffPath }));
    assert.equal(handoff.version, 2);
    assert.equal(handoff.checkpoint_id, cpId);
    assert.deepEqual(handoff.remote, { url: "s3://checkpoints/team", endpoint_url: stow.endpoint, region: stow.region });
    assert.deepEqual(await w.handoffWorkspace(ws, withKeys({ ...A, checkpointId: cpId, remote: "origin" })), handoff);
    const viaDoc = await w.adoptWorkspaceHandoff(
      withKeys({ handoffPath, root: join(dir, "via-doc"), registryDir: join(dir, "reg-d"), timeout: 30 }),
    );
    assert.equal(viaDoc.checkpoint_id, cpId);
    assert.equal(readFileSync(join(dir, "via-doc", "seed.txt"), "utf8"), "seed");

    // refusals carry the CLI's code
    await refused(w.pullWorkspaceCheckpoint(`cp_${"0".repeat(24)}`, "origin", withKeys({ registryDir: regB })), "not_found", /not found/);
    await refused(w.pullWorkspaceCheckpoint(cpId, "nowhere", withKeys({ registryDir: regC })), "not_found", /remote nowhere not found/);
    await refused(
      w.listRemoteCheckpoints("origin", { ...A, env: { ...keys, AWS_SECRET_ACCESS_KEY: "wrong" } }),
      "remote_auth",
    );
    await refused(w.pushWorkspaceCheckpoint(cpId, "origin", { ...A, env: noAws }), "remote_auth", /credentials/);
    await w.addRemote("gone", "s3://no-such-bucket", { ...A, endpointUrl: stow.endpoint });
    await refused(w.listRemoteCheckpoints("gone", withKeys(A)), "remote_no_bucket");
    await assert.rejects(w.pushWorkspaceCheckpoint(cpId, "origin", { ...A, timeout: 0 }), RangeError);
  });

  assert.equal((await w.removeRemote("gone", A)).name, "gone");
  const gone = await refused(w.removeRemote("gone", A), "not_found", null, "remote");
  assert.match(gone.message, /^stow-s3 remote remove failed \(not_found\)/);
  assert.deepEqual((await w.listRemotes(A)).remotes.map((r) => r.name), ["origin"]);
});
