"""Cancelling by filter (Slurm's scancel --state/--user/--name) and listing by owner and name, on
SQLite and PostgreSQL: one transaction marks every open job that matches all the filters given."""

from __future__ import annotations

from corral.jobspec import JobRequest
from corral.store import JobFilter, Store

from .storekit import NOW, after_exit, claim, event_kinds


def test_open_jobs_matching_every_filter_are_marked_with_an_event_each(store: Store) -> None:
    ids = store.submit(
        [
            JobRequest(command=["a"], user="alice", name="sweep", tags=["web", "x"]),
            JobRequest(command=["b"], user="alice", name="sweep"),
            JobRequest(command=["c"], user="alice", name="other", tags=["web"]),
            JobRequest(command=["d"], user="bob", name="sweep", tags=["web-2"]),
            JobRequest(command=["e"], user="alice", name="sweep"),
        ],
        NOW,
    )
    running, queued, other, bobs, done = ids
    claim(store, running)
    attempt = claim(store, done)
    store.finish_attempt(attempt, "n1", 0, NOW + 1, after_exit(0, attempt))

    sweep = JobFilter(user="alice", name="sweep")
    assert [r["id"] for r in store.list_job_rows(picked=sweep)] == [running, queued, done]
    assert [r["id"] for r in store.list_job_rows(["queued"], picked=JobFilter(user="alice"))] == [queued, other]
    # A tag is one of the list's entries, whole ("web" is not "web-2").
    assert [r["id"] for r in store.list_job_rows(picked=JobFilter(tag="web"))] == [running, other]

    assert store.request_cancel_matching(NOW + 2, JobFilter(("queued",), "alice", "sweep")) == [queued]
    assert store.request_cancel_matching(NOW + 3, sweep) == [running]  # the rest
    assert store.request_cancel_matching(NOW + 4, sweep) == []  # marked already
    assert not store.job_row(other)["cancel_requested"] and not store.job_row(bobs)["cancel_requested"]
    assert store.job_row(done)["state"] == "complete" and not store.job_row(done)["cancel_requested"]
    messages = [e["message"] for e in store.list_events(job_id=running, kind="job.cancel_requested")]
    assert messages == ["cancel requested (user 'alice', name 'sweep')"]
    assert event_kinds(store, queued)[-1] == "job.cancel_requested"


def test_a_cancel_by_tag_marks_only_the_jobs_that_carry_it(store: Store) -> None:
    tagged, untagged, near_miss = store.submit(
        [
            JobRequest(command=["a"], tags=["batch"]),
            JobRequest(command=["b"]),
            JobRequest(command=["c"], tags=["batch2"]),
        ],
        NOW,
    )
    assert store.request_cancel_matching(NOW + 1, JobFilter(tag="batch")) == [tagged]
    messages = [e["message"] for e in store.list_events(job_id=tagged, kind="job.cancel_requested")]
    assert messages == ["cancel requested (tag 'batch')"]
    assert not store.job_row(untagged)["cancel_requested"] and not store.job_row(near_miss)["cancel_requested"]
