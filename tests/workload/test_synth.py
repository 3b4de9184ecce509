"""The synthetic workload generator: deterministic, readable, and shaped like a real log."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from corral.workload.swf import read_swf
from corral.workload.synth import SynthParams, generate, to_swf


def test_the_same_seed_gives_the_same_trace_and_another_seed_another() -> None:
    params = SynthParams(jobs=500, seed=3)
    assert np.array_equal(generate(params), generate(params))
    assert not np.array_equal(generate(params), generate(SynthParams(jobs=500, seed=4)))


def test_it_reads_back_with_the_quirks_it_was_asked_for(tmp_path: Path) -> None:
    params = SynthParams(jobs=2000, seed=1, quirks=True, memory_fraction=0.5)
    path = tmp_path / "synth.swf"
    path.write_text(to_swf(generate(params), params))
    workload = read_swf(path)
    assert len(workload.jobs) == 2000 and workload.stats.skipped == 0
    quirks = workload.stats.quirks
    for name in (
        "never ran (run time -1 or 0): cancelled on arrival",
        "requested processors missing: used allocated",
        "requested time missing: run time used",
        "ran longer than requested: ends at its time limit plus the grace (TIMEOUT)",
        "requested memory missing: used memory used",
    ):
        assert quirks[name] > 0, name


def test_statistics_look_like_a_parallel_machine_log() -> None:
    records = generate(SynthParams(jobs=20000, seed=2, max_procs=128))
    sizes, runs, requested, submits = records[:, 7], records[:, 3], records[:, 8], records[:, 1]
    assert 0.3 < np.mean(sizes == 1) < 0.6  # many serial jobs
    parallel = sizes[sizes > 1].astype(int)
    assert np.mean((parallel & (parallel - 1)) == 0) > 0.6  # powers of two dominate
    ran = runs > 0
    assert np.median(runs[ran]) < np.mean(runs[ran]) / 3  # heavy tail
    assert np.mean(requested[ran] >= runs[ran]) > 0.9  # users over-estimate
    assert np.all(np.diff(submits) >= 0)
    hours = (submits % 86400) // 3600
    assert np.sum((hours >= 12) & (hours < 18)) > 2 * np.sum(hours < 6)  # a daily cycle
