"""A placer kept between passes (as the live loop and the simulator keep one) decides exactly as a
fresh one: what it remembers of the nodes and instance types is dropped as soon as they change."""

from __future__ import annotations

import random

import numpy as np
import pytest
from placement_helpers import NOW, job, node, running

from corral.core.index import SnapshotIndex
from corral.core.model import Attempt, GiB, InstanceType, Job, Node, Resources
from corral.core.reconcile import Placer
from corral.core.settings import PolicySettings
from corral.core.snapshot import PlacementResult, Snapshot
from corral.placement import arrays as arrays_module
from corral.placement import placer as placer_module
from corral.placement.placer import FactsMemo, build_engine, make_placer
from corral.placement.settings import PlacementSettings

SETTINGS = PolicySettings.model_validate({"placement": {"queue": {"capacity": "auto"}}})


def place(placer: Placer, nodes: list[Node], queue: list[Job], now: float) -> PlacementResult:
    free = {n.id: n.capacity for n in nodes}
    world = Snapshot(jobs=queue, attempts=[], nodes=nodes, instance_types=[])
    return placer(world, queue, nodes, free, now)


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


def test_capped_work_another_dispatcher_started_keeps_uncapped_jobs_off_its_node() -> None:
    # No node is pinned either way, so only the work on a node says whether it runs capped jobs.
    # A big job fills one node; between two passes of a kept placer, another dispatcher starts a
    # CPU-capped job on the other: an uncapped job may not share that one, so it waits (as a fresh
    # placer says).
    settings = PlacementSettings()
    nodes = [node("n1", 4, 16), node("n2", 4, 16)]
    index = SnapshotIndex()
    for n in nodes:
        index.put_node(n)
    memo = FactsMemo(settings)
    jobs: list[Job] = []
    attempts: list[Attempt] = []

    def pass_at(now: float, queued: list[Job], fresh: bool = False) -> PlacementResult:
        for j in queued:
            index.put_job(j)
        snapshot = Snapshot(jobs=[*jobs, *queued], attempts=list(attempts), nodes=nodes, instance_types=[], index=index)
        kept = FactsMemo(settings) if fresh else memo
        return placer_module.place(snapshot, queued, index.schedulable(), None, now, settings, memo=kept)

    big = job(1, 4, 1)
    ((full,),) = chosen(pass_at(NOW, [big])).values()
    (other,) = {"n1", "n2"} - {full}
    capped = job(2, 1, 1, cpu_capped=True)
    for j, a in ((big, running(1, 1, [full], big.resources)), (capped, running(2, 2, [other], capped.resources))):
        jobs.append(j)
        attempts.append(a)
        index.put_job(j)
        index.put_attempt(a)
    uncapped = job(3, 1, 1)
    assert chosen(pass_at(NOW + 1, [uncapped])) == {}
    assert chosen(pass_at(NOW + 1, [uncapped], fresh=True)) == {}


@pytest.mark.parametrize("world", ["index", "no index"])
@pytest.mark.parametrize(
    ("reboots", "vectorised", "gate"),
    [(False, False, False), (True, False, False), (False, True, False), (False, False, True)],
)
def test_a_kept_engine_is_renewed_to_what_a_fresh_one_builds(
    world: str, reboots: bool, vectorised: bool, gate: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pass after pass, a placer keeps its engine over the same nodes and refigures only the nodes
    whose work or measurement changed, or that it placed work on (whether or not the shell carried
    the placement out), and remembers which requests found no node until something makes room,
    and (`gate`: an elastic fleet) which the cost gate kept off every node until a node changes.
    Its node arrays, ranking sums and decisions are a fresh engine's, exactly."""
    if vectorised:  # refresh every node the array way, not one scalar at a time
        monkeypatch.setattr(arrays_module, "FEW", 0)
    settings = PlacementSettings.model_validate({"weights": {"pack": 1.0, "reboot": 0.5, "random": 0.3}})
    rng = random.Random(11)

    def dates() -> dict[str, str]:
        return {"next_reboot": str(NOW + rng.choice([300, 900, 3000]))} if reboots else {}

    nodes = [
        node(f"n{i}", rng.choice([4, 8, 16]), rng.choice([16, 32, 64]), price=rng.choice([0.2, 0.8, 3.0]), **dates())
        for i in range(10)
    ]
    types = [InstanceType("small", 4, 16 * GiB, 0.2)] if gate else []
    limits = [60, 600, 3600, 7200] if gate else [600, 600, 600, None]
    nodes[3].attributes["capped"] = "true"
    index = SnapshotIndex() if world == "index" else None
    if index is not None:
        for n in nodes:
            index.put_node(n)
    memo, unexplained = FactsMemo(settings), FactsMemo(settings)
    jobs: dict[int, Job] = {}
    attempts: dict[int, Attempt] = {}
    next_id, now, kept_engines, remembered = 1, NOW, 0, 0
    for _ in range(250):
        now += rng.choice([0.0, 1.0, 7.0])
        waiting = len(jobs) - len(attempts)
        for _ in range(rng.choice([1, 1, 2, 3]) if waiting < 12 else 0):
            j = job(next_id, rng.choice([0.5, 1, 2, 3]), rng.choice([1, 2, 6]), time_limit=rng.choice(limits))
            j.cpu_capped = rng.random() < 0.2
            j.exclusive = rng.random() < 0.1
            jobs[j.id] = j
            next_id += 1
            if index is not None:
                index.put_job(j)
        what = rng.random()
        if what < 0.3 and attempts:  # work ends
            ended = attempts.pop(rng.choice(list(attempts)))
            jobs.pop(ended.job_id, None)
            if index is not None:
                index.drop_attempt(ended.id)
                index.drop_job(ended.job_id)
        elif what < 0.45:  # an agent reports a measurement
            n = rng.choice(nodes)
            n.used, n.used_at = Resources(rng.uniform(0, 2), 512, 0, 0), now
            if index is not None:
                index.put_node(n)
        elif what < 0.5:  # a node comes (a new engine)
            nodes.append(node(f"m{next_id}", 8, 32, **dates()))
            next_id += 1
            if index is not None:
                index.put_node(nodes[-1])
        queued = [j for j in jobs.values() if not any(a.job_id == j.id for a in attempts.values())]
        snapshot = Snapshot(
            jobs=list(jobs.values()),
            attempts=list(attempts.values()),
            nodes=list(nodes),
            instance_types=types,
            index=index,
        )
        schedulable = index.schedulable() if index is not None else list(nodes)
        before = memo.engine
        remembered += bool(before and (before.misfits if not gate else before._refused))
        result = placer_module.place(snapshot, queued, schedulable, None, now, settings, memo=memo)
        kept_engines += memo.engine is before
        fresh_result = placer_module.place(snapshot, queued, schedulable, None, now, settings, memo=FactsMemo(settings))
        assert result == fresh_result
        # Without explanations, the same placements and the same jobs left waiting.
        quiet = placer_module.place(
            snapshot, queued, schedulable, None, now, settings, memo=unexplained, explanations=False
        )
        assert quiet.placements == result.placements and quiet.reasons.keys() == result.reasons.keys()
        fresh = build_engine(snapshot, schedulable, None, now, settings)
        assert memo.engine is not None
        kept, new = memo.engine.arrays, fresh.arrays
        # The kept engine has committed this pass's placements, the fresh one not: compare the rest.
        placed_on = {node_id for p in result.placements for node_id in p.node_ids}
        untouched = [i for i in range(new.n) if new.ids[i] not in placed_on]
        for name in ("dedicated", "utilized", "room", "jobs", "capped_jobs", "uncapped_jobs", "exclusive_jobs"):
            assert np.array_equal(getattr(kept, name)[..., untouched], getattr(new, name)[..., untouched]), name
        assert np.array_equal(memo.engine.base[untouched], fresh.base[untouched])
        # The shell carries most placements out (each a new attempt); some are lost on the way.
        for p in result.placements:
            if rng.random() < 0.8:
                a = running(next_id, p.job_id, list(p.node_ids), jobs[p.job_id].resources, started_at=now)
                attempts[a.id] = a
                next_id += 1
                if index is not None:
                    index.put_attempt(a)
    assert kept_engines > 150 and remembered > 50
