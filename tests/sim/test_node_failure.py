"""The job action on node failure (seed 002 §5.4.6) in the simulator: the core decides, the
simulator carries out a cancel and a hold (nobody releases a job in a simulation)."""

from __future__ import annotations

import copy

from corral.core.model import JobState
from corral.core.snapshot import Decisions, Snapshot
from corral.jobspec import JobRequest
from corral.loop import decide
from corral.sim.engine import Simulation
from corral.workload.model import SimJob
from tests.sim.helpers import config, job, recorder, simulate, summary
from tests.sim.test_fidelity import busy_world

FAIL_AT_500 = {"failures": {"schedule": [{"at": 500}]}}
SYSTEM_HOLD = "held after a node failure (on_node_failure=hold: policy.retry.on_node_failure) until released"


def asks(action: str) -> JobRequest:
    return JobRequest(command=["x"], on_node_failure=action)


def test_cancel_ends_the_job_cancelled_and_boots_nothing_more() -> None:
    cfg = config(sim=FAIL_AT_500, policy={"retry": {"on_node_failure": "cancel"}})
    sim, r = simulate([job(1, run=1000)], cfg)
    assert (r.node_failures, r.requeues, r.boots, r.cancelled, r.completed, r.unfinished) == (1, 0, 1, 1, 0, 0)
    assert sim.records[1].state is JobState.CANCELLED and sim.records[1].wait is None
    assert not r.horizon_reached


def test_a_held_job_never_runs_again_and_counts_as_unfinished_held() -> None:
    # Job 1 is held when its node fails (down at 561); job 2, arriving later, still runs; no
    # instance is booted for the held job, and the run ends without reaching its horizon.
    cfg = config(sim=FAIL_AT_500, policy={"retry": {"on_node_failure": "hold"}})
    sim, r = simulate([job(1, run=1000), job(2, submit=2000, run=100)], cfg)
    assert (r.node_failures, r.requeues, r.boots, r.completed, r.unfinished) == (1, 1, 2, 1, 1)
    assert r.unfinished_reasons == {SYSTEM_HOLD: 1}
    assert not r.horizon_reached
    held = sim.jobs[1]
    assert held.state is JobState.QUEUED and held.held and held.temp_failures == 1 and held.retry_at is None


def test_the_jobs_own_setting_beats_the_systems() -> None:
    # Two 2-vcpu jobs fill two small nodes, which both fail: the one asking for hold is held, the
    # other is requeued (the system's default) and completes.
    cfg = config(sim={"failures": {"schedule": [{"at": 500, "count": 2}]}})
    jobs = [job(1, run=1000, vcpus=2, request=asks("hold")), job(2, run=1000, vcpus=2)]
    sim, r = simulate(jobs, cfg)
    assert (r.node_failures, r.completed, r.unfinished) == (2, 1, 1)
    assert sim.records[2].state is JobState.COMPLETE and sim.jobs[1].held
    assert r.unfinished_reasons == {
        "held after a node failure (on_node_failure=hold: the job's setting) until released": 1
    }


def test_a_fixed_fleet_with_only_held_jobs_left_ends_the_run() -> None:
    # A fixed fleet ends when no job is left to run: a held job would otherwise keep its failures
    # and repairs going until the horizon.
    cfg = config(
        sim={
            "fleet": {"mode": "fixed", "nodes": [{"instance_type": "small", "count": 1}], "repair_time": 100},
            "failures": {"schedule": [{"at": 50}]},
        },
        policy={"retry": {"on_node_failure": "hold"}},
    )
    sim, r = simulate([job(1, run=100, vcpus=2)], cfg)
    assert (r.node_failures, r.unfinished, r.completed) == (1, 1, 0)
    assert r.unfinished_reasons == {SYSTEM_HOLD: 1} and not r.horizon_reached
    assert sim.end_time < 1000


def with_policies(jobs: list[SimJob]) -> list[SimJob]:
    """The busy world's jobs, every third asking to be held and every fifth to be cancelled."""
    for spec in jobs:
        if spec.id % 3 == 0:
            spec.request = asks("hold")
        elif spec.id % 5 == 0:
            spec.request = asks("cancel")
    return jobs


def test_skipping_quiet_ticks_and_the_live_loop_agree_with_holds_and_cancels() -> None:
    jobs, cfg = busy_world(60)
    jobs = with_policies(jobs)
    skipping = Simulation(copy.deepcopy(jobs), cfg, check_index=True).run()
    ticking = Simulation(copy.deepcopy(jobs), cfg, every_tick=True, check_index=True).run()
    assert summary(skipping) == summary(ticking) and skipping.records == ticking.records
    held = [j for j in skipping.jobs.values() if j.held]
    cancelled = [r for r in skipping.records.values() if r.state is JobState.CANCELLED]
    assert held and len(cancelled) > 1  # the policies acted (one cancellation is the user's)

    # Every pass replayed through the live loop's `decide` (which explains, as the live loop does).
    explaining = busy_world(60, explanations=True)[1]
    seen: list[tuple[Snapshot, float, Decisions]] = []
    replayed = Simulation(copy.deepcopy(jobs), explaining, on_pass=recorder(seen)).run()
    live_config = replayed.live_config()
    for snapshot, now, decisions in seen:
        assert decide(snapshot, now, live_config) == decisions, f"at {now}"
