// Attached workspaces (issue 26, first part) through the ./workspace helpers,
// against the real binary: attachWorkspace, checkpointWorkspace({ message }),
// workspaceLog, workspaceStatus and detachWorkspace.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import * as w from "@chester-hill-solutions/stow-s3/workspace";

const work = realpathSync(mkdtempSync(join(tmpdir(), "stow-ts-attach-")));
const home = join(work, "home");
mkdirSync(home);
const env = { ...process.env, HOME: home, XDG_CONFIG_HOME: join(work, "xdg") };
test.after(() => rmSync(work, { recursive: true, force: true }));

function makeTree(name) {
  const root = join(work, name);
  mkdirSync(join(root, "src", "deep"), { recursive: true });
  writeFileSync(join(root, "README.md"), "# project\n");
  writeFileSync(join(root, "src", "main.ts"), "export {};\n");
  writeFileSync(join(root, "src", "deep", "data.txt"), "data\n");
  return root;
}

/** Every file under root (.stow included), relative path -> contents. */
function filesUnder(root) {
  const out = {};
  const walk = (dir) => {
    for (const name of readdirSync(dir).sort()) {
      const p = join(dir, name);
      if (statSync(p).isDirectory()) walk(p);
      else out[relative(root, p)] = readFileSync(p, "utf8");
    }
  };
  walk(root);
  return out;
}

async function refusal(promise, code, exitCode = 1) {
  const err = await promise.then(
    () => assert.fail("expected a refusal"),
    (e) => e,
  );
  assert.ok(err instanceof w.WorkspaceCommandError, `not a WorkspaceCommandError: ${err}`);
  assert.equal(err.code, code, err.message);
  assert.equal(err.exitCode, exitCode);
  return err;
}

test("attach, checkpoint with messages, log, detach", async () => {
  const root = makeTree("project");
  const before = filesUnder(root);
  // The current directory (cwd) by default, the default registry.
  const ws = await w.attachWorkspace({ cwd: root, env });
  assert.match(ws.workspace_id, /^ws_[0-9a-f]+$/);
  assert.equal(ws.root, root);
  assert.equal(ws.registry_dir, join(work, "xdg", "stow-s3", "workspaces"));
  assert.equal(ws.seeded_objects, 3);
  assert.equal(readFileSync(join(root, ".stow", ".gitignore"), "utf8"), "*\n");
  const after = filesUnder(root);
  for (const k of Object.keys(after)) if (k.startsWith(".stow")) delete after[k];
  assert.deepEqual(after, before);

  // No id: the workspace holding cwd.
  const first = await w.checkpointWorkspace(undefined, { cwd: join(root, "src", "deep"), env, message: "first" });
  assert.equal(first.workspace_id, ws.workspace_id);
  assert.equal(first.message, "first");
  assert.equal(first.parent_checkpoint_id, undefined);
  writeFileSync(join(root, "src", "main.ts"), "export const x = 1;\n");
  const message = "second ✓\nwith a second line";
  const second = await w.checkpointWorkspace(undefined, { cwd: root, env, message });
  assert.equal(second.message, message);
  assert.equal(second.parent_checkpoint_id, first.checkpoint_id);

  // Status: clean at the head, then one edit shows; against the first
  // checkpoint the file was added.
  assert.equal((await w.workspaceStatus({ cwd: root, env })).clean, true);
  writeFileSync(join(root, "src", "main.ts"), "export const x = 2;\n");
  const st = await w.workspaceStatus({ cwd: join(root, "src"), env });
  assert.equal(st.clean, false);
  assert.equal(st.checkpoint_id, second.checkpoint_id);
  assert.deepEqual(st.changes.map((c) => [c.path, c.kind]), [["src/main.ts", "modified"]]);
  const vsFirst = await w.workspaceStatus({ id: ws.workspace_id, against: first.checkpoint_id, env });
  assert.deepEqual(vsFirst.changes.map((c) => [c.path, c.kind]), [["src/main.ts", "modified"]]);
  writeFileSync(join(root, "src", "main.ts"), "export const x = 1;\n");

  const log = await w.workspaceLog({ cwd: join(root, "src"), env });
  assert.equal(log.workspace_id, ws.workspace_id);
  assert.equal(log.head, second.checkpoint_id);
  assert.equal(log.next_cursor, undefined);
  assert.deepEqual(
    log.checkpoints.map((e) => [e.checkpoint_id, e.message, e.head, e.origin]),
    [
      [second.checkpoint_id, message, true, "capture"],
      [first.checkpoint_id, "first", false, "capture"],
    ],
  );
  assert.equal(log.checkpoints[0].parent_id, first.checkpoint_id);
  assert.deepEqual(await w.workspaceLog({ id: ws.workspace_id, env }), log);
  const page = await w.workspaceLog({ id: ws.workspace_id, limit: 1, env });
  assert.deepEqual(page.checkpoints.map((e) => e.checkpoint_id), [second.checkpoint_id]);
  const rest = await w.workspaceLog({ cwd: root, limit: 1, cursor: page.next_cursor, env });
  assert.deepEqual(rest.checkpoints.map((e) => e.checkpoint_id), [first.checkpoint_id]);
  assert.equal(rest.next_cursor, undefined);

  // Over 4096 bytes of UTF-8 (2049 characters): refused, nothing published.
  await refusal(w.checkpointWorkspace(undefined, { cwd: root, env, message: "é".repeat(2049) }), "invalid_request");
  assert.deepEqual(await w.workspaceLog({ cwd: root, env }), log);
  const again = await refusal(w.attachWorkspace({ root, env }), "already_exists");
  assert.match(again.message, new RegExp(ws.workspace_id));

  // detach from inside the tree.
  const d = await w.detachWorkspace({ cwd: join(root, "src"), env });
  assert.equal(d.workspace_id, ws.workspace_id);
  assert.equal(d.deleted_checkpoints, 2);
  assert.equal(d.kept_checkpoints, false);
  assert.equal(existsSync(join(root, ".stow")), false);
  assert.deepEqual(filesUnder(root), { ...before, "src/main.ts": "export const x = 1;\n" });
  assert.equal((await w.listWorkspaces({ env })).count, 0);
  assert.equal((await w.workspacePolicyShow({ env })).usage.checkpoints, 0);
  // No workspace holds the tree any more: no id is a usage error (exit 2).
  await refusal(w.workspaceLog({ cwd: root, env }), "usage", 2);
  await refusal(w.checkpointWorkspace(undefined, { cwd: root, env }), "usage", 2);
});

test("attach options, kept checkpoints and refusals", async () => {
  const registryDir = join(work, "reg");
  const R = { registryDir, env };
  const root = makeTree("second");
  await refusal(w.attachWorkspace({ ...R, root: join(root, "README.md") }), "invalid_root");
  await refusal(w.attachWorkspace({ ...R, root: home }), "refused");
  assert.equal(existsSync(registryDir), false);

  const ws = await w.attachWorkspace({ ...R, root, ttlSeconds: 60, maxBytes: 1 << 20, maxObjects: 9, noGitignore: true });
  assert.equal(ws.capabilities.max_bytes, 1 << 20);
  assert.equal(ws.capabilities.max_objects, 9);
  await refusal(w.attachWorkspace({ ...R, root: join(root, "src") }), "refused");
  await refusal(w.attachWorkspace({ ...R, cwd: join(root, "src", "deep") }), "refused");
  assert.equal(existsSync(join(root, "src", ".stow")), false);

  await w.workspacePolicySet({ ...R, maxWorkspaces: 1 });
  const other = makeTree("other");
  await refusal(w.attachWorkspace({ ...R, root: other }), "capacity_exceeded");
  assert.equal(existsSync(join(other, ".stow")), false);
  await w.workspacePolicySet({ ...R, maxWorkspaces: 0 });
  const ws2 = await w.attachWorkspace({ ...R, root: other });
  await w.checkpointWorkspace(ws2.workspace_id, R);
  await w.checkpointWorkspace(ws2.workspace_id, R);
  const foreign = (await w.workspaceLog({ ...R, id: ws2.workspace_id, limit: 1 })).next_cursor;
  assert.ok(foreign);
  await refusal(w.workspaceLog({ ...R, id: ws.workspace_id, cursor: foreign }), "invalid_request");

  const cp = await w.checkpointWorkspace(ws.workspace_id, { ...R, message: "kept" });
  const d = await w.detachWorkspace({ ...R, id: ws.workspace_id, keepCheckpoints: true });
  assert.equal(d.deleted_checkpoints, 0);
  assert.equal(d.kept_checkpoints, true);
  assert.equal(existsSync(join(root, ".stow")), false);
  const restored = await w.restoreWorkspaceCheckpoint(cp.checkpoint_id, join(work, "restored"), R);
  assert.equal(readFileSync(join(restored.root, "src", "deep", "data.txt"), "utf8"), "data\n");
  assert.deepEqual((await w.listWorkspaces(R)).results.map((r) => r.id).sort(), [ws2.workspace_id, restored.workspace_id].sort());
  // A prepared (restored) workspace is not detached.
  await refusal(w.detachWorkspace({ ...R, id: restored.workspace_id }), "refused");
});
