"""Each scorer on a fleet where the preferred node is obvious; weights combine and reverse them."""

from __future__ import annotations

from typing import Any

import pytest
from placement_helpers import NOW, job, node, only, placed, run_pass, running

from corral.core.model import GiB, Job, Node, Resources


def first_choice(nodes: list[Node], request: Job | None = None, **settings: Any) -> str:
    result = run_pass(nodes, [request or job(1)], settings=settings)
    return placed(result)[(request or job(1)).id][0]


def test_pack_prefers_least_free_ram_and_spread_the_most() -> None:
    nodes = [node("roomy", ram_gib=64), node("tight", ram_gib=8), node("mid", ram_gib=32)]
    assert first_choice(nodes, **only(pack=1)) == "tight"
    assert first_choice(nodes, **only(spread=1)) == "roomy"
    assert first_choice(nodes, **only(pack=-1)) == "roomy"  # a negative weight reverses a scorer


def test_pack_counts_free_room_after_running_work() -> None:
    nodes = [node("a", ram_gib=64), node("b", ram_gib=32)]
    attempts = [running(1, 100, ["a"], Resources(1, 60 * GiB))]
    result = run_pass(nodes, [job(1)], attempts=attempts, other_jobs=[job(100)], settings=only(pack=1))
    assert placed(result) == {1: ("a",)}


def test_pack_gpus_keeps_jobs_without_gpus_off_free_gpus_and_packs_gpu_jobs() -> None:
    # RAM alone (pack) would take the GPU node for a CPU job: it has the least RAM free.
    nodes = [node("gpu", 8, 15, gpus=1), node("cpu", 8, 16)]
    assert first_choice(nodes, **only(pack=1)) == "gpu"
    assert first_choice(nodes) == "cpu"  # the defaults weigh free GPUs as much as free RAM
    # A GPU job fills the node whose GPUs are partly used first.
    four = [node("fresh", 32, 128, gpus=4), node("half", 32, 128, gpus=4)]
    attempts = [running(1, 100, ["half"], Resources(1, GiB, 0, 2))]
    gpu_job = job(1, 1, 1, gpus=1)
    result = run_pass(four, [gpu_job], attempts=attempts, other_jobs=[job(100)], settings=only(**{"pack-gpus": 1}))
    assert placed(result) == {1: ("half",)}


def test_balanced_prefers_even_use() -> None:
    # A cpu-heavy job: on "ramheavy" it would leave cpu and RAM equally used.
    nodes = [node("even", 8, 32), node("ramheavy", 8, 32)]
    attempts = [running(1, 100, ["ramheavy"], Resources(0, 16 * GiB))]
    result = run_pass(nodes, [job(1, 4, 0.001)], attempts=attempts, other_jobs=[job(100)], settings=only(balanced=1))
    assert placed(result) == {1: ("ramheavy",)}


def test_newest_platform() -> None:
    nodes = [node("old", platform="20230101T000000Z"), node("new", platform="20240301T000000Z"), node("none")]
    assert first_choice(nodes, **only(platform=1)) == "new"


def test_farthest_reboot_ignores_past_dates() -> None:
    nodes = [
        node("soon", next_reboot=str(NOW + 3600)),
        node("later", next_reboot=str(NOW + 86400 * 10)),
        node("stale", next_reboot=str(NOW - 86400 * 30)),
        node("unplanned"),
    ]
    assert first_choice(nodes[:2], **only(reboot=1)) == "later"
    assert first_choice(nodes[:2], **only(reboot=-1)) == "soon"
    # A past date is ignored (ops may not have updated it): like no date at all, it scores best.
    assert first_choice([nodes[0], nodes[2]], **only(reboot=1)) == "stale"
    result = run_pass(nodes, [job(1)], settings={**only(reboot=1), "explain_top": 4})
    scores = {row["node"]: row["scores"]["reboot"] for row in result.details[1]["top"]}
    assert scores == pytest.approx({"soon": 3600 / (30 * 86400), "later": 1 / 3, "stale": 1.0, "unplanned": 1.0})


def test_hardware_priority() -> None:
    nodes = [node("gen1", hardware_priority="1"), node("gen3", hardware_priority="3"), node("unknown")]
    assert first_choice(nodes, **only(hardware=1)) == "gen3"


def test_recent_failures_penalty() -> None:
    nodes = [node("flaky", recent_failures="2"), node("solid"), node("bad", recent_failures="9")]
    assert first_choice(nodes, **only(failures=1)) == "solid"


def test_lowest_price_per_job() -> None:
    # 4 copies of the job fit on "big" for twice the price: half the price per job.
    nodes = [node("small", 2, 8, price=1.0), node("big", 8, 32, price=2.0)]
    assert first_choice(nodes, job(1, 2, 8), **only(price=1)) == "big"


def test_weights_combine() -> None:
    nodes = [node("tight-old", ram_gib=16, platform="1"), node("roomy-new", ram_gib=32, platform="2")]
    assert first_choice(nodes, **only(pack=1)) == "tight-old"
    assert first_choice(nodes, **only(pack=1, platform=1)) == "roomy-new"


def test_random_tie_break_is_deterministic_per_job_and_pass() -> None:
    nodes = [node(f"n{i}") for i in range(20)]
    settings = only(random=1)
    picks = {first_choice(nodes, job(j), **settings) for j in range(1, 30)}
    assert len(picks) > 5  # different jobs break ties differently
    again = {j: first_choice(nodes, job(j), **settings) for j in range(1, 10)}
    assert again == {j: first_choice(nodes, job(j), **settings) for j in range(1, 10)}


def test_placed_jobs_keep_per_scorer_scores_of_the_top_nodes() -> None:
    nodes = [node("a", ram_gib=8), node("b", ram_gib=16), node("c", ram_gib=32), node("d", ram_gib=64)]
    result = run_pass(nodes, [job(1, ram_gib=4)], settings=only(pack=1, spread=0.5))
    top = result.details[1]["top"]
    assert [row["node"] for row in top] == ["a", "b", "c"]
    assert top[0]["chosen"] and not top[1]["chosen"]
    assert top[0]["scores"] == pytest.approx({"pack": 1 - 4 / 64, "spread": 4 / 64})
    assert top[0]["score"] == pytest.approx(1 - 4 / 64 + 0.5 * 4 / 64)
