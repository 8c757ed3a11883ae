"""Workspace engines.

`capture`: `workspace checkpoint` of two workspaces at once — a plain and a
keyed capture of one (contending for its capture lock), a keyed portable
capture of the other, and now and then a `checkpoint-delete` — all killed
with SIGKILL at a random moment. Then: gc succeeds and leaves nothing
staged; the registry verifies (manifests whole, every named blob there by
digest, usage equal to what is stored); every acknowledged checkpoint is
still there (and a deleted one gone); every new checkpoint, acknowledged or
not, restores to exactly the files captured; every request key resolves
(acknowledged: committed, same checkpoint) and a retry of a killed keyed
capture succeeds. Workspace A is watched: a `workspace watch` process
serves its CLI captures (started again whenever it is gone); now and then it
is SIGKILLed with the captures, so kills land in the watcher mid-capture
too. A plain capture whose watcher was killed may answer `outcome_unknown`;
a keyed one is retried in process by the CLI. When a killed CLI capture may
still be running in a live watcher, the watcher is stopped with SIGTERM
(which lets it finish) before anything is judged.

`serve`: `workspace serve` under the S3 load of engine s3 (file keys,
private keys, another bucket), with a plain CLI capture of the served tree
running meanwhile (through the server's watch, so killing the server may
leave it `outcome_unknown`); killed together. Then, before the restart: every file on
disk is old or new whole, no staged file is left in the tree, nothing
unknown appeared, the private store passes `stow-s3 check`, the registry
verifies and a capture made meanwhile holds only whole files; after it:
every key by S3 (bytes, ETag, content type), the listings, open uploads,
usage, nothing left in the private store's tmp.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import select
import shutil
import signal
import subprocess
import time

from engine_s3 import ACCESS, SECRET, S3LoadEngine
from soakkit import (
    ABSENT,
    MIB,
    BlobCache,
    Cli,
    Value,
    check_store,
    checkpoint_dirs,
    clean_env,
    diff_trees,
    gc,
    judge,
    kill_delay,
    mutate_tree,
    prepare_workspace,
    restore_tree,
    run,
    tree_of,
    verify_registry,
)


def file_value(path: pathlib.Path):
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return ABSENT
    except IsADirectoryError:
        return Value("a directory", 0)
    return Value(hashlib.sha256(data).hexdigest(), len(data))


# ================================================================ serve


class ServeEngine(S3LoadEngine):
    name = "serve"
    SEED = {"seed.txt": b"seed", "docs/readme.md": b"# the served workspace\n"}

    def __init__(self, ctx, bin_, workdir):
        super().__init__(ctx, bin_, workdir)
        self.reg = workdir / "reg"
        self.blobs = BlobCache()

    def setup(self):
        p = prepare_workspace(self.ctx, self.bin, self.dir, "ws", self.SEED, self.reg, max_bytes=1 << 30)
        self.ws, self.bucket = p["workspace_id"], p["bucket"]
        self.root = pathlib.Path(p["root"])
        self.start()
        c = self.client()
        c.create_bucket(Bucket="scratch")
        for rel in self.SEED:
            f = self.fetch(c, (self.bucket, rel))
            self.history.baseline((self.bucket, rel), f.value)
            self.state[(self.bucket, rel)] = f.value

    def args(self):
        return [self.bin, "workspace", "serve", "--id", self.ws, "--registry-dir", str(self.reg),
                "--access-key", ACCESS, "--secret-key", SECRET, "--max-concurrent-requests", "64"]

    def buckets(self):
        return (self.bucket, "scratch")

    def own_keys(self, n):
        return ([(self.bucket, f"t{n}/f{j}.bin") for j in range(5)]
                + [(self.bucket, f"t{n}/odd:{j}") for j in range(2)]
                + [("scratch", f"t{n}/s{j}") for j in range(2)])

    def shared_keys(self):
        return [(self.bucket, f"shared/s{j}.bin") for j in range(3)]

    def is_file(self, key):
        return key[0] == self.bucket and ":" not in key[1]

    def usage_of(self, present, part_bytes):
        private = {k: v for k, v in present.items() if not self.is_file(k)}
        return {"bytes": sum(v.size for v in private.values()) + part_bytes, "objects": len(private)}

    # a capture of the served tree ---------------------------------------

    def during_load(self, rng):
        self.capture = None
        self.cps_before = set(checkpoint_dirs(self.reg))
        if rng.random() < 0.5:
            self.capture = Cli(self.bin, "workspace", "checkpoint", "--id", self.ws, "--registry-dir", self.reg,
                               env=clean_env())
            return self.capture
        return None

    def after_load(self, cli):
        if cli.acked:
            self.ctx.stats["captures_acked"] += 1
        elif cli.killed:
            self.ctx.stats["captures_killed"] += 1
        else:
            err = (cli.doc or {}).get("error", {})
            code = err.get("code")
            if code == "outcome_unknown":
                # The server hosts the workspace's watch, so the capture ran
                # in the server, which the kill took down mid-capture; any
                # checkpoint it published is checked below like the others.
                self.ctx.stats["captures_lost_with_server"] += 1
                return
            self.ctx.check(code in ("workspace_changed", "in_progress"), "a capture of the served tree failed",
                           key=self.ws, expected="success, workspace_changed, a kill, or outcome_unknown",
                           found=f"rc={cli.rc} {cli.doc} {cli.stderr[-500:]}")
            self.ctx.stats["captures_refused_changed"] += 1

    # checks -------------------------------------------------------------

    def after_kill(self, rng):
        ctx = self.ctx
        files = {k for k in self.history.keys() if self.is_file(k)}
        for key in sorted(files):
            judge(ctx, self.history, key, file_value(self.root / key[1]))
        ctx.stats["files_checked_on_disk"] += len(files)
        on_disk = tree_of(self.root)
        stray = sorted(rel for rel in on_disk if (self.bucket, rel) not in files)
        ctx.check(stray == [], "files nobody wrote (staged or half-written) are in the tree", key=stray,
                  expected="only written files", found=stray)
        leftovers = [str(p) for p in self.root.rglob(".stow*") if p.relative_to(self.root).parts[0] != ".stow"]
        ctx.check(leftovers == [], "staged leftovers in the tree", key=leftovers, expected=[], found=leftovers)
        usage = check_store(ctx, self.bin, self.root / ".stow" / "objects", "stow-s3 check of the private store")
        if getattr(self, "capture", None) is not None:
            self.check_captures()
            self.capture = None  # once: after_kill runs again after a kill during recovery
        return usage

    def check_captures(self):
        """A capture made while files were being written holds only whole
        files, each a value some write of this cycle gave it."""
        ctx = self.ctx
        gc(ctx, self.bin, self.reg)
        verify_registry(ctx, self.bin, self.reg, self.blobs)
        new = sorted(set(checkpoint_dirs(self.reg)) - self.cps_before)
        ctx.check(len(new) <= 1, "one capture made more than one checkpoint", key=new, expected="<= 1", found=new)
        if self.capture.acked:
            cp = self.capture.doc["checkpoint_id"]
            ctx.check(new == [cp], "an acknowledged capture is not in the registry", key=cp, expected=[cp], found=new)
        for cp in new:
            got, _ = restore_tree(ctx, self.bin, self.reg, cp, self.dir / "restores")
            for rel, (_mode, sha, size) in got.items():
                key = (self.bucket, rel)
                values = [op.value for op in self.history.ops.get(key, [])]
                ok = any(v is not ABSENT and (v.sha, v.size) == (sha, size) for v in values)
                ctx.check(ok, "a capture of the served tree holds a torn or foreign file", key=(cp, rel),
                          expected=[v for v in values], found=(sha[:16], size))
            rc, doc, err = run(self.bin, "workspace", "checkpoint-delete", "--checkpoint-id", cp,
                               "--registry-dir", self.reg)
            ctx.check(rc == 0, "checkpoint-delete failed", key=cp, expected="rc 0", found=f"{rc} {doc} {err}")
            ctx.stats["captures_verified"] += 1

    def after_restart(self, found):
        tmp = self.root / ".stow" / "objects" / "tmp"
        left = sorted(p.name for p in tmp.iterdir()) if tmp.exists() else []
        self.ctx.check(left == [], "the restarted server left staged bodies in the private store's tmp",
                       key=str(tmp), expected=[], found=left)


# ================================================================ capture


class CaptureEngine:
    name = "capture"
    KEEP = 24  # acknowledged checkpoints kept; older ones are deleted between cycles

    def __init__(self, ctx, bin_, workdir):
        self.ctx, self.bin, self.dir = ctx, bin_, workdir
        self.reg = workdir / "reg"
        self.blobs = BlobCache()
        self.acked = {}  # cp -> (workspace, tree)
        self.deleted = set()
        self.watcher = None  # `workspace watch` of A, while it runs

    def setup(self):
        rng = self.ctx.rng("setup")
        self.ws = {}
        for name in ("A", "B"):
            files = {f"d{i % 3}/f{i}.txt": f"{name} {i}\n".encode() + rng.randbytes(rng.randint(0, 5000))
                     for i in range(12)}
            p = prepare_workspace(self.ctx, self.bin, self.dir, f"ws{name}", files, self.reg)
            self.ws[name] = (p["workspace_id"], pathlib.Path(p["root"]))

    def start_watcher(self):
        """Starts `workspace watch` for A and waits for its ready line."""
        wid, _ = self.ws["A"]
        # Its log stays in the working directory (kept when the soak fails).
        log = open(self.dir / f"watch-{self.ctx.stats['watchers_started']}.log", "wb")
        proc = subprocess.Popen([self.bin, "workspace", "watch", "--id", wid, "--registry-dir", str(self.reg)],
                                stdout=subprocess.PIPE, stderr=log, env=clean_env())
        log.close()
        ready, _, _ = select.select([proc.stdout], [], [], 20)
        line = proc.stdout.readline().decode(errors="replace") if ready else ""
        try:
            ok = json.loads(line).get("workspace_id") == wid
        except json.JSONDecodeError:
            ok = False
        if not ok:
            proc.kill()
            proc.wait(timeout=20)
            self.ctx.fail("workspace watch did not start", key=wid, expected="a ready line", found=repr(line))
            return
        self.watcher = proc
        self.ctx.stats["watchers_started"] += 1

    def stop_watcher(self, sig):
        """SIGKILL: dies mid-capture. SIGTERM: finishes what it serves, exits 0."""
        proc, self.watcher = self.watcher, None
        if proc is None:
            return
        proc.send_signal(sig)
        proc.communicate(timeout=120)
        if sig == signal.SIGTERM:
            self.ctx.check(proc.returncode == 0, "workspace watch did not stop cleanly on SIGTERM",
                           key=self.ws["A"][0], expected="rc 0", found=f"rc={proc.returncode}")

    def capture_args(self, name, rk=None, portable=False):
        wid, _ = self.ws[name]
        args = ["workspace", "checkpoint", "--id", wid, "--registry-dir", self.reg]
        if portable:
            args.append("--portable")
        if rk:
            args += ["--request-key", rk, "--timeout", "30s"]
        return args

    def cycle(self):
        ctx = self.ctx
        rng = ctx.rng("main")
        trees = {}
        for name, (_wid, root) in self.ws.items():
            trees[name] = mutate_tree(rng, root, tag=f"c{ctx.cycle}{name}", big_every=3, big=(1 * MIB, 6 * MIB))
        before = set(checkpoint_dirs(self.reg))
        # One capture of each workspace (A plain or keyed, B keyed portable)
        # runs to the kill; now and then a second one contends for A's lock.
        jobs = [
            ("A", None, False) if rng.random() < 0.5 else ("A", f"c{ctx.cycle}-A", rng.random() < 0.5),
            ("B", f"c{ctx.cycle}-B", True),
        ]
        if rng.random() < 0.25:
            jobs.append(("A", f"c{ctx.cycle}-A2", False) if jobs[0][1] is None else ("A", None, False))
        rng.shuffle(jobs)
        if self.watcher is None or self.watcher.poll() is not None:
            self.start_watcher()
        kill_watcher = rng.random() < 0.3
        victim = None
        old = sorted(self.acked)
        if old and rng.random() < 0.5:
            victim = rng.choice(old)
        procs = []
        for name, rk, portable in jobs:
            cli = Cli(self.bin, *self.capture_args(name, rk, portable), env=clean_env())
            cli.job = (name, rk, portable)
            procs.append(cli)
        if victim:
            cli = Cli(self.bin, "workspace", "checkpoint-delete", "--checkpoint-id", victim,
                      "--registry-dir", self.reg, env=clean_env())
            cli.job = ("delete", victim, False)
            procs.append(cli)
        time.sleep(kill_delay(rng, 0.12))
        if kill_watcher and self.watcher is not None:
            self.watcher.kill()
            ctx.stats["watchers_killed"] += 1
        for p in procs:
            p.kill()
        for p in procs:
            p.finish(60)
        self.watcher_killed = kill_watcher
        if kill_watcher:
            self.stop_watcher(signal.SIGKILL)
        elif any(p.killed and p.job[0] == "A" for p in procs):
            # The watcher may still be running the killed CLI's capture.
            self.stop_watcher(signal.SIGTERM)
        ctx.stats["kills"] += 1
        ctx.stats["processes_killed_running"] += sum(p.killed for p in procs)
        self.judge(procs, before, trees)
        self.trim(rng)

    def judge(self, procs, before, trees):
        ctx = self.ctx
        acked_now = {}
        keyed = []
        deletes = []
        for p in procs:
            name, rk, portable = p.job
            if name == "delete":
                deletes.append(p)
                continue
            if p.acked:
                if rk:
                    res = p.doc["result"]
                    ctx.check(res.get("outcome") == "committed", "a keyed capture answered without committing",
                              key=rk, expected="committed", found=p.doc)
                    cp = res["checkpoint"]["id"]
                else:
                    cp = p.doc["checkpoint_id"]
                acked_now[cp] = name
                ctx.stats["captures_acked"] += 1
            elif not p.killed:
                code = (p.doc or {}).get("error", {}).get("code")
                if code == "outcome_unknown" and self.watcher_killed and name == "A" and not rk:
                    ctx.stats["captures_lost_with_watcher"] += 1
                else:
                    ctx.check(code == "in_progress", "a capture failed without being killed", key=p.args,
                              expected="success, in_progress, or a kill (outcome_unknown: the watcher killed)",
                              found=f"rc={p.rc} {p.doc} {p.stderr[-600:]}")
                    ctx.stats["captures_in_progress"] += 1
            if rk:
                keyed.append(p)
        gc(ctx, self.bin, self.reg)
        manifests = verify_registry(ctx, self.bin, self.reg, self.blobs)
        now = set(manifests)
        # Acknowledged checkpoints stay; an acknowledged deletion stays done.
        for cp in self.acked:
            being_deleted = any(d.args[3] == cp for d in deletes)  # acked deletions: checked below
            if cp not in now and not being_deleted:
                ctx.stats["failures"] += 1
                ctx.fail("an acknowledged checkpoint is lost", key=cp, expected="present", found="absent")
        for d in deletes:
            cp = d.args[3]
            if d.acked:
                ctx.check(cp not in now, "an acknowledged deletion left its checkpoint", key=cp,
                          expected="absent", found="present")
                ctx.stats["deletes_acked"] += 1
            elif not d.killed:
                ctx.fail("checkpoint-delete failed without being killed", key=cp, expected="rc 0",
                         found=f"rc={d.rc} {d.doc} {d.stderr[-500:]}")
            if cp not in now:
                self.acked.pop(cp, None)
                self.deleted.add(cp)
        resurrected = now & self.deleted
        ctx.check(not resurrected, "a deleted checkpoint came back", key=sorted(resurrected), expected="absent",
                  found="present")
        # Every new checkpoint is whole: it restores to exactly the tree captured.
        new = sorted(now - before)
        by_ws = {wid: name for name, (wid, _) in self.ws.items()}
        for cp in new:
            name = by_ws.get(manifests[cp].get("workspace_id"))
            ctx.check(name is not None, "a checkpoint of an unknown workspace appeared", key=cp,
                      expected=list(by_ws), found=manifests[cp].get("workspace_id"))
            got, _ = restore_tree(ctx, self.bin, self.reg, cp, self.dir / "restores")
            if got != trees[name]:
                ctx.stats["failures"] += 1
                ctx.fail("a checkpoint does not restore to the files captured (torn or partial)", key=cp,
                         expected=f"{len(trees[name])} files", found=diff_trees(trees[name], got))
            if cp not in acked_now:
                ctx.stats["unacked_captures_published"] += 1
            self.acked[cp] = (name, trees[name])
        for cp in acked_now:
            ctx.check(cp in new, "an acknowledged capture is not in the registry", key=cp, expected="present",
                      found=sorted(now)[-5:])
        counts = {n: sum(1 for cp in new if self.acked[cp][0] == n) for n in self.ws}
        for n in self.ws:
            launched = sum(1 for p in procs if p.job[0] == n)
            ctx.check(counts[n] <= launched, "more checkpoints than captures", key=n, expected=f"<= {launched}",
                      found=counts[n])
        # Request keys: resolution agrees with what happened, and a retry succeeds.
        for p in keyed:
            name, rk, portable = p.job
            rc, doc, err = run(self.bin, *self.capture_args(name, rk, portable), "--resolve")
            outcome = ((doc or {}).get("result") or {}).get("outcome")
            if p.acked:
                ctx.check(rc == 0 and outcome == "committed" and
                          doc["result"]["checkpoint"]["id"] == p.doc["result"]["checkpoint"]["id"],
                          "an acknowledged keyed capture does not resolve to its checkpoint", key=rk,
                          expected=p.doc["result"]["checkpoint"]["id"], found=f"rc={rc} {doc}")
                continue
            if rc == 0 and outcome == "committed":
                cp = doc["result"]["checkpoint"]["id"]
                ctx.check(cp in new, "a killed keyed capture resolves to a checkpoint that is not there", key=rk,
                          expected=sorted(new), found=cp)
                ctx.stats["in_flight_resolved_committed"] += 1
            else:
                code = ((doc or {}).get("error") or {}).get("code")
                ctx.check(code == "not_found", "a killed keyed capture resolves to neither committed nor not_found",
                          key=rk, expected="committed or not_found", found=f"rc={rc} {doc} {err[-400:]}")
                ctx.stats["in_flight_resolved_not_found"] += 1
            rc, doc, err = run(self.bin, *self.capture_args(name, rk, portable))
            ctx.check(rc == 0 and (doc or {}).get("result", {}).get("outcome") == "committed",
                      "the retry of a killed keyed capture failed", key=rk, expected="committed",
                      found=f"rc={rc} {doc} {err[-400:]}")
            cp = doc["result"]["checkpoint"]["id"]
            if cp not in self.acked:
                got, _ = restore_tree(ctx, self.bin, self.reg, cp, self.dir / "restores")
                ctx.check(got == trees[name], "a retried capture does not restore to the files", key=cp,
                          expected=len(trees[name]), found=diff_trees(trees[name], got))
                self.acked[cp] = (name, trees[name])
            ctx.stats["keyed_retries_ok"] += 1
        # An older acknowledged checkpoint still restores exactly.
        older = sorted(cp for cp in self.acked if cp in before)
        if older:
            cp = self.ctx.rng("older").choice(older)
            got, _ = restore_tree(ctx, self.bin, self.reg, cp, self.dir / "restores")
            ctx.check(got == self.acked[cp][1], "an older checkpoint no longer restores to its files", key=cp,
                      expected=len(self.acked[cp][1]), found=diff_trees(self.acked[cp][1], got))
        ctx.stats["checkpoints_verified"] += len(new)

    def trim(self, rng):
        """Keeps the registry small: the oldest checkpoints go (not killed)."""
        if len(self.acked) <= self.KEEP:
            return
        for cp in list(self.acked)[: len(self.acked) - self.KEEP]:
            rc, doc, err = run(self.bin, "workspace", "checkpoint-delete", "--checkpoint-id", cp,
                               "--registry-dir", self.reg)
            self.ctx.check(rc == 0, "checkpoint-delete failed", key=cp, expected="rc 0", found=f"{rc} {doc} {err}")
            self.acked.pop(cp)
            self.deleted.add(cp)
        shutil.rmtree(self.dir / "restores", ignore_errors=True)

    def teardown(self):
        self.stop_watcher(signal.SIGTERM)
