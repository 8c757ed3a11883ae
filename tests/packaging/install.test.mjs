// The npm packages as a user installs them: the main package's tarball and
// the linux-x64 platform package's tarball installed with `npm install
// --offline` into a fresh directory outside the repository, then a program
// run there by node's absolute path with no STOW_BIN, an empty PATH and no
// repository above it: it must find the platform package's binary, run a
// session (openStow, PutObject/GetObject with the AWS SDK, reset) and a
// workspace scenario (prepare, checkpoint, diff) through the package alone.
//
// The tarballs: STOW_DIST_DIR's (what `make dist` built, `make dist-test`),
// else packed here by clients/typescript/scripts/pack.mjs — the same script
// `make dist` runs — from STOW_BIN or target/debug/stow-s3 (a stripped copy,
// so packing and installing take seconds; the dist build's LTO takes minutes).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const TS = join(REPO, "clients", "typescript");
const main = JSON.parse(readFileSync(join(TS, "package.json"), "utf8"));
const PLATFORM = `${process.platform}-${process.arch}`;

function onPath(name) {
  return (process.env.PATH ?? "").split(delimiter).some((d) => d && existsSync(join(d, name)));
}

/** The two tarballs: from STOW_DIST_DIR, or packed now into `into`. */
function tarballs(into) {
  const platformName = `chester-hill-solutions-stow-s3-${PLATFORM}-${main.version}.tgz`;
  const mainName = `chester-hill-solutions-stow-s3-${main.version}.tgz`;
  const dist = process.env.STOW_DIST_DIR;
  if (dist) {
    const found = { main: join(resolve(dist), mainName), platform: join(resolve(dist), platformName) };
    for (const f of Object.values(found)) assert.ok(existsSync(f), `${f} is missing: run make dist`);
    return found;
  }
  const binary = process.env.STOW_BIN || join(REPO, "target", "debug", "stow-s3");
  assert.ok(existsSync(binary), `${binary} is missing: cargo build --bin stow-s3`);
  const args = [join(TS, "scripts", "pack.mjs"), "--binary", binary, "--out", into];
  if (onPath("strip")) args.push("--strip");
  return JSON.parse(execFileSync(process.execPath, args, { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] }));
}

/**
 * npm install --offline of the tarballs, plus @aws-sdk/client-s3 at the
 * version clients/typescript's lock holds: its entries of that lock are
 * copied into the fresh directory's lock, so npm takes the SDK's tarballs
 * from its cache (filled by `npm ci` there) and never asks the registry.
 * Returns whether the SDK was installed (without a cache it is left out and
 * the session goes through the package's own helpers only).
 */
function npmInstall(dir, files) {
  const lock = JSON.parse(readFileSync(join(TS, "package-lock.json"), "utf8"));
  const sdk = lock.packages["node_modules/@aws-sdk/client-s3"]?.version;
  const npm = (args) =>
    spawnSync("npm", ["install", "--offline", "--no-audit", "--no-fund", "--loglevel=error", ...args], {
      cwd: dir,
      encoding: "utf8",
      timeout: 300_000,
    });
  if (sdk !== undefined) {
    const pkg = { name: "stow-s3-install-test", private: true, dependencies: { "@aws-sdk/client-s3": sdk } };
    const packages = { "": { name: pkg.name, dependencies: pkg.dependencies } };
    for (const [k, v] of Object.entries(lock.packages)) {
      if (k === "") continue;
      const { dev: _dev, devOptional: _devOptional, ...entry } = v;
      packages[k] = entry; // what the SDK does not need npm prunes as extraneous
    }
    writeFileSync(join(dir, "package.json"), JSON.stringify(pkg, null, 2));
    writeFileSync(join(dir, "package-lock.json"), JSON.stringify({ name: pkg.name, lockfileVersion: 3, requires: true, packages }, null, 2));
    const r = npm([files.main, files.platform]);
    if (r.status === 0) return { sdk: true, log: r.stderr };
    rmSync(join(dir, "package-lock.json"), { force: true });
    rmSync(join(dir, "node_modules"), { recursive: true, force: true });
  }
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "stow-s3-install-test", private: true }, null, 2));
  const r = npm([files.main, files.platform]);
  assert.equal(r.status, 0, `npm install --offline failed:\n${r.stdout}\n${r.stderr}`);
  return { sdk: false, log: r.stderr };
}

// Run in the install directory: only the installed package, by its name.
const PROBE = `
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { openStow, resolveStowBinaryDetailed, VERSION } from "@chester-hill-solutions/stow-s3";
import { prepareWorkspace, checkpointWorkspace, diffWorkspaces } from "@chester-hill-solutions/stow-s3/workspace";

const out = { found: resolveStowBinaryDetailed(), version: VERSION };
let S3 = null;
try { S3 = await import("@aws-sdk/client-s3"); } catch {}

const stow = await openStow();
try {
  out.bucket = stow.bucket;
  out.health = (await (await fetch(stow.endpoint + "/_stow/health")).json()).status;
  out.binaryVersion = stow.ready.binaryVersion;
  if (S3) {
    const s3 = new S3.S3Client(stow.awsSdkV3Config());
    await s3.send(new S3.PutObjectCommand({ Bucket: stow.bucket, Key: "hello.txt", Body: "hello from the tarball" }));
    const got = await s3.send(new S3.GetObjectCommand({ Bucket: stow.bucket, Key: "hello.txt" }));
    out.object = await got.Body.transformToString();
    s3.destroy();
  }
  out.reset = await stow.reset();
} finally {
  await stow.close();
}

const dir = join(process.cwd(), "scenario");
mkdirSync(join(dir, "src"), { recursive: true });
writeFileSync(join(dir, "src", "seed.txt"), "seed");
const registryDir = join(dir, "registry");
const ws = await prepareWorkspace({
  version: 1, root: join(dir, "task"), registry_dir: registryDir, inputs: [{ source: join(dir, "src"), destination: "." }],
});
const cp1 = await checkpointWorkspace(ws.workspace_id, { registryDir });
writeFileSync(join(ws.root, "notes.txt"), "agent output");
const cp2 = await checkpointWorkspace({ id: ws.workspace_id, registryDir, parent: cp1.checkpoint_id });
const diff = await diffWorkspaces(cp1.checkpoint_id, cp2.checkpoint_id, { registryDir });
out.changes = diff.changes.map((c) => c.kind + " " + c.path);
console.log(JSON.stringify(out));
`;

test("the npm tarballs install offline and run with no repository, STOW_BIN or PATH", { timeout: 600_000 }, async (t) => {
  const root = mkdtempSync(join(tmpdir(), "stow-s3-npm-install-"));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  assert.ok(!realpathSync(root).startsWith(REPO + "/"), "the install directory must be outside the repository");
  const started = Date.now();
  const files = tarballs(join(root, "tarballs"));
  const packed = Date.now();
  const app = join(root, "app");
  mkdirSync(app);
  const { sdk, log } = npmInstall(app, files);
  t.diagnostic(`pack ${packed - started} ms, npm install ${Date.now() - packed} ms, AWS SDK ${sdk ? "installed" : "not in the npm cache: package helpers only"}`);
  if (log.trim()) t.diagnostic(log.trim());

  const installed = join(app, "node_modules", "@chester-hill-solutions");
  assert.deepEqual(readdirSync(installed).sort(), ["stow-s3", `stow-s3-${PLATFORM}`]);
  const bin = join(installed, `stow-s3-${PLATFORM}`, "bin", "stow-s3");
  assert.equal(execFileSync(bin, ["--version"], { encoding: "utf8" }).trim(), `stow-s3 ${main.version}`);

  writeFileSync(join(app, "probe.mjs"), PROBE);
  const home = join(root, "home");
  const tmp = join(root, "tmp");
  mkdirSync(home);
  mkdirSync(tmp);
  const run = spawnSync(process.execPath, ["probe.mjs"], {
    cwd: app,
    env: { PATH: "", HOME: home, TMPDIR: tmp }, // no STOW_BIN, no PATH, nothing of ours
    encoding: "utf8",
    timeout: 300_000,
  });
  assert.equal(run.status, 0, `probe failed:\n${run.stdout}\n${run.stderr}`);
  const got = JSON.parse(run.stdout.trim().split("\n").at(-1));

  assert.equal(got.found.source, "package");
  assert.equal(got.found.path, join(realpathSync(app), "node_modules", "@chester-hill-solutions", `stow-s3-${PLATFORM}`, "bin", "stow-s3"));
  assert.equal(got.version, main.version);
  assert.equal(got.binaryVersion, main.version);
  assert.equal(got.health, "ok");
  assert.match(got.bucket, /^stow-session-[0-9a-f]{16}$/);
  if (sdk) {
    assert.equal(got.object, "hello from the tarball");
    assert.equal(got.reset.objects, 1);
  }
  assert.equal(got.reset.reset, true);
  assert.deepEqual(got.changes, ["added notes.txt"]);
});
