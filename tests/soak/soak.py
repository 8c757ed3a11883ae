#!/usr/bin/env python3
"""The kill -9 soak harness (issue 14): for each engine, crash-recover
cycles under concurrent load against the real binary, with a model checked
after every restart.

    python3 tests/soak/soak.py --engine {s3,mcp,capture,serve,transfer,rewind,all} --cycles N --seed S

Engines:
  s3        `stow-s3 serve`: PUT (small, large, streamed), multipart upload and
            completion, CopyObject, DeleteObject(s), under 4 concurrent clients;
            and in a versioned bucket and an object-lock bucket (GOVERNANCE
            1 day default retention, legal holds): new versions (PUT, copy of
            a version, multipart), delete markers, deletions by version ID
            (with and without the bypass), legal hold changes; after each
            restart ListObjectVersions (paged) and GET by versionId show every
            acknowledged version whole and no deleted one, IsLatest is right,
            a locked version's DELETE without the bypass is refused, usage
            counts every version
  mcp       `stow-s3 mcp` (object profile, official MCP SDK): keyed saves
            (unconditional, guarded, create-only) from 4 concurrent tasks; resolve
  capture   `workspace checkpoint` (plain, keyed, portable) of two workspaces at
            once, and `checkpoint-delete`
  serve     `workspace serve`: file and private-object writes over S3, with a
            plain capture of the served tree running meanwhile
  transfer  `workspace import`, `apply`, `push`, `pull` (remote: a second
            `stow-s3 serve`) and `export`, all at once
  rewind    `workspace rewind` of an attached tree (dirs, files of varied sizes,
            empty dirs, links, modes) to an earlier checkpoint or its undo
            checkpoint, whole or `--paths`, killed at a fault point or from
            outside; the next status, checkpoint or rewind finishes it

Each cycle starts the load, SIGKILLs the process(es) at a point drawn from
the seed, restarts or re-reads, and checks: acknowledged writes are there
with their bytes and ETag, nothing unacknowledged is half there, usage
counters equal what is stored, `stow-s3 check` passes, the registry
verifies (manifests, blobs by digest, usage, restores), a retry of a
killed transfer succeeds, and a killed rewind left every path as it was or
as its checkpoint has it, is finished by the next status, checkpoint or
rewind, and its undo checkpoint holds the tree it replaced. The seed and
cycle are printed at the start and in every failure; `--seed S --cycles N`
replays the same choices (the timing of threads and processes still varies
from run to run).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import shutil
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from soakkit import Ctx, SoakFailure, stow_bin  # noqa: E402

ENGINE_NAMES = ["s3", "mcp", "capture", "serve", "transfer", "rewind"]


def engine_class(name):
    if name == "s3":
        from engine_s3 import S3Engine
        return S3Engine
    if name == "mcp":
        from engine_mcp import McpEngine
        return McpEngine
    if name == "capture":
        from engine_workspace import CaptureEngine
        return CaptureEngine
    if name == "serve":
        from engine_workspace import ServeEngine
        return ServeEngine
    if name == "transfer":
        from engine_transfer import TransferEngine
        return TransferEngine
    if name == "rewind":
        from engine_rewind import RewindEngine
        return RewindEngine
    raise ValueError(name)


def run_engine(name: str, cycles: int, seed: int, *, workdir=None, keep=False, bin_=None, log=print) -> dict:
    """Runs `cycles` crash-recover cycles of engine `name`; returns its
    statistics, raises SoakFailure on the first broken rule (the working
    directory is then kept)."""
    bin_ = bin_ or stow_bin()
    base = pathlib.Path(workdir or tempfile.mkdtemp(prefix=f"soak-{name}-"))
    base.mkdir(parents=True, exist_ok=True)
    ctx = Ctx(name, seed, workdir=str(base))
    log(f"SOAK START engine={name} seed={seed} cycles={cycles} workdir={base}")
    eng = engine_class(name)(ctx, bin_, base)
    t0 = time.monotonic()
    ok = False
    try:
        eng.setup()
        for i in range(cycles):
            ctx.cycle = i
            eng.cycle()
            ctx.stats["cycles"] += 1
            if i + 1 == cycles and hasattr(eng, "finish"):
                eng.finish()
            if (i + 1) % 25 == 0 and i + 1 < cycles:
                log(f"SOAK engine={name} seed={seed} cycle {i + 1}/{cycles} "
                    f"({time.monotonic() - t0:.0f}s) {dict(sorted(ctx.stats.items()))}")
        ok = True
    except SoakFailure as e:
        log(str(e))
        raise
    except Exception as e:
        log(f"SOAK ERROR engine={name} seed={seed} cycle={ctx.cycle}: {e!r} (workdir {base} kept)\n"
            f"  replay: python3 tests/soak/soak.py --engine {name} --seed {seed} --cycles {ctx.cycle + 1}\n"
            + traceback.format_exc())
        raise
    finally:
        eng.teardown()
        if ok and not keep:
            shutil.rmtree(base, ignore_errors=True)
    stats = dict(sorted(ctx.stats.items()))
    stats.setdefault("failures", 0)
    stats["wall_seconds"] = round(time.monotonic() - t0, 1)
    log(f"SOAK DONE engine={name} seed={seed} cycles={cycles} {json.dumps(stats)}")
    return stats


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", choices=ENGINE_NAMES + ["all"], default="all")
    ap.add_argument("--cycles", type=int, default=int(os.environ.get("SOAK_CYCLES", "200")))
    ap.add_argument("--seed", type=int, default=None, help="default: SOAK_SEED, else random (printed)")
    ap.add_argument("--workdir", help="where the stores live (default: a new temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the working directory after success")
    a = ap.parse_args(argv)
    seed = a.seed if a.seed is not None else int(os.environ.get("SOAK_SEED") or random.SystemRandom().randrange(10**9))
    names = ENGINE_NAMES if a.engine == "all" else [a.engine]
    results = {}
    for name in names:
        wd = os.path.join(a.workdir, name) if a.workdir else None
        try:
            results[name] = run_engine(name, a.cycles, seed, workdir=wd, keep=a.keep,
                                       log=lambda m: print(m, flush=True))
        except Exception:
            print(json.dumps({"seed": seed, "failed": name, "results": results}, indent=2))
            return 1
    print(json.dumps({"seed": seed, "cycles": a.cycles, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
