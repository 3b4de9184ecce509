"""run.read_for: the workload a run replays, with the command line's overrides applied."""

from __future__ import annotations

from pathlib import Path

from corral.config import load_config
from corral.sim.run import Outcome, WorkloadOptions, read_for
from corral.workload.synth import SynthParams, generate, to_swf


def test_with_limit_the_quirks_reported_are_those_of_the_jobs_replayed(tmp_path: Path) -> None:
    params = SynthParams(jobs=400, seed=5, quirks=True, memory_fraction=0.5)
    records = generate(params)  # sorted by submit time: the first 100 are the 100 a limit keeps
    path, head = tmp_path / "w.swf", tmp_path / "head.swf"
    path.write_text(to_swf(records, params))
    head.write_text(to_swf(records[:100], params))
    config = load_config(None)
    whole = read_for(path, config, WorkloadOptions())
    limited = read_for(path, config, WorkloadOptions(limit=100))
    alone = read_for(head, config, WorkloadOptions())
    assert len(limited.jobs) == 100 and limited.jobs == whole.jobs[:100]
    reported = Outcome(limited).to_json()["workload"]
    assert (reported["replayed"], reported["jobs"]) == (100, 400)
    assert reported["quirks"] == Outcome(alone).to_json()["workload"]["quirks"]
    assert reported["quirks"]["no memory: default used"] < whole.stats.quirks["no memory: default used"]
