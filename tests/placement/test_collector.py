"""The placer pauses the cyclic garbage collector during a pass and always restores it."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
from placement_helpers import NOW, job, node

import corral.core.reconcile as reconcile_module
import corral.placement.placer as placer_module
from corral.core.model import GiB, InstanceType, Job, Resources
from corral.core.settings import PolicySettings
from corral.core.snapshot import Snapshot
from corral.placement.collector import collector_paused
from corral.placement.placer import make_placer


@pytest.fixture(autouse=True)
def _collector_enabled() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_paused_while_running_and_enabled_after() -> None:
    seen: list[bool] = []

    @collector_paused
    def work(x: int) -> int:
        seen.append(gc.isenabled())
        return x + 1

    assert work(1) == 2
    assert seen == [False]
    assert gc.isenabled()


def test_enabled_again_after_an_exception() -> None:
    @collector_paused
    def fails() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        fails()
    assert gc.isenabled()


def test_a_caller_that_disabled_the_collector_keeps_it_disabled() -> None:
    @collector_paused
    def work() -> bool:
        return gc.isenabled()

    gc.disable()
    assert work() is False
    assert not gc.isenabled()


def test_a_pass_runs_paused_and_restores_the_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []
    build = placer_module.build_engine

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return build(*args, **kwargs)

    monkeypatch.setattr(placer_module, "build_engine", spy)
    nodes = [node("n1", 4, 16)]
    queue = [job(1, 1, 4)]
    snapshot = Snapshot(jobs=queue, attempts=[], nodes=nodes, instance_types=[])
    result = make_placer(None)(snapshot, queue, nodes, {"n1": nodes[0].capacity}, NOW)
    assert [p.job_id for p in result.placements] == [1]
    assert seen == [False]
    assert gc.isenabled()


def test_a_reconcile_pass_runs_paused_and_restores_the_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    # The boot planner, which the placer does not cover: it lists every waiting job each pass.
    seen: list[bool] = []
    plan_boots = reconcile_module.plan_boots

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return plan_boots(*args, **kwargs)

    monkeypatch.setattr(reconcile_module, "plan_boots", spy)
    big = InstanceType("big", 8, 32 * GiB, 0.40)
    waiting = Job(id=1, command=["true"], resources=Resources(4, 8 * GiB))
    snapshot = Snapshot(jobs=[waiting], attempts=[], nodes=[], instance_types=[big])
    decisions = reconcile_module.plan_pass(snapshot, NOW, PolicySettings())
    assert [boot.instance_type for boot in decisions.boots] == ["big"]
    assert seen == [False]
    assert gc.isenabled()
