"""Job dependencies in the store, on SQLite and PostgreSQL: a submission naming no job stores
nothing; the snapshot carries the end states of the finished jobs that queued jobs name; the live
loop's pass over it runs a dependent job only after, and cancels one that can never run."""

from __future__ import annotations

import pytest

from corral.cloud.sim import SimCloud
from corral.config import Config
from corral.core.model import JobState
from corral.loop import ControlLoop
from corral.sim.settings import SimSettings
from corral.store import InvalidJobs, Store

from .storekit import NOW, SMALL, add_node, after_exit, claim, event_kinds, request, snapshot_of_tables, submit


def test_a_dependency_on_no_job_stores_nothing_of_the_batch_and_names_the_job(store: Store) -> None:
    [first] = submit(store)
    before = snapshot_of_tables(store)
    batch = [
        request("a", dependency=f"afterok:{first}"),
        request("b", dependency=f"afterok:{first}:{first + 7},afterany:{first + 9}"),
    ]
    with pytest.raises(InvalidJobs) as refused:
        store.submit(batch, NOW + 1)
    assert refused.value.problems == [
        f"jobs.1.dependency: no job {first + 7}",
        f"jobs.1.dependency: no job {first + 9}",
    ]
    assert snapshot_of_tables(store) == before


def test_the_dependency_is_stored_as_slurms_text_with_one_row_per_condition(store: Store) -> None:
    first, second = submit(store, 2)
    [third] = store.submit([request(dependency={"afterany": second, "afterok": [first, second]})], NOW)
    assert store.job_row(third)["spec"]["dependency"] == f"afterany:{second},afterok:{first}:{second}"
    depends_on, needed_by = store.dependency_rows(third)
    assert depends_on == [
        {"kind": "afterok", "job_id": first, "state": "queued"},
        {"kind": "afterany", "job_id": second, "state": "queued"},
        {"kind": "afterok", "job_id": second, "state": "queued"},
    ]
    assert needed_by == []
    assert store.dependency_rows(second)[1] == [
        {"kind": "afterany", "job_id": third, "state": "queued"},
        {"kind": "afterok", "job_id": third, "state": "queued"},
    ]


def test_the_snapshot_has_the_end_states_of_finished_jobs_that_queued_jobs_name(store: Store) -> None:
    add_node(store, "n1")
    done, failed, running, unnamed = submit(store, 4)
    [waiting] = store.submit([request(dependency=f"afterok:{done}:{failed}:{running}")], NOW)
    for job_id, code in ((done, 0), (failed, 3), (unnamed, 0)):
        attempt = claim(store, job_id)
        assert store.attempt_started(attempt, "n1", 1, NOW)
        store.finish_attempt(attempt, "n1", code, NOW + 1, after_exit(code, attempt))
    assert store.attempt_started(claim(store, running), "n1", 1, NOW)
    snapshot = store.load_snapshot("d1", [SMALL], NOW)
    assert snapshot.finished == {done: JobState.COMPLETE, failed: JobState.FAILED}
    [job] = [j for j in snapshot.jobs if j.id == waiting]
    assert job.dependency is not None and str(job.dependency) == f"afterok:{done}:{failed}:{running}"


def test_the_snapshot_reads_no_end_states_while_no_queued_job_has_a_dependency(store: Store) -> None:
    add_node(store, "n1")
    [done] = submit(store)
    [dependent] = store.submit([request(dependency=f"afterany:{done}")], NOW)
    attempt = claim(store, done)
    store.finish_attempt(attempt, "n1", 0, NOW + 1, after_exit(0, attempt))
    claim(store, dependent)  # no longer queued: its dependency is behind it
    assert store.load_snapshot("d1", [SMALL], NOW).finished == {}


def test_the_live_loop_runs_a_dependent_job_after_and_cancels_one_that_can_never_run(store: Store) -> None:
    clock = [NOW]
    config = Config.model_validate(
        {"instance_types": [{"name": "small", "vcpus": 4, "ram": "8GiB", "price_per_hour": 0.1}]}
    )
    cloud = SimCloud(config.core_instance_types(), SimSettings(), lambda: clock[0])
    loop = ControlLoop(store, cloud, config, "d1", lambda: clock[0])
    add_node(store, "n1", NOW)
    ok, bad = submit(store, 2)
    after_ok, after_bad = store.submit([request(dependency=f"afterok:{ok}"), request(dependency=f"afterok:{bad}")], NOW)
    [chained] = store.submit([request(dependency=f"afterok:{after_bad}")], NOW)
    loop.run_pass()
    [ok_attempt], [bad_attempt] = store.attempts_of(ok), store.attempts_of(bad)
    assert all(store.attempts_of(j) == [] for j in (after_ok, after_bad, chained))
    assert store.job_row(after_ok)["wait_reason"] == f"Dependency: waits for afterok:{ok} (queued)"
    assert store.oldest_wait(NOW + 1) is None  # the queued ones all wait for a dependency

    for attempt, code in ((ok_attempt, 0), (bad_attempt, 1)):
        assert store.attempt_started(attempt["id"], "n1", 1, NOW + 1)
        store.finish_attempt(attempt["id"], "n1", code, NOW + 2, after_exit(code, attempt["id"]))
    clock[0] = NOW + 3
    loop.run_pass()
    assert [a["state"] for a in store.attempts_of(after_ok)] == ["assigned"]
    for job_id, named, state in ((after_bad, bad, "failed"), (chained, after_bad, "cancelled")):
        row = store.job_row(job_id)
        assert row["state"] == "cancelled" and store.attempts_of(job_id) == []
        assert event_kinds(store, job_id) == ["job.queued", "job.cancelled"]
        [event] = store.list_events(job_id=job_id, kind="job.cancelled")
        assert event["message"] == f"DependencyNeverSatisfied: afterok:{named} (job {named} {state})"


def test_the_live_loop_runs_an_afternotok_cleanup_once_every_task_ended_and_one_failed(store: Store) -> None:
    """Slurm's reading of afternotok on an array: a cleanup step waits while a task runs (although
    one failed already), runs once all ended; after an array whose every task completed, it is
    cancelled (DependencyNeverSatisfied)."""
    clock = [NOW]
    config = Config.model_validate(
        {"instance_types": [{"name": "small", "vcpus": 4, "ram": "8GiB", "price_per_hour": 0.1}]}
    )
    cloud = SimCloud(config.core_instance_types(), SimSettings(), lambda: clock[0])
    loop = ControlLoop(store, cloud, config, "d1", lambda: clock[0])
    add_node(store, "n1", NOW)
    sweep = store.submit([request(array="0-1")], NOW)
    all_ok = store.submit([request(array="0-1")], NOW)
    cleanup, never = store.submit(
        [request(dependency=f"afternotok:{sweep[0]}"), request(dependency=f"afternotok:{all_ok[0]}")], NOW
    )
    loop.run_pass()
    assert store.attempts_of(cleanup) == [] and store.attempts_of(never) == []

    def finish(job_id: int, code: int) -> None:
        [attempt] = store.attempts_of(job_id)
        assert store.attempt_started(attempt["id"], "n1", 1, clock[0])
        store.finish_attempt(attempt["id"], "n1", code, clock[0], after_exit(code, attempt["id"]))

    for job_id, code in ((sweep[0], 1), (all_ok[0], 0), (all_ok[1], 0)):
        finish(job_id, code)
    clock[0] = NOW + 1
    loop.run_pass()
    waiting = store.job_row(cleanup)
    assert waiting["state"] == "queued" and store.attempts_of(cleanup) == []
    assert (
        waiting["wait_reason"]
        == f"Dependency: waits for afternotok:{sweep[0]}_* (1 of array {sweep[0]}'s 2 tasks not ended)"
    )
    assert store.job_row(never)["state"] == "cancelled"
    [event] = store.list_events(job_id=never, kind="job.cancelled")
    assert event["message"] == (
        f"DependencyNeverSatisfied: afternotok:{all_ok[0]}_* (every task of array {all_ok[0]} completed)"
    )

    finish(sweep[1], 0)
    clock[0] = NOW + 2
    loop.run_pass()
    assert [a["state"] for a in store.attempts_of(cleanup)] == ["assigned"]
