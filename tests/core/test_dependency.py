"""Job dependencies (Slurm's --dependency) in the core: what a pass decides for a queued job whose
dependency holds, does not hold yet, or can never hold."""

from __future__ import annotations

from typing import Unpack

import pytest
from tests.support import JobFields

from corral.core import batch, dependency
from corral.core.index import SnapshotIndex
from corral.core.model import GiB, InstanceType, Job, JobState, Node, NodeState, Resources
from corral.core.reconcile import plan_pass
from corral.core.settings import PolicySettings
from corral.core.snapshot import Decisions, Snapshot

SMALL = InstanceType("small", 2, 4 * GiB, 0.10)
NOW = 1000.0


def job(
    job_id: int, state: JobState = JobState.QUEUED, /, depends: str | None = None, **fields: Unpack[JobFields]
) -> Job:
    return Job(
        id=job_id,
        command=["true"],
        resources=Resources(1, GiB),
        **JobFields(state=state, dependency=dependency.parse(depends) if depends else None, **fields),
    )


def idle_node(node_id: str = "n1") -> Node:
    return Node(
        node_id, SMALL.name, SMALL.capacity, SMALL.price_per_hour, NodeState.IDLE, 0, 1, NOW, state_changed_at=NOW
    )


def plan(
    *jobs: Job,
    finished: dict[int, JobState] | None = None,
    kill: bool = True,
    boots: bool = False,
    array_tasks: dict[int, list[int]] | None = None,
) -> Decisions:
    policy = PolicySettings()
    policy.dispatch.kill_invalid_depend = kill
    if not boots:
        policy.boot.max_instances = 0
    snapshot = Snapshot(
        jobs=list(jobs),
        attempts=[],
        nodes=[idle_node()],
        instance_types=[SMALL],
        finished=finished or {},
        array_tasks=array_tasks or {},
    )
    return plan_pass(snapshot, NOW, policy)


def placed(decisions: Decisions) -> list[int]:
    return [p.job_id for p in decisions.placements]


def reasons(decisions: Decisions) -> dict[int, str]:
    return {a.job_id: a.wait_reason for a in decisions.annotations}


def cancelled(decisions: Decisions) -> dict[int, str]:
    return {o.job_id: o.reason for o in decisions.job_outcomes if o.state is JobState.CANCELLED}


# ---- the text -------------------------------------------------------------------------------------


def test_slurms_text_is_read_and_written_back_in_one_canonical_form() -> None:
    parsed = dependency.parse(" AfterOK:12:13 , afterany:14,afterok:12 ")
    assert parsed is not None
    assert parsed.conditions == (
        (dependency.DependencyKind.AFTEROK, 12),
        (dependency.DependencyKind.AFTEROK, 13),
        (dependency.DependencyKind.AFTERANY, 14),
    )
    assert str(parsed) == "afterok:12:13,afterany:14"
    assert str(dependency.parse("afterok:3?afternotok:3")) == "afterok:3?afternotok:3"
    assert dependency.parse("  ") is None
    # Slurm's names of an array's task and of a whole array, kept apart from job ids.
    named = dependency.parse("afternotok:12_*,afterok:12_3:14,afternotok:15")
    assert named is not None
    assert named.conditions == ((dependency.DependencyKind.AFTEROK, 14), (dependency.DependencyKind.AFTERNOTOK, 15))
    assert named.tasks == ((dependency.DependencyKind.AFTEROK, 12, 3),)
    assert named.arrays == ((dependency.DependencyKind.AFTERNOTOK, 12),)
    assert str(named) == "afterok:14:12_3,afternotok:15:12_*"
    assert dependency.parse(str(named)) == named


@pytest.mark.parametrize(
    "text",
    ["afterok:12?afterok:13", "afterok:12:13?afternotok:14", "after:1?after:2?after:3", "afternotok:5_*?afternotok:9"],
)
def test_any_one_condition_is_still_any_one_once_written_back(text: str) -> None:
    # The store keeps the canonical text and reads it back: a `?` of one kind was written
    # "afterok:12:13", which reads as every one (a job meant to run after either was cancelled
    # when the first failed).
    parsed = dependency.parse(text)
    assert parsed is not None
    again = dependency.parse(str(parsed))
    assert again == parsed
    assert again is not None and again.any_of


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("afterok", "needs at least one job id"),
        ("afterok:12,afterany:13?after:14", "not both"),
        ("afterfoo:12", "unknown dependency type 'afterfoo'"),
        ("singleton", "singleton is not offered"),
        ("aftercorr:12", "aftercorr is not offered \\(name each task instead, as A_T"),
        ("afterok:12_x", "'12_x' is not a job id, an array's task \\(A_T\\) or a whole array \\(A_\\*\\)"),
        ("afterok:12_1001", "'12_1001' is not a job id, an array's task"),
        ("afterok:0_*", "'0_\\*' is not a job id"),
        ("after:12+10", "delay"),
        ("afterok:x", "'x' is not a job id"),
        ("afterok:0", "'0' is not a job id"),
        ("afterok:@", "'@' is not a job of the same submission \\(@N, N its place from 0"),
        ("afterok:@x", "'@x' is not a job of the same submission"),
        ("afterok:@1_x", "'@1_x' is not a job of the same submission"),
        ("afterok:@1_1001", "'@1_1001' is not a job of the same submission"),
        ("afterok:@-1", "'@-1' is not a job of the same submission"),
    ],
)
def test_a_bad_dependency_says_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        dependency.parse(text)


# ---- each kind: satisfied, waiting, never satisfiable ----------------------------------------------


@pytest.mark.parametrize(
    ("kind", "state", "verdict"),
    [
        ("after", JobState.QUEUED, "waiting"),
        ("after", JobState.CLAIMED, "waiting"),
        ("after", JobState.RUNNING, "satisfied"),
        ("after", JobState.COMPLETE, "satisfied"),
        ("after", JobState.CANCELLED, "satisfied"),
        ("afterany", JobState.RUNNING, "waiting"),
        ("afterany", JobState.COMPLETE, "satisfied"),
        ("afterany", JobState.FAILED, "satisfied"),
        ("afterany", JobState.CANCELLED, "satisfied"),
        ("afterok", JobState.RUNNING, "waiting"),
        ("afterok", JobState.COMPLETE, "satisfied"),
        ("afterok", JobState.FAILED, "never"),
        ("afterok", JobState.CANCELLED, "never"),
        ("afternotok", JobState.RUNNING, "waiting"),
        ("afternotok", JobState.FAILED, "satisfied"),
        ("afternotok", JobState.CANCELLED, "satisfied"),
        ("afternotok", JobState.COMPLETE, "never"),
    ],
)
def test_each_kind_against_each_state_of_the_job_it_names(kind: str, state: JobState, verdict: str) -> None:
    named = job(1, state)
    waiting = job(2, depends=f"{kind}:1")
    decisions = plan(named, waiting) if not state.terminal else plan(waiting, finished={1: state})
    if verdict == "satisfied":
        assert 2 in placed(decisions) and not cancelled(decisions)
    elif verdict == "waiting":
        assert 2 not in placed(decisions) and not cancelled(decisions)
        assert reasons(decisions)[2] == f"Dependency: waits for {kind}:1 ({state})"
    else:
        assert 2 not in placed(decisions)
        assert cancelled(decisions) == {2: f"DependencyNeverSatisfied: {kind}:1 (job 1 {state})"}


def test_every_condition_must_hold_with_commas_and_one_with_a_question_mark() -> None:
    running, complete = job(1, JobState.RUNNING), {2: JobState.COMPLETE}
    both = plan(running, job(3, depends="afterok:1:2"), finished=complete)
    assert placed(both) == [] and reasons(both)[3] == "Dependency: waits for afterok:1 (running)"
    either = plan(running, job(3, depends="afterok:1?afterok:2"), finished=complete)
    assert placed(either) == [3]
    # With '?', it can never hold only once no condition can.
    one_left = plan(running, job(3, depends="afterok:1?afternotok:2"), finished=complete)
    assert not cancelled(one_left) and reasons(one_left)[3] == "Dependency: waits for afterok:1 (running)"
    none_left = plan(job(3, depends="afterok:1?afternotok:2"), finished={1: JobState.FAILED, 2: JobState.COMPLETE})
    assert cancelled(none_left) == {
        3: "DependencyNeverSatisfied: afterok:1 (job 1 failed), afternotok:2 (job 2 complete)"
    }


def test_a_waiting_job_boots_nothing() -> None:
    """Not eligible: the boot planner does not see it."""
    policy = PolicySettings()

    def boots(*jobs: Job, finished: dict[int, JobState]) -> list[str]:
        snapshot = Snapshot(jobs=list(jobs), attempts=[], nodes=[], instance_types=[SMALL], finished=finished)
        return [b.instance_type for b in plan_pass(snapshot, NOW, policy).boots]

    assert boots(job(1, JobState.RUNNING), job(2, depends="afterok:1"), finished={}) == []
    assert boots(job(2, depends="afterok:1"), finished={1: JobState.COMPLETE}) == ["small"]


def test_a_never_satisfiable_dependency_cancels_a_whole_afterok_chain_in_one_pass() -> None:
    decisions = plan(
        job(2, depends="afterok:1"),
        job(3, depends="afterok:2"),
        job(4, depends="afterany:3"),  # runs: 3 ended (cancelled), in any state
        job(5, depends="afternotok:3"),  # runs: 3 was cancelled
        finished={1: JobState.FAILED},
    )
    assert cancelled(decisions) == {
        2: "DependencyNeverSatisfied: afterok:1 (job 1 failed)",
        3: "DependencyNeverSatisfied: afterok:2 (job 2 cancelled)",
    }
    assert sorted(placed(decisions)) == [4, 5]


def test_a_chain_named_out_of_id_order_is_cancelled_in_one_pass_too() -> None:
    """A workload may name a job of a higher id (it was submitted earlier)."""
    decisions = plan(job(2, depends="afterok:3"), job(3, depends="afterok:1"), finished={1: JobState.CANCELLED})
    assert set(cancelled(decisions)) == {2, 3}


def test_a_cancel_request_is_seen_by_the_jobs_that_depend_on_it_in_the_next_pass() -> None:
    """The store may refuse it (the job moved on meanwhile): the pass does not count on it."""
    decisions = plan(job(1, cancel_requested=True), job(2, depends="afterok:1"))
    assert cancelled(decisions) == {1: "cancelled by request"}
    assert reasons(decisions)[2] == "Dependency: waits for afterok:1 (queued)"


def test_without_kill_invalid_depend_the_job_stays_queued_with_slurms_reason() -> None:
    failed = {1: JobState.FAILED}
    decisions = plan(job(2, depends="afterok:1"), job(3, depends="afterok:2"), finished=failed, kill=False)
    assert cancelled(decisions) == {} and placed(decisions) == []
    assert reasons(decisions) == {
        2: "DependencyNeverSatisfied: afterok:1 (job 1 failed)",
        3: "Dependency: waits for afterok:2 (queued)",
    }


def test_a_dependency_on_no_job_can_never_be_satisfied() -> None:
    assert cancelled(plan(job(2, depends="afterany:1"))) == {2: "DependencyNeverSatisfied: afterany:1 (no job 1)"}


def test_a_reason_already_shown_is_not_annotated_again_and_a_held_job_keeps_its_own() -> None:
    shown = job(2, depends="afterok:1", wait_reason="Dependency: waits for afterok:1 (running)")
    held = job(3, depends="afterok:1", held=True, wait_reason="held by an operator")
    decisions = plan(job(1, JobState.RUNNING), shown, held)
    assert decisions.annotations == [] and placed(decisions) == []
    # A held job whose dependency can never hold is cancelled all the same.
    assert set(cancelled(plan(held, finished={1: JobState.FAILED}))) == {3}


def test_the_index_files_queued_jobs_with_a_dependency_only() -> None:
    index = SnapshotIndex()
    waiting, plain = job(2, depends="afterok:1"), job(3)
    index.put_job(waiting)
    index.put_job(plain)
    assert list(index.dependent) == [2]
    waiting.state = JobState.CLAIMED
    index.put_job(waiting)
    assert index.dependent == {}
    waiting.state = JobState.QUEUED  # requeued
    index.put_job(waiting)
    index.drop_job(2)
    assert index.dependent == {}


# ---- in front of Slurm ------------------------------------------------------------------------------


def test_in_front_of_slurm_a_job_is_submitted_only_once_its_dependency_holds() -> None:
    policy = PolicySettings()

    def batch_plan(*jobs: Job, finished: dict[int, JobState]) -> batch.BatchDecisions:
        snapshot = Snapshot(jobs=list(jobs), attempts=[], nodes=[], instance_types=[], finished=finished)
        return batch.plan_batch_pass(snapshot, NOW, policy, {}, 100)

    waiting = batch_plan(job(1, JobState.RUNNING), job(2, depends="afterok:1"), finished={})
    assert waiting.claims == [] and [(a.job_id, a.wait_reason) for a in waiting.annotations] == [
        (2, "Dependency: waits for afterok:1 (running)")
    ]
    assert batch_plan(job(2, depends="afterok:1"), finished={1: JobState.COMPLETE}).claims == [2]
    never = batch_plan(job(2, depends="afterok:1"), job(3), finished={1: JobState.FAILED})
    assert never.claims == [3]
    assert [(o.job_id, o.state, o.reason) for o in never.job_outcomes] == [
        (2, JobState.CANCELLED, "DependencyNeverSatisfied: afterok:1 (job 1 failed)")
    ]


# ---- job arrays ------------------------------------------------------------------------------------

ARRAY = {5: {0: 5, 1: 6, 2: 7}}  # array 5: tasks 0, 1, 2 are jobs 5, 6, 7


def at_submission(text: str) -> str:
    parsed = dependency.parse(text)
    assert parsed is not None
    return str(dependency.whole_arrays(parsed, ARRAY))


def test_a_condition_on_a_job_array_is_one_on_each_of_its_tasks_as_in_slurm() -> None:
    assert at_submission("afterok:5:9,afterany:6") == "afterok:5:6:7:9,afterany:6"
    assert at_submission("afterok:5_*") == "afterok:5:6:7"
    plain = dependency.parse("afterok:9")
    assert plain is not None and dependency.whole_arrays(plain, ARRAY) is plain
    with pytest.raises(ValueError, match="job 5 is a job array's id, which '\\?' \\(any one condition\\) cannot name"):
        at_submission("afterok:5?afternotok:9")


def test_afternotok_on_a_job_array_is_one_condition_on_the_whole_array() -> None:
    """Slurm runs `afternotok:ARRAY` once every task ended and one did not complete (a cleanup
    step); one condition per task would wait for every task to fail."""
    assert at_submission("afterok:9,afternotok:5") == "afterok:9,afternotok:5_*"
    assert at_submission("afternotok:5_*") == "afternotok:5_*"
    # One condition: '?' may name it.
    assert at_submission("afternotok:5?afterok:9") == "afterok:9?afternotok:5_*"
    # A task's own job id is that task alone, as before.
    assert at_submission("afternotok:6") == "afternotok:6"
    with pytest.raises(ValueError, match="afternotok:9_\\*: job 9 is not a job array's id"):
        at_submission("afternotok:9_*")


def test_a_task_named_a_t_is_that_task_alone_even_task_0_whose_job_id_is_the_arrays() -> None:
    assert at_submission("afterok:5_0") == "afterok:5"
    assert at_submission("afterok:5_2,afternotok:5_1") == "afterok:7,afternotok:6"
    assert at_submission("afterok:5_0?afterok:5_1") == "afterok:5?afterok:6"
    with pytest.raises(ValueError, match="afterok:5_3: job array 5 has no task 3"):
        at_submission("afterok:5_3")
    with pytest.raises(ValueError, match="afterok:9_0: job 9 is not a job array's id"):
        at_submission("afterok:9_0")


def cleanup(depends: str = "afternotok:5_*") -> Job:
    return job(9, depends=depends)


TASKS = {5: [5, 6, 7]}


def test_afternotok_on_an_array_waits_until_every_task_ended() -> None:
    # One task failed already: still waits for the others, as Slurm does.
    decisions = plan(job(6, JobState.RUNNING), job(7), cleanup(), finished={5: JobState.FAILED}, array_tasks=TASKS)
    assert 9 not in placed(decisions) and not cancelled(decisions)
    assert reasons(decisions)[9] == "Dependency: waits for afternotok:5_* (2 of array 5's 3 tasks not ended)"


@pytest.mark.parametrize("not_ok", [JobState.FAILED, JobState.CANCELLED])
def test_afternotok_on_an_array_runs_once_every_task_ended_and_one_did_not_complete(not_ok: JobState) -> None:
    finished = {5: JobState.COMPLETE, 6: not_ok, 7: JobState.COMPLETE}
    assert placed(plan(cleanup(), finished=finished, array_tasks=TASKS)) == [9]


def test_afternotok_on_an_array_whose_every_task_completed_is_never_satisfied() -> None:
    finished = dict.fromkeys([5, 6, 7], JobState.COMPLETE)
    decisions = plan(cleanup(), finished=finished, array_tasks=TASKS)
    assert cancelled(decisions) == {9: "DependencyNeverSatisfied: afternotok:5_* (every task of array 5 completed)"}
    kept = plan(cleanup(), finished=finished, array_tasks=TASKS, kill=False)
    assert not placed(kept) and not cancelled(kept)
    assert reasons(kept)[9] == "DependencyNeverSatisfied: afternotok:5_* (every task of array 5 completed)"
    # With '?', another condition may still hold.
    either = plan(job(8), cleanup("afternotok:5_*?afterok:8"), finished=finished, array_tasks=TASKS)
    assert not cancelled(either) and reasons(either)[9] == "Dependency: waits for afterok:8 (queued)"


def test_a_task_cancelled_for_its_own_dependency_counts_as_not_completed_in_the_same_pass() -> None:
    decisions = plan(
        job(7, depends="afterok:3"),
        cleanup(),
        finished={3: JobState.FAILED, 5: JobState.COMPLETE, 6: JobState.COMPLETE},
        array_tasks=TASKS,
    )
    assert cancelled(decisions) == {7: "DependencyNeverSatisfied: afterok:3 (job 3 failed)"}
    assert placed(decisions) == [9]


def test_afterok_and_afterany_on_an_array_still_mean_every_task() -> None:
    """Stored one condition per task: afterok is never satisfied once one task failed, even while
    the others run; afterany waits for every task to end."""
    afterok = job(9, depends=at_submission("afterok:5"))
    decisions = plan(job(6, JobState.RUNNING), job(7), afterok, finished={5: JobState.FAILED})
    assert cancelled(decisions) == {9: "DependencyNeverSatisfied: afterok:5 (job 5 failed)"}
    afterany = job(9, depends=at_submission("afterany:5"))
    waits = plan(job(7, JobState.RUNNING), afterany, finished={5: JobState.FAILED, 6: JobState.COMPLETE})
    assert reasons(waits)[9] == "Dependency: waits for afterany:7 (running)"
    ended = plan(afterany, finished={5: JobState.FAILED, 6: JobState.COMPLETE, 7: JobState.CANCELLED})
    assert placed(ended) == [9]


def test_a_condition_on_a_whole_array_of_another_kind_means_every_task() -> None:
    """A stored dependency has them per task; one built with them reads the same."""
    states = {5: JobState.COMPLETE, 6: JobState.COMPLETE}
    waits = plan(job(7, JobState.RUNNING), cleanup("afterok:5_*"), finished=states, array_tasks=TASKS)
    assert reasons(waits)[9] == "Dependency: waits for afterok:5_* (1 of array 5's 3 tasks to go)"
    failed = plan(cleanup("afterok:5_*"), finished={**states, 7: JobState.FAILED}, array_tasks=TASKS)
    assert cancelled(failed) == {9: "DependencyNeverSatisfied: afterok:5_* (job 7, a task of array 5, failed)"}
    assert cancelled(plan(cleanup("afternotok:4_*"))) == {
        9: "DependencyNeverSatisfied: afternotok:4_* (no job array 4)"
    }


def test_in_front_of_slurm_afternotok_on_an_array_is_judged_the_same() -> None:
    policy = PolicySettings()
    finished = {5: JobState.COMPLETE, 6: JobState.FAILED}
    snapshot = Snapshot(
        jobs=[job(7, JobState.RUNNING), cleanup()],
        attempts=[],
        nodes=[],
        instance_types=[],
        finished=finished,
        array_tasks=TASKS,
    )
    waiting = batch.plan_batch_pass(snapshot, NOW, policy, {}, 100)
    assert waiting.claims == []
    snapshot = Snapshot(
        jobs=[cleanup()],
        attempts=[],
        nodes=[],
        instance_types=[],
        finished={**finished, 7: JobState.COMPLETE},
        array_tasks=TASKS,
    )
    assert batch.plan_batch_pass(snapshot, NOW, policy, {}, 100).claims == [9]


def test_a_reference_to_a_job_of_the_submission_is_kept_in_the_text_and_made_the_id_it_stands_for() -> None:
    """`@N` names job N of the same submission (by place, from 0): the text keeps it until the
    store, knowing the ids, makes it that job's id, which on an array is the whole array."""
    parsed = dependency.parse("afterok:@0:12:@00,afternotok:@1_*,afterany:@1_3")
    assert parsed is not None
    assert str(parsed) == "afterok:12:@0,afternotok:@1_*,afterany:@1_3"
    assert dependency.parse(str(parsed)) == parsed
    assert parsed.job_ids() == (12,) and parsed.array_ids() == ()
    assert dependency.reference_problems(parsed, 2, [None, (0, 3), None]) == []
    resolved = dependency.resolve(parsed, [40, 41, 44])
    assert str(resolved) == "afterok:12:40,afterany:41_3,afternotok:41_*"
    assert str(dependency.whole_arrays(resolved, {41: {0: 41, 3: 42}})) == "afterok:12:40,afterany:42,afternotok:41_*"
