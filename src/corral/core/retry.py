"""Seed 001 retry: what an attempt's end does to its job.

TempFail (the infrastructure failed: node lost, instance never booted, dispatcher died) requeues
the job with exponential back-off, up to `max_temp_failures`. PermFail (the command exited
non-zero) is final unless the job asked for `max_retries`, which requeue it at once. A run past the
job's time limit (TIMEOUT) is final too: it would time out again.

A lost node is a temporary failure with a policy of its own (seed 002 §5.4.6, Moab's
JOBACTIONONNODEFAILURE): `after_node_failure` requeues (as any TempFail), cancels, or requeues held,
as the job says, else as `policy.retry.on_node_failure` says (precedence job > system; corral has
no class or partition level).
"""

from __future__ import annotations

import dataclasses
from enum import StrEnum

from corral.core.dependency import NEVER_SATISFIED
from corral.core.model import AttemptState, Job, JobState, NodeFailureAction
from corral.core.settings import RetrySettings
from corral.core.signals import signal_text
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


def after_preemption(job: Job, reason: str, attempt_ids: tuple[int, ...] = ()) -> JobOutcome:
    """Slurm preempted the job's run for higher-priority work: queued again at once, as Slurm's
    PreemptMode=REQUEUE requeues a job, and without limit. Not a failure: nothing failed, and a job
    preempted again and again by a busy higher tier must not fail for it, so neither the back-off
    nor `max_temp_failures` applies (the attempt ends `preempted`, which counts the preemptions)."""
    if job.cancel_requested or job.priority == 0:
        return JobOutcome(job.id, JobState.CANCELLED, f"cancelled after: {reason}", attempt_ids)
    return JobOutcome(
        job.id, JobState.QUEUED, f"{reason}; requeued (a preemption is not a failure)", attempt_ids, preempted=True
    )


def after_refusal(job: Job, reason: str, attempt_ids: tuple[int, ...] = ()) -> JobOutcome:
    """The batch scheduler refused the job's own request for good (Slurm: more memory or CPUs than
    any node has, a time limit over the partition's): the job fails at once, as `sbatch` fails for
    a Slurm user, and is not retried, whatever its `max_retries`: it would be refused again."""
    if job.cancel_requested or job.priority == 0:
        return JobOutcome(job.id, JobState.CANCELLED, f"cancelled after: {reason}", attempt_ids)
    return JobOutcome(job.id, JobState.FAILED, reason, attempt_ids)


REQUEUED_HELD = "held by an operator: requeued with --hold"


def on_request(job: Job, attempt_ids: tuple[int, ...] = ()) -> JobOutcome | None:
    """What a user's request does to a job the index flags: priority 0 or a cancel request cancels
    it (seed 001); a requeue request (Slurm's `scontrol requeue`) stops its run and queues it again
    at once, counting no failure, held if asked (`scontrol requeuehold`). None: nothing to do (a
    requeue asked of a job already queued)."""
    if job.priority == 0 or job.cancel_requested:
        reason = "priority set to 0" if job.priority == 0 else "cancelled by request"
        return JobOutcome(job.id, JobState.CANCELLED, reason, attempt_ids)
    if job.requeue_requested and job.state is not JobState.QUEUED:
        hold = REQUEUED_HELD if job.requeue_hold else ""
        return JobOutcome(job.id, JobState.QUEUED, "requeued by request", attempt_ids, requeued=True, hold=hold)
    return None


def after_exit(
    job: Job, exit_code: int, attempt_ids: tuple[int, ...] = (), detail: str = "", exit_signal: int | None = None
) -> JobOutcome:
    """`detail`: what the node said of the exit, for the reason (the agent's "chdir to /x failed: ...").
    `exit_signal`: the signal that killed the command (`exit_code` is then 128+N, as ever), said in
    the reason ("exit 137: killed by signal 9 (SIGKILL)") and kept beside the code, so that a
    program that exited 137 is told from one killed (an out-of-memory kill's usual sign)."""
    killed = f": killed by {signal_text(exit_signal)}" if exit_signal else ""
    ended = f"exit {exit_code}{killed}" + (f" ({detail})" if detail else "")
    if exit_code == 0 and not exit_signal:
        return JobOutcome(job.id, JobState.COMPLETE, ended, attempt_ids, exit_code=0)
    if job.cancel_requested or job.priority == 0:
        said = f"cancelled ({ended})" if exit_signal else "cancelled"
        return JobOutcome(job.id, JobState.CANCELLED, said, attempt_ids, exit_code=exit_code, exit_signal=exit_signal)
    if job.perm_failures < job.max_retries:
        return JobOutcome(
            job.id,
            JobState.QUEUED,
            f"{ended}; retry {job.perm_failures + 1}/{job.max_retries}",
            attempt_ids,
            perm_failure=True,
            exit_code=exit_code,
            exit_signal=exit_signal,
        )
    return JobOutcome(
        job.id, JobState.FAILED, ended, attempt_ids, perm_failure=True, exit_code=exit_code, exit_signal=exit_signal
    )


def after_timeout(job: Job, limit: float | None, attempt_ids: tuple[int, ...] = (), detail: str = "") -> JobOutcome:
    """A run past its time limit (Slurm's TIMEOUT): the job fails, and is not retried, whatever its
    `max_retries` (those are for non-zero exits: a run that timed out would time out again).
    `limit`: None when it was not the job's own (a Slurm partition's). `detail`: how it was seen,
    for the reason (the grace it had, or the Slurm job)."""
    reason = "TIMEOUT: ran past its time limit" + (f" of {format_seconds(limit)}" if limit is not None else "")
    return JobOutcome(job.id, JobState.FAILED, f"{reason} ({detail})" if detail else reason, attempt_ids, timeout=True)


def format_seconds(seconds: float) -> str:
    """A duration as people write one: 90 -> "1m30s", 7200 -> "2h", 2.5 -> "2.5s"."""
    whole = int(seconds)
    if whole != seconds or whole < 60:
        return f"{seconds:g}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, whole = divmod(whole, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def node_failure_policy(job: Job, settings: RetrySettings) -> tuple[NodeFailureAction, str]:
    """The action for `job` when a node of its attempt is lost, and which level decided it: the
    job's own setting wins over the system's (seed 002's job > class > partition > system)."""
    if job.on_node_failure is not None:
        return job.on_node_failure, "the job's setting"
    return settings.on_node_failure, "policy.retry.on_node_failure"


def after_node_failure(
    job: Job, now: float, settings: RetrySettings, node_id: str, attempt_ids: tuple[int, ...] = (), lost: str = ""
) -> JobOutcome:
    """`lost`: how the loss was seen, for the reason (default "node N lost")."""
    lost = lost or f"node {node_id} lost"
    action, source = node_failure_policy(job, settings)
    if action == "requeue" or job.cancel_requested or job.priority == 0:
        return dataclasses.replace(after_temp_failure(job, now, settings, lost, attempt_ids), node_id=node_id)
    decided = f"on_node_failure={action}: {source}"
    if action == "cancel":
        return JobOutcome(
            job.id,
            JobState.CANCELLED,
            f"{lost}; cancelled ({decided})",
            attempt_ids,
            temp_failure=True,
            node_id=node_id,
        )
    # Hold: an operator decides when it runs again, so no back-off and no budget (the failure is
    # counted all the same, and the budget applies again to the failures after a release).
    return JobOutcome(
        job.id,
        JobState.QUEUED,
        f"{lost}; requeued and held ({decided})",
        attempt_ids,
        temp_failure=True,
        hold=f"held after a node failure ({decided}) until released",
        node_id=node_id,
    )


class EndCause(StrEnum):
    """How an ended job ended, for a program to read (the API's `end_cause`; Slurm's sacct State):
    its reason says the same in words."""

    COMPLETE = "complete"  # exit 0 (COMPLETED)
    # A non-zero exit, with no retry left: the job's exit_code (and exit_signal N, exit_code 128+N, for
    # a command killed by signal N) (FAILED).
    EXIT = "exit"
    TIMEOUT = "timeout"  # ran past its time limit (TIMEOUT)
    NODE_FAILURE = "node_failure"  # infrastructure failed under it: too often, or on_node_failure=cancel (NODE_FAIL)
    CANCELLED = "cancelled"  # a user's or admin's cancel (priority 0 too), or Slurm's outside corral (CANCELLED)
    DEPENDENCY = "dependency"  # its dependency can never be satisfied (DependencyNeverSatisfied)
    REFUSED = "refused"  # the batch scheduler refused its request for good (after_refusal: sbatch)


def end_cause(
    state: JobState,
    reason: str,
    by_request: bool,
    last_attempt: AttemptState | None,
    last_exit_code: int | None,
) -> EndCause | None:
    """How a job in `state` ended (None while it is open), from what its end left: its reason,
    whether a user asked for its end (a cancel request, priority 0), and its last attempt's state
    and exit code, as the outcomes above record them (the store's apply_outcome)."""
    if not state.terminal:
        return None
    if state is JobState.COMPLETE:
        return EndCause.COMPLETE
    if state is JobState.FAILED:
        if last_attempt is AttemptState.TIMEOUT:
            return EndCause.TIMEOUT
        if last_attempt is AttemptState.TEMPFAIL:
            return EndCause.NODE_FAILURE
        return EndCause.EXIT if last_exit_code is not None else EndCause.REFUSED
    # Cancelled. A dependency's cancel is the pass's own, whatever came before it (a lost node).
    if reason.startswith(NEVER_SATISFIED):
        return EndCause.DEPENDENCY
    if by_request:
        return EndCause.CANCELLED
    # after_node_failure under on_node_failure=cancel: the attempt lost with its node.
    return EndCause.NODE_FAILURE if last_attempt is AttemptState.TEMPFAIL else EndCause.CANCELLED
