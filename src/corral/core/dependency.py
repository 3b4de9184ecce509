"""Job dependencies, as Slurm's `sbatch --dependency`: a queued job runs only once the jobs it names
have got far enough.

Kinds (Slurm's words):
  after       each named job has started (it runs), or has ended in any state
  afterany    each named job has ended, in any state
  afterok     each named job completed (exit 0)
  afternotok  each named job ended in failure: failed (a non-zero exit, a timeout) or cancelled
A dependency lists kinds with job ids, `afterok:12:13,afterany:14`: with `,` every one must hold
(Slurm's default), with `?` any one (`afterok:12?afternotok:12`); a dependency uses one or the
other, as in Slurm. `afterok:12:13` is two conditions, one per job.

A condition on a whole job array, named by the array's id (its first task's job id) or as `A_*`,
is read as Slurm reads it. after, afterany and afterok on an array are one condition on each of its
tasks (every task must satisfy it), made so when the job is submitted (`whole_arrays`); afternotok
on an array stays one condition on the array (`Dependency.arrays`), since Slurm reads it as "every
task ended, and at least one of them did not complete", which no set of per-task conditions says.
One task is named `A_T`, which the submission turns into that task's own job id: `12_0` is task 0
alone, while `12` (its job id too) is the whole array.

A condition that cannot hold any more (afterok on a job that failed or was cancelled, afternotok on
one that completed) makes the dependency never satisfiable when every one must hold (or when it was
the last that could, with `?`): Slurm's reason DependencyNeverSatisfied. `judge` is the decision of
a pass, pure; `step` takes it as both passes do (`corral.core.reconcile.plan_pass` and
`corral.core.batch.plan_batch_pass`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum, StrEnum

from corral.core.index import SnapshotIndex
from corral.core.job_array import MAX_TASK_ID
from corral.core.model import Job, JobState
from corral.core.snapshot import JobOutcome, Snapshot

DEPENDENCY = "Dependency"  # Slurm's reason words, which a Slurm user looks for in `squeue`
NEVER_SATISFIED = "DependencyNeverSatisfied"
ALL_OF, ANY_OF = ",", "?"
MAX_JOB_ID = 2**31 - 1  # the store's ids are 32-bit on PostgreSQL


class DependencyKind(StrEnum):
    AFTER = "after"
    AFTERANY = "afterany"
    AFTEROK = "afterok"
    AFTERNOTOK = "afternotok"


KINDS = tuple(kind.value for kind in DependencyKind)
# Slurm's other kinds, and why corral does not offer them.
NOT_OFFERED = {
    "aftercorr": "name each task instead, as A_T: 12_3 is task 3 of array 12",
    "afterburstbuffer": "corral has no burst buffers",
    "singleton": "name the jobs to wait for instead (afterany:ID)",
}


@dataclass(frozen=True, slots=True)
class Dependency:
    """Conditions (kind, job id), each on one job, in the order given without repeats; `any_of`:
    one must hold (Slurm's `?`), else every one (`,`). `arrays`: conditions (kind, array id) on a
    whole job array, judged on all its tasks at once (written `A_*`). `tasks`: conditions (kind,
    array id, task id) on one task named as Slurm writes it (`A_T`), as parsed; the submission
    makes each a condition on the task's job id (`whole_arrays`), so a stored one has none."""

    conditions: tuple[tuple[DependencyKind, int], ...]
    any_of: bool = False
    arrays: tuple[tuple[DependencyKind, int], ...] = ()
    tasks: tuple[tuple[DependencyKind, int, int], ...] = ()

    def job_ids(self) -> tuple[int, ...]:
        """The jobs the conditions on one job name (not the arrays' tasks)."""
        return tuple(dict.fromkeys(job_id for _, job_id in self.conditions))

    def array_ids(self) -> tuple[int, ...]:
        """The arrays the conditions on a whole array name, and those whose tasks are named `A_T`."""
        named = (array_id for _, array_id in self.arrays)
        return tuple(dict.fromkeys([*named, *(array_id for _, array_id, _ in self.tasks)]))

    def _entries(self) -> list[tuple[DependencyKind, str]]:
        return [
            *((kind, str(job_id)) for kind, job_id in self.conditions),
            *((kind, f"{array_id}_{task_id}") for kind, array_id, task_id in self.tasks),
            *((kind, f"{array_id}_*") for kind, array_id in self.arrays),
        ]

    def __str__(self) -> str:
        """The canonical text: a kind's ids together (jobs, then tasks `A_T`, then arrays `A_*`),
        kinds in the order first given (to a job, a task, then an array). Under `?` with one kind,
        each condition is written alone: `afterok:12:13` reads back as `,` (every one), so
        `afterok:12?afterok:13` would be stored as its opposite."""
        entries = self._entries()
        if self.any_of and len({kind for kind, _ in entries}) == 1:
            return ANY_OF.join(f"{kind.value}:{target}" for kind, target in entries)
        by_kind: dict[DependencyKind, list[str]] = {}
        for kind, target in entries:
            by_kind.setdefault(kind, []).append(target)
        joiner = ANY_OF if self.any_of else ALL_OF
        return joiner.join(":".join([kind.value, *targets]) for kind, targets in by_kind.items())


def parse(text: str) -> Dependency | None:
    """A dependency as Slurm writes it (`afterok:12:13,afterany:14`); None for an empty text.
    ValueError names what is wrong."""
    text = text.strip()
    if not text:
        return None
    if ALL_OF in text and ANY_OF in text:
        raise ValueError(f"{text!r}: use ',' (every condition must hold) or '?' (any one), not both")
    any_of = ANY_OF in text
    conditions: dict[tuple[DependencyKind, int], None] = {}
    arrays: dict[tuple[DependencyKind, int], None] = {}
    tasks: dict[tuple[DependencyKind, int, int], None] = {}
    for part in text.split(ANY_OF if any_of else ALL_OF):
        kind_text, _, ids_text = part.strip().partition(":")
        kind = _kind(kind_text.strip().lower(), part.strip())
        if not ids_text.strip():
            raise ValueError(f"{part.strip()!r}: {kind} needs at least one job id ({kind}:ID[:ID...])")
        for entry in ids_text.split(":"):
            entry = entry.strip()
            if "_" not in entry:
                conditions[(kind, _job_id(entry, part.strip()))] = None
                continue
            array_text, _, task_text = entry.partition("_")
            array_id = _job_id(array_text, part.strip(), entry)
            if task_text == "*":
                arrays[(kind, array_id)] = None
            elif task_text.isascii() and task_text.isdigit() and int(task_text) <= MAX_TASK_ID:
                tasks[(kind, array_id, int(task_text))] = None
            else:
                raise ValueError(
                    f"{part.strip()!r}: {entry!r} is not a job id, an array's task (A_T) or a whole array (A_*)"
                )
    return Dependency(tuple(conditions), any_of, tuple(arrays), tuple(tasks))


def _kind(word: str, where: str) -> DependencyKind:
    if word in KINDS:
        return DependencyKind(word)
    offered = ", ".join(KINDS)
    if word in NOT_OFFERED:
        raise ValueError(f"{where!r}: {word} is not offered ({NOT_OFFERED[word]}); use {offered}")
    raise ValueError(f"{where!r}: unknown dependency type {word!r}; use {offered}")


def _job_id(entry: str, where: str, written: str = "") -> int:
    if "+" in written or "+" in entry:
        raise ValueError(f"{where!r}: a delay after the job (+minutes) is not offered")
    if not (entry.isascii() and entry.isdigit()) or not 1 <= int(entry) <= MAX_JOB_ID:
        raise ValueError(f"{where!r}: {written or entry!r} is not a job id")
    return int(entry)


def whole_arrays(dependency: Dependency, arrays: Mapping[int, Mapping[int, int]]) -> Dependency:
    """The dependency as it is stored and judged, given the job arrays it may name (`arrays`: array
    id -> {task id: the task's job id}, in task order): after, afterany and afterok on an array
    (its id, or `A_*`) made one condition per task, as Slurm reads them (every task must satisfy
    it); afternotok on an array kept as one condition on the array (Slurm's "every task ended, one
    did not complete"); a task named `A_T` made a condition on its own job id. Done once, at
    submission, so that a pass judges job ids and whole arrays only. The dependency itself when it
    names no array. ValueError naming the condition: an `A_*` or `A_T` on no array or task, or an
    array's id made one condition per task under `?` (any one condition), which would let any
    single task satisfy it."""
    if not dependency.arrays and not dependency.tasks and not any(j in arrays for _, j in dependency.conditions):
        return dependency
    conditions: dict[tuple[DependencyKind, int], None] = {}
    whole: dict[tuple[DependencyKind, int], None] = {}
    spread: list[int] = []  # arrays made one condition per task

    def on_array(kind: DependencyKind, array_id: int) -> None:
        if kind is DependencyKind.AFTERNOTOK:
            whole[(kind, array_id)] = None
            return
        spread.append(array_id)
        for task_job_id in arrays[array_id].values():
            conditions[(kind, task_job_id)] = None

    for kind, job_id in dependency.conditions:
        if job_id in arrays:
            on_array(kind, job_id)
        else:
            conditions[(kind, job_id)] = None
    for kind, array_id in dependency.arrays:
        if array_id not in arrays:
            raise ValueError(f"{kind}:{array_id}_*: job {array_id} is not a job array's id")
        on_array(kind, array_id)
    for kind, array_id, task_id in dependency.tasks:
        tasks = arrays.get(array_id)
        if tasks is None:
            raise ValueError(f"{kind}:{array_id}_{task_id}: job {array_id} is not a job array's id")
        if task_id not in tasks:
            raise ValueError(f"{kind}:{array_id}_{task_id}: job array {array_id} has no task {task_id}")
        conditions[(kind, tasks[task_id])] = None
    if dependency.any_of and spread:
        raise ValueError(
            f"{dependency}: job {spread[0]} is a job array's id, which '?' (any one condition) cannot name with"
            " after, afterany or afterok (one condition per task: any single task would satisfy it); use ','"
            " or name its tasks (A_T)"
        )
    return Dependency(tuple(conditions), dependency.any_of, tuple(whole))


# ---- the decision ---------------------------------------------------------------------------------


class Verdict(Enum):
    SATISFIED = "satisfied"
    WAITING = "waiting"
    NEVER = "never"


# Each kind: (the states of the named job that satisfy it, those after which it never can be).
# A state in neither (queued, claimed; running for all but `after`) is a wait.
_ENDED = frozenset(state for state in JobState if state.terminal)
_FAILED = frozenset((JobState.FAILED, JobState.CANCELLED))
RULES: dict[DependencyKind, tuple[frozenset[JobState], frozenset[JobState]]] = {
    DependencyKind.AFTER: (_ENDED | {JobState.RUNNING}, frozenset()),
    DependencyKind.AFTERANY: (_ENDED, frozenset()),
    DependencyKind.AFTEROK: (frozenset((JobState.COMPLETE,)), _FAILED),
    DependencyKind.AFTERNOTOK: (_FAILED, frozenset((JobState.COMPLETE,))),
}


def array_verdict(
    kind: DependencyKind, array_id: int, tasks: Sequence[int] | None, state_of: Callable[[int], JobState | None]
) -> tuple[Verdict, str]:
    """A condition on a whole job array (`tasks`: its tasks' job ids; None or empty: no such
    array), and unless it holds, what it waits for or why it never can. afternotok, as Slurm reads
    it on an array: once every task ended, it holds if one did not complete (failed, timed out,
    cancelled) and never can if all completed. The other kinds: every task must satisfy them (a
    stored dependency has them per task already; this reads one built otherwise the same way)."""
    written = f"{kind}:{array_id}_*"
    if not tasks:
        return Verdict.NEVER, f"{written} (no job array {array_id})"
    states = [state_of(task) for task in tasks]
    if None in states:
        missing = tasks[states.index(None)]
        return Verdict.NEVER, f"{written} (no job {missing}, a task of array {array_id})"
    satisfy, fail = RULES[kind]
    if kind is DependencyKind.AFTERNOTOK:
        open_tasks = sum(1 for state in states if state not in _ENDED)
        if open_tasks:
            return Verdict.WAITING, f"{written} ({open_tasks} of array {array_id}'s {len(tasks)} tasks not ended)"
        if any(state in satisfy for state in states):
            return Verdict.SATISFIED, ""
        return Verdict.NEVER, f"{written} (every task of array {array_id} completed)"
    for task, state in zip(tasks, states, strict=True):
        if state in fail:
            return Verdict.NEVER, f"{written} (job {task}, a task of array {array_id}, {state})"
    short = sum(1 for state in states if state not in satisfy)
    if short:
        return Verdict.WAITING, f"{written} ({short} of array {array_id}'s {len(tasks)} tasks to go)"
    return Verdict.SATISFIED, ""


def verdict(
    dependency: Dependency,
    state_of: Callable[[int], JobState | None],
    tasks_of: Callable[[int], Sequence[int] | None] = lambda _: None,
) -> tuple[Verdict, str]:
    """Whether the dependency holds given each named job's state (None: no such job, which never
    gets anywhere) and each named array's tasks (`tasks_of`: their job ids), and, unless it holds,
    the wait reason: `Dependency: ...` naming the conditions still waited for, or
    `DependencyNeverSatisfied: ...` naming those that cannot hold."""
    assert not dependency.tasks, "a task named A_T is made its job id at submission (whole_arrays)"
    waiting: list[str] = []
    never: list[str] = []
    for kind, job_id in dependency.conditions:
        state = state_of(job_id)
        satisfy, fail = RULES[kind]
        if state in satisfy:
            if dependency.any_of:
                return Verdict.SATISFIED, ""
            continue
        if state is None:
            never.append(f"{kind}:{job_id} (no job {job_id})")
        elif state in fail:
            never.append(f"{kind}:{job_id} (job {job_id} {state})")
        else:
            waiting.append(f"{kind}:{job_id} ({state})")
    for kind, array_id in dependency.arrays:
        answer, reason = array_verdict(kind, array_id, tasks_of(array_id), state_of)
        if answer is Verdict.SATISFIED:
            if dependency.any_of:
                return Verdict.SATISFIED, ""
            continue
        (never if answer is Verdict.NEVER else waiting).append(reason)
    if never and (not dependency.any_of or not waiting):
        return Verdict.NEVER, f"{NEVER_SATISFIED}: {', '.join(never)}"
    if waiting:
        one_of = "one of " if dependency.any_of and len(waiting) > 1 else ""
        return Verdict.WAITING, f"{DEPENDENCY}: waits for {one_of}{', '.join(waiting)}"
    return Verdict.SATISFIED, ""


@dataclass(slots=True)
class Judgement:
    """A pass's reading of the queued jobs that have dependencies."""

    blocked: set[int] = field(default_factory=set)  # not eligible: waiting, or never satisfiable and kept
    reasons: dict[int, str] = field(default_factory=dict)  # their wait reasons
    cancel: list[tuple[int, str]] = field(default_factory=list)  # (job id, reason), never satisfiable


def judge(
    dependent: Mapping[int, Job],
    jobs: Mapping[int, Job],
    finished: Mapping[int, JobState],
    skip: Collection[int],
    kill_invalid: bool,
    array_tasks: Mapping[int, Sequence[int]],
) -> Judgement:
    """The queued jobs with dependencies (`dependent`) but those in `skip` (a pass ended them
    already), judged on the states of the jobs they name: open ones in `jobs`, finished ones in
    `finished`; a condition on a whole array on those of its tasks (`array_tasks`: the job ids
    of the tasks of each array such a condition names, the finished ones in `finished`). With
    `kill_invalid` (Slurm's kill_invalid_depend), a job whose dependency can never be satisfied
    is cancelled, and the jobs that depend on it see it cancelled in this same judgement: a chain
    of afterok ends in one pass. Other endings of the pass (a cancel request,
    a timeout) are seen by the next: the store may yet refuse them (the job moved on meanwhile),
    while a queued job's dependency cancellation always stands."""
    out = Judgement()
    decided: dict[int, JobState] = {}

    def state_of(job_id: int) -> JobState | None:
        state = decided.get(job_id)
        if state is not None:
            return state
        job = jobs.get(job_id)
        return job.state if job is not None else finished.get(job_id)

    todo = sorted(job_id for job_id in dependent if job_id not in skip)
    while todo:
        cancelled = False
        still: list[int] = []
        for job_id in todo:
            job = dependent[job_id]
            assert job.dependency is not None
            answer, reason = verdict(job.dependency, state_of, array_tasks.get)
            if answer is Verdict.NEVER and kill_invalid:
                out.cancel.append((job_id, reason))
                decided[job_id] = JobState.CANCELLED
                out.blocked.discard(job_id)
                out.reasons.pop(job_id, None)
                cancelled = True
            elif answer is Verdict.SATISFIED:
                out.blocked.discard(job_id)  # (after, afterany: on a job cancelled in this sweep)
                out.reasons.pop(job_id, None)
            else:
                out.blocked.add(job_id)
                out.reasons[job_id] = reason
                still.append(job_id)
        # A job cancelled in this sweep may end the wait of one judged before it (one that names a
        # job of a higher id, as a workload's may): those still blocked are judged again until a
        # sweep cancels nothing. Ids name earlier jobs in the live store, so one sweep mostly does.
        todo = still if cancelled else []
    return out


def step(
    snapshot: Snapshot, index: SnapshotIndex, ended: set[int], kill_invalid: bool, outcomes: list[JobOutcome]
) -> Judgement:
    """A pass's dependency step, as both passes (plan_pass, plan_batch_pass) take it: the queued
    jobs with a dependency `judge`d, those never satisfiable cancelled (their outcomes appended to
    `outcomes`, their ids added to `ended`); the judgement says which jobs wait, and why (empty
    when no queued job has a dependency)."""
    if not index.dependent:
        return Judgement()
    judged = judge(index.dependent, index.jobs, snapshot.finished, ended, kill_invalid, snapshot.array_tasks)
    for job_id, reason in judged.cancel:
        attempts = tuple(index.job_attempts.get(job_id, ()))
        outcomes.append(JobOutcome(job_id, JobState.CANCELLED, reason, attempts))
        ended.add(job_id)
    return judged
