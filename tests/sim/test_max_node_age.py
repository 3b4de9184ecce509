"""policy.lifecycle.max_node_age in the simulator: random worlds with a short node lifetime replay
the same skipping quiet ticks as with a pass every tick (the simulator wakes at each node's expiry),
and as the live loop's `decide` decides, and old nodes are retired in them."""

from __future__ import annotations

import pytest

from corral.core.snapshot import Decisions, Snapshot
from tests.sim.helpers import decides_as_live, skips_as_it_ticks
from tests.sim.test_random_worlds import random_world


# Worlds that retire old nodes (22 and 18), without and with dependencies (worlds where it runs for
# long are slow to tick through: seeds 6, 18 and 28 take 20 s each).
@pytest.mark.parametrize("seed", [5, 14])
def test_worlds_with_a_node_lifetime_replay_the_same_skipping_ticks(seed: int) -> None:
    jobs, cfg = random_world(seed, dependencies=seed % 2 == 0)
    cfg.policy.lifecycle.max_node_age = 1200.0
    retired: list[str] = []

    def watch(snapshot: Snapshot, now: float, decisions: Decisions) -> None:
        retired.extend(m.node_id for m in decisions.node_marks if m.reason.startswith("max_node_age"))

    skips_as_it_ticks(jobs, cfg, watch)
    assert retired, "the world retires old nodes"


def test_the_simulator_retires_old_nodes_as_the_live_loop_would() -> None:
    jobs, cfg = random_world(28, dependencies=True)
    cfg.policy.lifecycle.max_node_age = 1200.0
    seen = decides_as_live(jobs, cfg)
    assert any(m.reason.startswith("max_node_age") for _, _, d in seen for m in d.node_marks)
