"""A job that names an earlier job of its own submission (`afterok:@0`), on SQLite and PostgreSQL:
a workflow's levels submitted at once, each reference made the job id it stands for in the
transaction that stores the submission, so that the rows, the snapshot and `corral job` see plain
job ids; a reference to the job itself, a later job, no job, or in a submission of one job is
refused naming the job and the reference, and nothing of the submission is stored."""

from __future__ import annotations

import pytest

from corral.jobspec import JobRequest
from corral.store import InvalidJobs, Store

from .storekit import NOW, SMALL, count_rows, request, snapshot_of_tables, submit

KEY = "r" * 32


def test_a_two_level_dag_in_one_submission_is_stored_with_the_job_ids_its_references_stand_for(store: Store) -> None:
    [earlier] = submit(store)
    prepare, fetch, merge, report = store.submit(
        [
            request("prepare"),
            request("fetch"),
            request("merge", dependency="afterok:@0:@1"),
            request("report", dependency={"afterany": ["@2", earlier]}),
        ],
        NOW,
    )
    assert [prepare, fetch, merge, report] == list(range(earlier + 1, earlier + 5))
    assert store.job_row(merge)["spec"]["dependency"] == f"afterok:{prepare}:{fetch}"
    assert store.job_row(report)["spec"]["dependency"] == f"afterany:{earlier}:{merge}"
    depends_on, _ = store.dependency_rows(merge)
    assert depends_on == [
        {"kind": "afterok", "job_id": prepare, "state": "queued"},
        {"kind": "afterok", "job_id": fetch, "state": "queued"},
    ]
    assert store.dependency_rows(merge)[1] == [{"kind": "afterany", "job_id": report, "state": "queued"}]
    jobs = {job.id: job for job in store.load_snapshot("d1", [SMALL], NOW).jobs}
    judged = jobs[merge].dependency
    assert judged is not None and judged.references == () and str(judged) == f"afterok:{prepare}:{fetch}"


def test_a_reference_to_an_array_of_the_submission_reads_as_its_id_would(store: Store) -> None:
    """`@N` is the id job N gets: on an array, the array's id, the whole array (after, afterany and
    afterok one condition per task, afternotok one on the array, `A_*`); `@N_T` its task T."""
    ids = store.submit(
        [
            JobRequest(command=["sweep"], array="0-2"),
            request("all ok", dependency="afterok:@0"),
            request("cleanup", dependency="afternotok:@0_*"),
            request("after task 2", dependency="afterok:@0_2"),
            request("either", dependency="afternotok:@0?afterok:@3"),
        ],
        NOW,
    )
    tasks, (all_ok, cleanup, after_task_2, either) = ids[:3], ids[3:]
    array = tasks[0]
    spec_of = {job_id: store.job_row(job_id)["spec"]["dependency"] for job_id in ids[3:]}
    assert spec_of == {
        all_ok: "afterok:" + ":".join(map(str, tasks)),
        cleanup: f"afternotok:{array}_*",
        after_task_2: f"afterok:{tasks[2]}",
        either: f"afterok:{after_task_2}?afternotok:{array}_*",
    }
    assert [row["job_id"] for row in store.dependency_rows(cleanup)[0]] == tasks
    snapshot = store.load_snapshot("d1", [SMALL], NOW)
    assert snapshot.array_tasks == {array: tasks}


def test_a_reference_to_itself_a_later_job_or_no_job_is_refused_naming_both_and_nothing_is_stored(
    store: Store,
) -> None:
    [earlier] = submit(store)
    before = snapshot_of_tables(store)
    batch = [
        request("first", dependency="afterok:@1"),
        request("self", dependency=f"afterok:{earlier}:@1"),
        request("sweep", array="0-1"),
        request("later and none", dependency="afterany:@0,afterok:@4:@9"),
        request("not an array", dependency="afterok:@0_1,afternotok:@2_5:@1_*"),
        request("any one", dependency="afterok:@2?afterok:@0"),
    ]
    with pytest.raises(InvalidJobs) as refused:
        store.submit(batch, NOW + 1)
    assert refused.value.problems == [
        "jobs.0.dependency: afterok:@1: names a later job of the submission: a job names only earlier ones, so"
        " that no cycle can form; the submission's first job names none of it",
        "jobs.1.dependency: afterok:@1: names this job itself; this job (@1) may name @0",
        "jobs.3.dependency: afterok:@4: names a later job of the submission: a job names only earlier ones, so"
        " that no cycle can form; this job (@3) may name @0 to @2",
        "jobs.3.dependency: afterok:@9: the submission has 6 jobs (@0 to @5); this job (@3) may name @0 to @2",
        "jobs.4.dependency: afterok:@0_1: job @0 of the submission is not a job array",
        "jobs.4.dependency: afternotok:@2_5: job array @2 of the submission has no task 5",
        "jobs.4.dependency: afternotok:@1_*: job @1 of the submission is not a job array",
        "jobs.5.dependency: afterok:@2: job @2 of the submission is a job array, which '?' (any one condition)"
        " cannot name whole with after, afterany or afterok (one condition per task: any single task would"
        " satisfy it); use ',' or name its tasks (@N_T)",
    ]
    assert snapshot_of_tables(store) == before


def test_a_reference_in_a_submission_of_one_job_is_refused(store: Store) -> None:
    before = snapshot_of_tables(store)
    for alone in (request(dependency="afterok:@0"), request(array="0-3", dependency="afterany:@0_1")):
        with pytest.raises(InvalidJobs) as refused:
            store.submit([alone], NOW)
        [problem] = refused.value.problems
        assert problem.startswith("jobs.0.dependency: ")
        assert problem.endswith(
            ": @N names an earlier job of the same submission, and this submission has one job: name a job submitted"
            " before by its id"
        )
    assert snapshot_of_tables(store) == before


def test_a_submission_refused_after_its_rows_are_in_stores_nothing(store: Store) -> None:
    """A reference is made a job id once the rows are in; a problem found then (here an array
    named by its id without the task named) undoes the whole submission."""
    [array, _] = store.submit([JobRequest(command=["sweep"], array="0-1")], NOW)
    before = snapshot_of_tables(store)
    with pytest.raises(InvalidJobs) as refused:
        store.submit([request("a"), request("b", dependency=f"afterok:@0:{array}_7")], NOW)
    assert refused.value.problems == [f"jobs.1.dependency: afterok:{array}_7: job array {array} has no task 7"]
    assert snapshot_of_tables(store) == before


def test_a_submission_with_references_sent_again_with_its_key_answers_the_same_ids(store: Store) -> None:
    jobs = [request("a"), request("b", dependency="afterok:@0")]
    first = store.submit(jobs, NOW, KEY)
    assert store.submit(jobs, NOW + 30, KEY) == first
    assert count_rows(store, "jobs") == 2 and count_rows(store, "job_dependencies") == 1
    assert store.job_row(first[1])["spec"]["dependency"] == f"afterok:{first[0]}"


def test_a_reference_is_no_change_an_update_takes(store: Store) -> None:
    a, _ = store.submit([request("a"), request("b")], NOW)
    with pytest.raises(InvalidJobs, match="dependency: cannot be changed"):
        store.update_job(a, {"dependency": "afterok:@0"}, NOW)
