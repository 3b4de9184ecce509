"""Queue order and EASY backfill on bounded capacity (Lifka 1995; Mu'alem & Feitelson 2001)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from placement_helpers import NOW, job, node, placed, run_pass, running

from corral.core.model import GiB, InstanceType, Resources
from corral.core.snapshot import PlacementResult
from corral.placement import backfill as backfill_module
from corral.placement.arrays import NodeArrays
from corral.placement.backfill import LastReservation, Reservation, Timeline, reserve
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


def test_queue_order_by_submit_time_ignores_priority() -> None:
    nodes = [node("only", 2, 8)]
    early, urgent = job(1, 2, submitted_at=1.0), job(2, 2, priority=100, submitted_at=2.0)
    # The placer gets the queue in priority order; `order: submit` re-sorts it by submission.
    assert placed(run_pass(nodes, [urgent, early])) == {2: ("only",)}
    assert placed(run_pass(nodes, [urgent, early], settings={"queue": {"order": "submit"}})) == {1: ("only",)}


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


def test_a_reservation_made_again_only_while_what_it_was_made_from_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """A placer gives its last reservation again at a later pass while the job, the requests on
    the nodes and the running work's ends are unchanged; a request added on a reserved node (work
    without a time limit, backfilled into what the reserved job leaves) is seen."""
    settings = PlacementSettings()
    arrays = NodeArrays(NODES, None, settings, NOW)
    arrays.dedicated[0, :] = [6.0, 8.0]  # what ATTEMPTS hold
    timeline = Timeline.of_running(arrays, ATTEMPTS, {j.id: j for j in RUNNING_JOBS}, NOW, None)
    demand = Demand.of(job(1, 6, priority=10))
    eligible = np.ones(2, dtype=bool)
    last = LastReservation()
    made: list[float] = []

    def counted(*args: Any) -> Reservation | None:
        made.append(args[-1])
        return reserve(*args)

    monkeypatch.setattr(backfill_module, "reserve", counted)

    def same(a: Reservation | None, b: Reservation | None) -> bool:
        assert a is not None and b is not None
        return (a.start, a.nodes, a.spare.tolist()) == (b.start, b.nodes, b.spare.tolist())

    first = last.reserve(arrays, demand, eligible, timeline, NOW)
    assert same(first, reserve(arrays, demand, eligible, timeline, NOW)) and first is not None
    assert first.spare[0].tolist() == [2.0]  # n1 has 2 cpu left at the reserved start
    first.take([0], np.array([1.0, 0.0, 0.0, 0.0]), float("inf"))  # a pass takes from it...
    again = last.reserve(arrays, demand, eligible, timeline, NOW + 10)
    assert same(again, reserve(arrays, demand, eligible, timeline, NOW + 10))  # ...not from the next
    assert again is not None
    again.take([0], np.array([1.0, 0.0, 0.0, 0.0]), float("inf"))
    third = last.reserve(arrays, demand, eligible, timeline, NOW + 15)
    assert same(third, reserve(arrays, demand, eligible, timeline, NOW + 15))
    arrays.dedicated[0, 0] += 2.0  # work without a time limit backfilled on n1
    changed = last.reserve(arrays, demand, eligible, timeline, NOW + 20)
    assert same(changed, reserve(arrays, demand, eligible, timeline, NOW + 20))
    assert changed is not None and changed.spare[0].tolist() == [0.0]
    assert made == [NOW, NOW + 20]  # made afresh only when something changed
