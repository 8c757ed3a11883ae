#!/usr/bin/env python3
"""Per-test isolation cost (issue 30): ``stow_s3_clean`` against moto.

Each "test" runs the same boto3 calls (CreateBucket, a 1 KiB PutObject,
ListObjectsV2, GetObject) on a clean S3 state. Sides, side by side in one run:

* ``stow_s3_clean`` — one warm session (``stow_s3.open_session()``, as the
  session-scoped ``stow_s3_server`` fixture starts it) reset before every test
  (``session.reset()``, what the fixture does), with the test's client made per
  test (``session.s3_client()``) or shared by the suite (a session-scoped client);
  filesystem backend (the fixture's) and memory backend;
* ``mock_aws`` — moto's decorator/context per test: enter, a client made inside
  (it must be), the calls, exit;
* ``ThreadedMotoServer`` + ``POST /moto-api/reset`` — one warm moto server, a
  shared client, reset before every test.

Also the isolation step alone: ``session.reset()`` against ``/moto-api/reset``
and against entering and leaving ``mock_aws`` with no calls.

Method (bench/README.md): sides alternate within every repetition; a cell is
the median over repetitions of the mean per-test time of ``--tests`` tests, with
the min-max spread; ratios are ours/peer of the medians (lower is better). One
untimed warm-up round runs first.

    python3 bench/sessions/bench_reset.py            # 15 repetitions of 20 tests
    python3 bench/sessions/bench_reset.py --quick    # 5 repetitions

STOW_BIN picks the binary (default: target/release/stow-s3 of this checkout).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sessions import Stat, cpu_model, fmt, fs_type, loadavg, mem_total, progress, verdict  # noqa: E402

import stow_s3  # noqa: E402  (bench_sessions put clients/python/src on the path)

PAYLOAD = bytes(range(256)) * 4
REGION = "us-east-1"


def calls(s3) -> None:
    """The body of every test, the same on every side."""
    s3.create_bucket(Bucket="bench-bucket")
    s3.put_object(Bucket="bench-bucket", Key="k", Body=PAYLOAD)
    assert s3.list_objects_v2(Bucket="bench-bucket")["KeyCount"] == 1
    assert s3.get_object(Bucket="bench-bucket", Key="k")["Body"].read() == PAYLOAD


def per_test(run, tests: int) -> float:
    """Mean milliseconds of one test over `tests` tests."""
    start = time.perf_counter()
    for _ in range(tests):
        run()
    return (time.perf_counter() - start) * 1000.0 / tests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--tests", type=int, default=20)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    reps = 5 if args.quick else args.reps

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", REGION)
    import boto3
    import moto
    from botocore.config import Config
    from moto import mock_aws
    from moto.server import ThreadedMotoServer

    load_start = loadavg()
    fs_session = stow_s3.open_session()
    mem_session = stow_s3.open_session(backend="memory")
    fs_client = fs_session.s3_client()
    mem_client = mem_session.s3_client()
    moto_server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto_server.start()
    host, port = moto_server.get_host_and_port()
    moto_url = f"http://{host}:{port}"
    moto_client = boto3.client("s3", endpoint_url=moto_url, region_name=REGION,
                               config=Config(s3={"addressing_style": "path"}))

    def moto_reset() -> None:
        req = urllib.request.Request(f"{moto_url}/moto-api/reset", data=b"", method="POST")
        with urllib.request.urlopen(req) as r:
            r.read()

    def mock_aws_test() -> None:
        with mock_aws():
            calls(boto3.client("s3", region_name=REGION))

    def mock_aws_empty() -> None:
        with mock_aws():
            pass

    sides = {
        "stow_s3_clean, client per test (filesystem)": lambda: (fs_session.reset(), calls(fs_session.s3_client())),
        "stow_s3_clean, shared client (filesystem)": lambda: (fs_session.reset(), calls(fs_client)),
        "stow_s3_clean, shared client (memory)": lambda: (mem_session.reset(), calls(mem_client)),
        "mock_aws per test": mock_aws_test,
        "ThreadedMotoServer + /moto-api/reset, shared client": lambda: (moto_reset(), calls(moto_client)),
        "reset alone: session.reset() (filesystem)": fs_session.reset,
        "reset alone: session.reset() (memory)": mem_session.reset,
        "reset alone: /moto-api/reset": moto_reset,
        "reset alone: mock_aws enter+exit": mock_aws_empty,
    }
    try:
        for run in sides.values():  # warm-up, untimed
            per_test(run, 3)
        samples: dict[str, list[float]] = {name: [] for name in sides}
        for rep in range(reps):
            progress(f"repetition {rep + 1}/{reps}")
            for name, run in sides.items():
                samples[name].append(per_test(run, args.tests))
    finally:
        fs_session.close()
        mem_session.close()
        moto_server.stop()
    stats = {name: Stat(v) for name, v in samples.items()}

    def ratio(ours: str, peer: str) -> str:
        r = stats[ours].median / stats[peer].median
        return f"{r:.2f} ({verdict(r)})"

    print(f"# Per-test isolation: stow_s3_clean vs moto ({reps} repetitions x {args.tests} tests)\n")
    print("| side | ms per test, median [min–max] |")
    print("| --- | --- |")
    for name, stat in stats.items():
        print(f"| {name} | {stat.cell()} |")
    print("\n| ratio (ours / peer, medians) | value | target |")
    print("| --- | --- | --- |")
    mock, server = "mock_aws per test", "ThreadedMotoServer + /moto-api/reset, shared client"
    for ours in list(sides)[:3]:
        print(f"| {ours} / mock_aws per test | {ratio(ours, mock)} | ≤ 1.0 |")
    print(f"| stow_s3_clean, shared client (filesystem) / moto server + reset | "
          f"{ratio('stow_s3_clean, shared client (filesystem)', server)} | — |")
    print(f"| session.reset() (filesystem) / /moto-api/reset | "
          f"{ratio('reset alone: session.reset() (filesystem)', 'reset alone: /moto-api/reset')} | ≤ 0.5 |")
    print(f"| session.reset() (memory) / /moto-api/reset | "
          f"{ratio('reset alone: session.reset() (memory)', 'reset alone: /moto-api/reset')} | ≤ 0.5 |")
    binary = os.environ.get("STOW_BIN", "")
    print("\nMachine:", json.dumps({
        "cpu": cpu_model(), "cores": os.cpu_count(), "memory": mem_total(),
        "tmp_fs": fs_type("/tmp"), "load_start": load_start, "load_end": loadavg(),
        "binary": binary, "binary_bytes": os.path.getsize(binary) if os.path.exists(binary) else None,
        "moto": moto.__version__, "boto3": boto3.__version__, "python": sys.version.split()[0],
    }))
    print(f"\nValues in ms ({fmt(0.0)} = none).")


if __name__ == "__main__":
    main()
