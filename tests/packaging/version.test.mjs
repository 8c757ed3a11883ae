// One version everywhere: Cargo's workspace version is what `stow-s3
// --version` prints, and what the npm packages (main and every platform
// package) and the Python package (pyproject and stow_s3.__version__) say.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const TS = join(REPO, "clients", "typescript");
const read = (...p) => readFileSync(join(REPO, ...p), "utf8");

/** `version = "…"` of the given TOML table (the files' simple layout; no TOML parser needed). */
function tomlVersion(text, table) {
  const start = text.indexOf(`\n[${table}]\n`);
  assert.ok(start >= 0, `[${table}] not found`);
  const body = text.slice(start + table.length + 4).split(/\n\[/)[0];
  const m = body.match(/^version\s*=\s*"([^"]+)"/m);
  assert.ok(m, `no version in [${table}]`);
  return m[1];
}

const cargo = tomlVersion("\n" + read("Cargo.toml"), "workspace.package");

test("the binary reports Cargo's workspace version", () => {
  const binary = process.env.STOW_BIN || join(REPO, "target", "debug", "stow-s3");
  assert.ok(existsSync(binary), `${binary} is missing: cargo build --bin stow-s3`);
  assert.equal(execFileSync(binary, ["--version"], { encoding: "utf8" }).trim(), `stow-s3 ${cargo}`);
});

test("the npm packages carry the same version", async () => {
  assert.equal(JSON.parse(read("clients", "typescript", "package.json")).version, cargo);
  const platforms = readdirSync(join(TS, "platforms"), { withFileTypes: true }).filter((d) => d.isDirectory());
  assert.deepEqual(platforms.map((d) => d.name).sort(), ["darwin-arm64", "darwin-x64", "linux-arm64", "linux-x64", "win32-x64"]);
  for (const d of platforms) {
    const m = JSON.parse(read("clients", "typescript", "platforms", d.name, "package.json"));
    assert.equal(m.version, cargo, d.name);
    assert.equal(m.name, `@chester-hill-solutions/stow-s3-${d.name}`);
    const [os, cpu] = d.name.split("-");
    assert.deepEqual([m.os, m.cpu], [[os], [cpu]], d.name);
    if (os === "linux") assert.deepEqual(m.libc, ["glibc"], d.name);
  }
  // What the package reports at run time (needs `npm run build`).
  const built = join(TS, "dist", "index.js");
  if (existsSync(built)) {
    const pkg = await import(pathToFileURL(built).href);
    assert.equal(pkg.VERSION, cargo);
  }
});

test("the Python package carries the same version", () => {
  assert.equal(tomlVersion("\n" + read("clients", "python", "pyproject.toml"), "project"), cargo);
  const init = read("clients", "python", "src", "stow_s3", "__init__.py");
  assert.equal(init.match(/^__version__ = "([^"]+)"/m)?.[1], cargo);
});
