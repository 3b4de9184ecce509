"""The pass of a dispatcher in front of a batch scheduler (Slurm): seed 001's crunch-dispatch-slurm.

With the Slurm executor, Slurm owns the nodes and places the work; corral keeps the queue, claims
jobs atomically, and decides what each end of a Slurm job means for its corral job. This module
holds those decisions; `corral.executor.slurm` is the shell that calls `sbatch`, `squeue`,
`scontrol` and `scancel` and carries them out.

A pass, given the snapshot, `now`, and what the shell saw of this dispatcher's Slurm jobs (and of
those of the dispatchers that stopped heartbeating):
1. claims of dispatchers that stopped heartbeating: an attempt whose Slurm job Slurm still lists
   (or whose exit status file says how it ended) is adopted (`Adoption`): this dispatcher follows
   it from the next pass on as its own, and nothing is submitted again; the others are released
   (TempFail), as in `plan_pass`;
2. jobs with priority 0 or a cancel request are cancelled, and those with a requeue request are
   queued again (their Slurm jobs are scancelled either way);
3. each of this dispatcher's attempts is judged by its Slurm job's state (`SLURM_STATES`): still
   pending (annotated with Slurm's reason), running, ended with an exit code (complete, or failed
   unless the job asks for retries: `retry.after_exit`; TIMEOUT: failed, never retried, as corral's
   own pass ends a job at its time limit, `exit_outcome`), lost with a node (NODE_FAIL, BOOT_FAIL:
   the node-failure policy, `retry.after_node_failure`), preempted (PREEMPTED: requeued, not a
   failure, `retry.after_preemption`), lost otherwise (REVOKED, vanished from Slurm's listing:
   `retry.after_temp_failure`), or cancelled in Slurm by someone other than corral. A job Slurm
   no longer lists (it forgets an ended job `MinJobAge` after its end) whose batch script left its
   exit status (`ExitStatus`, read by the shell from the file beside its output) ended with it, or,
   if Slurm killed it (SIGTERM), as the Slurm state that killed it would have had it
   (`ExitStatus.slurm_state`: TIMEOUT, CANCELLED, PREEMPTED); with none, it is lost;
4. an attempt claimed but never submitted (the dispatcher stopped between the claim and `sbatch`)
   is submitted;
5. queued jobs whose dependency can never be satisfied are cancelled (`corral.core.dependency`,
   as in `plan_pass`: corral judges dependencies itself, and submits a job to Slurm only once its
   dependency holds, so no `sbatch --dependency` is needed);
6. eligible queued jobs are claimed and submitted in queue order, up to `max_pending` of this
   dispatcher's jobs waiting in Slurm, and no job array's task beyond its throttle (as in
   `plan_pass`, `corral.core.job_array`); the others, and the jobs not eligible yet, are annotated.

A job's priority reaches Slurm as its Nice (`nice_for`): at sbatch, and, for a job pending in
Slurm whose Nice is not its priority's any more (`corral priority`), by a renice.

An attempt's start and end are Slurm's StartTime and EndTime when Slurm gives them (`start_time`,
`end_time`), not the time of the pass that saw them: a job that ran between two passes ran for as
long as Slurm says, not 0 s.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from corral.core import admission, dependency, retry
from corral.core.dispatchers import stale_dispatchers
from corral.core.index import SnapshotIndex
from corral.core.model import Attempt, AttemptState, Job, JobState
from corral.core.settings import PolicySettings
from corral.core.snapshot import Annotation, JobOutcome, Snapshot


class Phase(StrEnum):
    """What a Slurm job state means to corral."""

    PENDING = "pending"  # queued in Slurm: the attempt stays assigned
    RUNNING = "running"  # the command runs (or is being set up, or is finishing)
    EXITED = "exited"  # ended with the command's exit code
    LOST = "lost"  # the infrastructure failed: a temporary failure
    CANCELLED = "cancelled"  # scancel


# Slurm's job states (squeue %T, scontrol JobState) by what they mean. A state not listed (a newer
# Slurm's) reads as running while Slurm lists the job: corral waits for one it knows.
SLURM_STATES: dict[str, Phase] = {
    "PENDING": Phase.PENDING,
    "REQUEUED": Phase.PENDING,
    "REQUEUE_HOLD": Phase.PENDING,
    "REQUEUE_FED": Phase.PENDING,
    "RESV_DEL_HOLD": Phase.PENDING,
    "CONFIGURING": Phase.RUNNING,
    "RUNNING": Phase.RUNNING,
    "COMPLETING": Phase.RUNNING,
    "SUSPENDED": Phase.RUNNING,
    "STOPPED": Phase.RUNNING,
    "SIGNALING": Phase.RUNNING,
    "STAGE_OUT": Phase.RUNNING,
    "RESIZING": Phase.RUNNING,
    "COMPLETED": Phase.EXITED,
    "FAILED": Phase.EXITED,
    "TIMEOUT": Phase.EXITED,  # the job's own time limit: the command's failure, not the cluster's (never retried)
    "OUT_OF_MEMORY": Phase.EXITED,
    "DEADLINE": Phase.EXITED,
    "SPECIAL_EXIT": Phase.EXITED,
    "NODE_FAIL": Phase.LOST,
    "BOOT_FAIL": Phase.LOST,
    "PREEMPTED": Phase.LOST,
    "REVOKED": Phase.LOST,
    "CANCELLED": Phase.CANCELLED,
}
TIMEOUT = "TIMEOUT"
# How much later than Slurm's StartTime a batch script may record its own start (Slurm launches it
# after the allocation; whole seconds): a script signalled this close to its time limit was killed
# at it.
SCRIPT_START_SLACK = 5.0
# corral's exit code of a Slurm job that ended in a state other than COMPLETED with ExitCode=0:0
# (or with none known): not 0, so that nothing reads it as a success (`corral submit --wait`).
NOT_COMPLETED_EXIT = 1
ACTIVE = frozenset((Phase.PENDING, Phase.RUNNING))  # Slurm still has work to do
# The states in which a node of the job failed: the node-failure policy (on_node_failure) decides
# what that does to the job, as for a lost node of corral's own.
NODE_FAILURES = frozenset({"NODE_FAIL", "BOOT_FAIL"})
# Slurm stopped the job for higher-priority work (PreemptMode=REQUEUE, as tried here; corral's jobs are
# --no-requeue, so Slurm ends them): requeued, not a failure (`retry.after_preemption`).
PREEMPTED = "PREEMPTED"
# A claimed job's wait reason while it pends in Slurm's queue: this, then Slurm's reason.
SLURM_REASON = "slurm: "
# Why Slurm no longer lists a job corral submitted: it keeps an ended job for MinJobAge only.
FORGOTTEN = "Slurm no longer lists it, as it forgets an ended job after MinJobAge"
# Slurm's reasons of a job held there (scontrol hold, sbatch --hold): it waits by someone's choice.
HELD_REASON = "JobHeld"
# Pending reasons not worth a job's wait reason (they say nothing the state does not).
QUIET_REASONS = frozenset({"", "None", "(null)"})
# Slurm's Nice range (22.05: "Nice value out of range (+/- 2147483645)").
NICE_LIMIT = 2_147_483_645
# The corral priority whose Slurm job has Nice=0 by default: corral's default priority, so that a
# job nobody prioritised competes in Slurm as a plain sbatch does.
DEFAULT_NICE_BASE = 1


class Refusal(StrEnum):
    """What an `sbatch` that failed means (`sbatch_refusal`)."""

    REQUEST = "request"  # Slurm refuses the job's own request for good: the job fails at once
    SETTING = "setting"  # Slurm refuses corral's slurm settings, the same for every job
    TEMPORARY = "temporary"  # anything else: slurmctld unreachable, busy, timed out; retried


# sbatch's refusals of what the job itself asks (its CPUs, memory, GPUs, scratch, nodes, time limit),
# which no retry changes: Slurm's own messages (slurm_errno.c, and sbatch's checks before it asks
# slurmctld), lower case. Seen from Slurm 22.05 here: `--mem` above every node's RealMemory gives
# the first two, `--gres=gpu:1` without GPUs and `--tmp` above TmpDisk the next two. The others
# come with EnforcePartLimits (a job over a partition's MaxTime, MaxNodes, MaxCPUsPerNode...).
# Without it Slurm accepts such a job and leaves it pending (Reason PartitionConfig,
# PartitionTimeLimit...), which corral shows as the job's wait reason, as squeue does.
REQUEST_REFUSALS = (
    "requested node configuration is not available",
    "memory specification can not be satisfied",
    "invalid generic resource (gres) specification",
    "temporary disk specification can not be satisfied",
    "node count specification invalid",
    "more processors requested than permitted",
    "memory required by task is not available",
    "requested time limit is invalid",
)
# Refusals of what corral's slurm settings ask for every job (slurm.partition, account,
# extra_args, nice_base): an operator's to fix, not the job's. Failing each job at once for them
# would empty corral's queue on one typo, so they stay temporary failures (the pass submits no
# more), and `corral run` checks the settings when it starts (`sbatch --test-only`).
SETTING_REFUSALS = (
    "invalid partition name specified",
    "invalid account or account/partition combination specified",
    "invalid qos specification",
    "requested reservation is invalid",
    "invalid feature specification",
    "invalid node name specified",
    "access/permission denied",
    "invalid wckey specification",
    "invalid --nice value",
)


# sbatch's refusals of an option's value (Slurm 22.05's messages, seen here for each SBATCH_*
# variable a job may set, corral.executor.slurm.SBATCH_PASSED) -> the variable that gives it. All
# but the last are sbatch's own parse, before it asks slurmctld. A value of the job's variable is
# refused for good, as the job's request is; corral's own options are sound, and its settings'
# (extra_args) are checked at start, so the refusal of an option the job does not set is of
# corral's settings.
OPTION_REFUSALS = {
    "invalid --signal specification": "SBATCH_SIGNAL",
    "invalid --open-mode specification": "SBATCH_OPEN_MODE",
    "invalid --acctg-freq specification": "SBATCH_ACCTG_FREQ",
    "invalid --profile=": "SBATCH_PROFILE",
    "invalid --cpu-freq argument": "SBATCH_CPU_FREQ_REQ",
    "invalid --gpu-freq argument": "SBATCH_GPU_FREQ",
    "unrecognized --mem-bind argument": "SBATCH_MEM_BIND",
    "invalid --gpu-bind argument": "SBATCH_GPU_BIND",
    "invalid --distribution specification": "SBATCH_DISTRIBUTION",
    "with arbitrary distribution you need to specify a nodelist": "SBATCH_DISTRIBUTION",
    "invalid accounting frequency requested": "SBATCH_ACCTG_FREQ",  # slurmctld's: task=0, or above its own
}


def refused_variable(message: str) -> str | None:
    """The SBATCH_* variable whose value sbatch's error `message` refuses (OPTION_REFUSALS), or None."""
    text = message.lower()
    return next((variable for known, variable in OPTION_REFUSALS.items() if known in text), None)


def sbatch_refusal(message: str, job_variables: Collection[str] = ()) -> Refusal:
    """What sbatch's error `message` means for a job whose environment names `job_variables` (its
    SBATCH_SIGNAL... is its own request). Only messages known to be final are: an unknown one (a
    newer Slurm's, a transient one such as "Unable to contact slurm controller", "Socket timed
    out", "Resource temporarily unavailable", "Job violates accounting/QOS policy", which is also a
    user's submit limit) is temporary, retried with back-off up to policy.retry.max_temp_failures."""
    text = message.lower()
    if any(known in text for known in REQUEST_REFUSALS):
        return Refusal.REQUEST
    variable = refused_variable(message)
    if variable is not None:
        return Refusal.REQUEST if variable in job_variables else Refusal.SETTING
    if any(known in text for known in SETTING_REFUSALS):
        return Refusal.SETTING
    return Refusal.TEMPORARY


def nice_for(priority: int, nice_base: int = DEFAULT_NICE_BASE) -> int:
    """The Slurm Nice of a job of corral priority `priority`: `nice_base - priority`, within
    Slurm's range. A higher priority is a lower Nice, and Slurm subtracts the Nice from its own
    priority, so corral's order holds among its jobs in Slurm's queue. A negative Nice (a priority
    above nice_base) is Slurm's privilege: root, SlurmUser, operators and administrators."""
    return max(-NICE_LIMIT, min(NICE_LIMIT, nice_base - priority))


def base_state(state: str) -> str:
    """Slurm's state without what squeue adds to it: "CANCELLED by 0" -> "CANCELLED", "COMPLETING+"
    -> "COMPLETING"; "" stays ""."""
    return state.split()[0].rstrip("+") if state else ""


def phase_of(state: str) -> Phase:
    """The phase of a Slurm job state; "" (not in Slurm's listing) is LOST: the job vanished."""
    if not state:
        return Phase.LOST
    return SLURM_STATES.get(base_state(state), Phase.RUNNING)


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """What corral's batch script recorded when the job's command ended: the file beside its
    output, written at its exit. Slurm's own word (squeue, scontrol) comes first; this is read
    only for a job Slurm no longer lists, which it forgets MinJobAge after its end. A job Slurm
    killed by SIGTERM (time limit, scancel, preemption) records `signal`; one whose node failed,
    or whose command outlived KillWait, leaves none."""

    exit_code: int
    slurm_job: str  # SLURM_JOB_ID of the script that wrote it
    started_at: float | None = None  # by the node's clock (None: not recorded)
    ended_at: float | None = None
    signal: str = ""  # "TERM": Slurm signalled the script (it killed the job); "": the command ended by itself
    # The Slurm state that killed it, as slurmstepd said in the job's output (TIMEOUT, PREEMPTED,
    # NODE_FAIL, CANCELLED); "": not said (or not looked for).
    killed_as: str = ""
    # The script could not enter the job's directory (its chdir) and never ran the command.
    chdir_failed: bool = False
    # The CPU time (user and system) of the command and of every process it waited for, as the
    # script's shell counted it (`times`); None: not measured (a corral before it, a command never
    # run, a shell whose `times` could not be read).
    cpu_seconds: float | None = None

    def slurm_state(self, time_limit: float | None) -> str:
        """The Slurm state a job that left this file ended in, as squeue would have said while it
        listed the job: "" for a command that ended by itself (its exit code says how); for one
        Slurm signalled, what slurmstepd said, else TIMEOUT if it ran its time limit as Slurm
        enforces it (whole minutes) and CANCELLED if not: someone or something ended it, and
        running it again is not corral's to decide."""
        if not self.signal:
            return ""
        if self.killed_as:
            return self.killed_as
        ran = None if self.started_at is None or self.ended_at is None else self.ended_at - self.started_at
        if time_limit is not None and ran is not None and ran >= slurm_limit(time_limit) - SCRIPT_START_SLACK:
            return TIMEOUT
        return "CANCELLED"


@dataclass(frozen=True, slots=True)
class Seen:
    """One of this dispatcher's attempts as the shell saw its Slurm job this pass."""

    attempt_id: int
    ref: str  # the Slurm job id
    state: str  # Slurm's JobState ("RUNNING"); "" when Slurm no longer lists the job
    exit_code: int | None = None  # for an ended job: its exit code, 128+N for signal N
    reason: str = ""  # Slurm's reason: why it pends, or why it ended
    nodes: str = ""  # Slurm's node list
    nice: int | None = None  # Slurm's Nice of the job (None: not known)
    # Slurm's StartTime and EndTime (None: not known). Only an estimate while the job pends (its
    # start) or runs (its end: the time limit's), so read only once the job started or ended.
    started_at: float | None = None
    ended_at: float | None = None
    # The exit status its batch script recorded, for a job Slurm no longer lists (state ""); None:
    # no such file (or not looked for).
    status: ExitStatus | None = None
    # For an ended job: Slurm's ExitCode=CODE:N's signal N, which killed its batch script (exit_code
    # is then 128+N); None: 0, the script exited.
    exit_signal: int | None = None

    def recorded_exit(self) -> ExitStatus | None:
        """The recorded exit status that tells how this job ended: only for a job Slurm no longer
        lists, and only one written by this very Slurm job."""
        if self.state or self.status is None or self.status.slurm_job != self.ref:
            return None
        return self.status


@dataclass(frozen=True, slots=True)
class Start:
    """An attempt whose Slurm job runs, or ran, unseen till now."""

    attempt_id: int
    ref: str  # the Slurm job id
    nodes: str  # Slurm's node list
    at: float  # when it started (`start_time`)
    by_slurm: bool  # `at` is Slurm's StartTime (else the pass's time: Slurm gave none)


@dataclass(frozen=True, slots=True)
class Exit:
    """An attempt whose Slurm job ended with an exit code; the shell records it with
    `exit_outcome` as the store's outcome function (on the job as it stands then)."""

    attempt_id: int
    job_id: int
    exit_code: int
    detail: str  # e.g. "slurm job 17 TIMEOUT"
    at: float  # when it ended (`end_time`)
    timeout: bool = False  # Slurm ended it at its time limit (`exit_outcome`)
    exit_signal: int | None = None  # the signal that killed the batch script (Slurm's ExitCode=0:N)


@dataclass(frozen=True, slots=True)
class Renice:
    """A Slurm job pending with a Nice that is not its job's priority's (`nice_for`) any more."""

    job_id: int
    ref: str  # the Slurm job id
    nice: int  # the Nice it should have
    priority: int  # the corral priority it comes from
    was: int | None = None  # the Nice Slurm reports for it (an admin's `scontrol update` may have set it)


@dataclass(frozen=True, slots=True)
class Adoption:
    """An attempt of a dispatcher that stopped heartbeating whose Slurm job Slurm still knows (or
    that left its exit status): this dispatcher takes it and the job's claim over and follows it
    to its end, rather than run the job a second time beside it (or after it)."""

    job_id: int
    attempt_id: int
    ref: str  # the Slurm job id
    stale: str  # the dispatcher that stopped heartbeating
    state: str  # what Slurm says of it ("" with an exit status file)


@dataclass(slots=True)
class BatchDecisions:
    job_outcomes: list[JobOutcome] = field(default_factory=list)  # cancellations, temp failures
    exits: list[Exit] = field(default_factory=list)
    started: list[Start] = field(default_factory=list)  # attempts whose Slurm job runs, or ran, unseen till now
    adoptions: list[Adoption] = field(default_factory=list)  # silent dispatchers' attempts Slurm still knows
    cancel: list[str] = field(default_factory=list)  # Slurm job ids to scancel
    renice: list[Renice] = field(default_factory=list)  # Slurm jobs pending with another priority's Nice
    submit: list[int] = field(default_factory=list)  # this dispatcher's attempts not yet submitted
    claims: list[int] = field(default_factory=list)  # queued jobs to claim and submit, in order
    annotations: list[Annotation] = field(default_factory=list)  # queued jobs: why they wait
    pending_reasons: dict[int, str] = field(default_factory=dict)  # claimed jobs pending in Slurm
    # Job id -> when its outcome happened, for a job_outcome of a running attempt whose Slurm job
    # ended (NODE_FAIL, PREEMPTED, cancelled outside corral): `end_time`. Others: the pass's time.
    outcome_times: dict[int, float] = field(default_factory=dict)


def start_time(observed: Seen, attempt: Attempt, now: float) -> float:
    """When an attempt whose Slurm job started did: Slurm's StartTime, else `now` (the pass that
    saw it). Slurm keeps whole seconds (truncated) and its own clock: the time is kept between the
    attempt's submission and the pass."""
    if observed.started_at is None:
        return now
    return min(now, max(observed.started_at, attempt.assigned_at))


def end_time(observed: Seen, started: float, now: float) -> float:
    """When an attempt that started at `started` ended: Slurm's EndTime, else `now`; kept between
    its start and the pass."""
    if observed.ended_at is None:
        return now
    return min(now, max(observed.ended_at, started))


def slurm_limit(time_limit: float) -> float:
    """The time limit Slurm enforces for a job that asked `time_limit`: whole minutes, rounded up."""
    return math.ceil(time_limit / 60) * 60


# corral's batch script's exit when it cannot enter the job's directory (as the agent's then).
CHDIR_FAILED_EXIT = 1


def chdir_failure(job: Job, status: ExitStatus | None) -> str:
    """What an exit's detail says of a job whose batch script could not enter its directory (its
    status file says so; Slurm itself, which would have run the job in /tmp, says FAILED): the
    directory, as the agent names it; "" for any other exit."""
    if job.chdir is None or status is None or not status.chdir_failed:
        return ""
    return f"chdir to {job.chdir} failed on its Slurm node"


def exit_outcome(
    job: Job,
    exit_code: int,
    attempt_id: int,
    detail: str = "",
    timeout: bool = False,
    exit_signal: int | None = None,
) -> JobOutcome:
    """What an exit means for the job: `retry.after_exit`, with Slurm's word on it where it says
    more than the code (OUT_OF_MEMORY). A TIMEOUT (Slurm enforced the job's `--time`: `timeout`,
    or a detail that ends with Slurm's state) is a timeout as corral's own pass records one
    (`retry.after_timeout`: failed, never retried, event job.timeout), whatever the exit code
    Slurm gives it (often 0). `exit_signal`: Slurm's ExitCode=CODE:SIGNAL's signal, kept with the code."""
    if timeout or detail.endswith(f" {TIMEOUT}"):
        limit = job.time_limit
        if limit is not None and limit % 60:
            # Slurm keeps time limits in whole minutes: what it enforced is the asked one rounded up.
            detail += f"; Slurm's limit is whole minutes: {retry.format_seconds(slurm_limit(limit))}"
        outcome = retry.after_timeout(job, limit, (attempt_id,), detail)
        return dataclasses.replace(outcome, exit_code=exit_code, exit_signal=exit_signal)
    outcome = retry.after_exit(job, exit_code, (attempt_id,), exit_signal=exit_signal)
    return dataclasses.replace(outcome, reason=f"{outcome.reason} ({detail})") if detail else outcome


def start_of(observed: Seen, attempt: Attempt, now: float) -> Start:
    at = start_time(observed, attempt, now)
    return Start(attempt.id, observed.ref, observed.nodes, at, observed.started_at is not None)


def plan_batch_pass(
    snapshot: Snapshot,
    now: float,
    settings: PolicySettings,
    seen: Mapping[int, Seen],
    max_pending: int,
    nice_base: int = DEFAULT_NICE_BASE,
) -> BatchDecisions:
    """Every decision of a pass in front of Slurm. `seen` has an entry for each of this
    dispatcher's active attempts that was submitted (state "" if Slurm no longer lists it); one of
    its attempts without an entry was claimed but never submitted. It has one too for each active
    attempt of a dispatcher that stopped heartbeating (`stale_dispatchers`) whose Slurm job is
    known: by the id recorded on the attempt, or by its comment. `nice_base` maps a priority to a
    Slurm Nice (`nice_for`)."""
    index = snapshot.index if snapshot.index is not None else SnapshotIndex.of(snapshot)
    decisions = BatchDecisions()
    me = snapshot.dispatcher_id
    ended: set[int] = set()

    def attempt_ids(job_id: int) -> tuple[int, ...]:
        return tuple(index.job_attempts.get(job_id, ()))

    def refs_of(job_id: int) -> list[str]:
        return [seen[i].ref for i in attempt_ids(job_id) if i in seen and phase_of(seen[i].state) in ACTIVE]

    # 1. Claims of dispatchers that stopped heartbeating. A Slurm job runs on whatever becomes of
    # its dispatcher (slurmd runs it, slurmctld keeps it): an attempt Slurm still lists, or that
    # left its exit status, is adopted and followed to its end, as the silent dispatcher would
    # have; releasing it would run the job a second time (its running Slurm job scancelled as an
    # orphan, or one that completed run again). The others, never submitted or forgotten with no
    # exit status, are released as temporary failures, as plan_pass releases them.
    stale = stale_dispatchers(snapshot, now, settings)
    if stale:
        for job in index.jobs.values():
            if job.claimed_by not in stale or job.state not in (JobState.CLAIMED, JobState.RUNNING):
                continue
            ended.add(job.id)
            silent = job.claimed_by
            known = [
                observed
                for i in attempt_ids(job.id)
                if (observed := seen.get(i)) is not None
                and index.attempts[i].dispatcher_id == silent
                and (observed.state or observed.recorded_exit() is not None)
            ]
            if known and silent is not None:
                observed = known[0]
                decisions.adoptions.append(Adoption(job.id, observed.attempt_id, observed.ref, silent, observed.state))
                continue
            decisions.job_outcomes.append(
                retry.after_temp_failure(
                    job, now, settings.retry, f"dispatcher {silent} stopped heartbeating", attempt_ids(job.id)
                )
            )

    # 2. Cancellation (priority 0 or an explicit request) and requeue requests; this dispatcher's
    # Slurm jobs are scancelled.
    for job in index.in_job_order(index.flagged.values()) if index.flagged else ():
        if job.id in ended or (job.claimed_by not in (None, me) and job.state is not JobState.QUEUED):
            continue  # another dispatcher's run: that one cancels it
        outcome = retry.on_request(job, attempt_ids(job.id))
        if outcome is None:
            continue
        decisions.job_outcomes.append(outcome)
        decisions.cancel.extend(refs_of(job.id))
        ended.add(job.id)

    # 3 and 4. This dispatcher's attempts, by their Slurm jobs.
    pending = 0
    for attempt in index.attempts.values():
        owner = index.jobs.get(attempt.job_id)
        if attempt.dispatcher_id != me or owner is None or owner.id in ended:
            continue
        job = owner
        observed = seen.get(attempt.id)
        if observed is None:
            decisions.submit.append(attempt.id)
            pending += 1
            continue
        recorded = observed.recorded_exit()
        from_file = ""  # for a job Slurm forgot: what its status file says, for the reason
        if recorded is not None:
            # Slurm forgot the job (MinJobAge passed while corral was away) and its batch script
            # recorded how it ended: it ran, and is not run again. One Slurm killed (SIGTERM)
            # ends as Slurm's state would have had it, had corral seen it (TIMEOUT: failed;
            # CANCELLED outside corral; PREEMPTED: requeued).
            killed = recorded.slurm_state(job.time_limit)
            observed = dataclasses.replace(
                observed,
                state=killed,
                exit_code=recorded.exit_code,
                started_at=recorded.started_at,
                ended_at=recorded.ended_at,
            )
            phase = phase_of(killed) if killed else Phase.EXITED
            if not killed:
                from_file = f"{FORGOTTEN}; exit status read from its status file"
            elif recorded.killed_as:
                from_file = f"{FORGOTTEN}; its status file says Slurm killed it (SIGTERM), and its output says why"
            else:
                when = "once it had run its time limit" if killed == TIMEOUT else "before its time limit"
                from_file = f"{FORGOTTEN}; its status file says Slurm killed it (SIGTERM) {when}"
        else:
            phase = phase_of(observed.state)
        slurm_job = f"slurm job {observed.ref}"
        if phase is Phase.PENDING:
            pending += 1
            reason = observed.reason if observed.reason not in QUIET_REASONS else "pending"
            note = f"{SLURM_REASON}{reason}"
            if note != job.wait_reason:
                decisions.pending_reasons[job.id] = note
            # Only a pending job's Nice matters (Slurm orders its queue by it); a renice that
            # failed is tried again while the Nice Slurm reports differs.
            wanted = nice_for(job.priority, nice_base)
            if observed.nice is not None and observed.nice != wanted:
                decisions.renice.append(Renice(job.id, observed.ref, wanted, job.priority, observed.nice))
        elif phase is Phase.RUNNING:
            if attempt.state is AttemptState.ASSIGNED:
                decisions.started.append(start_of(observed, attempt, now))
        elif phase is Phase.EXITED:
            if attempt.state is AttemptState.ASSIGNED:
                # It started and ended between two passes: it did run, and its start is recorded
                # first, or the job would show no start and `corral usage` would not count it.
                start = start_of(observed, attempt, now)
                decisions.started.append(start)
                started = start.at
            else:
                started = attempt.started_at if attempt.started_at is not None else attempt.assigned_at
            code, signal = observed.exit_code, observed.exit_signal
            state = base_state(observed.state)
            detail = "" if state in ("COMPLETED", "FAILED") else f"{slurm_job} {state}"
            if recorded is not None:
                code, signal = recorded.exit_code, None  # (the script's file: the shell's 128+N alone)
                detail = f"{slurm_job} {state}: {from_file}" if state else f"{slurm_job}: {from_file}"
            elif code is None:  # ended without an exit code known: say what Slurm says
                code, signal = 0 if state == "COMPLETED" else NOT_COMPLETED_EXIT, None
            elif code == 0 and state not in ("COMPLETED", TIMEOUT):
                # Slurm says the job did not complete although its batch script exited 0: an
                # OUT_OF_MEMORY whose OOM kill took a child the script outlived, a DEADLINE, a
                # FAILED launch. Slurm's state decides, as it does for sacct and for a dependent
                # job's afterok: the job failed (TIMEOUT has its own outcome, `exit_outcome`).
                code = NOT_COMPLETED_EXIT
                detail = f"{slurm_job} {state} with ExitCode=0:0"
            at = end_time(observed, started, now)
            decisions.exits.append(
                Exit(attempt.id, job.id, code, detail, at, timeout=state == TIMEOUT, exit_signal=signal)
            )
        elif phase is Phase.LOST:
            why = (
                f"{slurm_job} {observed.state}"
                if observed.state
                else f"{slurm_job} vanished from squeue ({FORGOTTEN}) and left no exit status file"
            )
            if observed.reason not in QUIET_REASONS:
                why += f" ({observed.reason})"
            if from_file:
                why += f" ({from_file})"
            ids = attempt_ids(job.id)
            if base_state(observed.state) in NODE_FAILURES:  # seed 002 §5.4.6
                node = observed.nodes or slurm_job
                lost = retry.after_node_failure(job, now, settings.retry, node, ids, why)
                # Its event names the attempt's node, as job.claimed does: Slurm's node list is no corral node.
                decisions.job_outcomes.append(dataclasses.replace(lost, node_id=None))
            elif base_state(observed.state) == PREEMPTED:
                decisions.job_outcomes.append(retry.after_preemption(job, why, ids))
            else:
                decisions.job_outcomes.append(retry.after_temp_failure(job, now, settings.retry, why, ids))
        else:  # cancelled in Slurm, and not by corral (corral's own cancel ended the attempt)
            why = f"{slurm_job} was cancelled outside corral" + (f" ({from_file})" if from_file else "")
            decisions.job_outcomes.append(JobOutcome(job.id, JobState.CANCELLED, why, attempt_ids(job.id)))
        if phase is not Phase.PENDING and phase is not Phase.RUNNING:
            ended.add(job.id)
            if phase is not Phase.EXITED and attempt.started_at is not None and observed.state:
                decisions.outcome_times[job.id] = end_time(observed, attempt.started_at, now)

    # 5. Dependencies: judged as plan_pass judges them.
    judged = dependency.step(snapshot, index, ended, settings.dispatch.kill_invalid_depend, decisions.job_outcomes)
    blocked, reasons = judged.blocked, judged.reasons

    # 6. The queue: claim and submit in queue order (corral.core.admission) while fewer than
    # max_pending wait in Slurm, and no more of an array's tasks, or of a user's jobs, than its
    # throttle or their limits leave room for (claimed jobs count, whether they pend in Slurm or run,
    # as Slurm's own throttle counts them).
    queue = admission.in_order(index, snapshot, settings, now)
    eligible = [job for job in queue if job.id not in ended and job.id not in blocked and job.eligible_at() <= now]
    _, throttled = admission.within_limits(eligible, index, ended, settings)
    for job in queue:
        if job.id in ended:
            continue
        if job.id in blocked:
            if job.wait_reason != reasons[job.id] or job.unplaceable:
                decisions.annotations.append(Annotation(job.id, reasons[job.id]))
            continue
        if job.eligible_at() > now:
            why = job.not_yet_reason()
            if job.wait_reason != why:
                decisions.annotations.append(Annotation(job.id, why))
        elif job.id in throttled:
            if job.wait_reason != throttled[job.id]:
                decisions.annotations.append(Annotation(job.id, throttled[job.id]))
        elif pending < max_pending:
            decisions.claims.append(job.id)
            pending += 1
        else:
            why = f"waiting: {max_pending} jobs pending in Slurm already (slurm.max_pending)"
            if job.wait_reason != why:
                decisions.annotations.append(Annotation(job.id, why))
    return decisions
