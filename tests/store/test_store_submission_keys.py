"""A submission's key (an idempotency key), on SQLite and PostgreSQL: sent again, as a client does
whose answer was lost, it queues nothing and answers the ids of the first time; with other jobs it
is refused and nothing is queued; a day later it is a new submission."""

from __future__ import annotations

import pytest

from corral.jobspec import JobRequest
from corral.store import KeyReused, Store
from corral.store.store import KEY_KEPT_FOR

from .storekit import NOW, count_rows

KEY = "k" * 32


def test_a_submission_sent_again_with_its_key_queues_its_jobs_once(store: Store) -> None:
    jobs = [JobRequest(command=["true"], array="0-2"), JobRequest(command=["false"])]
    first = store.submit(jobs, NOW, KEY)
    assert len(first) == 4
    assert store.submit(jobs, NOW + 30, KEY) == first
    assert count_rows(store, "jobs") == 4
    assert len(store.list_events(kind="job.queued")) == 4

    with pytest.raises(KeyReused, match=f"submission key '{KEY}' was sent before with other jobs"):
        store.submit([JobRequest(command=["other"])], NOW + 60, KEY)
    assert count_rows(store, "jobs") == 4

    # A key is kept a day: after that it is a new submission (and the old key is forgotten).
    later = store.submit(jobs, NOW + KEY_KEPT_FOR + 1, KEY)
    assert later != first and count_rows(store, "jobs") == 8
    assert count_rows(store, "submissions") == 1


def test_submissions_without_a_key_or_with_others_are_each_queued(store: Store) -> None:
    job = [JobRequest(command=["true"])]
    ids = [
        store.submit(job, NOW),
        store.submit(job, NOW),
        store.submit(job, NOW, "a" * 16),
        store.submit(job, NOW, "b" * 16),
    ]
    assert len({tuple(i) for i in ids}) == 4
