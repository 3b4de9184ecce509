"""Cancelling by filter (Slurm's scancel --state/--user/--name) and listing by owner and name, on
SQLite and PostgreSQL: one transaction marks every open job that matches all the filters given."""

from __future__ import annotations

from corral.jobspec import JobRequest
from corral.store import Store

from .storekit import NOW, after_exit, claim, event_kinds


def test_open_jobs_matching_every_filter_are_marked_with_an_event_each(store: Store) -> None:
    ids = store.submit(
        [
            JobRequest(command=["a"], user="alice", name="sweep"),
            JobRequest(command=["b"], user="alice", name="sweep"),
            JobRequest(command=["c"], user="alice", name="other"),
            JobRequest(command=["d"], user="bob", name="sweep"),
            JobRequest(command=["e"], user="alice", name="sweep"),
        ],
        NOW,
    )
    running, queued, other, bobs, done = ids
    claim(store, running)
    attempt = claim(store, done)
    store.finish_attempt(attempt, "n1", 0, NOW + 1, after_exit(0, attempt))

    assert [r["id"] for r in store.list_job_rows(user="alice", name="sweep")] == [running, queued, done]
    assert [r["id"] for r in store.list_job_rows(["queued"], user="alice")] == [queued, other]

    assert store.request_cancel_matching(NOW + 2, ["queued"], user="alice", name="sweep") == [queued]
    assert store.request_cancel_matching(NOW + 3, None, user="alice", name="sweep") == [running]  # the rest
    assert store.request_cancel_matching(NOW + 4, None, user="alice", name="sweep") == []  # marked already
    assert not store.job_row(other)["cancel_requested"] and not store.job_row(bobs)["cancel_requested"]
    assert store.job_row(done)["state"] == "complete" and not store.job_row(done)["cancel_requested"]
    messages = [e["message"] for e in store.list_events(job_id=running, kind="job.cancel_requested")]
    assert messages == ["cancel requested (user 'alice', name 'sweep')"]
    assert event_kinds(store, queued)[-1] == "job.cancel_requested"
