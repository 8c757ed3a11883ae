import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { ChildProcess } from "node:child_process";

import { resolveStowBinary } from "./binary.js";
import { createBucket, resetStore } from "./s3.js";
import type { StowResetResult } from "./s3.js";
import { isolatedEnv, spawnReady, stopChild, unrefChild, type Tail } from "./process.js";

export {
  resolveStowBinary,
  resolveStowBinaryDetailed,
  stowBinaryAvailable,
  StowBinaryNotFoundError,
  STOW_BINARY_NAME,
  VERSION,
  platformPackageName,
  type BinarySource,
  type ResolvedBinary,
  type ResolveOptions,
} from "./binary.js";
export { StowStartError, isolatedEnv } from "./process.js";
export { StowS3Error } from "./s3.js";
export type { StowResetResult } from "./s3.js";

/** The readiness protocol this package speaks. */
export const READY_PROTOCOL_VERSION = 1;

/** The readiness record did not have the expected shape (code `protocol_mismatch`). */
export class StowProtocolError extends Error {
  readonly code = "protocol_mismatch";
  constructor(message: string) {
    super(message);
    this.name = "StowProtocolError";
  }
}

/** A session was used after `close()` (code `closed`). */
export class StowSessionClosedError extends Error {
  readonly code = "closed";
  constructor() {
    super("the stow session is closed");
    this.name = "StowSessionClosedError";
  }
}

export interface StowCapabilities {
  persistent: boolean;
  multipart: boolean;
  upstream: boolean;
  conditionalWrites: boolean;
  presignedUrls: boolean;
  maxBytes: number;
  maxObjects: number;
  maxRequestBytes: number;
  maxConcurrentRequests?: number;
}

/** What `stow-s3 serve --ready-fd N` writes: one JSON line, protocol 1. */
export interface StowReady {
  protocolVersion: number;
  binaryVersion: string;
  endpoint: string;
  region: string;
  accessKeyId: string;
  secretAccessKey: string;
  mode: string;
  backend: string;
  capabilities: StowCapabilities;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Strictly parse a `serve` readiness line (throws {@link StowProtocolError}). */
export function parseReadyMessage(line: string): StowReady {
  let doc: unknown;
  try {
    doc = JSON.parse(line);
  } catch {
    throw new StowProtocolError(`readiness is not JSON: ${JSON.stringify(line.slice(0, 200))}`);
  }
  if (!isObject(doc)) throw new StowProtocolError("readiness is not a JSON object");
  if (doc.protocolVersion !== READY_PROTOCOL_VERSION) {
    throw new StowProtocolError(
      `unsupported readiness protocolVersion ${JSON.stringify(doc.protocolVersion)} (expected ${READY_PROTOCOL_VERSION})`,
    );
  }
  for (const k of ["binaryVersion", "endpoint", "region", "accessKeyId", "secretAccessKey", "mode", "backend"]) {
    if (typeof doc[k] !== "string" || doc[k] === "") {
      throw new StowProtocolError(`readiness field ${k} must be a non-empty string`);
    }
  }
  const caps = doc.capabilities;
  if (!isObject(caps)) throw new StowProtocolError("readiness field capabilities must be an object");
  for (const k of ["persistent", "multipart", "upstream", "conditionalWrites", "presignedUrls"]) {
    if (typeof caps[k] !== "boolean") throw new StowProtocolError(`capabilities.${k} must be a boolean`);
  }
  for (const k of ["maxBytes", "maxObjects", "maxRequestBytes"]) {
    if (typeof caps[k] !== "number" || !Number.isFinite(caps[k])) {
      throw new StowProtocolError(`capabilities.${k} must be a finite number`);
    }
  }
  if (
    caps.maxConcurrentRequests !== undefined &&
    (typeof caps.maxConcurrentRequests !== "number" || !Number.isFinite(caps.maxConcurrentRequests))
  ) {
    throw new StowProtocolError("capabilities.maxConcurrentRequests must be a finite number");
  }
  return doc as unknown as StowReady;
}

export interface OpenStowOptions {
  /**
   * The session's bucket, created before {@link openStow} returns (default:
   * `stow-session-<16 hex>`). In a kept `dataDir` that already holds it, it is used as is.
   */
  bucket?: string;
  /** Data directory; kept on close. Default: a new temp dir `stow-session-*`, removed on close. */
  dataDir?: string;
  /** Storage backend (default `filesystem`, in the data directory). */
  backend?: "filesystem" | "memory";
  /** Stored-bytes / stored-objects quotas (0 or absent = unlimited). */
  maxBytes?: number;
  maxObjects?: number;
  /** Region in the credential scope (default `us-east-1`). */
  region?: string;
  /** Time allowed for the server to report readiness and the bucket to be created (default 15 000 ms). */
  timeoutMs?: number;
  /** Grace after SIGTERM before SIGKILL on close (default 10 000 ms). */
  stopGraceMs?: number;
  /** Cancels the start. */
  signal?: AbortSignal;
  /** Binary to run (default: {@link resolveStowBinary}). */
  binary?: string;
  /**
   * Start the server with `--allow-reset`, so {@link StowSession.reset} can
   * empty it (default `true`; `false` starts one that refuses with `MethodNotAllowed`).
   */
  allowReset?: boolean;
}

/** Options of {@link StowSession.reset}. */
export interface StowResetOptions {
  /** Create the session's bucket again after emptying the server (default `true`). */
  keepBucket?: boolean;
  /** Time allowed for the reset (and the bucket) (default 30 000 ms). */
  timeoutMs?: number;
  /** Cancels the reset. */
  signal?: AbortSignal;
}

/** The options `new S3Client(...)` of `@aws-sdk/client-s3` takes. */
export interface AwsSdkV3Config {
  endpoint: string;
  region: string;
  credentials: { accessKeyId: string; secretAccessKey: string };
  forcePathStyle: true;
}

/** A private `stow-s3 serve` on 127.0.0.1 for this process, with one bucket created. */
export class StowSession {
  /** The bucket {@link openStow} created (`opts.bucket`, else `stow-session-<16 hex>`). */
  readonly bucket: string;
  readonly endpoint: string;
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  readonly region: string;
  readonly dataDir: string;
  readonly ownsDataDir: boolean;
  readonly ready: StowReady;
  /** The server's process ID. */
  readonly pid: number;
  readonly #child: ChildProcess;
  readonly #exited: Promise<void>;
  readonly #stdout: Tail;
  readonly #stderr: Tail;
  readonly #grace: number;
  #closing: Promise<void> | undefined;

  /** @internal use {@link openStow}. */
  constructor(init: {
    bucket: string;
    ready: StowReady;
    child: ChildProcess;
    exited: Promise<void>;
    stdout: Tail;
    stderr: Tail;
    dataDir: string;
    ownsDataDir: boolean;
    stopGraceMs: number;
  }) {
    this.bucket = init.bucket;
    this.ready = init.ready;
    this.endpoint = init.ready.endpoint;
    this.accessKeyId = init.ready.accessKeyId;
    this.secretAccessKey = init.ready.secretAccessKey;
    this.region = init.ready.region;
    this.dataDir = init.dataDir;
    this.ownsDataDir = init.ownsDataDir;
    this.pid = init.child.pid!;
    this.#child = init.child;
    this.#exited = init.exited;
    this.#stdout = init.stdout;
    this.#stderr = init.stderr;
    this.#grace = init.stopGraceMs;
  }

  get closed(): boolean {
    return this.#closing !== undefined;
  }

  /** The last 64 KiB the server printed on stdout / stderr. */
  get stdoutText(): string {
    return this.#stdout.text();
  }
  get stderrText(): string {
    return this.#stderr.text();
  }

  /** Options for `new S3Client(...)` (path-style addressing). */
  awsSdkV3Config(): AwsSdkV3Config {
    if (this.closed) throw new StowSessionClosedError();
    return {
      endpoint: this.endpoint,
      region: this.region,
      credentials: { accessKeyId: this.accessKeyId, secretAccessKey: this.secretAccessKey },
      forcePathStyle: true,
    };
  }

  /**
   * Empty the server — every bucket, object, multipart upload and save receipt — at once
   * (`POST /_stow/reset`, SigV4-signed; one transaction on the server, no work per object),
   * then create {@link StowSession.bucket} again unless `keepBucket: false`: the session is as
   * {@link openStow} returned it. Resolves with what was removed; a refusal (a server started
   * with `allowReset: false`: `MethodNotAllowed`) rejects with `StowS3Error`.
   */
  async reset(options: StowResetOptions = {}): Promise<StowResetResult> {
    if (this.closed) throw new StowSessionClosedError();
    const deadline = Date.now() + (options.timeoutMs ?? 30_000);
    const left = () => ({ timeoutMs: Math.max(1, deadline - Date.now()), signal: options.signal });
    const result = await resetStore(this.ready, left());
    if (options.keepBucket ?? true) await createBucket(this.ready, this.bucket, left());
    return result;
  }

  /** Environment variables that point an AWS SDK or CLI in another process at this session (and `STOW_BUCKET` at its bucket). */
  handoff(): Record<string, string> {
    if (this.closed) throw new StowSessionClosedError();
    return {
      AWS_ACCESS_KEY_ID: this.accessKeyId,
      AWS_SECRET_ACCESS_KEY: this.secretAccessKey,
      AWS_REGION: this.region,
      AWS_ENDPOINT_URL: this.endpoint,
      STOW_BUCKET: this.bucket,
    };
  }

  /** Stop the server (SIGTERM, then SIGKILL after the grace) and remove a data dir the session created. Idempotent. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      try {
        await stopChild(this.#child, this.#exited, this.#grace);
      } finally {
        if (this.ownsDataDir) rmSync(this.dataDir, { recursive: true, force: true });
      }
    })();
    return this.#closing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

function positiveInt(name: string, v: number | undefined): number {
  if (v === undefined) return 0;
  if (!Number.isSafeInteger(v) || v < 0) throw new RangeError(`${name} must be a non-negative integer`);
  return v;
}

function generatedKeys(): { accessKeyId: string; secretAccessKey: string } {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
  const bytes = randomBytes(16);
  let ak = "STOW";
  for (const b of bytes) ak += alphabet[b % 32];
  return { accessKeyId: ak, secretAccessKey: randomBytes(30).toString("base64url") };
}

/**
 * Start a private `stow-s3 serve` (127.0.0.1, port 0, generated keys,
 * readiness on fd 3, `--parent-pid` of this process, an environment without
 * `AWS_*`/`S3_*`/`STOW_*`, `--allow-reset` unless `allowReset: false`) and
 * create its bucket (`session.bucket`). The
 * server also exits by itself when this process dies. A session does not
 * keep the event loop alive.
 */
export async function openStow(options: OpenStowOptions = {}): Promise<StowSession> {
  const deadline = Date.now() + (options.timeoutMs ?? 15_000);
  const bucket = options.bucket ?? `stow-session-${randomBytes(8).toString("hex")}`;
  if (typeof bucket !== "string" || bucket === "") throw new TypeError("bucket must be a non-empty string");
  const binary = options.binary ?? resolveStowBinary();
  const maxBytes = positiveInt("maxBytes", options.maxBytes);
  const maxObjects = positiveInt("maxObjects", options.maxObjects);
  const ownsDataDir = options.dataDir === undefined;
  const dataDir = ownsDataDir ? mkdtempSync(join(tmpdir(), "stow-session-")) : resolve(options.dataDir!);
  const keys = generatedKeys();
  const env = isolatedEnv();
  // Keys go through the environment, not argv (which other users can read).
  env.STOW_LOCAL_ACCESS_KEY_ID = keys.accessKeyId;
  env.STOW_LOCAL_SECRET_ACCESS_KEY = keys.secretAccessKey;
  const args = [
    "serve",
    "--host", "127.0.0.1",
    "--port", "0",
    "--data-dir", dataDir,
    "--backend", options.backend ?? "filesystem",
    "--region", options.region ?? "us-east-1",
    "--max-bytes", String(maxBytes),
    "--max-objects", String(maxObjects),
    "--ready-fd", "3",
    "--parent-pid", String(process.pid),
  ];
  if (options.allowReset ?? true) args.push("--allow-reset");
  let started;
  try {
    started = await spawnReady(binary, args, {
      env,
      timeoutMs: options.timeoutMs ?? 15_000,
      maxLineBytes: 256 * 1024,
      signal: options.signal,
    });
  } catch (err) {
    if (ownsDataDir) rmSync(dataDir, { recursive: true, force: true });
    throw err;
  }
  let ready: StowReady;
  try {
    ready = parseReadyMessage(started.line);
    if (ready.accessKeyId !== keys.accessKeyId || ready.secretAccessKey !== keys.secretAccessKey) {
      throw new StowProtocolError("the server reported keys other than the session's");
    }
    await createBucket(ready, bucket, { timeoutMs: Math.max(1, deadline - Date.now()), signal: options.signal }).catch((err) => {
      // A kept data dir may hold the bucket from an earlier session.
      if (!(ownsDataDir === false && err.code === "BucketAlreadyOwnedByYou")) throw err;
    });
  } catch (err) {
    await stopChild(started.child, started.exited, 2_000);
    if (ownsDataDir) rmSync(dataDir, { recursive: true, force: true });
    throw err;
  }
  unrefChild(started.child);
  return new StowSession({
    bucket,
    ready,
    child: started.child,
    exited: started.exited,
    stdout: started.stdout,
    stderr: started.stderr,
    dataDir,
    ownsDataDir,
    stopGraceMs: options.stopGraceMs ?? 10_000,
  });
}

/**
 * Run `fn` with a fresh session (its bucket created, as by {@link openStow}) and always close it. The callback's error is
 * rethrown unchanged (a close failure after it is not allowed to hide it); a
 * close failure after a successful callback is thrown.
 */
export async function withStow<T>(fn: (session: StowSession) => T | Promise<T>, options?: OpenStowOptions): Promise<T> {
  const session = await openStow(options);
  let result: T;
  try {
    result = await fn(session);
  } catch (err) {
    await session.close().catch(() => {});
    throw err;
  }
  await session.close();
  return result;
}
