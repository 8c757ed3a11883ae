import { accessSync, constants, readFileSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { delimiter, dirname, isAbsolute, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * This package's version (its package.json's `version`): the same as the
 * platform packages' and `stow-s3 --version`'s (one workspace version,
 * checked by tests/packaging/version.test.mjs).
 */
export const VERSION: string = (
  JSON.parse(readFileSync(join(dirname(fileURLToPath(import.meta.url)), "..", "package.json"), "utf8")) as {
    version: string;
  }
).version;

/** The binary's file name on this platform. */
export const STOW_BINARY_NAME = process.platform === "win32" ? "stow-s3.exe" : "stow-s3";

/** Where a resolved binary came from. */
export type BinarySource = "STOW_BIN" | "repository" | "package" | "PATH";

/**
 * The per-platform package that carries the binary on this platform
 * (`@chester-hill-solutions/stow-s3-<platform>-<arch>`, e.g. `…-linux-x64`),
 * installed through this package's `optionalDependencies`: npm installs only
 * the one whose `os`/`cpu`/`libc` match. The binary is its `bin/stow-s3`
 * (`bin/stow-s3.exe` on Windows).
 */
export function platformPackageName(platform: string = process.platform, arch: string = process.arch): string {
  return `@chester-hill-solutions/stow-s3-${platform}-${arch}`;
}

export interface ResolvedBinary {
  path: string;
  source: BinarySource;
}

export interface ResolveOptions {
  /** Environment to read `STOW_BIN` and `PATH` from (default `process.env`). */
  env?: NodeJS.ProcessEnv;
  /**
   * Directory to start from (default: this package's directory): the walk up
   * for `target/{release,debug}`, and the `node_modules` lookup of the
   * platform package.
   */
  searchFrom?: string;
}

/** No usable `stow-s3` binary was found; `tried` lists every place looked at, in order. */
export class StowBinaryNotFoundError extends Error {
  readonly code = "binary_not_found";
  readonly tried: string[];
  constructor(tried: string[]) {
    super(
      "stow-s3 binary not found; tried:\n" +
        tried.map((t) => `  - ${t}`).join("\n") +
        "\nInstall the package with its optional dependencies (npm install, without --omit=optional), " +
        "set STOW_BIN to the binary, build it (cargo build --bin stow-s3), or put it on PATH.",
    );
    this.name = "StowBinaryNotFoundError";
    this.tried = tried;
  }
}

function isExecutableFile(path: string): boolean {
  try {
    if (!statSync(path).isFile()) return false;
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** The directory of this package (the one holding package.json; dist/ is one below). */
export function packageDir(): string {
  return resolve(dirname(fileURLToPath(import.meta.url)), "..");
}

/**
 * The binary of the installed platform package, found as Node finds a
 * dependency: `require.resolve("<platform package>/package.json")` from `from`.
 * `undefined` when the package is not installed (another platform, `--omit=optional`).
 */
function platformPackageBinary(from: string, name: string): string | undefined {
  let manifest: string;
  try {
    manifest = createRequire(join(from, "package.json")).resolve(`${name}/package.json`);
  } catch {
    return undefined;
  }
  return join(dirname(manifest), "bin", STOW_BINARY_NAME);
}

/**
 * Find the `stow-s3` binary, reporting where it came from, in this order:
 * 1. `STOW_BIN` (which, when set, must name an executable file);
 * 2. the repository's build output (`target/release/stow-s3` or
 *    `target/debug/stow-s3` — the newer when both exist — in this package's
 *    directory and each directory above it);
 * 3. the installed platform package's `bin/stow-s3` ({@link platformPackageName},
 *    an optional dependency of this package);
 * 4. `PATH`.
 */
export function resolveStowBinaryDetailed(options: ResolveOptions = {}): ResolvedBinary {
  const env = options.env ?? process.env;
  const tried: string[] = [];

  const fromEnv = env.STOW_BIN;
  if (fromEnv !== undefined && fromEnv !== "") {
    const path = resolve(fromEnv);
    if (isExecutableFile(path)) return { path, source: "STOW_BIN" };
    // An explicit choice that does not work is not silently replaced by another binary.
    throw new StowBinaryNotFoundError([`STOW_BIN=${fromEnv} (not an executable file)`]);
  }
  tried.push("STOW_BIN (not set)");

  const start = resolve(options.searchFrom ?? packageDir());
  let dir = start;
  for (;;) {
    // Both profiles built: the newer one (a stale release build must not shadow today's debug build).
    const found: Array<{ path: string; mtime: number }> = [];
    for (const profile of ["release", "debug"]) {
      const candidate = join(dir, "target", profile, STOW_BINARY_NAME);
      if (isExecutableFile(candidate)) found.push({ path: candidate, mtime: statSync(candidate).mtimeMs });
      else tried.push(candidate);
    }
    if (found.length > 0) {
      found.sort((a, b) => b.mtime - a.mtime);
      return { path: found[0]!.path, source: "repository" };
    }
    const parent = dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }

  const pkg = platformPackageName();
  const fromPackage = platformPackageBinary(start, pkg);
  if (fromPackage !== undefined && isExecutableFile(fromPackage)) return { path: fromPackage, source: "package" };
  tried.push(fromPackage === undefined ? `${pkg} (not installed)` : `${fromPackage} (not an executable file)`);

  const pathDirs = (env.PATH ?? "").split(delimiter).filter((d) => d !== "" && isAbsolute(d));
  for (const d of pathDirs) {
    const candidate = join(d, STOW_BINARY_NAME);
    if (isExecutableFile(candidate)) return { path: candidate, source: "PATH" };
  }
  tried.push(pathDirs.length > 0 ? `PATH (${pathDirs.join(delimiter)})` : "PATH (empty)");

  throw new StowBinaryNotFoundError(tried);
}

/** The path of the `stow-s3` binary (see {@link resolveStowBinaryDetailed} for the order). */
export function resolveStowBinary(options: ResolveOptions = {}): string {
  return resolveStowBinaryDetailed(options).path;
}

/** Whether a binary can be found (never throws). */
export function stowBinaryAvailable(options: ResolveOptions = {}): boolean {
  try {
    resolveStowBinaryDetailed(options);
    return true;
  } catch {
    return false;
  }
}
