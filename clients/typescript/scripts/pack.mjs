#!/usr/bin/env node
// Packs the npm tarballs users install: the platform package for one
// platform (its manifest from platforms/<platform>/package.json, the given
// binary copied in as bin/stow-s3) and the main package with
// `optionalDependencies` naming every platform package at the same version.
//
//   node scripts/pack.mjs --binary PATH --out DIR [--platform linux-x64] [--strip]
//
// The main package's optionalDependencies are written here, into a staging
// copy, and not kept in package.json: the platform packages are not on the
// registry while developing, and `npm ci` refuses a package.json whose
// dependencies its lock file does not list (napi-rs's `napi prepublish` adds
// them at publish time for the same reason). `npm run build` must have run
// (dist/ is packed as is). `--strip` strips a copy of the binary first
// (`strip`; the dist profile's binary is already stripped). Prints one JSON
// document: {"main": tarball, "platform": tarball, "version"}.
import { execFileSync } from "node:child_process";
import { chmodSync, copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const PKG = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const PLATFORMS = join(PKG, "platforms");

const { values } = parseArgs({
  options: {
    binary: { type: "string" },
    out: { type: "string" },
    platform: { type: "string", default: `${process.platform}-${process.arch}` },
    strip: { type: "boolean", default: false },
  },
});
if (!values.binary || !values.out) {
  console.error("usage: node scripts/pack.mjs --binary PATH --out DIR [--platform KEY] [--strip]");
  process.exit(2);
}

const readJSON = (p) => JSON.parse(readFileSync(p, "utf8"));
const main = readJSON(join(PKG, "package.json"));
const keys = readdirSync(PLATFORMS, { withFileTypes: true }).filter((d) => d.isDirectory()).map((d) => d.name).sort();
const manifests = Object.fromEntries(keys.map((k) => [k, readJSON(join(PLATFORMS, k, "package.json"))]));
for (const [k, m] of Object.entries(manifests)) {
  if (m.version !== main.version) throw new Error(`platforms/${k}: version ${m.version} is not the main package's ${main.version}`);
}
const platform = manifests[values.platform];
if (platform === undefined) throw new Error(`no platform package ${values.platform} (have: ${keys.join(", ")})`);
if (!existsSync(join(PKG, "dist", "index.js"))) throw new Error("dist/ is not built: run `npm run build` first");

const binary = resolve(values.binary);
const out = resolve(values.out);
mkdirSync(out, { recursive: true });
const stage = mkdtempSync(join(tmpdir(), "stow-s3-pack-"));

function npmPack(dir) {
  // --json: the tarball's file name; npm writes it into --pack-destination.
  const text = execFileSync("npm", ["pack", "--json", "--pack-destination", out], { cwd: dir, encoding: "utf8" });
  return join(out, JSON.parse(text)[0].filename);
}

try {
  // The platform package: manifest, binary, a README.
  const pdir = join(stage, "platform");
  const exe = values.platform.startsWith("win32-") ? "stow-s3.exe" : "stow-s3";
  mkdirSync(join(pdir, "bin"), { recursive: true });
  writeFileSync(join(pdir, "package.json"), JSON.stringify(platform, null, 2) + "\n");
  const target = join(pdir, "bin", exe);
  if (values.strip) execFileSync("strip", ["-o", target, binary]);
  else copyFileSync(binary, target);
  chmodSync(target, 0o755);
  if (values.platform === `${process.platform}-${process.arch}`) {
    // The binary must be the version it is packed as.
    const reported = execFileSync(target, ["--version"], { encoding: "utf8" }).trim();
    if (reported !== `stow-s3 ${main.version}`) throw new Error(`${binary} reports "${reported}", not stow-s3 ${main.version}`);
  }
  writeFileSync(
    join(pdir, "README.md"),
    `# ${platform.name}\n\nThe \`stow-s3\` binary (${platform.version}) for ${values.platform}, in \`bin/${exe}\`.\n` +
      `Install [${main.name}](https://www.npmjs.com/package/${main.name}) instead: it lists this package in\n` +
      "`optionalDependencies`, npm installs the one matching your platform, and the package runs its binary.\n",
  );
  const platformTarball = npmPack(pdir);

  // The main package: package.json with the optional dependencies, README, dist/.
  const mdir = join(stage, "main");
  mkdirSync(mdir);
  const packed = { ...main, optionalDependencies: Object.fromEntries(Object.values(manifests).map((m) => [m.name, m.version])) };
  delete packed.scripts; // the build and test scripts need the repository
  writeFileSync(join(mdir, "package.json"), JSON.stringify(packed, null, 2) + "\n");
  copyFileSync(join(PKG, "README.md"), join(mdir, "README.md"));
  cpSync(join(PKG, "dist"), join(mdir, "dist"), { recursive: true });
  const mainTarball = npmPack(mdir);

  console.log(JSON.stringify({ main: mainTarball, platform: platformTarball, version: main.version }, null, 2));
} finally {
  rmSync(stage, { recursive: true, force: true });
}
