"""Engine `transfer`: moving checkpoints between registries, all at once and
killed with SIGKILL at a random moment — `workspace import` of an archive
(registry B), `apply` of a delta onto its base (B), `push` to a remote (a
second `stow-s3 serve`, never killed) and `pull` of the previous checkpoint
from it (registry C), a second `export` (A), and a `restore` of the
previous checkpoint into a new root (A). Then: each target holds the
whole checkpoint or none of it (it restores to exactly the files captured);
the remote holds a checkpoint's manifest only with every blob it names; an
acknowledged transfer is there; a retry of a killed one succeeds; gc leaves
nothing staged and every registry verifies; a killed export leaves no
partial archive (the archive, if there, is byte-identical to the first); a
restored workspace the registry records (acknowledged or not) holds
exactly the checkpoint's files."""

from __future__ import annotations

import json
import pathlib
import shutil
import time

import boto3
from botocore.config import Config
from soakkit import (
    MIB,
    BlobCache,
    Cli,
    checkpoint_dirs,
    clean_env,
    diff_trees,
    gc,
    kill_delay,
    mutate_tree,
    prepare_workspace,
    restore_tree,
    run,
    spawn_ready,
    stop,
    tree_of,
    verify_registry,
)

KEYS = ("AKIDSOAKREMOTE0XFER", "soak-transfer-remote-secret")
PREFIX = "soak"


class TransferEngine:
    name = "transfer"

    def __init__(self, ctx, bin_, workdir):
        self.ctx, self.bin, self.dir = ctx, bin_, workdir
        self.regs = {n: workdir / f"reg{n}" for n in "ABC"}
        self.blobs = BlobCache()
        self.trees = {}  # cp -> tree
        self.remote = None
        self.remote_manifests = {}
        # The remote service's data (another machine's disk: the power-loss
        # driver keeps it off the mount it cuts).
        self.remote_dir = workdir / "remote"

    # ---------------------------------------------------------------- setup

    def setup(self):
        ctx = self.ctx
        self.remote, ready = spawn_ready([self.bin, "serve", "--port", "0", "--data-dir", str(self.remote_dir),
                                          "--access-key", KEYS[0], "--secret-key", KEYS[1]], env=clean_env())
        self.endpoint = ready["endpoint"]
        self.s3 = boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=KEYS[0],
                               aws_secret_access_key=KEYS[1], region_name="us-east-1",
                               config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
        self.s3.create_bucket(Bucket="cps")
        self.env = clean_env(AWS_ACCESS_KEY_ID=KEYS[0], AWS_SECRET_ACCESS_KEY=KEYS[1])
        rng = ctx.rng("setup")
        files = {f"d{i % 4}/f{i:02d}.txt": f"{i}\n".encode() + rng.randbytes(rng.randint(0, 20_000))
                 for i in range(30)}
        files["big/b0.bin"] = rng.randbytes(2 * MIB)
        p = prepare_workspace(ctx, self.bin, self.dir, "w", files, self.regs["A"])
        self.ws, self.root = p["workspace_id"], pathlib.Path(p["root"])
        for n in "AC":
            rc, doc, err = run(self.bin, "remote", "add", "origin", f"s3://cps/{PREFIX}", "--endpoint-url",
                               self.endpoint, "--region", "us-east-1", "--registry-dir", self.regs[n], env=self.env)
            ctx.check(rc == 0, "remote add failed", key=n, expected="rc 0", found=f"{rc} {doc} {err}")
        cp = self.capture()
        archive = self.export(cp, self.dir / f"{cp}.tar.gz")
        self.ok("import", "--archive", archive, "--registry-dir", self.regs["B"])
        self.ok("push", "--checkpoint-id", cp, "--remote", "origin", "--registry-dir", self.regs["A"])
        self.prev = cp

    def after_kill(self, rng):
        """Called once every transfer process has ended, before anything is
        judged (the power-loss driver cuts the power here)."""

    def ok(self, *args):
        rc, doc, err = run(self.bin, "workspace", *args, env=self.env)
        self.ctx.check(rc == 0, f"workspace {args[0]} failed", key=args, expected="rc 0",
                       found=f"rc={rc} {doc} {err[-800:]}")
        return doc

    def capture(self):
        doc = self.ok("checkpoint", "--id", self.ws, "--registry-dir", self.regs["A"])
        cp = doc["checkpoint_id"]
        self.trees[cp] = tree_of(self.root)
        return cp

    def export(self, cp, out):
        self.ok("export", "--checkpoint-id", cp, "--output", out, "--registry-dir", self.regs["A"])
        return out

    # ---------------------------------------------------------------- cycle

    def cycle(self):
        ctx = self.ctx
        rng = ctx.rng("main")
        n = ctx.cycle
        mutate_tree(rng, self.root, tag=f"c{n}", big_every=3, big=(1 * MIB, 4 * MIB))
        cp = self.capture()
        prev = self.prev
        archive = self.export(cp, self.dir / f"{cp}.tar.gz")
        delta = self.dir / f"delta-{n}.json"
        self.ok("delta", "--from", prev, "--to", cp, "--output", delta, "--registry-dir", self.regs["A"])
        second = self.dir / f"again-{n}.tar.gz"
        before = {k: set(checkpoint_dirs(r)) for k, r in self.regs.items()}

        jobs = {
            "import": ["workspace", "import", "--archive", archive, "--registry-dir", self.regs["B"]],
            "apply": ["workspace", "apply", "--delta", delta, "--base", prev, "--registry-dir", self.regs["B"]],
            "push": ["workspace", "push", "--checkpoint-id", cp, "--remote", "origin", "--registry-dir",
                     self.regs["A"], "--timeout", "60s"],
            "pull": ["workspace", "pull", "--checkpoint-id", prev, "--remote", "origin", "--registry-dir",
                     self.regs["C"], "--timeout", "60s"],
            "export": ["workspace", "export", "--checkpoint-id", cp, "--output", second, "--registry-dir",
                       self.regs["A"]],
            "restore": ["workspace", "restore", "--checkpoint-id", prev, "--root", self.dir / f"restored-{n}",
                        "--registry-dir", self.regs["A"]],
        }
        order = list(jobs)
        rng.shuffle(order)
        procs = {}
        for name in order:
            procs[name] = Cli(self.bin, *jobs[name], env=self.env, tag=name)
        # Half the restores run to the end: the power cut then follows an
        # acknowledged restore (one killed says little about durability).
        spared = {"restore"} if rng.random() < 0.5 else set()
        time.sleep(kill_delay(rng, 0.08))
        for name, p in procs.items():
            if name not in spared:
                p.kill()
        for p in procs.values():
            p.finish(120)
        self.after_kill(rng)
        ctx.stats["kills"] += 1
        for name, p in procs.items():
            ctx.stats[f"{name}_killed" if p.killed else f"{name}_completed"] += 1
            if not p.killed and not p.acked:
                ctx.fail(f"{name} failed without being killed", key=jobs[name], expected="rc 0",
                         found=f"rc={p.rc} {p.doc} {p.stderr[-800:]}")

        # Every registry: gc clears what a kill left staged, then it verifies.
        manifests = {}
        for k, reg in self.regs.items():
            gc(ctx, self.bin, reg)
            manifests[k] = verify_registry(ctx, self.bin, reg, self.blobs)

        self.check_import(procs["import"], jobs["import"], cp, before["B"], manifests["B"])
        self.check_apply(procs["apply"], jobs["apply"], cp, prev, before["B"], manifests["B"])
        self.check_push(procs["push"], jobs["push"], cp)
        self.check_pull(procs["pull"], jobs["pull"], prev, before["C"], manifests["C"])
        self.check_export(procs["export"], archive, second)
        self.check_restore(procs["restore"], self.dir / f"restored-{n}", prev)
        for reg in self.regs.values():  # the retries left nothing half-done either
            gc(ctx, self.bin, reg)
            verify_registry(ctx, self.bin, reg, self.blobs)
        self.prev = cp
        self.trim(cp, prev)

    def restores_to(self, reg, cp, want, what):
        got, _ = restore_tree(self.ctx, self.bin, reg, cp, self.dir / "restores")
        if got != want:
            self.ctx.stats["failures"] += 1
            self.ctx.fail(f"{what}: the checkpoint does not restore to the files captured (torn or partial)",
                          key=f"{reg.name}:{cp}", expected=f"{len(want)} files", found=diff_trees(want, got))

    def check_import(self, p, args, cp, before, manifests):
        ctx, reg = self.ctx, self.regs["B"]
        there = cp in manifests
        if p.acked:
            ctx.check(there and p.doc.get("checkpoint_id") == cp, "an acknowledged import is not in the registry",
                      key=cp, expected="present", found=sorted(manifests)[-4:])
        if there:
            self.restores_to(reg, cp, self.trees[cp], "import")
        if not p.acked:
            rc, doc, err = run(self.bin, *args, env=self.env)
            code = ((doc or {}).get("error") or {}).get("code")
            ctx.check(rc == 0 or (there and code == "already_exists"), "the retry of a killed import failed",
                      key=cp, expected="created (or already_exists if it was there)",
                      found=f"rc={rc} {doc} {err[-600:]}")
            ctx.stats["import_retries_ok"] += 1
            if not there:
                self.restores_to(reg, cp, self.trees[cp], "import retry")

    def check_apply(self, p, args, cp, prev, before, manifests):
        ctx, reg = self.ctx, self.regs["B"]
        new = [c for c in manifests if c not in before and c != cp]
        ctx.check(len(new) <= 1, "one apply published more than one checkpoint", key=new, expected="<= 1",
                  found=new)
        for c in new:
            ctx.check(manifests[c].get("parent_id") == prev, "an applied checkpoint does not name its base",
                      key=c, expected=prev, found=manifests[c].get("parent_id"))
            self.restores_to(reg, c, self.trees[cp], "apply")
        if p.acked:
            ctx.check(p.doc["checkpoint_id"] in new, "an acknowledged apply is not in the registry",
                      key=p.doc["checkpoint_id"], expected="present", found=new)
        else:
            rc, doc, err = run(self.bin, *args, env=self.env)
            ctx.check(rc == 0, "the retry of a killed apply failed", key=args, expected="rc 0",
                      found=f"rc={rc} {doc} {err[-600:]}")
            self.restores_to(reg, doc["checkpoint_id"], self.trees[cp], "apply retry")
            ctx.stats["apply_retries_ok"] += 1

    def check_restore(self, p, root, cp):
        """A workspace the registry records at `root` holds exactly the
        checkpoint's files (the registry names it only once the tree is
        on disk); an acknowledged restore is recorded. Then it is destroyed
        (a killed one's half-made root removed)."""
        ctx, reg = self.ctx, self.regs["A"]
        listed = self.ok("list", "--registry-dir", reg)["results"]
        mine = [w for w in listed if pathlib.Path(w["dir"]) == root]
        if p.acked:
            ctx.check(len(mine) == 1 and mine[0]["id"] == p.doc["workspace_id"],
                      "an acknowledged restore is not in the registry", key=str(root), expected="recorded",
                      found=[w["dir"] for w in listed])
        for w in mine:
            got = tree_of(root)
            if got != self.trees[cp]:
                ctx.stats["failures"] += 1
                ctx.fail("a recorded restore does not hold the checkpoint's files (torn or partial)",
                         key=f"{root.name}:{cp}", expected=f"{len(self.trees[cp])} files",
                         found=diff_trees(self.trees[cp], got))
            self.ok("destroy", "--id", w["id"], "--registry-dir", reg)
        ctx.stats["restore_recorded" if mine else "restore_not_recorded"] += 1
        shutil.rmtree(root, ignore_errors=True)

    def remote_objects(self):
        out, token = {}, None
        while True:
            kw = {"Bucket": "cps", "Prefix": f"{PREFIX}/"}
            if token:
                kw["ContinuationToken"] = token
            page = self.s3.list_objects_v2(**kw)
            for o in page.get("Contents", []):
                out[o["Key"][len(PREFIX) + 1:]] = o["Size"]
            if not page.get("IsTruncated"):
                return out
            token = page["NextContinuationToken"]

    def remote_complete(self, cp, objs, what):
        """The remote names `cp` only with every blob its manifest names."""
        ctx = self.ctx
        key = f"checkpoints/{cp}.json"
        if key not in objs:
            return False
        manifest = self.remote_manifests.get(key)
        if manifest is None:
            body = self.s3.get_object(Bucket="cps", Key=f"{PREFIX}/{key}")["Body"].read()
            try:
                manifest = json.loads(body)["manifest"]
            except (ValueError, KeyError) as e:
                ctx.fail(f"{what}: a checkpoint manifest on the remote is not whole", key=key, expected="JSON",
                         found=f"{e!r} {body[:200]!r}")
            self.remote_manifests[key] = manifest
        for f in manifest.get("files", []):
            got = objs.get(f"blobs/{f['sha256']}")
            ctx.check(got == f["size"], f"{what}: the remote names a checkpoint whose blob is missing or partial",
                      key=(cp, f["path"]), expected=f["size"], found=got)
        return True

    def check_remote(self, objs):
        """Every checkpoint the remote names is complete (manifests are
        create-only, so each is read once)."""
        for key in objs:
            if key.startswith("checkpoints/") and key.endswith(".json"):
                self.remote_complete(key[len("checkpoints/"):-len(".json")], objs, "remote")

    def check_push(self, p, args, cp):
        ctx = self.ctx
        objs = self.remote_objects()
        self.check_remote(objs)
        there = self.remote_complete(cp, objs, "push")
        if p.acked:
            ctx.check(there, "an acknowledged push is not on the remote", key=cp, expected="manifest present",
                      found="absent")
        else:
            rc, doc, err = run(self.bin, *args, env=self.env)
            ctx.check(rc == 0 and doc.get("manifest") in ("uploaded", "already_present"),
                      "the retry of a killed push failed", key=cp, expected="rc 0",
                      found=f"rc={rc} {doc} {err[-600:]}")
            if there:
                ctx.check(doc["manifest"] == "already_present" and doc["uploaded_blobs"] == 0,
                          "a rerun of a complete push sent something again", key=cp,
                          expected="already_present, 0 blobs", found=doc)
            ctx.check(self.remote_complete(cp, self.remote_objects(), "push retry"),
                      "after a retried push the checkpoint is not on the remote", key=cp, expected="present",
                      found="absent")
            ctx.stats["push_retries_ok"] += 1

    def check_pull(self, p, args, prev, before, manifests):
        ctx, reg = self.ctx, self.regs["C"]
        there = prev in manifests
        if p.acked:
            ctx.check(there, "an acknowledged pull is not in the registry", key=prev, expected="present",
                      found=sorted(manifests)[-4:])
        if there:
            self.restores_to(reg, prev, self.trees[prev], "pull")
        if not p.acked:
            rc, doc, err = run(self.bin, *args, env=self.env)
            code = ((doc or {}).get("error") or {}).get("code")
            ctx.check(rc == 0 or (there and code == "already_exists"), "the retry of a killed pull failed",
                      key=prev, expected="pulled (or already_exists if it was there)",
                      found=f"rc={rc} {doc} {err[-600:]}")
            if not there:
                self.restores_to(reg, prev, self.trees[prev], "pull retry")
            ctx.stats["pull_retries_ok"] += 1

    def check_export(self, p, archive, second):
        ctx = self.ctx
        if second.exists():
            ctx.check(second.read_bytes() == archive.read_bytes(), "a killed export left a partial archive",
                      key=str(second), expected="absent or identical to the first export", found="different bytes")
        elif p.acked:
            ctx.fail("an acknowledged export left no archive", key=str(second), expected="present", found="absent")
        # A killed export leaves its hidden temporary beside the target,
        # unlocked; the next export to that name removes it once it is 10 s
        # old (crates/stow-workspace/tests/checkpoint.rs). Counted, removed.
        temps = sorted(second.parent.glob(f".{second.name}.stow-export-*"))
        if temps:
            ctx.stats["export_temp_leftovers"] += len(temps)
            for t in temps:
                t.unlink()
        second.unlink(missing_ok=True)

    def trim(self, cp, prev):
        """Keeps every registry small (not killed): applied checkpoints go at
        once, others after two cycles; archives and deltas of the past too."""
        keep = {cp, prev}
        for k in "BCA":
            reg = self.regs[k]
            cps = checkpoint_dirs(reg)
            manifests = {c: json.loads((reg / ".stow" / "checkpoints" / c / "manifest.json").read_text())
                         for c in cps}
            # children before parents
            for c in sorted(cps, key=lambda c: manifests[c].get("parent_id") is None):
                if c in keep:
                    continue
                rc, doc, err = run(self.bin, "workspace", "checkpoint-delete", "--checkpoint-id", c,
                                   "--registry-dir", reg)
                self.ctx.check(rc == 0, "checkpoint-delete failed", key=c, expected="rc 0",
                               found=f"{rc} {doc} {err}")
        for f in self.dir.glob("*.tar.gz"):
            if f.name.split(".")[0] not in keep:
                f.unlink()
        for f in self.dir.glob("delta-*.json"):
            f.unlink()
        for c in list(self.trees):
            if c not in keep:
                del self.trees[c]

    def teardown(self):
        if self.remote is not None:
            stop(self.remote)
