"""policy.users (Slurm's QOS MaxJobsPerUser and MaxTRESPerUser=cpu) in the pure passes: a user's
jobs beyond their limits wait with Slurm's reason and get no instance; other users' jobs go on."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from corral.core import batch
from corral.core.model import Attempt, AttemptState, GiB, InstanceType, Job, JobState, Node, NodeState, Resources
from corral.core.reconcile import plan_pass
from corral.core.settings import PolicySettings
from corral.core.snapshot import Decisions, Snapshot

NOW = 1000.0
BIG = InstanceType("big", 16, 64 * GiB, 0.80)
COUNTED = " (running, or before this job in the queue)"


def limited(**users: object) -> PolicySettings:
    return PolicySettings.model_validate({"users": users})


def job(job_id: int, user: str, vcpus: float = 1, nodes: int = 1) -> Job:
    return Job(job_id, ["x"], Resources(vcpus, GiB), node_count=nodes, user=user, submitted_at=job_id)


def world(*queued: Job) -> Snapshot:
    """alice has job 1 running on the one big node, which has room for everything else."""
    node = Node("n1", BIG.name, BIG.capacity, BIG.price_per_hour, NodeState.BUSY, 0, 1, NOW, NOW)
    running = Job(1, ["x"], Resources(1, GiB), user="alice", state=JobState.RUNNING, claimed_by="local")
    attempt = Attempt(1, 1, ["n1"], Resources(1, GiB), AttemptState.RUNNING, assigned_at=NOW, started_at=NOW)
    return Snapshot([running, *queued], [attempt], [node], [BIG], dispatcher_id="local")


def reasons(decisions: Decisions) -> dict[int, str]:
    return {a.job_id: a.wait_reason for a in decisions.annotations}


def test_a_user_at_their_job_limit_waits_and_others_go_on() -> None:
    snapshot = world(job(2, "alice"), job(3, "alice"), job(4, "bob"), job(5, "bob"), job(6, "bob"))
    decisions = plan_pass(snapshot, NOW, limited(max_running_jobs=2))
    assert sorted(p.job_id for p in decisions.placements) == [2, 4, 5]
    assert reasons(decisions)[3] == f"QOSMaxJobsPerUserLimit: alice runs at most 2 jobs at once{COUNTED}"
    assert reasons(decisions)[6] == f"QOSMaxJobsPerUserLimit: bob runs at most 2 jobs at once{COUNTED}"

    # bob's own limits instead (none), alice's the default.
    decisions = plan_pass(snapshot, NOW, limited(max_running_jobs=2, by_user={"bob": {}}))
    assert sorted(p.job_id for p in decisions.placements) == [2, 4, 5, 6]


def test_no_instance_is_booted_for_a_job_held_back() -> None:
    # Three jobs that each fill a node, no node up: one boot, for the one alice may run.
    queued = [Job(i, ["x"], Resources(16, GiB), user="alice", submitted_at=i) for i in (2, 3, 4)]
    decisions = plan_pass(Snapshot(queued, [], [], [BIG]), NOW, limited(max_running_jobs=1))
    assert [b.instance_type for b in decisions.boots] == ["big"]
    assert len(plan_pass(Snapshot(queued, [], [], [BIG]), NOW, limited()).boots) == 3


def test_a_vcpu_limit_counts_a_gangs_nodes() -> None:
    snapshot = world(job(2, "alice", vcpus=2), job(3, "alice", vcpus=2, nodes=3), job(4, "alice", vcpus=2))
    decisions = plan_pass(snapshot, NOW, limited(max_running_vcpus=4))
    assert sorted(p.job_id for p in decisions.placements) == [2]
    assert reasons(decisions)[3] == "QOSMaxCpuPerUserLimit: it needs 6 vCPUs, more than alice may hold (4)"
    assert reasons(decisions)[4] == f"QOSMaxCpuPerUserLimit: alice holds at most 4 vCPUs at once{COUNTED}"


def test_a_job_nothing_can_hold_does_not_hold_back_its_users_others() -> None:
    huge, small = job(2, "bob", vcpus=64), job(3, "bob")
    settings = limited(max_running_jobs=1)
    decisions = plan_pass(world(huge, small), NOW, settings)
    # The first pass lets the huge job through (it counts), and finds nothing could ever hold it.
    assert decisions.placements == [] and reasons(decisions)[3].startswith("QOSMaxJobsPerUserLimit: bob runs")
    (note,) = [a for a in decisions.annotations if a.job_id == 2]
    assert note.unplaceable
    # From then on it waits for the config to change, not holding bob's small job back.
    huge.unplaceable, huge.wait_reason = True, note.wait_reason
    decisions = plan_pass(world(huge, small), NOW, settings)
    assert [p.job_id for p in decisions.placements] == [3]
    assert 2 not in reasons(decisions)  # its reason stands


def test_in_front_of_slurm_a_user_beyond_the_limit_is_not_claimed() -> None:
    snapshot = Snapshot([job(2, "alice"), job(3, "alice"), job(4, "bob")], [], [], [], dispatcher_id="d")
    decisions = batch.plan_batch_pass(snapshot, NOW, limited(max_running_jobs=1), {}, max_pending=10)
    assert decisions.claims == [2, 4]


def test_limits_are_positive() -> None:
    with pytest.raises(ValidationError, match="max_running_jobs"):
        limited(max_running_jobs=0)
    with pytest.raises(ValidationError, match="by_user.alice.max_running_vcpus"):
        limited(by_user={"alice": {"max_running_vcpus": -1}})
