#!/usr/bin/env python3
"""The power-loss driver (issue 28): the kill -9 soak's engines run on the
power-loss harness (tools/powerloss), and each cycle's kill is followed by
a power cut — unsynced data and directory changes vanish — before the
restart and the model check.

    python3 tests/powerloss/powerloss.py --engine {s3,capture,rewind,serve,transfer,mcp,all} --cuts N [--seed S] [--fault NAME]

Engines (their load and checks are tests/soak's, see there):
  s3       `stow-s3 serve` with its data directory on the mount: PUT small,
           large and streamed, multipart, copy, delete, DeleteObjects; and
           versions, delete markers, deletions by version ID and legal holds
           in a versioned and an object-lock bucket
  capture  `workspace checkpoint` (plain, keyed, portable) and
           `checkpoint-delete` of two workspaces, the registry and the
           workspaces on the mount, with a `workspace watch` of one
  rewind   `workspace rewind` of an attached workspace (killed at its fault
           points or from outside, or run to the end), the root and the
           registry on the mount: after the cut every path is the
           pre-rewind state or the wanted one, a journal left is finished
           by the next command, an acknowledged rewind and its undo
           checkpoint survive the cut
  serve    `workspace serve` under the s3 engine's load (files of the
           served tree and its private store), with captures of the
           served tree; registry and workspace on the mount
  transfer import, apply, push, pull, export and restore killed at
           once (the restore spared half the time), the registries,
           archives, deltas and restored roots on the mount (the
           remote's data off it)
  mcp      `stow-s3 mcp` (object profile) keyed and guarded saves through
           the official SDK, the store on the mount

Each cycle: load, SIGKILL at a point drawn from the seed (every process on
the mount dies: the power takes them all), cut the power (half the cuts
drop everything unsynced, half keep a random subset, seeded), mount again,
then the engine's checks: every acknowledged write is there with its
bytes, nothing unacknowledged is half there, `stow-s3 check` and the
registry checks pass. The driver's own writes (trees a task edits) are made
durable before each load: the cut tests the product's writes only.

`--fault NAME` runs the product with STOW_TEST_FAULT=NAME: a skip point
leaves out one fsync, and the harness must then fail (tests/powerloss's
test shows it does). The product runs with the harness's syncfs shim
preloaded (LD_PRELOAD): FUSE does not forward syncfs(2).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "soak"))

import engine_workspace  # noqa: E402
from engine_mcp import McpEngine  # noqa: E402
from engine_rewind import RewindEngine  # noqa: E402
from engine_transfer import TransferEngine  # noqa: E402
from engine_s3 import S3Engine  # noqa: E402
from engine_workspace import CaptureEngine, ServeEngine  # noqa: E402
from soakkit import ROOT, Ctx, SoakFailure, stow_bin  # noqa: E402

ENGINE_NAMES = ["s3", "capture", "rewind", "serve", "transfer", "mcp"]


def harness_paths():
    """(powerloss binary, syncfs shim) from POWERLOSS_BIN / POWERLOSS_SHIM
    or the repository's target/debug."""
    target = ROOT / "target" / "debug"
    bin_ = os.environ.get("POWERLOSS_BIN") or str(target / "powerloss")
    shim = os.environ.get("POWERLOSS_SHIM") or str(target / "libstow_powerloss_shim.so")
    return bin_, shim


def unavailable() -> str | None:
    """Why the harness cannot run here, or None."""
    bin_, shim = harness_paths()
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing"
    if os.geteuid() != 0:
        return "the harness mounts with mount(2), which needs root"
    for p in (bin_, shim):
        if not os.path.exists(p):
            return f"{p} is not built (cargo build -p stow-powerloss -p stow-powerloss-shim)"
    return None


class Disk:
    """One harness mount: BASE/disk is the disk, BASE/mnt what processes
    use. `cut` loses the power (the daemon exits), `mount` powers on."""

    def __init__(self, base: pathlib.Path, ctx: Ctx):
        self.bin, self.shim = harness_paths()
        self.ctx = ctx
        self.backing, self.mnt, self.ctl = base / "disk", base / "mnt", base / "ctl.sock"
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mnt.mkdir(parents=True, exist_ok=True)
        self.proc = None

    def mount(self):
        self.log = open(self.backing.parent / "powerloss.log", "ab")
        self.proc = subprocess.Popen([self.bin, "mount", str(self.backing), str(self.mnt), "--control",
                                      str(self.ctl)], stdout=subprocess.PIPE, stderr=self.log)
        line = self.proc.stdout.readline().decode(errors="replace")
        if not line.startswith("POWERLOSS_READY"):
            self.proc.wait(timeout=10)
            raise RuntimeError(f"powerloss mount failed: {line!r}; see {self.log.name}")

    def control(self, *args) -> dict:
        out = subprocess.run([self.bin, *args, "--control", str(self.ctl)], capture_output=True, text=True,
                             timeout=300)
        try:
            doc = json.loads(out.stdout)
        except json.JSONDecodeError:
            doc = {"ok": False, "stdout": out.stdout, "stderr": out.stderr}
        if not doc.get("ok"):
            raise RuntimeError(f"powerloss {' '.join(args)}: {doc}")
        return doc

    def sync(self):
        self.control("sync")

    def cut(self, rng: random.Random):
        """Power off (all or a seeded subset of the unsynced state lost),
        then on again."""
        subset = rng.random() < 0.5
        args = ["cut", "--seed", str(rng.randrange(2**63))] if subset else ["cut"]
        doc = self.control(*args)
        self.proc.wait(timeout=60)
        self.log.close()
        st = self.ctx.stats
        st["cuts"] += 1
        st["cuts_subset" if subset else "cuts_drop_all"] += 1
        st["unsynced_meta_lost"] += doc["meta_dropped"]
        st["unsynced_data_lost"] += doc["data_dropped"]
        self.mount()

    def unmount(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.sync()
                self.control("cut")
            except Exception:
                self.proc.kill()
            self.proc.wait(timeout=60)
            self.log.close()
        subprocess.run(["umount", "-l", str(self.mnt)], capture_output=True)


# ---------------------------------------------------------------- engines


class PowerS3(S3Engine):
    """engine s3 with its data directory on the mount; the restart's check
    runs after a power cut."""

    def __init__(self, ctx, bin_, disk: Disk):
        super().__init__(ctx, bin_, disk.mnt)
        self.disk = disk

    def after_kill(self, rng):
        self.disk.cut(rng)
        return super().after_kill(rng)


class PowerCapture(CaptureEngine):
    """engine capture with the registry and the workspaces on the mount;
    the watcher dies with the power, the cut comes before the judging."""

    def __init__(self, ctx, bin_, disk: Disk):
        super().__init__(ctx, bin_, disk.mnt)
        self.disk = disk

    def setup(self):
        super().setup()
        self.disk.sync()
        # The trees a task edits are the driver's writes, not the product's:
        # made durable before each load (mutate_tree is looked up in
        # engine_workspace by CaptureEngine.cycle).
        self.unpatched = engine_workspace.mutate_tree
        disk, original = self.disk, self.unpatched

        def durable_mutate(*a, **kw):
            tree = original(*a, **kw)
            disk.sync()
            return tree

        engine_workspace.mutate_tree = durable_mutate

    def judge(self, procs, before, trees):
        if self.watcher is not None:
            self.watcher_killed = True
            self.stop_watcher(signal.SIGKILL)
        self.disk.cut(self.ctx.rng("cut"))
        super().judge(procs, before, trees)

    def teardown(self):
        engine_workspace.mutate_tree = getattr(self, "unpatched", engine_workspace.mutate_tree)
        self.stop_watcher(signal.SIGKILL)


class PowerRewind(RewindEngine):
    """engine rewind with the root and the registry on the mount: the
    cycle's edits (the driver's writes) are made durable before the rewind,
    and the power is cut as soon as the rewind process ends — killed, or
    acknowledged — before anything is judged."""

    def __init__(self, ctx, bin_, disk: Disk):
        super().__init__(ctx, bin_, disk.mnt)
        self.disk = disk

    def new_workspace(self):
        super().new_workspace()
        self.disk.sync()

    def before_rewind(self):
        self.disk.sync()

    def after_kill(self, rng):
        self.disk.cut(rng)


class PowerServe(ServeEngine):
    """engine serve (`workspace serve`: S3 writes into the workspace's
    files and private store, captures of the served tree) with the
    registry and the workspace on the mount; the restart's checks run
    after a power cut. A file's recorded properties are keyed to its inode
    and ctime, which the harness's rebuild cannot keep: not checked."""

    file_props_kept = False

    def __init__(self, ctx, bin_, disk: Disk):
        super().__init__(ctx, bin_, disk.mnt)
        self.disk = disk

    def setup(self):
        # `workspace prepare` copies the seed files without fsync (a
        # working copy, like a checkout; ARCHITECTURE.md "Assumptions about
        # the filesystem"): made durable here, as the driver's setup.
        super().setup()
        self.disk.sync()

    def after_kill(self, rng):
        self.disk.cut(rng)
        return super().after_kill(rng)


class PowerTransfer(TransferEngine):
    """engine transfer (import, apply, push, pull, export and restore,
    killed at once) with the three registries, the workspace, the archives,
    the deltas and the restored roots on the mount; the remote service's data is elsewhere (another
    machine's disk). The power is cut once the transfers have ended,
    before anything is judged."""

    def __init__(self, ctx, bin_, disk: Disk):
        super().__init__(ctx, bin_, disk.mnt)
        self.disk = disk
        self.remote_dir = disk.backing.parent / "remote"

    def setup(self):
        super().setup()
        self.disk.sync()

    def after_kill(self, rng):
        self.disk.cut(rng)


class PowerMcp(McpEngine):
    """engine mcp (`stow-s3 mcp`, object profile: keyed and guarded saves
    through the official SDK) with its store on the mount; the power is cut
    once the killed server has ended, then every request key is resolved
    and the store checked. The server's stderr log is kept off the mount
    (the driver holds it open across cuts)."""

    def __init__(self, ctx, bin_, disk: Disk):
        super().__init__(ctx, bin_, disk.mnt)
        self.disk = disk
        self.errlog.close()
        self.errlog = open(disk.backing.parent / "mcp-stderr.log", "a")

    def after_kill(self, rng):
        self.disk.cut(rng)


ENGINES = {"s3": PowerS3, "capture": PowerCapture, "rewind": PowerRewind, "serve": PowerServe,
           "transfer": PowerTransfer, "mcp": PowerMcp}


def run_engine(name: str, cuts: int, seed: int, *, workdir=None, keep=False, fault=None, log=print) -> dict:
    """`cuts` kill-and-cut cycles of engine `name`; returns its statistics,
    raises SoakFailure on the first broken rule (the working directory is
    then kept)."""
    bin_ = stow_bin()
    base = pathlib.Path(workdir or tempfile.mkdtemp(prefix=f"powerloss-{name}-"))
    base.mkdir(parents=True, exist_ok=True)
    ctx = Ctx(f"powerloss-{name}", seed, workdir=str(base))
    log(f"POWERLOSS START engine={name} seed={seed} cuts={cuts} fault={fault} workdir={base}")
    saved = {k: os.environ.get(k) for k in ("LD_PRELOAD", "STOW_TEST_FAULT")}
    disk = Disk(base, ctx)
    os.environ["LD_PRELOAD"] = disk.shim
    if fault:
        os.environ["STOW_TEST_FAULT"] = fault
    t0 = time.monotonic()
    ok = False
    eng = None
    try:
        disk.mount()
        eng = ENGINES[name](ctx, bin_, disk)
        eng.setup()
        for i in range(cuts):
            ctx.cycle = i
            eng.cycle()
            ctx.stats["cycles"] += 1
            if (i + 1) % 25 == 0 and i + 1 < cuts:
                log(f"POWERLOSS engine={name} seed={seed} cut {i + 1}/{cuts} "
                    f"({time.monotonic() - t0:.0f}s) {dict(sorted(ctx.stats.items()))}")
        if hasattr(eng, "finish"):
            eng.finish()  # judges what the last cycle left (as the soak does)
        ok = True
    except SoakFailure as e:
        log(str(e).replace("python3 tests/soak/soak.py --engine powerloss-",
                           "python3 tests/powerloss/powerloss.py --engine "))
        raise
    except Exception as e:
        log(f"POWERLOSS ERROR engine={name} seed={seed} cycle={ctx.cycle}: {e!r} (workdir {base} kept)\n"
            + traceback.format_exc())
        raise
    finally:
        if eng is not None:
            eng.teardown()
        disk.unmount()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if ok and not keep:
            shutil.rmtree(base, ignore_errors=True)
    stats = dict(sorted(ctx.stats.items()))
    stats.setdefault("failures", 0)
    stats["wall_seconds"] = round(time.monotonic() - t0, 1)
    log(f"POWERLOSS DONE engine={name} seed={seed} cuts={cuts} {json.dumps(stats)}")
    return stats


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", choices=ENGINE_NAMES + ["all"], default="all")
    ap.add_argument("--cuts", type=int, default=int(os.environ.get("POWERLOSS_CUTS", "200")))
    ap.add_argument("--seed", type=int, default=None, help="default: POWERLOSS_SEED, else random (printed)")
    ap.add_argument("--fault", default=None, help="STOW_TEST_FAULT for the product (a skip point)")
    ap.add_argument("--workdir", help="where the disks live (default: a new temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the working directory after success")
    a = ap.parse_args(argv)
    why = unavailable()
    if why:
        print(f"powerloss: skipped: {why}")
        return 0
    seed = a.seed if a.seed is not None else int(os.environ.get("POWERLOSS_SEED")
                                                 or random.SystemRandom().randrange(10**9))
    names = ENGINE_NAMES if a.engine == "all" else [a.engine]
    results = {}
    for name in names:
        wd = os.path.join(a.workdir, name) if a.workdir else None
        try:
            results[name] = run_engine(name, a.cuts, seed, workdir=wd, keep=a.keep, fault=a.fault,
                                       log=lambda m: print(m, flush=True))
        except Exception:
            print(json.dumps({"seed": seed, "failed": name, "results": results}, indent=2))
            return 1
    print(json.dumps({"seed": seed, "cuts": a.cuts, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
