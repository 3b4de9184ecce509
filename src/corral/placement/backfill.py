"""EASY backfilling (Lifka 1995; Mu'alem & Feitelson 2001) over bounded capacity.

The first job in queue order that cannot start gets a reservation: the earliest time at which
enough nodes would have room for it, judged from the end times of what runs (start plus requested
time limit; a job past its limit is taken to end `now`, so an overrun never pushes the reservation
into the past). Later jobs may start now only where they do not delay it: on nodes outside the
reservation, or on a reserved node if they end before the reservation starts or fit in what the
reserved job leaves free there. Reservations are made again every pass (LastReservation
refigures only the nodes that changed).

Admin reservations that hold a node for a while only (a maintenance window: one that starts later,
or one that ends) close it to the jobs outside them from their start to their end. The reservation
counts such a node only at a time when the job, run for its time limit (or the default one; without
either, for ever), would end by the window's start, or from the window's end on.

The future is projected from requests alone (the only thing known about it), against capacity
times the overprovision ratio; measured use is not projected. Job-count limits and capness are
not projected either: the reservation says where the job could go, the filters still decide.

Exclusive jobs (Slurm's --exclusive) are projected, as their rule is about the whole node, not
its room: an exclusive job at the head needs its nodes empty, so a node first fits it when the
last end of its work is past (never, while work on it has no end), and its reservation leaves
nothing to share: a later job may use a reserved node only if it ends before the start. A node
that runs an exclusive job has no room for any other job until that node is empty, whatever its
room says. Either way a node's empty time is one vectorised pass over the timeline (its latest
end, where its ends account for every job on it), made only when an exclusive job is concerned.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from corral.core.model import Attempt, Job

if TYPE_CHECKING:
    from corral.core.index import SnapshotIndex
from corral.placement.arrays import ALL_OF, ANY_OF, EPSILON, Bools, Floats, Ints, NodeArrays
from corral.placement.demand import Demand


def end_time(start: float, limit: float | None, default_limit: float | None, now: float) -> float:
    chosen = limit if limit is not None else default_limit
    if chosen is None:
        return math.inf
    return max(start + chosen, now)


@dataclass(frozen=True, slots=True)
class Changes:
    """Which nodes' running ends changed since the kept ends' previous timeline (`serial` - 1);
    None: all of them (made afresh)."""

    serial: int
    nodes: Ints | None


class Timeline:
    """Ends of running work (and of work placed this pass), with what each end frees.

    Appended in O(1) per placement (plain lists: a placement pays nothing for it); a reservation
    turns them into arrays and sorts them once, in C, by node and time (np.lexsort), which is what
    its vectorised running sums need. Keeping a sorted structure current on every placement would
    cost every placement for the rare pass that makes a reservation."""

    def __init__(
        self,
        ends: Floats | None = None,
        nodes: Ints | None = None,
        frees: Floats | None = None,
        changes: Changes | None = None,
    ) -> None:
        """Empty, or starting with the events given as arrays (`frees` as events x resources);
        `changes`: see RunningEnds.timeline."""
        self.changes = changes
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

    def next_end(self, now: float, on: Bools) -> float:
        """The first end after `now` on the nodes `on` marks (inf: none)."""
        ends, nodes, _ = self.arrays()
        later = ends[(ends > now) & on[nodes]]
        return float(later.min()) if len(later) else math.inf

    def added_nodes(self) -> Ints:
        """The nodes of the events added after the given ones (work placed this pass)."""
        return np.array(self._node, dtype=np.int64)

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
        self._serial = 0  # timelines handed out

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
            since = world.attempt_journal.since(self._seen)
            # An attempt left out last time and still filed was not ended after all: its events
            # belong where it stands among the others, so they are all made again.
            if since is not None and any(i in world.attempts and i not in ending for i in self._ending):
                since = None
        touched: Ints | None = np.zeros(0, dtype=np.int64)
        if since is None:
            self._known = set()
            self._set(*self._rows(attempts, positions, jobs))
            touched = None
        elif since or ending:
            assert world is not None
            active = {i: world.attempts[i] for i in since if i in world.attempts and i not in ending}
            touched = self._apply([*since, *ending], active, positions, jobs)
        self._of, self._seen = (positions, world), world.attempt_journal.end if world is not None else 0
        self._ending = ending
        self._serial += 1
        return Timeline(np.maximum(self._ends, now), self._nodes, self._frees, Changes(self._serial, touched))

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
    ) -> Ints:
        """Takes the changes; returns the nodes whose events changed (some more than once)."""
        touched = dict.fromkeys(since)  # in journal order: new attempts are appended in it
        gone = [i for i in touched if i in self._known and i not in active]
        moved = [i for i in touched if i in self._known and i in active]
        new = [active[i] for i in touched if i not in self._known and i in active]
        changed: list[Ints] = []
        for i in gone:
            self._known.discard(i)
        if gone:
            if len(gone) <= 4:  # the usual one or two: comparisons cost less than np.isin's sort
                keep = self._owner != gone[0]
                for attempt_id in gone[1:]:
                    keep &= self._owner != attempt_id
            else:
                keep = ~np.isin(self._owner, gone)
            changed.append(self._nodes[~keep])
            self._owner, self._ends, self._nodes = self._owner[keep], self._ends[keep], self._nodes[keep]
            # Rows by position: NumPy takes whole rows of a 2-D array by index several times
            # faster than by a boolean mask.
            self._frees = self._frees.take(keep.nonzero()[0], axis=0)
        for i in moved:  # started since (or filed again): its end moves, its events stay where they are
            end = self._end(active[i], jobs)
            rows = (self._owner == i).nonzero()[0]
            if len(rows):
                self._ends[rows] = end
                changed.append(self._nodes[rows])
        if new:
            owner, ends, nodes, frees = self._rows(new, positions, jobs)
            changed.append(np.array(nodes, dtype=np.int64))
            if owner:
                self._owner = np.concatenate([self._owner, np.array(owner, dtype=np.int64)])
                self._ends = np.concatenate([self._ends, np.array(ends, dtype=np.float64)])
                self._nodes = np.concatenate([self._nodes, np.array(nodes, dtype=np.int64)])
                self._frees = np.concatenate([self._frees, np.array(frees, dtype=np.float64)])
        return np.concatenate(changed) if changed else np.zeros(0, dtype=np.int64)


@dataclass(slots=True)
class Reservation:
    job_id: int
    start: float
    nodes: list[int]
    # Room left on each reserved node at `start` (resources x reserved nodes, in `nodes` order).
    spare: Floats = field(default_factory=lambda: np.zeros((4, 0)))
    held: Bools = field(default_factory=lambda: np.zeros(0, dtype=bool))  # the reserved nodes, as a mask
    _column: dict[int, int] = field(default_factory=dict)  # node position -> its column of `spare`
    # holds_back's answers by request, while `spare` is as it was (the jobs of a long queue share
    # a few requests).
    _held_for: dict[bytes, Bools | None] = field(default_factory=dict)
    # Admin reservations whose windows close some of its nodes until its start (their ends, not
    # running work, set the start), by name.
    after_windows: tuple[str, ...] = ()
    # The last time the job may start on all its nodes and still end before a window closes one
    # of them (inf: none does): a started reservation moves once the clock passes it.
    open_until: float = math.inf

    def __post_init__(self) -> None:
        self._column = {i: k for k, i in enumerate(self.nodes)}

    def copy(self) -> Reservation:
        """One whose room placements may take from (`take`) without changing this one."""
        return Reservation(
            self.job_id,
            self.start,
            self.nodes,
            self.spare.copy(),
            self.held,
            after_windows=self.after_windows,
            open_until=self.open_until,
        )

    def same_as(self, other: Reservation | None, now: float = -math.inf) -> bool:
        """The same start (or both started by `now`: every job still to be placed ends after
        either), nodes and room left on each (the nodes in any order: ties among nodes that first
        fit at the same time come in another order once one of them took work)."""
        if other is None or len(other.nodes) != len(self.nodes):
            return False
        if other.start != self.start and not (other.start <= now and self.start <= now):
            return False
        if self.nodes == other.nodes:
            return bool(np.array_equal(self.spare, other.spare))
        mine, theirs = np.argsort(self.nodes), np.argsort(other.nodes)
        return bool(
            np.array_equal(np.asarray(self.nodes)[mine], np.asarray(other.nodes)[theirs])
            and np.array_equal(self.spare[:, mine], other.spare[:, theirs])
        )

    def holds_back(self, arrays: NodeArrays, vector: Floats, end: float, exclusive: bool = False) -> Bools | None:
        """Nodes a job (request `vector`, ending at `end`; `exclusive`: it runs alone) may not use
        without delaying the reservation; None when it may use all. An exclusive job running past
        the start would keep the reserved job off the node whatever room is left: every reserved
        node is held back from it (an exclusive reserved job leaves no room: its `spare` is -inf)."""
        if end <= self.start:
            return None
        if exclusive:
            return self.held
        key = vector.tobytes()
        if key in self._held_for:
            return self._held_for[key]  # read only, as every mask a pass hands the engine
        # A gang's reservation holds many nodes: one comparison over all of them, not one per node.
        fits = ALL_OF(vector[:, None] <= self.spare + EPSILON, axis=0)
        mask: Bools | None = None
        if not fits.all():
            mask = np.zeros(arrays.n, dtype=bool)
            mask[np.asarray(self.nodes)[~fits]] = True
        self._held_for[key] = mask
        return mask

    def take(self, nodes: Iterable[int], vector: Floats, end: float) -> None:
        if end <= self.start:
            return
        for i in nodes:
            k = self._column.get(i)
            if k is not None:
                self.spare[:, k] = self.spare[:, k] - vector
                self._held_for.clear()

    def describe(self, arrays: NodeArrays, now: float, mode: str = "easy") -> str:
        # In node order: the same reservation reads the same whichever node first fit first.
        where = ", ".join(arrays.ids[i] for i in sorted(self.nodes)[:5]) + (" ..." if len(self.nodes) > 5 else "")
        when = "now" if self.start <= now else f"in {_duration(self.start - now)}"
        after = f", after admin reservation {', '.join(self.after_windows)} ends" if self.after_windows else ""
        return f"reserved {where} from {when}{after} ({'EASY backfill' if mode == 'easy' else 'strict FIFO'})"


def reserve(
    arrays: NodeArrays,
    demand: Demand,
    eligible: Bools,
    timeline: Timeline,
    now: float,
    ready: Floats | None = None,
    default_limit: float | None = None,
) -> Reservation | None:
    """The earliest reservation for `demand` on `eligible` nodes, or None if running work never
    frees enough (work without a time limit never ends, for this purpose). `ready`: per node, the
    time before which it cannot be used (a down node's `now + node_down_delay`, seed 002 §5.4.5).
    `default_limit`: how long a job without a time limit is taken to run, against windows."""
    first_fit = _Fits(arrays, demand, eligible, now).first_fits(timeline)
    first_fit = exclusive_fits(arrays, demand, eligible, now, timeline, first_fit)
    if ready is not None:
        first_fit = np.maximum(first_fit, ready)
    return _reservation(arrays, demand, timeline, first_fit, windows_for(arrays, demand, default_limit))


@dataclass(frozen=True, slots=True)
class Windows:
    """When admin reservations close nodes to one job: node i from `closed_from[i]` (-inf: it is
    closed already) until `closed_until[i]` (inf: for good); a node no window closes has both inf.
    `duration`: how long the job runs (inf: without a limit)."""

    closed_from: Floats
    closed_until: Floats
    duration: float


def windows_for(arrays: NodeArrays, demand: Demand, default_limit: float | None) -> Windows | None:
    """The windows that close nodes to `demand`'s job (None: none does). A reservation the job
    names closes nothing to it; one in force that never ends keeps its nodes out of `eligible`
    already (the reservation filter), so only one with an end counts here. Neither closes a node
    while the filter that keeps jobs off it is not in force."""
    if not arrays.has_windows:
        return None
    own = arrays.reservation_codes.get(demand.reservation, 0) if demand.reservation else 0
    upcoming = (arrays.upcoming != 0) & (arrays.upcoming != own) & arrays.closes_later
    started = (arrays.reservation != 0) & (arrays.reservation != own) & np.isfinite(arrays.reservation_until)
    started &= arrays.closes_now
    if not (upcoming.any() or started.any()):
        return None
    closed_from = np.where(upcoming, arrays.reservation_start, np.where(started, -math.inf, math.inf))
    # (An end before the start ends nothing: the reservation never takes hold.)
    closed_until = np.where(upcoming | started, np.maximum(arrays.reservation_until, closed_from), math.inf)
    limit = demand.time_limit if demand.time_limit is not None else default_limit
    return Windows(closed_from, closed_until, math.inf if limit is None else float(limit))


def ending_reservations(arrays: NodeArrays) -> Bools | None:
    """Nodes held by a reservation in force that ends (None: none is): the reservation filter
    keeps them from every job outside it, but from its end they take any, so backfill may count
    them from then (see `windows_for`)."""
    if not (arrays.has_windows and arrays.closes_now):
        return None
    ending = (arrays.reservation != 0) & np.isfinite(arrays.reservation_until)
    return ending if ending.any() else None


_FIRST = np.zeros(1, dtype=np.int64)  # the first event starts a node's group


def exclusive_fits(
    arrays: NodeArrays, demand: Demand, eligible: Bools, now: float, timeline: Timeline, first_fit: Floats
) -> Floats:
    """`first_fit` (every node's, as `_Fits` gives them) for exclusive work: an exclusive demand
    first fits a node big enough for it when the node is empty; any other first fits a node that
    runs an exclusive job no earlier than when that node is empty. Unchanged (the same array)
    when no exclusive job is concerned."""
    if not demand.exclusive and not arrays.any_exclusive:
        return first_fit
    empty = empty_times(arrays, timeline, now)
    if demand.exclusive:
        wanted = (demand.vector > 0).nonzero()[0]
        ceiling = arrays.capacity[wanted] * arrays.ratio[wanted, None]
        big_enough = eligible & ALL_OF(ceiling >= (demand.vector[wanted] - EPSILON)[:, None], axis=0)
        result: Floats = np.where(big_enough, empty, math.inf)
        return result
    # Room only grows as work ends, so the first time both hold is the later of the two.
    result = np.where(arrays.exclusive_jobs > 0, np.maximum(first_fit, empty), first_fit)
    return result


def empty_times(arrays: NodeArrays, timeline: Timeline, now: float) -> Floats:
    """When each node runs nothing any more: `now` for one that runs nothing; the latest end of its
    work (held at `now`) where the timeline holds an end for every job on it; else inf (work
    without a time limit, which the timeline leaves out, never ends)."""
    ends, nodes, _ = timeline.arrays()
    n = arrays.n
    counted = np.bincount(nodes, minlength=n)[:n] if len(nodes) else np.zeros(n, dtype=np.int64)
    latest = np.full(n, -math.inf)
    if len(nodes):
        np.maximum.at(latest, nodes, ends)
    empty: Floats = np.where(arrays.jobs <= 0, now, np.where(counted >= arrays.jobs, np.maximum(latest, now), math.inf))
    return empty


class _Fits:
    """When each node first fits a demand, vectorised over the timeline: a node's room after each
    of its own ends is its room now plus the running sum of what those ends free; the time it
    first fits is the first such point that holds the request (now, if its room does already).
    `at`: only these nodes (positions) are worked out, for `first_fits` with kept ones."""

    def __init__(self, arrays: NodeArrays, demand: Demand, eligible: Bools, now: float, at: Ints | None = None) -> None:
        self.now = now
        self.at = at
        wanted = self.wanted = (demand.vector > 0).nonzero()[0]  # only these resources decide where it fits
        if at is None:
            capacity, dedicated, eligible_here = arrays.capacity[wanted], arrays.dedicated[wanted], eligible
        else:
            # The same operations on the columns of `at` only: the same values there.
            rows = wanted[:, None]
            capacity, dedicated, eligible_here = arrays.capacity[rows, at], arrays.dedicated[rows, at], eligible[at]
            self.column = np.empty(arrays.n, dtype=np.intp)
            self.column[at] = np.arange(len(at))
        ceiling = capacity * arrays.ratio[wanted, None]
        self.projected_wanted = np.minimum(ceiling - dedicated, ceiling)
        self.request = demand.vector[wanted] - EPSILON
        # Room is capped at the ceiling, so a node fits at a time when its room then holds the
        # request and it is big enough at all (min(room, ceiling) >= request is both).
        self.big_enough = eligible_here & ALL_OF(ceiling >= self.request[:, None], axis=0)
        self.fits_now = self.big_enough & ALL_OF(self.projected_wanted >= self.request[:, None], axis=0)

    def first_fits(self, timeline: Timeline, kept: Floats | None = None) -> Floats:
        """Every node's first fit; or, given `kept` (first fits over the same nodes at an earlier
        `now`), those of the nodes at `at` only (whose ends, room or capacity changed since): a
        node's first fit is its earliest fitting end held at `now`, so the others' only move up
        to `now`."""
        now = self.now
        at = self.at
        if kept is None or at is None:
            assert at is None, "figured at some nodes only: needs the kept first fits"
            first_fit = np.where(self.fits_now, now, np.inf)
            waiting = self.big_enough & ~self.fits_now
        else:
            first_fit = np.maximum(kept, now)
            first_fit[at] = np.where(self.fits_now, now, np.inf)
            waiting = np.zeros(len(first_fit), dtype=bool)
            waiting[at[self.big_enough & ~self.fits_now]] = True
        # The ends on a node that fits now change nothing about when it first fits.
        if at is not None and not waiting.any():
            return first_fit
        ends, nodes, frees = timeline.arrays()
        later = waiting[nodes].nonzero()[0]
        if len(later):
            order = later[np.lexsort((ends[later], nodes[later]))]  # grouped by node, each group in time order
            on = nodes[order]
            running = np.cumsum(frees[self.wanted[:, None], order], axis=1)
            starts = (on[1:] != on[:-1]).nonzero()[0] + 1
            starts = np.concatenate((_FIRST, starts))
            before = np.zeros((len(self.wanted), len(starts)))
            before[:, 1:] = running[:, starts[1:] - 1]
            freed_so_far = running - np.repeat(before, np.diff(starts, append=len(on)), axis=1)
            projected = self.projected_wanted[:, on if at is None else self.column[on]]
            fits = ALL_OF(projected + freed_so_far >= self.request[:, None], axis=0)
            first_fit[on[starts]] = np.minimum.reduceat(np.where(fits, np.maximum(ends[order], now), np.inf), starts)
        return first_fit


FEW_DIRTY, FEW_EVENTS = 4, 48  # up to these, `_first_fits_few` works on Python floats


def _first_fits_few(
    arrays: NodeArrays, demand: Demand, eligible: Bools, now: float, at: Ints, timeline: Timeline, kept: Floats
) -> Floats | None:
    """`_Fits(..., at).first_fits(timeline, kept)` for a few refigured nodes with a few ends on
    them (the usual pass: one or two nodes changed), on Python floats: the same operations in
    the same order (the running sums run on across the nodes, as `np.cumsum` does), so the
    same values, without NumPy's per-call cost. None: too many nodes or ends for it."""
    if len(at) > FEW_DIRTY:
        return None
    vector = demand.vector
    wanted = [r for r in range(len(vector)) if vector[r] > 0]
    request = [float(vector[r]) - EPSILON for r in wanted]
    capacity, dedicated, ratio = arrays.capacity, arrays.dedicated, arrays.ratio
    first_fit = np.maximum(kept, now)
    projected_on: dict[int, list[float]] = {}  # the nodes big enough that do not fit now
    for i in at.tolist():
        ceiling = [float(capacity[r, i]) * float(ratio[r]) for r in wanted]
        projected = [min(c - float(dedicated[r, i]), c) for r, c in zip(wanted, ceiling, strict=True)]
        big_enough = bool(eligible[i]) and all(c >= q for c, q in zip(ceiling, request, strict=True))
        fits_now = big_enough and all(p >= q for p, q in zip(projected, request, strict=True))
        first_fit[i] = now if fits_now else math.inf
        if big_enough and not fits_now:
            projected_on[i] = projected
    if not projected_on:
        return first_fit
    ends, nodes, frees = timeline.arrays()
    waiting = np.zeros(arrays.n, dtype=bool)
    waiting[list(projected_on)] = True
    later = waiting[nodes].nonzero()[0]
    if len(later) > FEW_EVENTS:
        return None
    on, end_at = nodes[later].tolist(), ends[later].tolist()
    freed = frees[np.array(wanted)[:, None], later].T.tolist()
    running = [0.0] * len(wanted)
    before = running
    group = fitted = -1
    # By node, then end, ties in timeline order (np.lexsort's order: it is stable; here the index
    # breaks them).
    for _, _, k in sorted(zip(on, end_at, range(len(later)), strict=True)):
        node = on[k]
        if node != group:
            group, before = node, list(running)
        running = [total + amount for total, amount in zip(running, freed[k], strict=True)]
        if node == fitted:
            continue  # its later ends fit no earlier; the sums still run on over them
        projected = projected_on[node]
        if all(
            p + (total - start) >= q for p, total, start, q in zip(projected, running, before, request, strict=True)
        ):
            first_fit[node] = min(float(first_fit[node]), max(end_at[k], now))
            fitted = node
    return first_fit


def _reservation(
    arrays: NodeArrays, demand: Demand, timeline: Timeline, first_fit: Floats, windows: Windows | None = None
) -> Reservation | None:
    """The reservation starts when the `need`-th node fits (ties to the first nodes); with
    `windows`, when `need` nodes fit and are open to the job for its whole run."""
    need = demand.node_count
    after_windows: tuple[str, ...] = ()
    open_until = math.inf
    if windows is not None:
        opened = _open_start(first_fit, windows, need)
        if opened is None:
            return None
        start, order, stretch_end, after = opened
        open_until = float(stretch_end.min())
        codes = np.where(arrays.upcoming[order] != 0, arrays.upcoming[order], arrays.reservation[order])[after]
        after_windows = tuple(sorted({arrays.reservation_names[c] for c in codes.tolist()}))
    else:
        # The first `need` nodes by first fit, ties to the lower position (argmin: the first minimum).
        order = (
            np.array([first_fit.argmin()])
            if need == 1 and len(first_fit)
            else np.argsort(first_fit, kind="stable")[:need]
        )
        if len(order) < need or not np.isfinite(first_fit[order[-1]]):
            return None
        start = float(first_fit[order[-1]])
    chosen = [int(i) for i in order]
    held = np.zeros(arrays.n, dtype=bool)
    held[chosen] = True
    # What the ends up to the start free on each reserved node, summed in time order.
    ends, nodes, frees = timeline.arrays()
    counted = (held[nodes] & (ends <= start)).nonzero()[0]
    counted = counted[np.lexsort((ends[counted], nodes[counted]))]
    column = np.empty(arrays.n, dtype=np.intp)
    column[chosen] = np.arange(need)
    on = column[nodes[counted]]
    # Every resource's sums in one bincount: resource r of reserved node c is bin r * need + c
    # (each bin still adds its ends in time order).
    resources = len(frees)
    bins = (np.arange(resources)[:, None] * need + on).ravel()
    freed = np.bincount(bins, weights=frees[:, counted].ravel(), minlength=resources * need).reshape(resources, need)
    ceiling = arrays.capacity[:, chosen] * arrays.ratio[:, None]
    projected = np.minimum(ceiling - arrays.dedicated[:, chosen], ceiling)
    spare = np.minimum(projected + freed, ceiling) - demand.vector[:, None]
    if demand.exclusive:
        spare = np.full_like(spare, -math.inf)  # it runs alone: nothing is left to share from its start
    return Reservation(demand.job_id, start, chosen, spare, held, after_windows=after_windows, open_until=open_until)


def _open_start(first_fit: Floats, windows: Windows, need: int) -> tuple[float, Ints, Floats, Bools] | None:
    """The earliest time at which `need` nodes fit the job and stay open to it for its run; the
    first `need` of those nodes by when their open stretch began (ties to the lower position);
    the last start each allows (inf: any); and which of them open only at a window's end.

    A node fits from its first fit on (its room only grows as work ends), so the starts it allows
    are at most two stretches: from its first fit to the last start that ends by its window's
    start, and from the window's end (or its first fit, if later) on. The earliest start with
    `need` stretches open is at the beginning of one: a sweep over their sorted beginnings and
    ends finds it."""
    closed_from, closed_until, duration = windows.closed_from, windows.closed_until, windows.duration
    with np.errstate(invalid="ignore"):  # inf - inf: a node without a window, for a job without a limit
        last_before = np.where(np.isinf(closed_from) & (closed_from > 0), math.inf, closed_from - duration)
    before = np.isfinite(first_fit) & (first_fit <= last_before)
    after_start = np.maximum(first_fit, closed_until)  # inf: the window never ends, or it never fits
    after = np.isfinite(after_start)
    begins = np.sort(np.concatenate((first_fit[before], after_start[after])))
    ends = np.sort(last_before[before])
    # Stretches open at each beginning: those begun by then, less those ended before it.
    open_at = np.searchsorted(begins, begins, side="right") - np.searchsorted(ends, begins, side="left")
    enough = (open_at >= need).nonzero()[0]
    if not len(enough):
        return None
    start = float(begins[enough[0]])
    in_before = before & (first_fit <= start) & (start <= last_before)
    in_after = after & ~in_before & (after_start <= start)
    began = np.where(in_before, first_fit, np.where(in_after, after_start, math.inf))
    order: Ints = np.argsort(began, kind="stable")[:need]
    stretch_end = np.where(in_before[order], last_before[order], math.inf)
    # The windows whose ends, not the room, set when these nodes open.
    return start, order, stretch_end, (in_after & (closed_until > first_fit))[order]


@dataclass(frozen=True, slots=True)
class _Made:
    """What the last first fits were made from, and what they were."""

    key: tuple[object, ...]
    arrays: NodeArrays
    refleets: int  # the arrays' then: their capacity and ratio are the same while it is
    eligible: Bools  # as handed over (read only, as every mask a pass hands the engine)
    dedicated: Floats
    serial: int  # of the kept ends' timeline they were made over
    added: Ints  # the nodes of the events that timeline held beyond the running work
    now: float
    first_fit: Floats
    reservation: Reservation | None  # what they gave, before placements took from its room
    # For a reservation that had started (its start held at `now`): the first end of work on its
    # nodes after `now`. Until the clock reaches it, its room counts the same ends.
    next_end: float = math.inf


class LastReservation:
    """Reserves as `reserve` does, keeping the last demand's first fits: while the demand, the
    eligible nodes and the nodes are the same, and the timelines come from kept running ends
    (RunningEnds, which says which nodes' ends changed), the next reservation refigures only the
    nodes whose ends, requests or capacity changed since, and work placed in either pass. The
    others' first fits stand, held at the later `now` (see _Fits.first_fits). When none changed
    and the last reservation has not started, it stands as it was: before its start the clock
    moves no node past it, and the ends up to its start are the same. When some changed, it may
    still stand (`_stands`), also once started: a blocked job whose reserved node runs work past
    its time limit waits with its start held at `now`, pass after pass. Busy fixed fleets reserve
    for the same blocked job pass after pass while a few jobs end and start."""

    def __init__(self, default_limit: float | None = None) -> None:
        self._made: _Made | None = None
        self.default_limit = default_limit  # see `reserve`'s

    def reserve(
        self, arrays: NodeArrays, demand: Demand, eligible: Bools, timeline: Timeline, now: float
    ) -> Reservation | None:
        made, key, changes = self._made, (demand.job_id, demand.key), timeline.changes
        added = timeline.added_nodes()
        # Windows (rare) move the reservation in ways the shortcuts below do not follow (a started
        # one moves when the clock passes the last start its nodes allow): it is made from the
        # first fits each time, which are kept as ever.
        windows = windows_for(arrays, demand, self.default_limit)
        dirty = None
        if (
            made is not None
            and changes is not None
            and made.key == key
            and made.arrays is arrays
            and made.refleets == arrays.refleets
            and now >= made.now
            and made.dedicated.shape == arrays.dedicated.shape
            and (changes.serial == made.serial or (changes.serial == made.serial + 1 and changes.nodes is not None))
            and (made.eligible is eligible or np.array_equal(made.eligible, eligible))
        ):
            dirty = ANY_OF(made.dedicated != arrays.dedicated, axis=0)
            dirty[made.added] = True
            dirty[added] = True
            if changes.serial != made.serial and changes.nodes is not None:
                dirty[changes.nodes] = True
            last = made.reservation
            if last is not None and last.start > now and not dirty.any() and windows is None:
                self._made = replace(made, serial=changes.serial, added=added, now=now)
                return _in_order(last, made.first_fit, now).copy()
        stands = False
        if made is not None and dirty is not None:
            at = dirty.nonzero()[0]
            first_fit = _first_fits_few(arrays, demand, eligible, now, at, timeline, made.first_fit)
            if first_fit is None:
                first_fit = _Fits(arrays, demand, eligible, now, at).first_fits(timeline, made.first_fit)
            stands = windows is None and _stands(made, dirty, first_fit, now)
        else:
            first_fit = _Fits(arrays, demand, eligible, now).first_fits(timeline)
        # Exclusive work (rare) is figured afresh over every node: a node's empty time moves with
        # any of its ends, which `dirty` follows for room only.
        first_fit = exclusive_fits(arrays, demand, eligible, now, timeline, first_fit)
        reservation: Reservation | None
        next_end = math.inf
        if made is not None and stands:
            last = reservation = made.reservation
            if last is not None and last.start <= now:  # started: its start moves with the clock
                reservation = Reservation(last.job_id, now, last.nodes, last.spare, last.held)
                next_end = made.next_end
            elif last is not None:
                reservation = _in_order(last, first_fit, now)
        else:
            reservation = _reservation(arrays, demand, timeline, first_fit, windows)
            if reservation is not None and reservation.start <= now:
                next_end = timeline.next_end(now, reservation.held)
        if changes is not None:
            self._made = _Made(
                key,
                arrays,
                arrays.refleets,
                eligible,
                arrays.dedicated.copy(),
                changes.serial,
                added,
                now,
                first_fit,
                reservation.copy() if reservation is not None else None,
                next_end,
            )
        return reservation


def _in_order(reservation: Reservation, first_fit: Floats, now: float) -> Reservation:
    """An unstarted reservation that stands, with its nodes in the order `_reservation` would give
    them now: by first fit held at `now`, ties to the lower position. The clock can bring nodes
    that first fit before the start to a tie at `now`, which changes their order (only: the nodes
    and their room are the same)."""
    nodes = reservation.nodes
    if len(nodes) < 2:
        return reservation
    order = sorted(range(len(nodes)), key=lambda k: (max(float(first_fit[nodes[k]]), now), nodes[k]))
    if order == list(range(len(nodes))):
        return reservation
    return Reservation(
        reservation.job_id, reservation.start, [nodes[k] for k in order], reservation.spare[:, order], reservation.held
    )


def _stands(made: _Made, dirty: Bools, first_fit: Floats, now: float) -> bool:
    """Whether the last reservation is the one `_reservation` would make from `first_fit`, in which
    only the `dirty` nodes were refigured (the others' are the last ones held at `now`), apart
    from a started one's start, which is `now`. None of its nodes may be dirty: their room and
    their ends are unchanged. Then
    - before its start, it stands if every dirty node first fits after the start: the reserved
      nodes still come first, at the same start, the rest after, and the ends they count are the
      same;
    - once started, when it was made (all its nodes fitting at that pass's `now`), every node
      that fits now ties at `now`, ties going to the first nodes: it stands while no node before
      its last one but its own fits now, and no end on its nodes came since (their room would
      count it). Its nodes' ends are then all counted before and now, as ties, so in the same
      order: the same sums."""
    last = made.reservation
    if last is None or last.held[dirty].any():
        return False
    if last.start > now:
        return bool((first_fit[dirty] > last.start).all())
    if last.start != made.now or made.next_end <= now:
        return False
    final = max(last.nodes)
    others_before = first_fit[:final][~last.held[:final]]
    return not len(others_before) or bool(others_before.min() > now)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
