"""What a reconcile pass reads (Snapshot) and what it returns (Decisions)."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from corral.core.model import Attempt, Dispatcher, InstanceType, Job, JobState, Node, NodeState

if TYPE_CHECKING:
    from corral.core.index import SnapshotIndex


@dataclass(slots=True)
class Snapshot:
    """The world as the shell last observed it. The core reads it and never mutates it."""

    jobs: Collection[Job]  # every job not yet in a terminal state
    attempts: Collection[Attempt]  # every active attempt (assigned or running)
    nodes: Collection[Node]  # every node not yet gone
    instance_types: list[InstanceType]
    dispatcher_id: str = "local"
    dispatchers: list[Dispatcher] = field(default_factory=list)
    # Capacity back-off (seed 004): instance type name -> time until which it is not tried.
    unavailable_types: dict[str, float] = field(default_factory=dict)
    # Since when the shell has been able to see pings and heartbeats (its start time). Staleness
    # is judged from here, so a restarted server does not declare every agent dead at once.
    observing_since: float = 0.0
    # The same jobs, attempts and nodes grouped for a pass, if the shell keeps them current between
    # passes (the simulator; the live loop's store, Store.load_snapshot, until its next snapshot);
    # None: the pass groups them itself (corral.core.index).
    index: SnapshotIndex | None = None
    # Attempts a pass has already ended (it decided their jobs' fates) before placing: `attempts`
    # leaves them out, and they hold nothing; the index still files them (the shell drops them
    # when it carries the pass out), so a reader of the index leaves them out too.
    ending: frozenset[int] = frozenset()
    # Nodes down now that come back (seed 002 §5.4.5): a fixed fleet's nodes under repair, not
    # among `nodes`. Only backfill reads them, with `placement.queue.node_down_delay` set.
    away: Collection[Node] = ()
    # The end states of finished jobs that queued jobs' dependencies name (corral.core.dependency);
    # the open ones are among `jobs`. Empty when no queued job has a dependency.
    finished: Mapping[int, JobState] = field(default_factory=dict)
    # The tasks' job ids of each job array that a queued job's dependency names as a whole
    # (afternotok on an array, judged on all its tasks); their end states are in `finished`.
    array_tasks: Mapping[int, Sequence[int]] = field(default_factory=dict)
    # Each user's decayed usage as of the last fair-share calc time (corral.core.fairshare), which
    # queue.order = "fairshare" and "multifactor" read; empty under the other orders.
    fairshare_usage: Mapping[str, float] = field(default_factory=dict)
    # Instance types whose instances did not pair within the boot grace, try after try with no
    # pairing of the type since (corral.core.capacity.boot_failed): how many tries, and when the
    # last failed. The back-off each one set is in `unavailable_types`.
    boot_failures: Mapping[str, BootFailures] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BootFailures:
    """An instance type's failed boots in a row: `count` tries whose instances did not pair within
    the boot grace, the last at `last_at`. A pairing of the type ends the row."""

    count: int
    last_at: float


class NodeAction(StrEnum):
    """Seed 000's actions (None is simply the absence of a decision)."""

    START_DRAIN = "START_DRAIN"
    START_SHUTDOWN = "START_SHUTDOWN"


@dataclass(frozen=True, slots=True)
class Placement:
    job_id: int
    node_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Boot:
    instance_type: str
    reason: str


@dataclass(frozen=True, slots=True)
class NodeDecision:
    node_id: str
    action: NodeAction
    reason: str


@dataclass(frozen=True, slots=True)
class NodeMark:
    """A change of a node's recorded state that follows from observation (idle, busy, down)."""

    node_id: str
    state: NodeState
    reason: str = ""


@dataclass(frozen=True, slots=True)
class NodeReserve:
    """A transient failure's reservation (seed 002 §5.4.5, NODEFAILURERESERVETIME): the node, still
    up, takes no new work until `until`; what runs on it is untouched. The shell records it as the
    node's `failure_reserved_until` attribute, which the placement filters read, and as an event."""

    node_id: str
    until: float
    reason: str


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """A job leaves its attempt: back to the queue (with a back-off) or to a terminal state."""

    job_id: int
    state: JobState  # QUEUED (requeue), FAILED, CANCELLED or COMPLETE
    reason: str
    attempt_ids: tuple[int, ...] = ()
    retry_at: float | None = None
    temp_failure: bool = False  # counts against the TempFail budget
    perm_failure: bool = False  # counts against the job's own max_retries
    exit_code: int | None = None
    # The signal that killed the command (exit_code is then 128+N); None: it exited, or not known.
    # Recorded with exit_code, which it goes with.
    exit_signal: int | None = None
    # Requeued held (seed 002 §5.4.6 `hold`): why, as the job's wait reason; "" = not held.
    hold: str = ""
    # Ended past its time limit (FAILED, Slurm's TIMEOUT): its attempts end `timeout`, the event
    # is `job.timeout`.
    timeout: bool = False
    # Requeued by request (QUEUED; Slurm's scontrol requeue): its attempts end cancelled.
    requeued: bool = False
    # Requeued after Slurm preempted it (QUEUED): its attempts end `preempted`, and no failure is
    # counted (Slurm's PreemptMode=REQUEUE requeues without limit).
    preempted: bool = False
    # The node its event names: the lost node of a node failure (a gang's may be any of its
    # nodes); None: the first node of its last attempt, if it has one.
    node_id: str | None = None


@dataclass(frozen=True, slots=True)
class TypeBackoff:
    """An instance of `instance_type` (node `node_id`) did not pair within the boot grace (a broken
    image, an agent install that fails, a security group in the way): besides its shutdown, the
    type is backed off until `until`, as after an insufficient-capacity error (seed 004), its
    `failures`-th failed try in a row. The shell records it in its back-off table (the store's, the
    simulator's) with the row (`BootFailures(failures, now)`), and as an event `type.boot_failed`
    saying `reason`."""

    instance_type: str
    until: float
    failures: int
    node_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Annotation:
    """Seed 001's annotation: why a job waits ("no instance type has 40 GiB RAM")."""

    job_id: int
    wait_reason: str
    unplaceable: bool = False


@dataclass(slots=True)
class PlacementResult:
    """What a placer returns. `reasons` is the one line `corral jobs` shows for a job it could not
    place; `details` holds JSON-able explanations (unplaced jobs) and top scores (placed jobs) for
    `corral explain`."""

    placements: list[Placement] = field(default_factory=list)
    reasons: dict[int, str] = field(default_factory=dict)
    details: dict[int, dict[str, Any]] = field(default_factory=dict)
    # A pass at the next tick could place a job this one left waiting although nothing else
    # happens: a placement came after the job and may open a node for it (the cost gate kept it
    # off a node whose work the placement lengthened; it has strict locality hints), or backfill
    # placed work while it looked at only part of the queue, or after its reservation, which made
    # afresh with that work among what runs holds other nodes or room. Otherwise, with nothing
    # else changed, a later pass leaves every waiting job waiting (capacity only shrinks, time
    # only adds cost) until `revisit_from`.
    revisit: bool = False
    # With backfill's reservation in force: the time from which a pass may find it elsewhere with
    # nothing else changed. Its start; or, once started (work past its time limit is taken to end
    # at the pass's time), the next end of running work on a node it may use: ties among the
    # nodes that fit by then may fall otherwise, and a reserved node's room at the start may grow.
    # Passes before it meet the reservation this pass made, and no more room.
    revisit_from: float = math.inf


@dataclass(slots=True)
class Decisions:
    placements: list[Placement] = field(default_factory=list)
    boots: list[Boot] = field(default_factory=list)
    node_decisions: list[NodeDecision] = field(default_factory=list)
    node_marks: list[NodeMark] = field(default_factory=list)
    job_outcomes: list[JobOutcome] = field(default_factory=list)
    annotations: list[Annotation] = field(default_factory=list)
    node_reservations: list[NodeReserve] = field(default_factory=list)
    type_backoffs: list[TypeBackoff] = field(default_factory=list)
    # Instance types whose row of failed boots a pairing ended: the shell forgets the row (the
    # back-off in force runs its course).
    types_paired: list[str] = field(default_factory=list)
    explanations: dict[int, dict[str, Any]] = field(default_factory=dict)
    revisit: bool = False  # the placer's (PlacementResult.revisit)
    revisit_from: float = math.inf  # the placer's (PlacementResult.revisit_from)

    def empty(self) -> bool:
        return not (
            self.placements
            or self.boots
            or self.node_decisions
            or self.node_marks
            or self.job_outcomes
            or self.annotations
            or self.node_reservations
            or self.type_backoffs
            or self.types_paired
        )
