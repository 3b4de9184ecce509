"""Random small worlds, each replayed three ways that must agree: skipping quiet ticks against a
pass every tick, the simulator's placer and planner (which keep what they worked out between
passes) against fresh ones at every pass, and every pass against the live loop's `decide`, with
fresh ones and with ones kept from pass to pass as the live loop keeps them.

A differential fuzz of such worlds found three of the bugs these seeds replay (each fails before its
fix): a work ledger that kept the work of nodes gone since for the nodes of new slots (seed 291),
a cost-gate refusal kept after work started (292), and a node a gang held through its paid hour's
shutdown window, drained in a later one whose opening the simulator skipped (2305). The others are
further worlds; the fuzz's other finds have tests of their own (test_fidelity.py, test_engine.py,
tests/core)."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from corral.config import Config
from corral.core.dependency import Dependency, DependencyKind
from corral.core.planner import PlannerMemo
from corral.core.reconcile import plan_pass
from corral.core.snapshot import Decisions, Snapshot
from corral.loop import decide
from corral.placement.placer import make_placer
from corral.sim.engine import Simulation
from corral.workload.model import SimJob
from tests.sim.helpers import config, job, recorder, summary


def random_world(seed: int, vary_queue: bool = False, dependencies: bool = False) -> tuple[list[SimJob], Config]:
    """15 to 60 jobs (gangs, time limits run past and enforced with a random grace or not at all,
    cancellations, failures, priorities) on two to four instance types, elastic or fixed, with
    random boots, failures, outages and policy;
    `vary_queue`: in half the worlds, also the queue's order, its backfill depth and capacity
    mode (drawn apart, so that the rest of each world stays as it is);
    `dependencies`: about a third of the jobs depend on one or two that arrive before them (Slurm's
    --dependency, every kind, all or any of), also drawn apart, with kill_invalid_depend on or off."""
    r = random.Random(seed)
    types: list[dict[str, Any]] = [
        {"name": "small", "vcpus": 2, "ram": "4GiB", "price_per_hour": 0.10},
        {"name": "big", "vcpus": 8, "ram": "32GiB", "price_per_hour": 0.40},
    ]
    if r.random() < 0.4:
        types.append(
            {"name": "hourly", "vcpus": 4, "ram": "16GiB", "price_per_hour": 0.15, "billing_granularity": "1h"}
        )
    if r.random() < 0.3:
        types.append({"name": "huge", "vcpus": 32, "ram": "128GiB", "price_per_hour": 1.5})
    span = r.choice([600, 2000, 5000])
    jobs = []
    for i in range(1, r.randint(15, 60) + 1):
        spec = job(
            i,
            submit=r.randint(0, span),
            run=r.choice([0, 5, 30, 60, 300, 900, 2400, 7000]) if r.random() < 0.9 else r.randint(1, 4000),
            vcpus=r.choice([1, 1, 2, 3, 4, 6, 8]),
            ram_gib=r.choice([0.5, 1, 2, 4, 8, 16]),
            nodes=1 if r.random() < 0.85 else r.randint(2, 3),
        )
        if r.random() < 0.5:
            spec.time_limit = max(1.0, spec.run * r.choice([0.5, 1.0, 1.5, 3.0])) if spec.run > 0 else 60.0
        if r.random() < 0.05:
            spec.cancel_at = spec.submit + r.randint(0, 200)
        if r.random() < 0.05:
            spec.cancel_on_end = True
        if r.random() < 0.08:
            spec.exit_code = r.choice([1, 2, 75])
        if r.random() < 0.1:
            spec.priority = r.randint(1, 1000)
        jobs.append(spec)
    jobs.sort(key=lambda j: (j.submit, j.id))
    sim: dict[str, Any] = {
        # A day past the longest run, not the default week: a world can leave a job nothing will
        # ever place, and the replay that passes every tick would pass over it every tick of the
        # week (a minute of the suite for seed 2). Every seed below records the same jobs either
        # way; a day of the tail still holds failures, repairs and bills for the two to compare.
        "horizon": max(spec.run for spec in jobs) + 86400,
        "seed": r.randint(0, 99),
        "start_latency": r.choice([0, 0, 0, 5, 20, 45]),
        "boot_delay": {
            "distribution": r.choice(["fixed", "uniform", "lognormal"]),
            "seconds": r.choice([30, 60, 90]),
            "low": 20,
            "high": 200,
            "never_pairs": r.choice([0, 0, 0.05, 0.2]),
        },
    }
    if r.random() < 0.4:
        sim["failures"] = {"per_instance_day": r.choice([1, 6, 20])}
    if r.random() < 0.3:
        outage = {"instance_type": "small", "start": 0, "end": r.randint(100, 900)}
        sim["capacity"] = {"outages_per_day": r.choice([2, 8]), "outages": [outage]}
    if r.random() < 0.45:
        names = [t["name"] for t in types]
        nodes = [{"instance_type": r.choice(names[1:]), "count": r.randint(1, 4)}]
        if r.random() < 0.5:
            nodes.append({"instance_type": "small", "count": r.randint(1, 3)})
        sim["fleet"] = {"mode": "fixed", "nodes": nodes}
    policy = {
        "boot": {"max_instances": r.choice([3, 6, 12, 40]), "max_boots_per_pass": r.choice([1, 3, 16])},
        "lifecycle": {"min_instances": r.choice([0, 0, 1]), "idle_grace": r.choice([0, 30, 60, 300])},
        "placement": {
            "queue": {
                "backfill": r.choice(["easy", "easy", "strict-fifo", "none"]),
                "default_time_limit": r.choice([None, 600, 3600]),
            },
            "cost": {"max_extension": r.choice([0.0, 1.0, 1.5, 3.0])},
        },
    }
    cfg = config(instance_types=types, policy=policy, sim=sim)
    # Time limits are enforced (by default with no grace, as Slurm's OverTimeLimit=0): the jobs
    # above that run past theirs are ended by the core. The grace is drawn apart, so that the rest
    # of each world stays as it was before enforcement.
    cfg.policy.dispatch.time_limit_grace = random.Random(seed * 104729 + 1).choice([0.0, 0.0, 7.0, 120.0, None])
    other = random.Random(seed * 7919)
    if vary_queue and other.random() < 0.5:
        queue = cfg.policy.placement.queue
        queue.order = other.choice(["priority", "submit"])
        queue.max_job_test = other.choice([500, 3, 10])
        queue.capacity = other.choice(["auto", "bounded", "elastic"])
    if dependencies:
        linked = random.Random(seed * 6151 + 3)
        for i, spec in enumerate(jobs[1:], start=1):
            if linked.random() < 0.35:
                named = linked.sample(jobs[:i], min(i, linked.choice([1, 1, 2])))
                conditions = tuple((linked.choice(list(DependencyKind)), other_job.id) for other_job in named)
                spec.dependency = Dependency(conditions, any_of=linked.random() < 0.2)
        cfg.policy.dispatch.kill_invalid_depend = linked.random() < 0.7
    return jobs, cfg


Seen = list[tuple[Snapshot, float, Decisions]]


def replay(jobs: list[SimJob], cfg: Config) -> tuple[Simulation, Seen]:
    seen: Seen = []
    sim = Simulation(copy.deepcopy(jobs), cfg, on_pass=recorder(seen)).run()
    return sim, seen


@pytest.mark.parametrize(
    ("seed", "vary_queue", "dependencies"),
    [
        (2, False, False),
        (235, False, False),
        (291, False, False),
        (292, False, False),
        (2305, True, False),
        (7, False, True),
        (41, True, True),
        (56, False, True),
        # A job that `after:` names started at its placement (no start latency): the next tick decides.
        (9308, False, True),
    ],
)
def test_a_random_world_replays_the_same_three_ways(seed: int, vary_queue: bool, dependencies: bool) -> None:
    jobs, cfg = random_world(seed, vary_queue, dependencies)
    skipping = Simulation(copy.deepcopy(jobs), cfg, check_index=True).run()
    ticking = Simulation(copy.deepcopy(jobs), cfg, every_tick=True).run()
    assert skipping.records == ticking.records
    if not skipping.jobs:
        # (With work left that nothing will move, a replay ends when nothing is due, while a pass
        # every tick goes on to the horizon: their bills differ, not their decisions.)
        assert summary(skipping) == summary(ticking)

    sim, seen = replay(jobs, cfg)
    policy = sim.live_config().policy
    for snapshot, now, decisions in seen:
        fresh = plan_pass(snapshot, now, policy, make_placer(policy, explanations=False))
        assert fresh == decisions, f"kept against fresh, at {now}"

    cfg.sim.explanations = True
    sim, seen = replay(jobs, cfg)
    live = sim.live_config()
    # The live loop keeps its placer and planner between passes too (with explanations).
    kept_placer, kept_planner = make_placer(live.policy), PlannerMemo()
    for snapshot, now, decisions in seen:
        assert decide(snapshot, now, live) == decisions, f"simulator against live loop, at {now}"
        kept = decide(snapshot, now, live, kept_placer, kept_planner)
        assert kept == decisions, f"simulator against live loop keeping its placer, at {now}"
