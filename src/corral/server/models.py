"""API models: what the HTTP API returns and accepts (besides JobRequest)."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from fastapi import Path
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from corral.core import categories, drain
from corral.core.model import JobState
from corral.core.retry import EndCause
from corral.core.signals import parse_signal
from corral.core.units import Duration, Float, Int, SizeMiB
from corral.jobspec import MAX_PRIORITY, MAX_USER, EpochSeconds, JobRequest, to_epoch
from corral.placement import attributes as attr

# The store's integer columns (ids, exit codes, pids, MiB) are 32 bits on PostgreSQL and 64 on
# SQLite: a number past either would reach the driver and come back as a 500, so the API refuses
# it as it refuses any bad value, naming the field.
DB_INT_MIN, DB_INT_MAX = -(2**31), 2**31 - 1
DbInt = Annotated[Int, Field(ge=DB_INT_MIN, le=DB_INT_MAX)]


def plain_number(value: Any) -> Any:
    """A path's id as digits only: int() reads `12_3` as 123 (Python's digit grouping), and a
    Slurm user's `12_3` is an array's task, never job 123."""
    if isinstance(value, str) and not re.fullmatch(r"-?[0-9]+", value):
        raise ValueError("not a number")
    return value


# A job, array or attempt id in a route's path, bounded as DbInt.
PathId = Annotated[int, BeforeValidator(plain_number), Path(ge=DB_INT_MIN, le=DB_INT_MAX)]


class Inbound(BaseModel):
    """A body the API accepts: no nan or inf (SQLite would store a nan as NULL)."""

    model_config = ConfigDict(allow_inf_nan=False)


class ErrorOut(BaseModel):
    """A refusal: 400 (a body that is not JSON), 401 (token), 403, 404 (no such job), 409, 413 (a body too long)."""

    detail: str


class InvalidOut(BaseModel):
    """A 422: one line per bad value, each naming its field ("jobs.0.ram: a size cannot be negative")."""

    detail: list[str]


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """A router's documented errors: a 422 lists the bad values, the others give a detail."""
    return {code: {"model": InvalidOut if code == 422 else ErrorOut} for code in codes}


MAX_SUBMITTED = 100_000  # jobs in one submission, an array's tasks each counted

# The most bytes of a request's body the server reads (413 past it, before the body is read when
# its length is given): a body is held whole in memory and parsed, into ten times its size.
MAX_BODY = 1024 * 1024
# A submission: MAX_SUBMITTED jobs of a job file (about 450 bytes each as the CLI sends them).
MAX_SUBMIT_BODY = 128 * 1024 * 1024
# An agent's chunk of output (it sends 256 KiB at most: corral.agent.agent.LOG_CHUNK).
MAX_LOG_CHUNK_BODY = 4 * 1024 * 1024
# The attempts one ping may name (running, finished): each is a write to the store.
MAX_AGENT_LIST = 10_000


USER_NAME_MAX = MAX_USER  # (the user a job names fits too)
# A login name's characters (POSIX's portable ones): what Slurm's users are, and what a shell, a
# tag or a log line shows as it is.
USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


class SubmitBody(BaseModel):
    jobs: list[JobRequest] = Field(min_length=1, max_length=MAX_SUBMITTED)
    submitter: str = Field(
        "",
        max_length=USER_NAME_MAX,
        description="Whose the jobs that name no user are, when the operator's token submits them (the CLI"
        " sends its login name); a user token's jobs are its user's.",
    )
    key: str | None = Field(
        None,
        min_length=16,
        max_length=64,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="The client's own key for this submission (16 to 64 of A-Z a-z 0-9 _ -): sent again within a"
        " day, as after a lost answer, it queues nothing and answers the ids of the first time",
    )

    @model_validator(mode="after")
    def _not_too_many_tasks(self) -> SubmitBody:
        total = sum(len(spec.task_ids) if (spec := job.to_array()) is not None else 1 for job in self.jobs)
        if total > MAX_SUBMITTED:
            raise ValueError(f"{total} jobs with the arrays' tasks: at most {MAX_SUBMITTED} in one submission")
        return self


class SubmitResult(BaseModel):
    ids: list[int]


class PriorityBody(Inbound):
    # Strict: JSON's false would be taken for 0, which cancels the job.
    priority: int = Field(ge=0, le=MAX_PRIORITY, strict=True)


class JobUpdateBody(Inbound):
    """What to change of a job (Slurm's `scontrol update JobId=`), each field as at submission; a
    field left out is left as it is. Resources, nodes, not_before and reservation only while the job
    is queued."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: str | None = None
    vcpus: Float | None = None
    ram: SizeMiB | None = None
    scratch: SizeMiB | None = None
    gpus: Int | None = None
    nodes: Int | None = None
    time_limit: Duration | None = Field(None, description="seconds or a duration ('2h'); 0 or null: no limit")
    time_limit_add: Duration | None = Field(
        None, description="added to the time limit it has (Slurm's TimeLimit=+2:00:00); not with time_limit"
    )
    not_before: EpochSeconds | None = None
    max_retries: Int | None = None
    reservation: str | None = Field(
        None, description="an admin reservation in force (Slurm's ReservationName=); '': none (queued jobs only)"
    )
    signal: str | None = Field(
        None, description="sbatch's --signal, [B:]SIG[@TIME], as at submission; '' or null: none (queued jobs only)"
    )

    @model_validator(mode="after")
    def _something(self) -> JobUpdateBody:
        if not self.model_fields_set:
            raise ValueError("nothing to change: give at least one field")
        if "time_limit" in self.model_fields_set and "time_limit_add" in self.model_fields_set:
            raise ValueError("time_limit and time_limit_add: give one of them")
        return self


class JobUpdateOut(BaseModel):
    id: int
    state: str
    changes: dict[str, list[Any]]  # each field changed: its old and its new value (as stored)
    # In front of Slurm, a claimed job changed: the next pass takes it back from Slurm's queue
    # (scancel) and submits it again with the new request.
    taken_back: bool = False


class CancelMatchingBody(BaseModel):
    """Which open jobs to cancel: those matching every filter given."""

    model_config = ConfigDict(extra="forbid")
    states: list[JobState] | None = Field(None, description="only jobs in these states (queued, claimed, running)")
    user: str | None = Field(None, max_length=200, description="only this user's jobs")
    name: str | None = Field(None, max_length=200, description="only jobs of this name")
    tag: str | None = Field(None, max_length=200, description="only jobs with this tag")
    array: DbInt | None = Field(None, description="only the tasks of this job array (its id)")

    @model_validator(mode="after")
    def _some_filter(self) -> CancelMatchingBody:
        if not self.states and all(value is None for value in (self.user, self.name, self.tag, self.array)):
            raise ValueError("give states, user, name, tag or array: a cancel that matches every job is not taken")
        return self


class ThrottleBody(Inbound):
    """A job array's new throttle (Slurm's ArrayTaskThrottle): at most this many tasks claimed or
    running at once; 0: no limit."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    throttle: int = Field(ge=0, le=1_000_000, strict=True, description="0: no limit")


class ArrayActionOut(BaseModel):
    """What hold, release, cancel, requeue, priority or update given a job array's id did, as
    Slurm's `scontrol hold 12` acts on every task of array 12 in a state it applies to: the tasks
    changed, and the others, each grouped by what was done or why not (job ids)."""

    array_job_id: int
    tasks: int  # the array's tasks
    changed: dict[str, list[int]]  # e.g. {"held": [12, 13]}
    unchanged: dict[str, list[int]]  # e.g. {"already running": [14]}
    # update's: each changed task's fields, their old and new values (as stored), by job id.
    changes: dict[int, dict[str, list[Any]]] = {}


class ThrottleOut(BaseModel):
    array_job_id: int
    throttle: int | None  # None: no limit
    tasks: int  # the array's tasks
    open: int  # of them, those not finished


class ClearBackoffsBody(Inbound):
    """The instance types whose back-off an operator ends (`corral backoff clear`): those named, or
    every type backed off (`all`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    instance_types: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        default_factory=list, max_length=10_000, description="the types whose back-off ends"
    )
    all: bool = Field(False, strict=True, description="every type backed off (instead of instance_types)")

    @model_validator(mode="after")
    def _named_or_all(self) -> ClearBackoffsBody:
        if self.all and self.instance_types:
            raise ValueError("name instance types, or all, not both")
        if not self.all and not self.instance_types:
            raise ValueError("name the instance types whose back-off ends, or all")
        return self


class ClearedBackoffOut(BaseModel):
    instance_type: str
    until: float  # when the back-off would have ended
    reason: str  # why the type was backed off
    boot_failures: int  # its failed boots in a row, now forgotten


class ClearBackoffsOut(BaseModel):
    cleared: list[ClearedBackoffOut]  # in the order named (all: by name)


class CancelMatchingOut(BaseModel):
    ids: list[int]


class SignalBody(BaseModel):
    """Slurm's `scancel --signal SIG [--batch]`: a signal for a running job's command, which goes on."""

    model_config = ConfigDict(extra="forbid")
    signal: str = Field(
        max_length=16, description="a name (USR1, SIGUSR1) or a number; KILL and STOP are refused (corral cancel)"
    )
    batch: bool = Field(
        False, strict=True, description="its main process alone (scancel --batch); false: its whole process group"
    )

    @field_validator("signal")
    @classmethod
    def _a_signal(cls, value: str) -> str:
        parse_signal(value)  # (its ValueError is the 422's message)
        return value

    @property
    def number(self) -> int:
        return parse_signal(self.signal)


class SignalMatchingBody(SignalBody, CancelMatchingBody):
    """A signal for every open job matching all the filters given (scancel --signal -t/-u/-n)."""


class SignalMatchingOut(BaseModel):
    ids: list[int] = Field(description="the jobs a signal was requested for")
    not_running: dict[str, list[int]] = Field(
        description="the jobs matched whose command does not run, by state (claimed: placed, not started): not"
        " signalled, as scancel refuses them"
    )


class RequeueBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hold: bool = Field(False, strict=True, description="held once queued again, until released")


class HoldBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field("", max_length=500, description="why, shown as the job's wait reason")


# Epoch seconds; ISO 8601 is turned into them.
_TIMES = (attr.NEXT_REBOOT, attr.RESERVATION_UNTIL, attr.RESERVATION_START, attr.FAILURE_RESERVED_UNTIL)
_NUMBERS = (attr.HARDWARE_PRIORITY, attr.RECENT_FAILURES, attr.MAX_JOBS)
_FLAGS = (attr.HELD, attr.RESERVED, attr.CAPPED)


class NodeAttributesBody(BaseModel):
    """An operator's change to a live node's attributes (docs/placement.md, Node attributes)."""

    model_config = ConfigDict(extra="forbid")
    set: dict[str, str | list[str]] = Field(default_factory=dict)
    unset: list[str] = Field(default_factory=list)
    rack: str | None = Field(None, max_length=64)

    @field_validator("set")
    @classmethod
    def _readable(cls, values: dict[str, str | list[str]]) -> dict[str, str | list[str]]:
        """The keys the engine reads must hold what it can read: an unreadable number would
        otherwise count as absent without a word."""
        out: dict[str, str | list[str]] = {}
        for key, value in values.items():
            if not key.strip():
                raise ValueError("an attribute name is empty")
            text = value if isinstance(value, str) else None
            if key in _TIMES and text is not None:
                try:
                    number = float(text)  # epoch seconds, else ISO 8601 as --not-before takes it
                except ValueError:
                    try:
                        number = to_epoch(text)
                    except ValueError as exc:
                        raise ValueError(f"{key}: {exc}") from None
                if not math.isfinite(number):
                    raise ValueError(f"{key}: not a time: {text!r}")
                value = repr(number) if number != int(number) else str(int(number))
            elif key in _NUMBERS and text is not None:
                try:
                    number = float(text)
                except ValueError:
                    raise ValueError(f"{key}: not a number: {text!r}") from None
                if not math.isfinite(number) or (key == attr.MAX_JOBS and (number < 0 or number != int(number))):
                    raise ValueError(f"{key}: {text!r} is not a usable value")
            elif key in _FLAGS and text is not None and attr.truthy({key: text}, key) is None:
                raise ValueError(f"{key}: {text!r} is not true or false")
            elif key == attr.DRAIN and (text is None or not drain.readable(text)):
                raise ValueError(f"{key}: {value!r} is not true, false or now")
            elif key == attr.CATEGORY:
                # Moab's spelling (HardwareFailure) would be a category nothing reads: the node
                # would go on taking work, unbroken, without a word.
                value = (
                    categories.normalise(value) if isinstance(value, str) else [categories.normalise(v) for v in value]
                )
            out[key] = value
        return out


class ResourcesOut(BaseModel):
    vcpus: float
    ram_mib: int
    scratch_mib: int
    gpus: int


class AttemptOut(BaseModel):
    id: int
    state: str
    node: str
    nodes: list[str]
    exit_code: int | None
    exit_signal: int | None = Field(
        None,
        description="The signal that killed its command (exit_code is then 128+N, as before this field); null:"
        " it exited, or it has not ended, or its node did not say (an agent of an older corral, a run"
        " before corral 0021).",
    )
    assigned_at: float
    started_at: float | None
    finished_at: float | None
    reason: str
    executor_ref: str | None = None  # the executor's id of it: the Slurm job id (None: the corral agent)
    cpu_seconds: float | None = Field(
        None,
        description="The CPU time (user and system) its command's processes used, on the node that ran the"
        " command (node; a gang's other nodes are not counted), as Slurm's TotalCPU (in front of Slurm, as"
        " corral's batch script measured it: the command and what it waited for); null: not known (it has"
        " not ended, its agent is of an older corral, a lost node, a command never run, a run recorded before"
        " store revision 0022).",
    )
    max_rss_mib: int | None = Field(
        None,
        description="The peak resident memory (MiB) of its command's processes together on that node, as"
        " Slurm's MaxRSS: the highest the agent sampled, or the largest single process's, whichever is higher"
        " (a peak between two samples can be missed); null: not known, as for cpu_seconds, and always in front"
        " of Slurm.",
    )


class DependencyOut(BaseModel):
    """One condition of a dependency: its kind (after, afterany, afterok, afternotok), the job on
    the other side of it, and that job's state now."""

    kind: str
    job_id: int
    state: str


class SignalEventOut(BaseModel):
    """A signal asked for a job's run, or sent, or dropped: one of its job.signal* events."""

    at: float
    kind: str  # job.signal_requested, job.signalled, job.signal_dropped
    message: str


class JobOut(BaseModel):
    id: int
    name: str
    state: JobState
    # How an ended job ended, for a program (a workflow engine's plugin) to read; None while open.
    end_cause: EndCause | None = Field(
        None,
        description="How an ended job ended (null while it is open): complete, exit (a non-zero exit_code;"
        " 128+N with exit_signal N: killed by signal N), timeout, node_failure, cancelled (by a user or admin"
        " named in cancelled_by; in front of Slurm, also"
        " outside corral), dependency (DependencyNeverSatisfied) or refused (the batch scheduler refused its"
        " request). wait_reason says the same in words.",
    )
    priority: int
    exit_code: int | None
    exit_signal: int | None = Field(
        None,
        description="The signal that killed its last run's command, as Slurm's ExitCode=0:9 says it: exit_code"
        " is then 128+N (kept so, for the programs that read it), and a program that exited 137 has null here."
        " Null too for a run whose node did not say (an agent of an older corral) or one before corral 0021.",
    )
    cancelled_by: str | None = Field(
        None,
        description='Who asked for its cancel (corral cancel, priority 0): the user, or "(operator)" for the'
        " data directory's token; set from the request on, while the cancel is pending. Null when nobody"
        " did: a cancel of corral's own (a dependency never satisfied, on_node_failure=cancel; in front of"
        " Slurm, a scancel outside corral), which end_cause tells apart, and a job that ended otherwise first.",
    )
    node: str | None
    attempts: int
    temp_failures: int
    # Its runs that exited non-zero, and how many reruns after one it asked for (--max-retries):
    # why a failed job was, or was not, run again.
    nonzero_exits: int = 0
    max_retries: int = 0
    command: list[str]
    resources: ResourcesOut
    nodes: int
    submitted_at: float
    image: str | None = None  # the container image the command runs in
    chdir: str | None = None  # the directory the command runs in on the node (None: the attempt's own)
    # Its stderr is kept apart from its output (GET /api/jobs/{id}/logs?stream=stderr), as sbatch --error.
    separate_stderr: bool = False
    script_bytes: int | None = Field(
        None,
        description="A batch script's size in bytes: the job is that script (corral submit --script), command its"
        " file's name and its arguments; null: the job is its command",
    )
    script: str | None = Field(
        None,
        description="The batch script's text: in one job's view (GET /api/jobs/{id}) only, as a listing of a"
        " thousand jobs would carry up to 4 MiB for each",
    )
    started_at: float | None
    finished_at: float | None
    wait_reason: str  # why a queued job waits; why an ended job ended (Slurm's Reason)
    unplaceable: bool
    cancel_requested: bool
    requeue_requested: bool
    held: bool = False  # queued, but not placed until released (corral hold / on_node_failure=hold)
    on_node_failure: str | None = None  # the job's own; None: policy.retry.on_node_failure
    time_limit: float | None = None  # seconds (Slurm's TimeLimit); None: no limit
    # sbatch's --signal as stored ("B:USR1@60"): SIG sent TIME seconds before the time limit; None: none.
    signal: str | None = None
    executor_ref: str | None = None  # its latest attempt's executor_ref: the Slurm job id
    not_before: float | None = None  # epoch seconds: not started before then (--not-before)
    locality: dict[str, Any] | None = None  # near / far hints (--near, --far), as submitted
    # What it asks of a node besides room, as submitted (--trait, --forbid, --min-platform,
    # --reservation, --cpu-capped, --exclusive): what the placement filters read.
    traits: dict[str, str | list[str]] = Field(default_factory=dict)
    forbidden_traits: dict[str, str | list[str]] = Field(default_factory=dict)
    min_platform: str | None = None
    reservation: str = ""
    cpu_capped: bool = False
    exclusive: bool = False  # runs alone on each of its nodes (--exclusive)
    user: str = ""  # whose job it is (corral usage --by user)
    tags: list[str] = Field(default_factory=list)
    # Slurm's --dependency as stored ("afterok:12:13,afterany:14"; '?' between conditions: any one).
    dependency: str | None = None
    depends_on: list[DependencyOut] | None = None  # one job's view: the jobs its dependency names
    needed_by: list[DependencyOut] | None = None  # one job's view: the jobs whose dependency names it
    attempt_list: list[AttemptOut] | None = None
    # One job's view: the signals asked for its runs (corral cancel --signal), sent and dropped, as
    # their events say it, oldest first (the last 20).
    signals: list[SignalEventOut] | None = None
    explanation: dict[str, Any] | None = None
    # A task of a job array: the array's id (its first task's job id), the task's id, the array's
    # spec as submitted (corral submit --array) and its throttle now (None: no limit).
    array_job_id: int | None = None
    array_task_id: int | None = None
    array: str | None = None
    array_throttle: int | None = None


class NodeOut(BaseModel):
    id: str
    instance_id: str | None
    instance_type: str
    state: str
    created_at: float
    age: float
    idle_for: float | None
    running: int
    price_per_hour: float
    resources: ResourcesOut
    used_vcpus: float
    used_ram_mib: int
    last_ping_at: float | None
    reason: str
    # A booting node not paired yet, or a live one whose agent went quiet: when corral gives it up
    # (corral.core.lifecycle.outlook); '' while it hears from it as it should.
    outlook: str = ""
    attributes: dict[str, str | list[str]] = Field(default_factory=dict)
    rack: str = ""
    # The dispatcher that booted it, whose cloud holds its instance (None: booted before migration 0002).
    dispatcher_id: str | None = None
    # Where its instance runs: the availability zone, and "spot" or "on-demand" (None: the cloud has
    # no such thing, loopback, or has not said yet).
    zone: str | None = None
    market: str | None = None
    # The corral version of its agent, as told at pairing or its latest resume (None: not paired, or
    # an agent of a corral that did not tell).
    agent_version: str | None = None


class NodeChangedOut(NodeOut):
    """A node as an operator's change left it, and what in the change will not do what it seems
    to (a category nothing reads)."""

    warnings: list[str] = Field(default_factory=list)


class EventOut(BaseModel):
    id: int
    at: float
    kind: str
    job_id: int | None
    node_id: str | None
    message: str


class NotifyRuleOut(BaseModel):
    name: str
    on: list[str]
    action: str  # "command PROGRAM", "webhook SCHEME://HOST/…" (a hook's path may hold its secret), "log"
    rearm: float
    rearm_per: str
    threshold: int | None
    window: float


class QuietOut(BaseModel):
    """A subject a rule fired for, and not again before `until` (its rearm)."""

    rule: str
    subject: str
    fired_at: float
    until: float
    suppressed: int  # matching events since, not notified


class RetryOut(BaseModel):
    """A notification whose action failed (or a stop left unsent), to be tried again at `due`."""

    rule: str
    event_id: int
    kind: str
    job_id: int | None
    node_id: str | None
    tries: int  # failed tries so far
    due: float
    error: str  # the last failure


class NotifyStatusOut(BaseModel):
    rules: list[NotifyRuleOut]  # the running corral's [[notify]] rules
    last_event_id: int | None  # the last event the notifier handled; None: it has never run
    moved_at: float | None
    newest_event_id: int
    waiting: int | None  # events after the cursor: handled after the next pass (500 a pass)
    quiet: list[QuietOut]
    threshold_counts: dict[str, int]  # threshold rule -> its events within its window now
    retrying: list[RetryOut] = []  # failed actions waiting for their next try, soonest first
    sending: int = 0  # handed to a dispatcher's worker, their action not run yet (sent again after a crash)


class RetentionOut(BaseModel):
    """What a retention sweep would delete now (`corral retention`), by the running corral's
    [retention] or the values asked for; a kind whose setting is unset is kept (None)."""

    configured: bool  # whether the running corral's [retention] deletes anything
    interval: float
    jobs_after: float | None
    output_after: float | None
    events_after: float | None
    jobs_ended: int | None  # ended before jobs_after ago
    jobs: int | None  # of those, deleted (the others are kept for an open dependent or their array)
    outputs: int | None  # jobs whose output this dispatcher holds and would delete
    events: int | None


class NotifySkipBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    to: DbInt | None = Field(
        None, ge=0, description="the event the notifier is to have handled last; default: the newest"
    )


class NotifySkipOut(BaseModel):
    was: int | None  # where the cursor was (None: the notifier had not run)
    to: int


# ---- agent protocol ---------------------------------------------------------------------------


class CapacityIn(Inbound):
    vcpus: Float = Field(gt=0)
    ram_mib: Int = Field(gt=0, le=DB_INT_MAX)
    scratch_mib: Int = Field(0, ge=0, le=DB_INT_MAX)
    gpus: Int = Field(0, ge=0, le=DB_INT_MAX)


class AgentVersionIn(Inbound):
    """Which agent speaks: its corral version and the agent protocol it speaks (corral.AGENT_PROTOCOL).
    An agent of a corral before these were told sends neither: protocol 1, version unknown."""

    agent_version: str | None = Field(None, max_length=32)
    protocol: DbInt = 1


class PairBody(AgentVersionIn):
    node_id: str
    boot_token: str
    capacity: CapacityIn
    work_dir_free_mib: Int | None = Field(None, ge=0, le=DB_INT_MAX)  # what the agent's work dir has free
    hostname: str = ""
    pid: DbInt | None = None


class HealthCheckOut(BaseModel):
    """The check the agent runs (health_check in the config): `command` every `interval` seconds."""

    command: list[str]
    interval: float
    timeout: float


class ContainersOut(BaseModel):
    """The container engine that runs jobs with an image ([containers] in the config)."""

    program: list[str]
    run_args: list[str]


class PairResult(BaseModel):
    node_id: str
    secret: str
    ping_interval: float
    health_check: HealthCheckOut | None = None  # None: no check
    containers: ContainersOut


class ResumeBody(AgentVersionIn):
    """A paired node's agent started again, with the secret it saved at pairing (the bearer)."""

    node_id: str
    hostname: str = ""
    pid: DbInt | None = None
    # The attempts the new agent runs on (none today: what the dead agent ran died with it, or
    # the new one stopped it); every other running attempt of the node is lost.
    running: list[DbInt] = Field(default_factory=list, max_length=MAX_AGENT_LIST)


class ResumeResult(BaseModel):
    node_id: str
    ping_interval: float
    health_check: HealthCheckOut | None = None
    containers: ContainersOut
    lost: list[int]  # the attempts the restart lost, each ended as on a lost node
    # Bytes of output stored for each run the agent re-adopted, by attempt id: it ships from there on.
    output_stored: dict[int, int] = {}
    # The same of the stderr of those runs whose job keeps it apart (separate_stderr).
    stderr_stored: dict[int, int] = {}


class UsedIn(Inbound):
    vcpus: Float = 0.0
    ram_mib: DbInt = 0


MAX_EXIT_REASON = 5000  # characters of an agent's word on an exit (a path is at most 4096 bytes)


# A signal's number as the agent reports one (Linux's go to 64, SIGRTMAX).
MAX_SIGNAL = 128


class FinishedIn(Inbound):
    attempt_id: DbInt
    exit_code: DbInt
    # The signal that killed the command (its exit_code is then 128+N). None: it exited, or the agent
    # is of a corral before exit_signal, which does not say (its report is read as before).
    exit_signal: Int | None = Field(None, ge=1, le=MAX_SIGNAL)
    finished_at: Float | None = None
    # The agent ended it at its time limit itself (the server was not there to): a TIMEOUT.
    timed_out: bool = False
    # Why the command never ran, as the agent saw it ("chdir to /x failed: ..."): for the job's reason.
    reason: str = Field("", max_length=MAX_EXIT_REASON)
    # What the run used: its CPU seconds and peak RSS. None: not known (an agent of a corral before
    # them sends neither; the agent measured nothing).
    cpu_seconds: Float | None = Field(None, ge=0)
    max_rss_mib: DbInt | None = Field(None, ge=0)


class InterruptionIn(Inbound):
    """The cloud's notice that it takes the instance back (EC2's spot/instance-action)."""

    action: str = Field(max_length=64)  # terminate, stop or hibernate
    time: str = Field(max_length=64)  # when, as the cloud wrote it


class HealthIn(Inbound):
    """The agent's latest health check: passed or not, and its word (the first line it printed)."""

    ok: bool = Field(strict=True)
    message: str = Field("", max_length=500)


class SignalledIn(Inbound):
    """A signal request the agent acted on: `to` what it was sent (its process group, its main
    process, a container); None: it found no process to send it to (the run had just ended)."""

    id: DbInt
    to: str | None = Field(None, max_length=200)


class SignalRequestOut(BaseModel):
    """A signal to send a running attempt now (`corral cancel --signal`), once: `id` is said back in
    the next ping's `signalled`; until then it is in every answer."""

    id: int
    attempt_id: int
    number: int
    main_only: bool  # its main process alone (scancel --batch); false: its process group


class PingBody(Inbound):
    running: list[DbInt] = Field(default_factory=list, max_length=MAX_AGENT_LIST)
    finished: list[FinishedIn] = Field(default_factory=list, max_length=MAX_AGENT_LIST)
    used: UsedIn = Field(default_factory=UsedIn)
    interruption: InterruptionIn | None = None
    health: HealthIn | None = None  # None: no check has run (or none is configured)
    # The signal requests (PingResult.signals) the agent has sent since its last ping answered.
    signalled: list[SignalledIn] = Field(default_factory=list, max_length=MAX_AGENT_LIST)


class PingResult(BaseModel):
    kill: list[int]
    ack: list[int]
    shutdown: bool
    # For each running attempt still wanted: the seconds of run after which corral ends it (its
    # job's time limit plus policy.dispatch.time_limit_grace; None: never), as they stand now.
    time_limits: dict[int, float | None] = {}
    # Signals to send running attempts (an agent of a corral before them ignores the field).
    signals: list[SignalRequestOut] = []


class StartedBody(Inbound):
    pid: DbInt
    # When the agent started it: a report held back by a server outage is not the start.
    started_at: Float | None = None


class FinishedBody(Inbound):
    exit_code: DbInt
    exit_signal: Int | None = Field(None, ge=1, le=MAX_SIGNAL)  # as FinishedIn's
    finished_at: Float | None = None
    timed_out: bool = False  # as FinishedIn's
    reason: str = Field("", max_length=MAX_EXIT_REASON)  # as FinishedIn's
    cpu_seconds: Float | None = Field(None, ge=0)  # as FinishedIn's
    max_rss_mib: DbInt | None = Field(None, ge=0)  # as FinishedIn's


class SignalOut(BaseModel):
    """sbatch's --signal as an agent acts on it: send `number` once the run has `before` seconds
    left of the work item's `time_limit` (at its start if it has fewer)."""

    number: int
    # Seconds before the work item's time_limit, which holds policy.dispatch.time_limit_grace: the
    # job's own TIME plus that grace, so that the signal goes TIME seconds before the job's time limit.
    before: float
    main_only: bool = False  # sbatch's B: its main process alone (else its process group)


class WorkItemOut(BaseModel):
    attempt_id: int
    job_id: int
    command: list[str]
    image: str | None = None  # run the command in this container image
    # Run the command in this directory (None: the attempt's own). Only to an agent that says it
    # knows the field (the work request's `knows`): an older one would run the job elsewhere.
    chdir: str | None = None
    # Send the command's stderr as a stream of its own (the log chunk's `stream=stderr`), not in its
    # output. Only to an agent that says it knows the field: an older one would mix the two.
    separate_stderr: bool = False
    # A batch script's text: written to the attempt's directory under its name (the command's first
    # word) and run with the command's other words. Only to an agent that says it knows the field:
    # an older one would run `job.sh` as a program the node does not have.
    script: str | None = None
    # A signal to send before the time limit (sbatch's --signal). Only to an agent that says it knows
    # the field: an older one would never send it, and the job would lose its checkpoint.
    signal: SignalOut | None = None
    env: dict[str, str]
    node_ids: list[str]
    resources: ResourcesOut
    # Seconds of run after which corral ends it (time limit plus grace; None: never): the agent
    # ends it itself if the server has not by then, as slurmstepd enforces a step's limit locally.
    time_limit: float | None = None


class WorkOut(BaseModel):
    attempts: list[WorkItemOut]


class FleetTypeOut(BaseModel):
    instance_type: str
    nodes: int
    price_per_hour: float  # the summed price of those nodes


class BackoffOut(BaseModel):
    instance_type: str
    until: float
    reason: str
    boot_failures: int = 0  # its instances that did not pair, in a row (type.boot_failed)


class DispatcherOut(BaseModel):
    id: str
    host: str
    pid: int | None
    started_at: float
    last_heartbeat: float
    stopped_at: float | None = None  # when it stopped cleanly (None: it runs, or it went silent)
    stale: bool  # silent longer than policy.dispatch.dispatcher_stale: its claims are released


class StatusOut(BaseModel):
    """The whole system at a glance: `corral status`."""

    now: float
    jobs: dict[str, int]  # by state
    held: int
    oldest_wait: float | None  # seconds the longest-waiting job that could run now has waited
    nodes: dict[str, int]  # live nodes by state
    fleet: list[FleetTypeOut]
    cost_per_hour: float
    vcpus: float = 0.0  # what the live nodes hold
    # The fleet limits in force (policy.boot): a boot that would pass one waits.
    max_instances: int = 0
    max_vcpus: float | None = None
    max_cost_per_hour: float | None = None
    # The instance types' own max_instances (instance_types), by type: those that have one.
    type_max_instances: dict[str, int] = {}
    backoffs: list[BackoffOut]  # instance types not tried for now
    # This dispatcher boots no type until then: its last boots failed for no one type's fault (an
    # instance profile, a security group, credentials), the last for `boots_paused_reason`.
    boots_paused_until: float | None = None
    boots_paused_reason: str = ""
    # Paired nodes whose latest health check failed, and how many of them stay in service because
    # too many fail at once (health_check.max_unhealthy).
    failing_checks: int = 0
    failing_checks_in_service: int = 0
    dispatchers: list[DispatcherOut]
    store_id: str = ""  # the store's id, which its instances carry (tag corral-store)


class ShareRowOut(BaseModel):
    """One user's fair-share standing (Slurm's sshare)."""

    user: str
    shares: float
    norm_shares: float  # of all the listed users' shares
    usage: float  # decayed billing-rate seconds (vCPU-seconds with the default weights)
    norm_usage: float  # of all the listed users' usage
    factor: float  # Slurm's classic fair-share factor 2^-(norm_usage / norm_shares)
    queued: int
    running: int  # claimed or running


class ShareOut(BaseModel):
    """`corral share`: each user's standing, the most deserving first, as of the last calc time."""

    order: str  # policy.placement.queue.order: "fairshare" and "multifactor" read the standing
    half_life: float
    calc_time: float  # usage is brought up to date at this time (a multiple of calc_period)
    rows: list[ShareRowOut]


class QueueRowOut(BaseModel):
    """One queued job where the next pass takes it, with its priority factors (Slurm's sprio)."""

    position: int  # 1 first
    id: int
    array_job_id: int | None
    array_task_id: int | None
    name: str
    user: str
    priority: int
    submitted_at: float
    age: float | None  # multifactor: 0 just submitted, 1 at max_age
    fairshare: float | None  # fairshare and multifactor: the user's fair-share factor
    score: float | None  # multifactor: weight_age * age + weight_fairshare * fairshare
    wait_reason: str


class QueueOut(BaseModel):
    """`corral queue`: the queued jobs (not held) in the order the next pass takes them."""

    order: str  # policy.placement.queue.order
    calc_time: float  # ages and usage as of this time (a multiple of fairshare.calc_period)
    weight_age: float | None  # multifactor's weights, under that order
    weight_fairshare: float | None
    max_age: float | None
    queued: int  # all of them; `rows` holds the first `limit`
    rows: list[QueueRowOut]


class UsageRowOut(BaseModel):
    key: str  # the user, tag or job id ("(total)" for the report's total)
    jobs: int
    vcpu_hours: float
    gpu_hours: float
    cost: float  # the share of its nodes' bill its attempts occupied
    attempts: int = Field(description="Its runs in the window (a retried job's each).")
    measured: int = Field(
        description="Of those, the runs whose node (in front of Slurm, corral's batch script: CPU time alone) said"
        " what they used: not a run before store revision 0022, still running, or whose measurement was lost."
        " Only these count in the efficiencies."
    )
    cpu_hours: float = Field(
        description="The CPU time (user and system) the measured runs used in the window, on the node that runs"
        " the command: a run the window cuts is credited the part of its CPU time proportional to its run time"
        " inside (approximate)."
    )
    cpu_efficiency: float | None = Field(
        description="cpu_hours over the measured runs' vcpus asked times their run time in the window (seff's CPU"
        " Efficiency, summed over the runs before dividing, so each weighs its vcpu-hours); above 1 when runs"
        " used more CPUs than they asked. null: no run measured."
    )
    ram_efficiency: float | None = Field(
        description="The measured runs' peak RSS over the RAM they asked (seff's Memory Efficiency), each run"
        " weighed by the RAM-hours it reserved in the window: sum(peak x run time) / sum(asked x run time)."
        " null: no run measured."
    )


class TypeUsageOut(BaseModel):
    instance_type: str
    instances: int
    instance_hours: float
    billed: float
    used: float  # charged to attempts


class UsageOut(BaseModel):
    """What the fleet billed in [since, until), and whose work it ran: `corral usage`."""

    since: float
    until: float  # no later than now
    by: str
    jobs: int
    billed: float
    used: float
    unattributed: float  # idle and booting nodes, and room on busy nodes no job asked for
    rows: list[UsageRowOut]  # the largest cost first
    total: UsageRowOut = Field(
        description="All the window's work, each job and run once (whatever `limit`; a job under several tags once)."
    )
    types: list[TypeUsageOut]


class UserBody(Inbound):
    name: str = Field(description="The user's name: as their login name (letters, digits, _ . -).")
    admin: bool = False

    @field_validator("name")
    @classmethod
    def _a_login_name(cls, name: str) -> str:
        if len(name) > USER_NAME_MAX or not USER_NAME.fullmatch(name):
            raise ValueError(
                f"{name!r} is not a user name: at most {USER_NAME_MAX} of letters, digits, _ . and -,"
                " not starting with a digit, . or -"
            )
        return name


class UserOut(BaseModel):
    name: str
    admin: bool = False
    created_at: float | None = None
    last_used_at: float | None = None


class NewUserOut(UserOut):
    token: str = Field(description="The user's token: shown this once (only its hash is kept).")
    warnings: list[str] = Field(default_factory=list, description="what the operator should know of it")
