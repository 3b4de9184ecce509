"""EASY backfill's reservation around admin reservations that hold nodes for a while only
(maintenance windows: a reservation that starts later, or one that ends)."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest
from placement_helpers import NOW, job, node, placed, run_pass, running

from corral.core.index import SnapshotIndex
from corral.core.model import Attempt, GiB, Job, Node, Resources
from corral.core.snapshot import PlacementResult
from corral.placement.arrays import NodeArrays
from corral.placement.backfill import LastReservation, RunningEnds, Timeline, Windows, _open_start, reserve
from corral.placement.demand import Demand
from corral.placement.settings import PlacementSettings

RUNNING_JOBS = [job(100, time_limit=1000), job(101, time_limit=5000)]


def attempts(n2_busy: float) -> list[Attempt]:
    return [
        running(1, 100, ["n1"], Resources(6, GiB), started_at=NOW - 100),  # ends at NOW + 900
        running(2, 101, ["n2"], Resources(n2_busy, GiB), started_at=NOW - 100),  # ends at NOW + 4900
    ]


def window(start: float | None, until: float | None, name: str = "maint") -> dict[str, str]:
    attributes = {"reservation": name}
    if start is not None:
        attributes["reservation_start"] = str(NOW + start)
    if until is not None:
        attributes["reservation_until"] = str(NOW + until)
    return attributes


def run(n1: dict[str, str], queue: list[Job], n2_busy: float = 6, **kw: Any) -> PlacementResult:
    nodes = [node("n1", 8, 64, **n1), node("n2", 8, 64)]
    return run_pass(nodes, queue, attempts=attempts(n2_busy), other_jobs=RUNNING_JOBS, **kw)


def reservation(result: PlacementResult, job_id: int = 1) -> tuple[float, list[str]]:
    found = result.details[job_id]["reservation"]
    return found["start"] - NOW, found["nodes"]


BIG = job(1, 8, priority=10, time_limit=2500)  # n1 fits it from +900, n2 from +4900


def test_the_reserved_start_moves_past_a_window_the_job_would_run_into() -> None:
    assert reservation(run({}, [BIG])) == (900, ["n1"])
    # Started at +900, it would run until +3400, into n1's window (+3000 to +9000): n2 comes first.
    result = run(window(3000, 9000), [BIG])
    assert reservation(result) == (4900, ["n2"])
    assert "reserved n2 from in 82m (EASY backfill)" in result.reasons[1]
    # A shorter window ends before n2 frees: n1 from its end, and the reason says why then.
    result = run(window(3000, 4000), [BIG])
    assert reservation(result) == (4000, ["n1"])
    assert "reserved n1 from in 67m, after admin reservation maint ends (EASY backfill)" in result.reasons[1]
    assert result.revisit_from == NOW + 4000


def test_a_window_that_starts_after_the_job_would_end_changes_nothing() -> None:
    assert reservation(run(window(3400, 9000), [BIG])) == (900, ["n1"])  # it ends right at the start


def test_a_job_without_a_time_limit_counts_a_window_node_only_after_the_window() -> None:
    endless = job(1, 8, priority=10)
    assert reservation(run(window(3000, 6000), [endless])) == (4900, ["n2"])
    assert reservation(run(window(3000, 4000), [endless])) == (4000, ["n1"])
    # A window without an end: n1 never comes back, whatever n2's end.
    assert reservation(run(window(3000, None), [endless])) == (4900, ["n2"])
    # The default time limit is what placement takes it to run for: it ends before the window.
    with_default = run(window(3000, 9000), [endless], settings={"queue": {"default_time_limit": 1000}})
    assert reservation(with_default) == (900, ["n1"])


def test_a_window_that_has_started_counts_its_node_from_its_end() -> None:
    # Held by the reservation now (until +2000): n1 takes no other job until then, but from then on.
    result = run(window(None, 2000), [BIG])
    assert reservation(result) == (2000, ["n1"])
    assert "after admin reservation maint ends" in result.reasons[1]
    # Without an end it is never n1.
    assert reservation(run(window(None, None), [BIG])) == (4900, ["n2"])


def test_a_job_of_the_reservation_itself_is_not_kept_out_by_its_window() -> None:
    own = job(1, 8, priority=10, time_limit=2500, reservation="maint")
    assert reservation(run(window(3000, 9000), [own])) == (900, ["n1"])
    assert reservation(run(window(None, 9000), [own])) == (900, ["n1"])
    # Another reservation's window still closes n1 to it.
    other = job(1, 8, priority=10, time_limit=2500, reservation="team-a")
    nodes = [node("n1", 8, 64, **window(3000, 9000)), node("n2", 8, 64, reservation="team-a")]
    result = run_pass(nodes, [other], attempts=attempts(6), other_jobs=RUNNING_JOBS)
    assert reservation(result) == (4900, ["n2"])


def test_backfill_around_a_window() -> None:
    # n2 is full until +4900. Before, the reservation was n1's at +900 (a start that could not
    # happen), which held back a short job that only n1 had room for; the reservation is n2's now,
    # and the short job runs on n1, ending (+2000) before its window (+3000).
    short = job(3, 2, time_limit=2000)
    result = run(window(3000, 9000), [BIG, short], n2_busy=8)
    assert reservation(result) == (4900, ["n2"])
    assert placed(result) == {3: ("n1",)}
    # A job that would run past n2's start (+6000) is held back from n2 (before, it would have
    # started there and delayed the big job's real start); n1's window keeps it off n1.
    long = job(5, 2, time_limit=6000)
    result = run(window(3000, 9000), [BIG, long])
    assert placed(result) == {}
    assert result.reasons[5] == "would delay job 1, which has reserved n2 from in 82m (EASY backfill)"
    # One that ends by n2's start may take n2's room.
    fits_before = job(6, 2, time_limit=4000)
    assert placed(run(window(3000, 9000), [BIG, fits_before])) == {6: ("n2",)}


def test_a_started_reservation_moves_when_the_clock_passes_the_last_start_a_window_allows() -> None:
    # n1's work is past its limit (taken to end now): reserved now on n1, whose window starts at
    # +3000, so only until +500; the next pass is then, not at n2's end.
    overrun = [job(100, time_limit=50), RUNNING_JOBS[1]]
    nodes = [node("n1", 8, 64, **window(3000, 9000)), node("n2", 8, 64)]
    result = run_pass(nodes, [BIG], attempts=attempts(6), other_jobs=overrun)
    assert reservation(result) == (0, ["n1"])
    assert result.revisit_from == NOW + 500
    later = run_pass(nodes, [BIG], attempts=attempts(6), other_jobs=overrun, now=NOW + 600)
    assert later.details[1]["reservation"]["nodes"] == ["n2"]


def test_a_gang_needs_all_its_nodes_open_at_once() -> None:
    # Node 0 is open for this job from +100 until +1000 (window at +2000, limit 1000); node 1
    # fits from +1100 (too late to overlap); node 2 from +1000 (just in time).
    first_fit = np.array([100.0, 1100.0, 1000.0])
    closed = Windows(np.array([2000.0, math.inf, math.inf]), np.array([5000.0, math.inf, math.inf]), 1000.0)
    opened = _open_start(first_fit, closed, 2)
    assert opened is not None
    start, order, stretch_end, after = opened
    assert (start, order.tolist(), stretch_end.tolist(), after.tolist()) == (
        1000.0,
        [0, 2],
        [1000.0, math.inf],
        [False, False],
    )
    # Node 2 fits a little later: node 0 is closed by then, so nodes 2 and 1 from +1100.
    first_fit[2] = 1001.0
    opened = _open_start(first_fit, closed, 2)
    assert opened is not None and (opened[0], opened[1].tolist()) == (1100.0, [2, 1])


def brute_open_start(first_fit: list[float], closed: Windows, need: int) -> float | None:
    """The earliest start at which `need` nodes fit and stay open for the run, tried at every
    time a node may open."""
    duration = closed.duration

    def open_at(i: int, t: float) -> bool:
        if not t >= first_fit[i]:
            return False
        ends_before = closed.closed_from[i] == math.inf or t + duration <= closed.closed_from[i]
        return bool(ends_before or t >= closed.closed_until[i])

    times = sorted({*first_fit, *(max(f, u) for f, u in zip(first_fit, closed.closed_until, strict=True))})
    for t in times:
        if math.isfinite(t) and sum(open_at(i, t) for i in range(len(first_fit))) >= need:
            return t
    return None


@pytest.mark.parametrize("seed", range(3))
def test_the_open_start_is_the_earliest_time_enough_nodes_are_open(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(300):
        n = rng.randint(1, 6)
        first_fit = [rng.choice([0.0, 100.0, 500.0, 900.0, 1500.0, math.inf]) for _ in range(n)]
        closed_from, closed_until = [], []
        for _ in range(n):
            kind = rng.random()
            if kind < 0.4:
                closed_from.append(math.inf)
                closed_until.append(math.inf)
            else:
                start = -math.inf if kind < 0.55 else rng.choice([200.0, 600.0, 1000.0, 2000.0])
                closed_from.append(start)
                closed_until.append(rng.choice([max(start, 0.0) + 500.0, max(start, 0.0) + 3000.0, math.inf]))
        closed = Windows(np.array(closed_from), np.array(closed_until), rng.choice([100.0, 400.0, 1000.0, math.inf]))
        need = rng.randint(1, 3)
        opened = _open_start(np.array(first_fit), closed, need)
        want = brute_open_start(first_fit, closed, need)
        assert (opened[0] if opened is not None else None) == want
        if opened is not None:
            start, order, stretch_end, _ = opened
            assert len(set(order.tolist())) == need
            assert all(start >= first_fit[i] for i in order.tolist())
            assert all(start <= end for end in stretch_end.tolist())


def test_a_kept_reservation_with_windows_reserves_as_a_fresh_one() -> None:
    """A placer's LastReservation reserves as `reserve` does over a fresh timeline on a fleet with
    windows (started ones, ones to come, one of the blocked job's own), as work comes and goes and
    the clock moves past the windows' last starts."""
    rng = random.Random(11)
    settings = PlacementSettings()
    nodes: list[Node] = [
        node("n0", 16, 64, **window(1500, 4000)),
        node("n1", 16, 64, **window(None, 2500)),
        node("n2", 16, 64, **window(800, None, name="team-a")),
        node("n3", 16, 64),
        node("n4", 16, 64, **window(3000, 3600)),
    ]
    arrays = NodeArrays(nodes, None, settings, NOW)
    world, kept, last = SnapshotIndex(), RunningEnds(default_limit=900.0), LastReservation(default_limit=900.0)
    blocked = [
        Demand.of(job(1000, 12, 8, priority=10, time_limit=600)),
        Demand.of(job(1001, 8, 4, nodes=2, priority=10)),
        Demand.of(job(1002, 12, 8, priority=10, time_limit=1200, reservation="team-a")),
    ]
    jobs: dict[int, Job] = {}
    live: dict[int, Attempt] = {}
    now, next_id, found = NOW, 1, 0
    for _ in range(120):
        now += rng.choice([0.0, 30.0, 120.0])
        if rng.random() < 0.5 or not live:
            j = job(next_id, rng.choice([4, 8]), 2, time_limit=rng.choice([None, 300, 1200]))
            jobs[j.id] = j
            a = running(next_id, j.id, [rng.choice(nodes).id], j.resources, started_at=now)
            live[a.id] = a
            world.put_attempt(a)
            next_id += 1
        else:
            world.drop_attempt(live.pop(rng.choice(list(live))).id)
        arrays.dedicated[:] = 0.0
        for a in live.values():
            arrays.dedicated[0, arrays.index[a.node_ids[0]]] += a.resources.vcpus
        listed = list(world.attempts.values())
        timeline = kept.timeline(arrays.index, listed, jobs, now, world)
        fresh = Timeline.of_running(arrays, listed, jobs, now, 900.0)
        demand = rng.choice(blocked)
        eligible = np.ones(arrays.n, dtype=bool)
        got = last.reserve(arrays, demand, eligible, timeline, now)
        want = reserve(arrays, demand, eligible, fresh, now, default_limit=900.0)
        assert (got is None) == (want is None)
        if got is not None and want is not None:
            assert (got.start, got.nodes, got.spare.tolist(), got.after_windows, got.open_until) == (
                want.start,
                want.nodes,
                want.spare.tolist(),
                want.after_windows,
                want.open_until,
            )
            found += 1
    assert found > 80
