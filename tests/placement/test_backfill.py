"""Queue order and EASY backfill on bounded capacity (Lifka 1995; Mu'alem & Feitelson 2001)."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest
from placement_helpers import NOW, job, node, placed, run_pass, running

from corral.core.index import SnapshotIndex
from corral.core.model import Attempt, AttemptState, GiB, InstanceType, Job, Resources
from corral.core.snapshot import PlacementResult
from corral.placement import backfill as backfill_module
from corral.placement.arrays import NodeArrays
from corral.placement.backfill import LastReservation, RunningEnds, Timeline, reserve
from corral.placement.demand import Demand
from corral.placement.settings import PlacementSettings

# A fixed fleet of two 8-cpu nodes (no instance types: nothing can be booted).
NODES = [node("n1", 8, 64), node("n2", 8, 64)]
RUNNING_JOBS = [job(100, time_limit=1000), job(101, time_limit=5000)]
ATTEMPTS = [
    running(1, 100, ["n1"], Resources(6, GiB), started_at=NOW - 100),  # ends at NOW + 900
    running(2, 101, ["n2"], Resources(8, GiB), started_at=NOW - 100),  # ends at NOW + 4900
]
BIG = job(1, 8, priority=10)
SHORT = job(2, 2, time_limit=500)  # ends before the big job's reservation
LONG = job(3, 2, time_limit=2000)  # would still run when it starts
ENDLESS = job(4, 2)  # no time limit


def run(queue: list[Any], **kw: Any) -> PlacementResult:
    return run_pass(NODES, queue, attempts=kw.pop("attempts", ATTEMPTS), other_jobs=RUNNING_JOBS, **kw)


def test_easy_reserves_for_the_first_blocked_job_and_backfills_what_does_not_delay_it() -> None:
    result = run([BIG, LONG, ENDLESS, SHORT])
    assert placed(result) == {2: ("n1",)}
    reservation = result.details[1]["reservation"]
    assert reservation == {"job": 1, "start": NOW + 900, "starts_in": 900.0, "nodes": ["n1"]}
    assert "reserved n1 from in 15m (EASY backfill)" in result.reasons[1]
    assert result.reasons[3].startswith("would delay job 1")
    assert result.reasons[4].startswith("would delay job 1")
    # Made afresh with SHORT among what runs (it ends before the start), the reservation is the
    # same: the jobs left waiting would meet it again next pass, with less room. Nothing to revisit
    # until the clock reaches the start (from then on, work that overruns its limit slides it).
    assert not result.revisit
    assert result.revisit_from == NOW + 900
    assert run([SHORT]).revisit_from == math.inf  # no reservation


def test_a_reservation_held_by_overrunning_work_slides_until_the_next_end() -> None:
    # The work on n1 is past its limit: taken to end now, so the reservation starts now and moves
    # with the clock; only when the clock passes another end (n2's) may it move elsewhere.
    overrun = [job(100, time_limit=50), RUNNING_JOBS[1]]
    result = run_pass(NODES, [BIG, LONG], attempts=ATTEMPTS, other_jobs=overrun)
    assert result.details[1]["reservation"]["start"] == NOW
    assert result.revisit_from == NOW + 4900
    assert run([BIG, LONG]).revisit_from == NOW + 900  # not yet started: its start


def test_a_placement_that_moves_the_reservation_asks_for_another_pass() -> None:
    # A two-node gang: n3 fits first (at +300), then n1 and n2 tie at +900; it reserves n3 and n1.
    nodes = [node("n1", 8, 64), node("n2", 8, 64), node("n3", 8, 64)]
    jobs = [job(100, time_limit=1000), job(101, time_limit=1000), job(102, time_limit=400)]
    attempts = [
        running(1, 100, ["n1"], Resources(8, GiB), started_at=NOW - 100),  # ends at +900
        running(2, 101, ["n2"], Resources(8, GiB), started_at=NOW - 100),  # ends at +900
        running(3, 102, ["n3"], Resources(6, GiB), started_at=NOW - 100),  # ends at +300
    ]
    gang = job(1, 8, nodes=2, priority=10)
    until_start = job(2, 2, time_limit=900)  # ends as the reservation starts: it may use n3
    result = run_pass(nodes, [gang, until_start], attempts=attempts, other_jobs=jobs)
    assert result.details[1]["reservation"]["nodes"] == ["n3", "n1"]
    assert placed(result) == {2: ("n3",)}
    # Afresh, n3 first fits at +900 too and loses the tie to n2: another reservation next pass.
    assert result.revisit
    # Placed before the reservation was made, the same work is in it already: nothing to revisit.
    first = job(2, 2, time_limit=900, priority=20)
    result = run_pass(nodes, [first, gang], attempts=attempts, other_jobs=jobs)
    assert placed(result) == {2: ("n3",)}
    assert result.details[1]["reservation"]["nodes"] == ["n1", "n2"]
    assert not result.revisit


def test_work_placed_only_beside_the_reservation_asks_for_no_other_pass() -> None:
    # n1 and n2 both first fit the big job at +900 (n1 reserved: ties go to the first node); n2
    # has room for a little more now. Work there only makes n2 fit later (here: no later).
    nodes = [node("n1", 8, 64), node("n2", 10, 64)]
    jobs = [job(100, time_limit=1000), job(101, time_limit=1000)]
    attempts = [
        running(1, 100, ["n1"], Resources(8, GiB), started_at=NOW - 100),  # ends at +900
        running(2, 101, ["n2"], Resources(8, GiB), started_at=NOW - 100),  # ends at +900
    ]
    big = job(1, 8, priority=10)
    beside = job(2, 2, time_limit=3000)
    result = run_pass(nodes, [big, beside], attempts=attempts, other_jobs=jobs)
    assert placed(result) == {2: ("n2",)}
    assert result.details[1]["reservation"]["nodes"] == ["n1"]
    assert not result.revisit
    # Made afresh with that work among what runs, the reservation is the same.
    after = [*attempts, running(3, 2, ["n2"], Resources(2, GiB))]
    again = run_pass(nodes, [big], attempts=after, other_jobs=[*jobs, beside])
    assert again.details[1]["reservation"] == result.details[1]["reservation"]


def test_a_job_of_a_request_held_back_is_held_back_too_until_a_placement_changes_the_nodes() -> None:
    twin = job(5, 2, time_limit=3000)  # the same request as LONG (another time limit, also too long)
    result = run([BIG, LONG, twin, SHORT, job(6, 2, time_limit=4000)])
    assert placed(result) == {2: ("n1",)}
    assert result.reasons[3].startswith("would delay job 1") and result.reasons[5].startswith("would delay job 1")
    # After SHORT's placement it is looked at again: n1 is full now.
    assert result.reasons[6].startswith("INSUFFICIENT_CPU")


def test_a_kept_reservation_yields_to_a_changed_node_that_first_fits_at_its_start_and_comes_first() -> None:
    """Two full nodes; the blocked job first fits on n2 (its work ends sooner). Then n1's work
    turns out to end at the same time: a fresh reservation takes n1 (ties go to the first node),
    so the kept one may not stand, although n1 still fits no earlier than its start."""
    arrays = NodeArrays([node("n1", 8, 64), node("n2", 8, 64)], None, PlacementSettings(), NOW)
    arrays.dedicated[0, :] = 8.0
    demand = Demand.of(job(1, 8, priority=10))
    eligible = np.ones(2, dtype=bool)
    frees = np.array([[8.0, GiB, 0.0, 0.0], [8.0, GiB, 0.0, 0.0]])

    def timeline(ends: list[float], serial: int, changed: list[int] | None) -> Timeline:
        changes = backfill_module.Changes(serial, None if changed is None else np.array(changed, dtype=np.int64))
        return Timeline(np.array(ends), np.array([0, 1], dtype=np.int64), frees, changes)

    last = LastReservation()
    first = last.reserve(arrays, demand, eligible, timeline([NOW + 600, NOW + 300], 1, None), NOW)
    assert first is not None and (first.nodes, first.start) == ([1], NOW + 300)
    later = timeline([NOW + 300, NOW + 300], 2, [0])
    kept = last.reserve(arrays, demand, eligible, later, NOW + 5)
    fresh = reserve(arrays, demand, eligible, later, NOW + 5)
    assert fresh is not None and (fresh.nodes, fresh.start) == ([0], NOW + 300)
    assert kept is not None and (kept.nodes, kept.start) == (fresh.nodes, fresh.start)


def test_a_kept_reservation_lists_its_nodes_as_a_fresh_one_once_the_clock_ties_them() -> None:
    """A gang of two reserves n2 (free at NOW + 100) and n1 (free at NOW + 200) until n3 frees at
    NOW + 900. Once the clock passes both first fits they tie at `now`, and a fresh reservation
    lists them in node order: the kept one, standing, does too, whether nothing changed or only
    n4, which first fits after the start."""
    nodes = [node("n1", 8, 64), node("n2", 8, 64), node("n3", 8, 64), node("n4", 8, 64)]
    arrays = NodeArrays(nodes, None, PlacementSettings(), NOW)
    arrays.dedicated[0, :] = 8.0
    demand = Demand.of(job(1, 8, nodes=3, priority=10))
    eligible = np.ones(4, dtype=bool)
    ends = np.array([NOW + 200, NOW + 100, NOW + 900, NOW + 2000])
    positions = np.array([0, 1, 2, 3], dtype=np.int64)
    frees = np.array([[8.0, GiB, 0.0, 0.0]] * 4)
    last = LastReservation()
    for serial, now in enumerate([NOW, NOW + 150, NOW + 300, NOW + 400], start=1):
        if now == NOW + 400:
            arrays.dedicated[0, 3] = 7.5  # n4 changed: it still first fits at NOW + 2000
        changes = backfill_module.Changes(serial, None if serial == 1 else np.zeros(0, dtype=np.int64))
        kept = last.reserve(arrays, demand, eligible, Timeline(np.maximum(ends, now), positions, frees, changes), now)
        fresh = reserve(arrays, demand, eligible, Timeline(np.maximum(ends, now), positions, frees), now)
        assert kept is not None and fresh is not None
        assert (kept.start, kept.nodes, kept.spare.tolist()) == (fresh.start, fresh.nodes, fresh.spare.tolist())
    assert kept is not None  # as asserted in the last pass; mypy does not carry it out of the loop
    assert (kept.start, kept.nodes) == (NOW + 900, [0, 1, 2])


@pytest.mark.parametrize("first_end", [NOW - 100, NOW + 100])
def test_a_kept_started_reservation_counts_the_ends_the_clock_passed_on_its_node(first_end: float) -> None:
    """Work past its time limit is taken to end now, so a blocked job's reservation starts while
    that work runs on, and moves with the clock. Kept from pass to pass, it stands while nothing
    changes, as a fresh one would be; but once the clock passes another end on its node (work
    past its limit too), that end adds to the room it leaves, as in a fresh one. The reservation
    had started when it was made (the first work overran already), or starts as the clock
    passes that work's end."""
    arrays = NodeArrays([node("n1", 16, 64), node("n2", 16, 64)], None, PlacementSettings(), NOW)
    arrays.dedicated[0, :] = [14.0, 16.0]
    demand = Demand.of(job(1, 12, priority=10))
    eligible = np.ones(2, dtype=bool)
    # n1: 12 cpu ending at `first_end`, 2 more at NOW + 150; n2: full until NOW + 5000.
    ends = np.array([first_end, NOW + 150, NOW + 5000])
    nodes = np.array([0, 0, 1], dtype=np.int64)
    frees = np.array([[12.0, GiB, 0.0, 0.0], [2.0, GiB, 0.0, 0.0], [16.0, GiB, 0.0, 0.0]])
    last = LastReservation()
    for serial, now in enumerate([NOW, NOW + 100, NOW + 120, NOW + 200, NOW + 210], start=1):
        changes = backfill_module.Changes(serial, None if serial == 1 else np.zeros(0, dtype=np.int64))
        timeline = Timeline(np.maximum(ends, now), nodes, frees, changes)
        kept = last.reserve(arrays, demand, eligible, timeline, now)
        fresh = reserve(arrays, demand, eligible, Timeline(np.maximum(ends, now), nodes, frees), now)
        assert kept is not None and fresh is not None
        assert (kept.start, kept.nodes, kept.spare.tolist()) == (fresh.start, fresh.nodes, fresh.spare.tolist())
    assert kept is not None  # as asserted in the last pass; mypy does not carry it out of the loop
    assert (kept.start, kept.nodes, kept.spare[0].tolist()) == (NOW + 210, [0], [4.0])  # both ends counted


def test_backfill_on_a_reserved_node_within_what_the_reserved_job_leaves() -> None:
    small_big = job(1, 6, priority=10)  # leaves 2 cpu free on n1 at its start
    four_free = [running(1, 100, ["n1"], Resources(4, GiB), started_at=NOW - 100), ATTEMPTS[1]]
    result = run([small_big, LONG, ENDLESS], attempts=four_free)
    assert placed(result) == {3: ("n1",)}  # LONG fits in the 2 cpu the reservation leaves
    assert result.reasons[4].startswith("would delay job 1")  # the spare is used up


def test_strict_fifo_blocks_everything_behind_the_first_blocked_job() -> None:
    result = run([BIG, SHORT], settings={"queue": {"backfill": "strict-fifo"}})
    assert placed(result) == {}
    assert result.reasons[2] == "waiting behind job 1 (strict FIFO)"


def test_no_backfill_lets_every_job_that_fits_start() -> None:
    result = run([BIG, LONG, SHORT], settings={"queue": {"backfill": "none"}})
    assert placed(result) == {3: ("n1",)}  # LONG took the room; SHORT finds none
    assert "reservation" not in result.details[1]


def test_elastic_fleet_holds_nothing_back() -> None:
    types = [InstanceType("big", 16, 128 * GiB, 1.0)]
    result = run([BIG, LONG], instance_types=types, max_instances=10)
    assert placed(result) == {3: ("n1",)}
    # At max_instances the fleet is bounded again.
    result = run([BIG, LONG], instance_types=types, max_instances=2)
    assert placed(result) == {}


def test_a_job_past_its_time_limit_ends_now_for_the_reservation() -> None:
    overrun = [
        running(1, 100, ["n1"], Resources(6, GiB), started_at=NOW - 5000),  # limit 1000: overran
        ATTEMPTS[1],
    ]
    result = run([BIG, SHORT], attempts=overrun)
    assert result.details[1]["reservation"]["start"] == NOW
    assert placed(result) == {}  # nothing ends before "now", so nothing may use n1


def test_a_job_that_can_never_run_here_reserves_nothing() -> None:
    huge = job(1, 64, priority=10)
    result = run([huge, LONG])
    assert placed(result) == {3: ("n1",)}
    assert result.reasons[1].startswith("INSUFFICIENT_CPU")


def test_running_work_without_time_limits_gives_no_reservation_unless_a_default_is_set() -> None:
    no_limits = [job(100), job(101)]
    longer = job(3, 2, time_limit=5000)
    result = run_pass(NODES, [BIG, longer], attempts=ATTEMPTS, other_jobs=no_limits)
    assert placed(result) == {3: ("n1",)}
    result = run_pass(
        NODES, [BIG, longer], attempts=ATTEMPTS, other_jobs=no_limits, settings={"queue": {"default_time_limit": "1h"}}
    )
    assert placed(result) == {}
    assert result.details[1]["reservation"]["start"] == NOW - 100 + 3600


def test_backfill_scan_depth_is_bounded() -> None:
    queue = [BIG] + [job(10 + i, 1, time_limit=100) for i in range(5)]
    result = run(queue, settings={"queue": {"max_job_test": 1}})
    assert placed(result) == {10: ("n1",)}
    assert result.reasons[11].startswith("not examined this pass")
    assert result.revisit  # the next pass looks at the next job
    nothing_placed = run(
        [BIG] + [job(10 + i, 1, time_limit=5000) for i in range(5)], settings={"queue": {"max_job_test": 1}}
    )
    assert placed(nothing_placed) == {} and not nothing_placed.revisit  # it would look at the same one


def test_gang_reservation_needs_all_its_nodes() -> None:
    gang = job(1, 8, nodes=2, priority=10)
    longest = job(5, 2, time_limit=6000)
    result = run([gang, longest, LONG])
    assert result.details[1]["reservation"]["nodes"] == ["n1", "n2"]
    assert result.details[1]["reservation"]["start"] == NOW + 4900
    assert placed(result) == {3: ("n1",)}  # LONG ends at +2000, before the gang's start; `longest` would not


# Zone "a" exists only on the fleet's nodes, so a job that needs it is bounded however elastic the
# fleet; a job without traits could get a new instance.
ZONED = [node("n1", 8, 64, zone="a"), node("n2", 8, 64, zone="a"), node("n3", 8, 64)]
CPU_TYPE = [InstanceType("cpu16", 16, 128 * GiB, 1.0)]
BIG_ZONED = job(1, 8, priority=10, traits={"zone": "a"})


def run_zoned(jobs: list[Any], **settings: Any) -> PlacementResult:
    return run_pass(
        ZONED,
        jobs,
        attempts=ATTEMPTS,
        other_jobs=RUNNING_JOBS,
        instance_types=CPU_TYPE,
        max_instances=100,
        settings={"weights": {"pack": 1.0}, **settings},
    )


def test_scan_depth_counts_only_jobs_bound_to_the_fleet() -> None:
    bounded_1 = job(2, 1, time_limit=100, traits={"zone": "a"})
    bounded_2 = job(3, 1, time_limit=100, traits={"zone": "a"})
    elastic = job(4, 1, time_limit=100)
    result = run_zoned([BIG_ZONED, bounded_1, bounded_2, elastic], queue={"max_job_test": 1})
    assert "reserved n1" in result.reasons[1]
    assert placed(result) == {2: ("n1",), 4: ("n1",)}  # both end before the reservation starts
    assert result.reasons[3].startswith("not examined this pass")


def test_strict_fifo_keeps_elastic_jobs_off_the_reserved_nodes() -> None:
    bounded = job(2, 1, time_limit=100, traits={"zone": "a"})
    elastic = job(3, 1, time_limit=100)
    result = run_zoned([BIG_ZONED, bounded, elastic], queue={"backfill": "strict-fifo"})
    assert result.reasons[2] == "waiting behind job 1 (strict FIFO)"
    assert placed(result) == {3: ("n3",)}  # not n1, which the blocked job is waiting for
    assert placed(run_zoned([BIG_ZONED, bounded, elastic], queue={"backfill": "none"})) == {2: ("n1",), 3: ("n1",)}


def test_a_strict_near_head_job_is_not_starved_by_a_stream_of_backfill_jobs() -> None:
    """A job strictly near a running target can use only the target's node, and no instance booted
    for it would do (the pass boots none for it), so it is bounded even on a fleet that can boot:
    it reserves room near the target, and jobs that would delay it keep off that node. It got no
    reservation before: 2-vcpu jobs arriving every 300 s took each bit of room the target's node
    freed, and it never found the 6 vcpus it needs there."""
    target = job(100, 2, time_limit=10**6, tags=["db"])  # runs on n1 for good
    freeing = job(101, 4, time_limit=1000)  # ends at NOW + 900
    attempts = [
        running(1, 100, ["n1"], Resources(2, GiB), started_at=NOW - 100),
        running(2, 101, ["n1"], Resources(4, GiB), started_at=NOW - 100),
    ]
    head = job(1, 6, priority=10, near=["tag:db"], strict=True, time_limit=1000)
    others = {job.id: job for job in (target, freeing)}
    queue = [head]
    started: dict[int, float] = {}
    for step in range(20):
        now = NOW + 100 * step
        if step % 3 == 0:  # a 2-vcpu job that would run beside the target for 2000 s
            queue.append(job(10 + step, 2, time_limit=2000, submitted_at=now))
        attempts = [a for a in attempts if (a.started_at or now) + (others[a.job_id].time_limit or 0) > now]
        result = run_pass(
            [node("n1", 8, 64)],
            queue,
            attempts=attempts,
            other_jobs=[others[a.job_id] for a in attempts],
            instance_types=CPU_TYPE,  # each backfill job could have an instance of its own
            max_instances=10,
            now=now,
        )
        for placement in result.placements:
            placed_job = next(j for j in queue if j.id == placement.job_id)
            queue.remove(placed_job)
            others[placed_job.id] = placed_job
            started[placed_job.id] = now
            attempts.append(
                running(
                    len(attempts) + 10 + step, placed_job.id, placement.node_ids, placed_job.resources, started_at=now
                )
            )
        if step == 0:
            assert "reserved n1 from in 15m" in result.reasons[1]
            assert result.reasons[10].startswith("would delay job 1")
    assert started[1] == NOW + 900  # as soon as the work beside the target ended


def test_a_kept_reservation_refigures_the_changed_nodes_and_reserves_as_a_fresh_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A placer's LastReservation, over the timelines of kept running ends, reserves exactly as
    `reserve` does over a timeline read afresh, through work that comes, goes and starts (gangs
    among it), requests changing on the nodes, work placed within a pass, eligible nodes, node sizes
    and the blocked job changing, and several reservations per pass; and it does refigure only part of
    the nodes most of the time. Some work, and some blocked jobs, are exclusive (--exclusive)."""
    rng, sizes, alone = random.Random(5), random.Random(6), random.Random(7)
    settings = PlacementSettings()
    nodes = [node(f"n{i}", 16, 64) for i in range(6)]
    arrays = NodeArrays(nodes, None, settings, NOW)
    world, kept, last = SnapshotIndex(), RunningEnds(default_limit=900.0), LastReservation()
    jobs: dict[int, Job] = {}
    attempts: dict[int, Attempt] = {}
    blocked = [Demand.of(job(1000, 12, 8, priority=10)), Demand.of(job(1001, 8, 4, nodes=3, priority=10))]
    exclusive = [Demand.of(job(1002, 2, 2, priority=10, exclusive=True))]
    with_exclusive = 0
    partial = found = 0
    original = backfill_module._Fits.first_fits

    def counted(self: Any, timeline: Timeline, kept_fits: Any = None) -> Any:
        nonlocal partial
        partial += self.at is not None and len(self.at) < len(kept_fits)
        return original(self, timeline, kept_fits)

    monkeypatch.setattr(backfill_module._Fits, "first_fits", counted)
    figured = as_it_was = 0
    original_init = backfill_module._Fits.__init__

    def init(self: Any, *args: Any) -> None:
        nonlocal figured
        figured += 1
        original_init(self, *args)

    monkeypatch.setattr(backfill_module._Fits, "__init__", init)
    original_few = backfill_module._first_fits_few

    def few(*args: Any) -> Any:  # the same refiguring, of a few nodes, on Python floats
        nonlocal partial, figured
        answer = original_few(*args)
        if answer is not None:
            figured += 1
            partial += len(args[4]) < len(answer)
        return answer

    monkeypatch.setattr(backfill_module, "_first_fits_few", few)
    stood = stood_started = 0
    original_stands = backfill_module._stands

    def stands(made: Any, dirty: Any, first_fit: Any, now: float) -> bool:
        nonlocal stood, stood_started
        answer: bool = original_stands(made, dirty, first_fit, now)
        stood += answer
        stood_started += answer and made.reservation.start <= now
        return answer

    monkeypatch.setattr(backfill_module, "_stands", stands)
    now, next_id, compared = NOW, 1, 0
    for _ in range(300):
        now += rng.choice([0.0, 5.0, 60.0])
        for _ in range(rng.choice([0, 1, 2])):
            what = rng.random()
            if what < 0.45 or not attempts:
                j = job(
                    next_id,
                    rng.choice([2, 4, 6]),
                    rng.choice([2, 8]),
                    time_limit=rng.choice([None, 120, 600, 600, 3600]),
                )
                j.exclusive = alone.random() < 0.2
                jobs[j.id] = j
                on = rng.sample([n.id for n in nodes], rng.choice([1, 1, 1, 2]))
                a = running(next_id, j.id, on, j.resources, started_at=None if rng.random() < 0.3 else now)
                a.assigned_at = now - rng.choice([0.0, 300.0])  # its start moves its end
                attempts[a.id] = a
                world.put_attempt(a)
                next_id += 1
            elif what < 0.7:
                world.drop_attempt(attempts.pop(rng.choice(list(attempts))).id)
            else:
                waiting = [a for a in attempts.values() if a.started_at is None]
                if waiting:
                    started = rng.choice(waiting)
                    started.state, started.started_at = AttemptState.RUNNING, now
                    world.put_attempt(started)
        # The requests on the nodes, as the ledger keeps them; now and then as they were (the
        # ends and the requests are separate inputs: work that ends as other work takes its
        # place, or starts, changes only the ends).
        if rng.random() < 0.6:
            arrays.dedicated[:] = 0.0
            arrays.jobs[:] = 0.0
            arrays.exclusive_jobs[:] = 0
            for a in attempts.values():
                for node_id in a.node_ids:
                    arrays.dedicated[0, arrays.index[node_id]] += a.resources.vcpus
                    arrays.jobs[arrays.index[node_id]] += 1
                    arrays.exclusive_jobs[arrays.index[node_id]] += jobs[a.job_id].exclusive
            arrays.any_exclusive = bool(arrays.exclusive_jobs.any())
        if sizes.random() < 0.03:  # a node slot takes a node of another size (the roster refleets)
            i = sizes.randrange(arrays.n)
            arrays.capacity[0, i] = sizes.choice([12.0, 16.0, 24.0])
            arrays.refleet([i])
        if rng.random() < 0.2:
            continue  # no reservation this pass: changes pile up
        listed = list(world.attempts.values())
        timeline = kept.timeline(arrays.index, listed, jobs, now, world)
        fresh = Timeline.of_running(arrays, listed, jobs, now, 900.0)
        for _ in range(rng.choice([1, 1, 2])):  # a pass may reserve more than once
            demand = blocked[0] if rng.random() < 0.8 else blocked[1]
            if alone.random() < 0.1:
                demand = exclusive[0]
            with_exclusive += demand.exclusive or arrays.any_exclusive
            eligible = np.ones(arrays.n, dtype=bool)
            if rng.random() < 0.1:
                eligible[rng.randrange(arrays.n)] = False
            before = figured
            got = last.reserve(arrays, demand, eligible, timeline, now)
            as_it_was += figured == before
            want = reserve(arrays, demand, eligible, fresh, now)
            assert (got is None) == (want is None)
            if got is not None and want is not None:
                assert (got.start, got.nodes, got.spare.tolist()) == (want.start, want.nodes, want.spare.tolist())
            # Every node's first fit, not only the few that make the reservation.
            assert last._made is not None
            kept_fits = np.maximum(last._made.first_fit, now)  # held at the later `now`, as used
            fits = backfill_module._Fits(arrays, demand, eligible, now).first_fits(fresh)
            assert np.array_equal(kept_fits, backfill_module.exclusive_fits(arrays, demand, eligible, now, fresh, fits))
            compared += 1
            found += got is not None
            # Work placed later in the pass (now and then none): on the timeline, and on the nodes.
            if rng.random() < 0.3:
                continue
            placed_on = rng.randrange(arrays.n)
            end, frees = now + rng.choice([30.0, 300.0]), (4.0, 1024.0, 0.0, 0.0)
            timeline.add(end, placed_on, frees)
            fresh.add(end, placed_on, frees)
            if rng.random() < 0.5:
                arrays.dedicated[0, placed_on] += 4.0
                arrays.jobs[placed_on] += 1
    assert compared > 250
    assert with_exclusive > 100
    assert found > 150
    assert partial > 100  # the kept first fits were used
    assert as_it_was > 10  # and the reservation as it was, nothing having changed
    assert stood > 10  # or no node that changed coming before its start
    assert stood_started > 10  # or, started, no node before its last one fitting since


def test_first_fits_of_a_few_refigured_nodes_on_python_floats_are_numpys_to_the_bit() -> None:
    # Fractional requests and frees, so that rounding would show: the running sums run on across
    # the nodes in both.
    rng = random.Random(11)
    nodes = [node(f"n{i}", 8, 64) for i in range(12)]
    arrays = NodeArrays(nodes, None, PlacementSettings(), NOW)
    compared = waited = 0
    for _ in range(300):
        arrays.dedicated[:2] = [[rng.choice([0.0, 0.3, 2.7, 5.1, 8.0]) for _ in nodes] for _ in range(2)]
        arrays.dedicated[1] *= 1024.0
        timeline = Timeline()
        for _ in range(rng.randrange(0, 40)):
            frees = (rng.choice([0.1, 0.7, 1.3, 2.0]), rng.choice([0.0, 100.3, 512.0]), 0.0, 0.0)
            timeline.add(NOW + rng.choice([-5.0, 60.0, 60.0, 300.0, 900.0]), rng.randrange(len(nodes)), frees)
        request = Resources(rng.choice([0.5, 2.2, 4.0, 7.9]), int(rng.choice([0.1, 1.0, 2.5]) * GiB))
        demand = Demand.of(job(1, request.vcpus, request.ram_mib / GiB))
        eligible = np.array([rng.random() < 0.9 for _ in nodes])
        kept = np.array([rng.choice([NOW - 10.0, NOW + 60.0, math.inf]) for _ in nodes])
        at = np.array(sorted(rng.sample(range(len(nodes)), rng.randrange(1, 5))), dtype=np.int64)
        few = backfill_module._first_fits_few(arrays, demand, eligible, NOW, at, timeline, kept)
        if few is None:
            continue  # too many ends on them: the vectorised work does it
        vectorised = backfill_module._Fits(arrays, demand, eligible, NOW, at).first_fits(timeline, kept)
        assert np.array_equal(few, vectorised)
        compared += 1
        waited += bool(np.isfinite(few[at]).any() and (few[at] > NOW).any())
    assert compared > 200 and waited > 50


def test_an_exclusive_head_job_reserves_a_node_from_when_it_is_empty_and_shares_it_with_no_later_job() -> None:
    """Slurm's --exclusive at the head of the queue: its node must be empty, so the reservation
    starts when the last work on it ends (not when there is room), and a later job may use the
    reserved node only if it ends before then, not in what the exclusive job leaves free."""
    nodes = [node("n1", 8, 64), node("n2", 8, 64)]
    others = [job(100, time_limit=1000), job(101, time_limit=2100), job(102, time_limit=5000)]
    attempts = [
        running(1, 100, ["n1"], Resources(2, GiB), started_at=NOW - 100),  # ends at +900
        running(2, 101, ["n1"], Resources(1, GiB), started_at=NOW - 100),  # ends at +2000
        running(3, 102, ["n2"], Resources(8, GiB), started_at=NOW - 100),  # ends at +4900
    ]
    alone = job(1, 1, priority=10, exclusive=True)
    short = job(2, 1, time_limit=1500)  # ends at +1500, before the start
    long = job(3, 1, time_limit=3000)  # runs past the start
    result = run_pass(nodes, [alone, short, long], attempts=attempts, other_jobs=others)
    assert 1 not in placed(result)  # n1 has room for it, but runs other jobs
    assert result.details[1]["reservation"]["nodes"] == ["n1"]
    assert result.details[1]["reservation"]["start"] == NOW + 2000
    assert placed(result) == {2: ("n1",)}
    assert result.reasons[3].startswith("would delay job 1")
    # Not exclusive, it would start now on n1 beside the running work.
    result = run_pass(nodes, [job(1, 1, priority=10), short, long], attempts=attempts, other_jobs=others)
    assert placed(result)[1] == ("n1",)


def test_a_node_running_an_exclusive_job_has_no_room_for_others_until_it_is_empty() -> None:
    nodes = [node("n1", 8, 64), node("n2", 8, 64)]
    others = [job(100, time_limit=3100, exclusive=True), job(101, time_limit=1000)]
    attempts = [
        running(1, 100, ["n1"], Resources(1, GiB), started_at=NOW - 100),  # exclusive, ends at +3000
        running(2, 101, ["n2"], Resources(8, GiB), started_at=NOW - 100),  # ends at +900
    ]
    big = job(1, 4, priority=10)
    result = run_pass(nodes, [big], attempts=attempts, other_jobs=others)
    assert placed(result) == {}
    # n1's 7 free vCPUs are no room for it before +3000: n2 frees first.
    assert result.details[1]["reservation"]["nodes"] == ["n2"]
    assert result.details[1]["reservation"]["start"] == NOW + 900


def test_an_exclusive_job_does_not_backfill_onto_a_reserved_node_it_would_hold_past_the_start() -> None:
    # A gang of two 4-vCPU nodes reserves n1 (empty now) and n2 (free at +900): 4 vCPUs of n1 stay
    # spare, which a plain job may use; an exclusive job there would keep the gang off n1.
    nodes = [node("n1", 8, 64), node("n2", 8, 64)]
    others = [job(100, time_limit=1000)]
    attempts = [running(1, 100, ["n2"], Resources(8, GiB), started_at=NOW - 100)]  # ends at +900
    gang = job(1, 4, nodes=2, priority=10)
    result = run_pass(nodes, [gang, job(2, 1, time_limit=2000, exclusive=True)], attempts=attempts, other_jobs=others)
    assert result.details[1]["reservation"]["start"] == NOW + 900
    assert placed(result) == {}
    assert result.reasons[2].startswith("would delay job 1")
    result = run_pass(nodes, [gang, job(2, 1, time_limit=2000)], attempts=attempts, other_jobs=others)
    assert placed(result) == {2: ("n1",)}
    # Ending before the start, it may.
    result = run_pass(nodes, [gang, job(2, 1, time_limit=500, exclusive=True)], attempts=attempts, other_jobs=others)
    assert placed(result) == {2: ("n1",)}
