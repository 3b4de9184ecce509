"""The groupings of a snapshot that a reconcile pass looks things up in.

A pass needs more than the snapshot's flat lists: the queued jobs, the jobs to cancel, the active
attempts and how many hold each node, the nodes by state, the schedulable nodes that hold no work.
The simulator changes its world a piece at a time and keeps one index current by filing each job,
attempt and node again after it changes it (`put_*`, `drop_*`), so that a pass costs what changed
rather than the size of the fleet and the queue. The live loop's store reads a whole new snapshot
each pass, and keeps one index too, filing the jobs, attempts and nodes whose rows changed since
its last snapshot (corral.store.store.Store.load_snapshot); a snapshot without one is indexed
afresh (`of`). Both passes read the same groupings, in the same
order: `plan_pass` has one implementation.

Orders are those of the snapshot's lists: a node or job keeps the place it was first filed at until
it is dropped (as a shell's insertion-ordered dict would), so decisions come out in the same order
whichever way the index was made.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from typing import Any, Generic, TypeVar

from corral.core import drain
from corral.core.model import Attempt, AttemptState, Job, JobState, Node, NodeState
from corral.core.snapshot import Snapshot

SCHEDULABLE = frozenset((NodeState.IDLE, NodeState.BUSY))
JOURNAL_KEPT = 1 << 16

T = TypeVar("T")


class AttemptsLeft(Mapping[int, Attempt]):
    """Attempts by id without some of them (those a pass ended), read in place: a pass that ends
    a job hands the placer these, and seldom has every attempt read."""

    def __init__(self, attempts: Mapping[int, Attempt], left_out: AbstractSet[int]) -> None:
        self._attempts, self._left_out = attempts, left_out

    def __getitem__(self, attempt_id: int) -> Attempt:
        if attempt_id in self._left_out:
            raise KeyError(attempt_id)
        return self._attempts[attempt_id]

    def __contains__(self, attempt_id: object) -> bool:
        return attempt_id not in self._left_out and attempt_id in self._attempts

    def __iter__(self) -> Iterator[int]:
        left_out = self._left_out
        return (i for i in self._attempts if i not in left_out)

    def __len__(self) -> int:
        return len(self._attempts) - sum(1 for i in self._left_out if i in self._attempts)


class Journal(Generic[T]):
    """Every id filed or dropped, in order, addressed by position; the older half is forgotten
    past 2 x JOURNAL_KEPT entries."""

    def __init__(self) -> None:
        self._entries: list[T] = []
        self._start = 0  # the position of _entries[0]

    def append(self, entry: T) -> None:
        entries = self._entries
        entries.append(entry)
        if len(entries) > 2 * JOURNAL_KEPT:
            del entries[:JOURNAL_KEPT]
            self._start += JOURNAL_KEPT

    @property
    def end(self) -> int:
        """The position after the last entry."""
        return self._start + len(self._entries)

    def since(self, position: int) -> list[T] | None:
        """The entries from `position` on (an id may be listed more than once, or be unchanged);
        None if the journal no longer reaches back that far."""
        if position < self._start:
            return None
        return self._entries[position - self._start :]


class SnapshotIndex:
    """Every open job, active attempt and node of a snapshot, grouped as `plan_pass` reads them.
    `silent` is None when the shell does not know which nodes pinged (every node may be stale);
    a shell that tracks pings keeps there the nodes it has not heard from, and promises that it
    heard from every other node at the time of the pass (a pass reads them so, whatever their
    `last_ping_at` says: the shell need not write it every pass).

    `schedulable()` is the same list object, and `fleet_version` the same number, for as long as
    no node joins or leaves the idle and busy states and none is filed as reshaped (its capacity,
    price, rack or attributes changed): a placer may keep what it worked out from the list."""

    def __init__(self, *, track_pings: bool = False) -> None:
        self.jobs: dict[int, Job] = {}
        self.queued: dict[int, Job] = {}  # not held
        # Each queued job's place in queue order as filed (see `in_queue_order`), and whether
        # `queued` holds them in that order: jobs mostly join the queue in it, at the end.
        self._queue_keys: dict[int, tuple[int, float, int]] = {}
        self._queue_in_order = True
        # Priority 0, a cancel or a requeue request: the pass cancels or requeues them.
        self.flagged: dict[int, Job] = {}
        # Queued but held (until an operator releases them): out of `queued` and `deferred`, so
        # that no pass places them, boots for them or makes them a backfill reservation.
        self.held: dict[int, Job] = {}
        # Queued jobs (held or not) with a dependency: a pass judges them (corral.core.dependency).
        self.dependent: dict[int, Job] = {}
        # The open tasks (queued, claimed, running) of each job array with a throttle, by array id:
        # a pass counts those that run against the throttle (corral.core.job_array).
        self.throttled_arrays: dict[int, dict[int, Job]] = {}
        # Queued jobs with a requested start or a retry back-off: the only ones that may not be
        # eligible yet (the others are from time 0 on).
        self.deferred: dict[int, Job] = {}
        self.attempts: dict[int, Attempt] = {}  # active (assigned or running)
        self.assigned: dict[int, Attempt] = {}
        self.work: dict[str, int] = {}  # node id -> active attempts on it (ids of gone nodes too)
        # Running attempts whose job has a time limit: when each reaches it (start + limit). A
        # heap of (time, attempt id) with lazy deletion (an entry whose attempt has since been
        # dropped, or filed with another time, is skipped and popped when it comes to the top), so
        # that a pass with no limit due looks at one entry; `_limit_at` holds the valid times.
        self.limits: list[tuple[float, int]] = []
        self._limit_at: dict[int, float] = {}
        self.job_attempts: dict[int, dict[int, None]] = {}  # job id -> its active attempts' ids, in order
        self.nodes: dict[str, Node] = {}
        self.by_state: dict[NodeState, dict[str, Node]] = {state: {} for state in NodeState}
        self.unworked: dict[str, Node] = {}  # idle or busy nodes that no active attempt holds
        self.busy_unworked: dict[str, Node] = {}  # of those, the ones marked busy
        self.idle_working: dict[str, Node] = {}  # nodes marked idle that an active attempt holds
        self.orphaned: set[str] = set()  # ids in `work` of nodes not (or no longer) filed
        # Idle or busy nodes that leave service once empty (corral.core.drain.leaving: a
        # seed-002 failure category or an operator's drain): a pass looks at them whatever their
        # state, to shut them down once empty (or at once, drained `now`).
        self.leaving: dict[str, Node] = {}
        self.silent: dict[str, Node] | None = {} if track_pings else None
        self.job_order: dict[int, int] = {}
        self.node_order: dict[str, int] = {}
        self._filed_state: dict[str, NodeState] = {}
        self._counted: dict[int, tuple[str, ...]] = {}  # attempt id -> the node ids it is counted on
        self._sequence = 0
        self.fleet_version = 0
        # Every node filed or dropped, and how many times a node was filed as reshaped.
        self.node_journal: Journal[str] = Journal()
        self.reshaped = 0
        # Bumped whenever a node filed brings a new measurement (`used`, `used_at`), or comes or goes.
        self.measured_version = 0
        self._measured: dict[str, tuple[object, float | None]] = {}
        # Every attempt filed or dropped.
        self.attempt_journal: Journal[int] = Journal()
        self._schedulable: list[Node] | None = None
        # The idle and busy nodes in filing order, kept as they are filed, and their filing numbers
        # (ascending): `schedulable()` copies them, not the whole fleet's, when the list changed.
        self._schedulable_nodes: list[Node] = []
        self._schedulable_orders: list[int] = []

    @classmethod
    def of(cls, snapshot: Snapshot) -> SnapshotIndex:
        index = cls()
        for job in snapshot.jobs:
            index.put_job(job)
        for attempt in snapshot.attempts:
            index.put_attempt(attempt)
        for node in snapshot.nodes:
            index.put_node(node)
        return index

    # ---- filing ------------------------------------------------------------------------------

    def _next(self) -> int:
        self._sequence += 1
        return self._sequence

    def put_job(self, job: Job) -> None:
        """File a job that is new or has changed (its state, priority, cancel request, requested
        start, back-off or hold)."""
        job_id = job.id
        if job_id not in self.jobs:
            self.job_order[job_id] = self._next()
        self.jobs[job_id] = job
        queued = job.state is JobState.QUEUED
        if queued and job.held:
            self.held[job_id] = job
            queued = False
        elif self.held:  # (seldom any: no call for the many puts of a pass)
            self.held.pop(job_id, None)
        if queued:
            self._file_queued(job)
        elif job_id in self.queued:
            del self.queued[job_id]
            del self._queue_keys[job_id]
        _place(self.deferred, job_id, job, queued and (job.not_before is not None or job.retry_at is not None))
        _place(self.flagged, job_id, job, job.priority == 0 or job.cancel_requested or job.requeue_requested)
        if job.dependency is not None or job_id in self.dependent:  # (`corral update` may drop one)
            _place(self.dependent, job_id, job, job.dependency is not None and job.state is JobState.QUEUED)
        if job.array is not None:  # (nor does its array: no call for the others)
            self._file_task(job, bool(job.array_throttle) and not job.state.terminal)

    def _file_task(self, job: Job, member: bool) -> None:
        assert job.array is not None
        array_id = job.array.array_job_id
        tasks = self.throttled_arrays.get(array_id)
        if member:
            if tasks is None:
                tasks = self.throttled_arrays[array_id] = {}
            tasks[job.id] = job
        elif tasks is not None:
            tasks.pop(job.id, None)
            if not tasks:
                del self.throttled_arrays[array_id]

    def _file_queued(self, job: Job) -> None:
        key = job.queue_key()
        filed = self._queue_keys.get(job.id)
        if filed is None:
            # A newcomer goes at the end of `queued`: in order if it comes after the last job there.
            if self.queued and key < self._queue_keys[next(reversed(self.queued))]:
                self._queue_in_order = False
        elif filed != key:
            self._queue_in_order = False  # its priority (or submission) changed where it stands
        self._queue_keys[job.id] = key
        self.queued[job.id] = job

    def drop_job(self, job_id: int) -> None:
        job = self.jobs.get(job_id)
        if job is not None and job.array is not None:
            self._file_task(job, False)
        for group in (
            self.jobs,
            self.queued,
            self._queue_keys,
            self.deferred,
            self.flagged,
            self.held,
            self.dependent,
            self.job_order,
        ):
            group.pop(job_id, None)

    def in_queue_order(self) -> list[Job]:
        """The queued jobs in queue order: highest priority first, then oldest submission, then
        lowest id. Sorted only when a job came in out of order or changed its place; `queued` is
        then filed again in that order."""
        if not self._queue_in_order:
            keys = self._queue_keys
            self.queued = {job_id: self.queued[job_id] for job_id in sorted(self.queued, key=keys.__getitem__)}
            self._queue_in_order = True
        return list(self.queued.values())

    def put_attempt(self, attempt: Attempt) -> None:
        """File an attempt that is new or has changed state (one no longer active is dropped)."""
        if attempt.state not in _ACTIVE:
            self.drop_attempt(attempt.id)
            return
        attempt_id = attempt.id
        self.attempt_journal.append(attempt_id)
        self.attempts[attempt_id] = attempt
        _place(self.assigned, attempt_id, attempt, attempt.state is AttemptState.ASSIGNED)
        started = attempt.started_at
        at: float | None = None
        if started is not None and attempt.state is AttemptState.RUNNING:
            job = self.jobs.get(attempt.job_id)
            if job is not None and job.time_limit is not None:
                at = started + job.time_limit
        # Filed again after its job's limit changed (`corral update`) or its job left: its entry
        # in the heap follows (an entry left behind is skipped, as a dropped attempt's).
        if at is None:
            if self._limit_at:
                self._limit_at.pop(attempt_id, None)
        elif self._limit_at.get(attempt_id) != at:
            self._limit_at[attempt_id] = at
            heapq.heappush(self.limits, (at, attempt_id))
        if attempt_id not in self._counted:
            counted = self._counted[attempt_id] = tuple(attempt.node_ids)
            self.job_attempts.setdefault(attempt.job_id, {})[attempt_id] = None
            work = self.work
            for node_id in counted:
                held = work[node_id] = work.get(node_id, 0) + 1
                if held == 1:
                    self._classify(node_id)

    def drop_attempt(self, attempt_id: int) -> None:
        self.attempt_journal.append(attempt_id)
        if self._limit_at.pop(attempt_id, None) is not None and len(self.limits) > 2 * len(self._limit_at) + 64:
            # Mostly dropped attempts' entries (jobs that ended well within their limits): rebuilt.
            self.limits = [(at, i) for i, at in self._limit_at.items()]
            heapq.heapify(self.limits)
        attempt = self.attempts.pop(attempt_id, None)
        self.assigned.pop(attempt_id, None)
        counted = self._counted.pop(attempt_id, ())
        if attempt is not None and counted:
            listed = self.job_attempts[attempt.job_id]
            del listed[attempt_id]
            if not listed:
                del self.job_attempts[attempt.job_id]
        work = self.work
        for node_id in counted:
            left = work[node_id] - 1
            if left:
                work[node_id] = left
                continue
            del work[node_id]
            self._classify(node_id)

    def put_node(self, node: Node, *, reshaped: bool = False) -> None:
        """File a node that is new or has changed state; `reshaped`: its capacity, price, rack or
        attributes changed."""
        node_id = node.id
        self.node_journal.append(node_id)
        self.reshaped += reshaped
        filed = self._filed_state.get(node_id)
        schedulable = node.state in SCHEDULABLE
        if filed is None:
            self.node_order[node_id] = self._next()
            if self.silent is not None:
                self.silent[node_id] = node  # not heard from until the shell says so
            if schedulable:
                self._fleet_changed()
        elif filed is not node.state:
            del self.by_state[filed][node_id]
            if schedulable != (filed in SCHEDULABLE) or (reshaped and schedulable):
                self._fleet_changed()
        elif reshaped and schedulable:
            self._fleet_changed()
        self.nodes[node_id] = node
        self.by_state[node.state][node_id] = node
        self._filed_state[node_id] = node.state
        if schedulable or (filed is not None and filed in SCHEDULABLE):
            self._file_schedulable(node_id, node if schedulable else None)
        # (Most nodes have no attributes: no call for them, on the simulator's hot path.)
        leaves = schedulable and bool(node.attributes) and drain.leaving(node.attributes) is not None
        _place(self.leaving, node_id, node, leaves)
        self._classify(node_id)
        measured = (node.used, node.used_at)
        if self._measured.get(node_id) != measured:
            self._measured[node_id] = measured
            self.measured_version += 1

    def drop_node(self, node_id: str) -> None:
        self.node_journal.append(node_id)
        filed = self._filed_state.pop(node_id, None)
        if filed is None:
            return
        del self.by_state[filed][node_id]
        if filed in SCHEDULABLE:
            self._fleet_changed()
            self._file_schedulable(node_id, None)
        for group in (self.nodes, self.node_order, self.silent or {}, self._measured, self.leaving):
            group.pop(node_id, None)
        self._classify(node_id)
        self.measured_version += 1

    def heard(self, node_id: str, pinging: bool) -> None:
        """A shell that tracks pings: the node's agent pings from now on (True) or went silent."""
        assert self.silent is not None, "built without track_pings"
        node = self.nodes.get(node_id)
        if pinging or node is None:
            self.silent.pop(node_id, None)
        else:
            self.silent[node_id] = node

    def _classify(self, node_id: str) -> None:
        """File a node in the groups that follow from its state and whether work holds it (after
        either changed, or it came or went)."""
        node = self.nodes.get(node_id)
        worked = node_id in self.work
        state = node.state if node is not None else None
        unworked = not worked and state in SCHEDULABLE
        _place(self.unworked, node_id, node, unworked)
        _place(self.busy_unworked, node_id, node, unworked and state is NodeState.BUSY)
        _place(self.idle_working, node_id, node, worked and state is NodeState.IDLE)
        if worked and node is None:
            self.orphaned.add(node_id)
        else:
            self.orphaned.discard(node_id)

    def _fleet_changed(self) -> None:
        self.fleet_version += 1
        self._schedulable = None

    # ---- reading -----------------------------------------------------------------------------

    def next_limit(self) -> float:
        """When the first running attempt reaches its job's time limit (inf: none has a limit).
        Pops the entries of attempts dropped since they were filed."""
        limits, limit_at = self.limits, self._limit_at
        while limits:
            at, attempt_id = limits[0]
            if limit_at.get(attempt_id) == at:
                return at
            heapq.heappop(limits)
        return math.inf

    def limits_reached(self, by: float) -> list[tuple[float, int]]:
        """The running attempts that reach their job's time limit at `by` or earlier, as (time,
        attempt id), earliest first. Reads only the heap's entries up to `by`."""
        limits, limit_at = self.limits, self._limit_at
        found: list[tuple[float, int]] = []
        todo = [0] if limits and limits[0][0] <= by else []
        while todo:
            i = todo.pop()
            entry = limits[i]
            if limit_at.get(entry[1]) == entry[0]:
                found.append(entry)
            for child in (2 * i + 1, 2 * i + 2):
                if child < len(limits) and limits[child][0] <= by:
                    todo.append(child)
        found.sort()
        return found

    def schedulable(self) -> list[Node]:
        """The idle and busy nodes, in order (see the class docstring: do not change the list)."""
        if self._schedulable is None:
            self._schedulable = list(self._schedulable_nodes)
        return self._schedulable

    def _file_schedulable(self, node_id: str, node: Node | None) -> None:
        """`node` is idle or busy now (None: the node of that id is not, or is gone)."""
        orders, nodes = self._schedulable_orders, self._schedulable_nodes
        order = self.node_order[node_id]
        at = bisect.bisect_left(orders, order)
        present = at < len(orders) and orders[at] == order
        if node is None:
            if present:
                del orders[at], nodes[at]
        elif present:
            nodes[at] = node
        else:
            orders.insert(at, order)
            nodes.insert(at, node)

    def in_node_order(self, nodes: Iterable[Node]) -> list[Node]:
        order = self.node_order
        return sorted(nodes, key=lambda node: order[node.id])

    def in_job_order(self, jobs: Iterable[Job]) -> list[Job]:
        order = self.job_order
        return sorted(jobs, key=lambda job: order[job.id])

    def describe(self) -> dict[str, Any]:
        """Every grouping as plain ids, in order (for checking a kept index against a fresh one)."""

        def ids(group: dict[Any, Any], order: dict[Any, int]) -> list[Any]:
            return sorted(group, key=order.__getitem__)

        return {
            "jobs": ids(self.jobs, self.job_order),
            "queued": ids(self.queued, self.job_order),
            "flagged": ids(self.flagged, self.job_order),
            "deferred": ids(self.deferred, self.job_order),
            "held": ids(self.held, self.job_order),
            "dependent": ids(self.dependent, self.job_order),
            "throttled_arrays": {
                array_id: ids(tasks, self.job_order) for array_id, tasks in sorted(self.throttled_arrays.items())
            },
            "attempts": list(self.attempts),
            "assigned": sorted(self.assigned),
            "work": sorted(self.work.items()),
            "nodes": ids(self.nodes, self.node_order),
            "by_state": {state.value: ids(group, self.node_order) for state, group in self.by_state.items()},
            "unworked": ids(self.unworked, self.node_order),
            "busy_unworked": ids(self.busy_unworked, self.node_order),
            "idle_working": ids(self.idle_working, self.node_order),
            "orphaned": sorted(self.orphaned),
            "leaving": ids(self.leaving, self.node_order),
            "job_attempts": sorted((job, list(attempts)) for job, attempts in self.job_attempts.items()),
            "limits": sorted((at, i) for i, at in self._limit_at.items()),
            "schedulable": [node.id for node in self.schedulable()],
            "objects": (
                [id(job) for job in self.in_job_order(self.jobs.values())],
                [id(a) for a in self.attempts.values()],
                [id(node) for node in self.in_node_order(self.nodes.values())],
            ),
        }


_ACTIVE = frozenset(state for state in AttemptState if state.active)


def _place(group: dict[Any, Any], key: Any, value: Any, member: bool) -> None:
    if member:
        group[key] = value
    else:
        group.pop(key, None)
