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

A job may also name an earlier job of its own submission, whose id is not known before the
submission is stored, by its place in the submission: `afterok:@0` (`Reference`). Why a place and
not a name: a place is what every way in already has (the API's list, a job file's lines) and
needs no new field; a job's name is not unique, and a key of the submission's own would be one more
thing to keep unique and to spell the same in two places. `@` is in none of Slurm's own spellings
(`12`, `12_3`, `12_*`, `+minutes`), so a reference cannot be read as a job id. Only an earlier job
may be named, so that a submission's dependencies cannot form a cycle, and the store gives its jobs
ids in submission order, so a reference names a lower id, as every dependency does. `@N` stands for
the id job N gets, and means what that id written out would: on an array, `@N` (or `@N_*`) is the
whole array and `@N_T` its task T. The store makes references job ids in the transaction that
stores the submission (`reference_problems`, then `resolve`): a stored dependency has none.

A condition that cannot hold any more (afterok on a job that failed or was cancelled, afternotok on
one that completed) makes the dependency never satisfiable when every one must hold (or when it was
the last that could, with `?`): Slurm's reason DependencyNeverSatisfied. `judge` is the decision of
a pass, pure; `step` takes it as both passes do (`corral.core.reconcile.plan_pass` and
`corral.core.batch.plan_batch_pass`).
"""

from __future__ import annotations

import re
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
REFERENCE = "@"  # `@N`: job N of the same submission, by its place (0-based)
_REFERENCE = re.compile(r"@([0-9]+)(?:_([0-9]+|\*))?")


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
class Reference:
    """A condition on a job of the same submission, named by its place in it (0-based): `@N`, the
    job (an array: the whole array), `@N_T` one task of an array, `@N_*` the whole array."""

    kind: DependencyKind
    place: int
    task: int | None = None  # `@N_T`
    whole_array: bool = False  # `@N_*`

    @property
    def target(self) -> str:
        """As written after the kind: `@2`, `@2_3`, `@2_*`."""
        if self.whole_array:
            return f"{REFERENCE}{self.place}_*"
        return f"{REFERENCE}{self.place}" + (f"_{self.task}" if self.task is not None else "")

    def __str__(self) -> str:
        return f"{self.kind}:{self.target}"


@dataclass(frozen=True, slots=True)
class Dependency:
    """Conditions (kind, job id), each on one job, in the order given without repeats; `any_of`:
    one must hold (Slurm's `?`), else every one (`,`). `arrays`: conditions (kind, array id) on a
    whole job array, judged on all its tasks at once (written `A_*`). `tasks`: conditions (kind,
    array id, task id) on one task named as Slurm writes it (`A_T`), as parsed; the submission
    makes each a condition on the task's job id (`whole_arrays`), so a stored one has none.
    `references`: conditions on jobs of the same submission (`@N`), which the store makes job ids
    (`resolve`) as it stores the submission, so a stored one has none either."""

    conditions: tuple[tuple[DependencyKind, int], ...]
    any_of: bool = False
    arrays: tuple[tuple[DependencyKind, int], ...] = ()
    tasks: tuple[tuple[DependencyKind, int, int], ...] = ()
    references: tuple[Reference, ...] = ()

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
            *((reference.kind, reference.target) for reference in self.references),
        ]

    def __str__(self) -> str:
        """The canonical text: a kind's ids together (jobs, then tasks `A_T`, then arrays `A_*`, then
        references `@N`),
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
    references: dict[Reference, None] = {}
    for part in text.split(ANY_OF if any_of else ALL_OF):
        kind_text, _, ids_text = part.strip().partition(":")
        kind = _kind(kind_text.strip().lower(), part.strip())
        if not ids_text.strip():
            raise ValueError(f"{part.strip()!r}: {kind} needs at least one job id ({kind}:ID[:ID...])")
        for entry in ids_text.split(":"):
            entry = entry.strip()
            if entry.startswith(REFERENCE):
                references[_reference(kind, entry, part.strip())] = None
                continue
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
    return Dependency(tuple(conditions), any_of, tuple(arrays), tuple(tasks), tuple(references))


def _reference(kind: DependencyKind, entry: str, where: str) -> Reference:
    match = _REFERENCE.fullmatch(entry)
    if match is None or int(match[1]) > MAX_JOB_ID or (match[2] not in (None, "*") and int(match[2]) > MAX_TASK_ID):
        raise ValueError(
            f"{where!r}: {entry!r} is not a job of the same submission (@N, N its place from 0; an array's task"
            " @N_T, the whole array @N_*)"
        )
    place, task = int(match[1]), match[2]
    if task == "*":
        return Reference(kind, place, whole_array=True)
    return Reference(kind, place, int(task) if task is not None else None)


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
    single task satisfy it. References (`@N`) are made job ids first (`resolve`)."""
    assert not dependency.references, "references are resolved before (resolve)"
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


def reference_problems(dependency: Dependency, place: int, submission: Sequence[Collection[int] | None]) -> list[str]:
    """What is wrong with the references (`@N`) of the dependency of job `place` of a submission
    (`submission`: each of its jobs by place, an array's task ids or None for one job), each naming
    the reference: one to the job itself, to a later job (which could make a cycle) or to no job,
    a task of what is not an array or of no task, one in a submission of one job, and, under `?`
    (any one condition), an array named whole with after, afterany or afterok (one condition per
    task: any single task would satisfy it), as `whole_arrays` refuses on an array's id."""
    problems: list[str] = []
    count = len(submission)
    if place == 0:
        may_name = "the submission's first job names none of it"
    else:
        may_name = f"this job (@{place}) may name @0" + (f" to @{place - 1}" if place > 1 else "")
    for reference in dependency.references:
        target = reference.place
        if count == 1:
            problems.append(
                f"{reference}: {REFERENCE}N names an earlier job of the same submission, and this submission has one"
                " job: name a job submitted before by its id"
            )
        elif target == place:
            problems.append(f"{reference}: names this job itself; {may_name}")
        elif target >= count:
            problems.append(f"{reference}: the submission has {count} jobs (@0 to @{count - 1}); {may_name}")
        elif target > place:
            problems.append(
                f"{reference}: names a later job of the submission: a job names only earlier ones, so that no cycle"
                f" can form; {may_name}"
            )
        elif (tasks := submission[target]) is None:
            if reference.task is not None or reference.whole_array:
                problems.append(f"{reference}: job @{target} of the submission is not a job array")
        elif reference.task is not None:
            if reference.task not in tasks:
                problems.append(f"{reference}: job array @{target} of the submission has no task {reference.task}")
        elif dependency.any_of and reference.kind is not DependencyKind.AFTERNOTOK:
            problems.append(
                f"{reference}: job @{target} of the submission is a job array, which '?' (any one condition) cannot"
                " name whole with after, afterany or afterok (one condition per task: any single task would"
                " satisfy it); use ',' or name its tasks (@N_T)"
            )
    return problems


def resolve(dependency: Dependency, job_ids: Sequence[int]) -> Dependency:
    """The dependency with its references made the job ids they stand for (`job_ids`: the id each
    job of the submission got, by place; an array's, its id): `@N` that id, which on an array is
    the whole array, `@N_T` its task T, `@N_*` the whole array, as if each had been written out.
    The references are checked already (`reference_problems`); what names an array is then made
    per task by `whole_arrays`, as for an array named by its id."""
    if not dependency.references:
        return dependency
    conditions = dict.fromkeys(dependency.conditions)
    arrays = dict.fromkeys(dependency.arrays)
    tasks = dict.fromkeys(dependency.tasks)
    for reference in dependency.references:
        job_id = job_ids[reference.place]
        if reference.whole_array:
            arrays[(reference.kind, job_id)] = None
        elif reference.task is not None:
            tasks[(reference.kind, job_id, reference.task)] = None
        else:
            conditions[(reference.kind, job_id)] = None
    return Dependency(tuple(conditions), dependency.any_of, tuple(arrays), tuple(tasks))


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
    assert not dependency.references, "a reference @N is made a job id at submission (resolve)"
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
