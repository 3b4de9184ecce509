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
that had to fill in or fix something is counted in `ReadStats.quirks`.
"""

from __future__ import annotations

import math
from pathlib import Path

from corral.workload.model import ReadStats, SimJob, Workload, WorkloadError, numbered_lines

FIELDS = 18
# Status 2/3/4 lines are partial executions (checkpoint/swap) of a job whose summary line is also
# in the log; replaying them as well would run the work twice.
PARTIAL_STATUSES = (2, 3, 4)


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
    quirks = stats.quirks
    for number, line in numbered_lines(path):
        stats.lines += 1
        text = line.strip()
        if not text or text.startswith(";"):
            continue
        try:
            values = _parse(text)
        except ValueError as exc:
            message = f"{path}:{number}: {exc}"
            if not skip_bad_lines:
                raise WorkloadError(message + " (use --skip-bad-lines to skip such lines)") from None
            stats.skip(message)
            continue
        job_no, submit, _wait, run, alloc, _cpu, used_mem, req_procs, req_time, req_mem, status, user = values[:12]
        if status in PARTIAL_STATUSES:
            quirks["partial-execution records skipped"] += 1
            continue
        if req_procs > 0:
            procs = int(req_procs)
        elif alloc > 0:
            procs = int(alloc)
            quirks["requested processors missing: used allocated"] += 1
        else:
            procs = 1
            quirks["no processor count: used 1"] += 1
        if req_mem > 0:
            ram_per_proc = req_mem / 1024.0
        elif used_mem > 0:
            ram_per_proc = used_mem / 1024.0
            quirks["requested memory missing: used memory used"] += 1
        else:
            ram_per_proc = default_memory
            quirks["no memory: default used"] += 1
        if req_time > 0:
            time_limit: float | None = req_time
            if run > req_time:
                quirks["ran longer than requested (replayed as recorded)"] += 1
        elif run > 0:
            time_limit = run
            quirks["requested time missing: run time used"] += 1
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
            quirks["never ran (run time -1 or 0): cancelled on arrival"] += 1
        elif status == 5:
            job.cancel_on_end = True
        elif status == 0:
            job.exit_code = 1
        jobs.append(job)
    jobs.sort(key=lambda j: (j.submit, j.id))
    stats.jobs = len(jobs)
    return Workload(jobs, str(path), "swf", stats)


def _parse(text: str) -> list[float]:
    parts = text.split()
    if len(parts) != FIELDS:
        raise ValueError(f"expected {FIELDS} fields, found {len(parts)}")
    values: list[float] = []
    for index, part in enumerate(parts):
        try:
            values.append(float(part))
        except ValueError:
            raise ValueError(f"field {index + 1} is not a number: {part!r}") from None
    if values[1] < 0:
        raise ValueError("field 2 (submit time) is unknown or negative")
    return values
