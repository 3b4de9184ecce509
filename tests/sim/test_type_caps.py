"""An instance type's own max_instances in the simulator: a capacity planner's "what if we had half
the GPU instances" on an elastic fleet. The simulator runs the live loop's boot planner, so the cap
binds as it would live: never more of the type at once than its cap, the jobs it holds back wait
(with its reason) and start later; the replay skips quiet ticks as it ticks, and decides as the live
loop's `decide`."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from corral.core.model import NodeState
from corral.core.snapshot import Decisions, Snapshot
from corral.sim.engine import Simulation
from corral.sim.run import WorkloadOptions, load_runs, read_for
from corral.sim.run import simulate as simulate_workload
from corral.workload.model import SimJob
from tests.sim.helpers import config, decides_as_live, job, simulate, skips_as_it_ticks
from tests.sim.test_random_worlds import random_world

GPU = {"name": "g5.xlarge", "vcpus": 4, "ram": "16GiB", "gpus": 1, "price_per_hour": 1.0, "billing_minimum": 0}
CPU = {"name": "c5.xlarge", "vcpus": 4, "ram": "8GiB", "price_per_hour": 0.2, "billing_minimum": 0}


def gpu_work() -> list[SimJob]:
    """Six one-GPU jobs of ten minutes at once, and CPU work beside them."""
    gpu_jobs = [job(i, submit=0, run=600, vcpus=2, gpus=1) for i in range(1, 7)]
    return [*gpu_jobs, *(job(i, submit=30 * i, run=300, vcpus=2) for i in range(7, 11))]


def test_half_the_gpu_instances_never_more_at_once_and_the_gpu_jobs_wait_longer() -> None:
    uncapped = config(instance_types=[GPU, CPU], policy={"lifecycle": {"idle_grace": 60}})
    half = config(instance_types=[{**GPU, "max_instances": 3}, CPU], policy={"lifecycle": {"idle_grace": 60}})
    most_at_once: list[int] = []
    reasons: set[str] = set()

    def watch(snapshot: Snapshot, now: float, decisions: Decisions) -> None:
        live = [n for n in snapshot.nodes if n.instance_type == "g5.xlarge" and n.state is not NodeState.GONE]
        booted = [b for b in decisions.boots if b.instance_type == "g5.xlarge"]
        most_at_once.append(len(live) + len(booted))
        reasons.update(a.wait_reason for a in decisions.annotations)

    _, free = simulate(gpu_work(), uncapped)
    _, capped = simulate(gpu_work(), half, on_pass=watch)
    assert max(most_at_once) == 3
    assert "waiting for resources: g5.xlarge is at its max_instances (3)" in reasons
    assert free.completed == capped.completed == 10
    # The GPU jobs ran in two waves of three, not one of six: the second ends ten minutes later, and
    # its three jobs' ten minutes' more wait each shows in the mean over the ten jobs.
    assert capped.end_time - free.end_time == 600
    assert capped.wait_mean > free.wait_mean + 3 * 600 / 10


def test_a_capped_world_replays_the_same_three_ways() -> None:
    cfg = config(instance_types=[{**GPU, "max_instances": 2}, CPU], policy={"lifecycle": {"idle_grace": 60}})
    skips_as_it_ticks(gpu_work(), cfg)
    decides_as_live(gpu_work(), cfg)


@pytest.mark.parametrize("seed", [3, 8, 21])  # worlds in which a cap binds; quick
def test_random_worlds_with_capped_types_replay_the_same_three_ways(seed: int) -> None:
    """Random elastic worlds (gangs, failures, outages, back-offs) with caps on some of their
    types: the kept plan, the placer's bounded jobs and the quiet ticks skipped decide as afresh."""
    jobs, cfg = random_world(seed)
    r = random.Random(seed * 31 + 7)
    for itype in cfg.instance_types:
        itype.max_instances = r.choice([None, 1, 2, 3])
    if all(itype.max_instances is None for itype in cfg.instance_types):
        cfg.instance_types[0].max_instances = 1
    cfg.sim.horizon = 20000.0
    capped: list[str] = []

    def watch(snapshot: Snapshot, now: float, decisions: Decisions) -> None:
        capped.extend(a.wait_reason for a in decisions.annotations if "at its max_instances" in a.wait_reason)

    skips_as_it_ticks(jobs, cfg, watch)
    decides_as_live(jobs, cfg)
    if cfg.sim.fleet.mode == "elastic":
        assert capped, "a cap binds in this world"


def test_the_shipped_half_the_gpus_example_caps_the_gpu_type_and_its_jobs_wait_longer() -> None:
    """examples/simulate/gpu-mix/half-gpus.toml: the default config with the g5.xlarge capped at 16,
    half the uncapped run's peak. Every job still runs; the fleet never holds more than 16 of the
    type; the bursts' GPU jobs wait longer (p95 several times the uncapped run's), for a smaller bill."""
    example = Path(__file__).resolve().parents[2] / "examples" / "simulate" / "gpu-mix"
    runs = load_runs([example / "default.toml", example / "half-gpus.toml"])
    workload = example / "workload.jsonl"
    jobs = read_for(workload, runs[1].config, WorkloadOptions()).jobs
    most: list[int] = []

    def watch(snapshot: Snapshot, now: float, decisions: Decisions) -> None:
        live = sum(1 for n in snapshot.nodes if n.instance_type == "g5.xlarge" and n.state is not NodeState.GONE)
        most.append(live + sum(1 for b in decisions.boots if b.instance_type == "g5.xlarge"))

    Simulation(jobs, runs[1].config, on_pass=watch).run()
    assert max(most) == 16
    full, half = simulate_workload(workload, runs).results
    assert full.completed == half.completed == 720
    assert half.wait_p95 > 3 * full.wait_p95
    assert half.cost < full.cost
