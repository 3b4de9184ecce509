"""Held jobs and the job action on node failure (seed 002 §5.4.6), carried out by the store and by
the live loop's pass over it, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest

from corral.cloud.sim import SimCloud
from corral.config import Config
from corral.core.model import ZERO, JobState
from corral.core.snapshot import Annotation
from corral.jobspec import JobRequest
from corral.loop import ControlLoop
from corral.sim.settings import SimSettings
from corral.store import NotFound, NotQueued, Store

from .storekit import NOW, SMALL, add_node, claim, event_kinds, submit

# ---- hold and release -------------------------------------------------------------------------


def test_a_held_job_stays_queued_is_not_claimed_and_is_released_with_an_event_each(store: Store) -> None:
    [job_id] = submit(store)
    held = store.hold(job_id, NOW + 1, "disk quota")
    assert held == {"id": job_id, "state": "queued", "held": True, "changed": True}
    row = store.job_row(job_id)
    assert row["held"] and row["state"] == "queued" and row["wait_reason"] == "held by an operator: disk quota"
    assert store.claim(job_id, "d1", ["n1"], SMALL.capacity, NOW + 2) is None
    # A pass that read the job before the hold does not write over its reason.
    store.annotate_many([Annotation(job_id, "waiting for resources")], {}, NOW + 2)
    assert store.job_row(job_id)["wait_reason"] == "held by an operator: disk quota"
    snapshot_job = next(iter(store.load_snapshot("d1", [SMALL], NOW).jobs))
    assert snapshot_job.held

    assert store.hold(job_id, NOW + 3)["changed"] is False  # already held: nothing written
    released = store.release(job_id, NOW + 4)
    assert released == {"id": job_id, "state": "queued", "held": False, "changed": True}
    assert store.release(job_id, NOW + 5)["changed"] is False
    row = store.job_row(job_id)
    assert not row["held"] and row["wait_reason"] == ""
    assert not next(iter(store.load_snapshot("d1", [SMALL], NOW).jobs)).held
    assert event_kinds(store, job_id) == ["job.queued", "job.held", "job.released"]
    messages = [e["message"] for e in store.list_events(job_id=job_id)]
    assert messages[1:] == ["held by an operator: disk quota", "released by an operator"]
    assert claim(store, job_id) > 0


def test_only_a_queued_job_can_be_held(store: Store) -> None:
    [job_id] = submit(store)
    claim(store, job_id)
    with pytest.raises(NotQueued, match=f"job {job_id} is claimed: only a queued job can be held"):
        store.hold(job_id, NOW)
    with pytest.raises(NotFound):
        store.hold(job_id + 100, NOW)
    with pytest.raises(NotFound):
        store.release(job_id + 100, NOW)
    assert not store.job_row(job_id)["held"] and event_kinds(store, job_id) == ["job.queued", "job.claimed"]


def test_a_refused_hold_of_an_arrays_first_task_names_the_task_not_the_whole_array(store: Store) -> None:
    """`corral hold 12_0` of a running task said `corral requeue --hold 12 stops its run`: 12 is the
    array's id too, and that command would have stopped every task of it."""
    first, second = store.submit([JobRequest(command=["x"], array="0-1")], NOW)
    for task in (first, second):
        claim(store, task)
    with pytest.raises(NotQueued, match=rf"job {first} is claimed: .* .corral requeue --hold {first}_0 stops"):
        store.hold(first, NOW)
    with pytest.raises(NotQueued, match=rf"job {second} is claimed: .* .corral requeue --hold {second} stops"):
        store.hold(second, NOW)  # its own id names it alone


def test_in_front_of_slurm_a_claimed_job_is_taken_back_and_held_and_a_running_one_refused(store: Store) -> None:
    """A claimed job only waits in Slurm's queue (the API passes take_back in front of Slurm), as a
    pending job that `scontrol hold` holds: it is marked for the pass to take back and hold, as
    `corral requeue --hold`. A running one is refused with what to do instead."""
    [job_id, running] = submit(store, 2)
    claim(store, job_id)
    taken = {"id": job_id, "state": "claimed", "held": False, "changed": True, "taken_back": True}
    assert store.hold(job_id, NOW + 1, take_back=True) == taken
    assert store.hold(job_id, NOW + 2, take_back=True) == {**taken, "changed": False}  # asked already
    row = store.job_row(job_id)
    assert row["requeue_requested"] and row["requeue_hold"]
    assert event_kinds(store, job_id) == ["job.queued", "job.claimed", "job.requeue_requested"]
    attempt = claim(store, running)
    store.attempt_started(attempt, "n1", None, NOW + 1)
    refused = f"job {running} is running: only a queued or claimed job can be held .corral requeue --hold {running}"
    with pytest.raises(NotQueued, match=refused):
        store.hold(running, NOW + 2, take_back=True)


def test_a_held_job_can_be_cancelled_and_is_no_longer_held(store: Store) -> None:
    [job_id] = submit(store)
    store.hold(job_id, NOW)
    store.request_cancel(job_id, NOW + 1)
    loop = ControlLoop(store, SimCloud([SMALL], SimSettings(), lambda: NOW + 2), Config(), "d1", lambda: NOW + 2)
    loop.run_pass()
    row = store.job_row(job_id)
    assert row["state"] == "cancelled" and not row["held"]


# ---- a lost node, end to end through the live loop's pass --------------------------------------


class World:
    """A store, a loop with a clock the test moves, and a job running on node n1."""

    def __init__(self, store: Store, system: str = "requeue", **job_fields: Any) -> None:
        self.store = store
        self.now = NOW
        config = Config.model_validate(
            {
                "instance_types": [{"name": "small", "vcpus": 4, "ram": "8GiB", "price_per_hour": 0.1}],
                "policy": {"retry": {"on_node_failure": system}},
            }
        )
        self.cloud = SimCloud(config.core_instance_types(), SimSettings(), lambda: self.now)
        self.loop = ControlLoop(store, self.cloud, config, "d1", lambda: self.now)
        add_node(store, "n1", NOW)
        [self.job_id] = submit(store, **job_fields)
        self.loop.run_pass()
        [attempt] = store.attempts_of(self.job_id)
        self.attempt_id = attempt["id"]
        assert store.attempt_started(self.attempt_id, "n1", 123, NOW)

    def pass_at(self, now: float) -> None:
        self.now = now
        self.loop.run_pass()

    def lose_n1(self) -> dict[str, Any]:
        """n1's agent is silent past ping_stale (60 s): the pass marks it down and acts on the job."""
        self.pass_at(NOW + 100)
        n1 = self.store.node_row("n1")
        assert n1 is not None and n1["state"] == "gone"
        return self.store.job_row(self.job_id)

    def attempt(self) -> dict[str, Any]:
        return next(a for a in self.store.attempts_of(self.job_id) if a["id"] == self.attempt_id)

    def messages(self, kind: str) -> list[str]:
        return [e["message"] for e in self.store.list_events(job_id=self.job_id, kind=kind)]


def test_by_default_a_lost_node_requeues_its_job_with_back_off(store: Store) -> None:
    world = World(store)
    row = world.lose_n1()
    assert row["state"] == "queued" and not row["held"] and row["temp_failures"] == 1
    assert row["retry_at"] == NOW + 100 + 5
    assert world.attempt()["state"] == "tempfail"
    assert world.messages("job.requeued") == ["node n1 lost; retry 1/5 in 5s"]


def test_cancel_ends_the_job_cancelled_with_the_node_and_the_policy_in_the_event(store: Store) -> None:
    world = World(store, system="cancel")
    row = world.lose_n1()
    assert row["state"] == "cancelled" and row["finished_at"] == NOW + 100 and row["temp_failures"] == 1
    attempt = world.attempt()
    assert attempt["state"] == "tempfail"  # lost with its node, not killed by a cancel
    reason = "node n1 lost; cancelled (on_node_failure=cancel: policy.retry.on_node_failure)"
    assert attempt["reason"] == reason and world.messages("job.cancelled") == [reason]
    world.pass_at(NOW + 1000)
    assert store.job_row(world.job_id)["state"] == "cancelled" and world.cloud.stats.creates == 0


def test_hold_requeues_the_job_held_boots_nothing_for_it_and_a_release_runs_it(store: Store) -> None:
    world = World(store, on_node_failure="hold")  # the job's own setting beats the system's requeue
    row = world.lose_n1()
    decided = "on_node_failure=hold: the job's setting"
    assert row["state"] == "queued" and row["held"] and row["retry_at"] is None and row["temp_failures"] == 1
    assert row["wait_reason"] == f"held after a node failure ({decided}) until released"
    assert world.attempt()["state"] == "tempfail"
    assert world.messages("job.requeued") == [f"node n1 lost; requeued and held ({decided})"]
    assert world.messages("job.held") == [row["wait_reason"]]

    # Held: no instance is booted for it, however long it waits, and a node that comes is not used.
    for later in (NOW + 200, NOW + 2000):
        world.pass_at(later)
    assert world.cloud.stats.creates == 0
    add_node(store, "n2", NOW + 2000)
    world.pass_at(NOW + 2001)
    assert store.job_row(world.job_id)["state"] == "queued" and len(store.attempts_of(world.job_id)) == 1

    store.release(world.job_id, NOW + 2002)
    store.record_ping("n2", ZERO, NOW + 2003)
    world.pass_at(NOW + 2003)
    row = store.job_row(world.job_id)
    assert row["state"] == JobState.CLAIMED.value and row["node_id"] == "n2" and not row["held"]
    assert event_kinds(store, world.job_id)[-3:] == ["job.held", "job.released", "job.claimed"]
