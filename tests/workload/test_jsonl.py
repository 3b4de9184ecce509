"""corral's JSON Lines workload format: a JobRequest per line plus simulation fields."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.workload import WorkloadError, detect_format, read_workload
from corral.workload.jsonl import read_jsonl


def jsonl(tmp_path: Path, *lines: object, name: str = "w.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def test_a_line_is_a_job_request_with_submit_and_run_times(tmp_path: Path) -> None:
    path = jsonl(
        tmp_path,
        "# a comment",
        {"submit_time": 30, "run_time": "2m", "vcpus": 2, "ram": "3GiB", "nodes": 2, "name": "a", "priority": 5},
        {"run_time": 10, "exit_code": 3, "cancel_after": 100, "traits": {"zone": "a"}},
    )
    jobs = read_jsonl(path).jobs
    first, second = sorted(jobs, key=lambda j: j.name)
    assert (first.submit, first.run, first.vcpus, first.ram_mib) == (30, 120, 2, 3072)
    assert (first.nodes, first.priority) == (2, 5)
    assert (second.submit, second.exit_code, second.cancel_at) == (0, 3, 100)
    job = second.to_job()
    assert job.traits == {"zone": "a"} and job.command == ["sim-job"]


def test_submit_times_can_be_scaled(tmp_path: Path) -> None:
    (job,) = read_jsonl(jsonl(tmp_path, {"submit_time": 100, "run_time": 1, "cancel_after": 10}), time_scale=0.5).jobs
    assert job.submit == 50 and job.cancel_at == 60


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"run_time": 10, "vcpu": 2}', "vcpu: unknown field"),
        ('{"vcpus": 2}', "run_time: required"),
        ('{"run_time": 10, "ram": "lots"}', "ram: not a size"),
        ('{"run_time": 10,', "not valid JSON"),
    ],
)
def test_a_bad_line_names_its_line_and_field(tmp_path: Path, line: str, message: str) -> None:
    path = jsonl(tmp_path, {"run_time": 1}, line)
    with pytest.raises(WorkloadError) as error:
        read_jsonl(path)
    assert f"{path}:2: " in str(error.value) and message in str(error.value)


def test_skip_bad_lines(tmp_path: Path) -> None:
    w = read_jsonl(jsonl(tmp_path, {"run_time": 1}, "{}", "nonsense", {"run_time": 2}), skip_bad_lines=True)
    assert len(w.jobs) == 2 and w.stats.skipped == 2


def test_format_is_detected_by_name_then_by_content(tmp_path: Path) -> None:
    assert detect_format(jsonl(tmp_path, {"run_time": 1}, name="a.jsonl")) == "jsonl"
    assert detect_format(jsonl(tmp_path, {"run_time": 1}, name="a.txt")) == "jsonl"
    swf = tmp_path / "b.txt"
    swf.write_text("; header\n1 0 -1 10 1 -1 -1 1 60 -1 1 1 1 -1 1 1 -1 -1\n")
    assert detect_format(swf) == "swf"
    assert len(read_workload(jsonl(tmp_path, {"run_time": 1}, name="c.log")).jobs) == 1
