"""Small worlds for simulator tests: two instance types, fixed 60 s boots, 1 s passes."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

from corral.config import Config
from corral.core.snapshot import Decisions, Snapshot
from corral.loop import decide
from corral.sim.engine import Simulation
from corral.sim.metrics import SimResult, measure
from corral.workload.model import SimJob

SMALL = {"name": "small", "vcpus": 2, "ram": "4GiB", "price_per_hour": 0.10}
BIG = {"name": "big", "vcpus": 8, "ram": "32GiB", "price_per_hour": 0.40}


def config(**sections: Any) -> Config:
    """A config with SMALL and BIG, fixed 60 s boots; keyword sections are merged in (one level deep)."""
    data: dict[str, Any] = {
        "instance_types": [SMALL, BIG],
        "sim": {"boot_delay": {"distribution": "fixed", "seconds": 60}},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return Config.model_validate(data)


def job(
    job_id: int, submit: float = 0.0, run: float = 600.0, vcpus: float = 1, ram_gib: float = 1, **kw: Any
) -> SimJob:
    return SimJob(id=job_id, submit=submit, run=run, vcpus=vcpus, ram_mib=int(ram_gib * 1024), **kw)


def simulate(jobs: list[SimJob], cfg: Config, **kw: Any) -> tuple[Simulation, SimResult]:
    """Runs with the kept index checked against a fresh one at every pass."""
    sim = Simulation(jobs, cfg, **{"check_index": True, **kw}).run()
    return sim, measure(sim)


def summary(sim: Simulation) -> dict[str, object]:
    """A run's results without its wall-clock figures (what two replays of one world must share)."""
    result = measure(sim).summary()
    for key in ("passes", "wall_seconds", "jobs_per_second"):
        result.pop(key)
    return result


def recorder(seen: list[tuple[Snapshot, float, Decisions]]) -> Callable[[Snapshot, float, Decisions], None]:
    """An `on_pass` hook keeping a copy of every pass's snapshot, time and decisions."""

    def record(snapshot: Snapshot, now: float, decisions: Decisions) -> None:
        # The live loop has no kept index: it groups the snapshot itself.
        seen.append((copy.deepcopy(dataclasses.replace(snapshot, index=None)), now, copy.deepcopy(decisions)))

    return record


Seen = list[tuple[Snapshot, float, Decisions]]


def decides_as_live(jobs: list[SimJob], cfg: Config) -> Seen:
    """Replays the world with explanations, as the live loop places, and asserts that the live
    loop's `decide` makes each pass's decisions from the same snapshot; returns the passes."""
    cfg = cfg.model_copy(deep=True)
    cfg.sim.explanations = True
    seen: Seen = []
    sim = Simulation(copy.deepcopy(jobs), cfg, on_pass=recorder(seen)).run()
    live = sim.live_config()
    for snapshot, now, decisions in seen:
        assert decide(snapshot, now, live) == decisions, f"simulator against live loop, at {now}"
    return seen


def skips_as_it_ticks(
    jobs: list[SimJob], cfg: Config, on_pass: Callable[[Snapshot, float, Decisions], None] | None = None
) -> None:
    """Asserts that the replay skipping quiet ticks (its kept index checked at every pass; `on_pass`
    watching it) ends every job as a replay with a pass at every tick does."""
    skipping = Simulation(copy.deepcopy(jobs), cfg, check_index=True, on_pass=on_pass).run()
    ticking = Simulation(copy.deepcopy(jobs), cfg, every_tick=True).run()
    assert skipping.records == ticking.records
