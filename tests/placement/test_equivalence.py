"""The vectorised engine and the plain per-node reference choose the same nodes on random fleets."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from random_fleets import World, world
from reference import Reference

from corral.core.snapshot import Snapshot
from corral.placement.placer import make_placer
from corral.placement.settings import PlacementSettings


def engine_choices(w: World) -> dict[int, tuple[str, ...]]:
    snapshot = Snapshot(jobs=w.running_jobs + w.queue, attempts=w.attempts, nodes=w.nodes, instance_types=[])
    placer = make_placer(PlacementSettings.model_validate(w.settings))
    result = placer(snapshot, w.queue, w.nodes, w.free(), w.now)
    return {p.job_id: p.node_ids for p in result.placements}


def reference_choices(w: World) -> dict[int, tuple[str, ...]]:
    ref = Reference(
        w.nodes,
        w.free(),
        w.attempts,
        w.running_jobs + w.queue,
        w.nodes,
        PlacementSettings.model_validate(w.settings),
        w.now,
    )
    chosen = {}
    for job in w.queue:
        nodes = ref.place(job)
        if nodes is not None:
            chosen[job.id] = tuple(nodes)
    return chosen


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=2**32))
def test_engine_matches_reference(seed: int) -> None:
    w = world(seed)
    assert engine_choices(w) == reference_choices(w)


def test_engine_matches_reference_on_a_larger_fleet() -> None:
    for seed in range(3):
        w = world(seed, n_nodes=200, n_jobs=120)
        expected = reference_choices(w)
        assert engine_choices(w) == expected
        assert expected  # the stream places something
