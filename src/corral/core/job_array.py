"""Job arrays, as Slurm's `sbatch --array`: one submission of many tasks, each an ordinary corral
job with its own id, that share an array id (the first task's job id, Slurm's SLURM_ARRAY_JOB_ID)
and differ by a task id.

The spec is Slurm's: task ids as ranges and lists (`0-99`, `1,3,5-7`), a range with a step
(`0-99:4`), and at the end `%N`, the throttle: at most N tasks of the array claimed or running at
once. `throttle` is the pass's decision (`corral.core.reconcile.plan_pass` and
`corral.core.batch.plan_batch_pass` both take it): of an array's queued tasks that could run, only
as many as its throttle leaves room for beside those already claimed or running go on to be placed
(or submitted to Slurm); the others wait with Slurm's reason `JobArrayTaskLimit`, and no instance is
booted for them.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from corral.core.model import ArrayTask, Job, JobState

THROTTLE_REASON = "JobArrayTaskLimit"  # Slurm's reason word, which a Slurm user looks for
# Slurm's MaxArraySize default is 1001: task ids 0..1000. Not a setting: a job file is checked
# where it is read (the CLI, with no configuration), and the bound only guards against a typo
# (0-1000000) queueing a million jobs.
MAX_TASK_ID = 1000
# The throttle's own bound, a sanity check: the store's column is 32 bits.
MAX_THROTTLE = 1_000_000
_ACTIVE = (JobState.CLAIMED, JobState.RUNNING)


@dataclass(frozen=True, slots=True)
class ArraySpec:
    """An array's task ids (ascending, no repeats) and its throttle (None: no limit)."""

    task_ids: tuple[int, ...]
    throttle: int | None = None

    def __str__(self) -> str:
        """The canonical text: runs of consecutive ids as ranges, then `%N`."""
        parts: list[str] = []
        ids = self.task_ids
        start = 0
        while start < len(ids):
            end = start
            while end + 1 < len(ids) and ids[end + 1] == ids[end] + 1:
                end += 1
            parts.append(str(ids[start]) if start == end else f"{ids[start]}-{ids[end]}")
            start = end + 1
        return ",".join(parts) + (f"%{self.throttle}" if self.throttle is not None else "")

    def task(self, array_job_id: int, task_id: int) -> ArrayTask:
        return ArrayTask(array_job_id, task_id, len(self.task_ids), self.task_ids[0], self.task_ids[-1])


@functools.cache
def parse(text: str, max_task_id: int = MAX_TASK_ID) -> ArraySpec:
    """An array spec as Slurm writes it (`0-99%10`, `1,3,5-7`, `0-99:4`). ValueError names what is
    wrong. Cached: every task of an array is built from the same text."""
    body, percent, throttle_text = text.strip().partition("%")
    throttle: int | None = None
    if percent:
        throttle_text = throttle_text.strip()
        if not (throttle_text.isascii() and throttle_text.isdigit()):
            raise ValueError(f"{text!r}: the throttle after '%' is a whole number of tasks, not {throttle_text!r}")
        throttle = int(throttle_text)
        if not 1 <= throttle <= MAX_THROTTLE:
            raise ValueError(f"{text!r}: the throttle %{throttle_text} must be 1 to {MAX_THROTTLE} (no %N: no limit)")
    if not body.strip():
        raise ValueError(f"{text!r}: no task ids (write e.g. 0-99, 1,3,5-7 or 0-99:4, with %N to throttle)")
    ids: set[int] = set()
    for part in body.split(","):
        ids.update(_entry(part.strip(), text, max_task_id))
    return ArraySpec(tuple(sorted(ids)), throttle)


def _entry(part: str, text: str, max_task_id: int) -> range:
    if not part:
        raise ValueError(f"{text!r}: an empty entry between commas")
    # Where an error is: the whole text, and the entry when the text has others too.
    where = repr(text) if part == text.strip() else f"{text!r}: {part!r}"
    span, colon, step_text = part.partition(":")
    first_text, dash, last_text = span.partition("-")
    first = _task_id(first_text, where, text, max_task_id)
    last = _task_id(last_text, where, text, max_task_id) if dash else first
    step = 1
    if colon:
        if not dash:
            raise ValueError(f"{where}: a step (:N) goes with a range (A-B:N)")
        step_text = step_text.strip()
        if not (step_text.isascii() and step_text.isdigit()) or int(step_text) < 1:
            raise ValueError(f"{where}: the step {step_text!r} is not a whole number of at least 1")
        step = int(step_text)
    if last < first:
        raise ValueError(f"{where}: the range runs backwards ({first} > {last})")
    return range(first, last + 1, step)


def _task_id(entry: str, where: str, text: str, max_task_id: int) -> int:
    entry = entry.strip()
    if not (entry.isascii() and entry.isdigit()):
        raise ValueError(f"{where}: {entry!r} is not a task id (a whole number from 0)")
    task_id = int(entry)
    if task_id > max_task_id:
        raise ValueError(f"{text!r}: task id {task_id} is more than {max_task_id} (Slurm's MaxArraySize - 1)")
    return task_id


def environment(task: ArrayTask) -> dict[str, str]:
    """What a task's command finds in its environment: CORRAL_ARRAY_*, and the same under Slurm's
    names (SLURM_ARRAY_*), which a batch script written for Slurm reads its task from (corral
    sbatches each task as a job of its own, so Slurm sets none of them)."""
    values = {
        "ARRAY_JOB_ID": str(task.array_job_id),
        "ARRAY_TASK_ID": str(task.task_id),
        "ARRAY_TASK_COUNT": str(task.count),
        "ARRAY_TASK_MIN": str(task.first),
        "ARRAY_TASK_MAX": str(task.last),
    }
    return {f"{prefix}_{name}": value for prefix in ("CORRAL", "SLURM") for name, value in values.items()}


def stored_environment(spec_text: str, array_job_id: int, task_id: int) -> dict[str, str]:
    """`environment` of a stored task: its array's spec text as stored, and its ids."""
    return environment(parse(spec_text).task(array_job_id, task_id))


def reason(array_job_id: int, throttle: int) -> str:
    """A throttled task's wait reason: the same pass after pass while the throttle stands."""
    plural = "task" if throttle == 1 else "tasks"
    return f"{THROTTLE_REASON}: array {array_job_id} runs at most {throttle} {plural} at once"


def throttle(
    queue: Sequence[Job], throttled_tasks: Mapping[int, Mapping[int, Job]], ended: Collection[int]
) -> tuple[list[Job], dict[int, str]]:
    """The queue (in its order, of jobs that could run now) less the tasks that their array's
    throttle holds back, and those tasks' wait reasons. `throttled_tasks`: the open tasks of each
    array that has a throttle, by array id; those claimed or running count against it, but not the
    ones in `ended` (this pass ended them: their place is free). The first tasks in queue order go
    ahead, as many as the throttle has room for: exactly that many can be placed in this pass."""
    room: dict[int, int] = {}  # array id -> tasks it may still start
    limits: dict[int, int] = {}
    for array_id, tasks in throttled_tasks.items():
        limit = _limit(tasks.values())
        if limit is not None:
            active = sum(1 for job in tasks.values() if job.state in _ACTIVE and job.id not in ended)
            room[array_id], limits[array_id] = limit - active, limit
    if not room:
        return list(queue), {}
    kept: list[Job] = []
    held_back: dict[int, str] = {}
    for job in queue:
        task = job.array
        if task is None or task.array_job_id not in room:
            kept.append(job)
            continue
        array_id = task.array_job_id
        if room[array_id] > 0:
            room[array_id] -= 1
            kept.append(job)
        else:
            held_back[job.id] = reason(array_id, limits[array_id])
    return kept, held_back


def _limit(tasks: Iterable[Job]) -> int | None:
    """An array's throttle: its tasks carry the same one (set in one transaction); the lowest if
    a change is seen half made."""
    limits = [job.array_throttle for job in tasks if job.array_throttle]
    return min(limits) if limits else None
