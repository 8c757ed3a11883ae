import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { isAbsolute, join, resolve as resolvePath } from "node:path";
import type { ChildProcess } from "node:child_process";

import { resolveStowBinary } from "./binary.js";
import { spawnReady, stopChild, unrefChild } from "./process.js";

export { StowBinaryNotFoundError, resolveStowBinary } from "./binary.js";
export { StowStartError } from "./process.js";

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
  /** The machine code from the CLI's `{"error": {"code", …}}` document (`usage` for a usage error, else null). */
  readonly code: string | null;
  /** The whole JSON document printed on stdout, if any (for keyed checkpoints: the envelope). */
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

function isObject(v: unknown): v is WorkspaceJSON {
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
async function runCommand(prefix: readonly string[], args: readonly string[], options: CommandOptions): Promise<WorkspaceJSON> {
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
function runRaw(
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
      const code = error && typeof error.code === "string" ? error.code : exitCode === 2 ? "usage" : null;
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

type Flags = Array<[flag: string, value: string | number | boolean | undefined | null]>;

function argv(verb: string[], flags: Flags): string[] {
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

const registry = (o: RegistryOptions): Flags => [
  ["--registry-dir", o.registryDir],
  ["--team", o.team],
];
const bounds = (o: BoundOptions): Flags => [
  ["--max-bytes", o.maxBytes],
  ["--max-files", o.maxFiles],
];

/** A `--timeout`: a duration string (`"30s"`, `"10m"`) as is, or a positive number of seconds. */
function duration(timeout: string | number | undefined): string | undefined {
  if (timeout === undefined || timeout === null || typeof timeout === "string") return timeout ?? undefined;
  if (!Number.isFinite(timeout) || timeout <= 0) throw new RangeError("timeout must be a positive number of seconds");
  return Number.isInteger(timeout) ? `${timeout}s` : `${Math.max(1, Math.round(timeout * 1000))}ms`;
}

/** Positional operands, after `--` (a value starting with `-` is not taken for a flag). */
const operands = (...values: string[]): string[] => ["--", ...values];

// ---- verbs ---------------------------------------------------------------

/**
 * The CLI resolves a manifest's relative paths against the manifest's
 * directory; an in-memory manifest has none, so its relative `root`,
 * `registry_dir` and input/repository `source`s are made absolute against `base`.
 */
function absoluteManifest(manifest: WorkspaceJSON, base: string): WorkspaceJSON {
  const abs = (v: unknown) => (typeof v === "string" && v !== "" && !isAbsolute(v) ? resolvePath(base, v) : v);
  const out: WorkspaceJSON = { ...manifest };
  if ("root" in out) out.root = abs(out.root);
  if ("registry_dir" in out) out.registry_dir = abs(out.registry_dir);
  for (const list of ["inputs", "repositories"]) {
    const items = out[list];
    if (Array.isArray(items)) {
      out[list] = items.map((item) => (isObject(item) && "source" in item ? { ...item, source: abs(item.source) } : item));
    }
  }
  return out;
}

/**
 * `prepare --manifest`: a path to a version-1 task manifest, or the manifest
 * itself (written to a private temp file for the call; its relative paths
 * are taken relative to `options.cwd`, default the current directory).
 */
export async function prepareWorkspace(manifest: string | WorkspaceJSON, options: CommandOptions = {}): Promise<WorkspaceJSON> {
  if (typeof manifest === "string") return runWorkspaceCommand(["prepare", "--manifest", manifest], options);
  const dir = mkdtempSync(join(tmpdir(), "stow-manifest-"));
  try {
    const path = join(dir, "task.json");
    writeFileSync(path, JSON.stringify(absoluteManifest(manifest, options.cwd ?? process.cwd())), { mode: 0o600 });
    return await runWorkspaceCommand(["prepare", "--manifest", path], options);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** `list`: the workspaces of a registry partition. */
export async function listWorkspaces(options: RegistryOptions = {}): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(argv(["list"], registry(options)), options);
}

export interface ResumeOptions extends RegistryOptions {
  id?: string;
  /** A handoff document (not both with id, registryDir or team). */
  handoffPath?: string;
}

/** `resume --id` or `resume --handoff`. */
export async function resumeWorkspace(options: ResumeOptions): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(
    argv(["resume"], [["--id", options.id], ["--handoff", options.handoffPath], ...registry(options)]),
    options,
  );
}

export interface HandoffOptions extends RegistryOptions {
  checkpointId?: string;
  /** Export the checkpoint to this new archive (portable, version-2 handoff). */
  archive?: string;
  /** Push the checkpoint to this remote and name it in the document (portable, version-2; not with `archive`). */
  remote?: string;
  /** Deadline of the push: `"30s"`, `"10m"`, or seconds. */
  timeout?: string | number;
  /** Write the document here; it is read back and returned. */
  output?: string;
}

/** `handoff --id`: the handoff document (with `output`, the written file read back). */
export async function handoffWorkspace(id: string, options: HandoffOptions = {}): Promise<WorkspaceJSON> {
  const args = argv(
    ["handoff", "--id", id],
    [
      ["--checkpoint-id", options.checkpointId],
      ["--archive", options.archive],
      ["--remote", options.remote],
      ["--timeout", duration(options.timeout)],
      ["--output", options.output],
      ...registry(options),
    ],
  );
  if (options.output === undefined) return runWorkspaceCommand(args, options);
  await runRaw(args, options);
  return decodeWorkspaceJSON(readFileSync(options.output));
}

export interface AdoptOptions extends RegistryOptions, BoundOptions {
  handoffPath: string;
  root: string;
  includeSensitive?: boolean;
  /** Deadline of the remote traffic when the handoff names a remote (`"30s"` or seconds). */
  timeout?: string | number;
}

/**
 * `adopt --handoff --root`: verify, import and restore a portable handoff as
 * a new workspace (a handoff naming a remote pulls from it: pass its
 * credentials in `env`).
 */
export async function adoptWorkspaceHandoff(options: AdoptOptions): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(
    argv(
      ["adopt", "--handoff", options.handoffPath, "--root", options.root],
      [
        ["--timeout", duration(options.timeout)],
        ...bounds(options),
        ["--include-sensitive", options.includeSensitive],
        ...registry(options),
      ],
    ),
    options,
  );
}

export interface CheckpointOptions extends RegistryOptions, BoundOptions {
  /** Stored with the checkpoint, shown in its result and in {@link workspaceLog} (at most 4096 bytes of UTF-8). */
  message?: string;
  parent?: string;
  includeSensitive?: boolean;
  /** Capture the workspace bucket's objects and buckets too (v2). */
  portable?: boolean;
  /** Ignore `.stowignore`. */
  noIgnore?: boolean;
  /** Keyed capture: replays, never repeats. Needs `timeout`. */
  requestKey?: string;
  /** Deadline of a keyed capture, e.g. `"30s"` (a number is seconds). */
  timeout?: string | number;
}

/**
 * `checkpoint [--id]`. With `requestKey` the result is the keyed envelope
 * (`{version, result: {outcome, checkpoint, replayed}}`); a keyed capture that
 * fails throws {@link WorkspaceCommandError} whose `document` is the envelope.
 *
 * With `id` undefined the CLI captures the workspace holding `options.cwd`
 * (default: the current directory), whose identity names its registry and
 * team; outside any workspace that is a `usage` error (exit 2).
 */
export async function checkpointWorkspace(id?: string, options: CheckpointOptions = {}): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(
    argv(
      ["checkpoint"],
      [
        ["--id", id],
        ["--message", options.message],
        ["--parent", options.parent],
        ...bounds(options),
        ["--include-sensitive", options.includeSensitive],
        ["--portable", options.portable],
        ["--no-ignore", options.noIgnore],
        ["--request-key", options.requestKey],
        ["--timeout", duration(options.timeout)],
        ...registry(options),
      ],
    ),
    options,
  );
}

export interface ResolveCheckpointOptions extends RegistryOptions {
  /** The CLI requires one with `--resolve` (default `"30s"`; a number is seconds). */
  timeout?: string | number;
}

/** `checkpoint --id --request-key --resolve`: what happened to a keyed capture (never captures). */
export async function resolveCheckpoint(id: string, requestKey: string, options: ResolveCheckpointOptions = {}): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(
    argv(
      ["checkpoint", "--id", id, "--request-key", requestKey, "--resolve"],
      [["--timeout", duration(options.timeout ?? "30s")], ...registry(options)],
    ),
    options,
  );
}

export interface AttachOptions extends RegistryOptions {
  /** The directory to attach (default: `cwd`, else the current directory). */
  root?: string;
  /** Informational: attached workspaces are never collected. */
  ttlSeconds?: number;
  /** The bucket view's byte quota (default 64 MiB). */
  maxBytes?: number;
  /** The bucket view's object quota (default 10,000). */
  maxObjects?: number;
  /** Captures keep what git ignores too. */
  noGitignore?: boolean;
}

/**
 * `attach [--root]`: register an existing directory as a workspace in place
 * (nothing is copied; only `ROOT/.stow` is written). Resolves with the
 * prepare-shaped result (`workspace_id`, `bucket`, `root`, `base_identity`, …).
 * A refusal throws {@link WorkspaceCommandError} with a stable `code`:
 * `invalid_root`, `already_exists` (the message names the workspace),
 * `refused` (`/`, the home directory, inside or containing a workspace, the
 * registry) or `capacity_exceeded`.
 */
export async function attachWorkspace(options: AttachOptions = {}): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(
    argv(
      ["attach"],
      [
        ["--root", options.root],
        ["--ttl-seconds", options.ttlSeconds],
        ["--max-bytes", options.maxBytes],
        ["--max-objects", options.maxObjects],
        ["--no-gitignore", options.noGitignore],
        ...registry(options),
      ],
    ),
    options,
  );
}

export interface DetachOptions extends RegistryOptions {
  /** The workspace (default: the one holding `cwd`). */
  id?: string;
  /** Keep its checkpoints in the registry. */
  keepCheckpoints?: boolean;
}

/**
 * `detach [--id]`: forget an attached workspace (its record, its `.stow` and,
 * unless `keepCheckpoints`, its checkpoints); nothing else in its tree is
 * touched. A prepared workspace is refused (`refused`: use {@link destroyWorkspace}).
 */
export async function detachWorkspace(options: DetachOptions = {}): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(
    argv(["detach"], [["--id", options.id], ["--keep-checkpoints", options.keepCheckpoints], ...registry(options)]),
    options,
  );
}

export interface LogOptions extends RegistryOptions {
  /** The workspace (default: the one holding `cwd`). */
  id?: string;
  /** Checkpoints per page (1 to 1000; the CLI's default is 50). */
  limit?: number;
  /** The `next_cursor` of the previous page (of the same workspace's log). */
  cursor?: string;
}

/**
 * `log [--id]`: one page of the workspace's checkpoints, newest first:
 * `{version, workspace_id, head?, checkpoints: [{checkpoint_id, parent_id?,
 * created, files, bytes, message?, origin, head}], next_cursor?}`. A cursor
 * from another workspace's log is refused (`invalid_request`).
 */
export async function workspaceLog(options: LogOptions = {}): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(
    argv(["log"], [["--id", options.id], ["--limit", options.limit], ["--cursor", options.cursor], ...registry(options)]),
    options,
  );
}

export interface StatusOptions extends RegistryOptions {
  /** The workspace (default: the one holding `cwd`). */
  id?: string;
  /** Compare with this checkpoint instead of the head. */
  against?: string;
}

/**
 * `status [--id] [--against]`: the live tree against a checkpoint (default:
 * the head), as `diff`'s changes, with `clean` and counts; changes nothing.
 */
export async function workspaceStatus(options: StatusOptions = {}): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(
    argv(["status"], [["--id", options.id], ["--against", options.against], ...registry(options)]),
    options,
  );
}

/** `diff --from --to`. */
export async function diffWorkspaces(from: string, to: string, options: RegistryOptions = {}): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(argv(["diff", "--from", from, "--to", to], registry(options)), options);
}

/** `restore --checkpoint-id --root`: a new workspace from a checkpoint. */
export async function restoreWorkspaceCheckpoint(
  checkpointId: string,
  root: string,
  options: RegistryOptions & BoundOptions = {},
): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(
    argv(["restore", "--checkpoint-id", checkpointId, "--root", root], [...bounds(options), ...registry(options)]),
    options,
  );
}

/** `export --checkpoint-id --output`: a new gzip tar archive. */
export async function exportWorkspaceCheckpoint(
  checkpointId: string,
  output: string,
  options: RegistryOptions & BoundOptions & { includeSensitive?: boolean } = {},
): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(
    argv(
      ["export", "--checkpoint-id", checkpointId, "--output", output],
      [...bounds(options), ["--include-sensitive", options.includeSensitive], ...registry(options)],
    ),
    options,
  );
}

/** `preview --archive`: validate an archive and list it, extracting nothing. */
export async function previewWorkspaceArchive(archive: string, options: CommandOptions & BoundOptions = {}): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(argv(["preview", "--archive", archive], bounds(options)), options);
}

/** `import --archive`. */
export async function importWorkspaceCheckpoint(
  archive: string,
  options: RegistryOptions & BoundOptions & { includeSensitive?: boolean } = {},
): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(
    argv(
      ["import", "--archive", archive],
      [...bounds(options), ["--include-sensitive", options.includeSensitive], ...registry(options)],
    ),
    options,
  );
}

export interface CreateDeltaOptions extends RegistryOptions, BoundOptions {
  from: string;
  to: string;
  output: string;
  includeSensitive?: boolean;
}

/** `delta --from --to --output`. */
export async function createWorkspaceDelta(options: CreateDeltaOptions): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(
    argv(
      ["delta", "--from", options.from, "--to", options.to, "--output", options.output],
      [...bounds(options), ["--include-sensitive", options.includeSensitive], ...registry(options)],
    ),
    options,
  );
}

export interface ApplyDeltaOptions extends RegistryOptions {
  delta: string;
  base: string;
  /** The document's SHA-256, checked before it is decoded. */
  expectSHA256?: string;
  includeSensitive?: boolean;
}

/** `apply --delta --base [--expect-sha256]`: a new checkpoint, parent `base`. */
export async function applyWorkspaceDelta(options: ApplyDeltaOptions): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(
    argv(
      ["apply", "--delta", options.delta, "--base", options.base],
      [["--expect-sha256", options.expectSHA256], ["--include-sensitive", options.includeSensitive], ...registry(options)],
    ),
    options,
  );
}

/** `checkpoint-delete --checkpoint-id`. */
export async function deleteWorkspaceCheckpoint(checkpointId: string, options: RegistryOptions = {}): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(argv(["checkpoint-delete", "--checkpoint-id", checkpointId], registry(options)), options);
}

/** `destroy --id`. */
export async function destroyWorkspace(id: string, options: RegistryOptions = {}): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(argv(["destroy", "--id", id], registry(options)), options);
}

/** `collect`: destroy expired (TTL) workspaces. */
export async function collectWorkspaces(options: RegistryOptions = {}): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(argv(["collect"], registry(options)), options);
}

/** `prune [--include-adopted]`: forget records whose directory is gone. */
export async function pruneWorkspaces(options: RegistryOptions & { includeAdopted?: boolean } = {}): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(argv(["prune"], [["--include-adopted", options.includeAdopted], ...registry(options)]), options);
}

/** `gc`: remove blobs no published checkpoint names. */
export async function gcWorkspaces(options: RegistryOptions = {}): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(argv(["gc"], registry(options)), options);
}

/** `policy show`. */
export async function workspacePolicyShow(options: RegistryOptions = {}): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(argv(["policy", "show"], registry(options)), options);
}

export interface PolicySetOptions extends RegistryOptions {
  maxWorkspaces?: number;
  maxCheckpoints?: number;
  maxCheckpointBytes?: number;
}

/** `policy set` (0 = unlimited; refused if usage already exceeds a bound). */
export async function workspacePolicySet(options: PolicySetOptions): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(
    argv(
      ["policy", "set"],
      [
        ["--max-workspaces", options.maxWorkspaces],
        ["--max-checkpoints", options.maxCheckpoints],
        ["--max-checkpoint-bytes", options.maxCheckpointBytes],
        ...registry(options),
      ],
    ),
    options,
  );
}

// ---- remotes -------------------------------------------------------------
//
// A remote names an S3 location (s3://BUCKET[/PREFIX]) of a registry
// partition. The CLI stores no credentials: a command that reaches the remote
// takes them from the standard AWS chain of its environment
// (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, …) — pass `env`.

/** `stow-s3 remote <verb…>`: a top-level command, not under `workspace`. */
function runRemoteCommand(args: string[], options: CommandOptions): Promise<WorkspaceJSON> {
  return runCommand([], ["remote", ...args], options);
}

export interface AddRemoteOptions extends RegistryOptions {
  /** The service's endpoint (the CLI's default: `AWS_ENDPOINT_URL`, else AWS). */
  endpointUrl?: string;
  region?: string;
  /** A profile of the shared AWS config/credentials files. */
  profile?: string;
}

/** `remote add NAME URL`: name an S3 location (`url` is `s3://BUCKET[/PREFIX]`). */
export async function addRemote(name: string, url: string, options: AddRemoteOptions = {}): Promise<WorkspaceJSON> {
  return runRemoteCommand(
    [
      ...argv(
        ["add"],
        [["--endpoint-url", options.endpointUrl], ["--region", options.region], ["--profile", options.profile], ...registry(options)],
      ),
      ...operands(name, url),
    ],
    options,
  );
}

/** `remote list`: the partition's remotes. */
export async function listRemotes(options: RegistryOptions = {}): Promise<WorkspaceJSON> {
  return runRemoteCommand(argv(["list"], registry(options)), options);
}

/** `remote remove NAME`: forget a remote (nothing on the remote is touched). */
export async function removeRemote(name: string, options: RegistryOptions = {}): Promise<WorkspaceJSON> {
  return runRemoteCommand([...argv(["remove"], registry(options)), ...operands(name)], options);
}

export interface RemoteTrafficOptions extends RegistryOptions {
  /** Overall deadline: `"90s"`, `"10m"`, or seconds (the CLI's default: 30 minutes). */
  timeout?: string | number;
}

/** `remote-list --remote` (as `remote ls NAME`): the checkpoints a remote holds. */
export async function listRemoteCheckpoints(remote: string, options: RemoteTrafficOptions = {}): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(
    argv(["remote-list", "--remote", remote], [["--timeout", duration(options.timeout)], ...registry(options)]),
    options,
  );
}

export interface PushOptions extends RemoteTrafficOptions {
  /** Push a checkpoint holding sensitive-looking paths (.env, keys). */
  includeSensitive?: boolean;
}

/** `push --checkpoint-id --remote`: upload the blobs the remote lacks, then the manifest. */
export async function pushWorkspaceCheckpoint(checkpointId: string, remote: string, options: PushOptions = {}): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(
    argv(
      ["push", "--checkpoint-id", checkpointId, "--remote", remote],
      [["--timeout", duration(options.timeout)], ["--include-sensitive", options.includeSensitive], ...registry(options)],
    ),
    options,
  );
}

export interface PullOptions extends RemoteTrafficOptions, BoundOptions {
  includeSensitive?: boolean;
}

/** `pull --checkpoint-id --remote`: download a remote checkpoint, verified before it is published. */
export async function pullWorkspaceCheckpoint(checkpointId: string, remote: string, options: PullOptions = {}): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(
    argv(
      ["pull", "--checkpoint-id", checkpointId, "--remote", remote],
      [
        ["--timeout", duration(options.timeout)],
        ...bounds(options),
        ["--include-sensitive", options.includeSensitive],
        ...registry(options),
      ],
    ),
    options,
  );
}

export interface AdoptRemoteOptions extends PullOptions {
  remote: string;
  checkpointId: string;
  /** The new root (must not exist; its parent must). */
  root: string;
}

/** `adopt --remote --checkpoint-id --root`: pull a remote checkpoint and restore it as a new, adopted workspace. */
export async function adoptWorkspaceRemote(options: AdoptRemoteOptions): Promise<WorkspaceJSON> {
  return runWorkspaceCommand(
    argv(
      ["adopt", "--remote", options.remote, "--checkpoint-id", options.checkpointId, "--root", options.root],
      [
        ["--timeout", duration(options.timeout)],
        ...bounds(options),
        ["--include-sensitive", options.includeSensitive],
        ...registry(options),
      ],
    ),
    options,
  );
}

// ---- serve ---------------------------------------------------------------

/** What `workspace serve` reports (the required fields; the rest of the record is kept too). */
export interface WorkspaceReady extends WorkspaceJSON {
  version: 1;
  workspace_id: string;
  root: string;
  bucket: string;
  endpoint: string;
  region: string;
  access_key_id: string;
  secret_access_key: string;
}

export interface ServeWorkspaceOptions extends RegistryOptions {
  host?: string;
  port?: number;
  region?: string;
  /** Narrow the workspace's quotas for this server. */
  maxBytes?: number;
  maxObjects?: number;
  maxRequestBytes?: number;
  maxConcurrentRequests?: number;
  /** Default 15 000 ms. */
  timeoutMs?: number;
  /** Grace after SIGTERM before SIGKILL on close (default 11 000 ms). */
  stopGraceMs?: number;
}

export interface ServedWorkspace {
  ready: WorkspaceReady;
  /** The server's process ID. */
  pid: number;
  /** Stop the server (the workspace's data is kept). Idempotent. */
  close(): Promise<void>;
}

/** A `workspace serve` readiness record did not have the required shape. */
export class WorkspaceReadyError extends Error {
  readonly code = "protocol_mismatch";
  constructor(message: string) {
    super(message);
    this.name = "WorkspaceReadyError";
  }
}

/** Strictly parse a `workspace serve` readiness line. */
export function parseWorkspaceReady(line: string): WorkspaceReady {
  let doc: WorkspaceJSON;
  try {
    doc = decodeWorkspaceJSON(line);
  } catch (err) {
    throw new WorkspaceReadyError(`workspace serve readiness: ${(err as Error).message}`);
  }
  if (doc.version !== 1) throw new WorkspaceReadyError(`workspace serve readiness version ${JSON.stringify(doc.version)} is not 1`);
  for (const k of ["workspace_id", "root", "bucket", "endpoint", "region", "access_key_id", "secret_access_key"]) {
    if (typeof doc[k] !== "string" || doc[k] === "") {
      throw new WorkspaceReadyError(`workspace serve readiness field ${k} must be a non-empty string`);
    }
  }
  return doc as WorkspaceReady;
}

/**
 * `workspace serve --id <id> --ready-fd 3 --parent-pid <this process>`:
 * resolves once the server reports readiness (within `timeoutMs`, default
 * 15 s). The server exits by itself if this process dies.
 */
export async function serveWorkspace(id: string, options: ServeWorkspaceOptions = {}): Promise<ServedWorkspace> {
  const binary = options.binary ?? resolveStowBinary({ env: options.env });
  const args = argv(
    ["workspace", "serve", "--id", id],
    [
      ...registry(options),
      ["--host", options.host],
      ["--port", options.port],
      ["--region", options.region],
      ["--max-bytes", options.maxBytes],
      ["--max-objects", options.maxObjects],
      ["--max-request-bytes", options.maxRequestBytes],
      ["--max-concurrent-requests", options.maxConcurrentRequests],
    ],
  );
  args.push("--ready-fd", "3", "--parent-pid", String(process.pid));
  const started = await spawnReady(binary, args, {
    env: options.env ?? process.env,
    cwd: options.cwd,
    timeoutMs: options.timeoutMs ?? 15_000,
    maxLineBytes: 256 * 1024,
    signal: options.signal,
  });
  const grace = options.stopGraceMs ?? 11_000;
  let ready: WorkspaceReady;
  try {
    ready = parseWorkspaceReady(started.line);
  } catch (err) {
    await stopChild(started.child, started.exited, 2_000);
    throw err;
  }
  unrefChild(started.child);
  const child: ChildProcess = started.child;
  let closing: Promise<void> | undefined;
  return {
    ready,
    pid: child.pid!,
    close() {
      closing ??= stopChild(child, started.exited, grace);
      return closing;
    },
  };
}
