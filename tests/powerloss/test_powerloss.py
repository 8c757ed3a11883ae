"""The short setting of the power-loss runs (part of `make test`): a few
kill-and-cut cycles of each engine on the harness (tools/powerloss), and
the proof that the harness can fail: with one fsync left out (a skip
point) it finds the loss. Skipped, with the reason printed, where FUSE
cannot be mounted. `make powerloss` runs the long setting."""

import os
import random
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import powerloss  # noqa: E402
from soakkit import SoakFailure  # noqa: E402

CUTS = int(os.environ.get("POWERLOSS_TEST_CUTS", "4"))
SEED = int(os.environ.get("POWERLOSS_SEED") or random.SystemRandom().randrange(10**9))
WHY = powerloss.unavailable()


@pytest.mark.skipif(WHY is not None, reason=f"power-loss harness unavailable: {WHY}")
@pytest.mark.parametrize("engine", powerloss.ENGINE_NAMES)
def test_power_loss(engine, tmp_path):
    print(f"powerloss engine={engine} seed={SEED} cuts={CUTS} (replay: POWERLOSS_SEED={SEED})")
    stats = powerloss.run_engine(engine, CUTS, SEED, workdir=tmp_path / engine, log=print)
    assert stats["cycles"] == CUTS and stats["cuts"] >= CUTS, stats
    assert stats["failures"] == 0, stats


@pytest.mark.skipif(WHY is not None, reason=f"power-loss harness unavailable: {WHY}")
def test_a_missing_fsync_is_found(tmp_path):
    """store-skip-stage-dir-fsync leaves out the fsync of tmp/ after a
    large body is staged: an acknowledged object's blob can then vanish
    with the power, and the harness must say so within a few dozen cuts
    (the seed is fixed: the first cuts that catch it are known)."""
    with pytest.raises(SoakFailure) as found:
        powerloss.run_engine("s3", 40, 2, workdir=tmp_path / "fault", fault="store-skip-stage-dir-fsync",
                             log=print)
    assert "missing" in str(found.value) or "lost" in str(found.value), found.value


@pytest.mark.skipif(WHY is not None, reason=f"power-loss harness unavailable: {WHY}")
def test_a_missing_restore_flush_is_found(tmp_path):
    """workspace-skip-restore-syncfs leaves out the flush of a restored
    tree before the registry records it: after the cut the recorded
    workspace's files can be empty or gone, and the transfer engine's
    restore check must say so (seed 417072877 spares the first cycle's
    restore and drops everything unsynced: found at the first cut)."""
    with pytest.raises(SoakFailure) as found:
        powerloss.run_engine("transfer", 6, 417072877, workdir=tmp_path / "fault",
                             fault="workspace-skip-restore-syncfs", log=print)
    assert "recorded restore does not hold" in str(found.value), found.value
