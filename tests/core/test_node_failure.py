"""What a lost node does to its jobs (seed 002 §5.4.6), and held jobs, in the pure core's pass."""

from __future__ import annotations

from typing import Unpack

import pytest
from pydantic import ValidationError
from tests.support import JobFields

from corral.core.index import SnapshotIndex
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
from corral.core.snapshot import JobOutcome, Snapshot
from corral.jobspec import JobRequest

SMALL = InstanceType("small", 2, 4 * GiB, 0.10)
TYPES = [SMALL, InstanceType("large", 8, 32 * GiB, 0.40)]


def job(job_id: int, vcpus: float = 1, ram_gib: float = 1, **fields: Unpack[JobFields]) -> Job:
    return Job(id=job_id, command=["true"], resources=Resources(vcpus, int(ram_gib * GiB)), **fields)


def running(job_id: int, node_id: str) -> tuple[Job, Attempt]:
    j = job(job_id, state=JobState.RUNNING, claimed_by="local")
    return j, Attempt(job_id, job_id, [node_id], j.resources, AttemptState.RUNNING, "local")


def idle_node(node_id: str, now: float = 1000.0) -> Node:
    return Node(node_id, "small", SMALL.capacity, 0.10, NodeState.IDLE, 0, 1, now, now)


def settings(**boot: object) -> PolicySettings:
    chosen = PolicySettings()
    for key, value in boot.items():
        setattr(chosen.boot, key, value)
    return chosen


def policy(on_node_failure: NodeFailureAction = "requeue", **boot: object) -> PolicySettings:
    chosen = settings(**boot)
    chosen.retry.on_node_failure = on_node_failure
    return chosen


def lose_node(j: Job, a: Attempt, chosen: PolicySettings, now: float = 1000.0) -> JobOutcome:
    """One pass over a job running on n1, whose agent went silent at 100."""
    silent = idle_node("n1", now=100.0)
    silent.state = NodeState.BUSY
    decisions = plan_pass(Snapshot([j], [a], [silent], TYPES), now, chosen)
    assert [(m.node_id, m.state) for m in decisions.node_marks] == [("n1", NodeState.DOWN)]
    (outcome,) = decisions.job_outcomes
    assert outcome.attempt_ids == (a.id,)
    return outcome


def test_requeue_is_the_default_a_temporary_failure_with_back_off() -> None:
    assert PolicySettings().retry.on_node_failure == "requeue"
    outcome = lose_node(*running(1, "n1"), PolicySettings())
    assert outcome.state is JobState.QUEUED and outcome.temp_failure and outcome.retry_at == 1005.0
    assert outcome.hold == "" and outcome.reason == "node n1 lost; retry 1/5 in 5s"


def test_a_silent_node_is_shut_down_saying_it_went_silent_not_that_its_boot_failed() -> None:
    """Its shutdown (the node's reason in corral nodes, the node.shutting_down event) said only
    "down, open, boot exceeded, not idle": to an on-call, a node whose boot had failed."""
    silent = idle_node("n1", now=100.0)
    silent.state = NodeState.BUSY
    j, a = running(1, "n1")
    [shutdown] = plan_pass(Snapshot([j], [a], [silent], TYPES), 1000.0, PolicySettings()).node_decisions
    assert shutdown.reason == "no ping for more than 60s (down, open, boot exceeded, not idle)"


def test_cancel_ends_the_job_cancelled_saying_which_node_and_which_policy() -> None:
    outcome = lose_node(*running(1, "n1"), policy("cancel"))
    assert outcome.state is JobState.CANCELLED and outcome.retry_at is None and outcome.hold == ""
    assert outcome.temp_failure  # the attempt ended by a lost node, not by a cancel request
    assert outcome.reason == "node n1 lost; cancelled (on_node_failure=cancel: policy.retry.on_node_failure)"


def test_hold_requeues_the_job_held_without_back_off_or_budget() -> None:
    j, a = running(1, "n1")
    j.temp_failures = 5  # a requeue would fail it: the budget is spent
    outcome = lose_node(j, a, policy("hold"))
    assert outcome.state is JobState.QUEUED and outcome.temp_failure and outcome.retry_at is None
    assert outcome.reason == "node n1 lost; requeued and held (on_node_failure=hold: policy.retry.on_node_failure)"
    assert (
        outcome.hold == "held after a node failure (on_node_failure=hold: policy.retry.on_node_failure) until released"
    )


@pytest.mark.parametrize(("system", "own"), [("requeue", "cancel"), ("cancel", "hold"), ("hold", "requeue")])
def test_the_jobs_own_setting_beats_the_systems(system: NodeFailureAction, own: NodeFailureAction) -> None:
    j, a = running(1, "n1")
    j.on_node_failure = own
    outcome = lose_node(j, a, policy(system))
    expected = {"requeue": JobState.QUEUED, "cancel": JobState.CANCELLED, "hold": JobState.QUEUED}[own]
    assert outcome.state is expected and bool(outcome.hold) == (own == "hold")
    if own != "requeue":
        assert f"on_node_failure={own}: the job's setting" in outcome.reason


def test_a_cancel_request_still_wins_over_hold() -> None:
    j, a = running(1, "n1")
    j.cancel_requested = True
    outcome = lose_node(j, a, policy("hold"))
    assert outcome.state is JobState.CANCELLED and outcome.hold == ""


def test_a_gang_that_loses_any_of_its_nodes_gets_the_policy_once() -> None:
    j = job(1, state=JobState.RUNNING, claimed_by="local", node_count=2, on_node_failure="cancel")
    a = Attempt(1, 1, ["n1", "n2"], j.resources, AttemptState.RUNNING, "local")
    alive, silent = idle_node("n1"), idle_node("n2", now=100.0)
    alive.state = silent.state = NodeState.BUSY
    decisions = plan_pass(Snapshot([j], [a], [alive, silent], TYPES), 1000.0, policy())
    (outcome,) = decisions.job_outcomes
    assert outcome.state is JobState.CANCELLED and outcome.reason.startswith("node n2 lost; cancelled")
    assert outcome.node_id == "n2"  # its event names the node lost, not the gang's first


def test_other_temporary_failures_are_not_node_failures() -> None:
    # An attempt the agent never started is lost, but no node failed: it is requeued whatever the policy.
    j = job(1, state=JobState.CLAIMED, on_node_failure="cancel")
    a = Attempt(1, 1, ["n1"], j.resources, AttemptState.ASSIGNED, "local", assigned_at=0.0)
    busy = idle_node("n1")
    busy.state = NodeState.BUSY
    (outcome,) = plan_pass(Snapshot([j], [a], [busy], TYPES), 1000.0, policy("hold")).job_outcomes
    assert outcome.state is JobState.QUEUED and outcome.hold == "" and "not started" in outcome.reason


# ---- held jobs --------------------------------------------------------------------------------


def test_a_held_job_is_neither_placed_nor_annotated_and_the_next_one_goes_first() -> None:
    held = job(1, 2, held=True, priority=5, wait_reason="held by an operator")
    snap = Snapshot([held, job(2, 2)], [], [idle_node("n1")], TYPES)  # room for one of them
    decisions = plan_pass(snap, 1000.0, settings())
    assert [p.job_id for p in decisions.placements] == [2]
    assert decisions.annotations == [] and decisions.boots == []
    held.held = False  # released
    assert [p.job_id for p in plan_pass(snap, 1000.0, settings()).placements] == [1]


def test_no_instance_is_booted_for_a_held_job() -> None:
    snap = Snapshot([job(1, held=True), job(2, held=True, ram_gib=8, not_before=10.0)], [], [], TYPES)
    decisions = plan_pass(snap, 1000.0, settings())
    assert decisions.boots == [] and decisions.placements == [] and decisions.annotations == []
    for j in snap.jobs:
        j.held = False
    assert plan_pass(snap, 1000.0, settings()).boots != []


def test_a_held_job_makes_no_backfill_reservation() -> None:
    # A fixed fleet: n1 (8 cpus) runs 6 cpus of work ending at +900, n2 is full until +4900. The
    # big job (8 cpus, first in queue order) would reserve n1 from +900, and a 2-cpu job running
    # 2000 s would delay it; held, the big job reserves nothing and the small one runs now.
    big_node = Node("n1", "big", Resources(8, 64 * GiB), 0.4, NodeState.BUSY, 0, 1, 1000.0, 1000.0)
    full_node = Node("n2", "big", Resources(8, 64 * GiB), 0.4, NodeState.BUSY, 0, 1, 1000.0, 1000.0)
    first = job(100, 6, state=JobState.RUNNING, claimed_by="local", time_limit=1000)
    second = job(101, 8, state=JobState.RUNNING, claimed_by="local", time_limit=5000)
    attempts = [
        Attempt(1, 100, ["n1"], first.resources, AttemptState.RUNNING, "local", 900.0, started_at=900.0),
        Attempt(2, 101, ["n2"], second.resources, AttemptState.RUNNING, "local", 900.0, started_at=900.0),
    ]
    big = job(1, 8, priority=10, time_limit=600)
    small = job(2, 2, time_limit=2000)
    snap = Snapshot([first, second, big, small], attempts, [big_node, full_node], [])
    fixed = settings(max_instances=0)
    waiting = plan_pass(snap, 1000.0, fixed)
    assert waiting.placements == [] and "reservation" in waiting.explanations[1]
    big.held = True
    decisions = plan_pass(snap, 1000.0, fixed)
    assert [(p.job_id, p.node_ids) for p in decisions.placements] == [(2, ("n1",))]
    assert 1 not in decisions.explanations


def test_a_held_job_can_still_be_cancelled() -> None:
    snap = Snapshot([job(1, held=True, cancel_requested=True)], [], [], TYPES)
    (outcome,) = plan_pass(snap, 1000.0, settings()).job_outcomes
    assert outcome.state is JobState.CANCELLED


def test_the_index_files_held_jobs_apart_from_the_queue() -> None:
    held, free = job(1, held=True, retry_at=2000.0), job(2)
    index = SnapshotIndex.of(Snapshot([held, free], [], [], TYPES))
    assert list(index.held) == [1] and list(index.queued) == [2] and index.deferred == {}
    held.held = False
    index.put_job(held)
    assert index.held == {} and sorted(index.queued) == [1, 2] and list(index.deferred) == [1]
    assert index.describe() == SnapshotIndex.of(Snapshot([held, free], [], [], TYPES)).describe()


# ---- what a user may write --------------------------------------------------------------------


def test_actions_are_read_in_any_case_and_the_others_are_refused_with_the_reason() -> None:
    assert JobRequest(command=["x"], on_node_failure="CANCEL").on_node_failure == "cancel"
    assert JobRequest(command=["x"]).to_job(1, 0.0).on_node_failure is None
    cases = {
        "migrate": "'migrate' is not offered: corral cannot move a running job to another node",
        "ignore": "'ignore' is not offered: a lost node is shut down",
        "notify": "'notify' is not offered",
        "requeue*": "a trailing '*' (act only when the first node fails) is not offered",
        "retry": "unknown action 'retry'; use requeue, cancel, hold",
    }
    for value, message in cases.items():
        with pytest.raises(ValidationError) as caught:
            JobRequest(command=["x"], on_node_failure=value)
        (error,) = caught.value.errors()
        assert error["loc"] == ("on_node_failure",) and message in error["msg"]
    with pytest.raises(ValidationError, match="on_node_failure"):
        PolicySettings.model_validate({"retry": {"on_node_failure": "migrate"}})
