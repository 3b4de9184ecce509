"""The SWF reader: the 18 fields, the archive's quirks, and errors that name the line."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from corral.core.model import GiB, InstanceType
from corral.workload import WorkloadError, read_workload, shape_gangs
from corral.workload.swf import read_swf

HEADER = "; Version: 2.2\n; Computer: test\n;\n"


def swf(tmp_path: Path, *rows: str, name: str = "w.swf") -> Path:
    path = tmp_path / name
    path.write_text(HEADER + "\n".join(rows) + "\n")
    return path


def row(
    number: int = 1,
    submit: float = 0,
    run: float = 100,
    alloc: int = 4,
    used_mem: int = -1,
    req_procs: int = 4,
    req_time: float = 3600,
    req_mem: int = -1,
    status: int = 1,
    user: int = 7,
) -> str:
    fields = [number, submit, -1, run, alloc, -1, used_mem, req_procs, req_time, req_mem, status, user]
    fields += [1, -1, 1, 1, -1, -1]
    return " ".join(str(f) for f in fields)


def test_a_plain_job_maps_processors_to_vcpus_and_keeps_its_times(tmp_path: Path) -> None:
    w = read_swf(swf(tmp_path, row(number=15, submit=600, run=3477, req_procs=4, req_time=53940)))
    (job,) = w.jobs
    assert (job.submit, job.run, job.time_limit) == (600, 3477, 53940)
    assert (job.vcpus, job.ram_mib, job.nodes) == (4, 4 * 1024, 1)  # 1 GiB per processor by default
    assert job.name == "swf:15" and job.user == "user7"
    assert job.exit_code == 0 and job.cancel_at is None and not job.cancel_on_end
    assert w.stats.quirks["no memory: default used"] == 1


def test_header_comments_and_blank_lines_are_skipped_and_jobs_sorted_by_submit(tmp_path: Path) -> None:
    path = swf(tmp_path, row(number=1, submit=50), "", "; a comment in the middle", row(number=2, submit=10))
    w = read_swf(path)
    assert [j.name for j in w.jobs] == ["swf:2", "swf:1"]


def test_gzipped_file_is_read_whatever_its_name(tmp_path: Path) -> None:
    path = tmp_path / "trace.data"
    path.write_bytes(gzip.compress((HEADER + row() + "\n").encode()))
    assert len(read_workload(path).jobs) == 1


def test_run_time_minus_one_or_zero_means_cancelled_on_arrival(tmp_path: Path) -> None:
    w = read_swf(swf(tmp_path, row(number=1, run=-1, status=5), row(number=2, submit=5, run=0, status=0)))
    assert [j.cancel_at for j in w.jobs] == [0, 5]
    assert w.stats.quirks["never ran (run time -1 or 0): cancelled on arrival"] == 2


def test_missing_requested_processors_fall_back_to_allocated_then_one(tmp_path: Path) -> None:
    w = read_swf(swf(tmp_path, row(number=1, req_procs=-1, alloc=8), row(number=2, req_procs=-1, alloc=-1)))
    assert [j.procs for j in w.jobs] == [8, 1]
    assert w.stats.quirks["requested processors missing: used allocated"] == 1
    assert w.stats.quirks["no processor count: used 1"] == 1


def test_missing_requested_time_falls_back_to_the_run_time(tmp_path: Path) -> None:
    (job,) = read_swf(swf(tmp_path, row(run=321, req_time=-1))).jobs
    assert job.time_limit == 321


def test_a_run_longer_than_requested_is_replayed_as_recorded(tmp_path: Path) -> None:
    w = read_swf(swf(tmp_path, row(run=4000, req_time=3600)))
    (job,) = w.jobs
    assert (job.run, job.time_limit) == (4000, 3600)
    assert w.stats.quirks["ran longer than requested: ends at its time limit plus the grace (TIMEOUT)"] == 1


def test_memory_is_kilobytes_per_processor_requested_else_used_else_default(tmp_path: Path) -> None:
    path = swf(
        tmp_path,
        row(number=1, req_procs=2, req_mem=2 * 1024 * 1024, used_mem=1024),  # requested wins: 2 GiB per processor
        row(number=2, req_procs=2, used_mem=512 * 1024),  # used: 512 MiB per processor
        row(number=3, req_procs=2),
    )
    jobs = read_swf(path, default_memory=3 * 1024).jobs
    assert [j.ram_mib for j in jobs] == [4 * 1024, 1024, 6 * 1024]


def test_status_maps_to_the_end_of_the_run(tmp_path: Path) -> None:
    path = swf(tmp_path, *(row(number=n, status=status) for n, status in ((1, 1), (2, 0), (3, 5), (4, -1))))
    jobs = {j.name: j for j in read_swf(path).jobs}
    assert jobs["swf:1"].exit_code == 0 and jobs["swf:2"].exit_code == 1 and jobs["swf:4"].exit_code == 0
    assert jobs["swf:3"].cancel_on_end and jobs["swf:3"].cancel_at is None


def test_partial_execution_records_are_not_replayed_twice(tmp_path: Path) -> None:
    w = read_swf(swf(tmp_path, row(number=1, status=1), row(number=1, status=2), row(number=1, status=3)))
    assert len(w.jobs) == 1 and w.stats.quirks["partial-execution records skipped"] == 2


def test_scale_and_time_scale(tmp_path: Path) -> None:
    (job,) = read_swf(swf(tmp_path, row(submit=1000, req_procs=4)), scale=0.5, time_scale=0.25).jobs
    assert job.submit == 250 and job.vcpus == 2 and job.ram_mib == 4 * 1024  # memory follows processors, not vcpus


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("1 0 -1 100 4 -1 -1 4 3600 -1 1 7 1 -1 1 1 -1", "expected 18 fields, found 17"),
        ("1 0 -1 1OO 4 -1 -1 4 3600 -1 1 7 1 -1 1 1 -1 -1", "field 4 (run time) is not a number: '1OO'"),
        ("1 -1 -1 100 4 -1 -1 4 3600 -1 1 7 1 -1 1 1 -1 -1", "field 2 (submit time) is unknown or negative: '-1'"),
    ],
)
def test_a_malformed_line_is_an_error_naming_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = swf(tmp_path, row(number=1), line)
    with pytest.raises(WorkloadError) as error:
        read_swf(path)
    assert f"{path}:5: " in str(error.value) and message in str(error.value)
    assert "--skip-bad-lines" in str(error.value)


def test_skip_bad_lines_skips_and_counts(tmp_path: Path) -> None:
    w = read_swf(swf(tmp_path, row(number=1), "garbage", row(number=2), "1 2 3"), skip_bad_lines=True)
    assert len(w.jobs) == 2 and w.stats.skipped == 2 and ":5:" in w.stats.errors[0]


def edited(field: int, text: str, **kw: int) -> str:
    """row(**kw) with its field `field` (1-based, as the format numbers them) written as `text`."""
    parts = row(**kw).split()
    parts[field - 1] = text
    return " ".join(parts)


def error_for(tmp_path: Path, line: str) -> str:
    path = swf(tmp_path, row(number=1), line)  # the line is line 5 of the file
    with pytest.raises(WorkloadError) as error:
        read_swf(path)
    message = str(error.value)
    assert message.startswith(f"{path}:5: ") and message.endswith("(use --skip-bad-lines to skip such lines)")
    return message


@pytest.mark.parametrize(
    ("field", "text", "message"),
    [
        # nan and infinity
        (4, "nan", "field 4 (run time) is not a finite number: 'nan'"),
        (4, "inf", "field 4 (run time) is not a finite number: 'inf'"),
        (2, "-Infinity", "field 2 (submit time) is not a finite number: '-Infinity'"),
        (8, "NaN", "field 8 (requested processors) is not a finite number: 'NaN'"),
        (10, "1e999", "field 10 (requested memory) is not a finite number: '1e999'"),
        (18, "nan", "field 18 (think time) is not a finite number: 'nan'"),  # even a field the mapping ignores
        # values too large to replay
        (4, "1e308", "field 4 (run time) is more than 100 years: '1e308'"),
        (2, "1e300", "field 2 (submit time) is more than 100 years: '1e300'"),
        (9, "4e9", "field 9 (requested time) is more than 100 years: '4e9'"),
        (8, "1e308", "field 8 (requested processors) is more than 2,147,483,647: '1e308'"),
        (10, "1e300", "field 10 (requested memory) is more than 1 PiB (2^40 KB) per processor: '1e300'"),
    ],
)
def test_nan_infinity_and_values_too_large_are_errors_naming_line_field_and_value(
    tmp_path: Path, field: int, text: str, message: str
) -> None:
    assert message in error_for(tmp_path, edited(field, text, number=2))


@pytest.mark.parametrize(
    ("field", "text", "name"),
    [
        (4, "-100", "run time"),
        (4, "-0.5", "run time"),
        (5, "-4", "allocated processors"),
        (7, "-2", "used memory"),
        (8, "-3", "requested processors"),
        (9, "-3600", "requested time"),
        (10, "-5000", "requested memory"),
        (12, "-7", "user id"),
        (1, "-2", "job number"),
    ],
)
def test_a_negative_value_other_than_minus_one_is_an_error_not_unknown(
    tmp_path: Path, field: int, text: str, name: str
) -> None:
    message = error_for(tmp_path, edited(field, text, number=2))
    assert f"field {field} ({name}) is negative: '{text}' (only -1 means unknown)" in message


@pytest.mark.parametrize(("field", "name"), [(8, "requested processors"), (5, "allocated processors")])
def test_a_fractional_processor_count_is_an_error(tmp_path: Path, field: int, name: str) -> None:
    message = error_for(tmp_path, edited(field, "2.5", number=2))
    assert f"field {field} ({name}) is not a whole number: '2.5'" in message


@pytest.mark.parametrize("status", ["7", "6", "-2", "1.5"])
def test_a_status_the_format_does_not_define_is_an_error(tmp_path: Path, status: str) -> None:
    message = error_for(tmp_path, edited(11, status, number=2))
    assert f"field 11 (status) is not an SWF status (-1, or 0 to 5): '{status}'" in message


def test_what_the_format_allows_still_reads(tmp_path: Path) -> None:
    # Fractional times and memory, whole numbers written as floats, -1 everywhere it may be, and
    # negative values in fields the mapping ignores (wait time, think time).
    path = swf(
        tmp_path,
        "1 0.5 -3 99.5 4.0 -1 1536.5 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1",
        row(number=2, run=-1, req_time=-1, status=-1, user=-1),
        row(number=3, status=5),
    )
    jobs = read_swf(path).jobs
    assert [(j.submit, j.run, j.procs, j.time_limit) for j in jobs] == [
        (0, -1, 4, None),
        (0, 100, 4, 3600),
        (0.5, 99.5, 4, 99.5),
    ]


def test_bad_values_are_skipped_and_counted_with_skip_bad_lines(tmp_path: Path) -> None:
    path = swf(tmp_path, row(number=1), edited(4, "nan", number=2), edited(8, "-3", number=3), row(number=4))
    w = read_swf(path, skip_bad_lines=True)
    assert [j.name for j in w.jobs] == ["swf:1", "swf:4"] and w.stats.skipped == 2
    assert "field 4 (run time) is not a finite number: 'nan'" in w.stats.errors[0]
    assert "field 8 (requested processors) is negative: '-3'" in w.stats.errors[1]


def test_with_a_limit_the_quirks_are_those_of_the_jobs_replayed(tmp_path: Path) -> None:
    path = swf(
        tmp_path,
        row(number=1, submit=0),
        row(number=2, submit=10, req_procs=-1),  # requested processors missing
        row(number=2, submit=10, status=2),  # job 2's partial executions
        row(number=2, submit=20, status=3),
        row(number=3, submit=30, run=0),  # never ran
        row(number=4, submit=40, req_procs=-1),
        row(number=9, submit=50, status=2),  # a partial execution of a job with no summary line
    )
    whole = read_workload(path)
    assert len(whole.jobs) == 4 and whole.stats.quirks == {
        "no memory: default used": 4,
        "requested processors missing: used allocated": 2,
        "partial-execution records skipped": 3,
        "never ran (run time -1 or 0): cancelled on arrival": 1,
    }
    limited = read_workload(path, limit=2)
    assert [j.name for j in limited.jobs] == ["swf:1", "swf:2"]
    assert limited.stats.jobs == 4  # read
    assert limited.stats.quirks == {
        "no memory: default used": 2,
        "requested processors missing: used allocated": 1,
        "partial-execution records skipped": 2,
    }


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="no such file"):
        read_workload(tmp_path / "nope.swf")


SMALL = InstanceType("small", 4, 16 * GiB, 0.2)
BIG = InstanceType("big", 48, 192 * GiB, 2.3)
BIG_CHEAP = InstanceType("big-cheap", 36, 72 * GiB, 1.5)


def shaped(tmp_path: Path, procs: int, types: list[InstanceType], mem_kb: int = -1) -> tuple[float, int, int]:
    jobs = read_swf(swf(tmp_path, row(req_procs=procs, req_mem=mem_kb))).jobs
    shape_gangs(jobs, types)
    return jobs[0].vcpus, jobs[0].ram_mib, jobs[0].nodes


def test_a_job_that_fits_one_instance_type_stays_one_node(tmp_path: Path) -> None:
    assert shaped(tmp_path, 40, [SMALL, BIG]) == (40, 40 * 1024, 1)


def test_a_job_larger_than_any_type_becomes_a_gang_of_the_fewest_nodes(tmp_path: Path) -> None:
    # 100 processors: 3 nodes of 34 on "big" (48 vcpus) or on "big-cheap" (36); 25 nodes of 4 on "small".
    assert shaped(tmp_path, 100, [SMALL, BIG, BIG_CHEAP]) == (34, 34 * 1024, 3)
    assert shaped(tmp_path, 100, [SMALL, BIG]) == (34, 34 * 1024, 3)
    assert shaped(tmp_path, 100, [SMALL]) == (4, 4 * 1024, 25)


def test_memory_can_force_a_bigger_gang(tmp_path: Path) -> None:
    # 8 processors at 8 GiB each = 64 GiB: "small" holds 2 per node (16 GiB), so 4 nodes.
    assert shaped(tmp_path, 8, [SMALL], mem_kb=8 * 1024 * 1024) == (2, 16 * 1024, 4)


def test_a_processor_no_type_can_hold_is_left_for_the_core_to_refuse(tmp_path: Path) -> None:
    assert shaped(tmp_path, 2, [SMALL], mem_kb=64 * 1024 * 1024) == (2, 128 * 1024, 1)
