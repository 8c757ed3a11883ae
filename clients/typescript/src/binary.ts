import { accessSync, constants, statSync } from "node:fs";
import { delimiter, dirname, isAbsolute, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The binary's file name on this platform. */
export const STOW_BINARY_NAME = process.platform === "win32" ? "stow-s3.exe" : "stow-s3";

/** Where a resolved binary came from. */
export type BinarySource = "STOW_BIN" | "repository" | "PATH";

export interface ResolvedBinary {
  path: string;
  source: BinarySource;
}

export interface ResolveOptions {
  /** Environment to read `STOW_BIN` and `PATH` from (default `process.env`). */
  env?: NodeJS.ProcessEnv;
  /** Directory to start the walk up for `target/{release,debug}` (default: this package's directory). */
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
        "\nSet STOW_BIN to the binary, build it (cargo build --bin stow-s3), or put it on PATH.",
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
 * Find the `stow-s3` binary, reporting where it came from: `STOW_BIN` (which,
 * when set, must name an executable file), then the repository's build output
 * (`target/release/stow-s3` or `target/debug/stow-s3` — the newer when both
 * exist — in this package's directory and each directory above it), then `PATH`.
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

  let dir = resolve(options.searchFrom ?? packageDir());
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
