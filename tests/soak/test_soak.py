"""The short setting of the kill -9 soak (part of `make test`): a few
crash-recover cycles of every engine. The seed is SOAK_SEED, else random;
it is printed, and every failure names engine, seed, cycle and the replay
command. `make soak` runs the long setting (tests/soak/soak.py)."""

import os
import random
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import soak  # noqa: E402

CYCLES = int(os.environ.get("SOAK_TEST_CYCLES", "10"))
SEED = int(os.environ.get("SOAK_SEED") or random.SystemRandom().randrange(10**9))


@pytest.mark.parametrize("engine", soak.ENGINE_NAMES)
def test_kill_9_soak(engine, tmp_path):
    print(f"soak engine={engine} seed={SEED} cycles={CYCLES} (replay: SOAK_SEED={SEED})")
    stats = soak.run_engine(engine, CYCLES, SEED, workdir=tmp_path / engine, log=print)
    assert stats["cycles"] == CYCLES and stats["kills"] >= CYCLES, stats
    assert stats["failures"] == 0, stats
