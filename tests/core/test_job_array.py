"""Job arrays (Slurm's --array) in the core: the spec's text, and the throttle (%N) as both passes
take it: no more of an array's tasks claimed or running at once than it says, and no instance
booted for a task it holds back."""

from __future__ import annotations

import pytest

from corral.core import batch, job_array
from corral.core.model import (
    Attempt,
    AttemptState,
    Dispatcher,
    GiB,
    InstanceType,
    Job,
    JobState,
    Node,
    NodeState,
    Resources,
)
from corral.core.reconcile import plan_pass
from corral.core.settings import PolicySettings
from corral.core.snapshot import Decisions, Snapshot

BIG = InstanceType("big", 16, 64 * GiB, 0.80)
ONE_TASK = InstanceType("one-task", 2, 4 * GiB, 0.10)  # room for one task of TASK's size
TASK = Resources(2, 2 * GiB)
NOW = 1000.0
ARRAY = 10  # the array's id: its first task's job id


# ---- the text -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "task_ids", "throttle", "canonical"),
    [
        ("0-3", (0, 1, 2, 3), None, "0-3"),
        ("1,3,5-7", (1, 3, 5, 6, 7), None, "1,3,5-7"),
        ("0-9:4", (0, 4, 8), None, "0,4,8"),
        ("0-99%10", tuple(range(100)), 10, "0-99%10"),
        (" 7, 2-3 ,3 %1", (2, 3, 7), 1, "2-3,7%1"),  # any order, spacing, repeats
        ("1000", (1000,), None, "1000"),  # Slurm's MaxArraySize default, 1001: ids up to 1000
    ],
)
def test_slurms_array_text_is_read_and_written_back_in_one_canonical_form(
    text: str, task_ids: tuple[int, ...], throttle: int | None, canonical: str
) -> None:
    spec = job_array.parse(text)
    assert (spec.task_ids, spec.throttle, str(spec)) == (task_ids, throttle, canonical)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "no task ids"),
        ("%4", "no task ids"),
        ("0-1001", "task id 1001 is more than 1000"),
        ("5-3", "the range runs backwards (5 > 3)"),
        ("0-9:0", "the step '0' is not a whole number of at least 1"),
        ("4:2", "a step (:N) goes with a range"),
        ("0-x", "'x' is not a task id"),
        ("-1", "'' is not a task id"),
        ("1,,2", "an empty entry between commas"),
        ("0-9%0", "the throttle %0 must be 1 to"),
        ("0-9%two", "the throttle after '%' is a whole number of tasks, not 'two'"),
        ("0-9%2%3", "not '2%3'"),
    ],
)
def test_a_bad_array_text_is_refused_naming_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError) as refused:
        job_array.parse(text)
    assert says in str(refused.value)
    assert repr(text.strip()) in str(refused.value)


def test_a_task_finds_its_array_in_its_environment() -> None:
    task = job_array.parse("1,3,5-7%2").task(ARRAY, 5)
    values = {"ARRAY_JOB_ID": "10", "ARRAY_TASK_ID": "5", "ARRAY_TASK_COUNT": "5", "ARRAY_TASK_MIN": "1"}
    values["ARRAY_TASK_MAX"] = "7"
    # Under corral's names, and Slurm's, which a batch script written for Slurm reads.
    assert job_array.environment(task) == {
        f"{prefix}_{k}": v for prefix in ("CORRAL", "SLURM") for k, v in values.items()
    }
    assert str(task) == "10_5"


# ---- the throttle in plan_pass --------------------------------------------------------------------


def tasks(count: int, throttle: int | None, array_id: int = ARRAY, spec: str = "0-4") -> list[Job]:
    """`count` queued tasks of an array, ids array_id, array_id + 1, ..."""
    array = job_array.parse(spec)
    return [
        Job(
            array_id + n,
            ["true"],
            TASK,
            submitted_at=1.0,
            array=array.task(array_id, array.task_ids[n]),
            array_throttle=throttle,
        )
        for n in range(count)
    ]


def running(job: Job, attempt_id: int, node_id: str = "n1") -> Attempt:
    job.state, job.claimed_by = JobState.RUNNING, "local"
    return Attempt(attempt_id, job.id, [node_id], job.resources, AttemptState.RUNNING, "local", 1.0, 2.0)


def idle_node(node_id: str = "n1", itype: InstanceType = BIG) -> Node:
    return Node(node_id, itype.name, itype.capacity, itype.price_per_hour, NodeState.IDLE, 0, 1, NOW, NOW)


def plan(
    jobs: list[Job], attempts: tuple[Attempt, ...] = (), nodes: tuple[Node, ...] = (), max_instances: int = 0
) -> Decisions:
    policy = PolicySettings()
    policy.boot.max_instances = max_instances
    snapshot = Snapshot(jobs=jobs, attempts=list(attempts), nodes=list(nodes), instance_types=[ONE_TASK])
    return plan_pass(snapshot, NOW, policy)


def placed(decisions: Decisions) -> list[int]:
    return sorted(p.job_id for p in decisions.placements)


def reasons(decisions: Decisions) -> dict[int, str]:
    return {a.job_id: a.wait_reason for a in decisions.annotations}


THROTTLED = "JobArrayTaskLimit: array 10 runs at most 2 tasks at once"


def test_with_room_for_all_only_as_many_tasks_as_the_throttle_are_placed() -> None:
    decisions = plan(tasks(5, throttle=2), nodes=(idle_node(),))
    assert placed(decisions) == [10, 11]  # the first in queue order
    assert reasons(decisions) == {12: THROTTLED, 13: THROTTLED, 14: THROTTLED}


def test_without_a_throttle_every_task_is_placed() -> None:
    assert placed(plan(tasks(5, throttle=None), nodes=(idle_node(),))) == [10, 11, 12, 13, 14]


def test_claimed_and_running_tasks_count_against_the_throttle_and_a_task_goes_when_one_ends() -> None:
    jobs = tasks(5, throttle=2)
    attempts = (running(jobs[0], 1), running(jobs[1], 2))
    jobs[1].state = JobState.CLAIMED
    both_run = plan(jobs, attempts, (idle_node(),))
    assert placed(both_run) == []
    assert reasons(both_run) == {12: THROTTLED, 13: THROTTLED, 14: THROTTLED}
    # Task 0 ended (the store no longer lists a finished job): one more goes, the next in order.
    one_ended = plan(jobs[1:], attempts[1:], (idle_node(),))
    assert placed(one_ended) == [12]


def test_a_task_this_pass_cancels_frees_its_place() -> None:
    jobs = tasks(3, throttle=1)
    attempt = running(jobs[0], 1)
    jobs[0].cancel_requested = True
    decisions = plan(jobs, (attempt,), (idle_node(),))
    assert [(o.job_id, o.state) for o in decisions.job_outcomes] == [(10, JobState.CANCELLED)]
    assert placed(decisions) == [11]


def test_the_throttle_is_per_array_and_other_jobs_are_not_held_back() -> None:
    other = tasks(3, throttle=1, array_id=20)
    plain = Job(30, ["true"], TASK, submitted_at=1.0)
    decisions = plan([*tasks(3, throttle=2), *other, plain], nodes=(idle_node(),))
    assert placed(decisions) == [10, 11, 20, 30]


def test_no_instance_is_booted_for_a_throttled_task() -> None:
    unthrottled = plan(tasks(5, throttle=None), max_instances=10)
    assert len(unthrottled.boots) == 5  # one instance type holds one task: a boot per task
    throttled = plan(tasks(5, throttle=2), max_instances=10)
    assert len(throttled.boots) == 2
    assert {job_id for job_id, why in reasons(throttled).items() if why == THROTTLED} == {12, 13, 14}


def test_a_throttled_task_already_saying_so_is_not_annotated_again() -> None:
    jobs = tasks(3, throttle=1)
    jobs[1].wait_reason = jobs[2].wait_reason = "JobArrayTaskLimit: array 10 runs at most 1 task at once"
    decisions = plan(jobs, nodes=(idle_node(),))
    assert placed(decisions) == [10]
    assert reasons(decisions) == {}


# ---- the throttle in front of Slurm ---------------------------------------------------------------


def plan_batch(jobs: list[Job], attempts: tuple[Attempt, ...] = ()) -> batch.BatchDecisions:
    snapshot = Snapshot(
        jobs=jobs,
        attempts=list(attempts),
        nodes=[],
        instance_types=[],
        dispatcher_id="local",
        dispatchers=[Dispatcher("local", NOW)],
    )
    seen = {a.id: batch.Seen(a.id, str(a.id), "RUNNING") for a in attempts}
    return batch.plan_batch_pass(snapshot, NOW, PolicySettings(), seen, max_pending=100)


def test_in_front_of_slurm_only_as_many_tasks_as_the_throttle_are_claimed() -> None:
    decisions = plan_batch(tasks(5, throttle=2))
    assert decisions.claims == [10, 11]
    assert {a.job_id: a.wait_reason for a in decisions.annotations} == {12: THROTTLED, 13: THROTTLED, 14: THROTTLED}
    jobs = tasks(5, throttle=2)
    one_runs = plan_batch(jobs[1:], (running(jobs[1], 1),))
    assert one_runs.claims == [12]
