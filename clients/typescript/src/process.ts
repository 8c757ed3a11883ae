import { spawn, type ChildProcess } from "node:child_process";
import type { Readable } from "node:stream";

const TAIL_BYTES = 64 * 1024;

/** A server did not become ready: it exited, timed out, or could not be spawned. */
export class StowStartError extends Error {
  readonly code: "exited" | "timeout" | "spawn_failed" | "ready_too_large";
  readonly command: string[];
  readonly exitCode: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
  constructor(
    code: StowStartError["code"],
    message: string,
    details: {
      command: string[];
      exitCode?: number | null;
      signal?: NodeJS.Signals | null;
      stdout?: string;
      stderr?: string;
      cause?: unknown;
    },
  ) {
    const stderr = details.stderr ?? "";
    super(stderr.trim() === "" ? message : `${message}\n--- stderr (tail) ---\n${stderr.trimEnd()}`, {
      cause: details.cause,
    });
    this.name = "StowStartError";
    this.code = code;
    this.command = details.command;
    this.exitCode = details.exitCode ?? null;
    this.signal = details.signal ?? null;
    this.stdout = details.stdout ?? "";
    this.stderr = stderr;
  }
}

/** Keeps the last `TAIL_BYTES` of a stream's output. */
export class Tail {
  private chunks: Buffer[] = [];
  private size = 0;
  attach(stream: Readable | null | undefined): void {
    stream?.on("data", (chunk: Buffer) => {
      this.chunks.push(chunk);
      this.size += chunk.length;
      while (this.size > TAIL_BYTES && this.chunks.length > 1) {
        this.size -= this.chunks.shift()!.length;
      }
    });
  }
  text(): string {
    const all = Buffer.concat(this.chunks);
    return all.subarray(Math.max(0, all.length - TAIL_BYTES)).toString("utf8");
  }
}

export interface ReadyChild {
  child: ChildProcess;
  /** The readiness line, without its newline. */
  line: string;
  stdout: Tail;
  stderr: Tail;
  /** Settles when the child has exited. */
  exited: Promise<void>;
}

export interface SpawnReadyOptions {
  env: NodeJS.ProcessEnv;
  cwd?: string;
  timeoutMs: number;
  maxLineBytes: number;
  signal?: AbortSignal;
}

/**
 * Spawn `binary args…` (no shell) with a pipe on fd 3 and wait for one line on
 * it. On any failure the child is killed before the promise rejects.
 */
export function spawnReady(binary: string, args: string[], options: SpawnReadyOptions): Promise<ReadyChild> {
  const command = [binary, ...args];
  return new Promise<ReadyChild>((resolvePromise, rejectPromise) => {
    let child: ChildProcess;
    try {
      child = spawn(binary, args, {
        stdio: ["ignore", "pipe", "pipe", "pipe"],
        env: options.env,
        cwd: options.cwd,
        shell: false,
      });
    } catch (cause) {
      rejectPromise(new StowStartError("spawn_failed", `could not spawn ${binary}`, { command, cause }));
      return;
    }
    const stdout = new Tail();
    const stderr = new Tail();
    stdout.attach(child.stdout);
    stderr.attach(child.stderr);
    const exited = new Promise<void>((r) => child.once("exit", () => r()));
    // Spawn failures are reported through 'error'; never let it go unhandled.
    const closed = new Promise<void>((r) => child.once("close", () => r()));

    const ready = child.stdio[3] as Readable;
    let buffered = Buffer.alloc(0);
    let settled = false;

    const fail = (code: StowStartError["code"], message: string, cause?: unknown) => {
      if (settled) return;
      settled = true;
      cleanup();
      ready.destroy();
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      const finish = () =>
        rejectPromise(
          new StowStartError(code, message, {
            command,
            exitCode: child.exitCode,
            signal: child.signalCode,
            stdout: stdout.text(),
            stderr: stderr.text(),
            cause,
          }),
        );
      if (child.pid === undefined) {
        finish();
        return;
      }
      // Let the tails collect what the child printed before it died.
      let t: NodeJS.Timeout | undefined;
      Promise.race([closed, new Promise<void>((r) => (t = setTimeout(r, 2000)))]).then(() => {
        clearTimeout(t);
        finish();
      });
    };

    const timer = setTimeout(() => {
      fail("timeout", `${binary} did not report readiness within ${options.timeoutMs} ms`);
    }, options.timeoutMs);

    const onAbort = () => fail("timeout", "start cancelled", options.signal?.reason);
    options.signal?.addEventListener("abort", onAbort, { once: true });

    const onData = (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      const nl = buffered.indexOf(0x0a);
      if (nl === -1) {
        if (buffered.length > options.maxLineBytes) {
          fail("ready_too_large", `readiness record exceeds ${options.maxLineBytes} bytes`);
        }
        return;
      }
      if (nl > options.maxLineBytes) {
        fail("ready_too_large", `readiness record exceeds ${options.maxLineBytes} bytes`);
        return;
      }
      if (settled) return;
      settled = true;
      cleanup();
      ready.destroy();
      resolvePromise({ child, line: buffered.subarray(0, nl).toString("utf8"), stdout, stderr, exited });
    };
    const onExit = (code: number | null, signal: NodeJS.Signals | null) => {
      fail("exited", `${binary} exited (${signal ?? `code ${code}`}) before reporting readiness`);
    };
    const onError = (cause: Error) => {
      fail("spawn_failed", `could not run ${binary}: ${cause.message}`, cause);
    };
    function cleanup() {
      clearTimeout(timer);
      options.signal?.removeEventListener("abort", onAbort);
      ready.off("data", onData);
      child.off("exit", onExit);
    }
    ready.on("data", onData);
    ready.on("error", () => {});
    child.on("exit", onExit);
    child.on("error", onError);
    if (options.signal?.aborted) onAbort();
  });
}

/** Let the process exit while the child runs (it follows us out through --parent-pid). */
export function unrefChild(child: ChildProcess): void {
  child.unref();
  for (const s of [child.stdout, child.stderr]) (s as unknown as { unref?: () => void } | null)?.unref?.();
}

function refChild(child: ChildProcess): void {
  child.ref();
  for (const s of [child.stdout, child.stderr]) (s as unknown as { ref?: () => void } | null)?.ref?.();
}

/** SIGTERM, wait `graceMs`, then SIGKILL and wait for the exit. */
export async function stopChild(child: ChildProcess, exited: Promise<void>, graceMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) {
    await exited;
    return;
  }
  refChild(child);
  child.kill("SIGTERM");
  let timer: NodeJS.Timeout | undefined;
  const graceOver = new Promise<boolean>((r) => {
    timer = setTimeout(() => r(false), graceMs);
  });
  const done = await Promise.race([exited.then(() => true), graceOver]);
  clearTimeout(timer);
  if (!done) {
    child.kill("SIGKILL");
    await exited;
  }
}

/** The environment a private server runs with: the caller's, minus every AWS_*, S3_* and STOW_* variable. */
export function isolatedEnv(base: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(base)) {
    const upper = k.toUpperCase();
    if (upper.startsWith("AWS_") || upper.startsWith("S3_") || upper.startsWith("STOW_")) continue;
    if (v !== undefined) env[k] = v;
  }
  return env;
}
