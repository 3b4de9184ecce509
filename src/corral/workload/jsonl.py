"""corral's own workload format: JSON Lines, one job request per line plus simulation fields.

Each line is a `corral.jobspec.JobRequest` (the same schema `corral submit` takes; `command` may be
left out) with:
  submit_time  seconds from the start of the workload (default 0)
  run_time     seconds the job runs once started (required; a duration such as "90s" or "2h" works)
  exit_code    what the command exits with at the end (default 0)
  cancel_after seconds after submission when the user cancels it, whatever it is doing (optional)
Blank lines and lines starting with `#` are ignored.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import Field, ValidationError

from corral.core.settings import Duration
from corral.jobspec import JobRequest
from corral.workload.model import ReadStats, SimJob, Workload, WorkloadError, numbered_lines


class SimJobRequest(JobRequest):
    command: list[str] = Field(default_factory=lambda: ["sim-job"], description="argv; never run in a simulation")
    submit_time: Duration = 0.0
    run_time: Duration
    exit_code: int = 0
    cancel_after: Duration | None = None


def read_jsonl(path: Path, *, time_scale: float = 1.0, skip_bad_lines: bool = False) -> Workload:
    stats = ReadStats()
    jobs: list[SimJob] = []
    for number, line in numbered_lines(path):
        stats.lines += 1
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            spec = SimJobRequest.model_validate(json.loads(text))
        except json.JSONDecodeError as exc:
            message = f"{path}:{number}: not valid JSON: {exc.msg} (column {exc.colno})"
        except ValidationError as exc:
            message = f"{path}:{number}: " + "; ".join(_describe(item) for item in exc.errors())
        else:
            jobs.append(_to_sim_job(len(jobs) + 1, spec, time_scale))
            continue
        if not skip_bad_lines:
            raise WorkloadError(message + " (use --skip-bad-lines to skip such lines)")
        stats.skip(message)
    jobs.sort(key=lambda j: (j.submit, j.id))
    stats.jobs = len(jobs)
    return Workload(jobs, str(path), "jsonl", stats)


def _describe(item: object) -> str:
    assert isinstance(item, dict)
    key = ".".join(str(part) for part in item["loc"]) or "(line)"
    message = str(item["msg"]).removeprefix("Value error, ")
    if item["type"] == "extra_forbidden":
        message = "unknown field"
    elif item["type"] == "missing":
        message = "required"
    return f"{key}: {message}"


def _to_sim_job(job_id: int, spec: SimJobRequest, time_scale: float) -> SimJob:
    submit = spec.submit_time * time_scale
    request = JobRequest.model_validate(spec.model_dump(include=set(JobRequest.model_fields)))
    return SimJob(
        id=job_id,
        submit=submit,
        run=spec.run_time,
        vcpus=spec.vcpus,
        ram_mib=spec.ram,
        gpus=spec.gpus,
        scratch_mib=spec.scratch,
        nodes=spec.nodes,
        time_limit=spec.time_limit,
        exit_code=spec.exit_code,
        cancel_at=None if spec.cancel_after is None else submit + spec.cancel_after,
        priority=spec.priority,
        user=spec.user,
        name=spec.name or f"job{job_id}",
        request=request,
    )
