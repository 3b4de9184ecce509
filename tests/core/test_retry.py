"""Seed 001 retry: TempFail back-off and PermFail finality."""

from __future__ import annotations

from corral.core import retry
from corral.core.model import Job, JobState
from corral.core.settings import RetrySettings


def test_backoff_grows_exponentially_and_is_capped() -> None:
    settings = RetrySettings(backoff_initial=5, backoff_factor=2, backoff_max=30)
    assert [settings.backoff(n) for n in range(1, 6)] == [5, 10, 20, 30, 30]


def test_non_zero_exit_is_permanent_unless_the_job_asks_for_retries() -> None:
    assert retry.after_exit(Job(1, ["x"]), 2).state is JobState.FAILED
    again = retry.after_exit(Job(1, ["x"], max_retries=1), 2)
    assert again.state is JobState.QUEUED and again.perm_failure and not again.temp_failure
    assert retry.after_exit(Job(1, ["x"], max_retries=1, perm_failures=1), 2).state is JobState.FAILED
    assert retry.after_exit(Job(1, ["x"]), 0).state is JobState.COMPLETE


def test_a_cancelled_job_that_exits_is_cancelled_not_failed() -> None:
    assert retry.after_exit(Job(1, ["x"], cancel_requested=True), 143).state is JobState.CANCELLED
