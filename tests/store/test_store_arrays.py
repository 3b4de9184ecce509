"""Job arrays in the store, on SQLite and PostgreSQL: one submission makes a job per task in one
transaction, found by the array's id; the snapshot and the agent's work carry each task's place;
the throttle changes on every task; a cancel by array marks its open tasks; a dependency names a
whole array or one task."""

from __future__ import annotations

import pytest

from corral.core.model import JobState
from corral.jobspec import JobRequest
from corral.store import InvalidJobs, JobFilter, NotFound, Store

from .storekit import NOW, SMALL, add_node, after_exit, claim


def test_an_array_is_a_job_per_task_sharing_the_first_tasks_id(store: Store) -> None:
    before, *tasks, after = store.submit(
        [
            JobRequest(command=["x"]),
            JobRequest(command=["sweep"], name="sweep", array="1,3,5-6%2"),
            JobRequest(command=["y"]),
        ],
        NOW,
    )
    assert len(tasks) == 4
    rows = store.list_job_rows(picked=JobFilter(array=tasks[0]))
    assert [(r["id"], r["array_job_id"], r["array_task_id"], r["array_throttle"]) for r in rows] == [
        (job_id, tasks[0], task_id, 2) for job_id, task_id in zip(tasks, (1, 3, 5, 6), strict=True)
    ]
    assert store.job_row(before)["array_job_id"] is None and store.job_row(after)["array_task_id"] is None
    queued = [e["message"] for e in store.list_events(job_id=tasks[2], kind="job.queued")]
    assert queued == [f"task {tasks[0]}_5 of array 1,3,5-6%2: sweep: sweep"]

    snapshot = store.load_snapshot("d1", [SMALL], NOW)
    by_id = {job.id: job for job in snapshot.jobs}
    assert str(by_id[tasks[3]].array) == f"{tasks[0]}_6" and by_id[tasks[3]].array_throttle == 2
    assert by_id[before].array is None

    add_node(store, "n1")
    claim(store, tasks[1])
    (work,) = store.work_for("n1")
    assert {k: v for k, v in work.env.items() if k.startswith("CORRAL_ARRAY")} == {
        "CORRAL_ARRAY_JOB_ID": str(tasks[0]),
        "CORRAL_ARRAY_TASK_ID": "3",
        "CORRAL_ARRAY_TASK_COUNT": "4",
        "CORRAL_ARRAY_TASK_MIN": "1",
        "CORRAL_ARRAY_TASK_MAX": "6",
    }


def test_an_array_with_a_bad_dependency_stores_no_task(store: Store) -> None:
    with pytest.raises(InvalidJobs, match="jobs.0.dependency: no job 999"):
        store.submit([JobRequest(command=["x"], array="0-9", dependency="afterok:999")], NOW)
    assert store.list_job_rows() == []


def test_the_throttle_changes_on_every_task_and_the_next_snapshot_reads_it(store: Store) -> None:
    first, *_ = store.submit([JobRequest(command=["x"], array="0-2%1")], NOW)
    changed = store.set_array_throttle(first, 3, NOW + 1)
    assert changed == {"array_job_id": first, "throttle": 3, "tasks": 3, "open": 3}
    assert {job.array_throttle for job in store.load_snapshot("d1", [SMALL], NOW).jobs} == {3}
    assert store.set_array_throttle(first, 0, NOW + 2)["throttle"] is None  # no limit
    assert {job.array_throttle for job in store.load_snapshot("d1", [SMALL], NOW).jobs} == {None}
    said = [e["message"] for e in store.list_events(job_id=first, kind="job.array_throttle")]
    assert said == ["array throttle set to 3, 3 tasks", "array throttle removed (no limit), 3 tasks"]
    with pytest.raises(NotFound, match="no job array"):
        store.set_array_throttle(first + 1, 2, NOW)  # a task's id, not its array's


def test_a_cancel_by_array_marks_its_open_tasks_only(store: Store) -> None:
    done, running, queued = store.submit([JobRequest(command=["x"], array="0-2")], NOW)
    (other,) = store.submit([JobRequest(command=["y"])], NOW)
    add_node(store, "n1")
    attempt = claim(store, done)
    store.finish_attempt(attempt, "n1", 0, NOW + 1, after_exit(0, attempt))
    claim(store, running)
    assert store.request_cancel_matching(NOW + 2, JobFilter(array=done)) == [running, queued]
    assert not store.job_row(other)["cancel_requested"]
    messages = [e["message"] for e in store.list_events(job_id=queued, kind="job.cancel_requested")]
    assert messages == [f"cancel requested (array {done})"]


def test_a_dependency_on_an_array_is_stored_as_one_on_each_of_its_tasks(store: Store) -> None:
    first, second, third = store.submit([JobRequest(command=["x"], array="0-2")], NOW)
    (after,) = store.submit([JobRequest(command=["y"], dependency=f"afterok:{first}")], NOW)
    row = store.job_row(after)
    assert row["spec"]["dependency"] == f"afterok:{first}:{second}:{third}"
    depends_on, _ = store.dependency_rows(after)
    assert [d["job_id"] for d in depends_on] == [first, second, third]
    with pytest.raises(InvalidJobs, match=f"jobs.0.dependency: .*job {first} is a job array's id"):
        store.submit([JobRequest(command=["z"], dependency=f"afterok:{first}?afterany:{after}")], NOW)


def test_a_job_array_under_any_one_condition_of_one_kind_is_refused(store: Store) -> None:
    # `afterok:A?afterok:B` was stored as `afterok:A:B` (every one), so the '?' check never saw it.
    first, _, _ = store.submit([JobRequest(command=["x"], array="0-2")], NOW)
    (other,) = store.submit([JobRequest(command=["y"])], NOW)
    with pytest.raises(InvalidJobs, match=f"jobs.0.dependency: .*job {first} is a job array's id"):
        store.submit([JobRequest(command=["z"], dependency=f"afterok:{first}?afterok:{other}")], NOW)


def test_afternotok_on_a_job_array_is_stored_as_one_condition_on_the_whole_array(store: Store) -> None:
    """A cleanup step `afternotok:ARRAY` runs, as in Slurm, once every task ended and one did not
    complete: one condition on the array (`A_*`), not one per task (which waited for every task
    to fail)."""
    first, second, third = store.submit([JobRequest(command=["x"], array="0-2")], NOW)
    cleanup, spelled = store.submit(
        [
            JobRequest(command=["cleanup"], dependency=f"afternotok:{first}"),
            JobRequest(command=["cleanup"], dependency=f"afternotok:{first}_*"),
        ],
        NOW,
    )
    for job_id in (cleanup, spelled):
        assert store.job_row(job_id)["spec"]["dependency"] == f"afternotok:{first}_*"
        depends_on, _ = store.dependency_rows(job_id)
        assert [(d["kind"], d["job_id"]) for d in depends_on] == [
            ("afternotok", first),
            ("afternotok", second),
            ("afternotok", third),
        ]
    _, needed_by = store.dependency_rows(third)
    assert [d["job_id"] for d in needed_by] == [cleanup, spelled]
    # A task's own job id is that task alone, as before.
    (on_task,) = store.submit([JobRequest(command=["y"], dependency=f"afternotok:{second}")], NOW)
    assert store.job_row(on_task)["spec"]["dependency"] == f"afternotok:{second}"


def test_a_task_named_a_t_is_that_task_alone_even_task_0(store: Store) -> None:
    """`A_0` is task 0, whose job id is also the array's: there was no way to name it alone."""
    first, _, third = store.submit([JobRequest(command=["x"], array="0-2")], NOW)
    task_0, task_2 = store.submit(
        [
            JobRequest(command=["y"], dependency=f"afterok:{first}_0"),
            JobRequest(command=["z"], dependency=f"afterok:{first}_2"),
        ],
        NOW,
    )
    assert store.job_row(task_0)["spec"]["dependency"] == f"afterok:{first}"
    assert [d["job_id"] for d in store.dependency_rows(task_0)[0]] == [first]
    assert store.job_row(task_2)["spec"]["dependency"] == f"afterok:{third}"


def test_a_task_or_array_that_is_not_there_is_refused_and_nothing_of_the_submission_is_stored(store: Store) -> None:
    first, _, _ = store.submit([JobRequest(command=["x"], array="0-2")], NOW)
    (plain,) = store.submit([JobRequest(command=["y"])], NOW)
    before = len(store.list_job_rows())
    for dependency, says in (
        (f"afterok:{first}_7", f"jobs.1.dependency: afterok:{first}_7: job array {first} has no task 7"),
        (f"afternotok:{plain}_*", f"jobs.1.dependency: afternotok:{plain}_\\*: job {plain} is not a job array's id"),
        (f"afterok:{plain}_0", f"jobs.1.dependency: afterok:{plain}_0: job {plain} is not a job array's id"),
        ("afterok:9999_0", "jobs.1.dependency: no job 9999"),
    ):
        with pytest.raises(InvalidJobs, match=says):
            store.submit([JobRequest(command=["ok"]), JobRequest(command=["z"], dependency=dependency)], NOW)
    assert len(store.list_job_rows()) == before


def test_the_snapshot_has_the_tasks_of_an_array_a_queued_job_names_whole(store: Store) -> None:
    add_node(store, "n1")
    first, second, third = store.submit([JobRequest(command=["x"], array="0-2")], NOW)
    store.submit([JobRequest(command=["cleanup"], dependency=f"afternotok:{first}")], NOW)
    for job_id, code in ((first, 0), (second, 3)):
        attempt = claim(store, job_id)
        assert store.attempt_started(attempt, "n1", 1, NOW)
        store.finish_attempt(attempt, "n1", code, NOW + 1, after_exit(code, attempt))
    snapshot = store.load_snapshot("d1", [SMALL], NOW + 2)
    assert snapshot.array_tasks == {first: [first, second, third]}
    assert snapshot.finished == {first: JobState.COMPLETE, second: JobState.FAILED}
