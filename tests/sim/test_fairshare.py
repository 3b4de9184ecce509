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


def fair_world(seed: int, order: str = "fairshare") -> tuple[list[SimJob], Config]:
    jobs, cfg = random_world(seed)
    users = random.Random(seed * 31 + 7)
    for spec in jobs:
        spec.user = users.choice(["ann", "ann", "ann", "bob", "cyd"])
    queue = cfg.policy.placement.queue
    queue.order = order  # type: ignore[assignment]
    # An age worth the fair-share factor's range after 20 minutes: both move the order.
    queue.multifactor.weight_age = queue.multifactor.weight_fairshare
    queue.multifactor.max_age = 1200.0
    queue.fairshare.half_life = 1800.0
    queue.fairshare.calc_period = 120.0
    queue.fairshare.shares = {"cyd": 2.0}
    return jobs, cfg


@pytest.mark.parametrize("order", ["fairshare", "multifactor"])
@pytest.mark.parametrize("seed", [8, 9])  # an elastic world and a fixed one, both quick
def test_fair_share_worlds_replay_the_same_skipping_ticks(seed: int, order: str) -> None:
    jobs, cfg = fair_world(seed, order)
    orders: list[list[str]] = []

    def watch(snapshot: Snapshot, now: float, decisions: Decisions) -> None:
        if snapshot.fairshare_usage:
            orders.append(sorted(snapshot.fairshare_usage, key=snapshot.fairshare_usage.__getitem__))

    skips_as_it_ticks(jobs, cfg, watch)
    assert len({tuple(order) for order in orders}) > 1, "the users' standing changes in this world"


@pytest.mark.parametrize("order", ["fairshare", "multifactor"])
def test_the_simulator_orders_by_fair_share_as_the_live_loop_would(order: str) -> None:
    seen = decides_as_live(*fair_world(12, order))
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


@pytest.mark.parametrize("order", ["fairshare", "multifactor"])
def test_under_multifactor_a_users_job_that_waited_long_goes_before_a_favoured_users_new_ones(order: str) -> None:
    # One two-vCPU node and jobs that take it whole for 10 minutes. ann (one share) runs a job at
    # the start, then asks for one more; bob (a hundred shares) submits one every 590 s from then,
    # so a new job of his always waits when the node frees.
    jobs = [job(1, submit=0.0, run=600.0, vcpus=2, user="ann"), job(2, submit=2.0, run=600.0, vcpus=2, user="ann")]
    jobs += [job(10 + i, submit=1.0 + 590.0 * i, run=600.0, vcpus=2, user="bob") for i in range(30)]
    age_weighs_as_much_after_an_hour = {"weight_age": 10_000, "weight_fairshare": 10_000, "max_age": 3600}
    cfg = config(
        sim={"fleet": {"mode": "fixed", "nodes": [{"instance_type": "small", "count": 1}]}},
        policy={
            "placement": {
                "queue": {
                    "order": order,
                    "fairshare": {"calc_period": 60, "shares": {"bob": 100}},
                    "multifactor": age_weighs_as_much_after_an_hour,
                }
            }
        },
    )
    sim, result = simulate(jobs, cfg)
    ann = sim.records[2].wait
    assert ann is not None and result.completed == 32
    if order == "fairshare":
        assert ann >= 30 * 600  # behind every one of bob's: his usage per share stays below hers
    else:
        # By max_age her job's age factor (1) outweighs anything bob's new jobs have once he has
        # used the node (their age about 0, his fair-share factor under 1): at most the run then on.
        assert ann <= 3600 + 600


def test_the_shipped_busy_partition_serves_its_worst_off_user_sooner_with_fair_share() -> None:
    examples = Path(__file__).resolve().parents[2] / "examples" / "simulate"
    runs = load_runs([examples / "busy-partition.toml", examples / "busy-partition-fairshare.toml"])
    by_priority, fair = simulate_workload(examples / "workload.swf", runs).results
    assert by_priority.completed == fair.completed and by_priority.unfinished == fair.unfinished == 0
    assert fair.user_wait_max < by_priority.user_wait_max / 2
    assert fair.wait_p95 < by_priority.wait_p95
