"""The Standard Workload Format of the Parallel Workloads Archive (plain or gzipped).

Header and comment lines start with `;`. Every other non-blank line is one job of 18
whitespace-separated numbers, -1 meaning unknown:

 1 job number          7 used memory (KB/proc)   13 group id
 2 submit time (s)     8 requested processors    14 executable number
 3 wait time (s)       9 requested time (s)      15 queue number
 4 run time (s)       10 requested memory (KB/p)  16 partition number
 5 allocated procs    11 status                  17 preceding job number
 6 average CPU time   12 user id                 18 think time

How a line becomes a corral job is documented in docs/simulator.md ("SWF mapping"); each rule
that had to fill in or fix something is noted in the job's `quirks` and counted in
`ReadStats.quirks`. A value the format does not allow (a negative other than -1, a fractional
count, an unknown status, nan or infinity, a time beyond 100 years) is an error, as is a line that
is not 18 numbers.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

from corral.workload.model import (
    MAX_SECONDS,
    ReadStats,
    SimJob,
    Workload,
    WorkloadError,
    count_quirks,
    numbered_lines,
)

FIELDS = 18
NAMES = (
    "job number",
    "submit time",
    "wait time",
    "run time",
    "allocated processors",
    "average CPU time",
    "used memory",
    "requested processors",
    "requested time",
    "requested memory",
    "status",
    "user id",
    "group id",
    "executable number",
    "queue number",
    "partition number",
    "preceding job number",
    "think time",
)
# The fields the mapping uses, checked against the format: -1 (unknown) or a value from 0 to a
# bound (beyond which it is a mistake, and may overflow in the simulation's sums), whole for counts
# and ids. The submit time must be known. The fields the mapping ignores are only checked to be
# finite numbers.
COUNT = (2**31 - 1, True, f"{2**31 - 1:,}")
MEMORY = (2**40, False, "1 PiB (2^40 KB) per processor")
TIME = (MAX_SECONDS, False, "100 years")
CHECKED: tuple[tuple[int, tuple[float, bool, str]], ...] = (
    (0, COUNT),  # job number
    (1, TIME),  # submit time
    (3, TIME),  # run time
    (4, COUNT),  # allocated processors
    (6, MEMORY),  # used memory
    (7, COUNT),  # requested processors
    (8, TIME),  # requested time
    (9, MEMORY),  # requested memory
    (11, COUNT),  # user id
)
STATUSES = (-1, 0, 1, 2, 3, 4, 5)  # unknown, failed, completed, partial executions (2-4), cancelled
# Status 2/3/4 lines are partial executions (checkpoint/swap) of a job whose summary line is also
# in the log; replaying them as well would run the work twice. They are counted with that job.
PARTIAL_STATUSES = (2, 3, 4)
PARTIAL = "partial-execution records skipped"
NO_MEMORY = "no memory: default used"  # the log records none: RAM is --default-memory per processor


def read_swf(
    path: Path,
    *,
    scale: float = 1.0,
    time_scale: float = 1.0,
    default_memory: float = 1024.0,
    skip_bad_lines: bool = False,
) -> Workload:
    """`scale`: vcpus per processor; `time_scale`: multiplies submit times; `default_memory`: MiB
    per processor when the log records none."""
    stats = ReadStats()
    jobs: list[SimJob] = []
    partial: Counter[float] = Counter()  # partial-execution records by job number
    interned: dict[tuple[str, ...], tuple[str, ...]] = {}  # one tuple per combination of quirks
    for number, line in numbered_lines(path):
        stats.lines += 1
        parts = line.split()
        if not parts or parts[0].startswith(";"):
            continue
        try:
            values = _parse(parts)
        except ValueError as exc:
            message = f"{path}:{number}: {exc}"
            if not skip_bad_lines:
                raise WorkloadError(message + " (use --skip-bad-lines to skip such lines)") from None
            stats.skip(message)
            continue
        job_no, submit, _wait, run, alloc, _cpu, used_mem, req_procs, req_time, req_mem, status, user = values[:12]
        if status in PARTIAL_STATUSES:
            partial[job_no] += 1
            continue
        quirks: list[str] = []
        if req_procs > 0:
            procs = int(req_procs)
        elif alloc > 0:
            procs = int(alloc)
            quirks.append("requested processors missing: used allocated")
        else:
            procs = 1
            quirks.append("no processor count: used 1")
        if req_mem > 0:
            ram_per_proc = req_mem / 1024.0
        elif used_mem > 0:
            ram_per_proc = used_mem / 1024.0
            quirks.append("requested memory missing: used memory used")
        else:
            ram_per_proc = default_memory
            quirks.append(NO_MEMORY)
        if req_time > 0:
            time_limit: float | None = req_time
            if run > req_time:
                quirks.append("ran longer than requested: ends at its time limit plus the grace (TIMEOUT)")
        elif run > 0:
            time_limit = run
            quirks.append("requested time missing: run time used")
        else:
            time_limit = None
        job = SimJob(
            id=len(jobs) + 1,
            submit=submit * time_scale,
            run=run,
            time_limit=time_limit,
            user=f"user{int(user)}" if user >= 0 else "",
            name=f"swf:{int(job_no)}",
            vcpus=procs * scale,
            ram_mib=max(1, math.ceil(procs * ram_per_proc)),  # one node; shape_gangs splits it if need be
            procs=procs,
            vcpus_per_proc=scale,
            ram_per_proc=ram_per_proc,
        )
        if run <= 0:
            # Run time -1 or 0: the log says it never ran (cancelled, or failed to start); the user
            # cancels it as it arrives, so it is counted but holds no resources.
            job.cancel_at = job.submit
            quirks.append("never ran (run time -1 or 0): cancelled on arrival")
        elif status == 5:
            job.cancel_on_end = True
        elif status == 0:
            job.exit_code = 1
        if quirks:
            key = tuple(quirks)
            job.quirks = interned.setdefault(key, key)
        jobs.append(job)
    if partial:
        for job in jobs:
            count = partial.pop(float(job.name.removeprefix("swf:")), 0)
            job.quirks += (PARTIAL,) * count
    jobs.sort(key=lambda j: (j.submit, j.id))
    stats.jobs = len(jobs)
    stats.quirks = count_quirks(jobs)
    if partial:  # records of jobs with no summary line: counted, though no job of theirs is replayed
        stats.quirks[PARTIAL] += sum(partial.values())
    return Workload(jobs, str(path), "swf", stats)


def _parse(parts: list[str]) -> list[float]:
    if len(parts) != FIELDS:
        raise ValueError(f"expected {FIELDS} fields, found {len(parts)}")
    try:
        values = list(map(float, parts))
    except ValueError:
        values = []
        for index, part in enumerate(parts):
            try:
                values.append(float(part))
            except ValueError:
                raise ValueError(f"{_field(index)} is not a number: {part!r}") from None
    if not math.isfinite(sum(values)):  # one is nan or infinite (or they add up to over 1e308)
        for index, value in enumerate(values):
            if not math.isfinite(value):
                raise ValueError(f"{_field(index)} is not a finite number: {parts[index]!r}")
    for index, (high, whole, bound) in CHECKED:
        value = values[index]
        if value < 0:
            if index == 1:
                raise ValueError(f"{_field(index)} is unknown or negative: {parts[index]!r}")
            if value != -1:
                raise ValueError(f"{_field(index)} is negative: {parts[index]!r} (only -1 means unknown)")
        elif value > high:
            raise ValueError(f"{_field(index)} is more than {bound}: {parts[index]!r}")
        elif whole and not value.is_integer():
            raise ValueError(f"{_field(index)} is not a whole number: {parts[index]!r}")
    if values[10] not in STATUSES:
        raise ValueError(f"{_field(10)} is not an SWF status (-1, or 0 to 5): {parts[10]!r}")
    return values


def _field(index: int) -> str:
    return f"field {index + 1} ({NAMES[index]})"
