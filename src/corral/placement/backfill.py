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

import bisect
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from corral.core.model import Attempt, Job
from corral.placement.arrays import EPSILON, Bools, Floats, NodeArrays
from corral.placement.availability import as_vector
from corral.placement.demand import Demand


def end_time(start: float, limit: float | None, default_limit: float | None, now: float) -> float:
    chosen = limit if limit is not None else default_limit
    if chosen is None:
        return math.inf
    return max(start + chosen, now)


class Timeline:
    """Ends of running work, kept sorted by time (bisect.insort), with what each end frees."""

    def __init__(self) -> None:
        self._ends: list[tuple[float, int, int]] = []  # (end, sequence, node index)
        self._frees: list[Floats] = []

    def add(self, end: float, node: int, frees: Floats) -> None:
        if math.isinf(end):
            return  # never frees anything within any horizon a reservation could use
        bisect.insort(self._ends, (end, len(self._frees), node))
        self._frees.append(frees)

    def events(self) -> Iterator[tuple[float, int, Floats]]:
        """(end, node, what it frees), earliest first."""
        for end, seq, node in self._ends:
            yield end, node, self._frees[seq]

    def __len__(self) -> int:
        return len(self._ends)

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
            frees = as_vector(attempt.resources)
            for node_id in attempt.node_ids:
                i = arrays.index.get(node_id)
                if i is not None:
                    timeline.add(end, i, frees)
        return timeline


@dataclass(slots=True)
class Reservation:
    job_id: int
    start: float
    nodes: list[int]
    spare: dict[int, Floats] = field(default_factory=dict)  # room left on each reserved node at `start`

    def holds_back(self, arrays: NodeArrays, vector: Floats, end: float) -> Bools | None:
        """Nodes a job (request `vector`, ending at `end`) may not use without delaying the
        reservation; None when it may use all."""
        if end <= self.start:
            return None
        blocked = [i for i in self.nodes if not bool(np.all(vector <= self.spare[i] + EPSILON))]
        if not blocked:
            return None
        mask = np.zeros(arrays.n, dtype=bool)
        mask[blocked] = True
        return mask

    def take(self, nodes: Iterable[int], vector: Floats, end: float) -> None:
        if end <= self.start:
            return
        for i in nodes:
            if i in self.spare:
                self.spare[i] = self.spare[i] - vector

    def describe(self, arrays: NodeArrays, now: float) -> str:
        where = ", ".join(arrays.ids[i] for i in self.nodes[:5]) + (" ..." if len(self.nodes) > 5 else "")
        when = "now" if self.start <= now else f"in {_duration(self.start - now)}"
        return f"reserved {where} from {when} (EASY backfill)"


def reserve(arrays: NodeArrays, demand: Demand, eligible: Bools, timeline: Timeline, now: float) -> Reservation | None:
    """The earliest reservation for `demand` on `eligible` nodes, or None if running work never
    frees enough (work without a time limit never ends, for this purpose)."""
    need = demand.node_count
    wanted = demand.vector > 0
    ceiling = arrays.capacity * arrays.ratio[:, None]
    projected = np.minimum(ceiling - arrays.dedicated, ceiling)

    def fits(i: int) -> bool:
        return bool(np.all(projected[wanted, i] >= demand.vector[wanted] - EPSILON))

    ready = eligible & np.all(projected[wanted] >= (demand.vector[wanted] - EPSILON)[:, None], axis=0)
    chosen = [int(i) for i in np.flatnonzero(ready)[:need]]
    start = now
    if len(chosen) < need:
        for end, node, frees in timeline.events():
            if not eligible[node]:
                continue
            projected[:, node] = np.minimum(projected[:, node] + frees, ceiling[:, node])
            if not ready[node] and fits(node):
                ready[node] = True
                chosen.append(node)
                if len(chosen) >= need:
                    start = max(end, now)
                    break
        else:
            return None
    spare = {i: projected[:, i] - demand.vector for i in chosen}
    return Reservation(demand.job_id, start, chosen, spare)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
