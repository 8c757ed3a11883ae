#!/usr/bin/env python3
"""Rewind (issue 27), side by side in one run, on a git repository of N
files (default 100,000 in 4,000 directories, 1 KiB each) with 10 files
changed, 2 added and 1 deleted since the head:

- `stow-s3 workspace rewind --to HEAD` (undo capture included), without
  a watch and through a running `workspace watch`, against
  `git stash push --include-untracked` on the same tree (plain, and with
  git's durable setting `core.fsync=all`);
- the undo: `rewind --to <undo checkpoint>` against `git stash pop`.

Each repetition applies the same edits, then runs the tools in an order
that alternates between repetitions (the disk's speed swings); every
result is checked (the tree clean, the edits back). Every command starts
after a `sync` (untimed), so none pays for another's unflushed writes.
Medians, spreads and ratios of medians are printed.

    python3 bench/scripts/rewind.py [--files N] [--reps R] [STOW_BIN]
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
    # Nothing left dirty by the previous step (the edits, the other tool's
    # unflushed writes): on ext4 (data=ordered) the first fsync of a timed
    # command would otherwise write back someone else's data.
    os.sync()
    t = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    dt = (time.perf_counter() - t) * 1000
    if check and p.returncode != 0:
        raise SystemExit(f"{cmd} failed ({p.returncode}): {p.stdout} {p.stderr}")
    return dt, p.stdout


def spread(xs):
    return f"median {statistics.median(xs):8.1f} ms [{min(xs):.1f}-{max(xs):.1f}]"


def build_repo(repo, files, env):
    dirs = max(1, files // 25)
    for i in range(files):
        d = repo / f"c{i % dirs // 100:02}" / f"d{i % dirs:04}"
        if i < dirs:
            d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:06}.txt").write_bytes(os.urandom(512).hex().encode())
    git = ["git", "-c", "user.email=b@b", "-c", "user.name=b", "-c", "gc.auto=0"]
    run(["git", "init", "-q"], repo, env)
    run([*git, "add", "-A"], repo, env)
    run([*git, "commit", "-qm", "tree"], repo, env)
    return git


class Edits:
    """10 changed, 2 added, 1 deleted; `apply` writes them, `check` says
    whether the tree holds them."""

    def __init__(self, repo, files):
        every = sorted(repo.rglob("f*.txt"))
        step = max(1, len(every) // 13)
        picked = every[::step][:13]
        self.changed, self.deleted = picked[:10], picked[12]
        self.added = [picked[10].parent / "new-a.txt", picked[11].parent / "new-b.txt"]
        self.original = {p: p.read_bytes() for p in self.changed + [self.deleted]}

    def apply(self):
        for p in self.changed:
            p.write_bytes(b"changed " + self.original[p])
        for p in self.added:
            p.write_bytes(b"added\n")
        self.deleted.unlink()

    def present(self):
        return (all(p.read_bytes().startswith(b"changed ") for p in self.changed)
                and all(p.exists() for p in self.added) and not self.deleted.exists())

    def absent(self):
        return (all(p.read_bytes() == self.original[p] for p in self.changed)
                and not any(p.exists() for p in self.added) and self.deleted.exists())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("stow", nargs="?", default=os.environ.get("STOW_BIN", "target/release/stow-s3"))
    a = ap.parse_args()
    stow = str(Path(a.stow).resolve())
    with tempfile.TemporaryDirectory(prefix="stow-rewind-") as top:
        top_p = Path(top)
        env = dict(os.environ, XDG_CONFIG_HOME=str(top_p / "cfg"), GIT_CONFIG_NOSYSTEM="1", HOME=str(top_p))
        repo = top_p / "repo"
        git = build_repo(repo, a.files, env)
        run([stow, "workspace", "attach"], repo, env)
        _, out = run([stow, "workspace", "checkpoint", "--message", "base"], repo, env)
        base = json.loads(out)["checkpoint_id"]
        edits = Edits(repo, a.files)
        run(["git", "status", "--porcelain"], repo, env)  # index refreshed once

        times = {k: [] for k in ("stow", "stow-undo", "watch", "watch-undo",
                                 "git", "git-pop", "git-durable", "git-durable-pop")}

        def stow_pair(key):
            edits.apply()
            dt, out = run([stow, "workspace", "rewind", "--to", base], repo, env)
            r = json.loads(out)
            assert edits.absent() and r["written"] == 11 and r["deleted"] == 2, r
            times[key].append(dt)
            dt, _ = run([stow, "workspace", "rewind", "--to", r["undo_checkpoint_id"]], repo, env)
            assert edits.present()
            times[key + "-undo"].append(dt)
            run([stow, "workspace", "rewind", "--to", base], repo, env)  # back to clean, untimed
            assert edits.absent()

        def git_pair(key, extra):
            edits.apply()
            dt, _ = run([*git, *extra, "stash", "push", "--include-untracked", "-q"], repo, env)
            assert edits.absent()
            times[key].append(dt)
            dt, _ = run([*git, *extra, "stash", "pop", "-q"], repo, env)
            assert edits.present()
            times[key + "-pop"].append(dt)
            run([*git, "stash", "push", "--include-untracked", "-q"], repo, env)  # back to clean
            run([*git, "stash", "drop", "-q"], repo, env)
            assert edits.absent()

        durable = ["-c", "core.fsync=all", "-c", "core.fsyncMethod=fsync"]
        jobs = [lambda: stow_pair("stow"), lambda: git_pair("git", []), lambda: git_pair("git-durable", durable)]
        for rep in range(a.reps):
            for job in (jobs if rep % 2 == 0 else jobs[::-1]):
                job()

        # Through a running watch, warmed by one capture.
        watcher = subprocess.Popen([stow, "workspace", "watch"], cwd=repo, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            ready, _, _ = select.select([watcher.stdout], [], [], 60)
            assert ready and watcher.stdout.readline(), "workspace watch did not start"
            run([stow, "workspace", "checkpoint", "--message", "warm"], repo, env)
            run([stow, "workspace", "rewind", "--to", base], repo, env)
            for _ in range(a.reps):
                stow_pair("watch")
        finally:
            watcher.terminate()
            watcher.wait(timeout=30)

        print(f"{a.files} files; 10 changed, 2 added, 1 deleted since the head; {a.reps} reps")
        rows = [
            ("rewind, no watch (undo capture incl.)", "stow"),
            ("rewind through a watch", "watch"),
            ("git stash push --include-untracked", "git"),
            ("  same, core.fsync=all", "git-durable"),
            ("undo: rewind --to <undo>, no watch", "stow-undo"),
            ("undo: rewind --to <undo>, watch", "watch-undo"),
            ("git stash pop", "git-pop"),
            ("  same, core.fsync=all", "git-durable-pop"),
        ]
        for label, key in rows:
            print(f"{label:42} {spread(times[key])}")
        m = {k: statistics.median(v) for k, v in times.items()}
        print("ratios of medians:")
        print(f"  rewind no watch / git stash        {m['stow'] / m['git']:.2f}x (durable git: {m['stow'] / m['git-durable']:.2f}x)")
        print(f"  rewind watch / git stash           {m['watch'] / m['git']:.2f}x (durable git: {m['watch'] / m['git-durable']:.2f}x)")
        print(f"  undo no watch / git stash pop      {m['stow-undo'] / m['git-pop']:.2f}x (durable git: {m['stow-undo'] / m['git-durable-pop']:.2f}x)")
        print(f"  undo watch / git stash pop         {m['watch-undo'] / m['git-pop']:.2f}x (durable git: {m['watch-undo'] / m['git-durable-pop']:.2f}x)")


if __name__ == "__main__":
    main()
