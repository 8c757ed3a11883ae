import { test } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { resolveStowBinaryDetailed, StowBinaryNotFoundError, openStow, platformPackageName } from "@chester-hill-solutions/stow-s3";

const dir = mkdtempSync(join(tmpdir(), "stow-ts-bin-"));
test.after(() => rmSync(dir, { recursive: true, force: true }));

function fakeBinary(path) {
  mkdirSync(join(path, ".."), { recursive: true });
  writeFileSync(path, "#!/bin/sh\nexit 0\n");
  chmodSync(path, 0o755);
  return path;
}

test("STOW_BIN comes first", () => {
  const bin = fakeBinary(join(dir, "custom", "stow-s3"));
  assert.deepEqual(resolveStowBinaryDetailed({ env: { STOW_BIN: bin, PATH: "" } }), { path: bin, source: "STOW_BIN" });
});

test("a STOW_BIN that is not executable is an error, not silently replaced", () => {
  assert.throws(
    () => resolveStowBinaryDetailed({ env: { STOW_BIN: join(dir, "missing") } }),
    (e) => e instanceof StowBinaryNotFoundError && e.tried[0].includes("missing"),
  );
});

test("then the repository's build output, walking up", () => {
  const repo = join(dir, "repo");
  const bin = fakeBinary(join(repo, "target", "debug", "stow-s3"));
  const pkg = join(repo, "clients", "typescript");
  mkdirSync(pkg, { recursive: true });
  assert.deepEqual(resolveStowBinaryDetailed({ env: { PATH: "" }, searchFrom: pkg }), { path: bin, source: "repository" });
});

test("then the installed platform package (an optional dependency), before PATH", () => {
  // node_modules as npm lays it out: the main package and its platform package side by side.
  const app = join(dir, "app");
  const modules = join(app, "node_modules");
  const pkg = join(modules, "@chester-hill-solutions", "stow-s3");
  mkdirSync(pkg, { recursive: true });
  const name = platformPackageName();
  assert.equal(name, `@chester-hill-solutions/stow-s3-${process.platform}-${process.arch}`);
  const platformDir = join(modules, ...name.split("/"));
  mkdirSync(platformDir, { recursive: true });
  writeFileSync(join(platformDir, "package.json"), JSON.stringify({ name, version: "0.0.0" }));
  const bin = fakeBinary(join(platformDir, "bin", "stow-s3"));
  const onPath = fakeBinary(join(dir, "pathbin2", "stow-s3"));
  assert.deepEqual(resolveStowBinaryDetailed({ env: { PATH: join(onPath, "..") }, searchFrom: pkg }), { path: bin, source: "package" });
  // STOW_BIN still comes first.
  const chosen = fakeBinary(join(dir, "chosen", "stow-s3"));
  assert.equal(resolveStowBinaryDetailed({ env: { STOW_BIN: chosen }, searchFrom: pkg }).source, "STOW_BIN");
  // A platform package without its binary is reported and PATH is used.
  rmSync(bin);
  const found = resolveStowBinaryDetailed({ env: { PATH: join(onPath, "..") }, searchFrom: pkg });
  assert.deepEqual(found, { path: onPath, source: "PATH" });
});

test("then PATH", () => {
  const binDir = join(dir, "pathbin");
  const bin = fakeBinary(join(binDir, "stow-s3"));
  const empty = join(dir, "empty");
  mkdirSync(empty, { recursive: true });
  assert.deepEqual(resolveStowBinaryDetailed({ env: { PATH: binDir }, searchFrom: empty }), { path: bin, source: "PATH" });
});

test("nothing found: the error lists what was tried", () => {
  const empty = join(dir, "nothing");
  mkdirSync(empty, { recursive: true });
  assert.throws(
    () => resolveStowBinaryDetailed({ env: { PATH: "/nonexistent-dir" }, searchFrom: empty }),
    (e) => {
      assert.ok(e instanceof StowBinaryNotFoundError);
      assert.equal(e.code, "binary_not_found");
      assert.equal(e.tried[0], "STOW_BIN (not set)");
      assert.ok(e.tried.includes(join(empty, "target", "release", "stow-s3")));
      assert.ok(e.tried.includes(join(empty, "target", "debug", "stow-s3")));
      assert.ok(e.tried.includes(`${platformPackageName()} (not installed)`));
      assert.match(e.tried.at(-1), /^PATH \(\/nonexistent-dir\)$/);
      assert.match(e.message, /tried:/);
      return true;
    },
  );
});

test("a server that exits before readiness is reported with its stderr", async () => {
  const bad = join(dir, "bad-stow");
  writeFileSync(bad, "#!/bin/sh\necho 'it broke' >&2\nexit 3\n");
  chmodSync(bad, 0o755);
  await assert.rejects(openStow({ binary: bad }), (e) => {
    assert.equal(e.name, "StowStartError");
    assert.equal(e.code, "exited");
    assert.equal(e.exitCode, 3);
    assert.match(e.stderr, /it broke/);
    return true;
  });
});
