"""An operator's drain (corral.core.drain; Slurm's DRAIN with POWER_DOWN_ASAP / POWER_DOWN_FORCE,
Arvados' drain and kill), in the pure core's pass: `drain=true` takes no new work and shuts the
node down once empty, in any billing window; `drain=now` shuts it down at once and its work goes
as a failed node's does; `drain=false` puts it back in service."""

from __future__ import annotations

from corral.core import drain
from corral.core.model import (
    Attempt,
    AttemptState,
    GiB,
    InstanceType,
    Job,
    JobState,
    Node,
    NodeFailureAction,
    NodeState,
    Resources,
)
from corral.core.reconcile import plan_pass
from corral.core.settings import PolicySettings
from corral.core.snapshot import NodeAction, Snapshot

NOW = 10_000.0
SMALL = InstanceType("small", 2, 4 * GiB, 0.10)
HOURLY = InstanceType("hourly", 2, 4 * GiB, 0.10, billing_granularity=3600.0)
TYPES = [SMALL]


def job(job_id: int, state: JobState = JobState.QUEUED, on_node_failure: NodeFailureAction | None = None) -> Job:
    return Job(id=job_id, command=["true"], resources=Resources(1, GiB), state=state, on_node_failure=on_node_failure)


def node(node_id: str, value: str, state: NodeState = NodeState.IDLE, kind: InstanceType = SMALL) -> Node:
    made = Node(node_id, kind.name, kind.capacity, kind.price_per_hour, state, NOW - 600, 1, NOW, NOW)
    made.billing_granularity = kind.billing_granularity
    made.attributes = {"drain": value}
    return made


def running_on(node_id: str, job_id: int = 1) -> Attempt:
    return Attempt(job_id, job_id, [node_id], Resources(1, GiB), AttemptState.RUNNING, assigned_at=NOW - 60)


def settings(**boot: object) -> PolicySettings:
    policy = PolicySettings()
    for key, value in boot.items():
        setattr(policy.boot, key, value)
    return policy


def test_the_values_an_operator_may_give() -> None:
    assert drain.requested({"drain": "true"}) is drain.Drain.WHEN_EMPTY
    assert drain.requested({"drain": "Yes"}) is drain.Drain.WHEN_EMPTY
    assert drain.requested({"drain": " NOW "}) is drain.Drain.NOW
    assert drain.requested({"drain": "false"}) is None and drain.requested({}) is None
    assert [drain.readable(text) for text in ("true", "off", "now", "soon", "2")] == [True, True, True, False, False]


def test_a_drained_idle_node_takes_no_work_and_is_shut_down_at_once_and_replaced() -> None:
    """Within its idle grace and at max_instances: the queued job is not placed on it, the node
    goes down saying why, is shut down, and a replacement boots in the same pass."""
    decisions = plan_pass(Snapshot([job(1)], [], [node("n1", "true")], TYPES), NOW, settings(max_instances=1))
    assert decisions.placements == []
    assert [(m.node_id, m.state, m.reason) for m in decisions.node_marks] == [
        ("n1", NodeState.DOWN, "drain=true: drained by an operator, no work left on it")
    ]
    assert [(d.node_id, d.action) for d in decisions.node_decisions] == [("n1", NodeAction.START_SHUTDOWN)]
    assert [b.instance_type for b in decisions.boots] == ["small"]


def test_a_drained_node_in_a_closed_billing_window_is_shut_down_all_the_same() -> None:
    """An idle node of an hourly type is only drained in the last minutes of its paid hour; an
    operator's drain does not wait for them."""
    hourly = node("n1", "true", kind=HOURLY)
    decisions = plan_pass(Snapshot([], [], [hourly], [HOURLY]), NOW, settings())
    assert [(d.node_id, d.action) for d in decisions.node_decisions] == [("n1", NodeAction.START_SHUTDOWN)]
    assert decisions.node_decisions[0].reason.startswith("drain=true: down, closed")


def test_a_drained_busy_node_lets_its_work_finish_and_the_queue_gets_another_node() -> None:
    busy = node("n1", "true", NodeState.BUSY)
    snap = Snapshot([job(1, JobState.RUNNING), job(2)], [running_on("n1")], [busy], TYPES)
    decisions = plan_pass(snap, NOW, settings())
    assert decisions.job_outcomes == [] and decisions.node_marks == [] and decisions.node_decisions == []
    assert decisions.placements == [] and len(decisions.boots) == 1


def test_drain_now_shuts_a_busy_node_down_and_its_jobs_go_as_on_a_node_failure() -> None:
    """Job 1 is requeued (the default on_node_failure), job 2 asked to be cancelled if its node
    fails; both reasons say an operator shut the node down."""
    busy = node("n1", "now", NodeState.BUSY)
    jobs = [job(1, JobState.RUNNING), job(2, JobState.RUNNING, on_node_failure="cancel")]
    snap = Snapshot(jobs, [running_on("n1", 1), running_on("n1", 2)], [busy], TYPES)
    decisions = plan_pass(snap, NOW, settings(max_instances=1))
    assert [(m.node_id, m.state, m.reason) for m in decisions.node_marks] == [
        ("n1", NodeState.DOWN, "drain=now: shut down by an operator")
    ]
    assert [(d.node_id, d.action) for d in decisions.node_decisions] == [("n1", NodeAction.START_SHUTDOWN)]
    outcomes = {o.job_id: o for o in decisions.job_outcomes}
    assert outcomes[1].state is JobState.QUEUED and outcomes[1].temp_failure
    assert outcomes[2].state is JobState.CANCELLED
    for outcome in outcomes.values():
        assert outcome.reason.startswith("node n1 shut down by an operator (drain=now)"), outcome.reason
    # The requeued job waits out its back-off; the killed node no longer counts against max_instances.
    assert decisions.placements == []


def test_a_drain_outranks_a_hold_and_drain_false_is_back_in_service() -> None:
    held_and_drained = node("n1", "true")
    held_and_drained.attributes["held"] = "true"
    decisions = plan_pass(Snapshot([], [], [held_and_drained], TYPES), NOW, settings())
    assert [(d.node_id, d.action) for d in decisions.node_decisions] == [("n1", NodeAction.START_SHUTDOWN)]

    resumed = node("n1", "false")
    decisions = plan_pass(Snapshot([job(1)], [], [resumed], TYPES), NOW, settings())
    assert [p.node_ids for p in decisions.placements] == [("n1",)]
    assert decisions.node_decisions == [] and decisions.boots == []


def test_a_booting_node_drained_is_not_counted_on_for_the_queue() -> None:
    booting = node("n1", "true", NodeState.BOOTING)
    booting.created_at = NOW - 10
    decisions = plan_pass(Snapshot([job(1)], [], [booting], TYPES), NOW, settings())
    assert [b.instance_type for b in decisions.boots] == ["small"]
