"""Running simulations: a workload against one or several configs, with progress, measured."""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.config import Config, load_config
from corral.sim.engine import Simulation, SimulationError
from corral.sim.metrics import SimResult, measure
from corral.workload import Format, Workload, WorkloadError, read_workload
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


@dataclass(frozen=True)
class WorkloadMapping:
    """How a run read the workload: its config's `sim.workload`, with the command line's overrides."""

    scale: float  # vcpus per SWF processor
    time_scale: float  # multiplies submit times
    default_memory: float  # MiB per SWF processor when the log has none

    def summary(self, fmt: str) -> dict[str, float | None]:
        """The JSON figures; a JSON Lines job gives its own vcpus and RAM (null: does not apply)."""
        swf = fmt == "swf"
        return {
            "swf_scale": self.scale if swf else None,
            "time_scale": self.time_scale,
            "swf_default_memory_mib": self.default_memory if swf else None,
        }


@dataclass
class Outcome:
    workload: Workload
    results: list[SimResult] = field(default_factory=list)
    mappings: list[WorkloadMapping] = field(default_factory=list)  # each run's, in the order of `results`
    configs: list[Path | None] = field(default_factory=list)  # each run's config file (None: the defaults)
    limit: int | None = None  # --limit: only the first N jobs were replayed

    @property
    def title(self) -> str:
        """The workload and the jobs replayed: all of them, or the first N (--limit)."""
        replayed, read = len(self.workload.jobs), self.workload.stats.jobs
        if replayed < read:
            return f"{self.workload.source}: the first {replayed:,} of {read:,} jobs (--limit)"
        return f"{self.workload.source}: {replayed:,} jobs"

    def to_json(self) -> dict[str, Any]:
        stats = self.workload.stats
        fmt = self.workload.format
        runs = [r.summary() for r in self.results]
        for run, mapping in zip(runs, self.mappings, strict=False):
            run.update(mapping.summary(fmt))
        for run, config in zip(runs, self.configs, strict=False):
            run["config"] = None if config is None else str(config)
        return {
            "workload": {
                "source": self.workload.source,
                "format": fmt,
                "lines": stats.lines,
                "jobs": stats.jobs,
                "replayed": len(self.workload.jobs),
                "limit": self.limit,
                "skipped_lines": stats.skipped,
                "skipped_examples": stats.errors[:5],
                "quirks": dict(sorted(stats.quirks.items())),
            },
            "runs": runs,
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


def mapping_for(config: Config, options: WorkloadOptions) -> WorkloadMapping:
    settings = config.sim.workload
    return WorkloadMapping(
        scale=options.scale if options.scale is not None else settings.scale,
        time_scale=options.time_scale if options.time_scale is not None else settings.time_scale,
        default_memory=options.default_memory if options.default_memory is not None else settings.default_memory,
    )


def read_for(path: Path, config: Config, options: WorkloadOptions) -> Workload:
    mapping = mapping_for(config, options)
    return read_workload(
        path,
        options.fmt,
        scale=mapping.scale,
        time_scale=mapping.time_scale,
        default_memory=mapping.default_memory,
        skip_bad_lines=options.skip_bad_lines,
        limit=options.limit,
    )


def simulate(
    workload_path: Path,
    runs: list[Run],
    options: WorkloadOptions | None = None,
    progress: Progress | None = None,
    workers: int = 1,
) -> Outcome:
    """Replay the workload once per run. Runs whose configs map SWF jobs the same way share one
    reading of the file. With `workers` over 1, runs go to that many processes at once (each run
    is alone in its process and seeded by its config, so the results are those of one after the
    other)."""
    options = options or WorkloadOptions()
    cache: dict[WorkloadMapping, Workload] = {}
    jobs_of: list[list[SimJob]] = []
    mappings = [mapping_for(run.config, options) for run in runs]
    for run, mapping in zip(runs, mappings, strict=True):
        workload = cache.get(mapping)
        if workload is None:
            workload = cache[mapping] = read_for(workload_path, run.config, options)
        if not workload.jobs:
            # A table of zeros and dashes would read as a run's results.
            stats = workload.stats
            why = ""
            if stats.skipped:
                why = f": every job line was bad ({stats.skipped:,} skipped), e.g. {stats.errors[0]}"
            raise WorkloadError(f"{workload_path}: no job to replay{why}")
        jobs_of.append(workload.jobs)
    assert runs, "no runs"
    outcome = Outcome(
        next(iter(cache.values())), mappings=mappings, configs=[run.source for run in runs], limit=options.limit
    )
    if workers > 1 and len(runs) > 1:
        outcome.results.extend(_in_processes(runs, jobs_of, progress, min(workers, len(runs))))
    else:
        outcome.results.extend(simulate_one(jobs, run, progress) for run, jobs in zip(runs, jobs_of, strict=True))
    return outcome


def default_workers() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


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


# A worker's progress goes to the parent through this queue (set by the pool's initializer), and
# then None when its run is over.
Report = tuple[str, float, float] | None
_progress_queue: multiprocessing.Queue[Report] | None = None


def _worker_started(reports: multiprocessing.Queue[Report]) -> None:
    global _progress_queue
    _progress_queue = reports


def _run_in_worker(jobs: list[SimJob], run: Run, with_progress: bool) -> SimResult:
    reports = _progress_queue
    assert reports is not None

    def report(label: str, done: float, total: float) -> None:
        reports.put((label, done, total))

    try:
        return simulate_one(jobs, run, report if with_progress else None)
    finally:
        reports.put(None)


def _in_processes(
    runs: list[Run], jobs_of: list[list[SimJob]], progress: Progress | None, workers: int
) -> list[SimResult]:
    # Spawned, not forked: the parent may run threads (the progress bar's), which a fork copies
    # mid-flight.
    context = multiprocessing.get_context("spawn")
    reports: multiprocessing.Queue[Report] = context.Queue()
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_worker_started, initargs=(reports,)) as pool:
        futures: list[Future[SimResult]] = [
            pool.submit(_run_in_worker, jobs, run, progress is not None)
            for run, jobs in zip(runs, jobs_of, strict=True)
        ]
        # A worker's reports reach the queue in the order it made them: once every run's None has
        # come, every report has. A worker that died sends none: its future says so.
        over = 0
        while over < len(futures):
            try:
                report = reports.get(timeout=0.1)
            except queue.Empty:
                if any(f.done() and f.exception() is not None for f in futures):
                    break
                continue
            if report is None:
                over += 1
            elif progress is not None:
                progress(*report)
        try:
            return [f.result() for f in futures]
        except BrokenProcessPool as exc:
            raise SimulationError(
                "a simulation worker process died before its run ended (killed, perhaps for want of"
                " memory: each worker holds its own copy of the workload and of its run's state);"
                " try fewer --workers"
            ) from exc
