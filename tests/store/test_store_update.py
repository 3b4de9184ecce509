"""Changing what a job asked for after submission (Store.update_job; corral update, Slurm's
scontrol update JobId=), on SQLite and PostgreSQL: a queued job's resources, a running job's time
limit, each change an event; every snapshot builds the job afresh from its changed spec; what a
job's state does not take is refused, and a bad value names its field, changing nothing."""

from __future__ import annotations

import pytest

from corral.core.model import GiB, Job
from corral.core.snapshot import Annotation
from corral.store import InvalidJobs, NotFound, NotQueued, Store

from .storekit import NOW, SMALL, after_exit, claim, event_kinds, submit


def snapshot_job(store: Store, job_id: int) -> Job:
    return next(job for job in store.load_snapshot("d1", [SMALL], NOW).jobs if job.id == job_id)


def test_a_queued_jobs_request_changes_and_the_next_snapshot_sees_it(store: Store) -> None:
    [job_id] = submit(store, vcpus=64)
    before = snapshot_job(store, job_id)  # kept by the store between snapshots
    assert before.resources.vcpus == 64
    store.annotate_many([Annotation(job_id, "no instance type has 64 vcpus", True)], {}, NOW)
    result = store.update_job(job_id, {"vcpus": 2, "ram": "512MiB", "name": "smaller"}, NOW + 1)
    assert result == {
        "id": job_id,
        "state": "queued",
        "changes": {"vcpus": [64.0, 2.0], "ram": [GiB, 512], "name": ["job-0", "smaller"]},
        "taken_back": False,
    }
    after = snapshot_job(store, job_id)
    assert after.resources.vcpus == 2 and after.resources.ram_mib == 512 and after.name == "smaller"
    row = store.job_row(job_id)
    assert row["name"] == "smaller" and not row["unplaceable"]  # judged afresh by the next pass
    assert event_kinds(store, job_id) == ["job.queued", "job.unplaceable", "job.updated"]
    (updated,) = [e for e in store.list_events(job_id=job_id) if e["kind"] == "job.updated"]
    assert updated["message"] == "vcpus 64 -> 2; ram 1024 -> 512; name job-0 -> smaller"
    # The same values again: nothing written, no event.
    assert store.update_job(job_id, {"vcpus": 2}, NOW + 2)["changes"] == {}
    assert event_kinds(store, job_id) == ["job.queued", "job.unplaceable", "job.updated"]


def test_a_running_jobs_time_limit_changes_but_not_what_it_was_placed_with(store: Store) -> None:
    [job_id] = submit(store, time_limit=3600)
    claim(store, job_id)
    result = store.update_job(job_id, {}, NOW + 1, time_limit_add=1800)
    assert result["changes"] == {"time_limit": [3600.0, 5400.0]}
    assert snapshot_job(store, job_id).time_limit == 5400
    with pytest.raises(NotQueued, match=f"job {job_id} is claimed: nodes, vcpus change only while it is queued"):
        store.update_job(job_id, {"vcpus": 2, "nodes": 2}, NOW + 2)
    assert snapshot_job(store, job_id).resources.vcpus == 1


def test_in_front_of_slurm_a_claimed_job_takes_any_change_and_is_taken_back_to_be_submitted_again(
    store: Store,
) -> None:
    """A claimed job only waits in Slurm's queue (the API passes take_back in front of Slurm):
    `scontrol update` changes a pending job, so corral's update does too, and marks it for the
    pass to take back (scancel) and queue again, counting nothing, as a requeue request."""
    [job_id] = submit(store)
    claim(store, job_id)
    result = store.update_job(job_id, {"vcpus": 2}, NOW + 1, take_back=True)
    assert result == {"id": job_id, "state": "claimed", "changes": {"vcpus": [1.0, 2.0]}, "taken_back": True}
    row = store.job_row(job_id)
    assert row["requeue_requested"] and not row["held"] and row["spec"]["vcpus"] == 2
    (updated,) = [e for e in store.list_events(job_id=job_id) if e["kind"] == "job.updated"]
    assert updated["message"] == "vcpus 1 -> 2 (it waited in Slurm: the next pass takes it back and submits it again)"
    # A change a claimed job takes anyway (its name) takes nothing back.
    [other] = submit(store)
    claim(store, other)
    assert store.update_job(other, {"name": "x"}, NOW + 1, take_back=True)["taken_back"] is False
    assert not store.job_row(other)["requeue_requested"]


def test_bad_changes_name_the_field_and_change_nothing(store: Store) -> None:
    [job_id] = submit(store)
    [unlimited] = submit(store)
    with pytest.raises(InvalidJobs, match="vcpus: Input should be greater than 0"):
        store.update_job(job_id, {"vcpus": 0}, NOW)
    with pytest.raises(InvalidJobs, match="ram: not a size: 'lots'"):
        store.update_job(job_id, {"ram": "lots"}, NOW)
    with pytest.raises(InvalidJobs, match="command: cannot be changed"):
        store.update_job(job_id, {"command": ["rm"]}, NOW)
    with pytest.raises(InvalidJobs, match="no time limit to add to"):
        store.update_job(unlimited, {}, NOW, time_limit_add=60)
    with pytest.raises(NotFound):
        store.update_job(job_id + 100, {"name": "x"}, NOW)
    assert event_kinds(store, job_id) == ["job.queued"]
    assert store.job_row(job_id)["spec"]["vcpus"] == 1
    # A finished job's request is its record: refused.
    attempt = claim(store, job_id)
    store.finish_attempt(attempt, "n1", 1, NOW + 1, after_exit(1, attempt))
    with pytest.raises(NotQueued, match=f"job {job_id} is failed: a finished job cannot change"):
        store.update_job(job_id, {"name": "again"}, NOW + 2)
