"""`corral requeue` (Slurm's scontrol requeue), carried out by the store and by the live loop's pass
over it, on SQLite and PostgreSQL: the run is stopped, the job is queued again and runs again,
and no failure is counted."""

from __future__ import annotations

import pytest

from corral.store import NotFound, NotRunning, Store

from .storekit import NOW, after_exit, claim, event_kinds, submit
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
    assert store.attempts_to_kill("n1", [world.attempt_id]) == [world.attempt_id]
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


def test_only_a_claimed_or_running_job_is_requeued(store: Store) -> None:
    queued, done = submit(store, count=2)
    assert store.request_requeue(queued, NOW) == {"id": queued, "state": "queued", "changed": False}
    attempt = claim(store, done)
    store.finish_attempt(attempt, "n1", 1, NOW + 1, after_exit(1, attempt))
    with pytest.raises(NotRunning, match=f"job {done} is failed: only a claimed or running job can be requeued"):
        store.request_requeue(done, NOW + 2)
    with pytest.raises(NotFound):
        store.request_requeue(done + 100, NOW)
    assert not store.job_row(queued)["requeue_requested"] and store.job_row(done)["state"] == "failed"


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
