// Rewind (issue 27) through the ./workspace helpers, against the real binary:
// rewindWorkspace puts an attached workspace's tree back to a checkpoint in
// place — undo, dry run, paths, keyed replay, conflicts and refusals.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import * as w from "@chester-hill-solutions/stow-s3/workspace";

const work = realpathSync(mkdtempSync(join(tmpdir(), "stow-ts-rewind-")));
const home = join(work, "home");
mkdirSync(home);
const env = { ...process.env, HOME: home, XDG_CONFIG_HOME: join(work, "xdg") };
test.after(() => rmSync(work, { recursive: true, force: true }));

/** Every file under root except .stow, relative path -> contents. */
function treeFiles(root) {
  const out = {};
  const walk = (dir) => {
    for (const name of readdirSync(dir).sort()) {
      const p = join(dir, name);
      if (relative(root, p) === ".stow") continue;
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

/** An attached tree with one checkpoint, in its own registry. */
async function attached(name) {
  const root = join(work, name);
  mkdirSync(join(root, "src", "deep"), { recursive: true });
  writeFileSync(join(root, "README.md"), "# project\n");
  writeFileSync(join(root, "src", "main.ts"), "export {};\n");
  writeFileSync(join(root, "src", "deep", "data.txt"), "data\n");
  writeFileSync(join(root, "src", "deep", "more.txt"), "more\n");
  const R = { registryDir: join(work, `${name}-reg`), env };
  const ws = await w.attachWorkspace({ ...R, root });
  const cp = (await w.checkpointWorkspace(ws.workspace_id, { ...R, message: "as found" })).checkpoint_id;
  return { root, R, id: ws.workspace_id, cp };
}

/** Change a file, add one, delete a whole directory. */
function agentEdits(root) {
  writeFileSync(join(root, "src", "main.ts"), "export const agent = true;\n");
  writeFileSync(join(root, "notes.txt"), "scratch\n");
  rmSync(join(root, "src", "deep"), { recursive: true });
}

test("rewind, then undo by rewinding to the undo checkpoint", async () => {
  const { root, R, id, cp } = await attached("undo");
  const original = treeFiles(root);
  agentEdits(root);
  const edited = treeFiles(root);

  // From inside the tree: no id, no registry.
  const out = await w.rewindWorkspace({ to: cp, message: "agent's attempt", cwd: join(root, "src"), env });
  assert.deepEqual(treeFiles(root), original);
  assert.equal(out.workspace_id, id);
  assert.equal(out.checkpoint_id, cp);
  assert.equal(out.head, cp);
  assert.deepEqual([out.written, out.deleted, out.unchanged], [3, 1, 1]); // main.ts, data, more; notes; README
  assert.deepEqual(out.conflicts, []);
  assert.equal(out.dry_run, false);
  assert.equal(out.replayed, false);
  assert.equal(out.paths, undefined);
  assert.equal(out.changes, undefined);
  assert.match(out.undo_checkpoint_id, /^cp_[0-9a-f]+$/);
  assert.notEqual(out.undo_checkpoint_id, cp);
  const log = await w.workspaceLog({ ...R, id });
  assert.equal(log.head, cp);
  assert.equal(log.checkpoints.find((e) => e.checkpoint_id === out.undo_checkpoint_id).message, "agent's attempt");
  assert.equal((await w.workspaceStatus({ cwd: root, env })).clean, true);

  // Undo: the edits are back, the directory is gone again.
  const back = await w.rewindWorkspace({ ...R, id, to: out.undo_checkpoint_id });
  assert.deepEqual(treeFiles(root), edited);
  assert.equal(existsSync(join(root, "src", "deep")), false);
  assert.equal(back.head, out.undo_checkpoint_id);
  assert.deepEqual([back.written, back.deleted], [2, 2]); // main.ts, notes; data, more (their directory goes uncounted)
  assert.equal((await w.workspaceStatus({ ...R, id })).clean, true);
});

test("a dry run changes nothing", async () => {
  const { root, R, id, cp } = await attached("dry");
  agentEdits(root);
  const edited = treeFiles(root);
  const before = await w.workspaceLog({ ...R, id });
  const plan = await w.rewindWorkspace({ ...R, id, to: cp, dryRun: true });
  assert.equal(plan.dry_run, true);
  assert.equal(plan.undo_checkpoint_id, undefined);
  assert.deepEqual([plan.written, plan.deleted, plan.unchanged], [3, 1, 1]);
  assert.deepEqual(plan.changes.map((c) => [c.path, c.kind]).sort(), [
    ["notes.txt", "added"],
    ["src/deep/data.txt", "deleted"],
    ["src/deep/more.txt", "deleted"],
    ["src/main.ts", "modified"],
  ]);
  assert.deepEqual(treeFiles(root), edited);
  assert.deepEqual(await w.workspaceLog({ ...R, id }), before);
});

test("paths limit the rewind", async () => {
  const { root, R, id, cp } = await attached("paths");
  const original = treeFiles(root);
  agentEdits(root);
  const out = await w.rewindWorkspace({ ...R, id, to: cp, paths: ["src/deep"] });
  assert.deepEqual(out.paths, ["src/deep"]);
  assert.deepEqual([out.written, out.deleted], [2, 0]);
  assert.equal(readFileSync(join(root, "src", "deep", "data.txt"), "utf8"), "data\n");
  assert.equal(readFileSync(join(root, "src", "main.ts"), "utf8"), "export const agent = true;\n");
  assert.equal(existsSync(join(root, "notes.txt")), true);
  // The head stays on the undo checkpoint.
  assert.equal(out.head, out.undo_checkpoint_id);
  assert.notEqual(out.head, cp);
  await w.rewindWorkspace({ to: cp, paths: ["notes.txt", "src/main.ts"], cwd: root, env });
  assert.deepEqual(treeFiles(root), original);
  await assert.rejects(w.rewindWorkspace({ to: cp, paths: [], cwd: root, env }), RangeError);
});

test("a keyed rewind replays", async () => {
  const { root, R, id, cp } = await attached("keyed");
  agentEdits(root);
  const first = await w.rewindWorkspace({ ...R, id, to: cp, requestKey: "task-1/rewind" });
  writeFileSync(join(root, "notes.txt"), "written after the rewind\n");
  const again = await w.rewindWorkspace({ ...R, id, to: cp, requestKey: "task-1/rewind" });
  assert.equal(first.replayed, false);
  assert.equal(again.replayed, true);
  assert.equal(again.undo_checkpoint_id, first.undo_checkpoint_id);
  assert.equal(readFileSync(join(root, "notes.txt"), "utf8"), "written after the rewind\n");
});

test("a concurrent write is kept and reported (workspace_changed, with the result)", async () => {
  // The rewind pauses 1.5 s after its journal (a test fault point); main.ts is
  // written meanwhile and must be left alone.
  const { root, R, id, cp } = await attached("conflict");
  agentEdits(root);
  const journal = join(R.registryDir, ".stow", "rewind", `${id}.json`);
  const pending = w.rewindWorkspace({ ...R, id, to: cp, env: { ...env, STOW_TEST_FAULT: "rewind.journaled@1500" } });
  pending.catch(() => {}); // awaited below; never an unhandled rejection while this waits
  const deadline = Date.now() + 30_000;
  while (!existsSync(journal) && Date.now() < deadline) await sleep(5);
  writeFileSync(join(root, "src", "main.ts"), "export const meanwhile = 1;\n");
  const err = await refusal(pending, "workspace_changed");
  const doc = err.document;
  // The result is the document, and it says why it is a refusal.
  assert.equal(doc.error.code, "workspace_changed");
  assert.match(doc.error.message, /rewind/);
  assert.deepEqual(doc.conflicts.map((c) => c.path), ["src/main.ts"]);
  assert.ok(doc.conflicts[0].reason);
  assert.equal(doc.checkpoint_id, cp);
  assert.match(doc.undo_checkpoint_id, /^cp_/);
  assert.deepEqual([doc.written, doc.deleted], [2, 1]);
  assert.equal(readFileSync(join(root, "src", "main.ts"), "utf8"), "export const meanwhile = 1;\n");
  assert.equal(readFileSync(join(root, "src", "deep", "data.txt"), "utf8"), "data\n");
  assert.equal(existsSync(join(root, "notes.txt")), false);
});

test("refusals", async () => {
  const { root, R, id, cp } = await attached("refusals");
  agentEdits(root);
  const edited = treeFiles(root);
  const unknown = await refusal(w.rewindWorkspace({ ...R, id, to: `cp_${"0".repeat(24)}` }), "not_found");
  assert.match(unknown.message, /not found/);
  await refusal(w.rewindWorkspace({ to: cp, paths: ["../elsewhere"], cwd: root, env }), "invalid_path");
  await refusal(w.rewindWorkspace({ to: cp, cwd: home, env }), "usage", 2);
  assert.deepEqual(treeFiles(root), edited);
});
