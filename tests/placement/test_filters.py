"""Each hard filter on a fleet small enough that the right answer is obvious."""

from __future__ import annotations

from placement_helpers import NOW, job, node, only, placed, run_pass, running

from corral.core.model import GiB, NodeState, Resources
from corral.core.snapshot import PlacementResult
from corral.placement.settings import FILTER_NAMES


def reason(result: PlacementResult, job_id: int) -> str:
    return str(result.reasons[job_id])


def test_state_only_idle_and_busy_nodes_that_are_not_held() -> None:
    nodes = [
        node("draining", state=NodeState.DRAINING),
        node("booting", state=NodeState.BOOTING),
        node("held", held="true"),
        node("ok", state=NodeState.BUSY),
    ]
    result = run_pass(nodes, [job(1)])
    assert placed(result) == {1: ("ok",)}
    result = run_pass(nodes[:3], [job(1)])
    assert reason(result, 1).startswith("NODE_NOT_SCHEDULABLE")
    assert "1 draining" in reason(result, 1) and "1 held" in reason(result, 1)


def test_reserved_and_head_nodes_take_no_work() -> None:
    nodes = [node("head", role="head"), node("res", reserved="true"), node("worker", ram_gib=8)]
    assert placed(run_pass(nodes, [job(1)], settings=only(spread=1))) == {1: ("worker",)}
    assert placed(run_pass(nodes, [job(1)], settings={"blocked_roles": []})) != {}


def test_admin_reservation_admits_only_its_jobs_until_it_ends() -> None:
    nodes = [node("maint", reservation="maint"), node("other", reservation="bench", reservation_until=str(NOW - 1))]
    result = run_pass(nodes[:1], [job(1), job(2, reservation="maint")])
    assert placed(result) == {2: ("maint",)}
    assert reason(result, 1).startswith("ADMIN_RESERVATION")
    # A reservation past its end no longer holds.
    assert placed(run_pass(nodes[1:], [job(3)])) == {3: ("other",)}


def test_a_reservation_that_starts_later_takes_until_then_only_jobs_that_end_by_then() -> None:
    """Slurm's maintenance window: before a reservation's StartTime its nodes run only the jobs
    whose time limit ends by then (and the reservation's own); from then on, only its own."""
    start = NOW + 3600
    nodes = [node("maint", reservation="maint", reservation_start=str(start), reservation_until=str(start + 7200))]
    jobs = [
        job(1, time_limit=1800.0),
        job(2, time_limit=7200.0),
        job(3),  # no time limit: it could run into the window
        job(4, time_limit=7200.0, reservation="maint"),
    ]
    result = run_pass(nodes, jobs, settings=only(spread=1))
    assert placed(result) == {1: ("maint",), 4: ("maint",)}
    assert reason(result, 2).startswith("RESERVATION_STARTS")
    assert "it could run until" in reason(result, 2) and "maint at " in reason(result, 2)
    assert "it has no time limit" in reason(result, 3)
    # Once it has started, only its own jobs.
    result = run_pass(nodes, jobs, now=start + 1, settings=only(spread=1))
    assert placed(result) == {4: ("maint",)}
    assert reason(result, 1).startswith("ADMIN_RESERVATION")


def test_blocking_category() -> None:
    nodes = [node("broken", category=["hardware-failure"]), node("fine", category="benchmarked-ok")]
    result = run_pass(nodes, [job(1), job(2)], settings=only(spread=1))
    assert set(placed(result).values()) == {("fine",)}


def test_max_jobs_per_node_from_attribute_or_setting() -> None:
    nodes = [node("a", max_jobs="1"), node("b")]
    result = run_pass(nodes, [job(i) for i in range(1, 4)], settings={"max_jobs_per_node": 1, **only(pack=1)})
    assert sorted(placed(result).values()) == [("a",), ("b",)]
    assert reason(result, 3).startswith("MAX_JOBS_REACHED")


def test_capness_keeps_capped_and_uncapped_apart() -> None:
    nodes = [node("runs-capped"), node("runs-uncapped"), node("pinned-capped", capped="true")]
    capped_job = job(100, cpu_capped=True)
    attempts = [
        running(1, 100, ["runs-capped"], Resources(1, GiB)),
        running(2, 101, ["runs-uncapped"], Resources(1, GiB)),
    ]
    others = [capped_job, job(101)]
    result = run_pass(nodes, [job(1), job(2)], attempts=attempts, other_jobs=others)
    assert placed(result) == {1: ("runs-uncapped",), 2: ("runs-uncapped",)}
    result = run_pass(nodes, [job(3, cpu_capped=True)], attempts=attempts, other_jobs=others, settings=only(spread=1))
    assert placed(result)[3] in {("runs-capped",), ("pinned-capped",)}
    # With the filter off they mix.
    filters = [f for f in FILTER_NAMES if f != "capness"]
    result = run_pass(nodes[:1], [job(4)], attempts=attempts, other_jobs=others, settings={"filters": filters})
    assert placed(result) == {4: ("runs-capped",)}


def test_an_exclusive_job_runs_only_on_an_empty_node_and_alone_there() -> None:
    """Slurm's --exclusive: it takes a node that runs nothing (not one a job took earlier in the same
    pass), still needs its room, and no other job joins it there."""
    nodes = [node("busy"), node("empty-small", vcpus=2), node("empty")]
    attempts = [running(1, 100, ["busy"], Resources(1, GiB))]
    others = [job(100)]
    queue = [job(1, 4, exclusive=True), job(2), job(3, exclusive=True)]
    result = run_pass(nodes, queue, attempts=attempts, other_jobs=others, settings=only(pack=1))
    got = placed(result)
    # The only empty node with 4 vCPUs goes to job 1; job 2 packs beside the running job, not beside
    # job 1; job 3 fits the small empty node (it asks 1 vCPU).
    assert got == {1: ("empty",), 2: ("busy",), 3: ("empty-small",)}
    # A second exclusive job finds no empty node: every node runs work.
    result = run_pass(nodes, [*queue, job(4, exclusive=True)], attempts=attempts, other_jobs=others)
    assert 4 not in placed(result)
    assert reason(result, 4).startswith("EXCLUSIVE")
    assert "the job runs alone (--exclusive); these nodes run other jobs" in reason(result, 4)


def test_no_job_joins_a_node_running_an_exclusive_job() -> None:
    nodes = [node("alone")]
    attempts = [running(1, 100, ["alone"], Resources(1, GiB))]
    result = run_pass(nodes, [job(1)], attempts=attempts, other_jobs=[job(100, exclusive=True)])
    assert placed(result) == {}
    assert reason(result, 1).startswith("EXCLUSIVE")
    assert "these nodes run an exclusive job (--exclusive)" in reason(result, 1) and "alone" in reason(result, 1)
    # A gang takes each of its nodes alone.
    nodes = [node("a"), node("b"), node("c")]
    result = run_pass(nodes, [job(1, nodes=2, exclusive=True), job(2, nodes=2)], settings=only(pack=1))
    first, second = placed(result)[1], placed(result).get(2)
    assert len(set(first)) == 2 and second is None
    assert reason(result, 2).startswith("EXCLUSIVE")
    # With the filter off they mix.
    filters = [f for f in FILTER_NAMES if f != "exclusive"]
    result = run_pass(
        nodes[:1], [job(2)], attempts=attempts, other_jobs=[job(100, exclusive=True)], settings={"filters": filters}
    )
    assert placed(result) == {2: ("a",)}


def test_platform_minimum_compares_versions_numerically() -> None:
    nodes = [node("old", platform="1.9"), node("new", platform="1.10"), node("none")]
    result = run_pass(nodes, [job(1, min_platform="1.10"), job(2, min_platform="2.0")])
    assert placed(result) == {1: ("new",)}
    assert reason(result, 2) == "PLATFORM_TOO_OLD: needs platform >= 2.0; the newest is 1.10 on new"


def test_traits_required_forbidden_list_valued_and_any() -> None:
    nodes = [
        node("ab", zone=["a", "b"], ssd="yes"),
        node("c", zone="c", gpu_model="t4"),
        node("plain"),
    ]
    assert placed(run_pass(nodes, [job(1, traits={"zone": "b"})])) == {1: ("ab",)}
    assert placed(run_pass(nodes, [job(1, traits={"zone": ["c", "x"]})])) == {1: ("c",)}
    assert placed(run_pass(nodes, [job(1, traits={"zone": "*"}, forbidden_traits={"ssd": "yes"})])) == {1: ("c",)}
    assert placed(run_pass(nodes, [job(1, forbidden_traits={"zone": "*", "gpu_model": "*"})])) == {1: ("plain",)}
    result = run_pass(nodes, [job(1, traits={"zone": "d"})])
    assert reason(result, 1) == "TRAITS_MISMATCH: needs zone=d (0 of 3 nodes have it)"


def test_resources_each_have_their_own_code_and_quantities() -> None:
    nodes = [node("small", 2, 8, scratch_gib=10), node("mid", 4, 30, scratch_gib=50, gpus=1)]
    cases = {
        1: (job(1, ram_gib=40), "INSUFFICIENT_RAM: needs 40 GiB RAM, the largest free is 30 GiB on mid"),
        2: (job(2, vcpus=6), "INSUFFICIENT_CPU: needs 6 vcpu, the largest free is 4 vcpu on mid"),
        3: (job(3, scratch_gib=60), "INSUFFICIENT_DISK: needs 60 GiB scratch, the largest free is 50 GiB on mid"),
        4: (job(4, gpus=2), "INSUFFICIENT_GPU: needs 2 GPU, the largest free is 1 GPU on mid"),
    }
    for job_id, (request, expected) in cases.items():
        assert reason(run_pass(nodes, [request]), job_id) == expected
    assert placed(run_pass(nodes, [job(5, gpus=1)])) == {5: ("mid",)}


def test_each_filter_can_be_turned_off() -> None:
    nodes = [node("head", role="head")]
    assert placed(run_pass(nodes, [job(1)], settings={"filters": ["min-ram", "min-cpu"]})) == {1: ("head",)}


def test_filter_order_changes_the_reason_not_the_result() -> None:
    nodes = [node("a", ram_gib=4, zone="x")]
    request = job(1, ram_gib=8, traits={"zone": "y"})
    first = run_pass(nodes, [request], settings={"filters": ["traits", "min-ram"]})
    second = run_pass(nodes, [request], settings={"filters": ["min-ram", "traits"]})
    assert reason(first, 1).startswith("TRAITS_MISMATCH")
    assert reason(second, 1).startswith("INSUFFICIENT_RAM")
    assert placed(first) == placed(second) == {}
