"""policy.users in the simulator: random worlds whose jobs belong to a few users, with limits on
their running work, replay the same skipping quiet ticks as ticking (a job's end, which frees its
user's room, is followed up), and as the live loop's `decide` decides; the limits bind in them."""

from __future__ import annotations

import random

import pytest

from corral.config import Config
from corral.core.snapshot import Decisions, Snapshot
from corral.workload.model import SimJob
from tests.sim.helpers import decides_as_live, skips_as_it_ticks
from tests.sim.test_random_worlds import random_world


def limited_world(seed: int) -> tuple[list[SimJob], Config]:
    jobs, cfg = random_world(seed, dependencies=seed % 3 == 0)
    users = random.Random(seed * 13 + 1)
    for spec in jobs:
        spec.user = users.choice(["ann", "ann", "bob", "cyd"])
    limits = cfg.policy.users
    limits.max_running_jobs = users.choice([None, 2, 4])
    limits.max_running_vcpus = users.choice([None, 6.0, 12.0]) if limits.max_running_jobs else 8.0
    return jobs, cfg


@pytest.mark.parametrize("seed", [7, 9])  # an elastic world and a fixed one, both quick
def test_worlds_with_user_limits_replay_the_same_three_ways(seed: int) -> None:
    jobs, cfg = limited_world(seed)
    held: list[str] = []

    def watch(snapshot: Snapshot, now: float, decisions: Decisions) -> None:
        held.extend(a.wait_reason for a in decisions.annotations if a.wait_reason.startswith("QOSMax"))

    skips_as_it_ticks(jobs, cfg, watch)
    assert held, "the limits bind in this world"
    decides_as_live(jobs, cfg)
