"""sim.failures.notice_by_type: the cloud's notice ahead of a spot instance's failure drains the
node in the simulator, as corral's server drains a node whose agent hears one; no new work lands
on it, and the replay is the same skipping quiet ticks as ticking, and as the live loop decides."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from corral.config import Config
from corral.core.snapshot import Decisions, Snapshot
from corral.jobspec import JobRequest
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


ON_DEMAND = {"name": "on-demand", "vcpus": 2, "ram": "4GiB", "price_per_hour": 0.10}
BACKOFF = 300.0


def spot_world(backoff: str) -> tuple[list[SimJob], Config]:
    """A job that fills a node every 30 s for an hour; spot (cheaper) is taken back 50 times a day
    per instance, with EC2's two-minute notice; on-demand never."""
    cfg = config(
        instance_types=[SPOT, ON_DEMAND],
        sim={"failures": {"per_instance_day_by_type": {"spot": 50.0}, "notice_by_type": {"spot": "2m"}}},
        policy={"boot": {"interruption_backoff": backoff, "max_instances": 100}},
    )
    return [job(i, submit=30.0 * i, run=400, vcpus=2) for i in range(120)], cfg


def boots_after_notices(backoff: str) -> tuple[list[tuple[float, str]], list[float], list[float], Any]:
    """The run's boots (time, type), the times notices came, the passes that saw spot backed off,
    its result."""
    jobs, cfg = spot_world(backoff)
    boots: list[tuple[float, str]] = []
    noticed: dict[str, float] = {}
    backed_off: list[float] = []

    def watch(snapshot: Snapshot, now: float, decisions: Decisions) -> None:
        if snapshot.unavailable_types.get("spot", 0.0) > now:
            backed_off.append(now)
        boots.extend((now, b.instance_type) for b in decisions.boots)
        for node in snapshot.nodes:
            notice = node.attributes.get("interruption")
            if isinstance(notice, str) and node.id not in noticed:
                noticed[node.id] = float(notice.removeprefix("terminate at ")) - 120.0  # the notice's time

    _, result = simulate(copy.deepcopy(jobs), cfg, on_pass=watch)
    return boots, sorted(noticed.values()), backed_off, result


def spot_boots_within_backoff(boots: list[tuple[float, str]], notices: list[float]) -> int:
    return sum(1 for at, name in boots if name == "spot" and any(n <= at < n + BACKOFF for n in notices))


def test_a_notice_backs_the_spot_type_off_so_the_planner_boots_on_demand_meanwhile() -> None:
    boots, notices, backed_off, result = boots_after_notices("5m")
    assert result.notices >= 2 and result.interruption_backoffs == result.notices
    # While a notice's back-off runs, the pass sees the type backed off and boots none of it ...
    assert backed_off and all(any(n <= at <= n + BACKOFF for n in notices) for at in backed_off)
    assert spot_boots_within_backoff(boots, notices) == 0
    # ... but on-demand, dearer, for the jobs that keep coming; and spot again once it ends.
    assert any(name == "on-demand" and any(n <= at < n + BACKOFF for n in notices) for at, name in boots)
    assert any(name == "spot" and at >= notices[0] + BACKOFF for at, name in boots)

    # Without the back-off (Karpenter without its unavailable-offerings cache), spot is booted
    # again right after a notice: the type taken back is the cheapest that fits.
    again, notices_then, _, unbacked = boots_after_notices("0s")
    assert unbacked.interruption_backoffs == 0
    assert spot_boots_within_backoff(again, notices_then) > 0


def test_interruption_back_offs_replay_the_same_three_ways() -> None:
    jobs, cfg = spot_world("5m")
    skips_as_it_ticks(jobs[:40], cfg)
    decides_as_live(jobs[:40], cfg)


def test_a_spot_instance_taken_back_while_it_boots_is_gone_not_a_boot_that_never_paired() -> None:
    """As EC2 terminates a spot instance it takes back, booting or not, and the live loop finds it
    gone from the listing (no boot failure, no type.boot_failed back-off), the simulator's cloud
    takes it back: gone at once, billed only until then. A type without a notice is not spot: its
    instance that breaks before pairing never pairs, and its type is backed off as a failed boot."""
    spot = {**SPOT, "billing_minimum": "0s"}
    failures: dict[str, object] = {"per_instance_day_by_type": {"spot": 5000.0}}  # ~17 s lifetimes
    jobs = [job(i, submit=5.0 * i, run=30, vcpus=1) for i in range(10)]
    taken_back = config(
        instance_types=[spot, ON_DEMAND],
        sim={"failures": {**failures, "notice_by_type": {"spot": "0s"}}},
        policy={"lifecycle": {"boot_grace": 300}},
    )
    sim, result = simulate(copy.deepcopy(jobs), taken_back)
    assert result.reclaims > 0 and result.boot_failures == 0
    for instance in sim.cloud.instances.values():
        if instance.itype.name == "spot":
            assert instance.terminated_at is not None and instance.terminated_at <= instance.fails_at
    skips_as_it_ticks(jobs, taken_back)

    broken = config(
        instance_types=[spot, ON_DEMAND], sim={"failures": failures}, policy={"lifecycle": {"boot_grace": 300}}
    )
    _, result = simulate(copy.deepcopy(jobs), broken)
    assert result.reclaims == 0 and result.boot_failures > 0


def test_work_on_a_spot_instance_taken_back_counts_in_its_types_utilisation() -> None:
    """The report's utilisation by instance type: a job running on a spot instance the cloud takes
    back held its vcpus until then, on that type. Before, the instance was gone from the world when
    its job's attempt was ended (at the next pass), and that work was filed under no type: on the
    example's spot config a quarter of the busy vcpu-hours were missing from the per-type figures,
    which no longer added up to the total."""
    cfg = config(
        instance_types=[SPOT],
        sim={"failures": {"per_instance_day_by_type": {"spot": 200.0}, "notice_by_type": {"spot": "0s"}}},
    )
    sim, result = simulate([job(1, submit=0, run=2000, vcpus=2)], cfg)
    assert result.reclaims > 0 and result.work_lost_vcpu_hours > 0
    # One type: its utilisation is the whole run's, work lost to the reclaims included.
    assert set(result.utilisation_by_type) == {"spot"}
    assert result.utilisation_by_type["spot"] == pytest.approx(result.utilisation)
    assert set(sim.busy_vcpu_seconds_until(sim.end_time)) == {"spot"}


def test_a_job_that_forbids_spot_is_priced_on_demand_in_the_cost_bounds() -> None:
    """docs/simulator.md has jobs that must not be interrupted say forbidden_traits = {capacity =
    "spot"}. Before, the cost bounds priced every job on the cheapest type that held it, spot or
    not: such a job's bound was the spot price, and a policy that could only run it on demand read
    about 3.4 times the packing bound. The bounds now take the types the placement filters let it use."""
    spot = {**SPOT, "attributes": {"capacity": "spot"}, "billing_minimum": 0}
    on_demand = {**ON_DEMAND, "billing_minimum": 0}
    cfg = config(instance_types=[spot, on_demand])
    request = {"command": ["steady"], "vcpus": 2, "ram": "1GiB", "forbidden_traits": {"capacity": "spot"}}
    steady = job(1, run=3600, vcpus=2, request=JobRequest.model_validate(request))
    _, result = simulate([steady], cfg)
    assert result.per_job_bound == pytest.approx(0.10) and result.packing_bound == pytest.approx(0.10)
    assert result.cost_over_packing_bound == pytest.approx(result.cost / 0.10)
    assert result.cost_over_packing_bound < 1.1  # an hour on demand, plus its boot and idle grace
    # A job that may use spot is still priced on it.
    _, anywhere = simulate([job(1, run=3600, vcpus=2)], cfg)
    assert anywhere.packing_bound == pytest.approx(0.03)
