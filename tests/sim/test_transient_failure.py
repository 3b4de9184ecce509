"""Seed 002 §5.4.5 in the simulator: the core decides, the simulator records what it decides as
the live loop does (a node attribute), and replays through the live loop's `decide` agree."""

from __future__ import annotations

from corral.core.snapshot import Decisions, Snapshot
from corral.loop import decide
from corral.placement.attributes import FAILURE_RESERVED_UNTIL
from corral.sim.engine import Simulation
from tests.sim.helpers import config, job, recorder

FIXED_TWO = {"mode": "fixed", "nodes": [{"instance_type": "small", "count": 2}]}


def slow_agents(reserve: float) -> tuple[Simulation, list[tuple[Snapshot, float, Decisions]]]:
    # Every agent takes 150 s to start an attempt, more than the 120 s start timeout: each attempt
    # times out on a node that stays up.
    cfg = config(
        sim={"fleet": FIXED_TWO, "start_latency": 150, "explanations": True},
        policy={"dispatch": {"node_failure_reserve_time": reserve}, "retry": {"max_temp_failures": 3}},
    )
    seen: list[tuple[Snapshot, float, Decisions]] = []
    sim = Simulation([job(1, run=100)], cfg, on_pass=recorder(seen), check_index=True)
    sim.run()
    return sim, seen


def placements(seen: list[tuple[Snapshot, float, Decisions]]) -> list[tuple[float, str]]:
    return [(now, p.node_ids[0]) for _, now, d in seen for p in d.placements]


def test_without_a_reserve_time_the_retries_go_back_on_the_nodes_at_once() -> None:
    _, seen = slow_agents(0)
    places = placements(seen)
    # Four tries on two nodes within 500 s: a node takes work again right after a timeout on it.
    assert len(places) == 4 and places[-1][0] < 500
    assert not any(d.node_reservations for _, _, d in seen)


def test_with_one_work_avoids_a_node_after_a_start_timeout_until_the_time_passes() -> None:
    sim, seen = slow_agents(1000)
    places = placements(seen)
    reservations = [(now, r.node_id, r.until) for _, now, d in seen for r in d.node_reservations]
    # The first try times out on one node, the retry goes to the other, which then times out too;
    # the third try waits for the first node's reservation to end (1000 s after its timeout).
    first, other = places[0][1], places[1][1]
    assert first != other and places[2][1] == first
    first_timeout, node, first_until = reservations[0]
    assert node == first and first_until == first_timeout + 1000
    assert places[2][0] >= first_until
    # No placement ever lands on a node during its reservation.
    for when, node in places:
        assert not any(n == node and start <= when < until for start, n, until in reservations)
    # The simulator's node carries the reservation as the live loop's store would.
    assert FAILURE_RESERVED_UNTIL in sim.nodes[other].attributes
    for snapshot, now, decisions in seen:
        assert decide(snapshot, now, sim.live_config()) == decisions, f"at {now}"
