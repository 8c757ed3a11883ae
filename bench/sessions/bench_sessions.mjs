#!/usr/bin/env node
// Session start to first PUT: the TypeScript wrapper (openStow) against moto.
//
// Issue 12's proof item, Node side: openStow() start -> ready alone (target
// <= 20 ms), and openStow -> new S3Client(stow.awsSdkV3Config()) ->
// CreateBucket -> PutObject 1 KiB against moto doing the same (target <= 0.5x).
//
// Node has no in-process moto, so the peer is moto's ThreadedMotoServer in a
// Python process, two ways (both are in the table):
//   - "moto warm": one long-lived Python helper (moto imported once) that starts
//     a new ThreadedMotoServer on "start\n" and prints its port; timed from the
//     write to the port line. The nearest thing to Python's in-process case:
//     only a pipe round trip is added.
//   - "moto cold": spawn `python -c ...` that imports moto, starts a
//     ThreadedMotoServer and prints its port; timed from spawn to the port line.
//     This counts the interpreter start and the moto import, which is what a
//     Node test pays for a fresh moto process (ours is a fresh process too).
//
// Method (bench/README.md): ours, ours with the memory backend (an extra row),
// moto warm, moto cold alternate within every repetition; median [min-max]; ratio = ours/peer of the medians (ms, lower is
// better). One untimed warm-up round per side first.
//
//   node bench/sessions/bench_sessions.mjs            # 15 repetitions
//   node bench/sessions/bench_sessions.mjs --quick    # 5
//
// Needs clients/typescript/dist (npm run build there) and its node_modules
// (@aws-sdk/client-s3); STOW_BIN picks the binary (default
// target/release/stow-s3); MOTO_PYTHON the Python with moto (default: the
// interpreter `python3` resolves to, so no pyenv shim is timed).
// The table goes to stdout, progress to stderr.

import { spawn, spawnSync } from "node:child_process";
import { existsSync, readFileSync, statSync, accessSync, constants } from "node:fs";
import { createRequire } from "node:module";
import { cpus, loadavg, release, totalmem, type as osType } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const TS_DIR = join(REPO, "clients", "typescript");
const DIST = join(TS_DIR, "dist", "index.js");
const REGION = "us-east-1";
const PAYLOAD = Buffer.alloc(1024, 0);
for (let i = 0; i < PAYLOAD.length; i++) PAYLOAD[i] = i % 256; // 1 KiB, deterministic

const argv = process.argv.slice(2);
const quick = argv.includes("--quick");
const repsArg = argv.indexOf("--reps");
const REPS = repsArg >= 0 ? Number(argv[repsArg + 1]) : quick ? 5 : 15;

const progress = (msg) => process.stderr.write(msg + "\n");
const fail = (msg) => {
  process.stderr.write(msg + "\n");
  process.exit(2);
};

if (!existsSync(DIST)) fail(`${DIST} is missing: run \`npm ci && npm run build\` in clients/typescript`);
const tsRequire = createRequire(join(TS_DIR, "package.json"));
let sdkPath;
try {
  sdkPath = tsRequire.resolve("@aws-sdk/client-s3");
} catch {
  fail("@aws-sdk/client-s3 is not in clients/typescript/node_modules: run `npm ci` there");
}
process.env.STOW_BIN ??= join(REPO, "target", "release", "stow-s3");
const BINARY = process.env.STOW_BIN;
try {
  accessSync(BINARY, constants.X_OK);
} catch {
  fail(`STOW_BIN=${BINARY} is not executable (cargo build --release --bin stow-s3)`);
}

const loadStart = loadavg().map((x) => x.toFixed(2)).join(" ");
const startedAt = new Date();
const cold = [];

let t = performance.now();
const stow = await import(pathToFileURL(DIST).href);
cold.push(["import clients/typescript/dist/index.js", performance.now() - t]);
t = performance.now();
const { S3Client, CreateBucketCommand, PutObjectCommand } = tsRequire("@aws-sdk/client-s3");
cold.push(["require @aws-sdk/client-s3", performance.now() - t]);
const sdkVersion = JSON.parse(readFileSync(join(dirname(tsRequire.resolve("@aws-sdk/client-s3/package.json")), "package.json"), "utf8")).version;

const PYTHON =
  process.env.MOTO_PYTHON ??
  spawnSync("python3", ["-c", "import sys; print(sys.executable)"], { encoding: "utf8" }).stdout.trim();
if (!PYTHON) fail("no python3 found (set MOTO_PYTHON to a Python with moto installed)");

// Python side of the peer. `warm`: serve start/stop commands; `cold`: start at once, exit on stdin EOF.
const HELPER = `
import logging, sys
logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no request log: only makes moto faster
from moto.server import ThreadedMotoServer
def start():
    s = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    s.start()
    print(s.get_host_and_port()[1], flush=True)
    return s
if sys.argv[1] == "cold":
    s = start()
    sys.stdin.read()
    sys.exit(0)
import moto
print("hello", moto.__version__, flush=True)
server = None
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "start":
        server = start()
    elif cmd == "stop":
        server.stop()
        server._server.server_close()
        server = None
        print("stopped", flush=True)
`;

/** Lines of a child's stdout, one promise at a time. */
class Lines {
  constructor(stream, what) {
    this.buf = "";
    this.queue = [];
    this.waiters = [];
    this.what = what;
    stream.setEncoding("utf8");
    stream.on("data", (chunk) => {
      this.buf += chunk;
      let nl;
      while ((nl = this.buf.indexOf("\n")) >= 0) {
        const line = this.buf.slice(0, nl);
        this.buf = this.buf.slice(nl + 1);
        const w = this.waiters.shift();
        if (w) w.resolve(line);
        else this.queue.push(line);
      }
    });
    stream.on("end", () => {
      for (const w of this.waiters.splice(0)) w.reject(new Error(`${this.what} closed its stdout`));
      this.ended = true;
    });
  }
  next() {
    if (this.queue.length) return Promise.resolve(this.queue.shift());
    if (this.ended) return Promise.reject(new Error(`${this.what} closed its stdout`));
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }
}

function pySpawn(mode) {
  const child = spawn(PYTHON, ["-c", HELPER, mode], { stdio: ["pipe", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (c) => (stderr += c));
  const exited = new Promise((r) => child.once("exit", (code, sig) => r({ code, sig })));
  const lines = new Lines(child.stdout, `moto ${mode} helper`);
  return { child, lines, exited, stderr: () => stderr };
}

const warmHelper = pySpawn("warm");
const hello = await warmHelper.lines.next().catch((e) => fail(`${e.message}\n${warmHelper.stderr()}`));
const motoVersion = hello.split(" ")[1];

function motoConfig(port) {
  // The same shape awsSdkV3Config() returns.
  return {
    endpoint: `http://127.0.0.1:${port}`,
    region: REGION,
    credentials: { accessKeyId: "testing", secretAccessKey: "testing" },
    forcePathStyle: true,
  };
}

const sides = {
  ours: {
    async start() {
      const s = await stow.openStow();
      return { config: () => s.awsSdkV3Config(), stop: () => s.close() };
    },
  },
  oursMem: {
    async start() {
      const s = await stow.openStow({ backend: "memory" });
      return { config: () => s.awsSdkV3Config(), stop: () => s.close() };
    },
  },
  warm: {
    async start() {
      warmHelper.child.stdin.write("start\n");
      const port = Number(await warmHelper.lines.next());
      return {
        config: () => motoConfig(port),
        stop: async () => {
          warmHelper.child.stdin.write("stop\n");
          const line = await warmHelper.lines.next();
          if (line !== "stopped") throw new Error(`moto warm helper said ${line}`);
        },
      };
    },
  },
  cold: {
    async start() {
      const h = pySpawn("cold");
      let port;
      try {
        port = Number(await h.lines.next());
      } catch (e) {
        throw new Error(`${e.message}\n${h.stderr()}`);
      }
      return {
        config: () => motoConfig(port),
        stop: async () => {
          h.child.kill("SIGTERM");
          await h.exited;
        },
      };
    },
  },
};
const SIDES = ["ours", "oursMem", "warm", "cold"];

let counter = 0;
async function firstPut(side) {
  const bucket = `bench-${side.toLowerCase()}-${String(++counter).padStart(4, "0")}`;
  const t0 = performance.now();
  const h = await sides[side].start();
  const t1 = performance.now();
  const client = new S3Client(h.config());
  const t2 = performance.now();
  await client.send(new CreateBucketCommand({ Bucket: bucket }));
  const t3 = performance.now();
  await client.send(new PutObjectCommand({ Bucket: bucket, Key: "first.bin", Body: PAYLOAD }));
  const t4 = performance.now();
  client.destroy();
  const t5 = performance.now();
  await h.stop();
  const t6 = performance.now();
  return {
    total: t4 - t0,
    ready: t1 - t0,
    client: t2 - t1,
    createBucket: t3 - t2,
    put: t4 - t3,
    stop: t6 - t5,
  };
}

async function readyOnly(side) {
  const t0 = performance.now();
  const h = await sides[side].start();
  const t1 = performance.now();
  await h.stop();
  const t2 = performance.now();
  return { ready: t1 - t0, stop: t2 - t1 };
}

async function spawnExit(args) {
  const t0 = performance.now();
  const child = spawn(args[0], args.slice(1), { stdio: "ignore" });
  const code = await new Promise((r) => child.once("exit", r));
  if (code !== 0) throw new Error(`${args.join(" ")} exited ${code}`);
  return performance.now() - t0;
}

// Cold, once: the first use of each side in this process.
cold.push(["first openStow → first PUT in the process", (await firstPut("ours")).total]);
cold.push(["first moto (warm helper, moto imported) → first PUT (moto loads its S3 backend on the first request)", (await firstPut("warm")).total]);
// Warm-up, untimed.
for (const side of SIDES) {
  await firstPut(side);
  await readyOnly(side);
}

const fig1 = { ours: [], oursMem: [], warm: [], cold: [] };
const fig2 = { ours: [], oursMem: [], warm: [], cold: [] };
for (let rep = 0; rep < REPS; rep++) {
  for (const side of SIDES) fig1[side].push(await firstPut(side));
  const f = (s) => fig1[s].at(-1).total.toFixed(1);
  progress(`[1] start → first PUT rep ${rep + 1}/${REPS}: ours ${f("ours")} ms, ours memory ${f("oursMem")}, moto warm ${f("warm")}, moto cold ${f("cold")}`);
}
for (let rep = 0; rep < REPS; rep++) {
  for (const side of SIDES) fig2[side].push(await readyOnly(side));
  const f = (s) => fig2[s].at(-1).ready.toFixed(1);
  progress(`[2] start → ready rep ${rep + 1}/${REPS}: ours ${f("ours")} ms, ours memory ${f("oursMem")}, moto warm ${f("warm")}, moto cold ${f("cold")}`);
}
// Client construction alone, against one live session (S3Client resolves most of its config lazily, on the first send).
const clientSamples = [];
{
  const s = await stow.openStow();
  try {
    for (let rep = 0; rep < REPS; rep++) {
      const t0 = performance.now();
      const c = new S3Client(s.awsSdkV3Config());
      clientSamples.push(performance.now() - t0);
      c.destroy();
    }
  } finally {
    await s.close();
  }
}
// Diagnostics: what the cold moto row pays before moto starts.
const diagReps = Math.max(5, Math.floor(REPS / 3));
const diag = { pyBare: [], pyMoto: [], stowHelp: [] };
for (let i = 0; i < diagReps; i++) {
  diag.pyBare.push(await spawnExit([PYTHON, "-c", "pass"]));
  diag.pyMoto.push(await spawnExit([PYTHON, "-c", "from moto.server import ThreadedMotoServer"]));
  diag.stowHelp.push(await spawnExit([BINARY, "serve", "--help"]));
}
progress("[3] client construction and diagnostics done");
warmHelper.child.stdin.end();
await warmHelper.exited;
const loadEnd = loadavg().map((x) => x.toFixed(2)).join(" ");
const duration = (Date.now() - startedAt.getTime()) / 1000;

// --- report ---------------------------------------------------------------------------------
function stat(samples) {
  const v = [...samples].sort((a, b) => a - b);
  const n = v.length;
  const median = n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return { median, min: v[0], max: v[n - 1] };
}
function fmt(x) {
  if (x >= 100) return Math.round(x).toLocaleString("en-US");
  if (x >= 10) return x.toFixed(1);
  return x.toFixed(2);
}
const cell = (s) => `${fmt(s.median)} [${fmt(s.min)}–${fmt(s.max)}]`;
function verdict(r) {
  if (r >= 0.97 && r <= 1.03) return "≈ same";
  return r < 1 ? `${(1 / r).toFixed(2)}× faster` : `${r.toFixed(2)}× slower`;
}
const pick = (rows, key) => stat(rows.map((r) => r[key]));

const out = [];
const w = (s = "") => out.push(s);
w("## sessions (Node): openStow vs moto ThreadedMotoServer in a Python process");
w();
w(
  `${startedAt.toISOString().replace("T", " ").slice(0, 19)} UTC, ${REPS} repetitions (${REPS < 15 ? "quick" : "full"}), ` +
    `${duration.toFixed(0)} s; ms, lower is better; median [min–max]; ratio = ours/peer of the medians`,
);
w();
w("| # | figure | ours (openStow) | moto warm (helper) | ours/warm | moto cold (spawn python) | ours/cold | target |");
w("| --- | --- | --- | --- | --- | --- | --- | --- |");
function row(num, title, key, rows, target = () => "", oursSide = "ours") {
  const o = pick(rows[oursSide], key);
  const a = pick(rows.warm, key);
  const b = pick(rows.cold, key);
  const ra = o.median / a.median;
  const rb = o.median / b.median;
  w(
    `| ${num} | ${title} | ${cell(o)} | ${cell(a)} | ${ra.toFixed(3)} (${verdict(ra)}) | ${cell(b)} | ${rb.toFixed(3)} (${verdict(rb)}) | ${target(o, ra, rb)} |`,
  );
}
const half = (r) => `${r <= 0.5 ? "met" : "MISSED"} (${r.toFixed(2)}×)`;
row("1", "start → first PUT (ready + new S3Client + CreateBucket + PutObject 1 KiB)", "total", fig1, (o, ra, rb) => `≤ 0.5×: vs warm ${half(ra)}, vs cold ${half(rb)}`);
row("1a", "… of which start → ready", "ready", fig1);
row("1b", "… of which new S3Client(config) (same shape both sides)", "client", fig1);
row("1c", "… of which CreateBucket (the client's first send: it resolves its config here)", "createBucket", fig1);
row("1d", "… of which PutObject 1 KiB", "put", fig1);
row("1m", "start → first PUT, ours with `openStow({ backend: \"memory\" })` (no disk, like moto)", "total", fig1, (o, ra, rb) => `(vs warm ${ra.toFixed(2)}×)`, "oursMem");
row("2", "start → ready alone (openStow() / helper start / spawn → port line)", "ready", fig2, (o) => `ours ≤ 20 ms: ${o.median <= 20 ? "met" : "MISSED"} (${fmt(o.median)} ms)`);
row("2m", "start → ready alone, ours with `openStow({ backend: \"memory\" })`", "ready", fig2, (o) => `(${fmt(o.median)} ms)`, "oursMem");
const stopRows = Object.fromEntries(["ours", "warm", "cold"].map((s) => [s, [...fig1[s], ...fig2[s]]]));
row("3", "close: stow.close() / helper stop() / SIGTERM python (not in 1 or 2)", "stop", stopRows);
w(`| 4 | new S3Client(stow.awsSdkV3Config()) alone, warm; not counted in 2 | ${cell(stat(clientSamples))} | — | — | — | — | reported separately |`);
w();
w("Notes:");
w(
  "- moto warm: one long-lived Python helper (moto imported once, before the run) starts a new `ThreadedMotoServer(ip_address=\"127.0.0.1\", port=0)` " +
    "on a `start` line and prints its port; timed from the write to the port line (the in-process start plus a pipe round trip). " +
    "`stop` is moto's `ThreadedMotoServer.stop()`, which waits for `serve_forever`'s 0.5 s poll.",
);
w(
  "- moto cold: `python -c …` spawned per repetition (the real interpreter, not a pyenv shim): interpreter start, `import moto.server`, " +
    "server start, port line. It counts Python's start and the moto import (see the diagnostics), which is what a Node test pays for " +
    "a fresh moto process; ours is a fresh process every time too. Its close is SIGTERM and the exit.",
);
w(
  "- Ours: `openStow()` spawns `stow-s3 serve` (filesystem backend in a new temp dir, generated keys, readiness on fd 3); every PUT " +
    "is fsynced before the answer. moto keeps objects in memory; werkzeug's request log is silenced in the helper.",
);
w(
  "- Both sides build the client as `new S3Client({ endpoint, region: \"us-east-1\", credentials, forcePathStyle: true })` (ours " +
    "from `stow.awsSdkV3Config()`); the SDK's defaults (request checksums, retries) are the same on both sides. Bucket names are fresh every repetition.",
);
w(
  "- 1m and 2m: the same session with `backend: \"memory\"` (no data directory, nothing fsynced), an option of `openStow` " +
    "(Python's `open_session` has none); not the default, shown to separate the disk's part of 1 and 2.",
);
w("- The first use in the process is not in the figures (one untimed warm-up round per side); see below.");
w();
w("Cold, once (the first use in this process):");
w();
for (const [k, v] of cold) w(`- ${k}: ${fmt(v)} ms`);
w();
w(`Diagnostics (${diagReps} repetitions each, spawn → exit):`);
w();
w(`- \`${PYTHON} -c pass\`: ${cell(stat(diag.pyBare))} ms`);
w(`- \`${PYTHON} -c "from moto.server import ThreadedMotoServer"\`: ${cell(stat(diag.pyMoto))} ms`);
w(`- \`stow-s3 serve --help\`: ${cell(stat(diag.stowHelp))} ms`);
w();
w("Machine:");
w();
const c = cpus();
w(`- cores: ${c.length}, CPU: ${c[0]?.model ?? "unknown"}, RAM: ${(totalmem() / 2 ** 30).toFixed(1)} GiB`);
w(`- kernel: ${osType()} ${release()}`);
const stowPkg = JSON.parse(readFileSync(join(TS_DIR, "package.json"), "utf8"));
w(`- Node ${process.version}, @aws-sdk/client-s3 ${sdkVersion}, ${stowPkg.name} ${stowPkg.version} from ${DIST}`);
w(`- moto ${motoVersion} under ${PYTHON}`);
const binVersion = spawnSync(BINARY, ["--version"], { encoding: "utf8" }).stdout.trim();
const built = statSync(BINARY).mtime.toISOString().replace("T", " ").slice(0, 16);
w(`- binary: ${BINARY} (${binVersion}, built ${built} UTC)`);
w(`- load average (1/5/15 min): start ${loadStart}, end ${loadEnd}`);
process.stdout.write(out.join("\n") + "\n");
