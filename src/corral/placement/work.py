"""The work on the nodes (active attempts), kept between passes and updated where it changed.

A pass needs, per node: how many jobs run there and how many of them are CPU-capped or exclusive,
their summed
requests, the part of those not yet in the node's measured use, and (for the cost gate) when the
work is expected to end. Summing every attempt again each pass cost more than the rest of a pass
with a short queue, while the shell changes a handful of attempts between passes. So a ledger kept
by the placer remembers each node's attempts and figures, and each pass recomputes only the nodes
whose attempts came, went or started, or whose measurement changed. A node's figures are summed
over its attempts in id order, so a kept ledger gives exactly what a fresh one gives.

Attempts are taken to be fixed apart from their state and start: an attempt's id, job, nodes and
request never change (the store and the simulator create a new attempt for every try).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from corral.core.index import AttemptsLeft
from corral.core.model import Attempt, AttemptState, Job, Node
from corral.placement.arrays import FEW, Floats, Load
from corral.placement.availability import RESOURCES

if TYPE_CHECKING:
    from corral.core.index import SnapshotIndex

_ACTIVE = (AttemptState.ASSIGNED, AttemptState.RUNNING)


@dataclass(slots=True)
class _NodeWork:
    count: int
    capped: int
    exclusive: int
    held: tuple[float, float, float, float]
    unmeasured: tuple[float, float, float, float] | None
    measured_at: float | None  # the node's measurement time these figures assume
    last_id: int  # the highest attempt id summed


class WorkLedger:
    """Per node id, the active attempts and what they add up to; per node position (of the nodes
    of the last `update`), the same as arrays. `fractions` and `default_limit` are the cost
    gate's run shares and the time limit of jobs without one."""

    def __init__(self, fractions: Sequence[float] = (1.0,), default_limit: float | None = None) -> None:
        self.fractions = list(fractions)
        self.no_limit = math.inf if default_limit is None else default_limit
        self._attempts: dict[int, Attempt] = {}
        self._unstarted: set[int] = set()
        self._on_node: dict[str, dict[int, Attempt]] = {}
        self._work: dict[str, _NodeWork] = {}
        self._ids_seen: list[str] | None = None  # the list object last handed over
        self._positions: Mapping[str, int] = {}  # node id -> position, in the last update
        self._used_at: list[float | None] = []
        self._load: Load | None = None
        self._ends: Floats = np.zeros((len(self.fractions), 0))
        # Nodes whose ends `_ends` does not hold yet: only the cost gate reads them (`ends`), so
        # they are figured when it asks, not every pass.
        self._ends_stale: set[str] = set()
        self._jobs: Mapping[int, Job] = {}
        self._journal: tuple[SnapshotIndex, int] | None = None  # the kept index read last, and how far
        self._ending: AbstractSet[int] = frozenset()  # the attempts left out last time
        # The node positions whose figures the last `update` changed; None: all of them (new nodes).
        self.written: list[int] | None = None
        # Whether the last `update` found work started since the one before, or new work that
        # started after its assignment: its expected end moved from the one the pass that placed
        # it counted (its assignment's time limit), though its node's figures may not have (see
        # QueueWalk).
        self.started = False

    def update(
        self,
        ids: list[str],
        index: Mapping[str, int],
        used_at: list[float | None],
        attempts: Iterable[Attempt],
        jobs: Mapping[int, Job],
        world: SnapshotIndex | None = None,
        ending: AbstractSet[int] = frozenset(),
    ) -> Load:
        """The load on nodes `ids` (positions as in `index`; `used_at` their measurement times)
        for this pass's attempts. The arrays returned are the ledger's own: copy before changing.
        `world`: the snapshot's kept index, whose attempts are `attempts` and `ending` (attempts
        the pass ended, which hold nothing); its journal of changed attempts spares comparing
        every attempt with the last pass's."""
        kept = self._attempts
        since = world.attempt_journal.since(self._journal[1]) if self._journal and self._journal[0] is world else None
        if world is not None and since is not None:
            active: Mapping[int, Attempt] = AttemptsLeft(world.attempts, ending)
            touched = {*since, *self._ending, *ending}  # what was left out last time may be back
            gone: Iterable[int] = [i for i in touched if i in kept and i not in active]
            new: Iterable[int] = [i for i in touched if i in active and i not in kept]
            unstarted: Iterable[int] = [i for i in touched if i in self._unstarted and i in active]
        else:
            active = {a.id: a for a in attempts if a.state in _ACTIVE}
            gone, new, unstarted = kept.keys() - active.keys(), active.keys() - kept.keys(), self._unstarted
        self._journal = (world, world.attempt_journal.end) if world is not None else None
        self._ending = ending
        self._jobs = jobs
        changed: set[str] = set()
        loosened: set[str] = set()  # nodes whose figures may have gone down (work ended, started, measured)
        added: dict[str, list[Attempt]] = {}  # nodes whose only change may be attempts added
        for attempt_id in gone:
            attempt = kept.pop(attempt_id)
            self._unstarted.discard(attempt_id)
            for node_id in attempt.node_ids:
                listed = self._on_node[node_id]
                del listed[attempt_id]
                if not listed:
                    del self._on_node[node_id]
            changed.update(attempt.node_ids)
            loosened.update(attempt.node_ids)
        late_start = False  # new work that started after its assignment (see `started`)
        for attempt_id in new:
            attempt = kept[attempt_id] = active[attempt_id]
            if attempt.started_at is None:
                self._unstarted.add(attempt_id)
            elif attempt.started_at != attempt.assigned_at:
                late_start = True
            for node_id in attempt.node_ids:
                self._on_node.setdefault(node_id, {})[attempt_id] = attempt
                added.setdefault(node_id, []).append(attempt)
            changed.update(attempt.node_ids)
        started = [i for i in unstarted if active[i].started_at is not None]
        self.started = bool(started) or late_start
        for attempt_id in started:
            # Started since: its start time moves its end, and its measurement from now on.
            attempt = kept[attempt_id] = active[attempt_id]
            self._unstarted.discard(attempt_id)
            for node_id in attempt.node_ids:
                self._on_node[node_id][attempt_id] = attempt
            changed.update(attempt.node_ids)
            loosened.update(attempt.node_ids)

        # The same list object means the same positions: a caller keeping node slots changes it
        # only where a slot that held no node takes one (and no work). Another list is another
        # layout, even one that reads the same: a caller starting its slots over may hand one
        # that reads as its first did, while the positions hold the work of nodes gone since.
        same_nodes = ids is self._ids_seen
        self._ids_seen = ids
        if not same_nodes or used_at != self._used_at:
            # A new measurement changes which attempts it already includes.
            measured = [
                node_id
                for node_id, work in self._work.items()
                if (i := index.get(node_id)) is not None and used_at[i] != work.measured_at
            ]
            changed.update(measured)
            loosened.update(measured)
            self._used_at = list(used_at)  # else the copy kept is equal
        self._ends_stale.update(changed)
        for node_id in changed:
            i = index.get(node_id)
            measured_at = used_at[i] if i is not None else None
            new_ones = added.get(node_id) if node_id not in loosened else None
            if new_ones is None or not self._add(node_id, new_ones, measured_at, jobs):
                self._refigure(node_id, measured_at, jobs)
        if same_nodes and self._load is not None:
            self.written = [index[node_id] for node_id in changed if node_id in index]
            self._write(self.written, self._load, ids)
        else:
            # Other nodes: the figures of those that were there already move to their new
            # positions; only changed nodes and newcomers with work are written from the ledger.
            self.written = None
            n, was, load, ends = len(ids), self._positions, self._load, self._ends
            self._load = Load(
                np.zeros((len(RESOURCES), n)),
                np.zeros((len(RESOURCES), n)),
                np.zeros(n),
                np.zeros(n, dtype=np.int64),
                np.zeros(n, dtype=np.int64),
            )
            self._ends = np.full((len(self.fractions), n), -math.inf)
            moved = [(i, j) for i, node_id in enumerate(ids) if (j := was.get(node_id)) is not None]
            if load is not None and moved:
                to, source = [i for i, _ in moved], [j for _, j in moved]
                self._load.dedicated[:, to] = load.dedicated[:, source]
                self._load.unmeasured[:, to] = load.unmeasured[:, source]
                self._load.jobs[to] = load.jobs[source]
                self._load.capped[to] = load.capped[source]
                self._load.exclusive[to] = load.exclusive[source]
                self._ends[:, to] = ends[:, source]
            else:
                was = {}
            fresh = changed.union(node_id for node_id in self._work if node_id not in was)
            self._ends_stale.update(fresh)
            self._write([i for node_id in fresh if (i := index.get(node_id)) is not None], self._load, ids)
        self._positions = index
        return self._load

    def ends(self, now: float) -> Floats:
        """(shares x nodes) when each node's work ends if every job on it runs that share of its
        time limit (`now` at the earliest): see `lifetime.node_ends`."""
        result: Floats = np.maximum(self.latest_ends(), now)
        return result

    def latest_ends(self) -> Floats:
        """`ends` before the clock: -inf where a node has no work, and ends already past as they
        are (the ledger's own array: read only). Figured here for the nodes changed since the last
        call (by the jobs of the last `update`), not in every `update`: only the cost gate asks,
        and passes over bounded capacity never do."""
        stale, self._ends_stale = self._ends_stale, set()
        for node_id in stale:
            i = self._positions.get(node_id)
            if i is None:
                continue
            listed = self._on_node.get(node_id)
            ends = [-math.inf] * len(self.fractions)
            for attempt in listed.values() if listed else ():
                job = self._jobs.get(attempt.job_id)
                limit = self.no_limit if job is None or job.time_limit is None else job.time_limit
                start = attempt.started_at if attempt.started_at is not None else attempt.assigned_at
                for k, share in enumerate(self.fractions):
                    end = start + limit * share
                    if end > ends[k]:  # max(), without a call per share
                        ends[k] = end
            self._ends[:, i] = ends
        return self._ends

    def _refigure(self, node_id: str, measured_at: float | None, jobs: Mapping[int, Job]) -> None:
        listed = self._on_node.get(node_id)
        if not listed:
            self._work.pop(node_id, None)
            return
        ordered = [listed[i] for i in sorted(listed)]
        # One look-up of each attempt's job for both counts (most nodes hold one or two attempts).
        kinds = [_kinds(attempt, jobs) for attempt in ordered]
        capped = sum([c for c, _ in kinds])
        exclusive = sum([e for _, e in kinds])
        held = _sum(ordered)
        if measured_at is None:
            unmeasured: tuple[float, float, float, float] | None = held
        else:
            # Seed 002's one-iteration load bump: a job the agent has not measured yet (not
            # started, or started after the last measurement) counts at its request.
            late = [a for a in ordered if a.started_at is None or a.started_at > measured_at]
            unmeasured = _sum(late) if late else None
        self._work[node_id] = _NodeWork(len(ordered), capped, exclusive, held, unmeasured, measured_at, ordered[-1].id)

    def _add(self, node_id: str, attempts: list[Attempt], measured_at: float | None, jobs: Mapping[int, Job]) -> bool:
        """Add attempts new on a node whose figures are otherwise unchanged, if they come after
        every attempt summed (ids in order: the same sums as `_refigure`); False if they do not."""
        work = self._work.get(node_id)
        attempts = sorted(attempts, key=lambda a: a.id)
        if work is None or work.measured_at != measured_at or attempts[0].id <= work.last_id:
            return False
        held, unmeasured, capped, exclusive = work.held, work.unmeasured, work.capped, work.exclusive
        for attempt in attempts:
            is_capped, is_exclusive = _kinds(attempt, jobs)
            capped += is_capped
            exclusive += is_exclusive
            held = _plus(held, attempt)
            if measured_at is None or attempt.started_at is None or attempt.started_at > measured_at:
                unmeasured = _plus(unmeasured, attempt)
        if measured_at is None:
            unmeasured = held
        self._work[node_id] = _NodeWork(
            work.count + len(attempts), capped, exclusive, held, unmeasured, measured_at, attempts[-1].id
        )
        return True

    def _write(self, where: list[int], load: Load, ids: list[str]) -> None:
        if not where:
            return
        empty = _NodeWork(0, 0, 0, (0.0, 0.0, 0.0, 0.0), None, None, 0)
        works = [self._work.get(ids[i], empty) for i in where]
        if len(where) <= FEW:  # element by element: cheaper than building arrays for a few nodes
            for i, w in zip(where, works, strict=True):
                load.jobs[i], load.capped[i], load.exclusive[i] = w.count, w.capped, w.exclusive
                load.dedicated[:, i] = w.held
                load.unmeasured[:, i] = w.unmeasured or (0.0, 0.0, 0.0, 0.0)
            return
        # One assignment per array for all the nodes written, not one per node.
        load.jobs[where] = [w.count for w in works]
        load.capped[where] = [w.capped for w in works]
        load.exclusive[where] = [w.exclusive for w in works]
        load.dedicated[:, where] = np.array([w.held for w in works], dtype=np.float64).T
        zero = (0.0, 0.0, 0.0, 0.0)
        load.unmeasured[:, where] = np.array([w.unmeasured or zero for w in works], dtype=np.float64).T


def _kinds(attempt: Attempt, jobs: Mapping[int, Job]) -> tuple[bool, bool]:
    """Whether the attempt's job is CPU-capped, and whether it is exclusive (no job: neither)."""
    job = jobs.get(attempt.job_id)
    if job is None:
        return False, False
    return job.cpu_capped, job.exclusive


def _plus(total: tuple[float, float, float, float] | None, attempt: Attempt) -> tuple[float, float, float, float]:
    """`total` (None: nothing yet) plus the attempt's request: the next step of `_sum`."""
    r = attempt.resources
    if total is None:
        return float(r.vcpus), float(r.ram_mib), float(r.scratch_mib), float(r.gpus)
    vcpus, ram, scratch, gpus = total
    return vcpus + r.vcpus, ram + r.ram_mib, scratch + r.scratch_mib, gpus + r.gpus


def _sum(attempts: list[Attempt]) -> tuple[float, float, float, float]:
    # Plain floats added in id order: the same IEEE sums as adding Resources one by one.
    first = attempts[0].resources
    vcpus, ram, scratch, gpus = float(first.vcpus), float(first.ram_mib), float(first.scratch_mib), float(first.gpus)
    for attempt in attempts[1:]:
        r = attempt.resources
        vcpus += r.vcpus
        ram += r.ram_mib
        scratch += r.scratch_mib
        gpus += r.gpus
    return vcpus, ram, scratch, gpus


def measure_load(nodes: Sequence[Node], attempts: Iterable[Attempt], jobs: Mapping[int, Job]) -> Load:
    """The load on `nodes` (positions in list order) for one pass, without a kept ledger."""
    ids = [node.id for node in nodes]
    index = {node_id: i for i, node_id in enumerate(ids)}
    return WorkLedger().update(ids, index, [node.used_at for node in nodes], attempts, jobs)
