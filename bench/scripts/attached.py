#!/usr/bin/env python3
"""Attached workspaces (issue 26), side by side in one run:

1. `stow-s3 workspace status` on a git repository of N files (default
   100,000 in 4,000 directories, 1 KiB each) after 10 changed files,
   without a watch and through a running `workspace watch` (warmed by one
   checkpoint taken through it), against `git status --porcelain` on the
   same tree, alternating; medians and spreads of REPS runs each (the stat
   cache warmed by a capture first, git's index by a first `git status`);
2. `stow-s3 workspace log --limit 1000` of a workspace with 1,000
   checkpoints (a small tree, captured 1,000 times).

    python3 bench/scripts/attached.py [--files N] [--reps R] [STOW_BIN]

Every figure is warm (page cache), as an agent loop sees it.
"""

import argparse
import json
import os
import select
import statistics
import subprocess
import tempfile
import time
from pathlib import Path


def run(cmd, cwd, env, check=True):
    t = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    dt = (time.perf_counter() - t) * 1000
    if check and p.returncode != 0:
        raise SystemExit(f"{cmd} failed: {p.stderr}")
    return dt, p.stdout


def spread(xs):
    return f"median {statistics.median(xs):.1f} ms [{min(xs):.1f}-{max(xs):.1f}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--checkpoints", type=int, default=1000)
    ap.add_argument("stow", nargs="?", default=os.environ.get("STOW_BIN", "target/release/stow-s3"))
    a = ap.parse_args()
    stow = str(Path(a.stow).resolve())
    with tempfile.TemporaryDirectory(prefix="stow-attached-") as top:
        top_p = Path(top)
        env = dict(os.environ, XDG_CONFIG_HOME=str(top_p / "cfg"), GIT_CONFIG_NOSYSTEM="1", HOME=str(top_p))
        repo = top_p / "repo"
        dirs = max(1, a.files // 25)
        for i in range(a.files):
            d = repo / f"c{i % dirs // 100:02}" / f"d{i % dirs:04}"
            if i < dirs:
                d.mkdir(parents=True, exist_ok=True)
            (d / f"f{i:06}.txt").write_bytes(os.urandom(512).hex().encode())
        run(["git", "init", "-q"], repo, env)
        run(["git", "-c", "user.email=b@b", "-c", "user.name=b", "-c", "gc.auto=0", "add", "-A"], repo, env)
        run(["git", "-c", "user.email=b@b", "-c", "user.name=b", "-c", "gc.auto=0", "commit", "-qm", "tree"], repo, env)
        run([stow, "workspace", "attach"], repo, env)
        run([stow, "workspace", "checkpoint", "--message", "base"], repo, env)
        changed = sorted(repo.rglob("f*.txt"))[:: max(1, a.files // 10)][:10]
        for f in changed:
            f.write_bytes(b"changed " + f.read_bytes())
        run(["git", "status", "--porcelain"], repo, env)  # index refreshed once

        def status_pair(ours, git):
            dt, out = run([stow, "workspace", "status"], repo, env)
            doc = json.loads(out)
            assert doc["changed"] == len(changed), doc["changed"]
            ours.append(dt)
            dt, out = run(["git", "status", "--porcelain"], repo, env)
            assert len(out.splitlines()) == len(changed)
            git.append(dt)

        ours, git = [], []
        for _ in range(a.reps):
            status_pair(ours, git)
        # Through a running watch, warmed by one checkpoint taken through
        # it (the changed files are then changed again since that head).
        watcher = subprocess.Popen([stow, "workspace", "watch"], cwd=repo, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        watched, git_w = [], []
        try:
            ready, _, _ = select.select([watcher.stdout], [], [], 60)
            assert ready and watcher.stdout.readline(), "workspace watch did not start"
            run([stow, "workspace", "checkpoint", "--message", "through the watch"], repo, env)
            for f in changed:
                f.write_bytes(b"again " + f.read_bytes())
            for _ in range(a.reps):
                status_pair(watched, git_w)
        finally:
            watcher.terminate()
            watcher.wait(timeout=30)
        print(f"status, {a.files} files, {len(changed)} changed, no watch: {spread(ours)}")
        print(f"git status --porcelain, same tree:            {spread(git)}")
        print(f"ratio (medians): {statistics.median(ours) / statistics.median(git):.2f}x")
        print(f"status through a running watch:               {spread(watched)}")
        print(f"git status --porcelain, alternating with it:  {spread(git_w)}")
        print(f"ratio (medians): {statistics.median(watched) / statistics.median(git_w):.2f}x")

        small = top_p / "small"
        (small / "src").mkdir(parents=True)
        run([stow, "workspace", "attach"], small, env)
        for i in range(a.checkpoints):
            (small / "src" / "n.txt").write_text(str(i))
            run([stow, "workspace", "checkpoint", "--message", f"step {i}"], small, env)
        times = []
        for _ in range(a.reps):
            dt, out = run([stow, "workspace", "log", "--limit", "1000"], small, env)
            assert len(json.loads(out)["checkpoints"]) == min(1000, a.checkpoints)
            times.append(dt)
        print(f"log --limit 1000 of {a.checkpoints} checkpoints (process included): {spread(times)}")


if __name__ == "__main__":
    main()
