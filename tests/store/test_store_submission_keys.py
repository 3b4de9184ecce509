"""A submission's key (an idempotency key), on SQLite and PostgreSQL: sent again, as a client does
whose answer was lost, it queues nothing and answers the ids of the first time; with other jobs it
is refused and nothing is queued; a day later it is a new submission."""

from __future__ import annotations

import hashlib
import json

import pytest
from pydantic import ConfigDict
from sqlalchemy import update

from corral.jobspec import JobRequest
from corral.store import KeyReused, Store, schema
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


def hashed_whole(jobs: list[JobRequest], leaving_out: tuple[str, ...] = ()) -> str:
    """A submission's hash as servers before this one stored it with its key: each job's every
    field, but for those their version did not have yet."""
    specs = [{k: v for k, v in job.model_dump(mode="json").items() if k not in leaving_out} for job in jobs]
    return hashlib.sha256(json.dumps(specs, sort_keys=True).encode()).hexdigest()


def stored_as_before(store: Store, jobs: list[JobRequest], leaving_out: tuple[str, ...]) -> list[int]:
    """`jobs` submitted with KEY, their key's row as an older server wrote it."""
    ids = store.submit(jobs, NOW, KEY)
    with store.write() as conn:
        conn.execute(update(schema.submissions).values(body_hash=hashed_whole(jobs, leaving_out)))
    return ids


# The servers since submissions had keys and before this one: with chdir and separate_stderr but
# before script (the one before this), before separate_stderr, before chdir. (None of them had
# exclusive or signal, which came after they stopped hashing whole.)
OLDER_SERVERS = [
    ("script", "exclusive", "signal"),
    ("script", "exclusive", "signal", "separate_stderr"),
    ("script", "exclusive", "signal", "separate_stderr", "chdir"),
]


@pytest.mark.parametrize("leaving_out", OLDER_SERVERS, ids=["whole", "before-separate_stderr", "before-chdir"])
def test_a_key_stored_by_an_older_server_answers_its_jobs_sent_again_after_the_upgrade(
    store: Store, leaving_out: tuple[str, ...]
) -> None:
    jobs = [JobRequest(command=["true"], array="0-1", user="ann"), JobRequest(command=["b"], vcpus=2)]
    first = stored_as_before(store, jobs, leaving_out)
    assert store.submit(jobs, NOW + 30, KEY) == first
    assert count_rows(store, "jobs") == 3


@pytest.mark.parametrize("leaving_out", OLDER_SERVERS, ids=["whole", "before-separate_stderr", "before-chdir"])
def test_a_key_stored_by_an_older_server_still_refuses_other_jobs(store: Store, leaving_out: tuple[str, ...]) -> None:
    jobs = [JobRequest(command=["true"])]
    stored_as_before(store, jobs, leaving_out)
    others = [
        [JobRequest(command=["true"], vcpus=2)],
        [JobRequest(command=["true"]), JobRequest(command=["true"])],
        # What an older server did not have, set: it could not have been sent there.
        [JobRequest(command=["true"], separate_stderr=True)],
        [JobRequest(command=["true"], chdir="/srv")],
    ]
    for other in others:
        with pytest.raises(KeyReused):
            store.submit(other, NOW + 30, KEY)
    assert count_rows(store, "jobs") == 1


class NewerJobRequest(JobRequest):
    """A job request of a later version, with a field added since, at a default."""

    model_config = ConfigDict(extra="forbid")
    contiguous: bool = False


def test_a_key_answers_its_jobs_whether_a_field_added_later_at_its_default_is_there_or_not(store: Store) -> None:
    """Sent to this version and again after an upgrade that added a field (or the other way round,
    after a downgrade), the same jobs are the same submission; the field set is another."""
    first = store.submit([JobRequest(command=["true"], name="a")], NOW, KEY)
    assert store.submit([NewerJobRequest(command=["true"], name="a")], NOW + 30, KEY) == first
    with pytest.raises(KeyReused):
        store.submit([NewerJobRequest(command=["true"], name="a", contiguous=True)], NOW + 30, KEY)

    newer = store.submit([NewerJobRequest(command=["true"], name="a")], NOW, "n" * 32)
    assert store.submit([JobRequest(command=["true"], name="a")], NOW + 30, "n" * 32) == newer
    assert count_rows(store, "jobs") == 2
