"""Submitting, claiming and finishing jobs: what users and dispatchers depend on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic import ValidationError
from sqlalchemy import exc as sa_exc
from sqlalchemy import insert

from corral.core import retry
from corral.core.model import AttemptState, IllegalTransition, JobState, LocalityHints, Resources
from corral.core.reconcile import plan_pass
from corral.core.settings import PolicySettings, RetrySettings
from corral.core.snapshot import JobOutcome
from corral.jobspec import JobRequest
from corral.store import NotFound, Store, schema

from .storekit import (
    NOW,
    ONE_CPU,
    SMALL,
    add_node,
    after_exit,
    all_rows,
    claim,
    count_rows,
    event_kinds,
    request,
    snapshot_of_tables,
    submit,
)

RETRY = RetrySettings()  # 5 TempFails, back-off 5 s doubling

# ---- submit -----------------------------------------------------------------------------------


def test_bulk_submit_stores_every_job_in_order_with_a_queued_event(store: Store) -> None:
    # More than one insertmanyvalues batch (1,000 rows), so ids must follow the request order across batches.
    requests = [request(f"job-{i}", priority=i % 7, vcpus=1 + i % 3, env={"I": str(i)}) for i in range(2500)]
    ids = store.submit(requests, NOW)

    assert len(ids) == len(requests)
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    rows = store.list_job_rows(limit=10_000)
    assert [r["id"] for r in rows] == ids
    for req, row in zip(requests, rows, strict=True):
        assert row["name"] == req.name
        assert row["state"] == JobState.QUEUED.value
        assert row["priority"] == req.priority
        assert row["submitted_at"] == NOW
        assert (row["temp_failures"], row["perm_failures"], row["attempt_count"]) == (0, 0, 0)
        assert row["claimed_by"] is None and row["retry_at"] is None
        assert JobRequest.model_validate(row["spec"]) == req  # the request is kept whole
    queued = store.list_events(kind="job.queued", limit=10_000)
    assert [e["job_id"] for e in queued] == ids
    assert all(e["at"] == NOW for e in queued)
    assert queued[0]["message"] == "job-0: echo job-0"


def test_submitted_job_reads_back_as_the_core_job(store: Store) -> None:
    req = request(
        "gang", vcpus=2.5, ram="3GiB", scratch="10GiB", gpus=1, nodes=3, priority=9, tags=["a"], max_retries=2
    )
    [job_id] = store.submit([req], NOW)
    job = store.job(job_id)
    assert job.id == job_id and job.name == "gang" and job.command == ["echo", "gang"]
    assert job.resources == Resources(2.5, 3 * 1024, 10 * 1024, 1)
    assert (job.node_count, job.priority, job.tags, job.max_retries) == (3, 9, ("a",), 2)
    assert job.state is JobState.QUEUED and job.submitted_at == NOW


def test_a_job_stored_with_a_locality_entry_submission_now_refuses_still_loads(store: Store) -> None:
    """A near/far entry that is neither a job id nor tag:NAME is refused at submission; a job
    stored before it was (its row written here as submit wrote it then) still loads, for the
    dispatcher's snapshot and for `corral job`, and placement still lists the entry as not understood."""
    spec = request("old", ram="1000GiB").model_dump(mode="json")  # fits no node: the pass explains it
    spec["locality"] = {"near": ["web", "tag:"], "far": ["12a"], "strict": False, "level": "server"}
    with pytest.raises(ValidationError, match="not a job id or tag:NAME: 'web'"):
        JobRequest.model_validate(spec)
    row = {
        "name": "old",
        "state": JobState.QUEUED.value,
        "priority": 1,
        "spec": spec,
        "submitted_at": NOW,
        "temp_failures": 0,
        "perm_failures": 0,
        "attempt_count": 0,
        "wait_reason": "",
        "unplaceable": False,
        "cancel_requested": False,
        "held": False,
        "updated_at": NOW,
    }
    with store.write() as conn:
        job_id = conn.execute(insert(schema.jobs).returning(schema.jobs.c.id), [row]).scalar_one()
    assert store.job(job_id).locality == LocalityHints(("web", "tag:"), ("12a",), False, "server")
    add_node(store, "n1")
    snapshot = store.load_snapshot("d1", [SMALL], NOW)
    (loaded,) = snapshot.jobs
    assert loaded.id == job_id and loaded.locality == store.job(job_id).locality
    decisions = plan_pass(snapshot, NOW, PolicySettings())
    locality = decisions.explanations[job_id]["locality"]
    assert (locality["not_understood"], locality["not_running"]) == (["web", "12a"], ["tag:"])


def test_submitting_nothing_stores_nothing(store: Store) -> None:
    assert store.submit([], NOW) == []
    assert count_rows(store, "jobs") == 0 and count_rows(store, "events") == 0


POISON_TRIGGERS = {
    # A database-side failure on one row in the middle of the batch, in either statement of submit().
    ("sqlite", "jobs"): [
        "CREATE TRIGGER poison BEFORE INSERT ON jobs WHEN NEW.name = 'poison' BEGIN SELECT RAISE(ABORT, 'poison'); END"
    ],
    ("sqlite", "events"): [
        "CREATE TRIGGER poison BEFORE INSERT ON events WHEN substr(NEW.message, 1, 7) = 'poison:' "
        "BEGIN SELECT RAISE(ABORT, 'poison'); END"
    ],
    ("postgresql", "jobs"): [
        "CREATE FUNCTION poison() RETURNS trigger AS $$ BEGIN "
        "IF NEW.name = 'poison' THEN RAISE EXCEPTION 'poison'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql",
        "CREATE TRIGGER poison BEFORE INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION poison()",
    ],
    ("postgresql", "events"): [
        "CREATE FUNCTION poison() RETURNS trigger AS $$ BEGIN "
        "IF substr(NEW.message, 1, 7) = 'poison:' THEN RAISE EXCEPTION 'poison'; END IF; RETURN NEW; END $$ "
        "LANGUAGE plpgsql",
        "CREATE TRIGGER poison BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION poison()",
    ],
}


@pytest.fixture(params=["jobs", "events"])
def poisoned_store(request: pytest.FixtureRequest, store: Store, backend: str) -> Iterator[Store]:
    with store.write() as conn:
        for statement in POISON_TRIGGERS[(backend, request.param)]:
            conn.exec_driver_sql(statement)
    yield store


def test_a_batch_failing_in_the_database_mid_way_stores_nothing(poisoned_store: Store) -> None:
    store = poisoned_store
    [before] = submit(store)
    tables_before = snapshot_of_tables(store)
    batch = [request("a"), request("b"), request("poison"), request("c"), request("d")]

    with pytest.raises(sa_exc.DBAPIError, match="poison"):
        store.submit(batch, NOW + 1)

    assert snapshot_of_tables(store) == tables_before  # no job, no event of the batch
    # The store is still usable, and the ids of a later batch carry on.
    ids = store.submit([request("e"), request("f")], NOW + 2)
    assert [r["name"] for r in store.list_job_rows()] == ["job-0", "e", "f"]
    assert ids[0] > before


# ---- the claim --------------------------------------------------------------------------------


def test_claim_creates_the_attempt_with_its_nodes_and_resources(store: Store) -> None:
    [job_id] = store.submit([request("gang", nodes=3, env={"K": "v"})], NOW)
    per_node = Resources(2.5, 3000, 100, 1)

    attempt_id = claim(store, job_id, "disp-1", ["n1", "n2", "n3"], per_node, NOW + 5)

    [attempt] = store.attempts_of(job_id)
    assert attempt["id"] == attempt_id
    assert attempt["node_id"] == "n1" and attempt["node_ids"] == ["n1", "n2", "n3"]
    assert (attempt["vcpus"], attempt["ram_mib"], attempt["scratch_mib"], attempt["gpus"]) == (2.5, 3000, 100, 1)
    assert attempt["state"] == AttemptState.ASSIGNED.value
    assert attempt["dispatcher_id"] == "disp-1" and attempt["assigned_at"] == NOW + 5
    row = store.job_row(job_id)
    assert row["state"] == JobState.CLAIMED.value and row["claimed_by"] == "disp-1"
    assert row["attempt_count"] == 1 and row["node_id"] == "n1"
    [claimed] = store.list_events(job_id=job_id, kind="job.claimed")
    assert claimed["node_id"] == "n1" and "n1, n2, n3" in claimed["message"]
    # The agent on the first node is handed the work; the gang's other nodes run no command.
    [item] = store.work_for("n1")
    assert (item.attempt_id, item.job_id, item.command) == (attempt_id, job_id, ["echo", "gang"])
    assert item.env == {"K": "v"} and item.node_ids == ["n1", "n2", "n3"] and item.resources == per_node
    assert store.work_for("n2") == []


def test_a_claimed_job_cannot_be_claimed_again(store: Store) -> None:
    [job_id] = submit(store)
    claim(store, job_id, "disp-1")

    assert store.claim(job_id, "disp-2", ["n2"], ONE_CPU, NOW + 1) is None
    assert store.claim(job_id, "disp-1", ["n1"], ONE_CPU, NOW + 1) is None  # not even by its owner
    row = store.job_row(job_id)
    assert row["claimed_by"] == "disp-1" and row["attempt_count"] == 1 and row["node_id"] == "n1"
    assert len(store.attempts_of(job_id)) == 1
    assert event_kinds(store, job_id) == ["job.queued", "job.claimed"]


def test_a_passs_claims_together_take_only_jobs_still_queued_and_store_their_explanations(store: Store) -> None:
    first, held, claimed_before, last = submit(store, 4)
    store.hold(held, NOW)
    claim(store, claimed_before, "disp-2")
    explanation = {"reason": "placed"}

    claims = [(last, ["n2", "n3"], Resources(2.0, 2048, 0, 0)), (held, ["n1"], ONE_CPU)]
    claims += [(claimed_before, ["n1"], ONE_CPU), (first, ["n1"], ONE_CPU)]
    taken = store.claim_many(claims, "disp-1", NOW + 5, {last: explanation, held: explanation})

    assert set(taken) == {first, last}
    for job_id, nodes in ((first, ["n1"]), (last, ["n2", "n3"])):
        [attempt] = store.attempts_of(job_id)
        assert attempt["id"] == taken[job_id] and attempt["node_ids"] == nodes
        assert attempt["dispatcher_id"] == "disp-1" and attempt["state"] == AttemptState.ASSIGNED.value
        assert store.job_row(job_id)["claimed_by"] == "disp-1"
        assert event_kinds(store, job_id) == ["job.queued", "job.claimed"]
    assert store.job_row(last)["explanation"] == {**explanation, "at": NOW + 5}
    assert store.job_row(first)["explanation"] is None
    # The held job and the one another dispatcher claimed first are left as they were.
    assert store.job_row(held)["state"] == JobState.QUEUED.value and store.job_row(held)["explanation"] is None
    assert store.attempts_of(held) == []
    assert store.job_row(claimed_before)["claimed_by"] == "disp-2" and len(store.attempts_of(claimed_before)) == 1


def test_running_and_finished_jobs_cannot_be_claimed(store: Store) -> None:
    running, done = submit(store, 2)
    claim(store, running, nodes=["n1"])
    assert store.attempt_started(store.attempts_of(running)[0]["id"], "n1", 42, NOW)
    attempt = claim(store, done, nodes=["n1"])
    assert store.apply_outcome(JobOutcome(done, JobState.COMPLETE, "exit 0", (attempt,), exit_code=0), NOW)

    for job_id in (running, done):
        assert store.claim(job_id, "d2", ["n2"], ONE_CPU, NOW) is None
        assert len(store.attempts_of(job_id)) == 1


def test_a_cancel_requested_job_cannot_be_claimed(store: Store) -> None:
    [job_id] = submit(store)
    assert store.request_cancel(job_id, NOW + 1)["changed"] is True

    assert store.claim(job_id, "disp-1", ["n1"], ONE_CPU, NOW + 2) is None
    row = store.job_row(job_id)
    assert row["state"] == JobState.QUEUED.value and row["cancel_requested"] and row["claimed_by"] is None
    assert store.attempts_of(job_id) == []
    assert event_kinds(store, job_id) == ["job.queued", "job.cancel_requested"]


def test_claiming_an_unknown_job_claims_nothing(store: Store) -> None:
    assert store.claim(12345, "disp-1", ["n1"], ONE_CPU, NOW) is None
    assert count_rows(store, "attempts") == 0


# ---- outcomes ---------------------------------------------------------------------------------


def test_tempfail_requeues_with_backoff_and_ends_the_attempt(store: Store) -> None:
    [job_id] = submit(store)
    attempt_id = claim(store, job_id, "disp-1", ["n1"])
    assert store.attempt_started(attempt_id, "n1", 4242, NOW + 1)

    outcome = retry.after_temp_failure(store.job(job_id), NOW + 10, RETRY, "node n1 lost", (attempt_id,))
    assert outcome.state is JobState.QUEUED and outcome.temp_failure
    assert store.apply_outcome(outcome, NOW + 10) is True

    row = store.job_row(job_id)
    assert row["state"] == JobState.QUEUED.value
    assert row["retry_at"] == NOW + 10 + RETRY.backoff(1)
    assert row["temp_failures"] == 1 and row["perm_failures"] == 0
    assert row["claimed_by"] is None
    assert row["wait_reason"] == outcome.reason
    # Back in the queue, not on a node and not running (its listing showed the old node, and a
    # run time that grew while it waited); the attempt keeps where and when it ran.
    assert row["node_id"] is None and row["started_at"] is None
    [attempt] = store.attempts_of(job_id)
    assert attempt["state"] == AttemptState.TEMPFAIL.value
    assert attempt["finished_at"] == NOW + 10 and attempt["reason"] == outcome.reason
    [requeued] = store.list_events(job_id=job_id, kind="job.requeued")
    assert requeued["at"] == NOW + 10 and requeued["message"] == outcome.reason
    assert event_kinds(store, job_id) == ["job.queued", "job.claimed", "job.running", "job.requeued"]

    # It can be claimed again: a second attempt, the first one stays ended.
    second = claim(store, job_id, "disp-2", ["n2"], now=NOW + 20)
    assert store.job_row(job_id)["attempt_count"] == 2
    assert [(a["id"], a["state"]) for a in store.attempts_of(job_id)] == [
        (attempt_id, AttemptState.TEMPFAIL.value),
        (second, AttemptState.ASSIGNED.value),
    ]


def test_too_many_tempfails_fail_the_job(store: Store) -> None:
    [job_id] = submit(store)
    settings = RetrySettings(max_temp_failures=1)
    for i in range(2):
        attempt_id = claim(store, job_id, now=NOW + 100 * i)
        outcome = retry.after_temp_failure(store.job(job_id), NOW + 100 * i + 1, settings, "lost", (attempt_id,))
        assert store.apply_outcome(outcome, NOW + 100 * i + 1)
    row = store.job_row(job_id)
    assert row["state"] == JobState.FAILED.value and row["temp_failures"] == 2 and row["finished_at"] == NOW + 101
    assert [a["state"] for a in store.attempts_of(job_id)] == [AttemptState.TEMPFAIL.value] * 2
    assert event_kinds(store, job_id)[-1] == "job.failed"


def test_nonzero_exit_with_retries_left_requeues_as_a_permfail(store: Store) -> None:
    [job_id] = submit(store, max_retries=1)
    attempt_id = claim(store, job_id)
    assert store.attempt_started(attempt_id, "n1", 1, NOW)
    assert store.finish_attempt(attempt_id, "n1", 3, NOW + 5, after_exit(3, attempt_id))
    row = store.job_row(job_id)
    assert row["state"] == JobState.QUEUED.value and row["perm_failures"] == 1 and row["temp_failures"] == 0
    assert row["exit_code"] == 3 and row["retry_at"] is None
    [attempt] = store.attempts_of(job_id)
    assert attempt["state"] == AttemptState.EXITED.value and attempt["exit_code"] == 3


@pytest.mark.parametrize("final", [JobState.COMPLETE, JobState.CANCELLED, JobState.FAILED])
def test_an_outcome_for_a_finished_job_is_dropped_and_changes_nothing(store: Store, final: JobState) -> None:
    [job_id] = submit(store)
    attempt_id = claim(store, job_id)
    assert store.attempt_started(attempt_id, "n1", 7, NOW + 1)
    assert store.apply_outcome(JobOutcome(job_id, final, "first", (attempt_id,), exit_code=0), NOW + 2)
    before = snapshot_of_tables(store)

    late = [
        retry.after_temp_failure(store.job(job_id), NOW + 3, RETRY, "node lost", (attempt_id,)),
        JobOutcome(job_id, JobState.COMPLETE, "late exit", (attempt_id,), exit_code=0),
        JobOutcome(job_id, JobState.CANCELLED, "late cancel", (attempt_id,)),
        JobOutcome(job_id, JobState.FAILED, "late failure", (attempt_id,), perm_failure=True, exit_code=1),
    ]
    for outcome in late:
        assert store.apply_outcome(outcome, NOW + 3) is False
    assert snapshot_of_tables(store) == before


def test_a_repeated_requeue_is_dropped(store: Store) -> None:
    [job_id] = submit(store)
    attempt_id = claim(store, job_id)
    outcome = retry.after_temp_failure(store.job(job_id), NOW + 1, RETRY, "lost", (attempt_id,))
    assert store.apply_outcome(outcome, NOW + 1) is True
    before = snapshot_of_tables(store)
    assert store.apply_outcome(outcome, NOW + 2) is False  # e.g. two passes saw the same loss
    assert snapshot_of_tables(store) == before
    assert store.job_row(job_id)["temp_failures"] == 1


def test_an_outcome_for_an_unknown_job_is_dropped(store: Store) -> None:
    assert store.apply_outcome(JobOutcome(999, JobState.CANCELLED, "x"), NOW) is False
    assert count_rows(store, "events") == 0


def test_an_illegal_transition_is_refused_and_changes_nothing(store: Store) -> None:
    [job_id] = submit(store)
    before = snapshot_of_tables(store)
    with pytest.raises(IllegalTransition):
        store.apply_outcome(JobOutcome(job_id, JobState.COMPLETE, "exit 0", exit_code=0), NOW + 1)
    assert snapshot_of_tables(store) == before
    assert all_rows(store, "jobs")[0]["state"] == JobState.QUEUED.value


def test_a_finished_jobs_priority_is_left_alone(store: Store) -> None:
    [job_id] = submit(store)
    attempt_id = claim(store, job_id, nodes=["n1"])
    assert store.finish_attempt(attempt_id, "n1", 0, NOW + 5, after_exit(0, attempt_id))
    assert store.set_priority(job_id, 0, NOW + 6) is False  # 0 would read as a cancel that never was
    row = store.job_row(job_id)
    assert row["state"] == JobState.COMPLETE.value and row["priority"] == 1
    assert "job.priority" not in event_kinds(store, job_id)
    with pytest.raises(NotFound):
        store.set_priority(987654, 3, NOW)


def test_cancelling_a_queued_job(store: Store) -> None:
    [job_id] = submit(store)
    assert store.request_cancel(job_id, NOW + 1)["changed"]
    assert store.apply_outcome(JobOutcome(job_id, JobState.CANCELLED, "cancelled by request"), NOW + 2)
    row = store.job_row(job_id)
    assert row["state"] == JobState.CANCELLED.value and row["finished_at"] == NOW + 2
    # A finished job ignores further cancel requests.
    assert store.request_cancel(job_id, NOW + 3) == {"id": job_id, "state": "cancelled", "changed": False}
    assert event_kinds(store, job_id) == ["job.queued", "job.cancel_requested", "job.cancelled"]
