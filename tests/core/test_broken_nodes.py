"""A node in a seed-002 failure category is broken (seed 004), in the pure core's pass: it takes no
new work, is shut down once nothing runs on it, and is replaced if the queue needs it."""

from __future__ import annotations

from typing import Unpack

from tests.support import JobFields

from corral.core.index import SnapshotIndex
from corral.core.model import Attempt, AttemptState, GiB, InstanceType, Job, JobState, Node, NodeState, Resources
from corral.core.reconcile import plan_pass
from corral.core.settings import PolicySettings
from corral.core.snapshot import NodeAction, Snapshot

NOW = 1000.0
SMALL = InstanceType("small", 2, 4 * GiB, 0.10)
TYPES = [SMALL]


def job(job_id: int, **fields: Unpack[JobFields]) -> Job:
    return Job(id=job_id, command=["true"], resources=Resources(1, GiB), **fields)


def idle_node(node_id: str, now: float) -> Node:
    return Node(node_id, SMALL.name, SMALL.capacity, SMALL.price_per_hour, NodeState.IDLE, 0, 1, now, now)


def settings(**boot: object) -> PolicySettings:
    policy = PolicySettings()
    for key, value in boot.items():
        setattr(policy.boot, key, value)
    return policy


def broken(node_id: str, category: str = "hardware-failure", **kwargs: object) -> Node:
    node = idle_node(node_id, now=NOW)
    node.attributes = {"category": category}
    for key, value in kwargs.items():
        setattr(node, key, value)
    return node


def test_an_empty_broken_instance_is_marked_down_shut_down_and_replaced_in_the_same_pass() -> None:
    """Within its idle grace (it went idle just now) and with the fleet at max_instances: the
    queued job gets no place on it, the node goes down with the category as the reason, is shut
    down, and the boot planner boots its replacement at once."""
    node = broken("n1")
    snap = Snapshot([job(1)], [], [node], TYPES)
    decisions = plan_pass(snap, NOW, settings(max_instances=1))
    assert decisions.placements == []
    assert [(m.node_id, m.state, m.reason) for m in decisions.node_marks] == [
        ("n1", NodeState.DOWN, "hardware-failure: broken, no work left on it")
    ]
    assert [(d.node_id, d.action) for d in decisions.node_decisions] == [("n1", NodeAction.START_SHUTDOWN)]
    assert decisions.node_decisions[0].reason.startswith("hardware-failure: down, open")
    assert [b.instance_type for b in decisions.boots] == ["small"]


def test_a_broken_instance_keeps_its_running_work_and_goes_once_it_ends() -> None:
    node = broken("n1", state=NodeState.BUSY)
    running = job(1, state=JobState.RUNNING)
    attempt = Attempt(1, 1, ["n1"], Resources(1, 1024), AttemptState.RUNNING, assigned_at=900, started_at=900)
    decisions = plan_pass(Snapshot([running, job(2)], [attempt], [node], TYPES), NOW, settings())
    assert decisions.job_outcomes == [] and decisions.node_marks == [] and decisions.node_decisions == []
    assert decisions.placements == [] and len(decisions.boots) == 1  # job 2 gets a node of its own

    # The job is cancelled: the pass that ends it frees the node and shuts it down.
    running.cancel_requested = True
    decisions = plan_pass(Snapshot([running], [attempt], [node], TYPES), NOW, settings())
    assert [o.state for o in decisions.job_outcomes] == [JobState.CANCELLED]
    assert [(m.node_id, m.state) for m in decisions.node_marks] == [("n1", NodeState.DOWN)]
    assert [(d.node_id, d.action) for d in decisions.node_decisions] == [("n1", NodeAction.START_SHUTDOWN)]


def test_a_broken_node_on_a_fixed_fleet_is_looked_at_too() -> None:
    """A fixed fleet (no drain is ever possible) skips idle nodes; a broken one is not skipped."""
    policy = settings(max_instances=0)
    policy.lifecycle.min_instances = 2
    nodes = [broken("n1"), idle_node("n2", now=NOW)]
    decisions = plan_pass(Snapshot([], [], nodes, TYPES), NOW, policy)
    assert [(d.node_id, d.action) for d in decisions.node_decisions] == [("n1", NodeAction.START_SHUTDOWN)]


def test_a_kept_index_files_broken_nodes_as_a_fresh_one_does() -> None:
    """The simulator keeps one index between passes; a node's category set or cleared is filed with
    it (put_node after its attributes changed)."""
    node, other = idle_node("n1", now=NOW), idle_node("n2", now=NOW)
    kept = SnapshotIndex()
    kept.put_node(node)
    kept.put_node(other)
    node.attributes = {"category": ["active", "batch-failure"]}
    kept.put_node(node, reshaped=True)
    assert list(kept.leaving) == ["n1"]
    assert kept.describe() == SnapshotIndex.of(Snapshot([], [], [node, other], TYPES)).describe() | {
        "objects": kept.describe()["objects"]
    }
    node.state = NodeState.DOWN
    kept.put_node(node)
    assert kept.leaving == {}


def test_any_failure_or_maintenance_category_takes_no_work_not_only_the_listed_ones() -> None:
    """A site's own category (seed 002: "site specified"): `gpu-failure` made the node broken for
    the lifecycle but the placer still put the queued job on it, so the broken node ran new work
    (and, fed by the queue, never emptied to be shut down); `network-maintenance` took work too."""
    for category in ("gpu-failure", "network-maintenance"):
        decisions = plan_pass(Snapshot([job(1)], [], [broken("n1", category)], TYPES), NOW, settings())
        assert decisions.placements == [], category
        assert [b.instance_type for b in decisions.boots] == ["small"]
    marks = plan_pass(Snapshot([job(1)], [], [broken("n1", "gpu-failure")], TYPES), NOW, settings()).node_marks
    assert [(m.node_id, m.state, m.reason) for m in marks] == [
        ("n1", NodeState.DOWN, "gpu-failure: broken, no work left on it")
    ]
