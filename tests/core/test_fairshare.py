"""Fair share (corral.core.fairshare; queue.order = "fairshare", Slurm's fair-share factor): usage
decays with its half-life however often it is brought up to date, shares scale it, and the pure
passes (corral's and the one in front of Slurm) give free room to the user who used least."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from corral.core import batch, fairshare
from corral.core.accounting import AttemptSpan
from corral.core.model import GiB, InstanceType, Job, Node, NodeState, Resources
from corral.core.reconcile import plan_pass
from corral.core.settings import PolicySettings
from corral.core.snapshot import Snapshot
from corral.placement.settings import FairShareSettings

HOUR = 3600.0
SETTINGS = FairShareSettings(half_life=HOUR, calc_period=60.0)


def span(user: str, start: float, end: float | None, vcpus: float = 1.0, nodes: int = 1) -> AttemptSpan:
    return AttemptSpan(1, user, (), (), Resources(vcpus, GiB), start, end, nodes)


def test_usage_is_decayed_vcpu_seconds_however_often_it_is_brought_up_to_date() -> None:
    # One vCPU for an hour that ended an hour ago: the integral of 2^-(age/h) over ages h..2h.
    runs = [span("ann", 0.0, HOUR)]
    once = fairshare.advance(fairshare.UsageLedger(0.0), runs, 2 * HOUR, SETTINGS)
    expected = HOUR / math.log(2.0) * (0.5 - 0.25)
    assert once.usage["ann"] == pytest.approx(expected)
    assert once.as_of == 2 * HOUR

    # Brought up to date every 10 minutes (the run still going at the first stops, then kept
    # among the ended runs while some of it is not counted yet), the same.
    ledger = fairshare.UsageLedger(0.0)
    ended = [span("ann", 0.0, HOUR)]
    for step in range(1, 13):
        until = step * 600.0
        running = [span("ann", 0.0, None)] if until < HOUR else []
        ledger = fairshare.advance(ledger, [*running, *(ended if until >= HOUR else [])], until, SETTINGS)
        if until >= HOUR:
            ended = fairshare.still_counting(ended, until)
    assert ledger.usage["ann"] == pytest.approx(expected)
    assert ended == []


def test_usage_weighs_resources_and_nodes() -> None:
    gpus = FairShareSettings(weights={"cpu": 1.0, "gpu": 10.0, "ram": 0.5})
    request = Resources(4, 8 * GiB, 0, 2)
    assert fairshare.billing_rate(request, 3, gpus) == pytest.approx(3 * (4 + 20 + 4))
    assert fairshare.billing_rate(request, 3, SETTINGS) == 12  # vCPUs alone, by default


def test_a_user_with_more_shares_goes_first_at_the_same_usage() -> None:
    jobs = [Job(1, ["x"], user="ann", submitted_at=1.0), Job(2, ["x"], user="bob", submitted_at=2.0)]
    usage = {"ann": 200.0, "bob": 300.0}
    assert [j.id for j in fairshare.ordered(jobs, usage, SETTINGS)] == [1, 2]
    bob_doubled = FairShareSettings(shares={"bob": 2.0})
    assert [j.id for j in fairshare.ordered(jobs, usage, bob_doubled)] == [2, 1]
    # Priority comes first; a user with no usage yet before both.
    urgent = Job(3, ["x"], user="ann", priority=5, submitted_at=3.0)
    newcomer = Job(4, ["x"], user="cyd", submitted_at=4.0)
    assert [j.id for j in fairshare.ordered([*jobs, urgent, newcomer], usage, SETTINGS)] == [3, 4, 1, 2]


def test_standing_is_slurms_classic_factor() -> None:
    rows = fairshare.standing(["ann", "bob", "cyd"], {"ann": 100.0, "bob": 300.0}, SETTINGS)
    assert [(r.user, round(r.factor, 4)) for r in rows] == [
        ("cyd", 1.0),  # unused
        ("ann", round(2 ** -(0.25 / (1 / 3)), 4)),
        ("bob", round(2 ** -(0.75 / (1 / 3)), 4)),
    ]
    assert sum(r.norm_usage for r in rows) == pytest.approx(1.0)


def test_bad_settings_name_the_value() -> None:
    with pytest.raises(ValidationError, match="shares of 'ann' must be more than 0"):
        FairShareSettings(shares={"ann": 0})
    with pytest.raises(ValidationError, match="unknown weight 'disk'"):
        FairShareSettings(weights={"disk": 1.0})
    with pytest.raises(ValidationError, match="at least one weight"):
        FairShareSettings(weights={"cpu": 0.0})


SMALL = InstanceType("small", 2, 4 * GiB, 0.10)
NOW = 10_000.0


def fair_policy() -> PolicySettings:
    policy = PolicySettings()
    policy.placement.queue.order = "fairshare"
    policy.boot.max_instances = 1  # the one node: no boot for the job left waiting
    return policy


def queue_of_two() -> list[Job]:
    # ann submitted first, and has used the cluster; bob has not.
    return [
        Job(1, ["x"], Resources(2, GiB), user="ann", submitted_at=NOW - 100),
        Job(2, ["x"], Resources(2, GiB), user="bob", submitted_at=NOW - 50),
    ]


def test_free_room_goes_to_the_user_who_used_least() -> None:
    node = Node("n1", SMALL.name, SMALL.capacity, SMALL.price_per_hour, NodeState.IDLE, 0, 1, NOW, NOW)
    snapshot = Snapshot(queue_of_two(), [], [node], [SMALL], fairshare_usage={"ann": 5000.0})
    assert [p.job_id for p in plan_pass(snapshot, NOW, fair_policy()).placements] == [2]
    # By priority (the default order), the first submitted.
    snapshot.fairshare_usage = {}
    policy = fair_policy()
    policy.placement.queue.order = "priority"
    assert [p.job_id for p in plan_pass(snapshot, NOW, policy).placements] == [1]


def test_in_front_of_slurm_the_user_who_used_least_is_claimed_first() -> None:
    snapshot = Snapshot(queue_of_two(), [], [], [], dispatcher_id="d", fairshare_usage={"ann": 5000.0})
    decisions = batch.plan_batch_pass(snapshot, NOW, fair_policy(), {}, max_pending=1)
    assert decisions.claims == [2]
