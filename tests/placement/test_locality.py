"""Locality hints (seed 003): near / far, by job id or tag, server or rack, soft unless strict."""

from __future__ import annotations

from typing import Any

from placement_helpers import job, node, only, placed, run_pass, running

from corral.core.model import GiB, Job, Resources
from corral.core.snapshot import PlacementResult

RACKS = [node("a1", rack="A"), node("a2", rack="A"), node("b1", rack="B"), node("b2", rack="B")]
WEB = job(100, tags=["web"])
DB = job(200, tags=["db"])
ON_A1 = running(1, 100, ["a1"], Resources(1, GiB))
ON_B1 = running(2, 200, ["b1"], Resources(1, GiB))


def choose(queue: list[Job], **kw: Any) -> PlacementResult:
    kw.setdefault("settings", only(pack=1, locality=1))
    return run_pass(RACKS, queue, attempts=[ON_A1, ON_B1], other_jobs=[WEB, DB], **kw)


def test_near_a_job_by_id_at_server_level() -> None:
    assert placed(choose([job(1, near=["200"])])) == {1: ("b1",)}


def test_far_from_a_tag_at_rack_level() -> None:
    assert placed(choose([job(1, far=["tag:web"], level="rack")]))[1][0] in {"b1", "b2"}


def test_near_rack_level() -> None:
    assert placed(choose([job(1, near=["tag:db"], level="rack")]))[1][0] in {"b1", "b2"}


def test_far_wins_over_near() -> None:
    # Near web (a1) and far from db at rack level (rack B): a1 / a2 remain; near picks a1.
    assert placed(choose([job(1, near=["tag:web"], far=["tag:db"], level="rack")])) == {1: ("a1",)}
    # Near and far the same job: far wins, the job goes anywhere else.
    assert placed(choose([job(1, near=["100"], far=["100"])]))[1] != ("a1",)


def test_soft_near_is_ignored_when_the_target_has_no_room_and_the_details_say_so() -> None:
    full_b1 = running(3, 300, ["b1"], Resources(7, 10 * GiB))
    result = run_pass(
        RACKS,
        [job(1, 2, near=["tag:db"])],
        attempts=[ON_A1, ON_B1, full_b1],
        other_jobs=[WEB, DB, job(300)],
        settings=only(pack=1, locality=1),
    )
    chosen = placed(result)[1][0]
    assert chosen != "b1"
    assert chosen == "b2"  # the soft scorer still prefers the target's rack
    assert "hints ignored" in " ".join(result.details[1]["notes"])


def test_a_gang_s_soft_hints_ignored_for_too_few_nodes_say_how_many_met_them() -> None:
    """Before, the note said "they would leave no node that fits" with two nodes in the rack."""
    result = choose([job(1, nodes=3, near=["tag:web"], level="rack")])
    assert len(placed(result)[1]) == 3
    (note,) = result.details[1]["notes"]
    assert note == "soft locality: hints ignored, they would leave 2 of the 3 nodes the job needs"


def test_strict_hints_are_a_hard_filter() -> None:
    full_b1 = running(3, 300, ["b1"], Resources(7, 10 * GiB))
    result = run_pass(
        RACKS,
        [job(1, 2, near=["tag:db"], strict=True)],
        attempts=[ON_A1, ON_B1, full_b1],
        other_jobs=[WEB, DB, job(300)],
    )
    assert placed(result) == {}
    # Which filters the target's node fails: what the request must give up to run there. Before,
    # the reason stopped at "none of those passes the other filters".
    assert result.reasons[1] == (
        "LOCALITY: strict: near tag:db (on b1; none of those passes the other filters: b1 fails INSUFFICIENT_CPU)"
    )
    assert result.details[1]["locality"]["near_running"] == ["tag:db"]


def test_a_strict_job_left_waiting_is_looked_at_again_after_a_placement() -> None:
    """A target placed later in the pass may open a node for it: the placer says a later pass
    could place it although nothing else happens (`revisit`)."""
    full_b1 = running(3, 300, ["b1"], Resources(7, 10 * GiB))
    waiting = job(1, 2, near=["tag:db"], strict=True, priority=5)
    another_db = job(2, tags=["db"])
    result = run_pass(RACKS, [waiting, another_db], attempts=[ON_A1, ON_B1, full_b1], other_jobs=[WEB, DB, job(300)])
    assert set(placed(result)) == {2} and result.revisit
    alone = run_pass(RACKS, [waiting], attempts=[ON_A1, ON_B1, full_b1], other_jobs=[WEB, DB, job(300)])
    assert placed(alone) == {} and not alone.revisit


def test_strict_far_leaves_no_node() -> None:
    everywhere = [running(10 + i, 100, [n.id], Resources(0.1, 1)) for i, n in enumerate(RACKS)]
    result = run_pass(RACKS, [job(1, far=["tag:web"], strict=True)], attempts=everywhere, other_jobs=[WEB])
    assert placed(result) == {}
    assert result.reasons[1].startswith("LOCALITY: strict: away from tag:web")


def test_targets_not_running_constrain_nothing() -> None:
    result = choose([job(1, near=["tag:cache", "999"], strict=True)])
    assert 1 in placed(result)
    # The placed job's details say so (`corral explain` prints its notes); before, they said nothing.
    assert result.details[1]["notes"] == ["locality: not running, so ignored: tag:cache, 999"]


def test_jobs_placed_earlier_in_the_pass_are_targets() -> None:
    # Three replicas of a service, each away from the others: one per node.
    replicas = [job(i, tags=["api"], far=["tag:api"], strict=True) for i in range(1, 5)]
    result = run_pass(RACKS, replicas, other_jobs=[], settings=only(pack=1))
    assert sorted(n for (n,) in placed(result).values()) == ["a1", "a2", "b1", "b2"]
    result = run_pass(RACKS, replicas, settings=only(pack=1))
    # At rack level only two fit.
    rack_replicas = [job(i, tags=["api"], far=["tag:api"], strict=True, level="rack") for i in range(1, 4)]
    result = run_pass(RACKS, rack_replicas, settings=only(pack=1))
    racks = sorted(n[0][0] for n in placed(result).values())
    assert racks == ["a", "b"]
    assert 3 not in placed(result)


def test_unknown_entries_are_reported() -> None:
    result = choose([job(1, near=["web"])])
    assert 1 in placed(result)
    full = choose([job(1, ram_gib=1000, near=["web"])])
    assert full.details[1]["locality"]["not_understood"] == ["web"]
