"""`corral requeue` (Slurm's scontrol requeue), carried out by the store and by the live loop's pass
over it, on SQLite and PostgreSQL: the run is stopped, the job is queued again and runs again,
and no failure is counted."""

from __future__ import annotations

import pytest

from corral.store import NotFound, Store

from .storekit import NOW, after_exit, attempts_to_kill, claim, event_kinds, submit
from .test_store_hold import World


def test_a_running_job_is_requeued_by_the_next_pass_without_a_failure_and_runs_again(store: Store) -> None:
    world = World(store)
    asked = store.request_requeue(world.job_id, NOW + 1)
    assert asked == {"id": world.job_id, "state": "running", "changed": True}
    assert store.request_requeue(world.job_id, NOW + 2)["changed"] is False  # asked already
    assert store.job_row(world.job_id)["requeue_requested"]

    world.pass_at(NOW + 3)
    row = store.job_row(world.job_id)
    assert row["state"] == "queued" and not row["requeue_requested"]
    assert row["temp_failures"] == 0 and row["perm_failures"] == 0 and row["retry_at"] is None
    assert row["wait_reason"] == "requeued by request"
    # The attempt ends cancelled: the agent's next poll no longer finds it active and kills it.
    assert world.attempt()["state"] == "cancelled" and world.attempt()["reason"] == "requeued by request"
    assert attempts_to_kill(store, "n1", [world.attempt_id]) == [world.attempt_id]
    assert world.messages("job.requeued") == ["requeued by request"]

    world.pass_at(NOW + 4)  # claimed again at once, on the node it had
    second = [a for a in store.attempts_of(world.job_id) if a["id"] != world.attempt_id]
    assert [a["state"] for a in second] == ["assigned"] and store.job_row(world.job_id)["attempt_count"] == 2
    assert event_kinds(store, world.job_id) == [
        "job.queued",
        "job.claimed",
        "job.running",
        "job.requeue_requested",
        "job.requeued",
        "job.claimed",
    ]


def test_a_requeue_asked_of_a_job_that_ends_first_is_dropped_with_the_run(store: Store) -> None:
    """The run exits before the pass: the job completes, and the request goes with it."""
    world = World(store)
    store.request_requeue(world.job_id, NOW + 1)
    store.finish_attempt(world.attempt_id, "n1", 0, NOW + 2, after_exit(0, world.attempt_id))
    world.pass_at(NOW + 3)
    row = store.job_row(world.job_id)
    assert row["state"] == "complete" and not row["requeue_requested"]


def test_a_cancel_outranks_a_requeue(store: Store) -> None:
    world = World(store)
    store.request_requeue(world.job_id, NOW + 1)
    store.request_cancel(world.job_id, NOW + 1)
    world.pass_at(NOW + 2)
    assert store.job_row(world.job_id)["state"] == "cancelled"


def test_a_queued_job_has_nothing_to_requeue(store: Store) -> None:
    [queued] = submit(store)
    assert store.request_requeue(queued, NOW) == {"id": queued, "state": "queued", "changed": False}
    with pytest.raises(NotFound):
        store.request_requeue(queued + 100, NOW)
    assert not store.job_row(queued)["requeue_requested"] and event_kinds(store, queued) == ["job.queued"]


def test_a_finished_job_is_queued_again_at_once_as_if_submitted_now(store: Store) -> None:
    """Slurm requeues a finished batch job too: a failed run fixed (its input, or its request with
    corral update) runs again under the same id, so what depends on it can still go on."""
    failed, cancelled = submit(store, count=2, max_retries=1)
    attempt = claim(store, failed)
    store.finish_attempt(attempt, "n1", 3, NOW + 1, after_exit(3, attempt))
    row = store.job_row(failed)
    assert row["state"] == "queued" and row["perm_failures"] == 1  # its one retry, then failed for good:
    attempt = claim(store, failed, now=NOW + 2)
    store.finish_attempt(attempt, "n1", 3, NOW + 3, after_exit(3, attempt))
    assert store.job_row(failed)["state"] == "failed"

    assert store.request_requeue(failed, NOW + 10) == {"id": failed, "state": "queued", "changed": True}
    row = store.job_row(failed)
    assert row["state"] == "queued" and row["submitted_at"] == NOW + 10 and row["wait_reason"] == ""
    assert row["exit_code"] is None and row["finished_at"] is None and row["node_id"] is None
    assert row["perm_failures"] == 0 and row["temp_failures"] == 0  # a fresh budget: its retry again
    assert row["attempt_count"] == 2  # its attempts stay its record
    said = [e["message"] for e in store.list_events(job_id=failed) if e["kind"] == "job.requeued"]
    assert said[-1] == "queued again by an operator after it ended (failed, exit 3)"
    assert claim(store, failed, now=NOW + 11) > 0


def test_a_job_cancelled_by_priority_0_is_requeued_with_its_submitted_priority(store: Store) -> None:
    """Else the next pass would cancel it again; requeued held, it waits for a release."""
    world = World(store, priority=3)
    store.set_priority(world.job_id, 0, NOW + 1)
    world.pass_at(NOW + 2)
    assert store.job_row(world.job_id)["state"] == "cancelled"
    assert store.request_requeue(world.job_id, NOW + 3, hold=True)["changed"]
    row = store.job_row(world.job_id)
    assert row["state"] == "queued" and row["priority"] == 3 and row["held"]
    assert row["wait_reason"] == "held by an operator: requeued with --hold"
    assert event_kinds(store, world.job_id)[-2:] == ["job.requeued", "job.held"]
    world.pass_at(NOW + 4)
    assert store.job_row(world.job_id)["state"] == "queued"  # held: neither cancelled nor run


def test_requeue_with_hold_queues_the_job_held_until_released(store: Store) -> None:
    """Slurm's scontrol requeuehold: stopped, queued, held; a release runs it again."""
    world = World(store)
    store.request_requeue(world.job_id, NOW + 1, hold=True)
    world.pass_at(NOW + 2)
    row = store.job_row(world.job_id)
    assert row["state"] == "queued" and row["held"] and not row["requeue_hold"]
    assert row["wait_reason"] == "held by an operator: requeued with --hold" and row["temp_failures"] == 0
    world.pass_at(NOW + 3)
    assert len(store.attempts_of(world.job_id)) == 1  # held: not claimed again
    assert world.messages("job.requeue_requested") == ["requeue and hold requested"]
    assert world.messages("job.held") == ["held by an operator: requeued with --hold"]
    store.release(world.job_id, NOW + 4)
    world.pass_at(NOW + 5)
    assert store.job_row(world.job_id)["state"] == "claimed" and len(store.attempts_of(world.job_id)) == 2
