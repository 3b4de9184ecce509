"""Running simulations: a workload against one or several configs, with progress, measured."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.config import Config, load_config
from corral.sim.engine import Simulation
from corral.sim.metrics import SimResult, measure
from corral.workload import Format, Workload, read_workload
from corral.workload.model import SimJob

# Called as progress(label, simulated seconds done, simulated seconds expected).
Progress = Callable[[str, float, float], None]


@dataclass
class WorkloadOptions:
    """Command-line overrides of each config's `sim.workload` (None: take the config's)."""

    fmt: Format = "auto"
    scale: float | None = None
    time_scale: float | None = None
    default_memory: float | None = None  # MiB per processor
    skip_bad_lines: bool = False
    limit: int | None = None  # replay only the first N jobs (by submit time)


@dataclass
class Run:
    label: str
    config: Config
    source: Path | None


@dataclass
class Outcome:
    workload: Workload
    results: list[SimResult] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        stats = self.workload.stats
        return {
            "workload": {
                "source": self.workload.source,
                "format": self.workload.format,
                "lines": stats.lines,
                "jobs": stats.jobs,
                "replayed": len(self.workload.jobs),
                "skipped_lines": stats.skipped,
                "skipped_examples": stats.errors[:5],
                "quirks": dict(sorted(stats.quirks.items())),
            },
            "runs": [r.summary() for r in self.results],
        }


def load_runs(configs: list[Path], seed: int | None = None) -> list[Run]:
    """One run per config file (the defaults when none is given); labels are the file names,
    made unique."""
    runs = [Run("default", load_config(None), None)] if not configs else []
    seen: dict[str, int] = {}
    for path in configs:
        label = path.stem
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            label = f"{label}#{seen[label]}"
        runs.append(Run(label, load_config(path), path))
    if seed is not None:
        for run in runs:
            run.config.sim.seed = seed
    return runs


def read_for(path: Path, config: Config, options: WorkloadOptions) -> Workload:
    mapping = config.sim.workload
    workload = read_workload(
        path,
        options.fmt,
        scale=options.scale if options.scale is not None else mapping.scale,
        time_scale=options.time_scale if options.time_scale is not None else mapping.time_scale,
        default_memory=options.default_memory if options.default_memory is not None else mapping.default_memory,
        skip_bad_lines=options.skip_bad_lines,
    )
    if options.limit is not None:
        workload.jobs = workload.jobs[: options.limit]
    return workload


def simulate(
    workload_path: Path,
    runs: list[Run],
    options: WorkloadOptions | None = None,
    progress: Progress | None = None,
) -> Outcome:
    """Replay the workload once per run. Runs whose configs map SWF jobs the same way share one
    reading of the file."""
    options = options or WorkloadOptions()
    cache: dict[tuple[Any, ...], Workload] = {}
    outcome: Outcome | None = None
    for run in runs:
        mapping = run.config.sim.workload
        key = (mapping.scale, mapping.time_scale, mapping.default_memory)
        workload = cache.get(key)
        if workload is None:
            workload = cache[key] = read_for(workload_path, run.config, options)
        if outcome is None:
            outcome = Outcome(workload)
        outcome.results.append(simulate_one(workload.jobs, run, progress))
    assert outcome is not None, "no runs"
    return outcome


def simulate_one(jobs: list[SimJob], run: Run, progress: Progress | None = None) -> SimResult:
    first = jobs[0].submit if jobs else 0.0
    expected = (jobs[-1].submit - first if jobs else 0.0) or 1.0

    def report(now: float) -> None:
        if progress is not None:
            progress(run.label, now - first, expected)

    sim = Simulation(jobs, run.config, label=run.label, progress=report if progress else None)
    started = time.perf_counter()
    sim.run()
    wall = time.perf_counter() - started
    if progress is not None:
        progress(run.label, max(expected, sim.end_time - first), max(expected, sim.end_time - first))
    return measure(sim, wall)
