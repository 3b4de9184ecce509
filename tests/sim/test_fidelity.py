"""The simulator is faithful to the live loop: it asks the live loop's own decision function, and
skipping quiet ticks changes nothing."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from corral.config import Config
from corral.core.reconcile import plan_pass
from corral.core.snapshot import Decisions, Snapshot
from corral.loop import decide
from corral.placement.placer import make_placer
from corral.sim.engine import Simulation
from corral.sim.metrics import measure
from corral.workload.model import SimJob
from tests.sim.helpers import BIG, SMALL, config, job, recorder, summary

HOURLY = {"name": "hourly", "vcpus": 4, "ram": "16GiB", "price_per_hour": 0.15, "billing_granularity": "1h"}


def busy_world(jobs_count: int = 90, /, **sim: Any) -> tuple[list[SimJob], Config]:
    """Failures, outages, slow and lost boots, hourly billing, gangs, cancellations, a tight
    instance budget: most of what a pass can decide, in a few simulated hours."""
    jobs = [
        job(i, submit=(i * 37) % 5000, run=60 + (i * 311) % 2400, vcpus=1 + i % 4, nodes=1 + (i % 9 == 0))
        for i in range(1, jobs_count)
    ]
    jobs[3].cancel_at = jobs[3].submit + 30
    jobs[5].cancel_on_end = True
    jobs[7].exit_code = 2
    jobs.sort(key=lambda j: (j.submit, j.id))
    cfg = config(
        instance_types=[SMALL, BIG, HOURLY],
        policy={"boot": {"max_instances": 12, "max_boots_per_pass": 3}, "lifecycle": {"min_instances": 1}},
        sim={
            "seed": 5,
            "boot_delay": {"distribution": "uniform", "low": 30, "high": 200, "never_pairs": 0.05},
            "failures": {"per_instance_day": 6, "schedule": [{"at": 2000, "count": 2}]},
            "capacity": {"outages_per_day": 8, "outages": [{"instance_type": "small", "start": 0, "end": 900}]},
            **sim,
        },
    )
    return jobs, cfg


def test_skipping_quiet_ticks_gives_exactly_what_a_pass_every_tick_gives() -> None:
    jobs, cfg = busy_world(60)
    skipping = Simulation(copy.deepcopy(jobs), cfg, check_index=True).run()
    ticking = Simulation(copy.deepcopy(jobs), cfg, every_tick=True, check_index=True).run()
    assert ticking.counters.passes > 5 * skipping.counters.passes  # the quiet ticks really were skipped
    assert summary(skipping) == summary(ticking)
    assert skipping.records == ticking.records
    assert skipping.counters.node_failures > 0 and skipping.counters.capacity_errors > 0


def test_a_fixed_fleet_too() -> None:
    # Every tick with a queue runs the placer: fewer jobs keep this quick.
    jobs, cfg = busy_world(40, fleet={"mode": "fixed", "nodes": [{"instance_type": "big", "count": 4}]})
    skipping = Simulation(copy.deepcopy(jobs), cfg, check_index=True).run()
    ticking = Simulation(copy.deepcopy(jobs), cfg, every_tick=True, check_index=True).run()
    assert summary(skipping) == summary(ticking)
    assert skipping.records == ticking.records


@pytest.mark.parametrize("billing", ["1s", "1h"])
def test_gangs_holding_their_first_nodes_up_too(billing: str) -> None:
    # Gangs whose instances pair far apart (or never) hold the first ones up, idle, for at most the
    # boot grace; when that runs out with no event near, the pass then (a drain, another boot)
    # must not be skipped. With hourly billing a node held through its paid hour's shutdown window
    # is drained in a later one, whose opening must not be skipped either.
    jobs = [job(i, submit=(i * 97) % 2000, run=60 + (i * 211) % 900, vcpus=2, nodes=2 + i % 3) for i in range(1, 25)]
    jobs.sort(key=lambda j: (j.submit, j.id))
    cfg = config(
        instance_types=[{**SMALL, "billing_granularity": billing}, {**BIG, "billing_granularity": billing}],
        policy={
            "boot": {"max_instances": 20, "max_boots_per_pass": 2},
            "lifecycle": {"idle_grace": 30, "boot_grace": 150, "shutdown_window": 120},
        },
        sim={"seed": 2, "boot_delay": {"distribution": "uniform", "low": 20, "high": 300, "never_pairs": 0.1}},
    )
    skipping = Simulation(copy.deepcopy(jobs), cfg, check_index=True).run()
    ticking = Simulation(copy.deepcopy(jobs), cfg, every_tick=True).run()
    assert summary(skipping) == summary(ticking)
    assert skipping.records == ticking.records
    assert measure(skipping).completed == len(jobs)  # every gang ran in the end


def test_a_type_back_from_capacity_back_off_after_the_queue_emptied_and_filled_again() -> None:
    # Job 1 meets an outage and waits out the back-off (to 300); it is cancelled at 50, and job 2
    # comes at 100, for the same type: the pass when the type comes back must run, although the
    # queue was empty for a while before (a timer judged on the queue then would be dropped).
    jobs = [job(1, run=100), job(2, submit=100, run=100)]
    jobs[0].cancel_at = 50
    cfg = config(
        instance_types=[SMALL], sim={"capacity": {"outages": [{"instance_type": "small", "start": 0, "end": 60}]}}
    )
    skipping = Simulation(copy.deepcopy(jobs), cfg, check_index=True).run()
    ticking = Simulation(copy.deepcopy(jobs), cfg, every_tick=True).run()
    assert summary(skipping) == summary(ticking)
    assert skipping.records == ticking.records
    assert skipping.records[2].wait == 300 + 60 - 100  # booted when the back-off ends, paired 60 s later


def backfilling_world(**sim: Any) -> tuple[list[SimJob], Config]:
    """A fixed fleet with EASY backfilling, blocked gangs, and jobs with time limits, one in five
    running past its limit."""
    jobs = [
        job(i, submit=(i * 37) % 3000, run=60 + (i * 311) % 2400, vcpus=1 + i % 4, nodes=1 + (i % 7 == 0))
        for i in range(1, 100)
    ]
    for spec in jobs:
        spec.time_limit = spec.run * (0.5 if spec.id % 5 == 0 else 1.5)
    jobs.sort(key=lambda j: (j.submit, j.id))
    cfg = config(
        instance_types=[SMALL, BIG],
        sim={"fleet": {"mode": "fixed", "nodes": [{"instance_type": "big", "count": 3}]}, **sim},
    )
    return jobs, cfg


def test_a_fixed_fleet_backfilling_jobs_with_time_limits_too() -> None:
    # EASY backfill reserves for blocked gangs and fills in around them. After a placement a
    # reservation may move; and one job in five runs past its time limit (half its run): backfill
    # takes such work to end at the pass's time, so from the reservation's start on (here often
    # between two ticks) the clock alone moves it. The simulator must not skip those ticks.
    jobs, cfg = backfilling_world()
    skipping = Simulation(copy.deepcopy(jobs), cfg, check_index=True).run()
    ticking = Simulation(copy.deepcopy(jobs), cfg, every_tick=True).run()
    assert ticking.counters.passes > 2 * skipping.counters.passes
    assert summary(skipping) == summary(ticking)
    assert skipping.records == ticking.records
    starts = [(r.submit, r.submit + (r.wait or 0.0)) for r in skipping.records.values()]
    backfilled = [later for later in starts for earlier in starts if later[0] > earlier[0] and later[1] < earlier[1]]
    assert backfilled  # some jobs started before jobs submitted earlier


def test_the_simulator_decides_exactly_what_the_live_loop_decides() -> None:
    """Every pass the simulator makes, replayed through the live loop's `decide` on the same
    snapshot and time, gives the same decisions (explanations included, as the live loop makes them)."""
    for fleet in ({}, {"fleet": {"mode": "fixed", "nodes": [{"instance_type": "big", "count": 3}]}}):
        jobs, cfg = busy_world(**fleet, explanations=True)
        seen: list[tuple[Snapshot, float, Decisions]] = []
        sim = Simulation(jobs, cfg, on_pass=recorder(seen))
        sim.run()
        live_config = sim.live_config()
        assert len(seen) > 100
        assert any(d.node_decisions for _, _, d in seen) and any(d.job_outcomes for _, _, d in seen)
        for snapshot, now, decisions in seen:
            assert decide(snapshot, now, live_config) == decisions, f"at {now}"


def test_a_replay_without_explanations_decides_what_a_fresh_placer_decides() -> None:
    """Without explanations the simulator's placer goes on from where its last pass left the queue
    (QueueWalk), besides what it keeps of the nodes and their work. With agents that start work a
    while after it is placed, that work's expected end moves when it starts, and so may a
    reservation: every pass must still decide what a placer that keeps nothing between passes
    decides, wait reasons included (in the busy worlds too: failures, outages, gangs, a budget)."""
    fixed = {"fleet": {"mode": "fixed", "nodes": [{"instance_type": "big", "count": 3}]}}
    worlds = [
        backfilling_world(start_latency=45, explanations=False),
        busy_world(start_latency=20, explanations=False),
        busy_world(start_latency=20, explanations=False, **fixed),
    ]
    for number, (jobs, cfg) in enumerate(worlds):
        seen: list[tuple[Snapshot, float, Decisions]] = []
        sim = Simulation(jobs, cfg, on_pass=recorder(seen))
        sim.run()
        policy = sim.live_config().policy
        assert any(d.placements for _, _, d in seen)
        if number == 0:
            assert any("reserved" in str(d.annotations) for _, _, d in seen)
        for snapshot, now, decisions in seen:
            fresh = plan_pass(snapshot, now, policy, make_placer(policy, explanations=False))
            assert fresh == decisions, f"world {number}, at {now}"


def core(decisions: Decisions) -> tuple[object, ...]:
    """What a pass decides, without why (explanations and wait reasons)."""
    d = decisions
    return d.placements, d.boots, d.node_decisions, d.node_marks, d.job_outcomes


def keep_core(seen: list[tuple[float, tuple[object, ...]]]) -> Callable[[Snapshot, float, Decisions], None]:
    """An `on_pass` hook keeping each pass's time and what it decided (`core`)."""
    return lambda _, now, decisions: seen.append((now, core(decisions)))


def test_explanations_change_no_decision() -> None:
    """A replay asks for no explanations (`sim.explanations`); every pass decides the same without."""
    for fleet in ({}, {"fleet": {"mode": "fixed", "nodes": [{"instance_type": "big", "count": 3}]}}):
        runs = []
        for explanations in (True, False):
            jobs, cfg = busy_world(**fleet, explanations=explanations)
            seen: list[tuple[float, tuple[object, ...]]] = []
            sim = Simulation(jobs, cfg, on_pass=keep_core(seen))
            sim.run()
            runs.append((seen, summary(sim), sim.records))
        (explained, *results), (unexplained, *others) = runs
        assert len(explained) > 100 and explained == unexplained
        assert results == others


def test_pings_need_not_be_written() -> None:
    """The core reads a node the simulator hears from as pinging now (the kept index's promise);
    writing every agent's ping time each pass, as a snapshot for the live loop shows it, changes
    nothing."""
    for fleet in ({}, {"fleet": {"mode": "fixed", "nodes": [{"instance_type": "big", "count": 3}]}}):
        jobs, cfg = busy_world(**fleet)
        unwritten = Simulation(copy.deepcopy(jobs), cfg).run()
        written = Simulation(copy.deepcopy(jobs), cfg, on_pass=lambda *_: None).run()
        assert unwritten.counters.node_failures > 0
        assert summary(unwritten) == summary(written)
        assert unwritten.records == written.records


def test_a_run_tells_the_time_in_the_passes_and_in_the_placer_within_them() -> None:
    """What the benchmark splits a pass's wall clock by."""
    jobs, cfg = busy_world()
    sim = Simulation(jobs, cfg).run()
    assert 0.0 < sim.times.placer < sim.times.passes
