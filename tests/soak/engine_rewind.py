"""Engine `rewind`: `workspace rewind` of an attached workspace, killed with
SIGKILL — at a test fault point (`rewind.journaled`, `rewind.moved_aside#N`,
`rewind.exchanged#N`,
`rewind.step#N`, `rewind.unstaged`; N drawn from the plan the model predicts)
or from outside after a random delay (now and then with a fault point's
`@MS` pause stretching the apply phase so the kill lands inside it).

The tree (an attached directory) is small and random: nested directories,
files of varied sizes (two slots hold files of 1-2.5 MiB), empty
directories, symbolic links (to files, directories, nowhere), file modes
0644/0755/0600, directory modes 0755/0700. Each cycle makes random edits
(rewrites, same-size rewrites, same-bytes rewrites, new files, deletions of
files and of whole directories, file <-> directory <-> link changes, link
retargets, chmods) with checkpoints taken between them at random, then
rewinds to a random earlier checkpoint of the workspace — a capture, often
the latest undo checkpoint (an undo), sometimes with `--paths` — and kills
it. The model is every checkpoint's tree as the engine read it when it was
taken; the pre-rewind tree; and the tree the rewind must leave (the target's
tree, or for `--paths` the target's in scope and the pre-rewind tree
elsewhere).

After the kill:
  1. path by path (directories, files with bytes and mode, links with
     target; the root's `.stow` left out), the tree is the pre-rewind state
     or the wanted one. The one state in between allowed: a directory the
     rewind creates is private (0700) until its mode step (by design, so
     nothing reads it while it is filled);
  2. nothing outside the root's `.stow` is anything else (no staged or
     moved-aside file, no stray name);
  3. a kill at a fault point past the journal leaves the journal
     (R/.stow/rewind/<ws>.json) naming the target; with no journal the tree
     is wholly the pre-rewind state (then a retry, not killed, must do the
     rewind and clear the stale stage) or wholly the wanted one, and
     `workspace status` answers (a kill inside the undo capture leaves no
     head that was never published) and changes nothing;
  4. the next `workspace status` finishes the journal (now and then a
     recovering status is killed first, and now and then the next command
     is a `workspace checkpoint`, or a `workspace rewind` to the journal's
     undo checkpoint): the tree is then exactly the wanted one (directory
     modes included), the journal and `<root>/.stow/rewind` are gone,
     status is clean against the target for a full rewind (against the
     undo checkpoint, its head, for a `--paths` one), and the log's head is
     the model's. A recovering checkpoint holds the wanted tree; a
     recovering rewind leaves the pre-rewind tree, and its own undo
     checkpoint holds the wanted one (so it finished the journal first);
  5. every undo checkpoint the rewind published (origin `rewind`, message
     "before rewind to <CP>") holds exactly the pre-rewind tree — checked
     by rewinding to it in place (an undo, not killed: the tree must be the
     pre-rewind tree again, and the undo's own undo checkpoint the tree it
     left) or by restoring it into a new root; an undo that reused the head
     (a clean tree) is the head's tree; nothing else was published;
  6. gc leaves nothing staged and the registry verifies (manifests, blobs
     by digest, usage).
A rewind the kill came too late for must have succeeded with no conflicts,
the wanted tree, the expected head and an undo checkpoint holding the
pre-rewind tree. A fresh workspace and registry are made every 40 cycles,
so a long run stays small.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import time

from soakkit import MIB, BlobCache, Cli, clean_env, gc, kill_delay, run, verify_registry

NAMES = ("a", "b", "c", "d.txt", "e.bin")
FILE_MODES = (0o644, 0o755, 0o600)
DIR_MODES = (0o755, 0o700)
LINK_TARGETS = ("a", "d.txt", "../b", "c/e.bin", ".", "nowhere", "/nonexistent/stow-soak")
BIG_SLOTS = ("big/b0.bin", "big/b1.bin")
MAX_ENTRIES = 34
ROTATE = 40  # cycles per workspace: then a fresh root and registry
PRIVATE_DIR = 0o700  # a directory the rewind creates, until its mode step


# ---------------------------------------------------------------- the tree


def snap(root) -> dict:
    """{slash path: entry} of everything under `root` but its own `.stow`:
    ("dir", mode), ("file", sha256, size, mode), ("link", target), or
    ("other", mode) for anything else."""
    out = {}
    root = str(root)
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == root:
            dirnames[:] = [d for d in dirnames if d != ".stow"]
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            st = os.lstat(path)
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", mode)
            elif stat.S_ISREG(st.st_mode):
                with open(path, "rb") as fh:
                    data = fh.read()
                out[rel] = ("file", hashlib.sha256(data).hexdigest(), len(data), mode)
            else:
                out[rel] = ("other", oct(st.st_mode))
    return out


def show(e):
    if e is None:
        return "ABSENT"
    if e[0] == "file":
        return f"file(sha={e[1][:12]}, size={e[2]}, mode={oct(e[3])})"
    if e[0] == "dir":
        return f"dir(mode={oct(e[1])})"
    return f"{e[0]}({e[1]})"


def tree_diff(want: dict, got: dict, limit=6) -> str:
    keys = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
    return "; ".join(f"{k}: want {show(want.get(k))}, got {show(got.get(k))}" for k in keys[:limit]) + (
        f" (+{len(keys) - limit} more)" if len(keys) > limit else "")


def under(path: str, scope: str) -> bool:
    return path == scope or path.startswith(scope + "/")


def ancestors(path: str):
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def wanted(pre: dict, target: dict, scope: list) -> dict:
    """The tree a rewind to `target` leaves: the target's, or with a scope
    the target's in scope, the pre-rewind tree elsewhere, and a directory
    missing above a scoped path made as the target has it (plan.rs)."""
    if not scope:
        return dict(target)
    out = {}
    for p in set(pre) | set(target):
        if any(under(p, s) for s in scope):
            v = target.get(p)
        elif (p not in pre and (target.get(p) or ("",))[0] == "dir"
              and any(len(s) > len(p) and under(s, p) for s in scope)):
            v = target[p]
        else:
            v = pre.get(p)
        if v is not None:
            out[p] = v
    return out


def exchange_count(pre: dict, target: dict, scope: list) -> int:
    """Steps of the plan that exchange an entry in place (an install or a
    make_dir where something else is): the range of `rewind.exchanged#N`."""
    n = 0
    for p in sorted(set(pre) | set(target)):
        if scope and not any(under(p, s) for s in scope):
            continue
        was, want = pre.get(p), target.get(p)
        if was is None or want is None or was == want:
            continue
        if was[0] == want[0] == "dir":
            continue
        if was[0] == want[0] == "file" and was[1] == want[1]:
            continue  # chmod
        n += 1
    return n


def plan_counts(pre: dict, target: dict, scope: list) -> tuple[int, int]:
    """(steps, files moved aside) of the rewind's plan, as plan.rs builds it
    from the undo checkpoint (the pre-rewind tree) and the target: the
    ranges of `rewind.step#N` and `rewind.moved_aside#N`."""
    steps = asides = 0
    for p in sorted(set(pre) | set(target)):
        in_scope = not scope or any(under(p, s) for s in scope)
        was, want = pre.get(p), target.get(p)
        if not in_scope:
            creating = any(len(s) > len(p) and under(s, p) for s in scope)
            if not (creating and was is None and want is not None and want[0] == "dir"):
                continue
        if was == want:
            continue
        if was and want and was[0] == want[0] == "dir":
            steps += 1  # dir_mode
            continue
        if was and want and was[0] == want[0] == "file" and was[1] == want[1]:
            steps += 1  # chmod
            continue
        if want is None:
            steps += 1  # remove (a file or link is moved aside) or remove_dir
            asides += was[0] in ("file", "link")
        else:
            # make_dir + dir_mode, or install: one step at the path whatever
            # was there (exchanged in one rename), never moved aside.
            steps += 2 if want[0] == "dir" else 1
    return steps, asides


# ---------------------------------------------------------------- the engine


class RewindEngine:
    name = "rewind"

    def __init__(self, ctx, bin_, workdir):
        self.ctx, self.bin, self.dir = ctx, bin_, workdir
        self.gen = -1
        self.ws = None
        self.recovered_by = None  # the checkpoint that finished an interrupted rewind, if one did
        self.duration = 0.08  # seconds a rewind takes to run to the end (moving average)

    # setup ------------------------------------------------------------

    def setup(self):
        rng = self.ctx.rng("setup")
        # Large bodies come from a small pool: the blobs stay few.
        self.big = [rng.randbytes(rng.randint(1 * MIB + 1, 5 * MIB // 2)) for _ in range(4)]
        self.new_workspace()

    def new_workspace(self):
        """A fresh root with a random tree, attached to a fresh registry,
        and its first checkpoint (the previous generation is removed)."""
        ctx = self.ctx
        if self.ws is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            shutil.rmtree(self.reg, ignore_errors=True)
            shutil.rmtree(self.dir / "restores", ignore_errors=True)
        self.gen += 1
        self.root = self.dir / f"w{self.gen}"
        self.reg = self.dir / f"reg{self.gen}"
        self.blobs = BlobCache()
        self.root.mkdir()
        rng = ctx.rng("tree", self.gen)
        for _ in range(14):
            self.edit(rng, f"g{self.gen}")
        rc, doc, err = run(self.bin, "workspace", "attach", "--root", self.root, "--registry-dir", self.reg)
        ctx.check(rc == 0, "workspace attach failed", key=str(self.root), expected="rc 0",
                  found=f"{rc} {doc} {err[-800:]}")
        self.ws = doc["workspace_id"]
        self.cps = {}  # checkpoint -> tree (every checkpoint of the workspace the engine knows)
        self.head = None
        self.last_undo = None
        self.checkpoint("first")
        ctx.stats["workspaces"] += 1

    def teardown(self):
        pass

    def before_rewind(self):
        """Called once the cycle's edits are made, before the rewind (the
        power-loss driver makes the edits durable here)."""

    def after_kill(self, rng):
        """Called as soon as the rewind process has ended, killed or not,
        before anything is judged (the power-loss driver cuts the power
        here)."""

    # commands ---------------------------------------------------------

    def ok(self, what, *args, env=None):
        rc, doc, err = run(self.bin, "workspace", *args, env=env)
        self.ctx.check(rc == 0 and doc is not None, f"workspace {what} failed", key=args, expected="rc 0",
                       found=f"rc={rc} {doc} {err[-800:]}")
        return doc

    def checkpoint(self, message):
        doc = self.ok("checkpoint", "checkpoint", "--id", self.ws, "--registry-dir", self.reg, "--message", message)
        cp = doc["checkpoint_id"]
        self.cps[cp] = snap(self.root)
        self.head = cp
        self.ctx.stats["checkpoints"] += 1
        return cp

    def log(self) -> dict:
        return self.ok("log", "log", "--id", self.ws, "--registry-dir", self.reg, "--limit", "1000")

    def rewind_args(self, target, scope):
        args = ["workspace", "rewind", "--to", target, "--id", self.ws, "--registry-dir", self.reg]
        if scope:
            args += ["--paths", *scope]
        return args

    def journal_path(self):
        return self.reg / ".stow" / "rewind" / f"{self.ws}.json"

    def stage_dir(self):
        return self.root / ".stow" / "rewind"

    # edits --------------------------------------------------------------

    def _clear(self, rel):
        p = self.root / rel
        if p.is_symlink() or (p.exists() and not p.is_dir()):
            p.unlink()
        elif p.is_dir():
            shutil.rmtree(p)

    def _parents(self, rel):
        """Every directory above `rel` a real directory (a file or link in
        the way is removed: a type change)."""
        for a in ancestors(rel):
            p = self.root / a
            if p.is_symlink() or (p.exists() and not p.is_dir()):
                p.unlink()
            if not p.exists():
                p.mkdir()
                p.chmod(0o755)

    def _put_file(self, rel, body, mode):
        self._parents(rel)
        p = self.root / rel
        if p.is_symlink() or p.is_dir():
            self._clear(rel)
        p.write_bytes(body)
        p.chmod(mode)

    def _put_link(self, rel, target):
        self._parents(rel)
        self._clear(rel)
        os.symlink(target, self.root / rel)

    def _path(self, rng):
        return "/".join(rng.choice(NAMES) for _ in range(rng.choice((1, 1, 2, 2, 3))))

    def _body(self, rng, tag, rel, size=None):
        if size is None:
            size = rng.choice([0, rng.randint(1, 200), rng.randint(200, 5000), rng.randint(5000, 70_000)])
        head = f"{tag} {rel}\n".encode()[:size]
        return head + rng.randbytes(size - len(head))

    def edit(self, rng, tag):
        """One random edit of the tree."""
        now = snap(self.root)
        files = sorted(p for p, e in now.items() if e[0] == "file")
        dirs = sorted(p for p, e in now.items() if e[0] == "dir")
        links = sorted(p for p, e in now.items() if e[0] == "link")
        ops = ["write", "new", "new", "link", "chmod", "mkdir", "to_dir", "to_file", "same_size", "touch",
               "big", "dirmode", "delete", "rmtree"]
        if len(now) >= MAX_ENTRIES:
            ops = ["delete", "rmtree", "rmtree", "write", "chmod", "to_file"]
        op = rng.choice(ops)
        self.ctx.stats[f"edit_{op}"] += 1
        if op == "write" and files:
            rel = rng.choice(files)
            self._put_file(rel, self._body(rng, tag, rel), now[rel][3])
        elif op == "same_size" and files:
            rel = rng.choice(files)  # other bytes, same size (and mode): only a hash tells
            self._put_file(rel, self._body(rng, tag, rel, now[rel][2]), now[rel][3])
        elif op == "touch" and files:
            rel = rng.choice(files)  # the same bytes written again: a new mtime only
            p = self.root / rel
            p.write_bytes(p.read_bytes())
        elif op == "chmod" and files:
            rel = rng.choice(files)
            (self.root / rel).chmod(rng.choice([m for m in FILE_MODES if m != now[rel][3]]))
        elif op == "dirmode" and dirs:
            rel = rng.choice(dirs)
            (self.root / rel).chmod(rng.choice([m for m in DIR_MODES if m != now[rel][1]]))
        elif op == "delete" and (files or links):
            self._clear(rng.choice(files + links))
        elif op == "rmtree" and dirs:
            self._clear(rng.choice(dirs))
        elif op == "to_dir" and (files or links):
            rel = rng.choice(files + links)  # a file or link becomes a directory
            self._clear(rel)
            (self.root / rel).mkdir()
            (self.root / rel).chmod(rng.choice(DIR_MODES))
            for _ in range(rng.randint(0, 2)):
                sub = f"{rel}/{rng.choice(NAMES)}"
                self._put_file(sub, self._body(rng, tag, sub), rng.choice(FILE_MODES))
        elif op == "to_file" and dirs:
            rel = rng.choice(dirs)  # a directory becomes a file
            self._clear(rel)
            self._put_file(rel, self._body(rng, tag, rel), rng.choice(FILE_MODES))
        elif op == "link":
            rel = rng.choice(links) if links and rng.random() < 0.5 else self._path(rng)
            self._put_link(rel, rng.choice(LINK_TARGETS))  # a retarget, or a file/dir becomes a link
        elif op == "mkdir":
            rel = self._path(rng)
            self._parents(rel)
            self._clear(rel)
            (self.root / rel).mkdir()
            (self.root / rel).chmod(rng.choice(DIR_MODES))
        elif op == "big":
            rel = rng.choice(BIG_SLOTS)
            if (self.root / rel).exists() and rng.random() < 0.25:
                self._clear(rel)
            else:
                self._put_file(rel, rng.choice(self.big), rng.choice(FILE_MODES))
        else:  # "new", or an edit with nothing to act on
            rel = self._path(rng)
            self._put_file(rel, self._body(rng, tag, rel), rng.choice(FILE_MODES))

    # the cycle ----------------------------------------------------------

    def cycle(self):
        ctx = self.ctx
        if ctx.cycle and ctx.cycle % ROTATE == 0:
            self.new_workspace()
        rng = ctx.rng("main")
        tag = f"c{ctx.cycle}"
        # Edits, with checkpoints at random moments between them.
        for _ in range(rng.randint(1, 3)):
            for _ in range(rng.randint(1, 4)):
                self.edit(rng, tag)
            if rng.random() < 0.45:
                self.checkpoint(f"{tag} edits")
        self.before_rewind()
        pre = snap(self.root)
        # The target: an earlier checkpoint, often the latest undo one.
        if self.last_undo and rng.random() < 0.3:
            target = self.last_undo
            ctx.stats["rewinds_to_undo"] += 1
        else:
            order = list(self.cps)
            target = rng.choice(order[-8:] if rng.random() < 0.7 else order)
        scope = self.pick_scope(rng, pre, self.cps[target]) if rng.random() < 0.25 else []
        want = wanted(pre, self.cps[target], scope)
        steps, asides = plan_counts(pre, self.cps[target], scope)
        self.exchanges = exchange_count(pre, self.cps[target], scope)
        ctx.stats["rewinds_scoped" if scope else "rewinds_full"] += 1
        self.rewind_killed(rng, target, scope, pre, want, steps, asides)

    def pick_scope(self, rng, pre, target):
        """One to three paths of either tree, every directory above each a
        directory (or nothing) in the pre-rewind tree, so the rewind can
        write there; often a path that differs."""
        cands = sorted(p for p in set(pre) | set(target)
                       if all((pre.get(a) or ("dir",))[0] == "dir" for a in ancestors(p)))
        if not cands:
            return []
        differ = [p for p in cands if pre.get(p) != target.get(p)]
        out = set()
        for _ in range(rng.randint(1, 3)):
            out.add(rng.choice(differ if differ and rng.random() < 0.7 else cands))
        return sorted(out)

    def choose_kill(self, rng, steps, asides):
        """(fault point to arm, seconds until the external SIGKILL or None):
        half the kills at a fault point, half from outside — after a delay
        drawn around a rewind's measured duration, or, half of those, with
        a point's `@MS` pause (every visit from the Nth on) stretching the
        apply phase and the delay drawn across it."""
        if rng.random() < 0.5:
            kinds = ["rewind.journaled", "rewind.unstaged"]
            weights = [1, 1]
            if steps:
                kinds.append(f"rewind.step#{rng.randint(1, steps)}")
                weights.append(3)
            if asides:
                kinds.append(f"rewind.moved_aside#{rng.randint(1, asides)}")
                weights.append(3)
            if getattr(self, "exchanges", 0):
                kinds.append(f"rewind.exchanged#{rng.randint(1, self.exchanges)}")
                weights.append(3)
            return rng.choices(kinds, weights)[0], None
        base = self.duration
        if rng.random() < 0.5:
            return None, kill_delay(rng, base)
        ms = rng.randint(2, 20)
        pauses = [(f"rewind.journaled@{ms * 5}", ms * 5)]
        if steps:
            pauses.append((f"rewind.step#1@{ms}", ms * steps))
        if asides:
            pauses.append((f"rewind.moved_aside#1@{ms}", ms * asides))
        pause, total_ms = rng.choice(pauses)
        return pause, rng.uniform(0.5 * base, base + total_ms / 1000)

    def timed_rewind(self, target, scope):
        """A rewind run to the end; its duration feeds the kill delays."""
        t0 = time.monotonic()
        out = run(self.bin, *self.rewind_args(target, scope))
        self.duration = 0.8 * self.duration + 0.2 * (time.monotonic() - t0)
        return out

    def rewind_killed(self, rng, target, scope, pre, want, steps, asides):
        ctx = self.ctx
        fault, delay = self.choose_kill(rng, steps, asides)
        dies_at_fault = fault is not None and delay is None
        env = clean_env(STOW_TEST_FAULT=fault) if fault else clean_env()
        known = set(self.cps)
        head_before = self.head
        cli = Cli(self.bin, *self.rewind_args(target, scope), env=env, tag="rewind")
        if delay is not None:
            time.sleep(delay)
            cli.kill()
        cli.finish(120)
        self.after_kill(rng)
        ctx.stats["kills"] += 1
        ctx.stats[f"kill_at_{fault.split('#')[0]}" if dies_at_fault else "kill_external"] += 1
        where = {"target": target, "scope": scope, "fault": fault, "delay": delay, "steps": steps, "asides": asides}
        died = cli.rc == -signal.SIGKILL
        if not died:
            ctx.check(cli.rc == 0 and cli.doc is not None, "a rewind failed without being killed", key=where,
                      expected="rc 0 and its result", found=f"rc={cli.rc} {cli.doc} {cli.stderr[-800:]}")
            ctx.check(not dies_at_fault, "a rewind ran past the fault point armed to kill it (the plan differs "
                      "from the model's)", key=where, expected=f"killed at {fault}", found=cli.doc)
            ctx.stats["rewinds_done_before_kill"] += 1
            undo = self.check_result(cli.doc, target, scope, pre, want, head_before,
                                     "a rewind the kill came too late for")
            self.after_rewind(rng, target, pre, want, known, head_before, [undo])
            return
        ctx.stats["rewinds_killed"] += 1
        # 1-2. Path by path: the pre-rewind state or the wanted one, nothing else.
        self.check_paths(pre, want, where, "after the kill")
        # 3. The journal.
        jpath = self.journal_path()
        journal = json.loads(jpath.read_text()) if jpath.exists() else None
        if dies_at_fault:
            ctx.check(journal is not None, "a rewind killed past its journal left no journal", key=where,
                      expected=str(jpath), found="absent")
        undos = []
        undone = None
        if journal is not None:
            ctx.check(journal.get("target") == target and journal.get("workspace_id") == self.ws,
                      "the journal names another rewind", key=where, expected=(target, self.ws),
                      found=(journal.get("target"), journal.get("workspace_id")))
            undos.append(journal["undo"])
            ctx.stats["journals_left"] += 1
            if self.recover(rng, pre, want, where) == "rewind":
                # The next rewind, an undo to the journal's undo checkpoint,
                # finishes the journal first (its own undo checkpoint holds
                # the wanted tree), then undoes it.
                self.head = target if not scope else journal["undo"]
                undone = (journal["undo"], self.undo_in_place(journal["undo"], pre, want))
            else:
                self.check_finished(target, scope, want, journal["undo"], where)
        else:
            got = snap(self.root)
            ctx.check(got in (pre, want), "no journal left, yet the tree is part way (neither the pre-rewind "
                      "tree nor the wanted one)", key=where, expected="one of them, whole",
                      found=f"vs pre: {tree_diff(pre, got)} | vs wanted: {tree_diff(want, got)}")
            # Status finds nothing to finish and changes nothing. (A kill
            # inside the undo capture, between its history line and its
            # publication, must not leave a head that is not there.)
            rc, doc, err = run(self.bin, "workspace", "status", "--id", self.ws, "--registry-dir", self.reg)
            ctx.check(rc == 0 and doc is not None and "error" not in doc,
                      "status fails after a rewind killed before its journal", key=where,
                      expected="rc 0 (the head: the last checkpoint published)",
                      found=f"rc={rc} {doc} {err[-800:]}")
            after = snap(self.root)
            ctx.check(after == got, "status with no journal changed the tree", key=where, expected="unchanged",
                      found=tree_diff(got, after))
            if got == want and pre != want:
                ctx.stats["killed_after_journal_removed"] += 1
                ctx.check(not self.stage_dir().exists(), "a finished rewind left its stage", key=where,
                          expected="absent", found=str(self.stage_dir()))
                self.head = target if not scope else None  # scoped: its undo checkpoint (below)
            else:
                # Killed before its journal: nothing changed. A retry (not
                # killed) does the rewind and clears the stale stage.
                ctx.stats["killed_before_journal"] += 1
                rc, doc, err = self.timed_rewind(target, scope)
                ctx.check(rc == 0 and doc is not None, "the retry of a rewind killed before its journal failed",
                          key=where, expected="rc 0", found=f"rc={rc} {doc} {err[-800:]}")
                undos.append(self.check_result(doc, target, scope, pre, want, head_before,
                                               "the retry of a killed rewind"))
                ctx.stats["retries_ok"] += 1
        self.after_rewind(rng, target, pre, want, known, head_before, undos, undone)

    def check_paths(self, pre, want, where, when):
        """Every path is as it was or as the rewind wants it (a directory
        the rewind creates may still be private)."""
        ctx = self.ctx
        got = snap(self.root)
        for p in sorted(set(pre) | set(want) | set(got)):
            g, a, b = got.get(p), pre.get(p), want.get(p)
            if g == a or g == b:
                continue
            if g == ("dir", PRIVATE_DIR) and b is not None and b[0] == "dir" and (a is None or a[0] != "dir"):
                ctx.stats["private_dirs_seen"] += 1
                continue
            if a is None and b is None:
                what = f"{when}: an entry outside .stow that neither tree has (a stray or staged file)"
            elif g is None and a is not None and b is not None and a[0] == b[0]:
                what = f"{when}: a path replaced in place is missing (moved aside, its new version not installed)"
            elif g is None and a is not None and b is not None:
                what = f"{when}: a path whose kind changes is missing (removed, its new version not installed)"
            else:
                what = f"{when}: a path is neither as it was nor as the checkpoint has it (torn)"
            ctx.stats["failures"] += 1
            ctx.fail(what, key=(p, where), expected=f"before: {show(a)} | wanted: {show(b)}", found=show(g))
        return got

    def recover(self, rng, pre, want, where) -> str:
        """The next status, checkpoint or rewind finishes the journal (the
        checkpoint is taken here; the rewind is the caller's); now and then
        a recovering status is killed first."""
        ctx = self.ctx
        if rng.random() < 0.25:
            cli = Cli(self.bin, "workspace", "status", "--id", self.ws, "--registry-dir", self.reg, tag="status")
            time.sleep(kill_delay(rng, 0.03))
            cli.kill()
            cli.finish(120)
            ctx.stats["recoveries_killed" if cli.rc == -signal.SIGKILL else "recoveries_done_before_kill"] += 1
            if cli.rc != -signal.SIGKILL:
                ctx.check(cli.rc == 0 and cli.doc is not None, "a recovering status failed without being killed",
                          key=where, expected="rc 0", found=f"rc={cli.rc} {cli.doc} {cli.stderr[-800:]}")
            self.check_paths(pre, want, where, "after a killed recovery")
        r = rng.random()
        self.recovered_by = None
        if r < 0.25:
            ctx.stats["recovered_by_rewind"] += 1
            return "rewind"
        if r < 0.45:
            doc = self.ok("checkpoint", "checkpoint", "--id", self.ws, "--registry-dir", self.reg,
                          "--message", f"c{ctx.cycle} recovery")
            got = snap(self.root)
            ctx.check(got == want, "a checkpoint did not finish the interrupted rewind", key=where,
                      expected="the wanted tree", found=tree_diff(want, got))
            self.cps[doc["checkpoint_id"]] = got
            self.recovered_by = doc["checkpoint_id"]
            ctx.stats["recovered_by_checkpoint"] += 1
            return "checkpoint"
        ctx.stats["recovered_by_status"] += 1
        return "status"

    def check_finished(self, target, scope, want, undo, where):
        """After recovery: the wanted tree exactly, no journal or stage,
        status against the right checkpoint."""
        ctx = self.ctx
        st = self.ok("status", "status", "--id", self.ws, "--registry-dir", self.reg)
        got = snap(self.root)
        if got != want:
            ctx.stats["failures"] += 1
            ctx.fail("after the next status the tree is not the one the rewind wanted", key=where,
                     expected=f"{len(want)} entries", found=tree_diff(want, got))
        ctx.check(not self.journal_path().exists(), "the journal outlived the recovery", key=where,
                  expected="absent", found=str(self.journal_path()))
        ctx.check(not self.stage_dir().exists(), "a stage outlived the recovery", key=where, expected="absent",
                  found=sorted(str(p) for p in self.stage_dir().rglob("*"))[:5])
        head = self.recovered_by or (target if not scope else undo)
        ctx.check(st.get("checkpoint_id") == head, "status compares against the wrong checkpoint", key=where,
                  expected=head, found=st)
        if not scope or self.recovered_by:
            ctx.check(st.get("clean") is True, "status after the recovery is not clean", key=where,
                      expected="clean", found=st)
        self.head = head
        ctx.stats["recoveries_ok"] += 1

    def check_result(self, doc, target, scope, pre, want, head_before, what) -> str:
        """A rewind that ran to the end: no conflicts, the wanted tree,
        its head; returns its undo checkpoint."""
        ctx = self.ctx
        got = snap(self.root)
        key = {"target": target, "scope": scope}
        if got != want:
            ctx.stats["failures"] += 1
            ctx.fail(f"{what}: the tree is not the checkpoint's", key=key, expected=f"{len(want)} entries",
                     found=tree_diff(want, got))
        undo = doc.get("undo_checkpoint_id")
        head = target if not scope else undo
        ctx.check(doc.get("checkpoint_id") == target and doc.get("conflicts") == [] and undo
                  and doc.get("head") == head and doc.get("dry_run") is False,
                  f"{what}: its result is wrong", key=key,
                  expected=f"checkpoint_id {target}, no conflicts, an undo checkpoint, head {head}", found=doc)
        ctx.check(not self.journal_path().exists() and not self.stage_dir().exists(),
                  f"{what}: it left its journal or stage", key=key, expected="neither",
                  found=(self.journal_path().exists(), self.stage_dir().exists()))
        self.head = head
        ctx.stats["rewinds_checked"] += 1
        return undo

    def after_rewind(self, rng, target, pre, want, known, head_before, undos, undone=None):
        """The undo checkpoint(s): only they were published, each holds the
        pre-rewind tree; the head; gc and the registry. `undone`: (undo
        checkpoint, its undo's undo checkpoint) when the recovery was an
        undo in place (the first is verified by it, the second is its own)."""
        ctx = self.ctx
        log = self.log()
        entries = {e["checkpoint_id"]: e for e in log["checkpoints"]}
        # What the recovery published was checked there.
        theirs = {self.recovered_by, undone[1] if undone else None}
        new = [cp for cp in entries if cp not in known and cp not in theirs]
        self.recovered_by = None
        for cp in new:
            e = entries[cp]
            ctx.check(e.get("origin") == "rewind" and e.get("message") == f"before rewind to {target}",
                      "a rewind published something else than its undo checkpoint", key=cp,
                      expected=f"origin rewind, message 'before rewind to {target}'", found=e)
        ctx.check(len(new) <= 2, "more undo checkpoints than rewinds run", key=new, expected="<= 2", found=new)
        for u in undos:
            if u in new:
                continue
            # Reused: the tree was clean against the head.
            ctx.check(u == head_before and self.cps.get(u) == pre,
                      "an undo checkpoint that is neither new nor the head of a clean tree", key=u,
                      expected=f"new, or head {head_before} whose tree is the pre-rewind one",
                      found=tree_diff(pre, self.cps.get(u, {})))
            ctx.stats["undo_reused_head"] += 1
        if self.head is None:  # scoped, finished before the kill: the head is its undo checkpoint
            self.head = new[0] if new else head_before
        ctx.check(log.get("head") == self.head, "the workspace's head is not the model's", key=self.ws,
                  expected=self.head, found=log.get("head"))
        last = next((u for u in reversed(undos) if u), None) or (new[0] if new else None)
        # Each new undo checkpoint holds the pre-rewind tree: the last one
        # (often) by an undo in place, the others by a restore.
        in_place = undone is None and last in new and rng.random() < 0.5
        for u in new:
            if (u == last and in_place) or (undone and u == undone[0]):
                continue
            got = self.restored(u)
            if got != pre:
                ctx.stats["failures"] += 1
                ctx.fail("an undo checkpoint does not restore to the pre-rewind tree", key=u,
                         expected=f"{len(pre)} entries", found=tree_diff(pre, got))
            self.cps[u] = pre
            ctx.stats["undos_verified_by_restore"] += 1
        if last is not None:
            self.last_undo = undone[1] if undone else last
        if in_place:
            self.undo_in_place(last, pre, want)
        gc(ctx, self.bin, self.reg)
        verify_registry(ctx, self.bin, self.reg, self.blobs)

    def restored(self, cp) -> dict:
        scratch = self.dir / "restores"
        scratch.mkdir(exist_ok=True)
        root = scratch / f"r-{cp}-{time.monotonic_ns()}"
        doc = self.ok("restore", "restore", "--checkpoint-id", cp, "--root", root, "--registry-dir", self.reg)
        got = snap(root)
        self.ok("destroy", "destroy", "--id", doc["workspace_id"], "--registry-dir", self.reg)
        shutil.rmtree(root, ignore_errors=True)
        self.ctx.stats["restores"] += 1
        return got

    def undo_in_place(self, undo, pre, want):
        """`rewind --to <undo>` (not killed): the pre-rewind tree again; its
        own undo checkpoint is the tree it replaced."""
        ctx = self.ctx
        head_before = self.head
        known = set(self.cps)
        rc, doc, err = self.timed_rewind(undo, [])
        ctx.check(rc == 0 and doc is not None, "an undo (rewind to the undo checkpoint) failed", key=undo,
                  expected="rc 0", found=f"rc={rc} {doc} {err[-800:]}")
        u2 = self.check_result(doc, undo, [], want, pre, head_before, "an undo (rewind to the undo checkpoint)")
        self.cps[undo] = pre
        if u2 in known or u2 == head_before:  # (after a --paths rewind the head is the undo checkpoint)
            ctx.check(u2 == head_before and self.cps.get(u2) == want,
                      "an undo's undo checkpoint is neither new nor the head of a clean tree", key=u2,
                      expected=head_before, found=tree_diff(want, self.cps.get(u2, {})))
        else:
            entry = {e["checkpoint_id"]: e for e in self.log()["checkpoints"]}.get(u2, {})
            ctx.check(entry.get("origin") == "rewind" and entry.get("message") == f"before rewind to {undo}",
                      "an undo's undo checkpoint is not in the log as one", key=u2,
                      expected=f"origin rewind, message 'before rewind to {undo}'", found=entry)
            got = self.restored(u2)
            if got != want:
                ctx.stats["failures"] += 1
                ctx.fail("an undo's undo checkpoint does not restore to the tree the undo replaced", key=u2,
                         expected=f"{len(want)} entries", found=tree_diff(want, got))
            self.cps[u2] = want
        self.last_undo = u2
        ctx.stats["undos_verified_in_place"] += 1
        return u2
