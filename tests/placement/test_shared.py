"""Jobs of one request share their filter work within a pass (`Engine.shared`): the shared
arrays are caught up at the nodes each commit changed, so the engine must choose the same nodes
and record the same top scores as when every job filters and ranks all nodes on its own."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_helpers import NOW, job, node, only
from random_fleets import World, world

from corral.core.model import GiB, Resources
from corral.core.snapshot import PlacementResult, Snapshot
from corral.placement.demand import Demand
from corral.placement.engine import Engine
from corral.placement.placer import build_engine, make_placer
from corral.placement.scorers import SCORERS
from corral.placement.settings import PlacementSettings

# Scorers whose score moves only with the node (or not at all), so a request's ranking can be
# shared; "balanced" and "price" depend on the request and turn sharing off.
SHAREABLE = ["pack", "spread", "platform", "reboot", "hardware", "failures", "locality"]


def run(w: World, backfill: str) -> PlacementResult:
    w.settings["queue"] = {"backfill": backfill, "capacity": "bounded", "default_time_limit": 600}
    snapshot = Snapshot(jobs=w.running_jobs + w.queue, attempts=w.attempts, nodes=w.nodes, instance_types=[])
    placer = make_placer(PlacementSettings.model_validate(w.settings))
    return placer(snapshot, w.queue, w.nodes, w.free(), w.now)


def shareable(w: World, rng: random.Random) -> World:
    """The world with weights the shared path serves (random ones, the tie-break kept)."""
    names = rng.sample(SHAREABLE, rng.randint(1, 4))
    w.settings["weights"] = {name: round(rng.uniform(-1, 2), 3) or 1.0 for name in names}
    w.settings["weights"]["random"] = rng.choice([0.0001, 0.001, -0.001, 0.0])
    w.settings["explain_top"] = rng.choice([1, 3, 5, 12])
    return w


def both(w: World, backfill: str, monkeypatch: pytest.MonkeyPatch) -> tuple[PlacementResult, PlacementResult]:
    shared = run(w, backfill)
    with monkeypatch.context() as m:
        m.setattr(Engine, "share_work", False)
        alone = run(w, backfill)
    return shared, alone


def assert_same(shared: PlacementResult, alone: PlacementResult) -> None:
    assert shared.placements == alone.placements
    assert shared.reasons == alone.reasons
    assert shared.details == alone.details  # the top nodes' per-scorer scores and totals included


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=2**32), st.sampled_from(["none", "easy", "strict-fifo"]))
def test_sharing_changes_nothing_on_random_fleets(seed: int, backfill: str) -> None:
    rng = random.Random(seed)
    w = shareable(world(seed, n_nodes=rng.randint(3, 60), n_jobs=rng.randint(1, 60)), rng)
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert_same(*both(w, backfill, monkeypatch))


def test_sharing_changes_nothing_on_larger_fleets_with_few_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    # Few kept: requests are evicted and rebuilt mid-pass; many repeats of few requests.
    monkeypatch.setattr(Engine, "shared_max", 2)
    for seed in range(4):
        rng = random.Random(seed)
        w = shareable(world(seed, n_nodes=300, n_jobs=400), rng)
        for j in w.queue[::3]:
            j.locality = None
        shared, alone = both(w, "easy", monkeypatch)
        assert_same(shared, alone)
        assert shared.placements


def test_sharing_also_with_the_default_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for seed in range(3):
        w = world(seed, n_nodes=200, n_jobs=300)
        w.settings = {"queue": {}}
        shared, alone = both(w, "easy", monkeypatch)
        assert_same(shared, alone)


def engine_for(nodes: list[Any], **weights: float) -> Engine:
    snapshot = Snapshot(jobs=[], attempts=[], nodes=nodes, instance_types=[])
    free = {n.id: n.capacity for n in nodes}
    return build_engine(snapshot, nodes, free, NOW, PlacementSettings.model_validate(only(**weights)))


def test_a_commit_that_fills_a_node_takes_it_off_the_shared_request() -> None:
    engine = engine_for([node("small", 4, 8), node("big", 4, 64)], pack=1)
    demand = Demand.of(job(1, 1, 6))
    first = engine.choose(demand)
    assert first is not None and engine.arrays.ids[first.nodes[0]] == "small"
    # Another request fills "small": the shared work of the first must see it no longer fits.
    engine.commit(Demand.of(job(2, 1, 4)), first.nodes)
    again = engine.choose(Demand.of(job(3, 1, 6)))
    assert again is not None and [engine.arrays.ids[i] for i in again.nodes] == ["big"]
    assert [row["node"] for row in again.top] == ["big"]  # "small" is no longer a survivor


def test_a_commit_that_raises_a_node_moves_it_up_in_the_shared_request() -> None:
    engine = engine_for([node("a", 8, 64), node("b", 8, 48)], pack=1)
    demand = Demand.of(job(1, 1, 4))
    first = engine.choose(demand)
    assert first is not None and [row["node"] for row in first.top] == ["b", "a"]
    # A placement on "a" leaves it fuller than "b": packing now prefers it.
    engine.commit(Demand.of(job(2, 1, 32)), [engine.arrays.index["a"]])
    again = engine.choose(Demand.of(job(3, 1, 4)))
    assert again is not None and [row["node"] for row in again.top] == ["a", "b"]
    assert again.top[0]["scores"]["pack"] == pytest.approx(1 - (32 - 4) / 64)


def test_exclusions_apply_to_shared_work_without_changing_it() -> None:
    engine = engine_for([node("a", 8, 16), node("b", 8, 32), node("c", 8, 64)], pack=1)
    demand = Demand.of(job(1, 1, 4))
    held = np.zeros(engine.arrays.n, dtype=bool)
    held[engine.arrays.index["a"]] = True
    excluded = engine.choose(demand, held)
    assert excluded is not None and [row["node"] for row in excluded.top] == ["b", "c"]
    plain = engine.choose(Demand.of(job(2, 1, 4)))
    assert plain is not None and [row["node"] for row in plain.top] == ["a", "b", "c"]


def test_requests_that_differ_share_nothing() -> None:
    engine = engine_for([node("gpu", 8, 32, gpus=1), node("cpu", 8, 16)], pack=1)
    cpu = engine.choose(Demand.of(job(1, 1, 4)))
    gpu = engine.choose(Demand.of(job(2, 1, 4, gpus=1)))
    assert cpu is not None and gpu is not None
    assert [row["node"] for row in cpu.top] == ["cpu", "gpu"]
    assert [row["node"] for row in gpu.top] == ["gpu"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=2**32))
def test_one_node_forms_equal_the_array_forms(seed: int) -> None:
    """Explanations and commits use the scorers' one-node forms: they must give the very same
    floats as the array forms the ranking uses."""
    w = world(seed, n_nodes=40)
    snapshot = Snapshot(jobs=w.running_jobs + w.queue, attempts=w.attempts, nodes=w.nodes, instance_types=[])
    engine = build_engine(snapshot, w.nodes, w.free(), w.now, PlacementSettings())
    rng = random.Random(seed)
    idx = np.arange(engine.arrays.n, dtype=np.int64)
    for j in w.queue[:5]:
        demand = Demand.of(j)
        resolved = engine.resolve(demand)
        noise = rng.random()
        for scorer in SCORERS.values():
            if scorer.one is not None:
                array = scorer.exact(engine.scores, demand, idx, resolved, noise).tolist()
                assert [scorer.one(engine.scores, demand, i, resolved, noise) for i in idx.tolist()] == array
            if scorer.base_one is not None:
                assert scorer.base is not None
                array = scorer.base(engine.scores, idx).tolist()
                assert [scorer.base_one(engine.scores, i) for i in idx.tolist()] == array
        chosen = engine.choose(demand)
        if chosen is not None:
            engine.commit(demand, chosen.nodes)  # so later rounds see partly filled nodes


def test_a_node_the_same_request_fills_drops_out() -> None:
    engine = engine_for([node("a", 2, 4)], pack=1)
    half = Demand(job_id=1, resources=Resources(0.5, int(0.5 * GiB), 0, 0))
    for k in range(4):
        choice = engine.choose(half)
        assert choice is not None, k
        engine.commit(half, choice.nodes)
    assert engine.choose(half) is None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=2**32))
def test_placeable_counts_what_choose_finds_and_evaluate_counts(seed: int) -> None:
    """A walk kept between passes asks whether each job it held back now fits where it would
    delay no reservation: `placeable` counts the nodes passing the filters from the shared work,
    and must answer as `choose` with those nodes excluded (whether it finds nodes) and `evaluate`
    (how many pass), through commits that fill nodes, and for jobs with locality hints (no shared
    work) too."""
    w = world(seed, n_nodes=30, n_jobs=40)
    rng = random.Random(seed)
    snapshot = Snapshot(jobs=w.running_jobs + w.queue, attempts=w.attempts, nodes=w.nodes, instance_types=[])
    engine = build_engine(
        snapshot, w.nodes, w.free(), w.now, PlacementSettings.model_validate(shareable(w, rng).settings)
    )
    for j in w.queue:
        demand = Demand.of(j)
        exclude = None if rng.random() < 0.3 else np.array([rng.random() < 0.5 for _ in range(engine.arrays.n)])
        placeable, fitting = engine.placeable(demand, exclude)
        assert placeable == (engine.choose(demand, exclude, keep_top=False) is not None)
        if not placeable:
            assert fitting == engine.evaluate(demand).count
        chosen = engine.choose(demand)
        if chosen is not None and rng.random() < 0.7:
            engine.commit(demand, chosen.nodes)
