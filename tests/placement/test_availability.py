"""Seed 002 §5.4.1: DEDICATED, UTILIZED, COMBINED per resource, and the one-pass load bump."""

from __future__ import annotations

from placement_helpers import NOW, job, node, placed, run_pass, running

from corral.core.model import GiB, Node, Resources

# A 4-processor node running two 1-processor jobs whose measured load is small.
BUSY = running(1, 100, ["n"], Resources(2, 2 * GiB))
OTHERS = [job(100, 2, 2)]


def light_node() -> Node:
    return node("n", 4, 16, used=Resources(0.2, 1 * GiB, 0, 0), used_at=NOW - 10)


def test_dedicated_counts_requests() -> None:
    result = run_pass(
        [light_node()], [job(1, 3)], attempts=[BUSY], other_jobs=OTHERS, settings={"availability": "DEDICATED"}
    )
    assert placed(result) == {}
    assert "INSUFFICIENT_CPU: needs 3 vcpu, the largest free is 2 vcpu" in result.reasons[1]


def test_utilized_counts_measured_use_so_requests_may_exceed_capacity() -> None:
    # The seed's example: with UTILIZED, more 1-processor jobs start than there are processors.
    result = run_pass(
        [light_node()], [job(1, 3)], attempts=[BUSY], other_jobs=OTHERS, settings={"availability": "UTILIZED"}
    )
    assert placed(result) == {1: ("n",)}


def test_combined_needs_both() -> None:
    hot = node("n", 4, 16, used=Resources(3.5, 1 * GiB, 0, 0), used_at=NOW - 10)
    for availability in ("UTILIZED", "COMBINED"):
        result = run_pass([hot], [job(1, 1)], settings={"availability": availability})
        assert placed(result) == {}, availability
    assert placed(run_pass([hot], [job(1, 1)], settings={"availability": "DEDICATED"})) == {1: ("n",)}
    result = run_pass([light_node()], [job(1, 3)], attempts=[BUSY], other_jobs=OTHERS)
    assert placed(result) == {}
    assert "(2 vcpu not requested, 3.8 vcpu not in use)" in result.reasons[1]


def test_per_resource_policy() -> None:
    # CPU by requests only, RAM by measured use only.
    settings = {"availability": "DEDICATED:PROC UTILIZED:MEM"}
    n = node("n", 4, 16, used=Resources(0.1, 15 * GiB, 0, 0), used_at=NOW - 10)
    assert placed(run_pass([n], [job(1, 4, 1)], settings=settings)) == {1: ("n",)}
    assert placed(run_pass([n], [job(1, 1, 2)], settings=settings)) == {}


def test_load_bump_until_the_agent_measures_the_new_job() -> None:
    settings = {"availability": "UTILIZED"}
    idle_reading = Resources(0.0, 0, 0, 0)
    # The job started after the last measurement: its request counts as load, so a second
    # 3-processor job does not also land on the 4-processor node.
    fresh = running(1, 100, ["n"], Resources(3, GiB), started_at=NOW - 5)
    n = node("n", 4, 16, used=idle_reading, used_at=NOW - 10)
    assert placed(run_pass([n], [job(1, 3)], attempts=[fresh], other_jobs=[job(100)], settings=settings)) == {}
    # Once a measurement after its start shows the node idle, the bump is gone.
    n = node("n", 4, 16, used=idle_reading, used_at=NOW - 1)
    assert placed(run_pass([n], [job(1, 3)], attempts=[fresh], other_jobs=[job(100)], settings=settings)) == {1: ("n",)}


def test_load_bump_within_one_pass() -> None:
    n = node("n", 4, 16, used=Resources(0.0, 0, 0, 0), used_at=NOW - 1)
    result = run_pass([n], [job(1, 3), job(2, 3)], settings={"availability": "UTILIZED"})
    assert placed(result) == {1: ("n",)}


def test_overprovision_ratio_bounds_requests_under_utilized() -> None:
    settings = {"availability": "UTILIZED", "overprovision": {"cpu": 2.0}}
    n = node("n", 4, 16, used=Resources(0.0, 0, 0, 0), used_at=NOW - 1)
    attempts_measured = [running(1, 100, ["n"], Resources(7, GiB), started_at=NOW - 50)]
    result = run_pass([n], [job(1, 2)], attempts=attempts_measured, other_jobs=[job(100)], settings=settings)
    assert placed(result) == {}
    assert result.reasons[1].startswith("OVERPROVISION_LIMIT: cpu requests may reach 2 x capacity: needs 2 vcpu")
    assert placed(run_pass([n], [job(1, 1)], attempts=attempts_measured, other_jobs=[job(100)], settings=settings))


def test_overprovision_ratio_lifts_the_dedicated_ceiling() -> None:
    n = node("n", 4, 16)
    attempts = [running(1, 100, ["n"], Resources(4, GiB))]
    settings = {"availability": "DEDICATED", "overprovision": {"PROC": 2}}
    assert placed(run_pass([n], [job(1, 4)], attempts=attempts, other_jobs=[job(100)], settings=settings)) == {
        1: ("n",)
    }
    assert placed(run_pass([n], [job(1, 4)], attempts=attempts, other_jobs=[job(100)])) == {}
