"""Time limits in the simulator: the core's pass ends a job that runs past its limit (plus
`policy.dispatch.time_limit_grace`) at the same virtual time as a live loop passing every tick would,
and the job's later recorded end is ignored."""

from __future__ import annotations

from typing import Any

import pytest

from corral.core.model import JobState
from corral.core.snapshot import Decisions, Snapshot
from tests.sim.helpers import config, job, simulate


def timed_out_at(
    grace: float | str = 0.0, tick: float = 1.0, every_tick: bool = False
) -> tuple[dict[int, float], dict[str, Any]]:
    """Job 1 runs 1000 s with a limit of 300 s; job 2 runs 100 s within its limit of 300 s. Both
    start at 60 s, when the instance booted for them pairs. The times at which passes timed jobs
    out, and the run's results."""
    seen: dict[int, float] = {}

    def record(_snapshot: Snapshot, now: float, decisions: Decisions) -> None:
        for outcome in decisions.job_outcomes:
            if outcome.timeout:
                seen[outcome.job_id] = now

    jobs = [job(1, run=1000, time_limit=300.0), job(2, run=100, time_limit=300.0)]
    cfg = config(policy={"dispatch": {"time_limit_grace": grace}}, sim={"tick": tick})
    sim, result = simulate(jobs, cfg, on_pass=record, every_tick=every_tick)
    assert sim.records[2].state is JobState.COMPLETE
    return seen, result.summary()


@pytest.mark.parametrize("every_tick", [False, True])
def test_a_run_past_its_limit_ends_at_the_first_tick_at_or_after_it_its_recorded_end_ignored(every_tick: bool) -> None:
    seen, results = timed_out_at(every_tick=every_tick)
    # Nothing else happens between job 2's end (160 s) and job 1's limit (60 + 300 s): the simulator
    # wakes for the limit all the same.
    assert seen == {1: 360.0}
    assert (results["failed"], results["jobs_timed_out"], results["completed"]) == (1, 1, 1)
    # Its node is freed at 360 s, not at its recorded end (1060 s): the bill stops at the drain.
    assert results["makespan_s"] == 360.0 and results["instance_hours"] * 3600 < 500
    # Both waited for the boot (60 s); the timed-out one ran 300 s, which its slowdown and the
    # cost bounds count.
    assert results["wait_mean_s"] == 60.0
    assert results["bounded_slowdown_mean"] == pytest.approx((360 / 300 + 160 / 100) / 2)


def test_the_grace_and_the_grid_of_ticks() -> None:
    assert timed_out_at(grace="30s")[0] == {1: 390.0}
    # Passes every 7 s: the pair at 60 s is seen at 63 s, the limit passes at 363 s, the pass is at 364 s.
    assert timed_out_at(tick=7.0)[0] == {1: 364.0}
    assert timed_out_at(tick=7.0, every_tick=True)[0] == {1: 364.0}


def test_unlimited_grace_replays_every_run_as_recorded() -> None:
    seen, results = timed_out_at(grace="unlimited")
    assert seen == {}
    assert (results["completed"], results["jobs_timed_out"]) == (2, 0)
