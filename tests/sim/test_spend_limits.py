"""max_cost_per_hour and max_vcpus in the simulator: random elastic worlds under a cap replay the
same skipping quiet ticks as with a pass every tick (a shutdown that frees budget is followed up,
as one that frees room), and as the live loop's `decide` decides; the cap binds in them."""

from __future__ import annotations

import random

import pytest

from corral.config import Config
from corral.core.snapshot import Decisions, Snapshot
from corral.workload.model import SimJob
from tests.sim.helpers import decides_as_live, skips_as_it_ticks
from tests.sim.test_random_worlds import random_world


def capped_world(seed: int) -> tuple[list[SimJob], Config]:
    jobs, cfg = random_world(seed, dependencies=seed % 3 == 0)
    r = random.Random(seed * 17 + 5)
    cfg.policy.boot.max_cost_per_hour = r.choice([None, 0.3, 0.55, 1.0])
    cfg.policy.boot.max_vcpus = r.choice([None, None, 10.0, 20.0])
    if cfg.policy.boot.max_cost_per_hour is None and cfg.policy.boot.max_vcpus is None:
        cfg.policy.boot.max_cost_per_hour = 0.5
    cfg.sim.horizon = 20000.0
    return jobs, cfg


@pytest.mark.parametrize("seed", [8, 39])  # a vCPU cap and a cost cap, both quick
def test_capped_worlds_replay_the_same_three_ways(seed: int) -> None:
    jobs, cfg = capped_world(seed)
    capped: list[str] = []

    def watch(snapshot: Snapshot, now: float, decisions: Decisions) -> None:
        capped.extend(
            a.wait_reason for a in decisions.annotations if "max_cost" in a.wait_reason or "max_vcpus" in a.wait_reason
        )

    skips_as_it_ticks(jobs, cfg, watch)
    assert capped, "the cap binds in this world"

    decides_as_live(jobs, cfg)
