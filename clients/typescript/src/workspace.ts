import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { isAbsolute, join, resolve as resolvePath } from "node:path";
import type { ChildProcess } from "node:child_process";

import { resolveStowBinary } from "./binary.js";
import {
  argv,
  bounds,
  decodeWorkspaceJSON,
  duration,
  isObject,
  operands,
  registry,
  runCommand,
  runRaw,
  runWorkspaceCommand,
  type BoundOptions,
  type CommandOptions,
  type RegistryOptions,
  type WorkspaceJSON,
} from "./command.js";
import { spawnReady, stopChild, unrefChild } from "./process.js";

export { StowBinaryNotFoundError, resolveStowBinary } from "./binary.js";
export { StowStartError } from "./process.js";
export {
  MAX_STDOUT_BYTES,
  WorkspaceCommandError,
  decodeWorkspaceJSON,
  runWorkspaceCommand,
  type BoundOptions,
  type CommandOptions,
  type RegistryOptions,
  type WorkspaceJSON,
} from "./command.js";
// Attached workspaces (attach, detach, log, status, rewind) live in ./attached.ts.
export {
  attachWorkspace,
  detachWorkspace,
  rewindWorkspace,
  workspaceLog,
  workspaceStatus,
  type AttachOptions,
  type DetachOptions,
  type LogOptions,
  type RewindOptions,
  type StatusOptions,
} from "./attached.js";

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
