"""corral's JSON Lines workload format: a JobRequest per line plus simulation fields."""

from __future__ import annotations

import gzip
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


def test_time_scale_scales_every_time_on_the_workloads_clock_but_no_duration(tmp_path: Path) -> None:
    line = {"submit_time": 1000, "not_before": 1500, "run_time": 100, "time_limit": 200, "cancel_after": 900}
    (job,) = read_jsonl(jsonl(tmp_path, line), time_scale=0.5).jobs
    assert (job.submit, job.to_job().not_before) == (500, 750)  # still 250 s after submission, as 500 s was
    assert (job.run, job.time_limit, job.cancel_at) == (100, 200, 500 + 900)
    (job,) = read_jsonl(jsonl(tmp_path, {"run_time": 1, "not_before": 10}), time_scale=2).jobs
    assert job.to_job().not_before == 20


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"run_time": 10, "vcpu": 2}', "vcpu: unknown field"),
        ('{"vcpus": 2}', "run_time: required"),
        ('{"run_time": 10, "ram": "lots"}', "ram: not a size"),
        ('{"run_time": 10,', "not valid JSON"),
        ('{"run_time": 10, "vcpus": 2, "vcpus": 64}', "key 'vcpus' is given twice"),
    ],
)
def test_a_bad_line_names_its_line_and_field(tmp_path: Path, line: str, message: str) -> None:
    path = jsonl(tmp_path, {"run_time": 1}, line)
    with pytest.raises(WorkloadError) as error:
        read_jsonl(path)
    assert f"{path}:2: " in str(error.value) and message in str(error.value)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"run_time": NaN}', "run_time: not a finite number: nan"),
        ('{"run_time": Infinity}', "run_time: not a finite number: inf"),
        ('{"run_time": "nan"}', "run_time: not a finite number: 'nan'"),
        ('{"run_time": 1e999}', "run_time: not a finite number: inf"),
        ('{"run_time": 1, "submit_time": "inf"}', "submit_time: not a finite number: 'inf'"),
        ('{"run_time": 1, "not_before": Infinity}', "not_before: not a finite number: inf"),
        ('{"run_time": 1, "not_before": "-inf"}', "not_before: not a finite number: '-inf'"),
        ('{"run_time": 1, "vcpus": Infinity}', "vcpus: not a finite number: inf"),
        ('{"run_time": 1, "vcpus": "NaN"}', "vcpus: not a finite number: 'NaN'"),
        ('{"run_time": 1, "ram": Infinity}', "ram: not a finite number: inf"),
        ('{"run_time": 1, "time_limit": NaN}', "time_limit: not a finite number: nan"),
        ('{"run_time": 1, "cancel_after": "Infinity"}', "cancel_after: not a finite number: 'Infinity'"),
        ('{"run_time": 1e308, "nodes": 3}', "run_time: more than 100 years: 1e+308 s"),
        ('{"run_time": 1, "submit_time": 4e9}', "submit_time: more than 100 years: 4e+09 s"),
        ('{"run_time": 1, "not_before": 1e20}', "not_before: more than 100 years: 1e+20 s"),
    ],
)
def test_nan_infinity_and_times_beyond_100_years_are_errors(tmp_path: Path, line: str, message: str) -> None:
    path = jsonl(tmp_path, {"run_time": 1}, line)
    with pytest.raises(WorkloadError) as error:
        read_jsonl(path)
    assert str(error.value) == f"{path}:2: {message} (use --skip-bad-lines to skip such lines)"


def test_non_finite_lines_are_skipped_and_counted_with_skip_bad_lines(tmp_path: Path) -> None:
    path = jsonl(tmp_path, {"run_time": 1}, '{"run_time": NaN}', '{"run_time": 2, "vcpus": "inf"}', {"run_time": 3})
    w = read_jsonl(path, skip_bad_lines=True)
    assert [j.run for j in w.jobs] == [1, 3] and w.stats.skipped == 2
    assert w.stats.errors == [
        f"{path}:2: run_time: not a finite number: nan",
        f"{path}:3: vcpus: not a finite number: 'inf'",
    ]


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


@pytest.mark.parametrize("compressed", [False, True])
def test_a_file_that_starts_with_comments_is_still_json_lines(tmp_path: Path, compressed: bool) -> None:
    text = "# my jobs\n  # indented\n\n" + json.dumps({"run_time": 1}) + "\n"
    path = tmp_path / "commented.txt"
    if compressed:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    assert detect_format(path) == "jsonl"
    assert len(read_workload(path).jobs) == 1


def test_a_file_of_comments_only_is_json_lines_and_an_swf_header_is_swf(tmp_path: Path) -> None:
    comments = tmp_path / "empty.txt"
    comments.write_text("# nothing yet\n")
    assert detect_format(comments) == "jsonl"
    assert read_workload(comments).jobs == []
    swf = tmp_path / "b.txt"
    swf.write_text("\n; header\n# not a comment in SWF\n")
    assert detect_format(swf) == "swf"


def test_a_byte_order_mark_is_no_part_of_the_first_line(tmp_path: Path) -> None:
    # Some editors write one at the start of a UTF-8 file: it broke both the format's detection
    # and the first line's JSON.
    path = tmp_path / "jobs.txt"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"submit_time": 5, "run_time": 60}\n')
    workload = read_workload(path)
    assert workload.format == "jsonl" and [job.submit for job in workload.jobs] == [5.0]
