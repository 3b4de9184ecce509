"""policy.lifecycle.max_node_age (Karpenter's expireAfter) in the pure core's pass: a node that old
takes no new work, keeps what runs on it, and is shut down once empty (any billing window, below
min_instances too) and replaced if the queue needs it; a fleet that cannot boot keeps its nodes."""

from __future__ import annotations

from corral.core.model import Attempt, AttemptState, GiB, InstanceType, Job, JobState, Node, NodeState, Resources
from corral.core.reconcile import plan_pass
from corral.core.settings import PolicySettings
from corral.core.snapshot import NodeAction, Snapshot

NOW = 100_000.0
DAY = 86_400.0
HOURLY = InstanceType("hourly", 2, 4 * GiB, 0.10, billing_granularity=3600.0)


def node(node_id: str, age: float, state: NodeState = NodeState.IDLE) -> Node:
    made = Node(node_id, HOURLY.name, HOURLY.capacity, HOURLY.price_per_hour, state, NOW - age, 1, NOW, NOW)
    made.billing_granularity = HOURLY.billing_granularity
    return made


def job(job_id: int, state: JobState = JobState.QUEUED) -> Job:
    return Job(id=job_id, command=["true"], resources=Resources(2, GiB), state=state)  # a whole node


def policy(max_instances: int = 2, min_instances: int = 0) -> PolicySettings:
    settings = PolicySettings()
    settings.lifecycle.max_node_age = DAY
    settings.lifecycle.min_instances = min_instances
    settings.boot.max_instances = max_instances
    return settings


def test_an_expired_idle_node_takes_no_work_is_shut_down_and_replaced() -> None:
    """Within its idle grace, in a closed billing window, at the min_instances floor: all the same."""
    nodes = [node("old", DAY + 30), node("young", DAY - 30)]
    decisions = plan_pass(Snapshot([job(1), job(2)], [], nodes, [HOURLY]), NOW, policy(min_instances=2))
    assert [(p.job_id, p.node_ids) for p in decisions.placements] == [(1, ("young",))]
    assert [(m.node_id, m.state, m.reason) for m in decisions.node_marks] == [
        ("old", NodeState.DOWN, "max_node_age 1d: older than policy.lifecycle.max_node_age, no work left on it"),
        ("young", NodeState.BUSY, ""),
    ]
    assert [(d.node_id, d.action) for d in decisions.node_decisions] == [("old", NodeAction.START_SHUTDOWN)]
    assert [b.instance_type for b in decisions.boots] == ["hourly"]  # job 2's, in the old node's place


def test_an_expired_busy_node_keeps_its_work_until_it_ends() -> None:
    old = node("old", DAY + 30, NodeState.BUSY)
    attempt = Attempt(1, 1, ["old"], Resources(2, GiB), AttemptState.RUNNING, assigned_at=NOW - 60)
    decisions = plan_pass(Snapshot([job(1, JobState.RUNNING), job(2)], [attempt], [old], [HOURLY]), NOW, policy())
    assert decisions.job_outcomes == [] and decisions.node_decisions == [] and decisions.node_marks == []
    assert decisions.placements == [] and [b.instance_type for b in decisions.boots] == ["hourly"]


def test_a_fleet_that_cannot_boot_keeps_its_old_nodes() -> None:
    decisions = plan_pass(Snapshot([job(1)], [], [node("old", 10 * DAY)], [HOURLY]), NOW, policy(max_instances=0))
    assert [p.node_ids for p in decisions.placements] == [("old",)] and decisions.node_decisions == []
