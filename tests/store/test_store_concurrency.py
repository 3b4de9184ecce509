"""Store calls racing each other on the same rows, the way the agent API and the loop do.

A side transaction (another client) holds the contested row until the racing calls are lined up
behind it, then lets them all go. On PostgreSQL the test waits (polling pg_stat_activity, with a
deadline) until the calls are really blocked, so the interleaving is the one named in the test. On
SQLite every write takes the single database write lock, so the calls run one after the other in
some order; the assertions there are those that must hold for any order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import TypeVar

import pytest
from sqlalchemy import event

from corral.core import retry
from corral.core.model import AttemptState, JobState
from corral.core.settings import RetrySettings
from corral.core.snapshot import Annotation
from corral.store import JobFilter, NotBackedOff, Store

from .conftest import pg_schema, require_postgresql
from .storekit import (
    NOW,
    SideTransaction,
    after_exit,
    all_rows,
    claim,
    event_kinds,
    lock_waiters,
    request,
    submit,
    wait_for_lock_waiters,
)

T = TypeVar("T")
RESULT_TIMEOUT = 60.0


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=4) as executor:
        yield executor


def run_blocked(pool: ThreadPoolExecutor, store: Store, call: Callable[[], T], waiting: int) -> Future[T]:
    """Start `call` in a thread and wait until `waiting` store calls (this one included) are blocked."""
    future = pool.submit(call)
    wait_for_lock_waiters(store, waiting)
    return future


def running_job(store: Store) -> tuple[int, int]:
    [job_id] = submit(store)
    attempt_id = claim(store, job_id, nodes=["n1"])
    assert store.attempt_started(attempt_id, "n1", 4242, NOW + 1)
    return job_id, attempt_id


def test_a_requeue_racing_the_jobs_completion_is_dropped(store: Store, pool: ThreadPoolExecutor) -> None:
    """The agent's exit report completes the job while a pass requeues it (node thought lost)."""
    job_id, attempt_id = running_job(store)
    stale_view = store.job(job_id)  # what the pass saw: running
    requeue = retry.after_temp_failure(stale_view, NOW + 5, RetrySettings(), "node n1 lost", (attempt_id,))

    with SideTransaction(store) as side:  # the exit report, not yet committed
        side.execute(f"UPDATE jobs SET state = 'complete', exit_code = 0, finished_at = {NOW + 4} WHERE id = {job_id}")
        side.execute(f"UPDATE attempts SET state = 'exited', exit_code = 0 WHERE id = {attempt_id}")
        applied = run_blocked(pool, store, lambda: store.apply_outcome(requeue, NOW + 5), waiting=1)
        side.commit()

    assert applied.result(RESULT_TIMEOUT) is False
    row = store.job_row(job_id)
    assert row["state"] == JobState.COMPLETE.value and row["temp_failures"] == 0 and row["retry_at"] is None
    attempt = store.attempt_row(attempt_id)
    assert attempt is not None and attempt["state"] == AttemptState.EXITED.value
    assert "job.requeued" not in event_kinds(store, job_id)


def test_duplicate_exit_reports_racing_each_other_count_once(store: Store, pool: ThreadPoolExecutor) -> None:
    """An agent re-sends an exit report while the first one is still being written."""
    job_id, attempt_id = running_job(store)

    with SideTransaction(store) as side:
        side.execute(f"UPDATE attempts SET reason = reason WHERE id = {attempt_id}")  # holds the attempt row
        first = run_blocked(
            pool,
            store,
            lambda: store.finish_attempt(attempt_id, "n1", 0, NOW + 5, after_exit(0, attempt_id)),
            waiting=1,
        )
        second = run_blocked(
            pool,
            store,
            lambda: store.finish_attempt(attempt_id, "n1", 0, NOW + 6, after_exit(0, attempt_id)),
            waiting=2,
        )
        side.commit()

    results = [first.result(RESULT_TIMEOUT), second.result(RESULT_TIMEOUT)]
    assert sum(results) == 1, results  # exactly one report is recorded, with its outcome
    attempt = store.attempt_row(attempt_id)
    assert attempt is not None and attempt["state"] == AttemptState.EXITED.value and attempt["exit_code"] == 0


def test_an_exit_report_racing_a_requeue_never_revives_the_ended_attempt(
    store: Store, pool: ThreadPoolExecutor
) -> None:
    """The start report was lost, the pass requeues the attempt as never started, and its exit report
    arrives at the same moment. Whichever is first, the other must see it: no deadlock, and never an
    exit recorded on an attempt that was already ended (its job would then be failed or completed
    although it had been requeued)."""
    [job_id] = submit(store)
    attempt_id = claim(store, job_id, nodes=["n1"])  # assigned; the start report never arrived
    requeue = retry.after_temp_failure(
        store.job(job_id), NOW + 200, RetrySettings(), "not started within the start timeout", (attempt_id,)
    )

    with SideTransaction(store) as side:
        side.execute(f"UPDATE attempts SET reason = reason WHERE id = {attempt_id}")  # holds the attempt row
        requeued = run_blocked(pool, store, lambda: store.apply_outcome(requeue, NOW + 200), waiting=1)
        exited = run_blocked(
            pool,
            store,
            lambda: store.finish_attempt(attempt_id, "n1", 1, NOW + 200, after_exit(1, attempt_id)),
            waiting=2,
        )
        side.commit()

    requeue_applied, exit_result = requeued.result(RESULT_TIMEOUT), exited.result(RESULT_TIMEOUT)
    attempt = store.attempt_row(attempt_id)
    row = store.job_row(job_id)
    assert attempt is not None
    if not exit_result:  # the requeue came first (always so on PostgreSQL, where the order is forced)
        assert requeue_applied is True
        assert attempt["state"] == AttemptState.TEMPFAIL.value and attempt["exit_code"] is None
        assert row["state"] == JobState.QUEUED.value and row["temp_failures"] == 1
    else:  # the exit came first: the attempt ran and exited; the requeue no longer touches it
        assert lock_waiters(store) is None, "on PostgreSQL the requeue was lined up first"
        assert attempt["state"] == AttemptState.EXITED.value and attempt["exit_code"] == 1


def test_a_start_report_racing_a_cancel_is_refused(store: Store, pool: ThreadPoolExecutor) -> None:
    [job_id] = submit(store)
    attempt_id = claim(store, job_id, nodes=["n1"])

    with SideTransaction(store) as side:  # the pass cancelling the job, not yet committed
        side.execute(f"UPDATE jobs SET state = 'cancelled', finished_at = {NOW + 1} WHERE id = {job_id}")
        side.execute(f"UPDATE attempts SET state = 'cancelled' WHERE id = {attempt_id}")
        started = run_blocked(pool, store, lambda: store.attempt_started(attempt_id, "n1", 7, NOW + 2), waiting=1)
        side.commit()

    assert started.result(RESULT_TIMEOUT) is False  # the agent kills it
    assert store.job_row(job_id)["state"] == JobState.CANCELLED.value
    attempt = store.attempt_row(attempt_id)
    assert attempt is not None and attempt["state"] == AttemptState.CANCELLED.value and attempt["pid"] is None


def test_a_late_start_report_never_revives_an_attempt_replaced_meanwhile(
    store: Store, pool: ThreadPoolExecutor
) -> None:
    """While the start report of attempt 1 waits for the job row, attempt 1 is ended (never started)
    and the job is claimed again as attempt 2. The late report must not start the job on attempt 1."""
    [job_id] = submit(store)
    first = claim(store, job_id, "d1", nodes=["n1"])
    second = first + 1

    with SideTransaction(store) as side:  # the requeue and the new claim, committed together
        side.execute(f"UPDATE jobs SET claimed_by = 'd2', attempt_count = 2, node_id = 'n2' WHERE id = {job_id}")
        side.execute(f"UPDATE attempts SET state = 'tempfail', finished_at = {NOW + 200} WHERE id = {first}")
        side.execute(
            "INSERT INTO attempts (id, job_id, node_id, node_ids, vcpus, ram_mib, scratch_mib, gpus, state, "
            f"dispatcher_id, assigned_at, reason) VALUES ({second}, {job_id}, 'n2', '[\"n2\"]', 1, 1024, 0, 0, "
            f"'assigned', 'd2', {NOW + 300}, '')"
        )
        started = run_blocked(pool, store, lambda: store.attempt_started(first, "n1", 7, NOW + 301), waiting=1)
        side.commit()

    assert started.result(RESULT_TIMEOUT) is False
    row = store.job_row(job_id)
    assert row["state"] == JobState.CLAIMED.value and row["claimed_by"] == "d2" and row["started_at"] is None
    assert [(a["id"], a["state"]) for a in store.attempts_of(job_id)] == [
        (first, AttemptState.TEMPFAIL.value),
        (second, AttemptState.ASSIGNED.value),
    ]


def test_a_cancel_request_racing_the_jobs_completion_leaves_the_finished_job_alone(
    store: Store, pool: ThreadPoolExecutor
) -> None:
    """The cancel reads the job while it still runs, then waits for the row the exit report holds."""
    job_id, attempt_id = running_job(store)

    with SideTransaction(store) as side:  # the exit report, not yet committed
        side.execute(f"UPDATE jobs SET state = 'complete', exit_code = 0, finished_at = {NOW + 4} WHERE id = {job_id}")
        side.execute(f"UPDATE attempts SET state = 'exited', exit_code = 0 WHERE id = {attempt_id}")
        cancel = run_blocked(pool, store, lambda: store.request_cancel(job_id, NOW + 5), waiting=1)
        side.commit()

    assert cancel.result(RESULT_TIMEOUT) == {"id": job_id, "state": JobState.COMPLETE.value, "changed": False}
    row = store.job_row(job_id)
    assert row["state"] == JobState.COMPLETE.value and not row["cancel_requested"]
    assert "job.cancel_requested" not in event_kinds(store, job_id)


def test_dispatchers_recording_the_same_unavailable_type_at_once_all_succeed(
    store: Store, pool: ThreadPoolExecutor
) -> None:
    """The first call has written its row and waits to write its event; the others queue behind that
    uncommitted row. All must succeed, and the longest back-off wins whatever the order."""
    untils = [NOW + 300, NOW + 900, NOW + 600, NOW + 120]

    with SideTransaction(store) as side:
        if side.postgresql:  # on SQLite the side transaction's write lock already holds every call
            side.execute("LOCK TABLE events IN EXCLUSIVE MODE")
        calls = [
            run_blocked(
                pool,
                store,
                partial(store.set_unavailable, "big", until, f"no capacity ({until:.0f})", NOW),
                waiting=i + 1,
            )
            for i, until in enumerate(untils)
        ]
        side.commit()

    for call in calls:
        call.result(RESULT_TIMEOUT)
    assert all_rows(store, "unavailable_types") == [
        {
            "instance_type": "big",
            "until": NOW + 900,
            "reason": f"no capacity ({NOW + 900:.0f})",
            "boot_failures": 0,
            "boot_failed_at": None,
        }
    ]
    assert len(store.list_events(kind="capacity.unavailable")) == len(untils)


def test_an_event_committed_after_a_later_written_one_is_still_read_after_it(pool: ThreadPoolExecutor) -> None:
    """The notifier and /metrics read events by 'id above the last one seen'. On PostgreSQL, a
    transaction that wrote its event first and committed last took the lower id, and a reader
    between the two commits moved past it: it was never read (a job.failed never paged). SQLite
    has one writer at a time, so this is PostgreSQL's alone."""
    require_postgresql()
    with pg_schema() as url:
        store = Store(url)
        try:
            store.migrate()
            [job_id] = submit(store)
            cursor = store.last_event_id()
            written, commit = threading.Event(), threading.Event()

            def slow_writer() -> None:
                with store.write() as conn:
                    Store._event(conn, NOW, "job.slow", "written first, committed last", job_id)
                    written.set()
                    assert commit.wait(RESULT_TIMEOUT)

            slow = pool.submit(slow_writer)
            assert written.wait(RESULT_TIMEOUT)
            store.add_event(NOW, "job.fast", "written last, committed first", job_id)
            first_read = store.events_after(cursor)  # a reader between the two commits
            commit.set()
            slow.result(RESULT_TIMEOUT)
            second_read = store.events_after(first_read[-1]["id"] if first_read else cursor)
            assert [e["kind"] for e in first_read] == ["job.fast"]
            assert [e["kind"] for e in second_read] == ["job.slow"]
        finally:
            store.close()


# Writers of many job rows in one transaction, by their side of the race: a pass (the loop, the
# Slurm loop) and the CLI (through the API server). Each pass writer is given the two jobs in the
# order a pass may hand them over (queue order, grouped by reason: not by id); each returns what
# the jobs' rows must show once it has run.
def pass_annotates(store: Store, later: int, earlier: int) -> Callable[[dict[str, object]], bool]:
    notes = [Annotation(later, "waiting: b"), Annotation(earlier, "waiting: a")]
    store.annotate_many(notes, {}, NOW + 1)
    return lambda row: row["wait_reason"] == ("waiting: b" if row["id"] == later else "waiting: a")


def pass_annotates_with_explanations(store: Store, later: int, earlier: int) -> Callable[[dict[str, object]], bool]:
    notes = [Annotation(later, "waiting: b"), Annotation(earlier, "waiting: a")]
    store.annotate_many(notes, {later: {"why": "b"}, earlier: {"why": "a"}}, NOW + 1)
    return lambda row: row["wait_reason"] == ("waiting: b" if row["id"] == later else "waiting: a")


def pass_refreshes_explanations(store: Store, later: int, earlier: int) -> Callable[[dict[str, object]], bool]:
    store.refresh_explanations({later: {"why": "b"}, earlier: {"why": "a"}}, NOW + 1)
    return lambda row: row["explanation"] == {"why": "b" if row["id"] == later else "a", "at": NOW + 1}


def pass_sets_slurm_reasons(store: Store, later: int, earlier: int) -> Callable[[dict[str, object]], bool]:
    store.set_claimed_wait_reasons({later: "slurm: Priority", earlier: "slurm: Resources"}, NOW + 1)
    return lambda row: row["wait_reason"] == ("slurm: Priority" if row["id"] == later else "slurm: Resources")


def cli_cancels_the_users_jobs(store: Store, first: int, second: int) -> Callable[[dict[str, object]], bool]:
    assert store.request_cancel_matching(NOW + 2, JobFilter(user="alice")) == [first, second]
    return lambda row: row["cancel_requested"] is True


def cli_throttles_the_array(store: Store, first: int, second: int) -> Callable[[dict[str, object]], bool]:
    assert store.set_array_throttle(first, 1, NOW + 2)["tasks"] == 2
    return lambda row: row["array_throttle"] == 1


@pytest.mark.parametrize("cli", [cli_cancels_the_users_jobs, cli_throttles_the_array])
@pytest.mark.parametrize(
    "pass_writer",
    [pass_annotates, pass_annotates_with_explanations, pass_refreshes_explanations, pass_sets_slurm_reasons],
)
def test_a_pass_and_a_cli_call_writing_the_same_jobs_both_succeed(
    store: Store,
    pool: ThreadPoolExecutor,
    pass_writer: Callable[[Store, int, int], Callable[[dict[str, object]], bool]],
    cli: Callable[[Store, int, int], Callable[[dict[str, object]], bool]],
) -> None:
    """A pass writes why the queue waits while `corral cancel --user` (or `corral throttle`) marks
    the same jobs. Each takes its rows' locks one by one; taken in different orders (the pass's in
    queue order, the CLI's in the order the database scans them) each held a row the other wanted:
    PostgreSQL aborted one (deadlock detected), so the CLI answered 500 with nothing cancelled, or
    the pass failed. Taken in one order (job id), the second waits for the first: both succeed."""
    first, second = store.submit([request("sweep", user="alice", array="0-1")], NOW)
    if pass_writer is pass_sets_slurm_reasons:  # what a Slurm pass writes is about claimed jobs
        claim(store, first)
        claim(store, second)

    # Another client holds the second job's row until both calls wait, then rolls back (a commit
    # would leave a new version of the row, which both waiters would race to lock).
    with SideTransaction(store) as side:
        side.execute(f"UPDATE jobs SET updated_at = updated_at WHERE id = {second}")
        passed = run_blocked(pool, store, partial(pass_writer, store, second, first), waiting=1)
        cancelled = run_blocked(pool, store, partial(cli, store, first, second), waiting=2)

    pass_shows, cli_shows = passed.result(RESULT_TIMEOUT), cancelled.result(RESULT_TIMEOUT)
    rows = [store.job_row(first), store.job_row(second)]
    assert [pass_shows(row) for row in rows] == [True, True], rows
    assert [cli_shows(row) for row in rows] == [True, True], rows


def test_two_operators_clearing_the_same_back_off_at_once_one_clears_it_the_other_is_told(
    store: Store, pool: ThreadPoolExecutor
) -> None:
    """Both read the back-off in force, locked, behind another writer's uncommitted row: the first
    ends it, the second then finds it gone and is told so (one event, not two)."""
    store.set_unavailable("big", NOW + 2400, "did not pair", NOW)

    with SideTransaction(store) as side:
        side.execute("UPDATE unavailable_types SET reason = reason WHERE instance_type = 'big'")
        clears = [
            run_blocked(pool, store, partial(store.clear_backoffs, ["big"], NOW + 60), waiting=i + 1) for i in range(2)
        ]
        side.commit()

    outcomes: list[list[str] | str] = []
    for clear in clears:
        try:
            outcomes.append([c.instance_type for c in clear.result(RESULT_TIMEOUT)])
        except NotBackedOff as exc:
            outcomes.append(str(exc))
    assert sorted(outcomes, key=str) == [["big"], "big is not backed off (no instance type is backed off now)"]
    assert len(store.list_events(kind="type.backoff_cleared")) == 1
    assert all_rows(store, "unavailable_types") == []


def test_a_snapshot_is_one_consistent_read_while_an_exit_report_commits(store: Store) -> None:
    """The pass reads jobs, then attempts, then nodes. On PostgreSQL each read saw what had committed
    by then: an exit recorded between them gave a snapshot with the job still running and its
    attempt already ended, so the core saw work with no attempt behind it."""
    job_id, attempt_id = running_job(store)
    reporter = Store(store.url)  # the agent API's exit report, from another connection
    reported: list[bool] = []

    def report_after_the_jobs_are_read(_conn: object, _cursor: object, statement: str, *_rest: object) -> None:
        if not reported and statement.lstrip().upper().startswith("SELECT") and "FROM jobs" in statement:
            reported.append(reporter.finish_attempt(attempt_id, "n1", 0, NOW + 5, after_exit(0, attempt_id)))

    event.listen(store.reader, "after_cursor_execute", report_after_the_jobs_are_read)
    try:
        snapshot = store.load_snapshot("d1", [], NOW + 5)
    finally:
        event.remove(store.reader, "after_cursor_execute", report_after_the_jobs_are_read)
        reporter.close()
    assert reported == [True]  # the exit committed in the middle of the read
    (job,) = snapshot.jobs
    assert job.id == job_id and job.state is JobState.RUNNING  # as it was when the read began
    assert [a.id for a in snapshot.attempts] == [attempt_id]  # and so was its attempt
    assert store.load_snapshot("d1", [], NOW + 6).jobs == []  # the next pass sees the job complete
