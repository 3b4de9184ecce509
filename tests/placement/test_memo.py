"""A placer kept between passes (as the live loop and the simulator keep one) decides exactly as a
fresh one: what it remembers of the nodes and instance types is dropped as soon as they change."""

from __future__ import annotations

from placement_helpers import NOW, job, node, running

from corral.core.model import GiB, InstanceType, Job, Node, Resources
from corral.core.settings import PolicySettings
from corral.core.snapshot import PlacementResult, Snapshot
from corral.placement import make_placer

SETTINGS = PolicySettings.model_validate({"placement": {"queue": {"capacity": "auto"}}})


def place(placer: object, nodes: list[Node], queue: list[Job], now: float, **snapshot: object) -> PlacementResult:
    free = {n.id: n.capacity for n in nodes}
    world = Snapshot(jobs=queue, attempts=[], nodes=nodes, instance_types=[], **snapshot)  # type: ignore[arg-type]
    assert callable(placer)
    result: PlacementResult = placer(world, queue, nodes, free, now)
    return result


def chosen(result: PlacementResult) -> dict[int, tuple[str, ...]]:
    return {p.job_id: p.node_ids for p in result.placements}


def test_attributes_changed_in_place_are_seen() -> None:
    kept = make_placer(SETTINGS)
    nodes = [node("n1", 4, 16), node("n2", 4, 16)]
    assert chosen(place(kept, nodes, [job(1, 1, 1, traits={"zone": "b"})], NOW)) == {}
    nodes[1].attributes["zone"] = "b"  # an operator labels the node; the shell updates it in place
    result = place(kept, nodes, [job(2, 1, 1, traits={"zone": "b"})], NOW + 1)
    assert chosen(result) == {2: ("n2",)}
    assert chosen(result) == chosen(place(make_placer(SETTINGS), nodes, [job(2, 1, 1, traits={"zone": "b"})], NOW + 1))


def test_a_reservation_that_ends_between_passes_stops_holding() -> None:
    kept = make_placer(SETTINGS)
    nodes = [node("n1", 4, 16, reservation="maint", reservation_until=str(NOW + 60))]
    assert chosen(place(kept, nodes, [job(1)], NOW)) == {}
    # Same nodes, same attributes: only the clock moved past the reservation's end.
    assert chosen(place(kept, nodes, [job(2)], NOW + 61)) == {2: ("n1",)}


def test_a_node_that_goes_away_is_not_chosen() -> None:
    kept = make_placer(SETTINGS)
    nodes = [node("n1", 4, 16), node("n2", 8, 32)]
    assert chosen(place(kept, nodes, [job(1, 1, 1)], NOW)) == {1: ("n1",)}  # pack: the fuller one
    assert chosen(place(kept, nodes[1:], [job(2, 1, 1)], NOW + 1)) == {2: ("n2",)}


def test_capacity_back_off_ending_makes_the_fleet_elastic_again() -> None:
    """A job no running node can take gets a reservation only while no instance type can be booted
    for it (bounded capacity); what the placer remembers of which types fit follows the back-offs."""
    settings = PolicySettings.model_validate({"boot": {"max_instances": 10}})
    kept = make_placer(settings)
    itype = InstanceType("big", 16, 64 * GiB, 1.0)
    nodes = [node("n1", 8, 32)]
    first = job(99, 4, 4, time_limit=600)
    attempts = [running(1, 99, ["n1"], first.resources)]
    queue = [job(1, 8, 8, time_limit=600)]

    def reason(placer: object, now: float, unavailable: dict[str, float]) -> str:
        free = {"n1": Resources(4, 28 * GiB, 100 * GiB, 0)}
        world = Snapshot(
            jobs=[first, *queue], attempts=attempts, nodes=nodes, instance_types=[itype], unavailable_types=unavailable
        )
        assert callable(placer)
        result: PlacementResult = placer(world, queue, nodes, free, now)
        return result.reasons[1]

    assert "reserved" not in reason(kept, NOW, {})  # a new instance can take it
    backed_off = reason(kept, NOW + 1, {"big": NOW + 100})
    assert "reserved n1" in backed_off
    assert backed_off == reason(make_placer(settings), NOW + 1, {"big": NOW + 100})
    assert "reserved" not in reason(kept, NOW + 101, {"big": NOW + 100})  # the back-off is over
