#!/usr/bin/env python3
"""Session start to first PUT: the Python wrapper (stow_s3.open_session) against moto.

Issue 12's proof item: start -> first PUT through the wrapper vs moto's
ThreadedMotoServer start -> first PUT, the same boto3 client construction on
both sides (target <= 0.5x), and open_session() alone, start to ready
(target <= 20 ms; boto3's client construction is reported separately).

Method (bench/README.md): the two sides alternate within every repetition
(ours, moto, ours, moto, ...); each cell is the median over repetitions with
the min-max spread; the ratio is ours/peer of the medians (lower is better for
milliseconds). One untimed warm-up round per side runs first (imports, page
cache, boto3's loader cache); the first-in-process (cold) costs are reported
on their own, once.

Run from a checkout (no install needed):

    python3 bench/sessions/bench_sessions.py            # 15 repetitions, about 25 s
    python3 bench/sessions/bench_sessions.py --quick    # 5 repetitions

STOW_BIN picks the binary (default: target/release/stow-s3 of this checkout).
The table goes to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "clients" / "python" / "src"))
os.environ.setdefault("STOW_BIN", str(REPO / "target" / "release" / "stow-s3"))

PAYLOAD = bytes(range(256)) * 4  # 1 KiB, deterministic
REGION = "us-east-1"
MOTO_KEY = "testing"


def ms(seconds: float) -> float:
    return seconds * 1000.0


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def mem_total() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def fs_type(path: str) -> str:
    best, kind = "", "unknown"
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            mnt = parts[1]
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, kind = mnt, f"{parts[2]} ({parts[0]} on {mnt}, {parts[3]})"
    except OSError:
        pass
    return kind


class Stat:
    def __init__(self, samples: list[float]) -> None:
        self.samples = list(samples)
        self.median = statistics.median(samples)
        self.min = min(samples)
        self.max = max(samples)

    def cell(self) -> str:
        return f"{fmt(self.median)} [{fmt(self.min)}–{fmt(self.max)}]"


def fmt(v: float) -> str:
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def verdict(ratio: float) -> str:
    if 0.97 <= ratio <= 1.03:
        return "≈ same"
    if ratio < 1:
        return f"{1 / ratio:.2f}× faster"
    return f"{ratio:.2f}× slower"


# --- the two sides ----------------------------------------------------------------------------

def make_client(boto3, config_cls, endpoint: str, access_key: str, secret_key: str, region: str):
    """The one client construction both sides use (the default boto3 session, explicit keys)."""
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name=region,
        config=config_cls(s3={"addressing_style": "path"}),
    )


class Sides:
    def __init__(self, boto3, config_cls, open_session, moto_cls) -> None:
        self.boto3 = boto3
        self.config_cls = config_cls
        self.open_session = open_session
        self.moto_cls = moto_cls
        self.counter = 0

    def bucket(self, side: str) -> str:
        # moto keeps its backends in process-global state across servers: fresh names everywhere.
        self.counter += 1
        return f"bench-{side}-{self.counter:04d}"

    # ours
    def ours_start(self):
        return self.open_session()

    def ours_conn(self, session):
        return session.endpoint, session.access_key, session.secret_key, session.region

    def ours_stop(self, session) -> None:
        session.close()

    # moto
    def moto_start(self):
        server = self.moto_cls(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        return server

    def moto_conn(self, server):
        host, port = server.get_host_and_port()
        return f"http://{host}:{port}", MOTO_KEY, MOTO_KEY, REGION

    def moto_stop(self, server) -> None:
        server.stop()

    def moto_release(self, server) -> None:
        # stop() shuts serve_forever down but leaves the listening socket open; close it, untimed.
        inner = getattr(server, "_server", None)
        if inner is not None:
            inner.server_close()

    def first_put(self, side: str) -> dict[str, float]:
        """start -> ready -> client -> CreateBucket -> PutObject; then stop, timed on its own."""
        start, conn, stop = (
            (self.ours_start, self.ours_conn, self.ours_stop)
            if side == "ours"
            else (self.moto_start, self.moto_conn, self.moto_stop)
        )
        bucket = self.bucket(side)
        t0 = time.perf_counter()
        handle = start()
        t1 = time.perf_counter()
        client = make_client(self.boto3, self.config_cls, *conn(handle))
        t2 = time.perf_counter()
        client.create_bucket(Bucket=bucket)
        t3 = time.perf_counter()
        client.put_object(Bucket=bucket, Key="first.bin", Body=PAYLOAD)
        t4 = time.perf_counter()
        client.close()
        t5 = time.perf_counter()
        stop(handle)
        t6 = time.perf_counter()
        if side == "moto":
            self.moto_release(handle)
        return {
            "total": ms(t4 - t0),
            "ready": ms(t1 - t0),
            "client": ms(t2 - t1),
            "create_bucket": ms(t3 - t2),
            "put": ms(t4 - t3),
            "total_no_client": ms((t4 - t0) - (t2 - t1)),
            "stop": ms(t6 - t5),
        }

    def ready_only(self, side: str) -> dict[str, float]:
        start, stop = (self.ours_start, self.ours_stop) if side == "ours" else (self.moto_start, self.moto_stop)
        t0 = time.perf_counter()
        handle = start()
        t1 = time.perf_counter()
        stop(handle)
        t2 = time.perf_counter()
        if side == "moto":
            self.moto_release(handle)
        return {"ready": ms(t1 - t0), "stop": ms(t2 - t1)}


# --- diagnostics: the binary without the wrapper, and the disk --------------------------------

def spawn_ready(binary: str, args: list[str]) -> float:
    """Spawn the binary with --ready-fd, time to the readiness line (ms), then SIGTERM it (untimed)."""
    read_fd, write_fd = os.pipe()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [binary, "serve", "--host", "127.0.0.1", "--port", "0", *args, "--ready-fd", str(write_fd),
         "--access-key=STOWBENCHAAAAAAAAAAA", "--secret-key=stow-bench-secret-key-000000000000"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=(write_fd,),
    )  # fmt: skip
    os.close(write_fd)
    buf = b""
    try:
        while b"\n" not in buf:
            chunk = os.read(read_fd, 65536)
            if not chunk:
                raise RuntimeError(f"{binary} serve {' '.join(args)} exited before it was ready")
            buf += chunk
        elapsed = ms(time.perf_counter() - t0)
    finally:
        os.close(read_fd)
        proc.terminate()
        proc.wait()
    return elapsed


def spawn_exit(binary: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([binary, "serve", "--help"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return ms(time.perf_counter() - t0)


def fsync_probe(directory: str, n: int) -> Stat:
    """Write 4 KiB + fsync a new file, then fsync the directory: the disk's latency right now."""
    samples = []
    for i in range(n):
        path = os.path.join(directory, f"probe-{i}")
        t0 = time.perf_counter()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, PAYLOAD * 4)
        os.fsync(fd)
        os.close(fd)
        dfd = os.open(directory, os.O_RDONLY)
        os.fsync(dfd)
        os.close(dfd)
        samples.append(ms(time.perf_counter() - t0))
    return Stat(samples)


# --- the run ----------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 repetitions instead of 15")
    parser.add_argument("--reps", type=int, help="repetitions (overrides --quick)")
    parser.add_argument("--backend", choices=["filesystem", "memory"], default="filesystem",
                        help="open_session(backend=...): the durable default, or in memory")
    args = parser.parse_args()
    reps = args.reps or (5 if args.quick else 15)
    binary = os.environ["STOW_BIN"]
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        print(f"STOW_BIN={binary} is not an executable file (build it: cargo build --release --bin stow-s3)",
              file=sys.stderr)  # fmt: skip
        return 2

    load_start = loadavg()
    started = time.time()
    cold: dict[str, float] = {}

    # Cold, once: imports and the first use of each side in this process.
    t = time.perf_counter()
    import boto3
    from botocore.config import Config
    cold["import boto3 + botocore.config"] = ms(time.perf_counter() - t)
    t = time.perf_counter()
    import stow_s3
    from stow_s3 import open_session
    cold["import stow_s3"] = ms(time.perf_counter() - t)
    t = time.perf_counter()
    from moto.server import ThreadedMotoServer
    cold["import moto.server (ThreadedMotoServer)"] = ms(time.perf_counter() - t)
    # werkzeug logs every request to stderr; silencing it only makes moto faster.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    t = time.perf_counter()
    make_client(boto3, Config, "http://127.0.0.1:9", "x", "y", REGION).close()
    cold["first boto3.client('s3') in the process (loads botocore's models)"] = ms(time.perf_counter() - t)

    sides = Sides(boto3, Config, functools.partial(open_session, backend=args.backend), ThreadedMotoServer)
    first_ours = sides.first_put("ours")
    first_moto = sides.first_put("moto")
    cold["first open_session → first PUT in the process"] = first_ours["total"]
    cold["first ThreadedMotoServer → first PUT in the process (moto loads its S3 backend on the first request)"] = first_moto["total"]

    # Warm-up, untimed.
    for side in ("ours", "moto"):
        sides.first_put(side)
        sides.ready_only(side)

    fig1: dict[str, list[dict[str, float]]] = {"ours": [], "moto": []}
    fig2: dict[str, list[dict[str, float]]] = {"ours": [], "moto": []}
    clients: dict[str, list[float]] = {"boto3.client": [], "Session.s3_client": []}

    for rep in range(reps):
        for side in ("ours", "moto"):
            fig1[side].append(sides.first_put(side))
        progress(f"[1] start → first PUT rep {rep + 1}/{reps}: ours {fmt(fig1['ours'][-1]['total'])} ms, "
                 f"moto {fmt(fig1['moto'][-1]['total'])} ms")  # fmt: skip
    for rep in range(reps):
        for side in ("ours", "moto"):
            fig2[side].append(sides.ready_only(side))
        progress(f"[2] start → ready rep {rep + 1}/{reps}: ours {fmt(fig2['ours'][-1]['ready'])} ms, "
                 f"moto {fmt(fig2['moto'][-1]['ready'])} ms")  # fmt: skip

    # Figure 3: boto3 client construction alone, against one live session.
    session = open_session()
    try:
        for rep in range(reps):
            t0 = time.perf_counter()
            c = make_client(boto3, Config, session.endpoint, session.access_key, session.secret_key, session.region)
            t1 = time.perf_counter()
            c.close()
            t2 = time.perf_counter()
            c = session.s3_client()
            t3 = time.perf_counter()
            c.close()
            clients["boto3.client"].append(ms(t1 - t0))
            clients["Session.s3_client"].append(ms(t3 - t2))
        progress(f"[3] client construction: {reps} reps done")
    finally:
        session.close()

    # Diagnostics: the binary alone (no wrapper), fresh vs existing data dir vs memory; the disk.
    diag_reps = max(5, reps // 3 * 2)
    base = tempfile.mkdtemp(prefix="stow-bench-sessions-")
    diag: dict[str, list[float]] = {"help": [], "fresh": [], "existing": [], "memory": []}
    try:
        existing = os.path.join(base, "existing")
        spawn_ready(binary, ["--data-dir", existing])  # create it, untimed
        for i in range(diag_reps):
            diag["help"].append(spawn_exit(binary))
            fresh = os.path.join(base, f"fresh-{i}")
            diag["fresh"].append(spawn_ready(binary, ["--data-dir", fresh]))
            diag["existing"].append(spawn_ready(binary, ["--data-dir", existing]))
            diag["memory"].append(spawn_ready(binary, ["--backend", "memory"]))
        probe = fsync_probe(base, 10)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    progress("[4] diagnostics done")
    load_end = loadavg()
    duration = time.time() - started

    # --- report -------------------------------------------------------------------------------
    s = lambda rows, key: Stat([r[key] for r in rows])  # noqa: E731
    out: list[str] = []
    w = out.append
    w("## sessions (Python): stow_s3.open_session vs moto ThreadedMotoServer")
    w("")
    w(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z', time.localtime(started))}, {reps} repetitions "
      f"({'quick' if reps < 15 else 'full'}), {duration:.0f} s; ms, lower is better; "
      "median [min–max]; ratio = ours/peer of the medians")  # fmt: skip
    w("")
    w("| # | figure | ours (stow-s3 via stow_s3) | peer (moto ThreadedMotoServer) | ours/peer | verdict | target |")
    w("| --- | --- | --- | --- | --- | --- | --- |")

    def row(num: str, title: str, a: Stat, b: Stat | None, target: str = "") -> None:
        if b is None:
            w(f"| {num} | {title} | {a.cell()} | — | — | — | {target} |")
            return
        ratio = a.median / b.median
        w(f"| {num} | {title} | {a.cell()} | {b.cell()} | {ratio:.3f} | {verdict(ratio)} | {target} |")

    r1 = s(fig1["ours"], "total").median / s(fig1["moto"], "total").median
    row("1", "start → first PUT (ready + boto3.client + CreateBucket + PutObject 1 KiB)",
        s(fig1["ours"], "total"), s(fig1["moto"], "total"),
        f"≤ 0.5×: {'met' if r1 <= 0.5 else 'MISSED'} ({r1:.2f}×)")  # fmt: skip
    row("1a", "… of which start → ready", s(fig1["ours"], "ready"), s(fig1["moto"], "ready"))
    row("1b", "… of which boto3.client(...) (same call both sides)", s(fig1["ours"], "client"), s(fig1["moto"], "client"))
    row("1c", "… of which CreateBucket", s(fig1["ours"], "create_bucket"), s(fig1["moto"], "create_bucket"))
    row("1d", "… of which PutObject 1 KiB", s(fig1["ours"], "put"), s(fig1["moto"], "put"))
    r1e = s(fig1["ours"], "total_no_client").median / s(fig1["moto"], "total_no_client").median
    row("1e", "start → first PUT without the client construction (1 − 1b, per repetition)",
        s(fig1["ours"], "total_no_client"), s(fig1["moto"], "total_no_client"),
        f"(≤ 0.5×: {'met' if r1e <= 0.5 else 'missed'}, {r1e:.2f}×)")  # fmt: skip
    ready = s(fig2["ours"], "ready")
    row("2", "open_session() / ThreadedMotoServer().start() alone, start → ready", ready, s(fig2["moto"], "ready"),
        f"ours ≤ 20 ms: {'met' if ready.median <= 20 else 'MISSED'} ({fmt(ready.median)} ms)")  # fmt: skip
    stop_ours = Stat([r["stop"] for r in fig1["ours"] + fig2["ours"]])
    stop_moto = Stat([r["stop"] for r in fig1["moto"] + fig2["moto"]])
    row("3", "close: Session.close() / ThreadedMotoServer.stop() (not in 1 or 2)", stop_ours, stop_moto)
    row("4", "boto3.client('s3', endpoint_url=…, keys, region, path-style), warm; not counted in 2",
        Stat(clients["boto3.client"]), None, "reported separately")  # fmt: skip
    row("4a", "Session.s3_client() (the wrapper's helper: one cached private boto3 session)",
        Stat(clients["Session.s3_client"]), None)  # fmt: skip
    w("")
    w("Notes:")
    w("- 1: both sides build the client with the same `boto3.client(\"s3\", endpoint_url=…, aws_access_key_id=…, "
      "aws_secret_access_key=…, region_name=\"us-east-1\", config=Config(s3={\"addressing_style\": \"path\"}))` on the "
      "default boto3 session (its loader cache is warm after the warm-up round); bucket names are fresh every "
      "repetition (moto keeps its backends in process-global state across servers).")  # fmt: skip
    w("- Ours: `open_session()` spawns `stow-s3 serve` (filesystem backend in a new temp dir, generated keys) and "
      "waits for its readiness line; every PUT is fsynced before the answer. moto: a werkzeug server thread inside "
      "this Python process (no new process, no disk: objects in memory); werkzeug's request log is silenced.")  # fmt: skip
    w("- 3 is measured after the client is closed, over the repetitions of 1 and 2 together; ours is SIGTERM + wait + "
      "removing the temp dir, moto's `stop()` waits for `serve_forever`'s 0.5 s poll.")  # fmt: skip
    w("- The first use in a process is not in the figures (one untimed warm-up round per side); see below.")
    w("")
    w("Cold, once (the first use in this process, in this order):")
    w("")
    for k, v in cold.items():
        w(f"- {k}: {fmt(v)} ms")
    w("")
    w(f"Diagnostics ({diag_reps} repetitions each, the binary spawned directly with `--ready-fd`, no wrapper):")
    w("")
    w(f"- `stow-s3 serve --help` (exec + exit): {Stat(diag['help']).cell()} ms")
    w(f"- `serve`, fresh data dir (what open_session does): {Stat(diag['fresh']).cell()} ms")
    w(f"- `serve`, existing data dir: {Stat(diag['existing']).cell()} ms")
    w(f"- `serve --backend memory`: {Stat(diag['memory']).cell()} ms")
    w(f"- disk now: write 4 KiB + fsync + fsync dir, new file: {probe.cell()} ms (10 samples)")
    w("")
    w("Machine:")
    w("")
    w(f"- cores: {os.cpu_count()}, CPU: {cpu_model()}, RAM: {mem_total()}")
    w(f"- kernel: {platform.system()} {platform.release()}; temp dir {tempfile.gettempdir()}: "
      f"{fs_type(os.path.realpath(tempfile.gettempdir()))}")  # fmt: skip
    import botocore
    import moto

    w(f"- Python {platform.python_version()} ({sys.executable}), boto3 {boto3.__version__}, "
      f"botocore {botocore.__version__}, moto {moto.__version__}")  # fmt: skip
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
    mtime = time.strftime("%Y-%m-%d %H:%M", time.localtime(os.path.getmtime(binary)))
    w(f"- binary: {binary} ({version}, built {mtime}); stow_s3 from {Path(stow_s3.__file__).parent}")
    w(f"- load average (1/5/15 min): start {load_start}, end {load_end}")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
