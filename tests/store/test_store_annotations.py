"""Why a job waits: annotations are written in bulk, unplaceable is an event once."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import text

from corral.core.model import Resources
from corral.core.snapshot import Annotation
from corral.jobspec import JobRequest
from corral.store import Store
from corral.store.store import _dated, _ExplanationText


def test_annotations_are_stored_for_queued_jobs_only_and_unplaceable_is_an_event_once(store: Store) -> None:
    ids = store.submit([JobRequest(command=["x"]) for _ in range(1200)], 1.0)
    claimed = ids[0]
    assert store.claim(claimed, "d", ["n1"], Resources(), 2.0) is not None
    notes = [Annotation(i, "waiting for an instance to boot") for i in ids[:1000]]
    notes += [Annotation(i, "no instance type has 40 GiB RAM", unplaceable=True) for i in ids[1000:]]
    explanation = {"filters": [{"code": "INSUFFICIENT_RAM", "removed": 3}]}
    store.annotate_many(notes, {ids[1100]: explanation}, 3.0)
    store.annotate_many(notes, {}, 4.0)

    rows = {r["id"]: r for r in store.list_job_rows(limit=2000)}
    assert rows[claimed]["wait_reason"] == ""  # it is claimed: nothing to explain
    assert rows[ids[1]]["wait_reason"] == "waiting for an instance to boot" and not rows[ids[1]]["unplaceable"]
    assert rows[ids[1100]]["unplaceable"] and store.job_row(ids[1100])["explanation"] == {**explanation, "at": 3.0}
    events = store.list_events(kind="job.unplaceable", limit=1000)
    assert sorted(e["job_id"] for e in events) == ids[1000:]


def test_the_snapshot_reflects_priority_changes_of_cached_jobs(store: Store) -> None:
    (job_id,) = store.submit([JobRequest(command=["x"], priority=3)], 1.0)
    (cached,) = store.load_snapshot("d", [], 0.0).jobs
    assert cached.priority == 3
    store.set_priority(job_id, 0, 2.0)
    (cached,) = store.load_snapshot("d", [], 0.0).jobs
    assert cached.priority == 0


def test_refreshed_explanations_replace_those_of_queued_jobs_only(store: Store) -> None:
    waiting, claimed = store.submit([JobRequest(command=["x"]) for _ in range(2)], 1.0)
    first = {"nodes": 0, "filters": []}
    store.annotate_many(
        [Annotation(waiting, "no node has room"), Annotation(claimed, "no node has room")],
        {waiting: first, claimed: first},
        2.0,
    )
    assert store.claim(claimed, "d", ["n1"], Resources(), 3.0) is not None
    later = {"nodes": 1, "filters": [{"code": "INSUFFICIENT_RAM", "sample": ["n1"]}]}
    store.refresh_explanations({waiting: later, claimed: later}, 4.0)

    rows = {r["id"]: r for r in store.list_job_rows(limit=10)}
    assert store.job_row(waiting)["explanation"] == {**later, "at": 4.0}
    assert rows[waiting]["wait_reason"] == "no node has room"  # only the explanation is replaced
    assert store.job_row(claimed)["explanation"] == {**first, "at": 2.0}  # no longer waiting: left as it was


def test_a_job_claimed_or_held_since_the_pass_read_it_is_not_called_unplaceable(store: Store) -> None:
    """The pass found no place for three jobs; before it wrote so, one was claimed (by another
    dispatcher) and one held. Only the job still waiting is unplaceable, with its event."""
    waiting, claimed, held = store.submit([JobRequest(command=["x"]) for _ in range(3)], 1.0)
    assert store.claim(claimed, "d2", ["n1"], Resources(), 2.0) is not None
    store.hold(held, 2.0)
    notes = [
        Annotation(job_id, "no instance type has 40 GiB RAM", unplaceable=True) for job_id in (held, claimed, waiting)
    ]
    store.annotate_many(notes, {}, 3.0)

    assert [e["job_id"] for e in store.list_events(kind="job.unplaceable")] == [waiting]
    rows = {r["id"]: r for r in store.list_job_rows()}
    assert rows[waiting]["unplaceable"] and not rows[claimed]["unplaceable"] and not rows[held]["unplaceable"]
    assert rows[held]["wait_reason"] == "held by an operator"


def test_explanations_that_share_parts_are_stored_as_each_alone_would_be(store: Store) -> None:
    """annotate_many encodes the lists and mappings explanations share once (a waiting job's is a
    copy of its demand's with its own id): each job reads back its own whole explanation, and the
    text is json.dumps's of it."""
    ids = store.submit([JobRequest(command=["x"]) for _ in range(4)], 1.0)
    misfit = {
        "request": "4 vcpu, 16 GiB RAM",
        "nodes": 3,
        "filters": [{"code": "INSUFFICIENT_RAM", "removed": 3, "sample": ["n1", "n2"], "detail": "needs 16 GiB – é"}],
        "top": [{"node": "n1", "score": 2.6875993671709573, "chosen": False}],
        "strict": True,
        "reservation": None,
    }
    explanations = {job_id: {**misfit, "job": job_id, "reason": f"no room {n}"} for n, job_id in enumerate(ids[:3])}
    explanations[ids[3]] = {"at": 0.5, "job": ids[3]}  # an "at" of its own is replaced, as before
    odd: dict[Any, Any] = {
        "job": 1,
        "share": 0.25,
        "none": None,
        "yes": False,
        "big": 10**20,
        "ünï": "ö\n",
        7: "a key not a text",
    }
    notes = [Annotation(job_id, "no node has room") for job_id in ids]
    store.annotate_many(notes, explanations, 3.25)

    for job_id in ids:
        assert store.job_row(job_id)["explanation"] == {**explanations[job_id], "at": 3.25}
    text_of = _ExplanationText(3.25)
    for explanation in [*explanations.values(), odd, odd]:
        assert text_of(explanation) == json.dumps(_dated(explanation, 3.25))


def test_many_explained_jobs_are_each_written_as_its_own_note_says(store: Store) -> None:
    """A pass's explained jobs, written by one statement run for every row: each row gets its own
    reason, unplaceable mark and explanation, stored as json.dumps's text of it; a job claimed or
    held since the pass read it is left alone, and only the jobs newly unplaceable have the event."""
    ids = store.submit([JobRequest(command=["x"]) for _ in range(40)], 1.0)
    already = ids[6]  # unplaceable before, and again: its event is not written twice
    store.annotate_many([Annotation(already, "no instance type has 40 GiB RAM", unplaceable=True)], {}, 2.0)
    claimed, held, claimed_last, plain = ids[3], ids[17], ids[39], ids[21]
    assert store.claim(claimed, "d2", ["n1"], Resources(), 2.0) is not None
    store.hold(held, 2.0)
    assert store.claim(claimed_last, "d2", ["n1"], Resources(), 2.0) is not None
    shared = {"filters": [{"code": "INSUFFICIENT_RAM", "removed": 3, "sample": ["n1", "n2"], "detail": 'é – "x"'}]}
    explanations = {
        job_id: {**shared, "job": job_id, "nodes": n % 4} for n, job_id in enumerate(ids) if job_id != plain
    }
    reasons = {
        job_id: ("no instance type has 40 GiB RAM" if n % 3 == 0 else f"no node has room ({n})")
        for n, job_id in enumerate(ids)
    }
    notes = [
        Annotation(job_id, reasons[job_id], unplaceable=reasons[job_id].startswith("no instance"))
        for job_id in reversed(ids)
    ]
    notes.append(Annotation(ids[9], "noted twice: the last note is written"))  # (ids[9]: unplaceable first)
    store.annotate_many(notes, explanations, 3.5)

    with store.engine.connect() as conn:
        stored: dict[int, str | None] = dict(conn.execute(text("SELECT id, CAST(explanation AS TEXT) FROM jobs")).all())
    rows = {r["id"]: r for r in store.list_job_rows(limit=100)}
    left = {claimed, held, claimed_last}
    for job_id in ids:
        row = rows[job_id]
        if job_id in left:
            assert stored[job_id] is None and not row["unplaceable"], row
            continue
        reason = "noted twice: the last note is written" if job_id == ids[9] else reasons[job_id]
        assert (row["wait_reason"], row["unplaceable"]) == (reason, reason.startswith("no instance")), row
        assert row["updated_at"] == 3.5
        if job_id == plain:
            assert stored[job_id] is None
        else:
            assert stored[job_id] == json.dumps(_dated(explanations[job_id], 3.5))  # byte for byte
    assert rows[held]["wait_reason"] == "held by an operator"
    # (ids[9] too: a note of it said unplaceable, as one UPDATE a note had it.)
    expected = [job_id for job_id in ids if reasons[job_id].startswith("no instance") and job_id not in left]
    assert sorted(e["job_id"] for e in store.list_events(kind="job.unplaceable", limit=100)) == expected
