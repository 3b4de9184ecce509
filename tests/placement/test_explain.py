"""Explanations run every filter, count and name the nodes each removes, and find the nearest miss."""

from __future__ import annotations

from typing import Any

from placement_helpers import job, node, placed, run_pass, running

from corral.core.model import GiB, InstanceType, Resources


def rows(details: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["filter"]: row for row in details["filters"]}


def test_every_filter_runs_even_after_the_set_is_empty() -> None:
    nodes = [node(f"x{i}", ram_gib=16, zone="x") for i in range(8)] + [node("y0", ram_gib=16, zone="y")]
    result = run_pass(nodes, [job(1, ram_gib=32, traits={"zone": "x"})], settings={"explain_sample": 3})
    details = result.details[1]
    by_filter = rows(details)
    assert by_filter["traits"]["removed"] == 1 and by_filter["traits"]["failed"] == 1
    assert by_filter["traits"]["sample"] == ["y0"]
    # min-ram comes later and has nothing left to remove, yet it is still evaluated on every node.
    assert by_filter["min-ram"]["removed"] == 8 and by_filter["min-ram"]["failed"] == 9
    assert by_filter["min-ram"]["sample"] == ["x0", "x1", "x2"]
    assert by_filter["min-ram"]["detail"] == "needs 32 GiB RAM, the largest free is 16 GiB on x0"
    assert details["survivors"] == 0
    assert details["nearest"] == {"node": "x0", "fails": ["INSUFFICIENT_RAM"]}
    assert details["reason"] == "INSUFFICIENT_RAM: needs 32 GiB RAM, the largest free is 16 GiB on x0"


def test_nearest_miss_is_among_nodes_passing_every_other_filter() -> None:
    # The node with the most RAM lacks the trait; the explanation names the one that only lacks RAM.
    nodes = [node("huge", ram_gib=64), node("ssd", ram_gib=24, disk="ssd")]
    result = run_pass(nodes, [job(1, ram_gib=40, traits={"disk": "ssd"})], settings={"filters": ["min-ram", "traits"]})
    assert rows(result.details[1])["min-ram"]["detail"] == "needs 40 GiB RAM, the largest free is 24 GiB on ssd"
    assert result.details[1]["nearest"] == {"node": "huge", "fails": ["TRAITS_MISMATCH"]}


def test_instance_types_are_named_when_none_is_large_enough() -> None:
    types = [InstanceType("m", 8, 32 * GiB, 1.0), InstanceType("s", 4, 16 * GiB, 0.5)]
    result = run_pass([node("n-17", ram_gib=30)], [job(1, ram_gib=40)], instance_types=types)
    assert result.reasons[1] == (
        "INSUFFICIENT_RAM: needs 40 GiB RAM, the largest free is 30 GiB on n-17; no instance type has more than 32 GiB"
    )


def test_gang_reason_counts_nodes() -> None:
    """The figure is of the gang's 2nd best node, the room the request must come down to. Before,
    it named the largest ("the largest free is 32 GiB on a"), which reads as if 8 GiB fitted."""
    nodes = [node("a"), node("b", ram_gib=4), node("c", ram_gib=2)]
    result = run_pass(nodes, [job(1, ram_gib=8, nodes=2)])
    assert result.reasons[1] == (
        "INSUFFICIENT_RAM: needs 8 GiB RAM, the 2nd largest free is 4 GiB on b (the job needs 2 nodes, 1 remain)"
    )


def test_with_no_nearest_miss_the_figures_are_of_the_nodes_the_filter_removed() -> None:
    """No node passes every filter but min-cpu (none has a GPU free). Before, its figures came from
    every node, here one an admin reservation had already taken ("the largest free is 8 vcpu on
    held"), a reason that says 1 vcpu is needed and 8 are free; now from the node min-cpu removed."""
    nodes = [node("held", reservation="team-a"), node("full", vcpus=2)]
    busy = running(1, 9, ["full"], Resources(2.0, GiB))
    result = run_pass(nodes, [job(1, gpus=1)], attempts=[busy], other_jobs=[job(9, vcpus=2)])
    assert rows(result.details[1])["min-cpu"]["detail"] == "needs 1 vcpu, the largest free is 0 vcpu on full"


def test_the_reason_is_what_no_node_has_at_all_not_what_is_busy_now() -> None:
    """A job needing a GPU no node has, on a fleet whose vcpus were all in use, waited with the reason
    'INSUFFICIENT_CPU: ... the largest free is 0 vcpu': the on-call waits for work to end, and then it
    still does not run."""
    nodes = [node("full", vcpus=2)]
    busy = running(1, 9, ["full"], Resources(2.0, GiB))
    result = run_pass(nodes, [job(1, gpus=1)], attempts=[busy], other_jobs=[job(9, vcpus=2)])
    assert result.reasons[1] == "INSUFFICIENT_GPU: needs 1 GPU, the largest free is 0 GPU on full"
    # The vcpus in use are still counted in their filter's row.
    assert rows(result.details[1])["min-cpu"]["removed"] == 1
    # A request that only lacks room now keeps the reason of the filter that took the last node.
    result = run_pass(nodes, [job(1, vcpus=1)], attempts=[busy], other_jobs=[job(9, vcpus=2)])
    assert result.reasons[1] == "INSUFFICIENT_CPU: needs 1 vcpu, the largest free is 0 vcpu on full"


def test_gang_placed_on_distinct_nodes() -> None:
    nodes = [node("a"), node("b"), node("c", ram_gib=4)]
    result = run_pass(nodes, [job(1, ram_gib=8, nodes=2)])
    assert sorted(placed(result)[1]) == ["a", "b"]


def test_no_nodes_at_all() -> None:
    result = run_pass([], [job(1)])
    assert result.reasons[1] == "NO_NODES: no running node takes work"


def test_identical_requests_share_one_explanation_but_keep_their_own_id() -> None:
    nodes = [node("a", ram_gib=4)]
    result = run_pass(nodes, [job(1, ram_gib=8), job(2, ram_gib=8)])
    assert result.details[1]["job"] == 1 and result.details[2]["job"] == 2
    assert result.details[1]["filters"] == result.details[2]["filters"]


def test_explanations_are_json_serialisable() -> None:
    import json

    nodes = [node("a", rack="r1", zone="x")]
    result = run_pass(nodes, [job(1, ram_gib=64, near=["7"], traits={"zone": "y"}), job(2)])
    json.dumps(result.details)


def test_explain_job_outside_a_pass_sees_every_node() -> None:
    from corral.core.model import NodeState
    from corral.core.snapshot import Snapshot
    from corral.placement.placer import explain_job

    nodes = [node("up", ram_gib=8), node("draining", ram_gib=64, state=NodeState.DRAINING)]
    details = explain_job(Snapshot(jobs=[], attempts=[], nodes=nodes, instance_types=[]), job(1, ram_gib=32), 0.0)
    assert rows(details)["state"]["sample"] == ["draining"]
    assert details["reason"] == "INSUFFICIENT_RAM: needs 32 GiB RAM, the largest free is 8 GiB on up"


def test_an_exclusive_job_s_explanation_names_the_nodes_running_other_work_both_ways() -> None:
    """`corral explain` of a job kept off by --exclusive: its row says which way, in words a user reads."""
    nodes = [node("busy"), node("alone")]
    others = [job(100), job(101, exclusive=True)]
    attempts = [running(1, 100, ["busy"], Resources(1, GiB)), running(2, 101, ["alone"], Resources(1, GiB))]
    result = run_pass(nodes, [job(1, exclusive=True), job(2)], attempts=attempts, other_jobs=others)
    assert placed(result) == {2: ("busy",)}
    mine = rows(result.details[1])["exclusive"]
    assert mine["code"] == "EXCLUSIVE" and mine["seed"] == "hard-filter-exclusive" and mine["removed"] == 2
    assert mine["detail"].startswith("the job runs alone (--exclusive); these nodes run other jobs (e.g. busy runs")
    # A job that is not exclusive, kept off the node an exclusive job runs on.
    result = run_pass(nodes[1:], [job(3)], attempts=attempts, other_jobs=others)
    theirs = rows(result.details[3])["exclusive"]
    assert theirs["removed"] == 1 and theirs["sample"] == ["alone"]
    assert theirs["detail"].startswith("these nodes run an exclusive job (--exclusive)")
    assert result.reasons[3].startswith("EXCLUSIVE: these nodes run an exclusive job (--exclusive)")
