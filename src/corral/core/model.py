"""The core model: jobs, attempts, nodes, instance types, and their states.

Plain dataclasses, no I/O. Times are float seconds on whatever clock the caller uses (epoch seconds
in the live loop, virtual seconds in the simulator); the core never reads a clock itself.

Seed vocabulary (001, Arvados containers) maps as: Queued -> QUEUED, Locked -> CLAIMED,
Running -> RUNNING, Complete -> COMPLETE, Cancelled -> CANCELLED; corral adds FAILED for a
permanent failure (PermFail) or retries exhausted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BeforeValidator

from corral.core.signals import JobSignal
from corral.core.units import utc_text

if TYPE_CHECKING:
    from corral.core.dependency import Dependency

MiB = 1
GiB = 1024 * MiB


class JobState(StrEnum):
    QUEUED = "queued"
    CLAIMED = "claimed"  # seed 001 "Locked": one dispatcher owns it
    RUNNING = "running"
    COMPLETE = "complete"
    CANCELLED = "cancelled"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        return self in (JobState.COMPLETE, JobState.CANCELLED, JobState.FAILED)


class AttemptState(StrEnum):
    ASSIGNED = "assigned"  # placed on nodes, the agent has not started it yet
    RUNNING = "running"
    EXITED = "exited"  # the command ended; exit_code says how
    TEMPFAIL = "tempfail"  # infrastructure failure: node lost, never started, dispatcher died
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"  # ended by corral past its job's time limit (Slurm's TIMEOUT)
    PREEMPTED = "preempted"  # Slurm preempted it for higher-priority work: not a failure

    @property
    def active(self) -> bool:
        return self in (AttemptState.ASSIGNED, AttemptState.RUNNING)


class NodeState(StrEnum):
    """What corral's record says about an instance. The lifecycle policy derives the seed-000
    worker state (unpaired / busy / idle / down) from this plus ping freshness."""

    BOOTING = "booting"  # the cloud has it, no agent has paired yet
    IDLE = "idle"
    BUSY = "busy"
    DRAINING = "draining"  # START_DRAIN: takes no new work; once empty it reads as down
    DOWN = "down"  # failed, stale, or drained and empty
    SHUTTING_DOWN = "shutting_down"
    GONE = "gone"  # the cloud no longer has it

    @property
    def live(self) -> bool:
        return self not in (NodeState.SHUTTING_DOWN, NodeState.GONE)


# Seed 002 §5.4.6 (Moab's JOBACTIONONNODEFAILURE / RESFAILPOLICY): what the loss of a node does to
# the job whose attempt ran on it. `requeue` is a temporary failure retried with back-off (seed 001,
# corral's default); `cancel` ends the job cancelled; `hold` requeues it held, for an operator to
# release. Moab's `ignore`, `notify` and `migrate` are not offered (NOT_OFFERED says why).
NodeFailureAction = Literal["requeue", "cancel", "hold"]
NODE_FAILURE_ACTIONS: tuple[NodeFailureAction, ...] = ("requeue", "cancel", "hold")
NOT_OFFERED = {
    "ignore": "a lost node is shut down, so its job cannot go on running there",
    "notify": "a lost node is shut down, so its job cannot go on running there (every loss is an event)",
    "migrate": "corral cannot move a running job to another node: that needs checkpointing",
}


def node_failure_action(value: Any) -> Any:
    """A node-failure action as written by a user (any case, Moab writes CANCEL), or an error that
    names the value and what is offered."""
    if not isinstance(value, str):
        return value
    action = value.strip().lower()
    if action in NODE_FAILURE_ACTIONS:
        return action
    offered = ", ".join(NODE_FAILURE_ACTIONS)
    if action.rstrip("*") in NODE_FAILURE_ACTIONS:
        raise ValueError(
            f"{value!r}: a trailing '*' (act only when the first node fails) is not offered: a gang's attempt"
            f" is lost with any of its nodes; use {offered}"
        )
    if action in NOT_OFFERED:
        raise ValueError(f"{value!r} is not offered: {NOT_OFFERED[action]}; use {offered}")
    raise ValueError(f"unknown action {value!r}; use {offered}")


# As a pydantic field (a job's on_node_failure, the policy's default).
OnNodeFailure = Annotated[NodeFailureAction, BeforeValidator(node_failure_action)]


@dataclass(frozen=True, slots=True)
class Resources:
    vcpus: float = 1.0
    ram_mib: int = 1 * GiB
    scratch_mib: int = 0
    gpus: int = 0

    def fits_in(self, other: Resources) -> bool:
        return (
            self.vcpus <= other.vcpus + 1e-9
            and self.ram_mib <= other.ram_mib
            and self.scratch_mib <= other.scratch_mib
            and self.gpus <= other.gpus
        )

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.vcpus + other.vcpus,
            self.ram_mib + other.ram_mib,
            self.scratch_mib + other.scratch_mib,
            self.gpus + other.gpus,
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            self.vcpus - other.vcpus,
            self.ram_mib - other.ram_mib,
            self.scratch_mib - other.scratch_mib,
            self.gpus - other.gpus,
        )

    def describe(self) -> str:
        parts = [f"{self.vcpus:g} vcpu", f"{self.ram_mib / GiB:g} GiB RAM"]
        if self.scratch_mib:
            parts.append(f"{self.scratch_mib / GiB:g} GiB scratch")
        if self.gpus:
            parts.append(f"{self.gpus} GPU")
        return ", ".join(parts)


ZERO = Resources(0.0, 0, 0, 0)


@dataclass(frozen=True, slots=True)
class InstanceType:
    name: str
    vcpus: float
    ram_mib: int
    price_per_hour: float
    scratch_mib: int = 100 * GiB
    gpus: int = 0
    # Billing: per-second with a minimum (AWS today) is billing_granularity=1, billing_minimum=60;
    # per-hour billing (the seed-000 era) is billing_granularity=3600.
    billing_granularity: float = 1.0
    billing_minimum: float = 60.0
    attributes: tuple[tuple[str, str], ...] = ()
    # At most this many live instances of the type (booting, up, draining; None: no cap of its own),
    # as a quota or a budget per type says (Karpenter's NodePool limits): the boot planner's.
    max_instances: int | None = None
    capacity: Resources = field(init=False, compare=False, repr=False)  # read for every job in a pass

    def __post_init__(self) -> None:
        object.__setattr__(self, "capacity", Resources(self.vcpus, self.ram_mib, self.scratch_mib, self.gpus))


@dataclass(slots=True)
class LocalityHints:
    """Seed 003: provision near to / away from other jobs, by job id or tag. `far` wins over `near`."""

    near: tuple[str, ...] = ()  # job ids ("123") or tags ("tag:web")
    far: tuple[str, ...] = ()
    strict: bool = False
    level: str = "server"  # "server" or "rack"


@dataclass(frozen=True, slots=True)
class ArrayTask:
    """A job's place in a job array (Slurm's `sbatch --array`, corral.core.job_array): the array's
    id (its first task's job id, Slurm's SLURM_ARRAY_JOB_ID), this task's id, and the array's task
    count, lowest and highest task id."""

    array_job_id: int
    task_id: int
    count: int
    first: int
    last: int

    def __str__(self) -> str:
        return f"{self.array_job_id}_{self.task_id}"  # as Slurm shows a task


@dataclass(slots=True)
class Job:
    id: int
    command: list[str]
    resources: Resources = field(default_factory=Resources)
    name: str = ""
    env: dict[str, str] = field(default_factory=dict)
    chdir: str | None = None  # the directory the command runs in on the node (None: the attempt's own)
    separate_stderr: bool = False  # its stderr kept as a stream of its own (Slurm's --error), not in its output
    # Its command is a batch script's name and arguments, the script's text in its spec: read only
    # where it is run (an agent's work item, an sbatch), never held by a pass.
    batch_script: bool = False
    node_count: int = 1  # a gang: this many nodes, each with `resources`, started together
    priority: int = 1  # 0 means cancel (seed 001)
    not_before: float | None = None  # "wait until time X"
    # Seconds: backfill plans with it, and a run past it (plus policy.dispatch.time_limit_grace) is ended.
    time_limit: float | None = None
    # sbatch's --signal: sent this long before the time limit (to checkpoint); read where the job is
    # run (an agent's work item, an sbatch), never by placement.
    signal: JobSignal | None = None
    max_retries: int = 0  # extra tries after a non-zero exit (PermFail) ; TempFail has its own budget
    tags: tuple[str, ...] = ()
    locality: LocalityHints | None = None
    traits: dict[str, str | list[str]] = field(default_factory=dict)  # required node traits
    user: str = ""
    state: JobState = JobState.QUEUED
    submitted_at: float = 0.0
    claimed_by: str | None = None  # dispatcher id holding the claim
    retry_at: float | None = None  # back-off: not before this time after a TempFail
    temp_failures: int = 0
    perm_failures: int = 0
    attempt_count: int = 0
    exit_code: int | None = None
    # The signal that ended its last run (exit_code then reads 128+N, as ever); None: it exited.
    exit_signal: int | None = None
    wait_reason: str = ""
    unplaceable: bool = False
    cancel_requested: bool = False
    requeue_requested: bool = False  # stop the run and queue the job again (Slurm's scontrol requeue)
    requeue_hold: bool = False  # and hold it (Slurm's scontrol requeuehold)
    started_at: float | None = None
    finished_at: float | None = None
    # Placement constraints read by corral.placement (docs/placement.md).
    forbidden_traits: dict[str, str | list[str]] = field(default_factory=dict)  # node values to avoid
    min_platform: str | None = None  # the node's `platform` attribute must be at least this version
    cpu_capped: bool = False  # capness: capped and uncapped jobs do not share a node
    exclusive: bool = False  # Slurm's --exclusive: runs alone on each of its nodes
    reservation: str = ""  # may use nodes held by this admin reservation
    # Seed 002 §5.4.6 at the job level (None: the system's, policy.retry.on_node_failure).
    on_node_failure: NodeFailureAction | None = None
    # Held (Slurm's `scontrol hold`): queued, but neither placed nor booted for until released.
    held: bool = False
    # Slurm's --dependency: not eligible until the jobs it names got far enough (corral.core.dependency).
    dependency: Dependency | None = None
    # A task of a job array, and the array's throttle: at most this many of its tasks claimed or
    # running at once (None: no limit). The throttle can change after submission (corral throttle).
    array: ArrayTask | None = None
    array_throttle: int | None = None

    def eligible_at(self) -> float:
        return max(self.not_before or 0.0, self.retry_at or 0.0)

    def not_yet_reason(self) -> str:
        """Why it waits while not eligible yet, and until when (UTC: a stored reason is read anywhere)."""
        until = utc_text(self.eligible_at())
        if (self.not_before or 0.0) >= (self.retry_at or 0.0):
            return f"not before its requested start, {until}"
        return f"back-off after a temporary failure, until {until}"

    def queue_key(self) -> tuple[int, float, int]:
        """Its place in the queue's own order: highest priority first, then oldest submission."""
        return (-self.priority, self.submitted_at, self.id)


@dataclass(slots=True)
class Attempt:
    id: int
    job_id: int
    node_ids: list[str]  # first one runs the command; the rest are the gang's other nodes
    resources: Resources  # per node
    state: AttemptState = AttemptState.ASSIGNED
    dispatcher_id: str | None = None
    assigned_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    exit_signal: int | None = None  # the signal that killed its command (exit_code: 128+N); None: it exited
    reason: str = ""


@dataclass(slots=True)
class Node:
    id: str
    instance_type: str
    capacity: Resources
    price_per_hour: float
    state: NodeState = NodeState.BOOTING
    created_at: float = 0.0  # when the boot was requested
    paired_at: float | None = None
    last_ping_at: float | None = None
    state_changed_at: float = 0.0  # for the idle grace: time of the last change into IDLE
    # Measured load reported by the agent (UTILIZED availability, seed 002 §5.4.1).
    used: Resources = ZERO
    used_at: float | None = None  # when `used` was measured; attempts assigned later are not in it yet
    attributes: dict[str, str | list[str]] = field(default_factory=dict)
    rack: str = ""
    reason: str = ""  # why it is down / draining
    billing_granularity: float = 1.0
    billing_minimum: float = 60.0


@dataclass(frozen=True, slots=True)
class Dispatcher:
    id: str
    last_heartbeat: float
    stopped: bool = False  # it stopped cleanly (its stop released its claims and said so)
    judged_stale: bool = False  # a peer judged it silent and said so (event dispatcher.stale)


def legal_job_transitions() -> dict[JobState, frozenset[JobState]]:
    """The state machine as data: anything not listed here is refused by the store."""
    Q, C, R = JobState.QUEUED, JobState.CLAIMED, JobState.RUNNING
    return {
        Q: frozenset({C, JobState.CANCELLED, JobState.FAILED}),
        C: frozenset({Q, R, JobState.CANCELLED, JobState.FAILED, JobState.COMPLETE}),
        R: frozenset({Q, JobState.COMPLETE, JobState.CANCELLED, JobState.FAILED}),
        JobState.COMPLETE: frozenset(),
        JobState.CANCELLED: frozenset(),
        JobState.FAILED: frozenset(),
    }


JOB_TRANSITIONS = legal_job_transitions()


class IllegalTransition(ValueError):
    pass


def check_job_transition(old: JobState, new: JobState) -> None:
    if new not in JOB_TRANSITIONS[old]:
        raise IllegalTransition(f"job cannot go from {old} to {new}")
