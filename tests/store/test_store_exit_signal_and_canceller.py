"""What a workflow engine reads of how a job ended, on SQLite and PostgreSQL: the signal that killed
its command beside the exit code (128+N, as ever), so that a program that exited 137 is told from
one SIGKILLed (an out-of-memory kill's usual sign, Slurm's ExitCode=0:9); and who asked for its
cancel, which only its event said."""

from __future__ import annotations

import signal
from collections.abc import Callable

from corral.core import retry
from corral.core.model import Job, JobState
from corral.core.snapshot import JobOutcome
from corral.jobspec import JobRequest
from corral.store import CANCELLED_BY_OPERATOR, JobFilter, Store, acting_as

from .storekit import NOW, claim, submit

KILLED = 128 + signal.SIGKILL


def exited(code: int, attempt_id: int, exit_signal: int | None = None) -> Callable[[Job], JobOutcome]:
    return lambda job: retry.after_exit(job, code, (attempt_id,), exit_signal=exit_signal)


def ended(store: Store, job_id: int) -> tuple[str, int | None, int | None, str]:
    row = store.job_row(job_id)
    return row["state"], row["exit_code"], row["exit_signal"], row["wait_reason"]


def test_a_command_killed_by_a_signal_is_told_from_one_that_exited_with_128_plus_n(store: Store) -> None:
    killed, exiting = submit(store, 2)
    killed_attempt, exiting_attempt = claim(store, killed), claim(store, exiting)
    assert store.finish_attempt(killed_attempt, "n1", KILLED, NOW + 5, exited(KILLED, killed_attempt, 9), None, 9)
    assert store.finish_attempt(exiting_attempt, "n1", KILLED, NOW + 5, exited(KILLED, exiting_attempt))

    said = "exit 137: killed by signal 9 (SIGKILL)"
    assert ended(store, killed) == ("failed", 137, 9, said)
    assert ended(store, exiting) == ("failed", 137, None, "exit 137")
    assert [(a["exit_code"], a["exit_signal"]) for a in store.attempts_of(killed)] == [(137, 9)]
    assert [(a["exit_code"], a["exit_signal"]) for a in store.attempts_of(exiting)] == [(137, None)]
    # The job's end event says it too: what a notification or `corral events` shows.
    assert [e["message"] for e in store.list_events(job_id=killed, kind="job.failed")] == [said]
    assert store.job(killed).exit_signal == 9 and store.job(exiting).exit_signal is None


def test_a_retry_that_exits_clears_the_kill_before_it_and_a_requeue_clears_both(store: Store) -> None:
    [job_id] = store.submit([JobRequest(command=["x"], max_retries=1)], NOW)
    first = claim(store, job_id)
    assert store.finish_attempt(first, "n1", KILLED, NOW + 5, exited(KILLED, first, 9), None, 9)
    assert ended(store, job_id) == ("queued", 137, 9, "exit 137: killed by signal 9 (SIGKILL); retry 1/1")
    second = claim(store, job_id, now=NOW + 10)
    assert store.finish_attempt(second, "n1", 3, NOW + 15, exited(3, second))
    assert ended(store, job_id) == ("failed", 3, None, "exit 3")
    assert [a["exit_signal"] for a in store.attempts_of(job_id)] == [9, None]  # each run keeps its own

    assert store.request_requeue(job_id, NOW + 20)["changed"]
    row = store.job_row(job_id)
    assert (row["state"], row["exit_code"], row["exit_signal"]) == ("queued", None, None)


def test_who_asked_for_a_cancel_is_on_the_job_from_the_request_to_its_end(store: Store) -> None:
    by_alice, by_operator, by_filter, by_priority, raised_again = submit(store, 5)
    with acting_as("alice"):
        assert store.request_cancel(by_alice, NOW + 1)["changed"]
    assert store.request_cancel(by_operator, NOW + 1)["changed"]  # the data directory's token: no user
    with acting_as("bob"):
        assert store.request_cancel_matching(NOW + 1, JobFilter(name="job-2")) == [by_filter]
        assert store.set_priority(by_priority, 0, NOW + 1)
        assert store.set_priority(raised_again, 0, NOW + 1)
    assert store.set_priority(raised_again, 5, NOW + 2)  # taken back before any pass cancelled it

    expected = {
        by_alice: "alice",
        by_operator: CANCELLED_BY_OPERATOR,
        by_filter: "bob",
        by_priority: "bob",
        raised_again: None,
    }
    assert {job_id: store.job_row(job_id)["cancelled_by"] for job_id in expected} == expected
    # The pass carries the cancels out (retry.on_request): each keeps who asked.
    for job_id in (by_alice, by_operator, by_filter, by_priority):
        assert store.apply_outcome(retry.on_request(store.job(job_id)) or JobOutcome(job_id, JobState.QUEUED, ""), NOW)
    assert {job_id: store.job_row(job_id)["state"] for job_id in expected} == {
        **dict.fromkeys((by_alice, by_operator, by_filter, by_priority), "cancelled"),
        raised_again: "queued",
    }
    assert {job_id: store.job_row(job_id)["cancelled_by"] for job_id in expected} == expected

    # Submitted with priority 0 (seed 001: a cancel), by whoever submitted it.
    with acting_as("carol"):
        [at_once] = store.submit([JobRequest(command=["x"], priority=0)], NOW + 3)
    assert store.job_row(at_once)["cancelled_by"] == "carol"


def test_a_cancel_nobody_asked_for_names_nobody_and_one_overtaken_by_the_end_is_dropped(store: Store) -> None:
    never_ran, completed = submit(store, 2)
    # A dependency never satisfied: corral's own cancel (end_cause says why).
    assert store.apply_outcome(JobOutcome(never_ran, JobState.CANCELLED, "DependencyNeverSatisfied: afterok:9"), NOW)
    assert store.job_row(never_ran)["cancelled_by"] is None

    # Asked for, but the command completed before the pass cancelled it: nothing was cancelled.
    attempt = claim(store, completed)
    with acting_as("alice"):
        store.request_cancel(completed, NOW + 1)
    assert store.finish_attempt(attempt, "n1", 0, NOW + 2, exited(0, attempt))
    row = store.job_row(completed)
    assert (row["state"], row["cancelled_by"]) == ("complete", None)
