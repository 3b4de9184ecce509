"""Seed 001: dispatchers heartbeat; when one stops, another releases its claims as TempFails."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import text, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from corral.core import retry
from corral.core.dispatchers import newly_silent
from corral.core.model import AttemptState, JobState, Resources
from corral.core.reconcile import plan_pass
from corral.core.settings import PolicySettings
from corral.store import Store, schema

from .conftest import pg_schema, require_postgresql
from .storekit import NOW, SMALL, add_node, attempts_to_kill, claim, event_kinds, submit

POLICY = PolicySettings()  # dispatcher_stale 60 s, start_timeout 120 s, ping_stale 60 s
STALE = NOW + POLICY.dispatch.dispatcher_stale + 10  # A's last heartbeat was at NOW


def test_heartbeat_registers_once_then_updates(store: Store) -> None:
    store.heartbeat("disp-a", NOW, host="h1", pid=11)
    store.heartbeat("disp-a", NOW + 5, host="h1", pid=11)
    store.heartbeat("disp-b", NOW + 6, host="h2", pid=22)

    snap = store.load_snapshot("disp-b", [SMALL], observing_since=0.0)
    assert sorted((d.id, d.last_heartbeat) for d in snap.dispatchers) == [("disp-a", NOW + 5), ("disp-b", NOW + 6)]
    registered = store.list_events(kind="dispatcher.registered")
    assert [e["message"] for e in registered] == ["disp-a on h1 pid 11", "disp-b on h2 pid 22"]


def test_a_restarted_dispatcher_records_where_it_runs_now(store: Store) -> None:
    store.heartbeat("disp-a", NOW, host="h1", pid=11)
    store.heartbeat("disp-a", NOW + 5, host="h1", pid=11)
    store.heartbeat("disp-a", NOW + 100, host="h1", pid=12)  # the same data directory, a new process
    store.heartbeat("disp-a", NOW + 105, host="h1", pid=12)

    (row,) = store.dispatcher_rows()
    assert (row["host"], row["pid"], row["started_at"], row["last_heartbeat"]) == ("h1", 12, NOW + 100, NOW + 105)
    assert [(e["kind"], e["message"]) for e in store.list_events(kind="dispatcher.")] == [
        ("dispatcher.registered", "disp-a on h1 pid 11"),
        ("dispatcher.restarted", "disp-a on h1 pid 12"),
    ]


def test_claims_of_a_stale_dispatcher_are_released_by_another_as_tempfails(store: Store) -> None:
    for node in ("n1", "n2"):
        add_node(store, node, NOW)
    store.heartbeat("disp-a", NOW)
    store.heartbeat("disp-b", NOW)
    a_claimed, a_running, b_claimed, b_running, queued = submit(store, 5)
    a_attempts = {
        a_claimed: claim(store, a_claimed, "disp-a", ["n1"], now=NOW),
        a_running: claim(store, a_running, "disp-a", ["n1"], now=NOW),
    }
    b_attempts = {
        b_claimed: claim(store, b_claimed, "disp-b", ["n2"], now=NOW),
        b_running: claim(store, b_running, "disp-b", ["n2"], now=NOW),
    }
    assert store.attempt_started(a_attempts[a_running], "n1", 100, NOW + 1)
    assert store.attempt_started(b_attempts[b_running], "n2", 200, NOW + 1)

    # Time passes: B and both agents keep reporting, A has gone silent. (Attempts assigned at NOW
    # are still within the start timeout, so only A's silence can release anything.)
    store.heartbeat("disp-b", STALE)
    for node in ("n1", "n2"):
        store.record_ping(node, Resources(0.0, 0, 0, 0), STALE)
    snapshot = store.load_snapshot("disp-b", [SMALL], observing_since=NOW - 1000)
    decisions = plan_pass(snapshot, STALE, POLICY)

    assert {o.job_id for o in decisions.job_outcomes} == {a_claimed, a_running}
    for outcome in decisions.job_outcomes:
        assert outcome.attempt_ids == (a_attempts[outcome.job_id],)
        assert store.apply_outcome(outcome, STALE) is True

    for job_id in (a_claimed, a_running):
        row = store.job_row(job_id)
        assert row["state"] == JobState.QUEUED.value and row["claimed_by"] is None
        assert row["temp_failures"] == 1 and row["retry_at"] == STALE + POLICY.retry.backoff(1)
        assert "dispatcher disp-a stopped heartbeating" in row["wait_reason"]
        [attempt] = store.attempts_of(job_id)
        assert attempt["state"] == AttemptState.TEMPFAIL.value and attempt["finished_at"] == STALE
        assert event_kinds(store, job_id)[-1] == "job.requeued"
        [requeued] = store.list_events(job_id=job_id, kind="job.requeued")
        assert "dispatcher disp-a stopped heartbeating" in requeued["message"]
    assert store.open_job_ids_claimed_by("disp-a") == []

    # B's own claims are untouched, and so is the job nobody claimed.
    assert store.job_row(b_claimed)["state"] == JobState.CLAIMED.value
    assert store.job_row(b_running)["state"] == JobState.RUNNING.value
    for job_id in (b_claimed, b_running):
        row = store.job_row(job_id)
        assert row["claimed_by"] == "disp-b" and row["temp_failures"] == 0
        assert [a["state"] for a in store.attempts_of(job_id)] in (["assigned"], ["running"])
        assert "job.requeued" not in event_kinds(store, job_id)
    assert sorted(store.open_job_ids_claimed_by("disp-b")) == sorted([b_claimed, b_running])
    assert store.job_row(queued)["state"] == JobState.QUEUED.value

    # The released jobs' agent is told to stop them; the next pass finds nothing left to release.
    assert attempts_to_kill(store, "n1", [a_attempts[a_running]]) == [a_attempts[a_running]]
    again = plan_pass(store.load_snapshot("disp-b", [SMALL], NOW - 1000), STALE + 1, POLICY)
    assert again.job_outcomes == []


def test_a_dispatcher_never_releases_its_own_claims(store: Store) -> None:
    add_node(store, "n1", NOW)
    store.heartbeat("disp-a", NOW)
    [job_id] = submit(store)
    claim(store, job_id, "disp-a", ["n1"], now=NOW)
    store.record_ping("n1", Resources(0.0, 0, 0, 0), STALE)

    # A's own record looks stale (e.g. it was paused), but a pass run by A does not release A's work.
    decisions = plan_pass(store.load_snapshot("disp-a", [SMALL], NOW - 1000), STALE, POLICY)
    assert decisions.job_outcomes == []


def test_a_restarted_observer_gives_dispatchers_time_before_releasing(store: Store) -> None:
    """Staleness is judged from when B started observing, not from A's old heartbeat alone."""
    add_node(store, "n1", NOW)
    store.heartbeat("disp-a", NOW)
    [job_id] = submit(store)
    claim(store, job_id, "disp-a", ["n1"], now=NOW)
    store.heartbeat("disp-b", STALE)
    store.record_ping("n1", Resources(0.0, 0, 0, 0), STALE)

    decisions = plan_pass(store.load_snapshot("disp-b", [SMALL], observing_since=STALE - 1), STALE, POLICY)
    assert decisions.job_outcomes == []


def test_a_late_release_of_a_stale_claim_leaves_the_new_claim_alone(store: Store) -> None:
    """B and C both see A stop heartbeating. B releases A's claim and, after the back-off, claims
    the job again on its own node; C's pass, planned before all that, then carries out its own
    release of A's claim. That outcome is about A's attempt, which is over: it must not requeue
    B's run (the job would be queued with B's attempt still running, and claimed and run twice)."""
    for node in ("n1", "n2"):
        add_node(store, node, NOW)
    for dispatcher in ("disp-a", "disp-b", "disp-c"):
        store.heartbeat(dispatcher, NOW)
    [job_id] = submit(store)
    a_attempt = claim(store, job_id, "disp-a", ["n1"], now=NOW)
    assert store.attempt_started(a_attempt, "n1", 100, NOW + 1)
    for node in ("n1", "n2"):
        store.record_ping(node, Resources(0.0, 0, 0, 0), STALE)
    store.heartbeat("disp-b", STALE)
    store.heartbeat("disp-c", STALE)

    [b_release] = plan_pass(store.load_snapshot("disp-b", [SMALL], NOW - 1000), STALE, POLICY).job_outcomes
    [c_release] = plan_pass(store.load_snapshot("disp-c", [SMALL], NOW - 1000), STALE, POLICY).job_outcomes
    assert b_release.attempt_ids == c_release.attempt_ids == (a_attempt,)
    assert store.apply_outcome(b_release, STALE) is True
    later = STALE + POLICY.retry.backoff(1) + 1
    b_attempt = claim(store, job_id, "disp-b", ["n2"], now=later)
    assert store.attempt_started(b_attempt, "n2", 200, later)

    assert store.apply_outcome(c_release, later) is False
    row = store.job_row(job_id)
    assert row["state"] == JobState.RUNNING.value and row["claimed_by"] == "disp-b" and row["temp_failures"] == 1
    assert [a["state"] for a in store.attempts_of(job_id)] == [AttemptState.TEMPFAIL.value, AttemptState.RUNNING.value]
    assert event_kinds(store, job_id).count("job.requeued") == 1


def test_a_silent_dispatcher_is_told_once_and_its_return_too(store: Store) -> None:
    """Its released claims said it job by job, and a silent dispatcher with no claims not at all: a
    [[notify]] rule had nothing to page on when a dispatcher died."""
    store.heartbeat("disp-a", NOW, host="h1", pid=11)
    store.heartbeat("disp-c", NOW, host="h3", pid=33)
    store.dispatcher_stopped("disp-c", NOW + 1, "nothing")  # a clean stop is said by its own event
    store.heartbeat("disp-b", STALE, host="h2", pid=22)

    def judge(at: float) -> list[str]:
        silent = newly_silent(store.load_snapshot("disp-b", [SMALL], NOW - 1000), at, POLICY)
        store.dispatchers_silent(silent, at)
        return silent

    assert judge(NOW + 30) == []  # within dispatcher_stale
    assert judge(STALE) == ["disp-a"]
    assert judge(STALE + 5) == []  # said once
    [stale] = store.list_events(kind="dispatcher.stale")
    assert stale["message"] == "disp-a on h1 pid 11: no heartbeat for 70s; its claims are released"

    store.heartbeat("disp-a", STALE + 20, host="h1", pid=11)  # it was paused, not dead
    [resumed] = store.list_events(kind="dispatcher.resumed")
    assert resumed["message"].startswith("disp-a on h1 pid 11 heartbeats again; judged silent at ")
    store.heartbeat("disp-a", STALE + 25, host="h1", pid=11)
    assert len(store.list_events(kind="dispatcher.resumed")) == 1
    # Silent again later: said again.
    assert judge(STALE + 25 + POLICY.dispatch.dispatcher_stale + 1) == ["disp-a"]
    assert len(store.list_events(kind="dispatcher.stale")) == 2


def test_a_dispatcher_frozen_in_a_transaction_holds_its_peers_up_no_longer_than_dispatcher_stale() -> None:
    """A dispatcher frozen (SIGSTOP, a stopped VM) between a write and its commit kept its row
    locks and the events' lock: the peer that was to judge it silent and take its claims over
    waited on them for as long as it stayed frozen (a Slurm peer never adopted its jobs). Its
    session is ended once its transaction has idled `dispatcher_stale`, and the transaction with it."""
    require_postgresql()
    with pg_schema() as url:
        frozen, peer = Store(url, idle_in_transaction=2.0), Store(url)
        try:
            frozen.migrate()  # (a migration's transaction is not bounded: migrations/env.py)
            frozen.heartbeat("disp-a", NOW, host="h1", pid=11)
            peer.heartbeat("disp-b", NOW, host="h2", pid=22)
            with ThreadPoolExecutor(1) as pool, pytest.raises(DBAPIError), frozen.write() as conn:
                # Its next heartbeat, and an event of the same transaction: frozen before the commit.
                conn.execute(
                    update(schema.dispatchers).where(schema.dispatchers.c.id == "disp-a").values(last_heartbeat=NOW + 1)
                )
                conn.execute(
                    text("SELECT pg_advisory_xact_lock(hashtext('corral.events'), hashtext(current_schema()))")
                )
                judged = pool.submit(peer.dispatchers_silent, ["disp-a"], STALE)
                judged.result(timeout=30)  # unbounded, the peer waited here as long as disp-a slept
            [told] = peer.list_events(kind="dispatcher.stale")
            assert told["message"].startswith("disp-a on h1 pid 11: no heartbeat for")
            rows = {d.id: d for d in peer.load_snapshot("disp-b", [SMALL], NOW).dispatchers}
            assert rows["disp-a"].last_heartbeat == NOW and rows["disp-a"].judged_stale  # its write was rolled back
            # Woken, it goes on with a new session: its next heartbeat says it is back.
            frozen.heartbeat("disp-a", STALE + 5, host="h1", pid=11)
            assert len(peer.list_events(kind="dispatcher.resumed")) == 1
        finally:
            frozen.close()
            peer.close()


def test_a_dbas_own_idle_in_transaction_timeout_is_kept() -> None:
    require_postgresql()
    with pg_schema() as url:
        parsed = make_url(url)
        options = f"-cidle_in_transaction_session_timeout=5min {parsed.query['options']}"
        dbas = parsed.update_query_dict({"options": options}).render_as_string(hide_password=False)
        for store_url, expected in ((url, "1500ms"), (dbas, "5min")):
            store = Store(store_url, idle_in_transaction=1.5)
            try:
                with store.read() as conn:
                    assert conn.execute(text("SHOW idle_in_transaction_session_timeout")).scalar_one() == expected
            finally:
                store.close()


def test_a_silent_dispatchers_attempt_is_adopted_once_and_only_while_it_is_still_its_own(store: Store) -> None:
    """In front of Slurm a peer adopts a silent dispatcher's attempt that Slurm still runs: the
    attempt and the job's claim move to it together, once (a second peer, or the silent one's own
    end of the attempt meanwhile, leaves nothing to adopt)."""
    add_node(store, "slurm", NOW)
    adopted, ended = submit(store, 2)
    attempt = claim(store, adopted, "disp-a", ["slurm"], now=NOW)
    gone = claim(store, ended, "disp-a", ["slurm"], now=NOW)
    assert store.adopt_attempt(attempt, adopted, "disp-a", "disp-b", "adopted by disp-b", STALE)
    assert not store.adopt_attempt(attempt, adopted, "disp-a", "disp-c", "adopted by disp-c", STALE)
    assert store.job(adopted).claimed_by == "disp-b"
    assert [a["dispatcher_id"] for a in store.attempts_of(adopted)] == ["disp-b"]
    assert [e["message"] for e in store.list_events(kind="slurm.adopted")] == ["adopted by disp-b"]

    # The silent one recorded its attempt's end before the peer got to it: nothing moves.
    assert store.finish_attempt(gone, "slurm", 0, NOW + 5, lambda job: retry.after_exit(job, 0, (gone,)))
    assert not store.adopt_attempt(gone, ended, "disp-a", "disp-b", "too late", STALE)
    assert store.job(ended).state is JobState.COMPLETE and store.job(ended).claimed_by == "disp-a"


def test_a_dispatcher_holds_its_attempt_to_submit_only_while_a_peer_has_not_released_it(store: Store) -> None:
    """Read just before sbatch: a dispatcher frozen between its claim and its sbatch (SIGSTOP, a
    stalled host) finds its claim released by a peer, or the job claimed anew, and submits nothing."""
    add_node(store, "slurm", NOW)
    store.heartbeat("disp-a", NOW)
    released, submitted = submit(store, 2)
    frozen = claim(store, released, "disp-a", ["slurm"], now=NOW)
    sent = claim(store, submitted, "disp-a", ["slurm"], now=NOW)
    assert store.holds_unsubmitted(frozen, "disp-a") and store.holds_unsubmitted(sent, "disp-a")
    assert not store.holds_unsubmitted(frozen, "disp-b")
    store.set_executor_ref(sent, "17", "submitted as slurm job 17", NOW)
    assert not store.holds_unsubmitted(sent, "disp-a")  # submitted already

    # disp-a is frozen past dispatcher_stale: disp-b releases its claims, and claims the job anew.
    store.heartbeat("disp-b", STALE)
    snapshot = store.load_snapshot("disp-b", [SMALL], observing_since=NOW - 1000)
    for outcome in plan_pass(snapshot, STALE, POLICY).job_outcomes:
        assert store.apply_outcome(outcome, STALE)
    assert store.job(released).state is JobState.QUEUED
    assert not store.holds_unsubmitted(frozen, "disp-a")
    with store.write() as conn:  # its back-off over
        from sqlalchemy import update

        from corral.store.schema import jobs

        conn.execute(update(jobs).where(jobs.c.id == released).values(retry_at=None))
    again = claim(store, released, "disp-b", ["slurm"], now=STALE)
    assert not store.holds_unsubmitted(frozen, "disp-a") and store.holds_unsubmitted(again, "disp-b")
