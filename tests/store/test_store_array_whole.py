"""A job array acted on as a whole, on SQLite and PostgreSQL, as Slurm's `scontrol hold 12`,
`release`, `requeue`, `update JobId=12` and `scancel 12` act on every task of array 12 in a state
the command applies to: one event per task changed, the others told of by state, and a change
refused for one task leaving every task as it was."""

from __future__ import annotations

import pytest

from corral.jobspec import JobRequest
from corral.store import InvalidJobs, NotFound, NotQueued, Store

from .storekit import NOW, add_node, after_exit, claim


def an_array_in_every_state(store: Store) -> tuple[int, int, int, list[int]]:
    """Array of five: task 0 complete, task 1 running, tasks 2 to 4 queued. (done, running, queued)."""
    done, running, *queued = store.submit([JobRequest(command=["sweep"], array="0-4")], NOW)
    add_node(store, "n1")
    attempt = claim(store, done)
    store.finish_attempt(attempt, "n1", 0, NOW + 1, after_exit(0, attempt))
    store.attempt_started(claim(store, running), "n1", 42, NOW + 1)
    return done, running, done, queued


def test_a_hold_of_the_arrays_id_holds_each_queued_task_with_an_event_each(store: Store) -> None:
    array, running, done, queued = an_array_in_every_state(store)
    (other,) = store.submit([JobRequest(command=["other"])], NOW)
    assert store.is_array(array) and not store.is_array(running) and not store.is_array(other)

    outcome = store.hold_array(array, NOW + 2, "input not ready")
    assert (outcome.tasks, outcome.changed) == (5, {"held": queued})
    assert outcome.unchanged == {"already complete": [done], "already running": [running]}
    rows = {row["id"]: row for row in store.list_job_rows()}
    assert [rows[task]["held"] for task in queued] == [True] * 3
    assert not rows[other]["held"] and rows[running]["state"] == "running"
    held = [(e["job_id"], e["message"]) for e in store.list_events(kind="job.held")]
    assert sorted(held) == [(task, f"held by an operator: input not ready (array {array})") for task in queued]

    again = store.hold_array(array, NOW + 3)
    assert again.changed == {} and again.unchanged["already held"] == queued
    assert len(store.list_events(kind="job.held")) == 3

    released = store.release_array(array, NOW + 4)
    assert released.changed == {"released": queued}
    assert released.unchanged == {"not held": [done, running]}
    assert not any(row["held"] for row in store.list_job_rows())
    assert len(store.list_events(kind="job.released")) == 3


def test_a_hold_of_an_array_with_no_queued_task_is_refused_and_changes_nothing(store: Store) -> None:
    first, second = store.submit([JobRequest(command=["x"], array="0-1")], NOW)
    add_node(store, "n1")
    claim(store, first)
    claim(store, second)
    with pytest.raises(NotQueued, match=f"job array {first} has no queued task to hold \\(2 already claimed\\)"):
        store.hold_array(first, NOW + 1)
    assert store.list_events(kind="job.held") == []
    with pytest.raises(NotFound, match=f"no job array {second}"):
        store.hold_array(second, NOW + 1)  # a task's own id is no array's


def test_an_update_of_the_arrays_id_changes_each_task_its_state_takes(store: Store) -> None:
    array, running, done, queued = an_array_in_every_state(store)
    outcome = store.update_array(array, {"vcpus": 2.0}, NOW + 2)
    assert outcome.changed == {"updated": queued}
    assert outcome.unchanged == {
        "already complete": [done],
        "running (vcpus change only while it is queued)": [running],
    }
    assert outcome.changes == {task: {"vcpus": [1.0, 2.0]} for task in queued}
    assert {row["id"]: row["spec"]["vcpus"] for row in store.list_job_rows()} == {
        done: 1.0,
        running: 1.0,
        **dict.fromkeys(queued, 2.0),
    }
    assert sorted(e["job_id"] for e in store.list_events(kind="job.updated")) == queued

    # A time limit also while it runs: the running task takes it too.
    limited = store.update_array(array, {"time_limit": 3600.0}, NOW + 3)
    assert limited.changed == {"updated": [running, *queued]}

    # Nothing changes when no task takes the change.
    store.update_array(array, {"vcpus": 2.0}, NOW + 4)  # (those queued had it: not refused)
    only_running = store.submit([JobRequest(command=["y"], array="0-1")], NOW)
    for task in only_running:
        claim(store, task)
    with pytest.raises(NotQueued, match="no task can take this change \\(2 claimed \\(ram change only while"):
        store.update_array(only_running[0], {"ram": 2048.0}, NOW + 5)


def test_an_update_refused_for_one_task_changes_no_task(store: Store) -> None:
    """TimeLimit=+1h on an array where one task has no time limit: refused, and the tasks before it
    in the array, which had one, keep theirs (nothing half-done)."""
    first, second, third = store.submit([JobRequest(command=["x"], array="0-2", time_limit=600)], NOW)
    store.update_job(third, {"time_limit": 0}, NOW + 1)
    before = {row["id"]: row["spec"]["time_limit"] for row in store.list_job_rows()}
    with pytest.raises(InvalidJobs, match=f"time_limit: job {third} has no time limit to add to"):
        store.update_array(first, {}, NOW + 2, time_limit_add=3600)
    assert {row["id"]: row["spec"]["time_limit"] for row in store.list_job_rows()} == before
    assert [e["job_id"] for e in store.list_events(kind="job.updated")] == [third]
    assert before[first] == before[second] == 600


def test_cancel_requeue_and_priority_of_the_arrays_id_act_on_each_task(store: Store) -> None:
    array, running, done, queued = an_array_in_every_state(store)
    requeued = store.requeue_array(array, NOW + 2)
    assert requeued.changed == {"queued again": [done], "requeue requested": [running]}
    assert requeued.unchanged == {"queued: nothing to requeue": queued}

    priority = store.set_array_priority(array, 7, NOW + 3)
    assert priority.changed == {"priority 7": [done, running, *queued]}
    assert {row["priority"] for row in store.list_job_rows()} == {7}

    cancelled = store.cancel_array(array, NOW + 4)
    assert cancelled.changed == {"cancel requested": [done, running, *queued]}
    assert store.cancel_array(array, NOW + 5).unchanged == {"cancel already requested": [done, running, *queued]}
    messages = {e["message"] for e in store.list_events(kind="job.cancel_requested")}
    assert messages == {f"cancel requested (array {array})"}
    assert len(store.list_events(kind="job.cancel_requested")) == 5


def test_in_front_of_slurm_a_hold_of_the_arrays_id_takes_back_its_claimed_tasks_too(store: Store) -> None:
    """A claimed task waits in Slurm's queue there, where `scontrol hold` would hold it."""
    first, second, third = store.submit([JobRequest(command=["x"], array="0-2")], NOW)
    add_node(store, "n1")
    claim(store, first)
    store.attempt_started(claim(store, second), "n1", None, NOW + 1)
    outcome = store.hold_array(first, NOW + 2, take_back=True)
    assert outcome.changed == {"taken back from Slurm to be held": [first], "held": [third]}
    assert outcome.unchanged == {"already running": [second]}
    row = store.job_row(first)
    assert (row["state"], row["requeue_requested"], row["requeue_hold"]) == ("claimed", True, True)
    assert store.hold_array(first, NOW + 3, take_back=True).unchanged == {
        "hold already requested": [first],
        "already running": [second],
        "already held": [third],
    }
