"""Job arrays in a simulation: a JSON Lines job with `array` is a job per task, and the simulator
keeps no more of them running at once than the array's throttle, by the core's own decision; a
dependency on the array waits for all its tasks (afternotok: until all ended, one of them failed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from corral.core.model import JobState
from corral.sim.engine import Simulation
from corral.workload import WorkloadError
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


def test_an_afternotok_cleanup_step_runs_once_every_task_ended_and_one_failed(tmp_path: Path) -> None:
    """Slurm's reading of afternotok on an array, through the core's own judgement: the cleanup of
    a sweep with one failing task runs after the last task ended (not at the first failure); that
    of a sweep whose every task completed is never satisfied, and is cancelled."""
    path = tmp_path / "jobs.jsonl"
    lines = [
        {"id": 1, "run_time": 600, "array": "0-3%2", "task_exit_codes": {"0": 1}},
        {"id": 2, "run_time": 60, "dependency": "afternotok:1"},
        {"id": 3, "run_time": 600, "array": "0-1"},
        {"id": 4, "run_time": 60, "dependency": "afternotok:3_*"},
        {"id": 5, "run_time": 60, "dependency": "afternotok:1_0"},  # task 0 alone, not the whole array
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    jobs = read_jsonl(path).jobs
    assert [(j.id, j.exit_code) for j in jobs[:4]] == [(1, 1), (2, 0), (3, 0), (4, 0)]
    assert [str(j.dependency) for j in jobs if j.dependency is not None] == [
        "afternotok:1_*",
        "afternotok:6_*",
        "afternotok:1",
    ]
    sim = Simulation(jobs, config(), check_index=True).run()
    tasks = [sim.records[i] for i in range(1, 5)]
    assert [r.state for r in tasks] == [JobState.FAILED, JobState.COMPLETE, JobState.COMPLETE, JobState.COMPLETE]
    last_end = max(r.submit + (r.wait or 0.0) + r.run for r in tasks)
    failed = tasks[0]
    assert failed.wait is not None and failed.submit + failed.wait + failed.run < last_end
    cleanup, never, after_task_0 = sim.records[5], sim.records[8], sim.records[9]
    assert cleanup.state is JobState.COMPLETE and cleanup.wait is not None
    assert cleanup.submit + cleanup.wait >= last_end
    assert never.state is JobState.CANCELLED and never.wait is None
    assert after_task_0.state is JobState.COMPLETE and after_task_0.wait is not None
    assert after_task_0.submit + after_task_0.wait < last_end


def test_a_workload_names_only_tasks_its_arrays_have(tmp_path: Path) -> None:
    path = tmp_path / "jobs.jsonl"
    for lines, says in (
        (
            [{"id": 1, "run_time": 5, "array": "0-1", "task_exit_codes": {"5": 1}}],
            ":1: task_exit_codes: 5 is not a task",
        ),
        (
            [{"id": 1, "run_time": 5}, {"run_time": 5, "dependency": "afternotok:1_*"}],
            ":2: dependency: job 1 (line 1) is not a job array (1_*)",
        ),
        (
            [{"id": 1, "run_time": 5, "array": "0-1"}, {"run_time": 5, "dependency": "afterok:1_4"}],
            ":2: dependency: job array 1 (line 1) has no task 4",
        ),
    ):
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        with pytest.raises(WorkloadError, match=re.escape(says)):
            read_jsonl(path)
