"""Job arrays in a simulation: a JSON Lines job with `array` is a job per task, and the simulator
keeps no more of them running at once than the array's throttle, by the core's own decision; a
dependency on the array waits for all its tasks."""

from __future__ import annotations

import json
from pathlib import Path

from corral.core.model import JobState
from corral.sim.engine import Simulation
from corral.workload.jsonl import read_jsonl
from tests.sim.helpers import config


def test_a_workload_array_runs_as_tasks_never_more_at_once_than_its_throttle(tmp_path: Path) -> None:
    path = tmp_path / "jobs.jsonl"
    lines = [{"id": 7, "run_time": 600, "array": "0-5%2"}, {"run_time": 600, "dependency": "afterany:7"}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    jobs = read_jsonl(path).jobs
    assert [(j.id, j.array_job_id, j.array_task_id) for j in jobs] == [
        *((n + 1, 1, n) for n in range(6)),
        (7, None, None),
    ]
    # The workload's id 7 names the array: every task of it, as Slurm reads a dependency on an array.
    assert str(jobs[6].dependency) == "afterany:1:2:3:4:5:6"
    sim = Simulation(jobs, config(), check_index=True).run()
    tasks = [sim.records[i] for i in range(1, 7)]
    assert all(r.state is JobState.COMPLETE and r.wait is not None for r in tasks)
    runs = [(r.submit + (r.wait or 0.0), r.submit + (r.wait or 0.0) + r.run) for r in tasks]
    at_once = max(sum(1 for start, end in runs if start <= moment < end) for moment, _ in runs)
    assert at_once == 2  # room for all six (the boot planner would boot for each): the throttle's 2
    after = sim.records[7]
    assert after.wait is not None and after.submit + after.wait >= max(end for _, end in runs)
