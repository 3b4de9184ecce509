"""Job dependencies in a simulation: a JSON Lines workload names its jobs by `id` and links them
with Slurm's --dependency; the simulator holds a job back until the jobs it names got far enough,
and cancels one whose dependency can never be satisfied, as the live loop does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from corral.core.model import JobState
from corral.sim.engine import Simulation
from corral.workload import WorkloadError
from corral.workload.jsonl import read_jsonl
from tests.sim.helpers import config


def workload(tmp_path: Path, *lines: dict[str, Any]) -> Path:
    path = tmp_path / "jobs.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_a_workload_links_its_jobs_and_the_simulator_runs_them_in_order(tmp_path: Path) -> None:
    path = workload(
        tmp_path,
        {"id": 10, "run_time": 600},
        {"id": 20, "run_time": 60, "dependency": "afterok:10"},
        {"id": 30, "run_time": 5, "exit_code": 1},
        {"run_time": 60, "dependency": "afterok:30", "submit_time": 1},
        {"run_time": 60, "dependency": {"afternotok": [30], "after": 10}, "submit_time": 1},
    )
    jobs = read_jsonl(path).jobs
    assert [str(j.dependency) if j.dependency else None for j in jobs] == [
        None,
        "afterok:1",
        None,
        "afterok:3",
        "afternotok:3,after:1",
    ]
    sim = Simulation(jobs, config(), check_index=True).run()
    first, after_first, failing, never, after_failure = (sim.records[i] for i in range(1, 6))
    assert [r.state for r in (first, after_first, failing, never, after_failure)] == [
        JobState.COMPLETE,
        JobState.COMPLETE,
        JobState.FAILED,
        JobState.CANCELLED,
        JobState.COMPLETE,
    ]
    assert first.wait is not None and after_first.wait is not None
    assert after_first.wait >= first.wait + first.run  # it started once the first had completed
    assert never.wait is None  # never ran


def test_kept_queued_a_job_that_can_never_run_ends_a_fixed_fleets_replay(tmp_path: Path) -> None:
    path = workload(
        tmp_path,
        {"id": 1, "run_time": 5, "exit_code": 2},
        {"id": 2, "run_time": 5, "dependency": "afterok:1"},
        {"id": 3, "run_time": 5, "dependency": "afterany:2"},  # waits for one that never runs
    )
    fleet = {"mode": "fixed", "nodes": [{"instance_type": "small", "count": 1}]}
    # (Its node fails and is repaired for ever: only having nothing left to run ends the replay.)
    cfg = config(sim={"fleet": fleet, "failures": {"per_instance_day": 24}, "boot_delay": {"distribution": "fixed"}})
    cfg.policy.dispatch.kill_invalid_depend = False
    sim = Simulation(read_jsonl(path).jobs, cfg, check_index=True).run()
    assert list(sim.records) == [1]
    assert sim.now < 3600  # ended when nothing could run any more, not at the horizon (a week on)
    assert sim.jobs[2].wait_reason == "DependencyNeverSatisfied: afterok:1 (job 1 failed)"
    assert sim.jobs[3].wait_reason == "Dependency: waits for afterany:2 (queued)"


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([{"id": 1, "run_time": 5}, {"run_time": 5, "dependency": "afterok:2"}], ":2: dependency: no job has id 2"),
        (
            [{"run_time": 5, "dependency": "afterok:7"}, {"id": 7, "run_time": 5}],
            ":1: dependency: job 7 (line 2) is not submitted before this one",
        ),
        (
            [{"id": 7, "run_time": 5, "submit_time": 10}, {"run_time": 5, "dependency": "afterany:7"}],
            ":2: dependency: job 7 (line 1) is not submitted before this one",
        ),
        ([{"id": 3, "run_time": 5}, {"id": 3, "run_time": 5}], ":2: id: 3 names another job already (line 1)"),
        ([{"id": 0, "run_time": 5}], ":1: id: Input should be greater than or equal to 1"),
        ([{"run_time": 5, "dependency": "afterok:1?afterany:1,after:1"}], ":1: dependency: 'afterok:1?afterany"),
        (
            # A submission's reference by place: a workload names its jobs by `id` instead.
            [{"id": 1, "run_time": 5}, {"run_time": 5, "dependency": "afterok:@0"}],
            ":2: dependency: afterok:@0: a workload names a job by its `id` (afterok:ID), not by its place",
        ),
    ],
)
def test_a_bad_link_names_its_line(tmp_path: Path, lines: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(WorkloadError, match=message.replace("?", r"\?").replace("(", r"\(").replace(")", r"\)")):
        read_jsonl(workload(tmp_path, *lines))


def test_skipping_a_bad_line_skips_the_jobs_that_name_it(tmp_path: Path) -> None:
    path = workload(
        tmp_path,
        {"id": 1, "run_time": 5, "dependency": "afterok:9"},
        {"id": 2, "run_time": 5, "dependency": "afterok:1"},
        {"id": 3, "run_time": 5},
    )
    read = read_jsonl(path, skip_bad_lines=True)
    assert [j.id for j in read.jobs] == [3]
    assert read.stats.skipped == 2
    assert read.stats.errors[1].endswith(":2: dependency: job 1 (line 1) was skipped")
