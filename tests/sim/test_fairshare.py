"""Fair share in the simulator (queue.order = "fairshare"): random worlds whose jobs belong to a few
users replay the same skipping quiet ticks as with a pass every tick (the simulator wakes at each
calc time, when the order may change), and as the live loop's `decide` decides on the same
snapshots; and on a busy fixed fleet, a light user's jobs wait less than by priority order (in a
small world and in the shipped example)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from corral.config import Config
from corral.core.snapshot import Decisions, Snapshot
from corral.sim.run import load_runs
from corral.sim.run import simulate as simulate_workload
from corral.workload.model import SimJob
from tests.sim.helpers import config, decides_as_live, job, simulate, skips_as_it_ticks
from tests.sim.test_random_worlds import random_world


def fair_world(seed: int) -> tuple[list[SimJob], Config]:
    jobs, cfg = random_world(seed)
    users = random.Random(seed * 31 + 7)
    for spec in jobs:
        spec.user = users.choice(["ann", "ann", "ann", "bob", "cyd"])
    queue = cfg.policy.placement.queue
    queue.order = "fairshare"
    queue.fairshare.half_life = 1800.0
    queue.fairshare.calc_period = 120.0
    queue.fairshare.shares = {"cyd": 2.0}
    return jobs, cfg


@pytest.mark.parametrize("seed", [8, 9])  # an elastic world and a fixed one, both quick
def test_fair_share_worlds_replay_the_same_skipping_ticks(seed: int) -> None:
    jobs, cfg = fair_world(seed)
    orders: list[list[str]] = []

    def watch(snapshot: Snapshot, now: float, decisions: Decisions) -> None:
        if snapshot.fairshare_usage:
            orders.append(sorted(snapshot.fairshare_usage, key=snapshot.fairshare_usage.__getitem__))

    skips_as_it_ticks(jobs, cfg, watch)
    assert len({tuple(order) for order in orders}) > 1, "the users' standing changes in this world"


def test_the_simulator_orders_by_fair_share_as_the_live_loop_would() -> None:
    seen = decides_as_live(*fair_world(12))
    assert any(snapshot.fairshare_usage for snapshot, _, _ in seen)


@pytest.mark.parametrize("order", ["priority", "fairshare"])
def test_a_light_user_waits_less_under_fair_share(order: str) -> None:
    # One two-vCPU node; ann queues ten 10-minute jobs that each take it whole, then bob one.
    jobs = [job(i, submit=float(i), run=600.0, vcpus=2, user="ann") for i in range(1, 11)]
    jobs.append(job(11, submit=700.0, run=600.0, vcpus=2, user="bob"))
    cfg = config(
        sim={"fleet": {"mode": "fixed", "nodes": [{"instance_type": "small", "count": 1}]}},
        policy={"placement": {"queue": {"order": order, "fairshare": {"calc_period": 60}}}},
    )
    sim, result = simulate(jobs, cfg)
    bob = sim.records[11].wait
    assert bob is not None
    if order == "priority":
        assert bob > 8 * 600  # behind every one of ann's that was queued before his
    else:
        assert bob < 600  # next once the run he found ends: ann has used the node, he has not
    assert result.users == 2 and result.completed == 11


def test_the_shipped_busy_partition_serves_its_worst_off_user_sooner_with_fair_share() -> None:
    examples = Path(__file__).resolve().parents[2] / "examples" / "simulate"
    runs = load_runs([examples / "busy-partition.toml", examples / "busy-partition-fairshare.toml"])
    by_priority, fair = simulate_workload(examples / "workload.swf", runs).results
    assert by_priority.completed == fair.completed and by_priority.unfinished == fair.unfinished == 0
    assert fair.user_wait_max < by_priority.user_wait_max / 2
    assert fair.wait_p95 < by_priority.wait_p95
