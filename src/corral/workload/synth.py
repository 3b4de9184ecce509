"""Synthetic SWF workloads with the shape of real parallel-machine logs, generated deterministically.

The statistics follow what the workload-modelling literature reports across the Parallel
Workloads Archive (Lublin & Feitelson 2003; Feitelson, "Workload Modeling for Computer Systems
Performance Evaluation", 2015), not one particular log:
- sizes: a large share of serial jobs; parallel sizes log-uniform with a strong preference for
  powers of two;
- run times: a two-branch log-normal mixture (many short jobs, a heavy tail of long ones), longer
  for larger jobs; capped at `max_runtime`;
- requested times: the run time times an over-estimate factor, rounded up to the round values
  users pick; a few jobs overrun their request a little;
- arrivals: a daily cycle (quiet nights, busier weekdays) and bursts of similar jobs from one user;
- users: Zipf-like activity; outcomes: mostly completed, some failed, some cancelled (half of
  those before they started, with run time 0 or -1, as real logs record them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ROUND_LIMITS = np.array([300, 900, 1800, 3600, 7200, 14400, 28800, 43200, 86400, 172800, 259200], dtype=float)


@dataclass(frozen=True)
class SynthParams:
    jobs: int = 1000
    seed: int = 1
    max_procs: int = 128
    serial_fraction: float = 0.3
    power_of_two_fraction: float = 0.75
    mean_interarrival: float = 600.0  # seconds, averaged over the daily cycle
    max_runtime: float = 172800.0
    burst_probability: float = 0.15  # an arrival that starts a burst of similar jobs
    mean_burst: float = 5.0
    failed_fraction: float = 0.2
    cancelled_fraction: float = 0.06
    memory_fraction: float = 0.0  # jobs that state requested memory (KB per processor)
    quirks: bool = False  # also write the odd records real logs have (missing fields, ...)


def generate(params: SynthParams) -> np.ndarray:
    """An (n, 18) float array of SWF records, sorted by submit time."""
    rng = np.random.default_rng(params.seed)
    n = params.jobs
    sizes = _sizes(rng, n, params)
    runs = _runtimes(rng, sizes, params)
    requested = _requested(rng, runs)
    overrun = rng.random(n) < 0.03
    runs = np.where(overrun, np.floor(requested * rng.uniform(1.0, 1.05, n)) + 1, runs)
    submits, bursts = _arrivals(rng, n, params)
    # Jobs of a burst repeat the first job's size and (roughly) its run time.
    sizes = sizes[bursts]
    runs = np.maximum(1.0, np.round(runs[bursts] * rng.uniform(0.8, 1.25, n)))
    requested = np.maximum(requested[bursts], np.where(overrun[bursts], 0, runs))
    users = _users(rng, n)[bursts]

    status = np.ones(n)
    draw = rng.random(n)
    status[draw < params.failed_fraction] = 0
    cancelled = draw > 1.0 - params.cancelled_fraction
    status[cancelled] = 5
    never_started = cancelled & (rng.random(n) < 0.5)
    runs = np.where(never_started, np.where(rng.random(n) < 0.5, 0.0, -1.0), runs)

    records = np.full((n, 18), -1.0)
    records[:, 0] = np.arange(1, n + 1)
    records[:, 1] = submits
    records[:, 3] = runs
    records[:, 4] = np.where(never_started, -1, sizes)
    records[:, 7] = sizes
    records[:, 8] = requested
    if params.memory_fraction > 0:
        with_memory = rng.random(n) < params.memory_fraction
        per_proc_kb = np.exp2(rng.integers(18, 23, n)).astype(float)  # 256 MiB .. 4 GiB per processor
        records[:, 9] = np.where(with_memory, per_proc_kb, -1)
    records[:, 10] = status
    records[:, 11] = users
    records[:, 12] = users
    records[:, 14] = 1
    records[:, 15] = 1
    if params.quirks:
        _add_quirks(rng, records)
    records = records[np.argsort(records[:, 1], kind="stable")]
    records[:, 0] = np.arange(1, n + 1)  # numbered in submit order, as the format asks
    return records


def to_swf(records: np.ndarray, params: SynthParams) -> str:
    header = [
        "; Version: 2.2",
        "; Computer: synthetic (corral.workload.synth)",
        f"; Note: generated with {params}",
        f"; MaxJobs: {len(records)}",
        f"; MaxRecords: {len(records)}",
        f"; MaxProcs: {params.max_procs}",
        ";",
    ]
    lines = [" ".join(_field(v) for v in row) for row in records]
    return "\n".join(header + lines) + "\n"


def _field(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:.2f}"


def _sizes(rng: np.random.Generator, n: int, params: SynthParams) -> np.ndarray:
    top = math.log2(params.max_procs)
    exponents = top * rng.random(n) ** 1.8  # skewed to small sizes, as in real logs
    powers = np.exp2(np.round(exponents))
    other = np.maximum(1, np.round(np.exp2(exponents)))
    sizes = np.where(rng.random(n) < params.power_of_two_fraction, powers, other)
    sizes = np.where(rng.random(n) < params.serial_fraction, 1, sizes)
    return np.minimum(sizes, params.max_procs)


def _runtimes(rng: np.random.Generator, sizes: np.ndarray, params: SynthParams) -> np.ndarray:
    n = len(sizes)
    short = rng.random(n) < 0.4
    median = np.where(short, 60.0, 2400.0) * (1.0 + 0.15 * np.log2(sizes))
    sigma = np.where(short, 1.3, 1.4)
    runs = np.exp(np.log(median) + sigma * rng.standard_normal(n))
    return np.clip(np.round(runs), 1, params.max_runtime)


def _requested(rng: np.random.Generator, runs: np.ndarray) -> np.ndarray:
    factor = np.exp(rng.uniform(0.0, math.log(8.0), len(runs)))
    wanted = runs * factor
    index = np.minimum(np.searchsorted(ROUND_LIMITS, wanted), len(ROUND_LIMITS) - 1)
    return np.maximum(ROUND_LIMITS[index], runs)


def _arrivals(rng: np.random.Generator, n: int, params: SynthParams) -> tuple[np.ndarray, np.ndarray]:
    """Submit times and, per job, the index of the job whose shape it copies (itself, or the first
    job of its burst)."""
    # Daily cycle: the rate over a day follows a raised cosine peaking mid-afternoon, weekends at 40%.
    hours = np.arange(24 * 7)
    daily = 0.25 + 0.75 * (0.5 - 0.5 * np.cos((hours % 24 - 3) / 24 * 2 * math.pi)) ** 1.5
    weekly = np.where(hours // 24 >= 5, 0.4, 1.0)
    shape = daily * weekly
    shape = shape / shape.mean()
    times = np.empty(n)
    source = np.arange(n)
    t = 0.0
    i = 0
    gaps = rng.exponential(params.mean_interarrival * (1 + params.burst_probability * (params.mean_burst - 1)), n)
    while i < n:
        hour = int(t // 3600) % len(shape)
        t += gaps[i] / shape[hour]
        times[i] = t
        first = i
        i += 1
        if rng.random() < params.burst_probability:
            extra = min(n - i, int(rng.geometric(1.0 / params.mean_burst)))
            # A burst rides on top of the arrival stream: the next independent arrival is not delayed.
            times[i : i + extra] = t + np.cumsum(rng.exponential(20.0, extra))
            source[i : i + extra] = first
            i += extra
    times = np.round(times - times.min())
    return times, source


def _users(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.minimum(rng.zipf(1.6, n), 500).astype(float)


def _add_quirks(rng: np.random.Generator, records: np.ndarray) -> None:
    n = len(records)
    picks = rng.choice(n, size=min(n, 12), replace=False)
    a, b, c, d = np.array_split(picks, 4)
    records[a, 7] = -1  # requested processors missing: allocated is used
    records[b, 8] = -1  # requested time missing: run time is used
    ran = c[records[c, 3] > 0]
    records[ran, 3] = records[ran, 8] + 120  # ran two minutes past the requested time
    records[d, 6] = 524288  # used memory recorded (KB per processor), no request
