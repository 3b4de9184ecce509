"""What a run used, as its node measured it (Slurm's TotalCPU and MaxRSS, which seff reads), stored
with its end on SQLite and PostgreSQL: an agent of an older corral says nothing, which reads as not
known; a run corral ended itself (a time limit, a cancel) keeps what it used until it was killed."""

from __future__ import annotations

from corral.core import retry
from corral.store import AttemptUsage, Store

from .storekit import NOW, after_exit, claim, submit


def used(store: Store, job_id: int) -> list[tuple[str, float | None, int | None]]:
    return [(a["state"], a["cpu_seconds"], a["max_rss_mib"]) for a in store.attempts_of(job_id)]


def test_an_end_report_stores_what_the_run_used_and_an_older_agents_none(store: Store) -> None:
    measured, older_agent, cpu_only = submit(store, 3)
    attempts = {job: claim(store, job) for job in (measured, older_agent, cpu_only)}
    for job, usage in ((measured, AttemptUsage(750.25, 2048)), (older_agent, None), (cpu_only, AttemptUsage(0.01))):
        attempt = attempts[job]
        assert store.finish_attempt(attempt, "n1", 0, NOW + 60, after_exit(0, attempt), NOW + 50, used=usage)

    assert used(store, measured) == [("exited", 750.25, 2048)]
    assert used(store, older_agent) == [("exited", None, None)]
    assert used(store, cpu_only) == [("exited", 0.01, None)]
    # A repeated report (the agent's ping and its /finished) changes nothing.
    again = AttemptUsage(1.0, 1)
    attempt = attempts[measured]
    assert not store.finish_attempt(attempt, "n1", 0, NOW + 70, after_exit(0, attempt), NOW + 50, used=again)
    assert used(store, measured) == [("exited", 750.25, 2048)]


def test_a_run_corral_ended_before_its_node_reported_keeps_what_it_used_once(store: Store) -> None:
    """A job that runs into its time limit is the one most in need of sizing: corral ends its attempt
    as it tells the agent to kill it, and the agent's report of the kill, which records no exit,
    still says what the run used."""
    [job] = submit(store, 1, time_limit=60)
    attempt = claim(store, job)
    assert store.attempt_started(attempt, "n1", 4242, NOW + 1)
    outcome = retry.after_timeout(store.job(job), 60, (attempt,))
    assert store.apply_outcome(outcome, NOW + 62)
    assert used(store, job) == [("timeout", None, None)]

    report = after_exit(143, attempt)
    assert not store.finish_attempt(attempt, "n1", 143, NOW + 63, report, NOW + 62, 15, used=AttemptUsage(59.5, 900))
    assert used(store, job) == [("timeout", 59.5, 900)]
    assert store.job_row(job)["exit_code"] is None  # (its exit is still not recorded)
    # Once: a later report of the same run does not change it; nor does another node's.
    assert not store.finish_attempt(attempt, "n1", 143, NOW + 64, report, NOW + 62, used=AttemptUsage(1.0, 1))
    assert not store.finish_attempt(attempt, "n2", 143, NOW + 64, report, NOW + 62, used=AttemptUsage(1.0, 1))
    assert used(store, job) == [("timeout", 59.5, 900)]
