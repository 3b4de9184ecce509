"""A requeue request (`corral requeue`, Slurm's scontrol requeue) in the pure core's pass: the run's
attempts end, the job is queued again at once, counting no failure, and is placed from the next
pass; a cancel outranks it; a queued job has nothing to requeue."""

from __future__ import annotations

from corral.core.model import Attempt, AttemptState, GiB, InstanceType, Job, JobState, Node, NodeState, Resources
from corral.core.reconcile import plan_pass
from corral.core.settings import PolicySettings
from corral.core.snapshot import Snapshot

NOW = 1000.0
SMALL = InstanceType("small", 2, 4 * GiB, 0.10)


def world(job: Job) -> Snapshot:
    node = Node("n1", SMALL.name, SMALL.capacity, SMALL.price_per_hour, NodeState.BUSY, 0, 1, NOW, NOW)
    attempts = []
    if job.state is not JobState.QUEUED:
        attempts.append(Attempt(7, job.id, ["n1"], Resources(1, GiB), AttemptState.RUNNING, assigned_at=NOW - 60))
    return Snapshot([job], attempts, [node], [SMALL])


def running(**fields: bool) -> Job:
    job = Job(id=1, command=["sleep", "60"], resources=Resources(1, GiB), state=JobState.RUNNING, claimed_by="d")
    for key, value in fields.items():
        setattr(job, key, value)
    return job


def test_a_running_job_asked_to_requeue_is_queued_again_counting_nothing() -> None:
    decisions = plan_pass(world(running(requeue_requested=True)), NOW, PolicySettings())
    (outcome,) = decisions.job_outcomes
    assert (outcome.state, outcome.reason, outcome.attempt_ids) == (JobState.QUEUED, "requeued by request", (7,))
    assert outcome.requeued and not outcome.temp_failure and not outcome.perm_failure and outcome.retry_at is None
    # Not placed in the pass that requeues it (its attempt still holds the node's room there); the
    # node it leaves is marked idle.
    assert decisions.placements == []
    assert [(m.node_id, m.state) for m in decisions.node_marks] == [("n1", NodeState.IDLE)]


def test_a_cancel_outranks_a_requeue_and_a_queued_job_has_nothing_to_requeue() -> None:
    decisions = plan_pass(world(running(requeue_requested=True, cancel_requested=True)), NOW, PolicySettings())
    assert [(o.state, o.reason) for o in decisions.job_outcomes] == [(JobState.CANCELLED, "cancelled by request")]

    queued = Job(id=1, command=["true"], resources=Resources(1, GiB), requeue_requested=True)
    decisions = plan_pass(world(queued), NOW, PolicySettings())
    assert decisions.job_outcomes == [] and [p.job_id for p in decisions.placements] == [1]
