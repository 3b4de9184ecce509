"""Seed 001 retry: what an attempt's end does to its job.

TempFail (the infrastructure failed: node lost, instance never booted, dispatcher died) requeues
the job with exponential back-off, up to `max_temp_failures`. PermFail (the command exited
non-zero) is final unless the job asked for `max_retries`, which requeue it at once.
"""

from __future__ import annotations

from corral.core.model import Job, JobState
from corral.core.settings import RetrySettings
from corral.core.snapshot import JobOutcome


def after_temp_failure(
    job: Job, now: float, settings: RetrySettings, reason: str, attempt_ids: tuple[int, ...] = ()
) -> JobOutcome:
    failures = job.temp_failures + 1
    if job.cancel_requested or job.priority == 0:
        return JobOutcome(job.id, JobState.CANCELLED, f"cancelled after: {reason}", attempt_ids)
    if failures > settings.max_temp_failures:
        return JobOutcome(
            job.id,
            JobState.FAILED,
            f"{reason}; gave up after {failures} temporary failures",
            attempt_ids,
            temp_failure=True,
        )
    delay = settings.backoff(failures)
    return JobOutcome(
        job.id,
        JobState.QUEUED,
        f"{reason}; retry {failures}/{settings.max_temp_failures} in {delay:g}s",
        attempt_ids,
        retry_at=now + delay,
        temp_failure=True,
    )


def after_exit(job: Job, exit_code: int, attempt_ids: tuple[int, ...] = ()) -> JobOutcome:
    if exit_code == 0:
        return JobOutcome(job.id, JobState.COMPLETE, "exit 0", attempt_ids, exit_code=0)
    if job.cancel_requested or job.priority == 0:
        return JobOutcome(job.id, JobState.CANCELLED, "cancelled", attempt_ids, exit_code=exit_code)
    if job.perm_failures < job.max_retries:
        return JobOutcome(
            job.id,
            JobState.QUEUED,
            f"exit {exit_code}; retry {job.perm_failures + 1}/{job.max_retries}",
            attempt_ids,
            perm_failure=True,
            exit_code=exit_code,
        )
    return JobOutcome(job.id, JobState.FAILED, f"exit {exit_code}", attempt_ids, perm_failure=True, exit_code=exit_code)
