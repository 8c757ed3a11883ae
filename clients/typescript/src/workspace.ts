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
  operandsOf,
  registry,
  runRaw,
  runWorkspaceCommand,
  type BoundOptions,
  type Flags,
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
  type Flags,
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
// Remotes (remote add/list/remove, push, pull, adopt --remote) live in ./remotes.ts.
export {
  addRemote,
  adoptWorkspaceRemote,
  listRemoteCheckpoints,
  listRemotes,
  pullWorkspaceCheckpoint,
  pushWorkspaceCheckpoint,
  removeRemote,
  type AddRemoteOptions,
  type AdoptRemoteOptions,
  type PullOptions,
  type PushOptions,
  type RemoteTrafficOptions,
} from "./remotes.js";

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

/** `resume --id` or `resume --handoff`: `resumeWorkspace({id | handoffPath, registryDir})`, or `resumeWorkspace(id, options)`. */
export function resumeWorkspace(options: ResumeOptions): Promise<WorkspaceJSON>;
export function resumeWorkspace(id: string, options?: Omit<ResumeOptions, "id">): Promise<WorkspaceJSON>;
export async function resumeWorkspace(...args: unknown[]): Promise<WorkspaceJSON> {
  const { values, options } = operandsOf<ResumeOptions>("resumeWorkspace", args, [["id", false]]);
  return runWorkspaceCommand(
    argv(["resume"], [["--id", values.id], ["--handoff", options.handoffPath], ...registry(options)]),
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

export interface HandoffRequest extends HandoffOptions {
  id: string;
}

/**
 * `handoff --id`: the handoff document (with `output`, the written file read
 * back). `handoffWorkspace(id, options)` or `handoffWorkspace({id, …options})`.
 */
export function handoffWorkspace(id: string, options?: HandoffOptions): Promise<WorkspaceJSON>;
export function handoffWorkspace(request: HandoffRequest): Promise<WorkspaceJSON>;
export async function handoffWorkspace(...call: unknown[]): Promise<WorkspaceJSON> {
  const { values, options } = operandsOf<HandoffOptions>("handoffWorkspace", call, [["id", true]]);
  const args = argv(
    ["handoff", "--id", values.id!],
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
 * credentials in `env`). `adoptWorkspaceHandoff({handoffPath, root, …})` or
 * `adoptWorkspaceHandoff(handoffPath, root, options)`.
 */
export function adoptWorkspaceHandoff(options: AdoptOptions): Promise<WorkspaceJSON>;
export function adoptWorkspaceHandoff(
  handoffPath: string,
  root: string,
  options?: Omit<AdoptOptions, "handoffPath" | "root">,
): Promise<WorkspaceJSON>;
export async function adoptWorkspaceHandoff(...call: unknown[]): Promise<WorkspaceJSON> {
  const { values, options } = operandsOf<AdoptOptions>("adoptWorkspaceHandoff", call, [
    ["handoffPath", true],
    ["root", true],
  ]);
  return runWorkspaceCommand(
    argv(
      ["adopt", "--handoff", values.handoffPath!, "--root", values.root!],
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

export interface CheckpointRequest extends CheckpointOptions {
  /** The workspace (default: the one holding `cwd`). */
  id?: string;
}

/**
 * `checkpoint [--id]`: `checkpointWorkspace(id, options)` or
 * `checkpointWorkspace({id, parent, maxBytes, maxFiles, includeSensitive, …})`.
 * With `requestKey` the result is the keyed envelope (`{version, result:
 * {outcome, checkpoint, replayed}}`); a keyed capture that fails throws
 * {@link WorkspaceCommandError} whose `document` is the envelope.
 *
 * With `id` undefined the CLI captures the workspace holding `options.cwd`
 * (default: the current directory), whose identity names its registry and
 * team; outside any workspace that is a `usage` error (exit 2).
 */
export function checkpointWorkspace(request: CheckpointRequest): Promise<WorkspaceJSON>;
export function checkpointWorkspace(id?: string, options?: CheckpointOptions): Promise<WorkspaceJSON>;
export async function checkpointWorkspace(...call: unknown[]): Promise<WorkspaceJSON> {
  const { values, options } = operandsOf<CheckpointOptions>("checkpointWorkspace", call, [["id", false]]);
  return runWorkspaceCommand(
    argv(
      ["checkpoint"],
      [
        ["--id", values.id],
        ...captureFlags(options),
        ["--request-key", options.requestKey],
        ["--timeout", duration(options.timeout)],
        ...registry(options),
      ],
    ),
    options,
  );
}

/** What a capture is made with: a keyed one's key is bound to them. */
function captureFlags(options: ResolveCheckpointOptions): Flags {
  return [
    ["--message", options.message],
    ["--parent", options.parent],
    ...bounds(options),
    ["--include-sensitive", options.includeSensitive],
    ["--portable", options.portable],
    ["--no-ignore", options.noIgnore],
  ];
}

/**
 * A keyed capture is resolved with the options it was made with (the key
 * is bound to them: others are `request_conflict`).
 */
export interface ResolveCheckpointOptions extends RegistryOptions, BoundOptions {
  /** The CLI requires one with `--resolve` (default `"30s"`; a number is seconds). */
  timeout?: string | number;
  message?: string;
  parent?: string;
  includeSensitive?: boolean;
  /** The capture was portable (`checkpointWorkspace(…, {portable: true})`, or an MCP checkpoint). */
  portable?: boolean;
  noIgnore?: boolean;
}

/**
 * `checkpoint --id --request-key --resolve`: what happened to a keyed capture (never captures).
 * `resolveCheckpoint(id, requestKey, options)` or `resolveCheckpoint({id, requestKey, …})`.
 */
export function resolveCheckpoint(id: string, requestKey: string, options?: ResolveCheckpointOptions): Promise<WorkspaceJSON>;
export function resolveCheckpoint(request: ResolveCheckpointOptions & { id: string; requestKey: string }): Promise<WorkspaceJSON>;
export async function resolveCheckpoint(...call: unknown[]): Promise<WorkspaceJSON> {
  const { values, options } = operandsOf<ResolveCheckpointOptions>("resolveCheckpoint", call, [
    ["id", true],
    ["requestKey", true],
  ]);
  return runWorkspaceCommand(
    argv(
      ["checkpoint", "--id", values.id!, "--request-key", values.requestKey!, "--resolve"],
      [
        ...captureFlags(options),
        ["--timeout", duration(options.timeout ?? "30s")],
        ...registry(options),
      ],
    ),
    options,
  );
}

export interface DiffRequest extends RegistryOptions {
  from: string;
  to: string;
}

/**
 * `diff --from --to` (checkpoint IDs): `diffWorkspaces(from, to, options)`,
 * `diffWorkspaces(from, to, registryDir?, team?)` or `diffWorkspaces({from, to, …options})`.
 */
export function diffWorkspaces(from: string, to: string, options?: RegistryOptions): Promise<WorkspaceJSON>;
export function diffWorkspaces(from: string, to: string, registryDir?: string, team?: string): Promise<WorkspaceJSON>;
export function diffWorkspaces(request: DiffRequest): Promise<WorkspaceJSON>;
export async function diffWorkspaces(...call: unknown[]): Promise<WorkspaceJSON> {
  // (from, to, registryDir?, team?): the positional registry of the reference.
  if (typeof call[0] === "string" && (typeof call[2] === "string" || (call[2] === undefined && call[3] !== undefined))) {
    if (call[3] !== undefined && typeof call[3] !== "string") throw new TypeError("diffWorkspaces: team must be a string");
    if (call.length > 4) throw new TypeError("diffWorkspaces: takes at most 4 arguments");
    call = [call[0], call[1], { registryDir: call[2], team: call[3] }];
  }
  const { values, options } = operandsOf<RegistryOptions>("diffWorkspaces", call, [
    ["from", true],
    ["to", true],
  ]);
  return runWorkspaceCommand(argv(["diff", "--from", values.from!, "--to", values.to!], registry(options)), options);
}

export type RestoreOptions = RegistryOptions & BoundOptions;

export interface RestoreRequest extends RegistryOptions, BoundOptions {
  checkpointId: string;
  root: string;
}

/**
 * `restore --checkpoint-id --root`: a new workspace from a checkpoint.
 * `restoreWorkspaceCheckpoint(checkpointId, root, options)` or `restoreWorkspaceCheckpoint({checkpointId, root, …})`.
 */
export function restoreWorkspaceCheckpoint(checkpointId: string, root: string, options?: RestoreOptions): Promise<WorkspaceJSON>;
export function restoreWorkspaceCheckpoint(request: RestoreRequest): Promise<WorkspaceJSON>;
export async function restoreWorkspaceCheckpoint(...call: unknown[]): Promise<WorkspaceJSON> {
  const { values, options } = operandsOf<RestoreOptions>("restoreWorkspaceCheckpoint", call, [
    ["checkpointId", true],
    ["root", true],
  ]);
  return runWorkspaceCommand(
    argv(["restore", "--checkpoint-id", values.checkpointId!, "--root", values.root!], [...bounds(options), ...registry(options)]),
    options,
  );
}

export interface ArchiveOptions extends RegistryOptions, BoundOptions {
  includeSensitive?: boolean;
}

export interface ExportRequest extends ArchiveOptions {
  checkpointId: string;
  output: string;
}

/**
 * `export --checkpoint-id --output`: a new gzip tar archive.
 * `exportWorkspaceCheckpoint(checkpointId, output, options)` or `exportWorkspaceCheckpoint({checkpointId, output, …})`.
 */
export function exportWorkspaceCheckpoint(checkpointId: string, output: string, options?: ArchiveOptions): Promise<WorkspaceJSON>;
export function exportWorkspaceCheckpoint(request: ExportRequest): Promise<WorkspaceJSON>;
export async function exportWorkspaceCheckpoint(...call: unknown[]): Promise<WorkspaceJSON> {
  const { values, options } = operandsOf<ArchiveOptions>("exportWorkspaceCheckpoint", call, [
    ["checkpointId", true],
    ["output", true],
  ]);
  return runWorkspaceCommand(
    argv(
      ["export", "--checkpoint-id", values.checkpointId!, "--output", values.output!],
      [...bounds(options), ["--include-sensitive", options.includeSensitive], ...registry(options)],
    ),
    options,
  );
}

export type PreviewOptions = CommandOptions & BoundOptions;

/**
 * `preview --archive`: validate an archive and list it, extracting nothing.
 * `previewWorkspaceArchive(archive, options)` or `previewWorkspaceArchive({archive, …})`.
 */
export function previewWorkspaceArchive(archive: string, options?: PreviewOptions): Promise<WorkspaceJSON>;
export function previewWorkspaceArchive(request: PreviewOptions & { archive: string }): Promise<WorkspaceJSON>;
export async function previewWorkspaceArchive(...call: unknown[]): Promise<WorkspaceJSON> {
  const { values, options } = operandsOf<PreviewOptions>("previewWorkspaceArchive", call, [["archive", true]]);
  return runWorkspaceCommand(argv(["preview", "--archive", values.archive!], bounds(options)), options);
}

export interface ImportRequest extends ArchiveOptions {
  archive: string;
}

/** `import --archive`: `importWorkspaceCheckpoint(archive, options)` or `importWorkspaceCheckpoint({archive, …})`. */
export function importWorkspaceCheckpoint(archive: string, options?: ArchiveOptions): Promise<WorkspaceJSON>;
export function importWorkspaceCheckpoint(request: ImportRequest): Promise<WorkspaceJSON>;
export async function importWorkspaceCheckpoint(...call: unknown[]): Promise<WorkspaceJSON> {
  const { values, options } = operandsOf<ArchiveOptions>("importWorkspaceCheckpoint", call, [["archive", true]]);
  return runWorkspaceCommand(
    argv(
      ["import", "--archive", values.archive!],
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

/** `delta --from --to --output`: `createWorkspaceDelta({from, to, output, …})` or `createWorkspaceDelta(from, to, output, options)`. */
export function createWorkspaceDelta(options: CreateDeltaOptions): Promise<WorkspaceJSON>;
export function createWorkspaceDelta(
  from: string,
  to: string,
  output: string,
  options?: Omit<CreateDeltaOptions, "from" | "to" | "output">,
): Promise<WorkspaceJSON>;
export async function createWorkspaceDelta(...call: unknown[]): Promise<WorkspaceJSON> {
  const { values, options } = operandsOf<CreateDeltaOptions>("createWorkspaceDelta", call, [
    ["from", true],
    ["to", true],
    ["output", true],
  ]);
  return runWorkspaceCommand(
    argv(
      ["delta", "--from", values.from!, "--to", values.to!, "--output", values.output!],
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

/**
 * `apply --delta --base [--expect-sha256]`: a new checkpoint, parent `base`.
 * `applyWorkspaceDelta({delta, base, expectSHA256})` or `applyWorkspaceDelta(delta, base, options)`.
 */
export function applyWorkspaceDelta(options: ApplyDeltaOptions): Promise<WorkspaceJSON>;
export function applyWorkspaceDelta(delta: string, base: string, options?: Omit<ApplyDeltaOptions, "delta" | "base">): Promise<WorkspaceJSON>;
export async function applyWorkspaceDelta(...call: unknown[]): Promise<WorkspaceJSON> {
  const { values, options } = operandsOf<ApplyDeltaOptions>("applyWorkspaceDelta", call, [
    ["delta", true],
    ["base", true],
  ]);
  return runWorkspaceCommand(
    argv(
      ["apply", "--delta", values.delta!, "--base", values.base!],
      [["--expect-sha256", options.expectSHA256], ["--include-sensitive", options.includeSensitive], ...registry(options)],
    ),
    options,
  );
}

/** `checkpoint-delete --checkpoint-id`: `deleteWorkspaceCheckpoint(checkpointId, options)` or `deleteWorkspaceCheckpoint({checkpointId, …})`. */
export function deleteWorkspaceCheckpoint(checkpointId: string, options?: RegistryOptions): Promise<WorkspaceJSON>;
export function deleteWorkspaceCheckpoint(request: RegistryOptions & { checkpointId: string }): Promise<WorkspaceJSON>;
export async function deleteWorkspaceCheckpoint(...call: unknown[]): Promise<WorkspaceJSON> {
  const { values, options } = operandsOf<RegistryOptions>("deleteWorkspaceCheckpoint", call, [["checkpointId", true]]);
  return runWorkspaceCommand(argv(["checkpoint-delete", "--checkpoint-id", values.checkpointId!], registry(options)), options);
}

/** `destroy --id`: `destroyWorkspace(id, options)` or `destroyWorkspace({id, …})`. */
export function destroyWorkspace(id: string, options?: RegistryOptions): Promise<WorkspaceJSON>;
export function destroyWorkspace(request: RegistryOptions & { id: string }): Promise<WorkspaceJSON>;
export async function destroyWorkspace(...call: unknown[]): Promise<WorkspaceJSON> {
  const { values, options } = operandsOf<RegistryOptions>("destroyWorkspace", call, [["id", true]]);
  return runWorkspaceCommand(argv(["destroy", "--id", values.id!], registry(options)), options);
}

/** `collect`: destroy expired (TTL) workspaces. `collectWorkspaces(options)` or `collectWorkspaces(registryDir?)`. */
export function collectWorkspaces(options?: RegistryOptions): Promise<WorkspaceJSON>;
export function collectWorkspaces(registryDir?: string): Promise<WorkspaceJSON>;
export async function collectWorkspaces(...call: unknown[]): Promise<WorkspaceJSON> {
  const { values, options } = operandsOf<RegistryOptions>("collectWorkspaces", call, [["registryDir", false]]);
  return runWorkspaceCommand(argv(["collect"], registry({ ...options, registryDir: values.registryDir })), options);
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

export interface ServeWorkspaceRequest extends ServeWorkspaceOptions {
  id: string;
}

/**
 * `workspace serve --id <id> --ready-fd 3 --parent-pid <this process>`:
 * resolves once the server reports readiness (within `timeoutMs`, default
 * 15 s). The server exits by itself if this process dies.
 * `serveWorkspace(id, options)` or `serveWorkspace({id, …options})`.
 */
export function serveWorkspace(id: string, options?: ServeWorkspaceOptions): Promise<ServedWorkspace>;
export function serveWorkspace(request: ServeWorkspaceRequest): Promise<ServedWorkspace>;
export async function serveWorkspace(...call: unknown[]): Promise<ServedWorkspace> {
  const { values, options } = operandsOf<ServeWorkspaceOptions>("serveWorkspace", call, [["id", true]]);
  const binary = options.binary ?? resolveStowBinary({ env: options.env });
  const args = argv(
    ["workspace", "serve", "--id", values.id!],
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
