// How the workspace helpers run the CLI: `stow-s3 workspace <verb>` (or
// `stow-s3 remote <verb>`; no shell), stdout decoded as one JSON object, a
// failure thrown as WorkspaceCommandError; and the argv building they share.
// Internal: the public names are exported from ./workspace.js (the package's
// `./workspace` subpath), which with ./attached.js is its only user.
import { spawn } from "node:child_process";

import { resolveStowBinary } from "./binary.js";

/** A JSON object as the CLI prints it. */
export type WorkspaceJSON = { [key: string]: unknown };

/** Largest stdout accepted from one command. */
export const MAX_STDOUT_BYTES = 16 * 1024 * 1024;

/** How a command runs (not forwarded to the CLI). */
export interface CommandOptions {
  /** Environment of the child (default `process.env`). */
  env?: NodeJS.ProcessEnv;
  /** Working directory of the child. */
  cwd?: string;
  /** Binary to run (default: {@link resolveStowBinary}). */
  binary?: string;
  signal?: AbortSignal;
}

/** Registry selection, forwarded as `--registry-dir` / `--team` only when given. */
export interface RegistryOptions extends CommandOptions {
  registryDir?: string;
  team?: string;
}

/** Payload bounds, forwarded only when given. */
export interface BoundOptions {
  maxBytes?: number;
  maxFiles?: number;
}

/** A workspace (or remote) command failed: non-zero exit, or output that is not one JSON object. */
export class WorkspaceCommandError extends Error {
  /** The full argv run (binary first). */
  readonly command: string[];
  /** Exit status (null when killed by a signal or when the output was undecodable after exit 0). */
  readonly exitCode: number | null;
  readonly stderr: string;
  readonly stdout: string;
  /**
   * The machine code from the CLI's `{"error": {"code", …}}` document (`usage` for a usage
   * error); for a result document printed with exit 1 (a rewind that left paths alone), the
   * code its stderr ends with (`workspace_changed`); else null.
   */
  readonly code: string | null;
  /** The whole JSON document printed on stdout, if any (for keyed checkpoints: the envelope; for a rewind with conflicts: its result). */
  readonly document: WorkspaceJSON | null;
  constructor(init: {
    message: string;
    command: string[];
    exitCode: number | null;
    stderr: string;
    stdout: string;
    code: string | null;
    document: WorkspaceJSON | null;
  }) {
    super(init.message);
    this.name = "WorkspaceCommandError";
    this.command = init.command;
    this.exitCode = init.exitCode;
    this.stderr = init.stderr;
    this.stdout = init.stdout;
    this.code = init.code;
    this.document = init.document;
  }
}

export function isObject(v: unknown): v is WorkspaceJSON {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Decode a command's stdout: exactly one JSON object (throws TypeError otherwise). */
export function decodeWorkspaceJSON(text: string | Buffer): WorkspaceJSON {
  const s = typeof text === "string" ? text : text.toString("utf8");
  let doc: unknown;
  try {
    doc = JSON.parse(s);
  } catch (err) {
    throw new TypeError(`workspace output is not JSON: ${(err as Error).message}`);
  }
  if (!isObject(doc)) throw new TypeError("workspace output is not a JSON object");
  return doc;
}

/** The machine code a CLI diagnostic ends with: `… (workspace_changed)`. */
function taggedCode(line: string): string | null {
  const m = /\(([a-z_]+)\)$/.exec(line);
  return m ? m[1]! : null;
}

function lastLine(text: string): string {
  const lines = text.trim().split("\n").filter((l) => l.trim() !== "");
  return lines.length > 0 ? lines[lines.length - 1]!.trim() : "";
}

/** The command group most verbs live under; `[]` runs a top-level command (`remote …`). */
const WORKSPACE: readonly string[] = ["workspace"];

/**
 * Run `stow-s3 workspace <args…>` (no shell) and decode stdout as one JSON
 * object. A non-zero exit throws {@link WorkspaceCommandError} carrying the
 * CLI's error code and message.
 */
export async function runWorkspaceCommand(args: readonly string[], options: CommandOptions = {}): Promise<WorkspaceJSON> {
  return runCommand(WORKSPACE, args, options);
}

/** Run `stow-s3 <prefix…> <args…>` and decode stdout as one JSON object. */
export async function runCommand(prefix: readonly string[], args: readonly string[], options: CommandOptions): Promise<WorkspaceJSON> {
  return runRaw(args, options, prefix).then(({ stdout }) => decodeOrThrow(stdout, options, args, prefix));
}

/** `stow-s3 workspace checkpoint`, `stow-s3 remote add`: how messages name a command. */
function label(prefix: readonly string[], args: readonly string[]): string {
  return ["stow-s3", ...[...prefix, ...args].slice(0, 2)].join(" ");
}

function decodeOrThrow(stdout: string, options: CommandOptions, args: readonly string[], prefix: readonly string[]): WorkspaceJSON {
  try {
    return decodeWorkspaceJSON(stdout);
  } catch (err) {
    throw new WorkspaceCommandError({
      message: (err as Error).message,
      command: [options.binary ?? "stow-s3", ...prefix, ...args],
      exitCode: 0,
      stderr: "",
      stdout,
      code: null,
      document: null,
    });
  }
}

/** Run `stow-s3 <prefix…> <args…>`; resolve with its stdout on exit 0, throw WorkspaceCommandError otherwise. */
export function runRaw(
  args: readonly string[],
  options: CommandOptions,
  prefix: readonly string[] = WORKSPACE,
): Promise<{ stdout: string; stderr: string }> {
  const binary = options.binary ?? resolveStowBinary({ env: options.env });
  const command = [binary, ...prefix, ...args];
  const name = label(prefix, args);
  return new Promise((resolvePromise, rejectPromise) => {
    const child = spawn(binary, command.slice(1), {
      stdio: ["ignore", "pipe", "pipe"],
      env: options.env ?? process.env,
      cwd: options.cwd,
      shell: false,
      signal: options.signal,
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let outBytes = 0;
    let overflow = false;
    child.stdout!.on("data", (c: Buffer) => {
      outBytes += c.length;
      if (outBytes > MAX_STDOUT_BYTES) {
        if (!overflow) {
          overflow = true;
          child.kill("SIGKILL");
        }
        return;
      }
      out.push(c);
    });
    child.stderr!.on("data", (c: Buffer) => err.push(c));
    child.on("error", rejectPromise);
    child.on("close", (exitCode, signal) => {
      const stdout = Buffer.concat(out).toString("utf8");
      const stderr = Buffer.concat(err).toString("utf8");
      if (overflow) {
        rejectPromise(
          new WorkspaceCommandError({
            message: `${name}: stdout exceeds ${MAX_STDOUT_BYTES} bytes`,
            command, exitCode, stderr, stdout: "", code: null, document: null,
          }),
        );
        return;
      }
      if (exitCode === 0) {
        resolvePromise({ stdout, stderr });
        return;
      }
      let document: WorkspaceJSON | null = null;
      try {
        document = decodeWorkspaceJSON(stdout);
      } catch {
        document = null;
      }
      const error = document && isObject(document.error) ? document.error : null;
      const code =
        error && typeof error.code === "string"
          ? error.code
          : exitCode === 2
            ? "usage"
            : // A result printed with exit 1 (a rewind with conflicts): stderr ends with its code.
              (document && taggedCode(lastLine(stderr))) || null;
      const detail =
        (error && typeof error.message === "string" && error.message) ||
        lastLine(stderr) ||
        (signal ? `killed by ${signal}` : `exit status ${exitCode}`);
      rejectPromise(
        new WorkspaceCommandError({
          message: `${name} failed${code ? ` (${code})` : ""}: ${detail}`,
          command, exitCode, stderr, stdout, code, document,
        }),
      );
    });
  });
}

// ---- argv building -------------------------------------------------------

export type Flags = Array<[flag: string, value: string | number | boolean | undefined | null]>;

export function argv(verb: string[], flags: Flags): string[] {
  const out = [...verb];
  for (const [flag, value] of flags) {
    if (value === undefined || value === null || value === false) continue;
    if (value === true) {
      out.push(flag);
      continue;
    }
    if (typeof value === "number" && (!Number.isSafeInteger(value) || value < 0)) {
      throw new RangeError(`${flag} must be a non-negative integer`);
    }
    out.push(flag, String(value));
  }
  return out;
}

export const registry = (o: RegistryOptions): Flags => [
  ["--registry-dir", o.registryDir],
  ["--team", o.team],
];
export const bounds = (o: BoundOptions): Flags => [
  ["--max-bytes", o.maxBytes],
  ["--max-files", o.maxFiles],
];

/** A `--timeout`: a duration string (`"30s"`, `"10m"`) as is, or a positive number of seconds. */
export function duration(timeout: string | number | undefined): string | undefined {
  if (timeout === undefined || timeout === null || typeof timeout === "string") return timeout ?? undefined;
  if (!Number.isFinite(timeout) || timeout <= 0) throw new RangeError("timeout must be a positive number of seconds");
  return Number.isInteger(timeout) ? `${timeout}s` : `${Math.max(1, Math.round(timeout * 1000))}ms`;
}

/** Positional operands, after `--` (a value starting with `-` is not taken for a flag). */
export const operands = (...values: string[]): string[] => ["--", ...values];

// ---- call shapes ---------------------------------------------------------
//
// Helpers with leading operands (an ID, a checkpoint, a path) take them
// either positionally, followed by an options object (`checkpointWorkspace(id,
// {parent})`), or as fields of one options object (`checkpointWorkspace({id,
// parent})`, the shape of the reference's documentation). The overloads type
// both; `operandsOf` tells them apart at run time.

/** One leading operand: its name, and whether the call must supply it. */
export type Operand = readonly [name: string, required: boolean];

function describe(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  return typeof v === "object" ? "an object" : `a ${typeof v}`;
}

/**
 * Split a helper's arguments into its operands and its options. A plain
 * object first argument is the options-object form (operands are its fields;
 * nothing may follow it); otherwise the first `spec.length` arguments are the
 * operands (strings, or undefined where optional) and the next one, if any,
 * the options. Anything else is a TypeError naming the helper — never a
 * stringified object passed on to the CLI.
 */
export function operandsOf<O extends object>(
  helper: string,
  args: readonly unknown[],
  spec: readonly Operand[],
): { values: Record<string, string | undefined>; options: O } {
  const values: Record<string, string | undefined> = {};
  let options: O;
  if (isObject(args[0])) {
    if (args.length > 1 && args.slice(1).some((a) => a !== undefined)) {
      throw new TypeError(`${helper}: pass the ${spec.map(([n]) => n).join(", ")} and options either positionally or as one options object, not both`);
    }
    options = args[0] as O;
    for (const [name] of spec) values[name] = (args[0] as WorkspaceJSON)[name] as string | undefined;
  } else {
    for (const [i, [name]] of spec.entries()) values[name] = args[i] as string | undefined;
    const rest = args[spec.length];
    if (rest !== undefined && !isObject(rest)) {
      throw new TypeError(`${helper}: options must be an object, not ${describe(rest)}`);
    }
    if (args.length > spec.length + 1 && args.slice(spec.length + 1).some((a) => a !== undefined)) {
      throw new TypeError(`${helper}: takes at most ${spec.length + 1} arguments`);
    }
    options = (rest ?? {}) as O;
  }
  for (const [name, required] of spec) {
    const v = values[name];
    if (v === undefined && !required) continue;
    // The CLI judges the value; here only that it is one.
    if (typeof v !== "string") throw new TypeError(`${helper}: ${name} must be a string, not ${describe(v)}`);
  }
  return { values, options };
}
