"""The pass in front of Slurm (corral.core.batch): what each Slurm state means for a corral job."""

from __future__ import annotations

import dataclasses
from typing import TypedDict, Unpack

import pytest

from corral.core import batch
from corral.core.batch import Phase, Seen
from corral.core.model import Attempt, AttemptState, Dispatcher, Job, JobState
from corral.core.settings import PolicySettings
from corral.core.snapshot import Snapshot

NOW = 1000.0
ME = "d-me"


def world(*jobs: Job, attempts: tuple[Attempt, ...] = (), dispatchers: tuple[Dispatcher, ...] = ()) -> Snapshot:
    return Snapshot(
        jobs=list(jobs),
        attempts=list(attempts),
        nodes=[],
        instance_types=[],
        dispatcher_id=ME,
        dispatchers=[Dispatcher(ME, NOW), *dispatchers],
        observing_since=0.0,
    )


class ClaimedJobFields(TypedDict, total=False):
    """The Job fields the tests below set on a claimed job (its attempt's times are `claimed`'s own
    arguments, so `started_at` is the attempt's)."""

    priority: int
    max_retries: int
    time_limit: float | None
    cancel_requested: bool
    requeue_requested: bool


def claimed(
    job_id: int,
    attempt_id: int,
    owner: str = ME,
    running: bool = False,
    *,
    assigned_at: float = 0.0,
    started_at: float | None = None,
    **fields: Unpack[ClaimedJobFields],
) -> tuple[Job, Attempt]:
    job = Job(job_id, ["x"], state=JobState.RUNNING if running else JobState.CLAIMED, claimed_by=owner, **fields)
    state = AttemptState.RUNNING if running else AttemptState.ASSIGNED
    attempt = Attempt(attempt_id, job_id, ["slurm"], job.resources, state=state, dispatcher_id=owner)
    attempt.assigned_at, attempt.started_at = assigned_at, started_at
    return job, attempt


def plan(snapshot: Snapshot, seen: dict[int, Seen] | None = None, max_pending: int = 100) -> batch.BatchDecisions:
    return batch.plan_batch_pass(snapshot, NOW, PolicySettings(), seen or {}, max_pending)


@pytest.mark.parametrize(
    ("state", "phase"),
    [
        ("PENDING", Phase.PENDING),
        ("RUNNING", Phase.RUNNING),
        ("COMPLETING", Phase.RUNNING),
        ("COMPLETED", Phase.EXITED),
        ("FAILED", Phase.EXITED),
        ("TIMEOUT", Phase.EXITED),
        ("OUT_OF_MEMORY", Phase.EXITED),
        ("NODE_FAIL", Phase.LOST),
        ("BOOT_FAIL", Phase.LOST),
        ("PREEMPTED", Phase.LOST),
        ("", Phase.LOST),  # vanished from squeue
        ("CANCELLED", Phase.CANCELLED),
        ("CANCELLED+", Phase.CANCELLED),
        ("SOME_NEW_STATE", Phase.RUNNING),
    ],
)
def test_slurm_states_by_what_they_mean(state: str, phase: Phase) -> None:
    assert batch.phase_of(state) is phase


def test_queued_jobs_are_claimed_in_queue_order_up_to_max_pending() -> None:
    low, high, third = Job(1, ["x"], priority=1), Job(2, ["x"], priority=5), Job(3, ["x"], priority=1)
    decisions = plan(world(low, high, third), max_pending=2)
    assert decisions.claims == [2, 1]
    assert [(n.job_id, n.wait_reason) for n in decisions.annotations] == [
        (3, "waiting: 2 jobs pending in Slurm already (slurm.max_pending)")
    ]


def test_jobs_pending_in_slurm_count_against_max_pending_and_show_slurms_reason() -> None:
    job, attempt = claimed(1, 10)
    decisions = plan(
        world(job, Job(2, ["x"]), attempts=(attempt,)), {10: Seen(10, "77", "PENDING", None, "Resources")}, 1
    )
    assert decisions.claims == []
    assert decisions.pending_reasons == {1: "slurm: Resources"}


def test_a_job_in_back_off_or_before_its_start_waits_with_the_reason() -> None:
    decisions = plan(world(Job(1, ["x"], retry_at=NOW + 5), Job(2, ["x"], not_before=NOW + 60)))
    assert decisions.claims == []
    assert {n.job_id: n.wait_reason for n in decisions.annotations} == {
        1: "back-off after a temporary failure, until 1970-01-01 00:16:45 UTC",
        2: "not before its requested start, 1970-01-01 00:17:40 UTC",
    }


def test_a_claimed_attempt_never_submitted_is_submitted() -> None:
    job, attempt = claimed(1, 10)
    assert plan(world(job, attempts=(attempt,))).submit == [10]


def test_running_in_slurm_starts_the_attempt_once_at_slurms_start_time() -> None:
    job, attempt = claimed(1, 10, assigned_at=NOW - 60)
    seen = {10: Seen(10, "77", "RUNNING", nodes="c1", started_at=NOW - 25)}
    assert plan(world(job, attempts=(attempt,)), seen).started == [batch.Start(10, "77", "c1", NOW - 25, True)]
    job, attempt = claimed(1, 10, running=True)
    assert plan(world(job, attempts=(attempt,)), seen).started == []


def test_a_slurm_job_that_ran_between_two_passes_is_started_before_its_exit_at_slurms_times() -> None:
    job, attempt = claimed(1, 10, assigned_at=NOW - 60)
    seen = {10: Seen(10, "77", "COMPLETED", 0, nodes="c1", started_at=NOW - 40, ended_at=NOW - 37)}
    decisions = plan(world(job, attempts=(attempt,)), seen)
    assert decisions.started == [batch.Start(10, "77", "c1", NOW - 40, True)]
    assert [(e.attempt_id, e.at) for e in decisions.exits] == [(10, NOW - 37)]  # it ran 3 s, not 0
    job, attempt = claimed(1, 10, running=True)
    assert plan(world(job, attempts=(attempt,)), seen).started == []


def test_without_slurms_times_a_start_and_an_end_are_the_pass_time() -> None:
    """squeue printed N/A, Unknown or something unreadable: the pass that saw it is the best known."""
    job, attempt = claimed(1, 10, assigned_at=NOW - 60)
    decisions = plan(world(job, attempts=(attempt,)), {10: Seen(10, "77", "FAILED", 2, nodes="c1")})
    assert decisions.started == [batch.Start(10, "77", "c1", NOW, False)]
    assert [e.at for e in decisions.exits] == [NOW]


def test_slurms_times_are_kept_between_the_submission_and_the_pass() -> None:
    # Slurm's times are whole seconds, truncated, and its clock is not corral's: a start before
    # the attempt was submitted is its submission, a time after the pass is the pass.
    job, attempt = claimed(1, 10, assigned_at=NOW - 9.5)
    early = {10: Seen(10, "77", "COMPLETED", 0, started_at=NOW - 10, ended_at=NOW - 7)}
    decisions = plan(world(job, attempts=(attempt,)), early)
    assert [s.at for s in decisions.started] == [NOW - 9.5] and [e.at for e in decisions.exits] == [NOW - 7]
    future = {10: Seen(10, "77", "COMPLETED", 0, started_at=NOW + 5, ended_at=NOW + 8)}
    decisions = plan(world(job, attempts=(attempt,)), future)
    assert [s.at for s in decisions.started] == [NOW] and [e.at for e in decisions.exits] == [NOW]
    # An end before the start (a start already recorded later than Slurm's end) is the start.
    job, attempt = claimed(1, 10, running=True, assigned_at=NOW - 60, started_at=NOW - 20)
    before = {10: Seen(10, "77", "COMPLETED", 0, started_at=NOW - 40, ended_at=NOW - 30)}
    decisions = plan(world(job, attempts=(attempt,)), before)
    assert decisions.started == [] and [e.at for e in decisions.exits] == [NOW - 20]


def test_slurms_estimates_are_not_taken_for_times() -> None:
    """A pending job's StartTime is Slurm's estimate and a running one's EndTime its time limit's
    end: neither is recorded."""
    job, attempt = claimed(1, 10, assigned_at=NOW - 60)
    pending = {10: Seen(10, "77", "PENDING", started_at=NOW - 1, ended_at=NOW + 3600)}
    assert plan(world(job, attempts=(attempt,)), pending).started == []
    running = {10: Seen(10, "77", "RUNNING", started_at=NOW - 30, ended_at=NOW - 1)}
    decisions = plan(world(job, attempts=(attempt,)), running)
    assert [s.at for s in decisions.started] == [NOW - 30] and decisions.exits == []


def test_a_running_slurm_job_lost_or_cancelled_outside_corral_ends_at_slurms_end_time() -> None:
    for state in ("NODE_FAIL", "PREEMPTED", "CANCELLED"):
        job, attempt = claimed(1, 10, running=True, assigned_at=NOW - 60, started_at=NOW - 50)
        seen = {10: Seen(10, "77", state, nodes="c1", started_at=NOW - 50, ended_at=NOW - 12)}
        decisions = plan(world(job, attempts=(attempt,)), seen)
        assert [o.job_id for o in decisions.job_outcomes] == [1] and decisions.outcome_times == {1: NOW - 12}
    # Never seen running (cancelled while pending: Slurm's StartTime is the cancel's) or vanished
    # from squeue: no time of Slurm's applies, the outcome is at the pass's time.
    job, attempt = claimed(1, 10, assigned_at=NOW - 60)
    cancelled = {10: Seen(10, "77", "CANCELLED", started_at=NOW - 3, ended_at=NOW - 3)}
    decisions = plan(world(job, attempts=(attempt,)), cancelled)
    assert decisions.started == [] and decisions.outcome_times == {}
    assert [o.state for o in decisions.job_outcomes] == [JobState.CANCELLED]
    job, attempt = claimed(1, 10, running=True, assigned_at=NOW - 60, started_at=NOW - 50)
    assert plan(world(job, attempts=(attempt,)), {10: Seen(10, "77", "")}).outcome_times == {}


@pytest.mark.parametrize(
    ("priority", "nice_base", "nice"),
    [
        (1, batch.DEFAULT_NICE_BASE, 0),  # corral's default priority: Nice=0, as a plain sbatch
        (100, batch.DEFAULT_NICE_BASE, -99),  # higher priority, lower Nice
        (100, 1_000_000, 999_900),  # an unprivileged corral's base: every Nice >= 0
        (1, batch.NICE_LIMIT + 10, batch.NICE_LIMIT),  # within Slurm's range
    ],
)
def test_a_priority_is_a_slurm_nice(priority: int, nice_base: int, nice: int) -> None:
    assert batch.nice_for(priority, nice_base) == nice


def test_a_job_pending_in_slurm_with_another_prioritys_nice_is_reniced() -> None:
    raised, raised_attempt = claimed(1, 10, priority=50)
    same, same_attempt = claimed(2, 20, priority=50)
    unknown, unknown_attempt = claimed(3, 30, priority=50)
    running, running_attempt = claimed(4, 40, running=True, priority=50)
    seen = {
        10: Seen(10, "77", "PENDING", nice=0),
        20: Seen(20, "78", "PENDING", nice=-49),
        30: Seen(30, "79", "PENDING"),  # squeue printed no Nice: nothing to compare
        40: Seen(40, "80", "RUNNING", nice=0),  # Slurm's queue order no longer matters to it
    }
    snapshot = world(
        raised, same, unknown, running, attempts=(raised_attempt, same_attempt, unknown_attempt, running_attempt)
    )
    # Each with the Nice Slurm had (an admin's `scontrol update` may have set it: the shell says so).
    assert plan(snapshot, seen).renice == [batch.Renice(1, "77", -49, 50, was=0)]
    assert batch.plan_batch_pass(snapshot, NOW, PolicySettings(), seen, 100, nice_base=50).renice == [
        batch.Renice(2, "78", 0, 50, was=-49)
    ]


def test_an_exit_is_the_jobs_exit_and_a_timeout_says_so() -> None:
    job, attempt = claimed(1, 10, running=True)
    decisions = plan(world(job, attempts=(attempt,)), {10: Seen(10, "77", "FAILED", 3)})
    assert decisions.exits == [batch.Exit(10, 1, 3, "", NOW)]
    outcome = batch.exit_outcome(job, 3, 10)
    assert outcome.state is JobState.FAILED and outcome.exit_code == 3 and outcome.attempt_ids == (10,)

    decisions = plan(world(job, attempts=(attempt,)), {10: Seen(10, "77", "TIMEOUT", 143)})
    (ended,) = decisions.exits
    outcome = batch.exit_outcome(job, ended.exit_code, 10, ended.detail)
    assert (
        outcome.state is JobState.FAILED and outcome.reason == "TIMEOUT: ran past its time limit (slurm job 77 TIMEOUT)"
    )
    retried = Job(1, ["x"], state=JobState.RUNNING, max_retries=1)
    assert batch.exit_outcome(retried, 3, 10).state is JobState.QUEUED


def test_slurms_exit_code_with_a_signal_keeps_the_signal_beside_its_128_plus_n() -> None:
    """ExitCode=0:9 (the batch script SIGKILLed, an out-of-memory kill's usual sign) was recorded as
    exit 137 alone, as an exit 137:0 is: the signal is the job's exit_signal now, and its reason says it."""
    job, attempt = claimed(1, 10, running=True)
    seen = {10: Seen(10, "77", "FAILED", 137, exit_signal=9)}
    (ended,) = plan(world(job, attempts=(attempt,)), seen).exits
    assert (ended.exit_code, ended.exit_signal) == (137, 9)
    outcome = batch.exit_outcome(job, ended.exit_code, 10, ended.detail, ended.timeout, ended.exit_signal)
    assert (outcome.state, outcome.exit_code, outcome.exit_signal) == (JobState.FAILED, 137, 9)
    assert outcome.reason == "exit 137: killed by signal 9 (SIGKILL)"
    (plain,) = plan(world(job, attempts=(attempt,)), {10: Seen(10, "77", "FAILED", 137)}).exits
    assert plain.exit_signal is None and batch.exit_outcome(job, 137, 10).reason == "exit 137"


@pytest.mark.parametrize("state", ["OUT_OF_MEMORY", "FAILED", "DEADLINE", "SPECIAL_EXIT"])
def test_a_slurm_job_that_did_not_complete_fails_its_job_though_its_exit_code_is_0(state: str) -> None:
    """Slurm ends a job OUT_OF_MEMORY when the OOM killer took any of its processes, also one the
    batch script outlived to exit 0 (ExitCode=0:0): the job was recorded complete, exit 0, and
    its dependents' afterok ran on its partial output. Slurm's state decides, as sacct says."""
    job, attempt = claimed(1, 10, running=True)
    decisions = plan(world(job, attempts=(attempt,)), {10: Seen(10, "77", state, 0)})
    (ended,) = decisions.exits
    outcome = batch.exit_outcome(job, ended.exit_code, 10, ended.detail)
    assert outcome.state is JobState.FAILED and outcome.exit_code != 0
    assert outcome.reason == f"exit 1 (slurm job 77 {state} with ExitCode=0:0)"
    # A job that asks for retries is retried, as for any failed exit.
    retried, attempt = claimed(1, 10, running=True, max_retries=1)
    (ended,) = plan(world(retried, attempts=(attempt,)), {10: Seen(10, "77", state, 0)}).exits
    assert batch.exit_outcome(retried, ended.exit_code, 10, ended.detail).state is JobState.QUEUED
    # COMPLETED is the one state in which exit 0 completes the job.
    job, attempt = claimed(1, 10, running=True)
    (ended,) = plan(world(job, attempts=(attempt,)), {10: Seen(10, "77", "COMPLETED", 0)}).exits
    assert batch.exit_outcome(job, ended.exit_code, 10, ended.detail).state is JobState.COMPLETE


def test_a_slurm_timeout_is_recorded_as_corrals_own_timeout_never_retried() -> None:
    # Slurm enforced --time. It often gives such a job exit code 0 (ExitCode=0:0): still a failure,
    # not retried (it would time out again), and the same TIMEOUT and event as corral's own pass.
    job, attempt = claimed(1, 10, running=True, time_limit=7200.0, max_retries=3)
    decisions = plan(world(job, attempts=(attempt,)), {10: Seen(10, "77", "TIMEOUT", 0)})
    (ended,) = decisions.exits
    outcome = batch.exit_outcome(job, ended.exit_code, 10, ended.detail)
    assert outcome.state is JobState.FAILED and outcome.timeout and outcome.exit_code == 0
    assert outcome.reason == "TIMEOUT: ran past its time limit of 2h (slurm job 77 TIMEOUT)"

    # Slurm keeps limits in whole minutes: a limit of 5 s ran a minute there, and the reason says so.
    short, attempt = claimed(2, 11, running=True, time_limit=5.0)
    outcome = batch.exit_outcome(short, 0, 11, "slurm job 78 TIMEOUT")
    assert outcome.reason == (
        "TIMEOUT: ran past its time limit of 5s (slurm job 78 TIMEOUT; Slurm's limit is whole minutes: 1m)"
    )


@pytest.mark.parametrize(
    ("state", "reason", "says"),
    [
        ("NODE_FAIL", "NodeDown", "slurm job 77 NODE_FAIL (NodeDown)"),
        ("BOOT_FAIL", "", "slurm job 77 BOOT_FAIL"),
        (
            "",
            "",
            "slurm job 77 vanished from squeue (Slurm no longer lists it, as it forgets an ended job after"
            " MinJobAge) and left no exit status file",
        ),
    ],
)
def test_infrastructure_failures_requeue_with_back_off(state: str, reason: str, says: str) -> None:
    job, attempt = claimed(1, 10, running=True)
    (outcome,) = plan(world(job, attempts=(attempt,)), {10: Seen(10, "77", state, None, reason)}).job_outcomes
    assert outcome.state is JobState.QUEUED and outcome.temp_failure and outcome.retry_at == NOW + 5
    assert outcome.reason.startswith(says + "; retry 1/5")


def test_a_job_slurm_forgot_ended_as_its_exit_status_file_says() -> None:
    """Slurm forgets an ended job after MinJobAge: the exit status its batch script recorded says
    how it ended, and one never seen running is recorded as started first, at the script's times."""
    ran, ran_attempt = claimed(1, 10, running=True, started_at=100.0)
    unseen, unseen_attempt = claimed(2, 11, assigned_at=90.0)
    seen = {
        10: Seen(10, "77", "", status=batch.ExitStatus(3, "77", 100.0, 400.0)),
        11: Seen(11, "78", "", status=batch.ExitStatus(0, "78", 95.0, 120.0)),
    }
    decisions = plan(world(ran, unseen, attempts=(ran_attempt, unseen_attempt)), seen)
    assert not decisions.job_outcomes
    assert [(s.attempt_id, s.at, s.by_slurm) for s in decisions.started] == [(11, 95.0, True)]
    assert [(e.attempt_id, e.exit_code, e.at) for e in decisions.exits] == [(10, 3, 400.0), (11, 0, 120.0)]
    says = "slurm job 77: Slurm no longer lists it, as it forgets an ended job after MinJobAge; exit status read"
    assert decisions.exits[0].detail.startswith(says)
    outcome = batch.exit_outcome(ran, 3, 10, decisions.exits[0].detail)
    assert outcome.state is JobState.FAILED and outcome.reason.startswith(f"exit 3 ({says}")


@pytest.mark.parametrize(
    ("state", "status"),
    [
        ("", None),  # killed with its batch script (a lost node, a command that outlived KillWait): no file
        ("", batch.ExitStatus(0, "76")),  # another Slurm job's file (not this one's): not read
        ("RUNNING", batch.ExitStatus(0, "77")),  # Slurm still lists it: Slurm's word counts
    ],
)
def test_an_exit_status_file_counts_only_for_its_own_slurm_job_once_slurm_forgot_it(
    state: str, status: batch.ExitStatus | None
) -> None:
    job, attempt = claimed(1, 10, running=True)
    decisions = plan(world(job, attempts=(attempt,)), {10: Seen(10, "77", state, status=status)})
    assert not decisions.exits
    if not state:
        (outcome,) = decisions.job_outcomes
        assert outcome.state is JobState.QUEUED and outcome.temp_failure
        assert "and left no exit status file" in outcome.reason


@pytest.mark.parametrize(
    ("killed_as", "ran", "time_limit", "state"),
    [
        ("TIMEOUT", 30.0, 60.0, "TIMEOUT"),  # slurmstepd's word counts (a limit changed since, say)
        ("PREEMPTED", 500.0, 60.0, "PREEMPTED"),
        ("CANCELLED", 500.0, 60.0, "CANCELLED"),
        ("", 118.0, 61.0, "TIMEOUT"),  # no word: ran Slurm's limit (61 s is 2 min), less the script's start
        ("", 100.0, 61.0, "CANCELLED"),  # before its limit: a scancel
        ("", 5000.0, None, "CANCELLED"),  # no limit: a scancel
    ],
)
def test_a_job_slurm_killed_and_forgot_is_read_as_the_state_slurm_killed_it_in(
    killed_as: str, ran: float, time_limit: float | None, state: str
) -> None:
    status = batch.ExitStatus(143, "77", 100.0, 100.0 + ran, signal="TERM", killed_as=killed_as)
    assert status.slurm_state(time_limit) == state
    assert dataclasses.replace(status, signal="").slurm_state(time_limit) == ""  # ended by itself


def test_a_job_slurm_killed_and_forgot_ends_as_slurms_state_would_have_had_it() -> None:
    """A status file that says Slurm signalled the script: TIMEOUT fails (never retried), a
    scancel outside corral cancels, a preemption requeues without a failure; none is lost."""
    timed, timed_attempt = claimed(1, 10, running=True, started_at=100.0, time_limit=60.0)
    cancelled, cancelled_attempt = claimed(2, 11, running=True, started_at=100.0, time_limit=600.0)
    preempted, preempted_attempt = claimed(3, 12, running=True, started_at=100.0)
    seen = {
        10: Seen(10, "77", "", status=batch.ExitStatus(143, "77", 100.0, 161.0, signal="TERM")),
        11: Seen(11, "78", "", status=batch.ExitStatus(143, "78", 100.0, 130.0, signal="TERM")),
        12: Seen(12, "79", "", status=batch.ExitStatus(143, "79", 100.0, 140.0, "TERM", "PREEMPTED")),
    }
    attempts = (timed_attempt, cancelled_attempt, preempted_attempt)
    decisions = plan(world(timed, cancelled, preempted, attempts=attempts), seen)
    (ended,) = decisions.exits
    assert (ended.attempt_id, ended.at, ended.timeout) == (10, 161.0, True)
    outcome = batch.exit_outcome(timed, ended.exit_code, 10, ended.detail, ended.timeout)
    assert outcome.state is JobState.FAILED and outcome.timeout
    assert outcome.reason.startswith("TIMEOUT: ran past its time limit of 1m (slurm job 77 TIMEOUT: Slurm no longer")
    assert "killed it (SIGTERM) once it had run its time limit" in outcome.reason
    by_job = {o.job_id: o for o in decisions.job_outcomes}
    assert by_job[2].state is JobState.CANCELLED
    assert by_job[2].reason.startswith("slurm job 78 was cancelled outside corral (Slurm no longer lists it")
    assert by_job[2].reason.endswith("its status file says Slurm killed it (SIGTERM) before its time limit)")
    assert by_job[3].state is JobState.QUEUED and by_job[3].preempted and not by_job[3].temp_failure
    assert "and its output says why" in by_job[3].reason
    assert decisions.outcome_times == {2: 130.0, 3: 140.0}  # when the script was killed


@pytest.mark.parametrize("state", ["NODE_FAIL", "BOOT_FAIL"])
def test_a_slurm_node_failure_is_judged_by_the_node_failure_policy(state: str) -> None:
    """Seed 002 §5.4.6 in front of Slurm too: the job's on_node_failure (here hold) decides."""
    job, attempt = claimed(1, 10, running=True)
    job = dataclasses.replace(job, on_node_failure="hold")
    seen = {10: Seen(10, "77", state, None, "NodeDown", "c1")}
    (outcome,) = plan(world(job, attempts=(attempt,)), seen).job_outcomes
    assert outcome.state is JobState.QUEUED and outcome.hold and outcome.retry_at is None
    assert outcome.reason.startswith(f"slurm job 77 {state} (NodeDown); requeued and held")
    preempted = {10: Seen(10, "77", "PREEMPTED", None, "", "c1")}
    (requeued,) = plan(world(job, attempts=(attempt,)), preempted).job_outcomes
    assert not requeued.hold and requeued.preempted  # not a node failure


def test_a_preempted_job_is_requeued_at_once_counting_no_failure_however_often() -> None:
    """Slurm's PreemptMode=REQUEUE requeues without limit: a job preempted for the sixth time by
    higher-priority work is queued again, with no back-off, not failed (max_temp_failures 5)."""
    job, attempt = claimed(1, 10, running=True)
    job = dataclasses.replace(job, temp_failures=5)
    (outcome,) = plan(world(job, attempts=(attempt,)), {10: Seen(10, "77", "PREEMPTED")}).job_outcomes
    assert outcome.state is JobState.QUEUED and outcome.retry_at is None
    assert outcome.preempted and not outcome.temp_failure and not outcome.perm_failure
    assert outcome.reason == "slurm job 77 PREEMPTED; requeued (a preemption is not a failure)"
    cancelled = dataclasses.replace(job, cancel_requested=True)
    (outcome,) = plan(world(cancelled, attempts=(attempt,)), {10: Seen(10, "77", "PREEMPTED")}).job_outcomes
    assert outcome.state is JobState.CANCELLED


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        # sbatch's stderr as corral reads it, from Slurm 22.05 (tests/slurm) and slurm_errno.c.
        (
            "Memory specification can not be satisfied; Batch job submission failed:"
            " Requested node configuration is not available",
            batch.Refusal.REQUEST,
        ),
        ("Invalid generic resource (gres) specification", batch.Refusal.REQUEST),
        ("Temporary disk specification can not be satisfied", batch.Refusal.REQUEST),
        ("Batch job submission failed: Node count specification invalid", batch.Refusal.REQUEST),
        (
            "Batch job submission failed: Requested time limit is invalid (missing or exceeds some limit)",
            batch.Refusal.REQUEST,
        ),
        (
            "invalid partition specified: nope; Batch job submission failed: Invalid partition name specified",
            batch.Refusal.SETTING,
        ),
        (
            "Batch job submission failed: Invalid account or account/partition combination specified",
            batch.Refusal.SETTING,
        ),
        ("Batch job submission failed: Invalid qos specification", batch.Refusal.SETTING),
        ("Batch job submission failed: Invalid --nice value", batch.Refusal.SETTING),
        (
            "Batch job submission failed: Unable to contact slurm controller (connect failure)",
            batch.Refusal.TEMPORARY,
        ),
        ("Batch job submission failed: Socket timed out on send/recv operation", batch.Refusal.TEMPORARY),
        ("Batch job submission failed: Resource temporarily unavailable", batch.Refusal.TEMPORARY),
        (
            "Batch job submission failed: Job violates accounting/QOS policy"
            " (job submit limit, user's size and/or time limits)",
            batch.Refusal.TEMPORARY,
        ),
        ("sbatch did not answer within 30s", batch.Refusal.TEMPORARY),
        ("something a newer Slurm says", batch.Refusal.TEMPORARY),
    ],
)
def test_sbatchs_errors_are_refusals_of_the_request_or_of_the_settings_or_temporary(
    message: str, kind: batch.Refusal
) -> None:
    assert batch.sbatch_refusal(message) is kind


@pytest.mark.parametrize(
    ("message", "of_a_job_that_sets_options", "otherwise"),
    [
        ("Invalid --signal specification", batch.Refusal.REQUEST, batch.Refusal.SETTING),
        ("Invalid --open-mode specification", batch.Refusal.REQUEST, batch.Refusal.SETTING),
        ("Invalid --acctg-freq specification: task=x", batch.Refusal.REQUEST, batch.Refusal.SETTING),
        (
            "Batch job submission failed: Invalid accounting frequency requested",
            batch.Refusal.REQUEST,
            batch.Refusal.SETTING,
        ),
        ('unrecognized --mem-bind argument "bogus"', batch.Refusal.REQUEST, batch.Refusal.SETTING),
        # The cluster's trouble stays temporary whatever the job sets.
        (
            "Batch job submission failed: Unable to contact slurm controller (connect failure)",
            batch.Refusal.TEMPORARY,
            batch.Refusal.TEMPORARY,
        ),
        (
            "Batch job submission failed: Job violates accounting/QOS policy"
            " (job submit limit, user's size and/or time limits)",
            batch.Refusal.TEMPORARY,
            batch.Refusal.TEMPORARY,
        ),
        ("sbatch did not answer within 30s", batch.Refusal.TEMPORARY, batch.Refusal.TEMPORARY),
    ],
)
def test_sbatch_refusing_an_options_value_is_the_jobs_if_it_set_that_variable_else_corrals_settings(
    message: str, of_a_job_that_sets_options: batch.Refusal, otherwise: batch.Refusal
) -> None:
    """A job's SBATCH_SIGNAL=bogus made every sbatch fail, counted as a temporary failure and retried
    without end; the same refusal of a job that did not set the variable comes of corral's
    slurm.extra_args."""
    every_variable = ["SBATCH_SIGNAL", "SBATCH_OPEN_MODE", "SBATCH_ACCTG_FREQ", "SBATCH_MEM_BIND"]
    assert batch.sbatch_refusal(message, every_variable) is of_a_job_that_sets_options
    assert batch.sbatch_refusal(message) is otherwise
    # A job that sets another variable: the option refused is not its own.
    assert batch.sbatch_refusal(message, ["SBATCH_GPU_BIND"]) is otherwise


def test_a_slurm_job_cancelled_outside_corral_cancels_the_job_and_says_so() -> None:
    job, attempt = claimed(1, 10, running=True)
    (outcome,) = plan(world(job, attempts=(attempt,)), {10: Seen(10, "77", "CANCELLED")}).job_outcomes
    assert outcome.state is JobState.CANCELLED and outcome.reason == "slurm job 77 was cancelled outside corral"


def test_cancel_and_priority_zero_scancel_this_dispatchers_slurm_jobs_only() -> None:
    mine, my_attempt = claimed(1, 10, running=True, cancel_requested=True)
    theirs, their_attempt = claimed(2, 20, owner="d-other", running=True, priority=0)
    queued = Job(3, ["x"], priority=0)
    seen = {10: Seen(10, "77", "RUNNING")}
    decisions = plan(world(mine, theirs, queued, attempts=(my_attempt, their_attempt)), seen)
    assert [(o.job_id, o.state, o.reason) for o in decisions.job_outcomes] == [
        (1, JobState.CANCELLED, "cancelled by request"),
        (3, JobState.CANCELLED, "priority set to 0"),
    ]
    assert decisions.cancel == ["77"] and decisions.exits == [] and decisions.claims == []


def test_a_requeue_request_scancels_the_slurm_job_and_queues_the_job_counting_nothing() -> None:
    job, attempt = claimed(1, 10, running=True, requeue_requested=True)
    decisions = plan(world(job, attempts=(attempt,)), {10: Seen(10, "77", "RUNNING")})
    (outcome,) = decisions.job_outcomes
    assert (outcome.state, outcome.reason, outcome.attempt_ids) == (JobState.QUEUED, "requeued by request", (10,))
    assert outcome.requeued and not outcome.temp_failure and outcome.retry_at is None
    assert decisions.cancel == ["77"] and decisions.claims == []


def test_a_stale_dispatchers_claims_are_released_as_temporary_failures() -> None:
    job, attempt = claimed(1, 10, owner="d-gone", running=True)
    snapshot = world(job, attempts=(attempt,), dispatchers=(Dispatcher("d-gone", NOW - 600),))
    (outcome,) = plan(snapshot).job_outcomes
    assert outcome.state is JobState.QUEUED and outcome.reason.startswith("dispatcher d-gone stopped heartbeating")


@pytest.mark.parametrize(
    ("observed", "adopted"),
    [
        (Seen(10, "77", "RUNNING"), True),  # it runs on in Slurm: followed, not run beside it
        (Seen(10, "77", "PENDING"), True),
        (Seen(10, "77", "COMPLETED"), True),  # it ended: recorded by the next pass, not run again
        (Seen(10, "77", "", status=batch.ExitStatus(0, "77")), True),  # forgotten, with its exit status
        (Seen(10, "77", ""), False),  # forgotten with no exit status: lost
        (None, False),  # never submitted (it froze between its claim and sbatch)
    ],
)
def test_a_stale_dispatchers_attempt_slurm_still_knows_is_adopted_and_the_others_released(
    observed: Seen | None, adopted: bool
) -> None:
    job, attempt = claimed(1, 10, owner="d-gone", running=True)
    snapshot = world(job, attempts=(attempt,), dispatchers=(Dispatcher("d-gone", NOW - 600),))
    decisions = plan(snapshot, {} if observed is None else {10: observed})
    assert not decisions.exits and not decisions.started and not decisions.cancel and not decisions.submit
    if adopted:
        assert observed is not None
        assert decisions.adoptions == [batch.Adoption(1, 10, "77", "d-gone", observed.state)]
        assert not decisions.job_outcomes
    else:
        (outcome,) = decisions.job_outcomes
        assert outcome.state is JobState.QUEUED and outcome.temp_failure and not decisions.adoptions
        assert outcome.reason.startswith("dispatcher d-gone stopped heartbeating")


def test_a_live_peers_attempts_are_neither_adopted_nor_released() -> None:
    job, attempt = claimed(1, 10, owner="d-peer", running=True)
    snapshot = world(job, attempts=(attempt,), dispatchers=(Dispatcher("d-peer", NOW - 1),))
    decisions = plan(snapshot, {10: Seen(10, "77", "COMPLETED", 0)})
    assert not decisions.adoptions and not decisions.job_outcomes and not decisions.exits


def test_an_exit_whose_script_could_not_enter_the_jobs_directory_names_it() -> None:
    """slurmstepd runs a job whose --chdir it cannot enter in /tmp, and Slurm says FAILED 1:0; the
    batch script, which ended it instead, says why in its status file, and the reason names the
    directory as the agent's does."""
    job = Job(id=1, command=["pwd"], chdir="/shared/run42")
    failed = batch.ExitStatus(batch.CHDIR_FAILED_EXIT, "77", 100.0, 100.0, chdir_failed=True)
    assert batch.chdir_failure(job, failed) == "chdir to /shared/run42 failed on its Slurm node"
    outcome = batch.exit_outcome(job, 1, 10, batch.chdir_failure(job, failed))
    assert (outcome.state, outcome.reason) == (
        JobState.FAILED,
        "exit 1 (chdir to /shared/run42 failed on its Slurm node)",
    )
    # The command's own exit 1, or a job without a directory: the exit alone.
    assert batch.chdir_failure(job, dataclasses.replace(failed, chdir_failed=False)) == ""
    assert batch.chdir_failure(job, None) == ""
    assert batch.chdir_failure(dataclasses.replace(job, chdir=None), failed) == ""
