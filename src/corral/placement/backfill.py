"""EASY backfilling (Lifka 1995; Mu'alem & Feitelson 2001) over bounded capacity.

The first job in queue order that cannot start gets a reservation: the earliest time at which
enough nodes would have room for it, judged from the end times of what runs (start plus requested
time limit; a job past its limit is taken to end `now`, so an overrun never pushes the reservation
into the past). Later jobs may start now only where they do not delay it: on nodes outside the
reservation, or on a reserved node if they end before the reservation starts or fit in what the
reserved job leaves free there. Reservations are recomputed every pass; nothing is carried over.

The future is projected from requests alone (the only thing known about it), against capacity
times the overprovision ratio; measured use is not projected. Job-count limits and capness are
not projected either: the reservation says where the job could go, the filters still decide.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from corral.core.model import Attempt, Job

if TYPE_CHECKING:
    from corral.core.index import SnapshotIndex
from corral.placement.arrays import EPSILON, Bools, Floats, Ints, NodeArrays
from corral.placement.demand import Demand


def end_time(start: float, limit: float | None, default_limit: float | None, now: float) -> float:
    chosen = limit if limit is not None else default_limit
    if chosen is None:
        return math.inf
    return max(start + chosen, now)


class Timeline:
    """Ends of running work (and of work placed this pass), with what each end frees.

    Appended in O(1) per placement (plain lists: a placement pays nothing for it); a reservation
    turns them into arrays and sorts them once, in C, by node and time (np.lexsort), which is what
    its vectorised running sums need. Keeping a sorted structure current on every placement would
    cost every placement for the rare pass that makes a reservation."""

    def __init__(self, ends: Floats | None = None, nodes: Ints | None = None, frees: Floats | None = None) -> None:
        """Empty, or starting with the events given as arrays (`frees` as events x resources)."""
        self._end: list[float] = []
        self._node: list[int] = []
        self._frees: list[tuple[float, ...]] = []
        # The events as arrays, as of the last `arrays` call: those given, then the lists (a pass
        # that makes reservations asks again and again, so each call converts only what was added
        # since).
        given = (
            (ends, nodes, frees)
            if ends is not None and nodes is not None and frees is not None
            else (np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros((0, 4)))
        )
        self._given = len(given[0])
        self._converted: tuple[Floats, Ints, Floats] = given

    def add(self, end: float, node: int, frees: tuple[float, ...]) -> None:
        if math.isinf(end):
            return  # never frees anything within any horizon a reservation could use
        self._end.append(end)
        self._node.append(node)
        self._frees.append(frees)

    def arrays(self) -> tuple[Floats, Ints, Floats]:
        """(ends, nodes, frees as resources x events), in the order they were added. Read only."""
        if not len(self):
            return np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros((4, 0))
        ends, nodes, frees = self._converted
        done = len(ends) - self._given
        if done < len(self._end):
            ends = np.concatenate([ends, np.array(self._end[done:], dtype=np.float64)])
            nodes = np.concatenate([nodes, np.array(self._node[done:], dtype=np.int64)])
            # Events x resources, as the lists hold them; the caller gets the transpose (the
            # layout its sums were written against).
            frees = np.concatenate([frees, np.array(self._frees[done:], dtype=np.float64)])
            for array in (ends, nodes, frees):
                array.flags.writeable = False
            self._converted = (ends, nodes, frees)
        return ends, nodes, frees.T

    def __len__(self) -> int:
        return self._given + len(self._end)

    @classmethod
    def of_running(
        cls,
        arrays: NodeArrays,
        attempts: Iterable[Attempt],
        jobs: Mapping[int, Job],
        now: float,
        default_limit: float | None,
    ) -> Timeline:
        timeline = cls()
        for attempt in attempts:
            if not attempt.state.active:
                continue
            job = jobs.get(attempt.job_id)
            start = attempt.started_at if attempt.started_at is not None else attempt.assigned_at
            end = end_time(start, job.time_limit if job else None, default_limit, now)
            r = attempt.resources
            frees = (float(r.vcpus), float(r.ram_mib), float(r.scratch_mib), float(r.gpus))
            for node_id in attempt.node_ids:
                i = arrays.index.get(node_id)
                if i is not None:
                    timeline.add(end, i, frees)
        return timeline


class RunningEnds:
    """The events of `Timeline.of_running`, kept between passes: each active attempt's end (start
    plus time limit, before it is held at `now`), node and request, in the same order. With a
    kept index, a pass changes only the events of the attempts its journal names (work that came,
    went or started); otherwise, or when the nodes are others, they are made afresh."""

    def __init__(self, default_limit: float | None) -> None:
        self.default_limit = default_limit
        self._of: tuple[Mapping[str, int], SnapshotIndex | None] | None = None  # node positions, index
        self._seen = 0  # the index's journal position the events are as of
        self._known: set[int] = set()  # active attempts the events account for (some have none)
        self._ending: AbstractSet[int] = frozenset()  # the attempts left out last time
        self._owner: Ints = np.zeros(0, dtype=np.int64)
        self._ends: Floats = np.zeros(0)
        self._nodes: Ints = np.zeros(0, dtype=np.int64)
        self._frees: Floats = np.zeros((0, 4))

    def timeline(
        self,
        positions: Mapping[str, int],
        attempts: Iterable[Attempt],
        jobs: Mapping[int, Job],
        now: float,
        world: SnapshotIndex | None,
        ending: AbstractSet[int] = frozenset(),
    ) -> Timeline:
        """The timeline of the running work on the nodes at `positions` (`world`: the snapshot's
        kept index, whose attempts are `attempts` and `ending`, attempts the pass ended)."""
        of = self._of
        since = None
        if world is not None and of is not None and of[0] is positions and of[1] is world:
            since = world.attempts_changed_since(self._seen)
            # An attempt left out last time and still filed was not ended after all: its events
            # belong where it stands among the others, so they are all made again.
            if since is not None and any(i in world.attempts and i not in ending for i in self._ending):
                since = None
        if since is None:
            self._known = set()
            self._set(*self._rows(attempts, positions, jobs))
        elif since or ending:
            assert world is not None
            active = {i: world.attempts[i] for i in since if i in world.attempts and i not in ending}
            self._apply([*since, *ending], active, positions, jobs)
        self._of, self._seen = (positions, world), world.attempt_log_end if world is not None else 0
        self._ending = ending
        return Timeline(np.maximum(self._ends, now), self._nodes, self._frees)

    def _rows(
        self, attempts: Iterable[Attempt], positions: Mapping[str, int], jobs: Mapping[int, Job]
    ) -> tuple[list[int], list[float], list[int], list[tuple[float, float, float, float]]]:
        owner: list[int] = []
        ends: list[float] = []
        nodes: list[int] = []
        frees: list[tuple[float, float, float, float]] = []
        for attempt in attempts:
            if not attempt.state.active:
                continue
            self._known.add(attempt.id)
            end = self._end(attempt, jobs)
            if math.isinf(end):
                continue  # never frees anything within any horizon a reservation could use
            r = attempt.resources
            freed = (float(r.vcpus), float(r.ram_mib), float(r.scratch_mib), float(r.gpus))
            for node_id in attempt.node_ids:
                i = positions.get(node_id)
                if i is not None:
                    owner.append(attempt.id)
                    ends.append(end)
                    nodes.append(i)
                    frees.append(freed)
        return owner, ends, nodes, frees

    def _end(self, attempt: Attempt, jobs: Mapping[int, Job]) -> float:
        job = jobs.get(attempt.job_id)
        start = attempt.started_at if attempt.started_at is not None else attempt.assigned_at
        return end_time(start, job.time_limit if job else None, self.default_limit, -math.inf)

    def _set(
        self, owner: list[int], ends: list[float], nodes: list[int], frees: list[tuple[float, float, float, float]]
    ) -> None:
        self._owner = np.array(owner, dtype=np.int64)
        self._ends = np.array(ends, dtype=np.float64)
        self._nodes = np.array(nodes, dtype=np.int64)
        self._frees = np.array(frees, dtype=np.float64).reshape(len(frees), 4)

    def _apply(
        self, since: list[int], active: Mapping[int, Attempt], positions: Mapping[str, int], jobs: Mapping[int, Job]
    ) -> None:
        touched = dict.fromkeys(since)  # in journal order: new attempts are appended in it
        gone = [i for i in touched if i in self._known and i not in active]
        moved = [i for i in touched if i in self._known and i in active]
        new = [active[i] for i in touched if i not in self._known and i in active]
        for i in gone:
            self._known.discard(i)
        if gone:
            keep = ~np.isin(self._owner, gone)
            self._owner, self._ends, self._nodes = self._owner[keep], self._ends[keep], self._nodes[keep]
            self._frees = self._frees[keep]
        for i in moved:  # started since (or filed again): its end moves, its events stay where they are
            end = self._end(active[i], jobs)
            rows = np.flatnonzero(self._owner == i)
            if len(rows):
                self._ends[rows] = end
        if new:
            owner, ends, nodes, frees = self._rows(new, positions, jobs)
            if owner:
                self._owner = np.concatenate([self._owner, np.array(owner, dtype=np.int64)])
                self._ends = np.concatenate([self._ends, np.array(ends, dtype=np.float64)])
                self._nodes = np.concatenate([self._nodes, np.array(nodes, dtype=np.int64)])
                self._frees = np.concatenate([self._frees, np.array(frees, dtype=np.float64)])


@dataclass(slots=True)
class Reservation:
    job_id: int
    start: float
    nodes: list[int]
    # Room left on each reserved node at `start` (resources x reserved nodes, in `nodes` order).
    spare: Floats = field(default_factory=lambda: np.zeros((4, 0)))
    held: Bools = field(default_factory=lambda: np.zeros(0, dtype=bool))  # the reserved nodes, as a mask
    _column: dict[int, int] = field(default_factory=dict)  # node position -> its column of `spare`

    def __post_init__(self) -> None:
        self._column = {i: k for k, i in enumerate(self.nodes)}

    def holds_back(self, arrays: NodeArrays, vector: Floats, end: float) -> Bools | None:
        """Nodes a job (request `vector`, ending at `end`) may not use without delaying the
        reservation; None when it may use all."""
        if end <= self.start:
            return None
        # A gang's reservation holds many nodes: one comparison over all of them, not one per node.
        fits = np.all(vector[:, None] <= self.spare + EPSILON, axis=0)
        if fits.all():
            return None
        mask = np.zeros(arrays.n, dtype=bool)
        mask[np.asarray(self.nodes)[~fits]] = True
        return mask

    def take(self, nodes: Iterable[int], vector: Floats, end: float) -> None:
        if end <= self.start:
            return
        for i in nodes:
            k = self._column.get(i)
            if k is not None:
                self.spare[:, k] = self.spare[:, k] - vector

    def describe(self, arrays: NodeArrays, now: float, mode: str = "easy") -> str:
        where = ", ".join(arrays.ids[i] for i in self.nodes[:5]) + (" ..." if len(self.nodes) > 5 else "")
        when = "now" if self.start <= now else f"in {_duration(self.start - now)}"
        return f"reserved {where} from {when} ({'EASY backfill' if mode == 'easy' else 'strict FIFO'})"


def reserve(arrays: NodeArrays, demand: Demand, eligible: Bools, timeline: Timeline, now: float) -> Reservation | None:
    """The earliest reservation for `demand` on `eligible` nodes, or None if running work never
    frees enough (work without a time limit never ends, for this purpose).

    Vectorised over the timeline: each node's room after each of its own ends is its room now
    plus the running sum of what those ends free; the time a node first fits is the first such
    point that holds the request, and the reservation starts when the `need`-th node fits."""
    need = demand.node_count
    wanted = demand.vector > 0
    ceiling = arrays.capacity * arrays.ratio[:, None]
    projected = np.minimum(ceiling - arrays.dedicated, ceiling)
    request = demand.vector[wanted] - EPSILON

    first_fit = np.full(arrays.n, np.inf)
    first_fit[eligible & np.all(projected[wanted] >= request[:, None], axis=0)] = now
    ends, nodes, frees = timeline.arrays()
    keep = eligible[nodes]
    ends, nodes, frees = ends[keep], nodes[keep], frees[:, keep]
    if len(nodes):
        by_node = np.lexsort((ends, nodes))  # grouped by node, each group in time order
        nodes, ends, frees = nodes[by_node], ends[by_node], frees[:, by_node]
        # Only the resources the job asks for decide where it fits (each row sums on its own).
        running = np.cumsum(frees[wanted], axis=1)
        starts = np.flatnonzero(np.r_[True, nodes[1:] != nodes[:-1]])
        group_start = np.repeat(starts, np.diff(np.r_[starts, len(nodes)]))
        before = np.where(group_start > 0, running[:, np.maximum(group_start - 1, 0)], 0.0)
        freed_so_far = running - before
        room_after = np.minimum(projected[wanted][:, nodes] + freed_so_far, ceiling[wanted][:, nodes])
        fits = np.all(room_after >= request[:, None], axis=0)
        np.minimum.at(first_fit, nodes, np.where(fits, np.maximum(ends, now), np.inf))
    order = np.lexsort((np.arange(arrays.n), first_fit))[:need]
    if len(order) < need or not np.isfinite(first_fit[order[-1]]):
        return None
    start = float(first_fit[order[-1]])
    chosen = [int(i) for i in order]
    # What the ends up to the start free on each node, summed in time order (one pass over the
    # timeline for every reserved node: a gang may reserve dozens).
    freed = np.zeros_like(projected)
    if len(nodes):
        counted = ends <= start
        for resource in range(len(frees)):
            freed[resource] = np.bincount(nodes[counted], weights=frees[resource, counted], minlength=arrays.n)
    spare = np.minimum(projected[:, chosen] + freed[:, chosen], ceiling[:, chosen]) - demand.vector[:, None]
    held = np.zeros(arrays.n, dtype=bool)
    held[chosen] = True
    return Reservation(demand.job_id, start, chosen, spare, held)


@dataclass(frozen=True, slots=True)
class _Made:
    """What a reservation was made from, and what it was (None: none could be made)."""

    key: tuple[object, ...]
    arrays: NodeArrays
    eligible: Bools
    dedicated: Floats
    timeline: tuple[Floats, Ints, Floats]
    now: float
    found: Reservation | None


class LastReservation:
    """The last reservation a placer made, given again for the same job when nothing it was made
    from has changed: the same request, eligible nodes, requests on the nodes and timeline (the
    ends as held at `now`, so no running work came due in between), and a start after the `now`
    it was made at. Then the reservation a fresh `reserve` makes at a later `now` is the same:
    only nodes that fit already are placed at `now`, and the start is not one of them."""

    def __init__(self) -> None:
        self._made: _Made | None = None

    def reserve(
        self, arrays: NodeArrays, demand: Demand, eligible: Bools, timeline: Timeline, now: float
    ) -> Reservation | None:
        events = timeline.arrays()
        made, key = self._made, (demand.job_id, demand.key)
        if (
            made is not None
            and made.key == key
            and made.arrays is arrays
            and (made.found is None or made.found.start > made.now)
            and np.array_equal(made.eligible, eligible)
            and np.array_equal(made.dedicated, arrays.dedicated)
            and all(np.array_equal(was, now_is) for was, now_is in zip(made.timeline, events, strict=True))
        ):
            return _copy(made.found)
        found = reserve(arrays, demand, eligible, timeline, now)
        self._made = _Made(key, arrays, eligible, arrays.dedicated.copy(), events, now, _copy(found))
        return found


def _copy(reservation: Reservation | None) -> Reservation | None:
    """`spare` is taken from as a pass places work: each pass gets its own."""
    if reservation is None:
        return None
    r = reservation
    return Reservation(r.job_id, r.start, r.nodes, r.spare.copy(), r.held)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
