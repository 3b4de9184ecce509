"""A type's billing minimum in the simulator (EC2: 60 s per start): each instance is billed at least
that long, and an idle node is kept while its minimum has more than shutdown_window to run, since
shutting it down would save nothing; a job that comes meanwhile runs on it without a boot."""

from __future__ import annotations

import copy

import pytest

from corral.config import Config
from corral.workload.model import SimJob
from tests.sim.helpers import config, decides_as_live, job, simulate, skips_as_it_ticks

# One type, billed per second, at $3.60 an hour: $0.001 a second.
ONE = {"name": "one", "vcpus": 2, "ram": "4GiB", "price_per_hour": 3.6}


def world(minimum: str) -> tuple[list[SimJob], Config]:
    # Job 1 runs 100 s on an instance booted at 0 (up at 60 s); job 2 comes at 900 s.
    cfg = config(
        instance_types=[{**ONE, "billing_minimum": minimum}],
        policy={"lifecycle": {"idle_grace": 60, "shutdown_window": 300}},
    )
    return [job(1, submit=0, run=100), job(2, submit=900, run=100)], cfg


def test_an_idle_node_is_kept_through_its_minimum_and_takes_the_next_job() -> None:
    jobs, cfg = world("30m")
    sim, result = simulate(copy.deepcopy(jobs), cfg)
    assert result.boots == 1  # job 2 ran on the node kept idle through its paid minimum
    [instance] = sim.cloud.instances.values()
    # Kept until the minimum's last shutdown_window (1500 s), drained, then shut down at once.
    assert instance.terminated_at is not None and 1500 <= instance.terminated_at < 1800
    assert result.cost == pytest.approx(1800 * 3.6 / 3600)  # the minimum, not the time it was up

    skips_as_it_ticks(jobs, cfg)
    decides_as_live(jobs, cfg)


@pytest.mark.parametrize("minimum", ["0s", "60s"])
def test_without_a_long_minimum_the_idle_node_goes_and_the_figures_are_the_time_up(minimum: str) -> None:
    jobs, cfg = world(minimum)
    sim, result = simulate(copy.deepcopy(jobs), cfg)
    assert result.boots == 2
    first, second = sim.cloud.instances.values()
    assert first.terminated_at is not None and second.terminated_at is not None
    up = (first.terminated_at - first.instance.created_at) + (second.terminated_at - second.instance.created_at)
    assert result.cost == pytest.approx(up * 3.6 / 3600)  # each lived more than 60 s: no rounding up
