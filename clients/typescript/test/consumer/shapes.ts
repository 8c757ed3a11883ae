// A strict consumer of @chester-hill-solutions/stow-s3: every workspace and
// remote helper called in both of its shapes — the reference's (s3.md §8.2,
// §8.4: an options object with `id`, `diffWorkspaces(from, to, registryDir?,
// team?)`, …) and the positional one (the ID, then options) — and the
// session's bucket. It imports the package by name only (no private module).
//
// `npm run check:consumer` type-checks it (tsc --noEmit, strict);
// test/shapes.test.mjs emits it and runs each exported scenario against the
// real binary, with HOME pointing at a temp dir.
import assert from "node:assert/strict";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { GetObjectCommand, HeadBucketCommand, ListBucketsCommand, PutObjectCommand, S3Client } from "@aws-sdk/client-s3";
import {
  openStow,
  withStow,
  StowS3Error,
  StowSession,
  type OpenStowOptions,
  type StowResetOptions,
  type StowResetResult,
} from "@chester-hill-solutions/stow-s3";
import {
  WorkspaceCommandError,
  addRemote,
  adoptWorkspaceHandoff,
  adoptWorkspaceRemote,
  applyWorkspaceDelta,
  checkpointWorkspace,
  collectWorkspaces,
  createWorkspaceDelta,
  decodeWorkspaceJSON,
  deleteWorkspaceCheckpoint,
  destroyWorkspace,
  diffWorkspaces,
  exportWorkspaceCheckpoint,
  handoffWorkspace,
  importWorkspaceCheckpoint,
  listRemoteCheckpoints,
  listRemotes,
  listWorkspaces,
  prepareWorkspace,
  previewWorkspaceArchive,
  pruneWorkspaces,
  pullWorkspaceCheckpoint,
  pushWorkspaceCheckpoint,
  removeRemote,
  resolveCheckpoint,
  restoreWorkspaceCheckpoint,
  resumeWorkspace,
  runWorkspaceCommand,
  serveWorkspace,
  type ServedWorkspace,
  type WorkspaceJSON,
} from "@chester-hill-solutions/stow-s3/workspace";

const str = (doc: WorkspaceJSON, key: string): string => {
  const v = doc[key];
  assert.equal(typeof v, "string", `${key} in ${JSON.stringify(doc)}`);
  return v as string;
};

async function refusedWith(promise: Promise<unknown>, code: string): Promise<WorkspaceCommandError> {
  const err: unknown = await promise.then(
    () => assert.fail(`expected a refusal with ${code}`),
    (e: unknown) => e,
  );
  assert.ok(err instanceof WorkspaceCommandError, `not a WorkspaceCommandError: ${String(err)}`);
  assert.equal(err.code, code, err.message);
  return err;
}

/** The same document, but for what differs per call (timestamps, ages). */
function stable(doc: WorkspaceJSON): string {
  return JSON.stringify(doc, (k, v: unknown) => (/(^created$|_seconds$|^last_used$)/.test(k) ? undefined : v));
}

// ---- sessions -----------------------------------------------------------

export async function sessionBucket(): Promise<void> {
  // The reference's code: `new PutObjectCommand({Bucket: session.bucket, …})` right after openStow().
  const session: StowSession = await openStow();
  try {
    assert.match(session.bucket, /^stow-session-[0-9a-f]{16}$/);
    const s3 = new S3Client(session.awsSdkV3Config());
    await s3.send(new PutObjectCommand({ Bucket: session.bucket, Key: "hello.txt", Body: "hello" }));
    const got = await s3.send(new GetObjectCommand({ Bucket: session.bucket, Key: "hello.txt" }));
    assert.equal(await got.Body?.transformToString(), "hello");
    assert.equal(session.handoff()["STOW_BUCKET"], session.bucket);
    s3.destroy();
  } finally {
    await session.close();
  }

  // opts.bucket chooses the name; two sessions get different default names.
  const options: OpenStowOptions = { bucket: "chosen-bucket", backend: "memory" };
  const chosen = await openStow(options);
  const other = await openStow();
  try {
    assert.equal(chosen.bucket, "chosen-bucket");
    assert.notEqual(other.bucket, chosen.bucket);
    const s3 = new S3Client(chosen.awsSdkV3Config());
    await s3.send(new HeadBucketCommand({ Bucket: "chosen-bucket" }));
    s3.destroy();
  } finally {
    await Promise.all([chosen.close(), other.close()]);
  }
}

export async function withStowBucket(): Promise<{ pid: number; dataDir: string }> {
  const value = await withStow(async (session) => {
    const s3 = new S3Client(session.awsSdkV3Config());
    await s3.send(new PutObjectCommand({ Bucket: session.bucket, Key: "k", Body: "v" }));
    s3.destroy();
    return session.bucket;
  }, { bucket: "with-stow-bucket" });
  assert.equal(value, "with-stow-bucket");

  // A throwing callback: the error comes back unchanged and the server is closed.
  const boom = new Error("boom");
  let seen: { pid: number; dataDir: string } | undefined;
  await assert.rejects(
    withStow(async (session) => {
      assert.match(session.bucket, /^stow-session-[0-9a-f]{16}$/);
      seen = { pid: session.pid, dataDir: session.dataDir };
      throw boom;
    }),
    (e: unknown) => e === boom,
  );
  assert.ok(seen);
  return seen;
}

export async function sessionReset(): Promise<void> {
  // One server, a clean S3 state per test: reset() empties it and keeps session.bucket.
  const session = await openStow({ backend: "memory" });
  const s3 = new S3Client(session.awsSdkV3Config());
  try {
    await s3.send(new PutObjectCommand({ Bucket: session.bucket, Key: "left-behind", Body: "x" }));
    const removed: StowResetResult = await session.reset();
    assert.deepEqual(removed, { reset: true, buckets: 1, objects: 1, bytes: 1, uploads: 0, receipts: 0 });
    const listed = await s3.send(new ListBucketsCommand({}));
    assert.deepEqual(listed.Buckets?.map((b) => b.Name), [session.bucket]);
    const bare: StowResetOptions = { keepBucket: false, timeoutMs: 10_000 };
    const again = await session.reset(bare);
    assert.equal(again.buckets, 1);
    assert.deepEqual((await s3.send(new ListBucketsCommand({}))).Buckets ?? [], []);
  } finally {
    s3.destroy();
    await session.close();
  }
  // A session started without the flag refuses, and keeps its objects.
  const refusing = await openStow({ allowReset: false, backend: "memory" });
  try {
    const err: unknown = await refusing.reset().then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(err instanceof StowS3Error, `not a StowS3Error: ${String(err)}`);
    assert.equal(err.code, "MethodNotAllowed");
    assert.equal(err.status, 405);
  } finally {
    await refusing.close();
  }
}

// ---- workspaces ---------------------------------------------------------

export interface Context {
  /** An empty directory for this scenario. */
  work: string;
}

export async function workspaceShapes({ work }: Context): Promise<void> {
  const src = join(work, "src");
  mkdirSync(src);
  writeFileSync(join(src, "seed.txt"), "seed");
  const reg = join(work, "reg");
  const team = "platform";
  const O = { registryDir: reg, team };
  const manifest = (root: string, extra: WorkspaceJSON = {}): WorkspaceJSON => ({
    version: 1, root, registry_dir: reg, team, inputs: [{ source: src, destination: "." }], ...extra,
  });

  // prepareWorkspace(path) (the reference) and prepareWorkspace(manifest object).
  const manifestPath = join(work, "task.json");
  writeFileSync(manifestPath, JSON.stringify(manifest(join(work, "task1"))));
  const p1 = await prepareWorkspace(manifestPath);
  const p2 = await prepareWorkspace(manifest(join(work, "task2")));
  const ws1 = str(p1, "workspace_id");
  const ws2 = str(p2, "workspace_id");
  const root1 = str(p1, "root");

  // listWorkspaces({registryDir, team}) (both shapes are this one).
  const listed = await listWorkspaces(O);
  assert.equal(listed["count"], 2);

  // runWorkspaceCommand(args) and decodeWorkspaceJSON.
  const raw = await runWorkspaceCommand(["list", "--registry-dir", reg, "--team", team]);
  assert.equal(stable(raw), stable(listed));
  assert.deepEqual(decodeWorkspaceJSON(JSON.stringify(raw)), raw);

  // checkpointWorkspace(id, options) and checkpointWorkspace({id, parent, maxBytes, maxFiles, includeSensitive}).
  const cp1 = str(await checkpointWorkspace(ws1, O), "checkpoint_id");
  writeFileSync(join(root1, "notes.txt"), "agent output");
  const c2 = await checkpointWorkspace({ id: ws1, parent: cp1, maxBytes: 1 << 20, maxFiles: 100, includeSensitive: false, ...O });
  const cp2 = str(c2, "checkpoint_id");
  assert.equal(c2["parent_checkpoint_id"], cp1);
  assert.equal(c2["workspace_id"], ws1);
  // Without an id: the workspace holding cwd, in either shape.
  const c3 = await checkpointWorkspace(undefined, { cwd: root1 });
  const c4 = await checkpointWorkspace({ cwd: root1, message: "by cwd" });
  assert.equal(c3["workspace_id"], ws1);
  assert.equal(c4["workspace_id"], ws1);
  // An unknown ID is the CLI's real refusal (not_found), not "invalid workspace id" for "[object Object]".
  const unknown = ws1.replace(/[0-9a-f]+$/, (hex) => "0".repeat(hex.length));
  await refusedWith(checkpointWorkspace({ id: unknown, ...O }), "not_found");
  await refusedWith(checkpointWorkspace(unknown, O), "not_found");

  // diffWorkspaces: (from, to, options), (from, to, registryDir, team), ({from, to, …}).
  const d1 = await diffWorkspaces(cp1, cp2, O);
  const d2 = await diffWorkspaces(cp1, cp2, reg, team);
  const d3 = await diffWorkspaces({ from: cp1, to: cp2, ...O });
  assert.deepEqual(d2, d1);
  assert.deepEqual(d3, d1);
  assert.deepEqual((d1["changes"] as WorkspaceJSON[]).map((c) => `${String(c["kind"])} ${String(c["path"])}`), ["added notes.txt"]);
  await refusedWith(diffWorkspaces("cp_missing", cp2, reg, team), "invalid_request");

  // resumeWorkspace({id, registryDir, team}) and resumeWorkspace(id, options).
  const r1 = await resumeWorkspace({ id: ws1, ...O });
  const r2 = await resumeWorkspace(ws1, O);
  assert.equal(r1["workspace_id"], ws1);
  assert.equal(r2["workspace_id"], ws1);

  // handoffWorkspace(id, {…}) (the reference) and handoffWorkspace({id, …}).
  const h1 = join(work, "h1.json");
  const h2 = join(work, "h2.json");
  const hand1 = await handoffWorkspace(ws1, { ...O, checkpointId: cp2, archive: join(work, "a1.tgz"), output: h1 });
  const hand2 = await handoffWorkspace({ id: ws1, ...O, checkpointId: cp2, archive: join(work, "a2.tgz"), output: h2 });
  assert.equal(hand1["workspace_id"], ws1);
  assert.equal(hand2["workspace_id"], ws1);

  // adoptWorkspaceHandoff({handoffPath, root, …}) (the reference) and (handoffPath, root, options).
  await adoptWorkspaceHandoff({ handoffPath: h1, root: join(work, "adopted1"), registryDir: join(work, "reg-adopt1") });
  await adoptWorkspaceHandoff(h2, join(work, "adopted2"), { registryDir: join(work, "reg-adopt2") });
  assert.equal(readFileSync(join(work, "adopted1", "notes.txt"), "utf8"), "agent output");
  assert.equal(readFileSync(join(work, "adopted2", "notes.txt"), "utf8"), "agent output");

  // createWorkspaceDelta({from, to, output, …}) (the reference) and (from, to, output, options).
  const delta1 = await createWorkspaceDelta({ from: cp1, to: cp2, output: join(work, "d1.json"), ...O });
  const delta2 = await createWorkspaceDelta(cp1, cp2, join(work, "d2.json"), O);
  assert.equal(delta1["target_id"], cp2);
  assert.equal(delta2["target_id"], cp2);

  // applyWorkspaceDelta({delta, base, expectSHA256}) (the reference) and (delta, base, options).
  const a1 = await applyWorkspaceDelta({ delta: join(work, "d1.json"), base: cp1, expectSHA256: str(delta1, "sha256"), ...O });
  const a2 = await applyWorkspaceDelta(join(work, "d2.json"), cp1, { expectSHA256: str(delta2, "sha256"), ...O });
  assert.equal(a1["parent_checkpoint_id"], cp1);
  assert.equal(a2["parent_checkpoint_id"], cp1);

  // resolveCheckpoint(id, requestKey, options) and ({id, requestKey, …}).
  await checkpointWorkspace({ id: ws1, requestKey: "task/1", timeout: "30s", ...O });
  const res1 = await resolveCheckpoint(ws1, "task/1", O);
  const res2 = await resolveCheckpoint({ id: ws1, requestKey: "task/1", ...O });
  assert.deepEqual(res2, res1);

  // deleteWorkspaceCheckpoint(checkpointId, options) and ({checkpointId, …}).
  await deleteWorkspaceCheckpoint(str(a1, "checkpoint_id"), O);
  await deleteWorkspaceCheckpoint({ checkpointId: str(a2, "checkpoint_id"), ...O });
  await refusedWith(deleteWorkspaceCheckpoint({ checkpointId: str(a2, "checkpoint_id"), ...O }), "not_found");

  // restoreWorkspaceCheckpoint(cp, root) (the reference) and ({checkpointId, root, …}).
  const rs1 = await restoreWorkspaceCheckpoint(cp2, join(work, "restored1"), O);
  const rs2 = await restoreWorkspaceCheckpoint({ checkpointId: cp2, root: join(work, "restored2"), ...O });
  assert.ok(existsSync(join(work, "restored1", "notes.txt")));
  assert.ok(existsSync(join(work, "restored2", "notes.txt")));

  // exportWorkspaceCheckpoint(cp, output, options) (the reference) and ({checkpointId, output, …}).
  const ar1 = join(work, "cp1.tar.gz");
  const ar2 = join(work, "cp2.tar.gz");
  await exportWorkspaceCheckpoint(cp2, ar1, O);
  await exportWorkspaceCheckpoint({ checkpointId: cp2, output: ar2, ...O });

  // previewWorkspaceArchive(archive) and ({archive}).
  const pv1 = await previewWorkspaceArchive(ar1);
  const pv2 = await previewWorkspaceArchive({ archive: ar2, maxFiles: 100 });
  assert.deepEqual(pv2["files"], pv1["files"]);

  // importWorkspaceCheckpoint(archive, options) (the reference) and ({archive, …}).
  const im1 = await importWorkspaceCheckpoint(ar1, { registryDir: join(work, "reg-import1") });
  const im2 = await importWorkspaceCheckpoint({ archive: ar2, registryDir: join(work, "reg-import2") });
  assert.equal(im1["checkpoint_id"], cp2);
  assert.equal(im2["checkpoint_id"], cp2);

  // destroyWorkspace(id) (the reference, default registry) and ({id, …}), (id, options).
  const home = await prepareWorkspace({ version: 1, root: join(work, "in-home"), inputs: [{ source: src, destination: "." }] });
  const homeList = await listWorkspaces();
  assert.equal(homeList["count"], 1);
  await destroyWorkspace(str(home, "workspace_id"));
  await destroyWorkspace(str(rs1, "workspace_id"), O);
  await destroyWorkspace({ id: str(rs2, "workspace_id"), ...O });
  await destroyWorkspace({ id: ws2, registryDir: reg, team });
  assert.equal((await listWorkspaces()).count, 0);
  assert.equal((await listWorkspaces(O)).count, 1);

  // collectWorkspaces(registryDir?) (the reference) and collectWorkspaces(options).
  const col1 = await collectWorkspaces(reg);
  const col2 = await collectWorkspaces({ registryDir: reg });
  const col3 = await collectWorkspaces();
  for (const c of [col1, col2, col3]) assert.equal(typeof c, "object");
  assert.equal(stable(col2), stable(col1));

  // pruneWorkspaces(options) (both shapes are this one).
  await pruneWorkspaces({ ...O, includeAdopted: true });

  // serveWorkspace({id, …, timeoutMs}) (the reference) and serveWorkspace(id, options).
  for (const start of [
    (): Promise<ServedWorkspace> => serveWorkspace({ id: ws1, ...O, timeoutMs: 15_000 }),
    (): Promise<ServedWorkspace> => serveWorkspace(ws1, O),
  ]) {
    const served = await start();
    try {
      assert.equal(served.ready.workspace_id, ws1);
      assert.equal((await fetch(`${served.ready.endpoint}/_stow/health`)).status, 200);
    } finally {
      await served.close();
    }
  }
  await assert.rejects(serveWorkspace({ id: unknown, ...O }), (e: unknown) => e instanceof Error && /not_found|no workspace/i.test(e.message));
}

// ---- remotes ------------------------------------------------------------

export async function remoteShapes({ work }: Context): Promise<void> {
  const src = join(work, "src");
  mkdirSync(src);
  writeFileSync(join(src, "seed.txt"), "seed");
  const reg = join(work, "sender");
  const ws = await prepareWorkspace({ version: 1, root: join(work, "task"), registry_dir: reg, inputs: [{ source: src, destination: "." }] });
  const wsId = str(ws, "workspace_id");
  const cp1 = str(await checkpointWorkspace({ id: wsId, registryDir: reg }), "checkpoint_id");
  writeFileSync(join(work, "task", "more.txt"), "more");
  const cp2 = str(await checkpointWorkspace(wsId, { registryDir: reg }), "checkpoint_id");

  await withStow(async (stow) => {
    // The session's own bucket holds the remote.
    const env = { ...process.env, ...stow.handoff() };
    const url = `s3://${stow.bucket}/team`;
    const receiver = join(work, "receiver");

    // addRemote(name, url, options) and addRemote({name, url, …}).
    await addRemote("origin", url, { registryDir: reg, endpointUrl: stow.endpoint });
    await addRemote({ name: "origin", url, registryDir: receiver, endpointUrl: stow.endpoint });
    await addRemote({ name: "spare", url: `s3://${stow.bucket}/spare`, registryDir: reg, endpointUrl: stow.endpoint });
    await addRemote("spare2", `s3://${stow.bucket}/spare2`, { registryDir: reg, endpointUrl: stow.endpoint });
    const remotes = await listRemotes({ registryDir: reg });
    assert.equal((remotes["remotes"] as unknown[]).length, 3);

    // removeRemote(name, options) and removeRemote({name, …}).
    await removeRemote("spare", { registryDir: reg });
    await removeRemote({ name: "spare2", registryDir: reg });
    assert.equal(((await listRemotes({ registryDir: reg }))["remotes"] as unknown[]).length, 1);

    // pushWorkspaceCheckpoint(cp, remote, options) and ({checkpointId, remote, …}).
    await pushWorkspaceCheckpoint(cp1, "origin", { registryDir: reg, timeout: 60, env });
    await pushWorkspaceCheckpoint({ checkpointId: cp2, remote: "origin", registryDir: reg, timeout: "60s", env });

    // listRemoteCheckpoints(remote, options) and ({remote, …}).
    const held1 = await listRemoteCheckpoints("origin", { registryDir: receiver, env });
    const held2 = await listRemoteCheckpoints({ remote: "origin", registryDir: receiver, env });
    assert.deepEqual(held2, held1);
    assert.equal((held1["checkpoints"] as unknown[]).length, 2);

    // pullWorkspaceCheckpoint(cp, remote, options) and ({checkpointId, remote, …}).
    await pullWorkspaceCheckpoint(cp1, "origin", { registryDir: receiver, env });
    await pullWorkspaceCheckpoint({ checkpointId: cp2, remote: "origin", registryDir: receiver, env });
    await refusedWith(pullWorkspaceCheckpoint({ checkpointId: cp2, remote: "origin", registryDir: receiver, env }), "already_exists");

    // adoptWorkspaceRemote({remote, checkpointId, root, …}) and (checkpointId, remote, root, options).
    await adoptWorkspaceRemote({ remote: "origin", checkpointId: cp1, root: join(work, "adopted1"), registryDir: receiver, env });
    await adoptWorkspaceRemote(cp2, "origin", join(work, "adopted2"), { registryDir: receiver, env });
    assert.equal(existsSync(join(work, "adopted1", "more.txt")), false);
    assert.equal(readFileSync(join(work, "adopted2", "more.txt"), "utf8"), "more");
  });
}

// ---- shapes that must not type-check (never called) ---------------------

export function rejectedShapes(): void {
  // @ts-expect-error: the options form takes nothing after the object
  void checkpointWorkspace({ id: "ws_1" }, { registryDir: "r" });
  // @ts-expect-error: an ID is a string
  void checkpointWorkspace(42);
  // @ts-expect-error: serveWorkspace's options form needs the id
  void serveWorkspace({ registryDir: "r" });
  // @ts-expect-error: diffWorkspaces needs both checkpoints
  void diffWorkspaces({ from: "cp_1" });
  // @ts-expect-error: a registry and an options object at once
  void diffWorkspaces("cp_1", "cp_2", "reg", { team: "t" });
  // @ts-expect-error: the positional form does not take the id again in its options
  void resumeWorkspace("ws_1", { id: "ws_2" });
  // @ts-expect-error: the session's bucket is read-only
  void ((s: StowSession) => (s.bucket = "other"));
}
