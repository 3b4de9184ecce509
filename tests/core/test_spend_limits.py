"""policy.boot.max_cost_per_hour and max_vcpus (corral.core.limits; Karpenter's NodePool limits,
and a spend cap): the pure pass boots no instance that would take the fleet past one, says so in
the job's reason, and, with the cap reached, a waiting job holds a backfill reservation on the
running nodes, as at max_instances."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from corral.core.model import Attempt, AttemptState, GiB, InstanceType, Job, JobState, Node, NodeState, Resources
from corral.core.reconcile import plan_pass
from corral.core.settings import PolicySettings
from corral.core.snapshot import Decisions, Snapshot

NOW = 1000.0
SMALL = InstanceType("small", 2, 4 * GiB, 0.10)
BIG = InstanceType("big", 8, 32 * GiB, 0.40)


def capped(max_cost_per_hour: float | None = None, max_vcpus: float | None = None) -> PolicySettings:
    policy = PolicySettings()
    policy.boot.max_cost_per_hour = max_cost_per_hour
    policy.boot.max_vcpus = max_vcpus
    return policy


def queued(count: int, vcpus: float = 2, nodes: int = 1) -> list[Job]:
    return [Job(i, ["x"], Resources(vcpus, GiB), node_count=nodes, submitted_at=i) for i in range(1, count + 1)]


def reasons(decisions: Decisions) -> dict[int, str]:
    return {a.job_id: a.wait_reason for a in decisions.annotations}


def up(node_id: str, itype: InstanceType) -> Node:
    return Node(node_id, itype.name, itype.capacity, itype.price_per_hour, NodeState.BUSY, 0, 1, NOW, NOW)


def test_boots_stop_at_the_cost_cap_counting_the_instances_up() -> None:
    decisions = plan_pass(Snapshot(queued(5), [], [], [SMALL, BIG]), NOW, capped(max_cost_per_hour=0.25))
    assert [b.instance_type for b in decisions.boots] == ["small", "small"]
    assert reasons(decisions)[3] == "waiting for resources: max_cost_per_hour ($0.25/h) reached"

    # A busy node up already counts: one more fits under the cap.
    busy = up("n1", SMALL)
    running = Job(9, ["x"], Resources(2, GiB), state=JobState.RUNNING, claimed_by="local", submitted_at=0)
    attempt = Attempt(9, 9, ["n1"], Resources(2, GiB), AttemptState.RUNNING, assigned_at=NOW, started_at=NOW)
    snapshot = Snapshot([running, *queued(3)], [attempt], [busy], [SMALL, BIG])
    assert len(plan_pass(snapshot, NOW, capped(max_cost_per_hour=0.25)).boots) == 1
    # Without a cap, one per job (max_instances 8).
    assert len(plan_pass(snapshot, NOW, capped()).boots) == 3


def test_a_vcpu_cap_and_what_no_boot_can_ever_meet_are_said_plainly() -> None:
    decisions = plan_pass(Snapshot(queued(3, vcpus=2), [], [], [SMALL]), NOW, capped(max_vcpus=5))
    assert len(decisions.boots) == 2
    assert reasons(decisions)[3] == "waiting for resources: max_vcpus (5) reached"

    big_job = plan_pass(Snapshot(queued(1, vcpus=6), [], [], [SMALL, BIG]), NOW, capped(max_vcpus=4))
    assert big_job.boots == []
    assert reasons(big_job)[1] == "a big would pass max_vcpus (4) on its own"
    gang = plan_pass(Snapshot(queued(1, nodes=3), [], [], [SMALL]), NOW, capped(max_cost_per_hour=0.25))
    assert gang.boots == []
    assert reasons(gang)[1] == "3 × small would pass max_cost_per_hour ($0.25/h) on their own"
    # Never under this config: unplaceable, as a job larger than every type (before, it waited unflagged).
    assert all(note.unplaceable for note in (*big_job.annotations, *gang.annotations))


def test_at_the_cap_a_waiting_job_holds_a_reservation_on_the_running_node() -> None:
    busy = up("n1", SMALL)
    running = Job(1, ["x"], Resources(2, GiB), state=JobState.RUNNING, claimed_by="local", time_limit=600)
    attempt = Attempt(7, 1, ["n1"], Resources(2, GiB), AttemptState.RUNNING, assigned_at=NOW - 60, started_at=NOW - 60)
    waiting = Job(2, ["x"], Resources(2, GiB), submitted_at=2)
    snapshot = Snapshot([running, waiting], [attempt], [busy], [SMALL])

    at_cap = plan_pass(snapshot, NOW, capped(max_cost_per_hour=0.15))
    assert at_cap.boots == []
    assert at_cap.explanations[2]["reservation"]["nodes"] == ["n1"]  # bounded: EASY's reservation
    free = plan_pass(snapshot, NOW, capped())
    assert [b.instance_type for b in free.boots] == ["small"] and "reservation" not in free.explanations[2]


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValidationError, match="max_cost_per_hour"):
        PolicySettings.model_validate({"boot": {"max_cost_per_hour": 0}})
    with pytest.raises(ValidationError, match="max_vcpus"):
        PolicySettings.model_validate({"boot": {"max_vcpus": -4}})


def test_a_gang_the_cheapest_type_within_the_cap_would_take_is_not_unplaceable_while_that_type_is_backed_off() -> None:
    """While small was backed off, a gang of three 1-vcpu jobs under max_vcpus 6 was marked
    unplaceable ("3 × big would pass max_vcpus (6) on their own", event job.unplaceable), and ran
    once the back-off ended: an on-call read it as a config to change."""
    gang = Job(1, ["x"], Resources(1, GiB), node_count=3, submitted_at=0)
    backed_off = Snapshot([gang], [], [], [SMALL, BIG], unavailable_types={"small": NOW + 60})
    decisions = plan_pass(backed_off, NOW, capped(max_vcpus=6))
    assert decisions.boots == []
    [note] = decisions.annotations
    assert not note.unplaceable
    assert note.wait_reason == (
        "waiting for resources: 3 × big would pass max_vcpus (6) on their own; small would not, and may not boot"
        " now (backed off or at its max_instances: corral status says why)"
    )
    # Once the back-off ends, the gang boots three small.
    later = plan_pass(backed_off, NOW + 61, capped(max_vcpus=6))
    assert [b.instance_type for b in later.boots] == ["small"] * 3
