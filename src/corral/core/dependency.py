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

A condition on a job array's id (its first task's job id) is one on each of its tasks, as in Slurm
(`whole_arrays`, applied when the job is submitted); but afternotok, which Slurm reads for an array
as "every task ended, one failed", is refused on an array's id.

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

from corral.core.model import Job, JobState
from corral.core.snapshot import JobOutcome

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
    "aftercorr": "name each task's own job id instead: corral jobs --array ID lists them",
    "afterburstbuffer": "corral has no burst buffers",
    "singleton": "name the jobs to wait for instead (afterany:ID)",
}


@dataclass(frozen=True, slots=True)
class Dependency:
    """Conditions (kind, job id), each on one job, in the order given without repeats; `any_of`:
    one must hold (Slurm's `?`), else every one (`,`)."""

    conditions: tuple[tuple[DependencyKind, int], ...]
    any_of: bool = False

    def job_ids(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(job_id for _, job_id in self.conditions))

    def __str__(self) -> str:
        """The canonical text: a kind's ids together, kinds in the order first given. Under `?`
        with one kind, each condition is written alone: `afterok:12:13` reads back as `,` (every
        one), so `afterok:12?afterok:13` would be stored as its opposite."""
        if self.any_of and len({kind for kind, _ in self.conditions}) == 1:
            return ANY_OF.join(f"{kind.value}:{job_id}" for kind, job_id in self.conditions)
        by_kind: dict[DependencyKind, list[int]] = {}
        for kind, job_id in self.conditions:
            by_kind.setdefault(kind, []).append(job_id)
        joiner = ANY_OF if self.any_of else ALL_OF
        return joiner.join(":".join([kind.value, *map(str, ids)]) for kind, ids in by_kind.items())


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
    for part in text.split(ANY_OF if any_of else ALL_OF):
        kind_text, _, ids_text = part.strip().partition(":")
        kind = _kind(kind_text.strip().lower(), part.strip())
        if not ids_text.strip():
            raise ValueError(f"{part.strip()!r}: {kind} needs at least one job id ({kind}:ID[:ID...])")
        for entry in ids_text.split(":"):
            conditions[(kind, _job_id(entry.strip(), part.strip()))] = None
    return Dependency(tuple(conditions), any_of)


def from_mapping(kinds: Mapping[str, list[int]], any_of: bool) -> Dependency | None:
    """The structured form, {"afterok": [12, 13], "afterany": [14]}; None when it names no job."""
    conditions: dict[tuple[DependencyKind, int], None] = {}
    for kind_text, ids in kinds.items():
        kind = _kind(kind_text.strip().lower(), kind_text)
        for job_id in ids:
            if not 1 <= job_id <= MAX_JOB_ID:
                raise ValueError(f"{kind}: {job_id} is not a job id")
            conditions[(kind, job_id)] = None
    return Dependency(tuple(conditions), any_of) if conditions else None


def _kind(word: str, where: str) -> DependencyKind:
    if word in KINDS:
        return DependencyKind(word)
    offered = ", ".join(KINDS)
    if word in NOT_OFFERED:
        raise ValueError(f"{where!r}: {word} is not offered ({NOT_OFFERED[word]}); use {offered}")
    raise ValueError(f"{where!r}: unknown dependency type {word!r}; use {offered}")


def _job_id(entry: str, where: str) -> int:
    if "+" in entry:
        raise ValueError(f"{where!r}: a delay after the job (+minutes) is not offered")
    if "_" in entry:
        raise ValueError(
            f"{where!r}: {entry!r}: name an array's task by its own job id (corral jobs --array ID lists them),"
            " or its whole array by the array's id"
        )
    if not (entry.isascii() and entry.isdigit()) or not 1 <= int(entry) <= MAX_JOB_ID:
        raise ValueError(f"{where!r}: {entry!r} is not a job id")
    return int(entry)


def whole_arrays(dependency: Dependency, tasks_of: Mapping[int, Sequence[int]]) -> Dependency:
    """The dependency with each condition on a job array's id (`tasks_of`: array id -> its tasks'
    job ids) made one per task, as Slurm reads a dependency on an array: every task must satisfy
    it. Done once, at submission, so that the pass judges job ids only. ValueError for an array
    under `?` (any one condition): one per task would let any single task satisfy it."""
    if not any(job_id in tasks_of for _, job_id in dependency.conditions):
        return dependency
    for kind, job_id in dependency.conditions:
        # Slurm runs afternotok on an array once every task ended and one of them failed; one
        # condition per task would wait for every task to fail, and end the job once one completed:
        # a cleanup step that never runs. Refused until that reading can be stored.
        if kind is DependencyKind.AFTERNOTOK and job_id in tasks_of:
            raise ValueError(
                f"{dependency}: afternotok on job array {job_id} is not offered (Slurm's: once every task ended,"
                f" one of them failed); wait with afterany:{job_id} and let the step look at the tasks' states"
                " (corral jobs --array ID --json), or name tasks' own job ids"
            )
    if dependency.any_of:
        named = next(job_id for _, job_id in dependency.conditions if job_id in tasks_of)
        raise ValueError(
            f"{dependency}: job {named} is a job array's id, which '?' (any one condition) cannot name; use ','"
            " or name its tasks' own job ids"
        )
    conditions: dict[tuple[DependencyKind, int], None] = {}
    for kind, job_id in dependency.conditions:
        for task in tasks_of.get(job_id, (job_id,)):
            conditions[(kind, task)] = None
    return Dependency(tuple(conditions), dependency.any_of)


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


def verdict(dependency: Dependency, state_of: Callable[[int], JobState | None]) -> tuple[Verdict, str]:
    """Whether the dependency holds given each named job's state (None: no such job, which never
    gets anywhere), and, unless it holds, the wait reason: `Dependency: ...` naming the conditions
    still waited for, or `DependencyNeverSatisfied: ...` naming those that cannot hold."""
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
) -> Judgement:
    """The queued jobs with dependencies (`dependent`) but those in `skip` (a pass ended them
    already), judged on the states of the jobs they name: open ones in `jobs`, finished ones in
    `finished`. With `kill_invalid` (Slurm's kill_invalid_depend), a job whose dependency can
    never be satisfied is cancelled, and the jobs that depend on it see it cancelled in this same
    judgement: a chain of afterok ends in one pass. Other endings of the pass (a cancel request,
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
            answer, reason = verdict(job.dependency, state_of)
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
    dependent: Mapping[int, Job],
    jobs: Mapping[int, Job],
    finished: Mapping[int, JobState],
    ended: set[int],
    kill_invalid: bool,
    attempt_ids: Callable[[int], tuple[int, ...]],
    outcomes: list[JobOutcome],
) -> Judgement:
    """A pass's dependency step, as both passes take it: the jobs `judge`s, those never
    satisfiable cancelled (their outcomes appended to `outcomes`, their ids added to `ended`); the
    judgement says which jobs wait, and why."""
    judged = judge(dependent, jobs, finished, ended, kill_invalid)
    for job_id, reason in judged.cancel:
        outcomes.append(JobOutcome(job_id, JobState.CANCELLED, reason, attempt_ids(job_id)))
        ended.add(job_id)
    return judged
