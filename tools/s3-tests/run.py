#!/usr/bin/env python3
"""Runs ceph/s3-tests (the public S3 conformance suite) against a fresh
`stow-s3 serve` and records the count (`make s3-tests`; not part of
`make test`).

The suite is taken at commit 8f0ae7b, from a local mirror when there is
one (S3_TESTS_MIRROR, default /work/.mirror/ceph+s3-tests/repo, a bare
git directory) or else cloned from GitHub, into target/s3-tests/suite
(git-ignored: the suite's code is never committed here). Its Python
dependencies the environment lacks (isodate, pytz, munch) go into
target/s3-tests/venv, a venv over the system's packages.

Selection (S3_TESTS_SELECT, a pytest -k expression): by default the
suite's CORS and POST-object tests. Tests marked fails_on_aws are left
out (S3_TESTS_MARKERS, a pytest -m expression). The counts and every
failure's name go to target/s3-tests/result.txt and stdout.

Lifecycle: the server runs with `--lifecycle-day-seconds N` and the suite
is told (`lc_debug_interval`) that a day is N seconds, as Ceph's debug
interval does (S3_TESTS_LC_DAY, default 2).

`--endpoint URL` runs the suite against a server already listening there
(for example `moto_server -p PORT`, the reference to compare with) instead
of starting one; it must take the suite's key pair.

Usage: tools/s3-tests/run.py [--bin PATH | --endpoint URL] [extra pytest args…]
"""

import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import threading

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from s3server import S3Server  # noqa: E402

COMMIT = "8f0ae7b404a3a2fcf7038bf1e6bf29544fe9b6a3"
UPSTREAM = "https://github.com/ceph/s3-tests.git"
WORK = ROOT / "target" / "s3-tests"
SUITE = WORK / "suite"
VENV = WORK / "venv"
ACCESS_KEY = "0555b35654ad1656d804"
SECRET_KEY = "h7GhxuBLTrlhVUyxSPUKUV8r/2EI4ngqJxD7iBdBYLhwluN30JaT3Q=="
DEFAULT_SELECT = "cors or post_object"
DEFAULT_MARKERS = "not fails_on_aws"


def fetch_suite():
    """target/s3-tests/suite at COMMIT, from the mirror or GitHub."""
    stamp = SUITE / ".commit"
    if stamp.exists() and stamp.read_text().strip() == COMMIT:
        return
    shutil.rmtree(SUITE, ignore_errors=True)
    SUITE.mkdir(parents=True)
    mirror = pathlib.Path(os.environ.get("S3_TESTS_MIRROR", "/work/.mirror/ceph+s3-tests/repo"))
    if (mirror / "objects").is_dir():
        archive = subprocess.run(["git", f"--git-dir={mirror}", "archive", COMMIT],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(SUITE)], input=archive, check=True)
    else:
        subprocess.run(["git", "clone", "--quiet", UPSTREAM, str(SUITE)], check=True)
        subprocess.run(["git", "-C", str(SUITE), "checkout", "--quiet", COMMIT], check=True)
    stamp.write_text(COMMIT + "\n")


def python():
    """A Python with the suite's imports: this one, or a venv over it."""
    needed = ["isodate", "pytz", "munch", "dateutil", "boto3", "requests", "pytest"]
    probe = "import " + ", ".join(needed)
    if subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0:
        return sys.executable
    exe = VENV / "bin" / "python"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(VENV)], check=True)
    if subprocess.run([str(exe), "-c", probe], capture_output=True).returncode != 0:
        subprocess.run([str(exe), "-m", "pip", "install", "--quiet", "isodate", "pytz", "munch",
                        "python-dateutil"], check=True)
    return str(exe)


def config(host, port, path, lc_day):
    """The suite's configuration: every user is the server's one key pair."""
    user = f"""display_name = stow
user_id = stow
email = stow@example.com
access_key = {ACCESS_KEY}
secret_key = {SECRET_KEY}
"""
    path.write_text(f"""[DEFAULT]
host = {host}
port = {port}
is_secure = False
ssl_verify = False

[fixtures]
bucket prefix = s3t-{{random}}-

[s3 main]
api_name = default
lc_debug_interval = {lc_day}
{user}
[s3 alt]
{user}
[s3 tenant]
tenant = stowtenant
{user}
[iam]
{user}
[iam root]
{user}
[iam alt root]
{user}
""")


def drain_log(stream, path):
    """Copies the server's stderr to `path` as it comes: a pipe nobody
    reads fills up (64 KiB of logged refusals) and then blocks the server
    on its next log line, which hangs the suite."""
    path.parent.mkdir(parents=True, exist_ok=True)

    def copy():
        with open(path, "wb") as out:
            for line in iter(stream.readline, b""):
                out.write(line)

    threading.Thread(target=copy, daemon=True).start()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.environ.get("STOW_BIN", str(ROOT / "target" / "debug" / "stow-s3")))
    ap.add_argument("--endpoint", help="run against this server instead of starting stow-s3")
    args, extra = ap.parse_known_args()
    lc_day = int(os.environ.get("S3_TESTS_LC_DAY", "2"))
    fetch_suite()
    py = python()
    select = os.environ.get("S3_TESTS_SELECT", DEFAULT_SELECT)
    markers = os.environ.get("S3_TESTS_MARKERS", DEFAULT_MARKERS)
    with tempfile.TemporaryDirectory(prefix="stow-s3-tests-") as tmp:
        tmp = pathlib.Path(tmp)
        server = None
        if args.endpoint:
            endpoint = args.endpoint
        else:
            server = S3Server(args.bin, tmp / "data", "--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY,
                              "--lifecycle-day-seconds", str(lc_day))
            endpoint = server.endpoint
            drain_log(server.proc.stderr, WORK / "server.log")
        try:
            host, port = endpoint.split("://", 1)[-1].rstrip("/").rsplit(":", 1)
            conf = tmp / "s3tests.conf"
            config(host, int(port), conf, lc_day)
            env = dict(os.environ, S3TEST_CONF=str(conf))
            cmd = [py, "-m", "pytest", "s3tests/functional/test_s3.py", "-q", "-rf", "-p", "no:cacheprovider",
                   "-k", select, "-m", markers, *extra]
            run = subprocess.run(cmd, cwd=SUITE, env=env, capture_output=True, text=True)
        finally:
            if server:
                server.stop()
    out = run.stdout + run.stderr
    summary = [line for line in out.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    failed = sorted(set(re.findall(r"^FAILED \S+::(\S+)", out, re.M)))
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|deselected|skipped|error)", summary[-1])} \
        if summary else {}
    WORK.mkdir(parents=True, exist_ok=True)
    lines = [
        f"ceph/s3-tests {COMMIT[:7]}: -k {select!r} -m {markers!r}"
        + (f" against {args.endpoint}" if args.endpoint else ""),
        f"passed {counts.get('passed', 0)}, failed {counts.get('failed', 0)}, "
        f"errors {counts.get('error', 0)}, skipped {counts.get('skipped', 0)}",
        *[f"FAILED {name}" for name in failed],
    ]
    (WORK / "result.txt").write_text("\n".join(lines) + "\n")
    (WORK / "pytest.log").write_text(out)
    print("\n".join(lines))
    print(f"(full log: {WORK / 'pytest.log'})")
    return 0 if counts.get("passed") else 1


if __name__ == "__main__":
    sys.exit(main())
