"""Seed 002 §5.4.5, NODEFAILURERESERVETIME (`policy.dispatch.node_failure_reserve_time`): after an
attempt was not started on a node that is still up within the start timeout, the node takes no new
work for a while; its other work runs on."""

from __future__ import annotations

import dataclasses

from tests.core.test_reconcile import TYPES, idle_node, job

from corral.core.model import Attempt, AttemptState, JobState, Node, NodeState, Resources
from corral.core.reconcile import plan_pass
from corral.core.settings import PolicySettings
from corral.core.snapshot import NodeReserve, Snapshot
from corral.placement.attributes import FAILURE_RESERVED_UNTIL

NOW = 1000.0


def policy(reserve: float) -> PolicySettings:
    settings = PolicySettings()
    settings.dispatch.node_failure_reserve_time = reserve
    return settings


def late_world() -> Snapshot:
    """Job 1's attempt was assigned to n1 at 0 and never started (the start timeout is 120 s); job
    2 runs on n1; job 3 is queued. n2 is idle."""
    one = dataclasses.replace(job(1), state=JobState.CLAIMED, claimed_by="local")
    two = dataclasses.replace(job(2), state=JobState.RUNNING, claimed_by="local")
    late = Attempt(11, 1, ["n1"], Resources(1, 1024), dispatcher_id="local", assigned_at=0.0)
    running = Attempt(12, 2, ["n1"], Resources(1, 1024), AttemptState.RUNNING, "local", 900.0, 901.0)
    return Snapshot(
        jobs=[one, two, job(3)],
        attempts=[late, running],
        nodes=[idle_node("n1", now=NOW), idle_node("n2", now=NOW)],
        instance_types=TYPES,
    )


def reserved(node: Node, until: float) -> Node:
    return dataclasses.replace(node, attributes={FAILURE_RESERVED_UNTIL: repr(until)})


def test_off_by_default_the_node_takes_work_at_once() -> None:
    decisions = plan_pass(late_world(), NOW, PolicySettings())
    assert decisions.node_reservations == []
    assert [o.job_id for o in decisions.job_outcomes] == [1]
    # Job 3 (and job 1 after its back-off) may go on n1, the first node that fits.
    assert [(p.job_id, p.node_ids) for p in decisions.placements] == [(3, ("n1",))]


def test_a_start_timeout_reserves_the_node_and_work_goes_elsewhere_this_pass() -> None:
    decisions = plan_pass(late_world(), NOW, policy(300))
    assert decisions.node_reservations == [
        NodeReserve(
            "n1",
            1300.0,
            "TRANSIENT_FAILURE: reserved until 1970-01-01 00:21:40 UTC"
            " (attempt 11 of job 1 not started on n1 within the start timeout)",
        )
    ]
    # Job 1 is requeued (a temporary failure), job 2 runs on, job 3 goes on n2.
    assert [(o.job_id, o.state, o.temp_failure) for o in decisions.job_outcomes] == [(1, JobState.QUEUED, True)]
    assert [(p.job_id, p.node_ids) for p in decisions.placements] == [(3, ("n2",))]
    assert not decisions.empty()


def test_the_recorded_reservation_keeps_work_off_the_node_until_it_ends() -> None:
    # The next passes: the shell recorded the reservation as the node's attribute; n2 is full.
    settings = policy(300)
    settings.boot.max_instances = 0  # no boot: the reason is the placer's

    def world(now: float) -> Snapshot:
        full = dataclasses.replace(idle_node("n2", now=now), capacity=Resources(0, 0))
        n1 = reserved(idle_node("n1", now=now), 1300.0)
        return Snapshot(jobs=[job(3)], attempts=[], nodes=[n1, full], instance_types=TYPES)

    during = plan_pass(world(1299.0), 1299.0, settings)
    assert during.placements == [] and during.node_reservations == []
    assert "1 TRANSIENT_FAILURE: reserved until 1970-01-01 00:21:40 UTC" in str(during.explanations[3])
    after = plan_pass(world(1300.0), 1300.0, settings)
    assert [(p.job_id, p.node_ids) for p in after.placements] == [(3, ("n1",))]


def test_a_node_already_down_is_not_reserved() -> None:
    # The late attempt's node went silent: step 2 marks it down and its work is lost; no reservation.
    world = late_world()
    n1 = dataclasses.replace(idle_node("n1", now=NOW), last_ping_at=0.0, paired_at=0.0)
    world = dataclasses.replace(world, nodes=[n1, idle_node("n2", now=NOW)])
    decisions = plan_pass(world, NOW, policy(300))
    assert decisions.node_reservations == []
    assert any(m.node_id == "n1" for m in decisions.node_marks)


# --- NODEDOWNSTATEDELAYTIME: `policy.placement.queue.node_down_delay` -------------------------------


def down_world(now: float = NOW) -> Snapshot:
    """A fixed fleet of two 2-vcpu nodes: n1 runs job 1 (2 vcpus, ends at 2000 by its time limit),
    n2 is down and comes back (`away`). Job 2 (2 vcpus) is first in the queue."""
    one = dataclasses.replace(job(1, vcpus=2), state=JobState.RUNNING, claimed_by="local", time_limit=1000.0)
    running = Attempt(11, 1, ["n1"], Resources(2, 1024), AttemptState.RUNNING, "local", 1000.0, 1000.0)
    n1 = dataclasses.replace(idle_node("n1", now=now), state=NodeState.BUSY)
    n2 = dataclasses.replace(idle_node("n2", now=now), state=NodeState.DOWN)
    return Snapshot(
        jobs=[one, job(2, vcpus=2, time_limit=100.0)],
        attempts=[running],
        nodes=[n1],
        instance_types=TYPES,
        away=[n2],
    )


def fixed(delay: float | None) -> PolicySettings:
    settings = PolicySettings()
    settings.boot.max_instances = 0
    settings.placement.queue.node_down_delay = delay
    return settings


def test_by_default_a_down_node_never_counts_for_the_reservation() -> None:
    decisions = plan_pass(down_world(), NOW, fixed(None))
    assert decisions.placements == []
    assert "reserved n1 from in 17m" in decisions.annotations[0].wait_reason
    assert decisions.revisit_from == 2000.0


def test_with_a_delay_the_reservation_counts_the_down_node_from_now_plus_the_delay() -> None:
    decisions = plan_pass(down_world(), NOW, fixed(300))
    assert decisions.placements == []  # the down node takes no work now
    assert "reserved n2 from in 5m" in decisions.annotations[0].wait_reason
    assert decisions.explanations[2]["reservation"]["start"] == NOW + 300
    assert decisions.revisit_from == NOW + 300
    # The delay floats: 10 minutes later, still 5 minutes away (not from when it went down).
    later = plan_pass(down_world(NOW + 600), NOW + 600, fixed(300))
    assert later.revisit_from == NOW + 900 and "reserved n2 from in 5m" in later.annotations[0].wait_reason
    # Running work that frees room before the down node would be back still wins.
    assert "reserved n1 from in 17m" in plan_pass(down_world(), NOW, fixed(2000)).annotations[0].wait_reason


def test_the_state_filter_reads_the_attribute_and_kept_facts_expire_with_it() -> None:
    from corral.placement.arrays import FleetFacts
    from corral.placement.settings import PlacementSettings

    nodes = [reserved(idle_node("n1"), 1300.0), idle_node("n2")]
    facts = FleetFacts(nodes, PlacementSettings(), 1000.0)
    assert facts.schedulable.tolist() == [False, True]
    assert facts.why_unschedulable[0] == "TRANSIENT_FAILURE: reserved until 1970-01-01 00:21:40 UTC"
    assert facts.valid_at(1299.0) and not facts.valid_at(1300.0)
    assert FleetFacts(nodes, PlacementSettings(), 1300.0).schedulable.tolist() == [True, True]


def test_the_reservations_end_reads_as_a_time_to_the_second() -> None:
    """At a real time the event said "reserved until 1.7957e+09": unreadable, and ten minutes off."""
    world = late_world()
    start = 1_795_696_045.0  # 2026-11-26 12:27:25 UTC
    world = dataclasses.replace(world, nodes=[dataclasses.replace(n, last_ping_at=start) for n in world.nodes])
    (held,) = plan_pass(world, start, policy(300)).node_reservations
    assert held.reason.startswith("TRANSIENT_FAILURE: reserved until 2026-11-26 12:32:25 UTC (attempt 11 of job 1")
