"""sim.failures.notice_by_type: the cloud's notice ahead of a spot instance's failure drains the
node in the simulator, as corral's server drains a node whose agent hears one; no new work lands
on it, and the replay is the same skipping quiet ticks as ticking, and as the live loop decides."""

from __future__ import annotations

import copy

import pytest

from corral.config import Config
from corral.core.snapshot import Decisions, Snapshot
from corral.workload.model import SimJob
from tests.sim.helpers import config, decides_as_live, job, simulate, skips_as_it_ticks

SPOT = {"name": "spot", "vcpus": 2, "ram": "4GiB", "price_per_hour": 0.03}


def world(notice: str | None) -> tuple[list[SimJob], Config]:
    # The first instance fails at 246 s (the seed's draw at 200 failures a day); job 2 comes at 300 s.
    failures: dict[str, object] = {"per_instance_day_by_type": {"spot": 200.0}}
    if notice is not None:
        failures["notice_by_type"] = {"spot": notice}
    cfg = config(instance_types=[SPOT], sim={"failures": failures}, policy={"lifecycle": {"idle_grace": 600}})
    return [job(1, submit=0, run=200, vcpus=1), job(2, submit=300, run=100, vcpus=1)], cfg


@pytest.mark.parametrize("notice", [None, "2m"])
def test_no_work_lands_on_a_node_the_cloud_gave_notice_for(notice: str | None) -> None:
    jobs, cfg = world(notice)
    placed: list[tuple[int, tuple[str, ...]]] = []

    def watch(snapshot: Snapshot, now: float, decisions: Decisions) -> None:
        placed.extend((p.job_id, p.node_ids) for p in decisions.placements)

    _, result = simulate(copy.deepcopy(jobs), cfg, on_pass=watch)
    second = [nodes for job_id, nodes in placed if job_id == 2]
    assert result.node_failures == 1
    if notice is None:
        assert second[0] == ("n-000001",) and result.requeues == 2  # on the failed node, then again
        assert result.notices == 0
    else:
        assert ("n-000001",) not in second and result.requeues == 1  # only job 1, which ran there
        assert result.notices >= 1


def test_notices_replay_the_same_three_ways() -> None:
    jobs, cfg = world("2m")
    skips_as_it_ticks(jobs, cfg)
    seen = decides_as_live(jobs, cfg)
    assert any(n.attributes.get("interruption") for snapshot, _, _ in seen for n in snapshot.nodes)
