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


def failed_fixed_fleet(delay: float | None) -> tuple[Simulation, list[tuple[Snapshot, float, Decisions]]]:
    # Two 2-vcpu nodes, each running a 2-vcpu job with a 2000 s time limit; one fails at 500 and is
    # repaired 3000 s later. Its job, requeued, is first in the queue and fits only a whole node.
    cfg = config(
        sim={
            "fleet": {**FIXED_TWO, "repair_time": 3000},
            "failures": {"schedule": [{"at": 500}]},
            "explanations": True,
        },
        policy={"placement": {"queue": {"node_down_delay": delay}}},
    )
    jobs = [job(i, run=1900, vcpus=2, time_limit=2000) for i in (1, 2)]
    seen: list[tuple[Snapshot, float, Decisions]] = []
    sim = Simulation(jobs, cfg, on_pass=recorder(seen), check_index=True)
    sim.run()
    return sim, seen


def reservations(seen: list[tuple[Snapshot, float, Decisions]]) -> list[tuple[float, float, list[str]]]:
    """(pass time, reservation start, reserved nodes) of every pass that made one."""
    return [
        (now, found["start"], found["nodes"])
        for _, now, d in seen
        for details in d.explanations.values()
        if (found := details.get("reservation")) is not None
    ]


def test_a_fixed_fleet_s_down_node_counts_for_the_reservation_from_now_plus_the_delay() -> None:
    # By default the requeued job's reservation is on the running node, from its job's end (2000).
    _, seen = failed_fixed_fleet(None)
    made = reservations(seen)
    assert len(made) == 1 and made[0][1] == 2000.0
    running = made[0][2]
    # With a 300 s delay it is on the node under repair, 300 s ahead of each pass (the passes
    # follow the reservation's start), until the running job's end comes first.
    sim, seen = failed_fixed_fleet(300)
    made = reservations(seen)
    assert [(now, start) for now, start, _ in made[:4]] == [
        (566.0, 866.0),
        (866.0, 1166.0),
        (1166.0, 1466.0),
        (1466.0, 1766.0),
    ]
    assert all(nodes != running for _, _, nodes in made[:4])
    assert made[4][1:] == (2000.0, running)  # at 1766, the running job's end comes first
    # The down node took no work, and the job ran on the other node once it was free, as before.
    assert [(now, p.job_id) for _, now, d in seen for p in d.placements] == [(0.0, 1), (0.0, 2), (1900.0, 2)]
    for snapshot, now, decisions in seen:
        assert decide(snapshot, now, sim.live_config()) == decisions, f"at {now}"
