"""corral's own workload format: JSON Lines, one job request per line plus simulation fields.

Each line is a `corral.jobspec.JobRequest` (the same schema `corral submit` takes; `command` may be
left out) with:
  submit_time  seconds from the start of the workload (default 0)
  run_time     seconds the job runs once started (required; a duration such as "90s" or "2h" works)
  exit_code    what the command exits with at the end (default 0)
  task_exit_codes  an array's tasks that exit otherwise, by task id ({"3": 1}; optional)
  cancel_after seconds after submission when the user cancels it, whatever it is doing (optional)
  id           a whole number >= 1 naming the job within the workload, for other jobs' `dependency`
               (optional; unique)
`dependency` (Slurm's --dependency, as `corral submit` takes it) names jobs of the workload by their
`id`; each must be submitted before the job (at an earlier submit_time, or at the same one on an
earlier line), as a Slurm job can only name a job that exists. `array` (Slurm's --array, as
`corral submit` takes it) makes one job per task, with the array's throttle; its `id` names the
whole array in a dependency (`afterok:7` every task, `afternotok:7` or `7_*` once all ended and
one did not complete), and `7_3` its task 3 alone.
Blank lines and lines starting with `#` are ignored. Numbers must be finite, and times (submit_time,
not_before) and durations at most 100 years. `time_scale` multiplies the times on the workload's
clock (submit_time, not_before), not the durations (run_time, time_limit, cancel_after).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator

from corral.core.dependency import Dependency, whole_arrays
from corral.core.units import Duration, Int
from corral.files import RepeatedKey, unique_keys
from corral.jobspec import JobRequest
from corral.workload.model import MAX_SECONDS, ReadStats, SimJob, Workload, WorkloadError, numbered_lines

TIMES = ("submit_time", "run_time", "cancel_after", "time_limit", "not_before")


class SimJobRequest(JobRequest):
    command: list[str] = Field(default_factory=lambda: ["sim-job"], description="argv; never run in a simulation")
    submit_time: Duration = 0.0
    run_time: Duration
    exit_code: Int = 0
    cancel_after: Duration | None = None
    id: Int | None = Field(None, ge=1, description="names the job for other jobs' dependency")
    task_exit_codes: dict[Int, Int] | None = Field(
        None, description="an array's tasks that exit otherwise than exit_code: task id -> its exit code"
    )

    # Before the fields' own parsing: JSON's NaN and Infinity (or 1e999), and strings such as "nan"
    # or "inf", are not numbers a workload can use.
    @field_validator(*TIMES, "vcpus", "ram", "scratch", mode="before")
    @classmethod
    def _finite(cls, value: Any) -> Any:
        number = value
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                return value  # a duration, size or date: parsed by the field
        if isinstance(number, int | float):
            try:
                finite = math.isfinite(number)
            except OverflowError:  # an int too large for a float
                finite = False
            if not finite:
                raise ValueError(f"not a finite number: {value!r}")
        return value

    @field_validator(*TIMES)
    @classmethod
    def _at_most_100_years(cls, value: float | None) -> float | None:
        if value is not None and value > MAX_SECONDS:
            raise ValueError(f"more than 100 years: {value:g} s")
        return value


def read_jsonl(path: Path, *, time_scale: float = 1.0, skip_bad_lines: bool = False) -> Workload:
    stats = ReadStats()
    jobs: list[SimJob] = []
    named: dict[int, int] = {}  # the workload's ids -> the simulation's
    lines: dict[int, tuple[int, Dependency | None]] = {}  # simulation id -> (line, dependency as written)
    arrays: dict[int, dict[int, int]] = {}  # an array's simulation id (its first task's) -> {task id: its job's}
    for number, line in numbered_lines(path):
        stats.lines += 1
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            spec = SimJobRequest.model_validate(json.loads(text, object_pairs_hook=unique_keys))
        except json.JSONDecodeError as exc:
            message = f"{path}:{number}: not valid JSON: {exc.msg} (column {exc.colno})"
        except RepeatedKey as exc:
            message = f"{path}:{number}: {exc}"
        except ValidationError as exc:
            message = f"{path}:{number}: " + "; ".join(_describe(item) for item in exc.errors())
        else:
            if spec.id is not None and spec.id in named:
                message = f"{path}:{number}: id: {spec.id} names another job already (line {lines[named[spec.id]][0]})"
            else:
                # A job array is a job per task (consecutive ids), as the store makes it; `id`
                # names its first task, the array's id.
                array = spec.to_array()
                odd_tasks = sorted(set(spec.task_exit_codes or ()) - set(array.task_ids if array is not None else ()))
                if odd_tasks:
                    message = (
                        f"{path}:{number}: task_exit_codes: {', '.join(map(str, odd_tasks))}"
                        f" {'is not a task' if len(odd_tasks) == 1 else 'are not tasks'} of the line's array"
                        f" ({spec.array or 'none'})"
                    )
                    if not skip_bad_lines:
                        raise WorkloadError(message + " (use --skip-bad-lines to skip such lines)")
                    stats.skip(message)
                    continue
                first = len(jobs) + 1
                for task_id in array.task_ids if array is not None else (None,):
                    job = _to_sim_job(len(jobs) + 1, spec, time_scale)
                    if task_id is not None:
                        job.array_job_id, job.array_task_id = first, task_id
                        job.exit_code = (spec.task_exit_codes or {}).get(task_id, spec.exit_code)
                        arrays.setdefault(first, {})[task_id] = job.id
                    jobs.append(job)
                    lines[job.id] = (number, job.request.to_dependency() if job.request is not None else None)
                if spec.id is not None:
                    named[spec.id] = first
                continue
        if not skip_bad_lines:
            raise WorkloadError(message + " (use --skip-bad-lines to skip such lines)")
        stats.skip(message)
    jobs.sort(key=lambda j: (j.submit, j.id))
    if any(dependency is not None for _, dependency in lines.values()):
        jobs = _link_dependencies(path, jobs, named, lines, stats, skip_bad_lines, arrays)
    stats.jobs = len(jobs)
    return Workload(jobs, str(path), "jsonl", stats)


def _link_dependencies(
    path: Path,
    jobs: list[SimJob],
    named: dict[int, int],
    lines: dict[int, tuple[int, Dependency | None]],
    stats: ReadStats,
    skip_bad_lines: bool,
    arrays: dict[int, dict[int, int]],
) -> list[SimJob]:
    """Each job's dependency by simulation ids, as the store makes it of job ids: a job array's id
    by each of its tasks' (afternotok: by the whole array, `A_*`), a task `A_T` by its own.
    Jobs are taken in the order they arrive, so that a job skipped for its dependency is no job to
    those that name it."""
    arrived: set[int] = set()
    skipped: set[int] = set()
    kept: list[SimJob] = []
    for job in jobs:
        number, dependency = lines[job.id]
        if dependency is not None:
            # A workload names its jobs by `id`; `@N` is a submission's (corral submit, the API).
            problem = next(
                (
                    f"{reference}: a workload names a job by its `id` ({reference.kind}:ID), not by its place"
                    for reference in dependency.references
                ),
                "",
            )

            def linked_id(workload_id: int) -> int | None:
                nonlocal problem
                target = named.get(workload_id)
                if problem:
                    return None  # the first problem is the line's
                if target is None:
                    problem = f"no job has id {workload_id}"
                elif target in skipped:
                    problem = f"job {workload_id} (line {lines[target][0]}) was skipped"
                elif target not in arrived:
                    problem = f"job {workload_id} (line {lines[target][0]}) is not submitted before this one"
                return None if problem else target

            def linked_array(workload_id: int, task_id: int | None) -> int | None:
                nonlocal problem
                target = linked_id(workload_id)
                if target is None:
                    return None
                written = f"{workload_id}_{'*' if task_id is None else task_id}"
                if target not in arrays:
                    problem = f"job {workload_id} (line {lines[target][0]}) is not a job array ({written})"
                elif task_id is not None and task_id not in arrays[target]:
                    problem = f"job array {workload_id} (line {lines[target][0]}) has no task {task_id} ({written})"
                return None if problem else target

            conditions = [(kind, linked_id(workload_id)) for kind, workload_id in dependency.conditions]
            whole = [(kind, linked_array(workload_id, None)) for kind, workload_id in dependency.arrays]
            tasks = [(kind, linked_array(array_id, task_id), task_id) for kind, array_id, task_id in dependency.tasks]
            if not problem:
                by_sim_ids = Dependency(
                    tuple((kind, target) for kind, target in conditions if target is not None),
                    dependency.any_of,
                    tuple((kind, target) for kind, target in whole if target is not None),
                    tuple((kind, target, task_id) for kind, target, task_id in tasks if target is not None),
                )
                try:
                    linked = whole_arrays(by_sim_ids, arrays)
                except ValueError as exc:
                    problem = str(exc)
            if problem:
                message = f"{path}:{number}: dependency: {problem}"
                if not skip_bad_lines:
                    raise WorkloadError(message + " (use --skip-bad-lines to skip such lines)")
                stats.skip(message)
                skipped.add(job.id)
                continue
            job.dependency = linked
            if job.request is not None:
                job.request.dependency = str(job.dependency)  # by simulation ids, as the job is stored
        arrived.add(job.id)
        kept.append(job)
    return kept


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
    # Times on the workload's clock scale alike; durations (run_time, time_limit, cancel_after) not.
    submit = spec.submit_time * time_scale
    request = JobRequest.model_validate(spec.model_dump(include=set(JobRequest.model_fields)))
    if request.not_before is not None:
        request.not_before *= time_scale
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
