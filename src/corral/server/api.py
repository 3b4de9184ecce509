"""The user API: submit, list, show, cancel, hold, release, logs, explain, nodes, events, status, usage,
notify."""

from __future__ import annotations

import dataclasses
import functools
import re
import time
from collections.abc import Callable, Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from pydantic import BeforeValidator

from corral.core import (
    accounting,
    admission,
    categories,
    fairshare,
    health,
    lifecycle,
    multifactor,
    reservations,
    retry,
)
from corral.core.dispatchers import is_stale
from corral.core.model import AttemptState, Job, JobState, NodeState
from corral.core.notify import NotifyRule, NotifyState, Retry, rule_names, shown_url
from corral.core.settings import BootSettings
from corral.core.signals import slurm_signal_refusal
from corral.executor.slurm import SHELL_NAME, sbatch_value_refusal, sbatch_variable_refusal
from corral.jobspec import DEFAULT_PRIORITY, JobRequest
from corral.notifier import RETRY_KEY, SENDING_KEY
from corral.server.app import Caller, Runtime
from corral.server.deps import AdminRuntime, CallerOf, UserRuntime, require_admin
from corral.server.logstore import Stream
from corral.server.models import (
    DB_INT_MAX,
    DB_INT_MIN,
    ArrayActionOut,
    AttemptOut,
    BackoffOut,
    CancelMatchingBody,
    CancelMatchingOut,
    ClearBackoffsBody,
    ClearBackoffsOut,
    ClearedBackoffOut,
    DependencyOut,
    DispatcherOut,
    EventOut,
    FleetTypeOut,
    HoldBody,
    JobOut,
    JobUpdateBody,
    JobUpdateOut,
    NewUserOut,
    NodeAttributesBody,
    NodeChangedOut,
    NodeOut,
    NotifyRuleOut,
    NotifySkipBody,
    NotifySkipOut,
    NotifyStatusOut,
    PathId,
    PriorityBody,
    QueueOut,
    QueueRowOut,
    QuietOut,
    RequeueBody,
    ResourcesOut,
    RetentionOut,
    RetryOut,
    ShareOut,
    ShareRowOut,
    SignalBody,
    SignalEventOut,
    SignalMatchingBody,
    SignalMatchingOut,
    StatusOut,
    SubmitBody,
    SubmitResult,
    ThrottleBody,
    ThrottleOut,
    TypeUsageOut,
    UsageOut,
    UsageRowOut,
    UserBody,
    UserOut,
    error_responses,
    plain_number,
)
from corral.store import (
    ArrayOutcome,
    JobFilter,
    KeyReused,
    LimitLengthened,
    NotBackedOff,
    NotFound,
    NotQueued,
    NotRunning,
    UserExists,
    acting_as,
)
from corral.store.store import UPDATABLE_WHILE_RUNNING, node_from_row

router = APIRouter(prefix="/api", responses=error_responses(400, 401, 403, 404, 413, 422))

# Slurm's name of an array's task: ARRAY_TASK, as 12_3.
TASK_NAME = re.compile(r"([0-9]+)_([0-9]+)")


def job_id_of(
    job_id: Annotated[str, Path(description="A job id, or an array's task as ARRAY_TASK (Slurm's 12_3).")],
    runtime: UserRuntime,
) -> int:
    """The job a route's path names: by its id, or as an array's task (`12_3`, the task ids that
    `corral jobs` shows), which a Slurm user types for scancel, scontrol hold or update."""
    task = TASK_NAME.fullmatch(job_id)
    numbers = [int(part) for part in task.groups()] if task else [int(job_id)] if job_id.isdecimal() else []
    if not numbers or not job_id.isascii():
        why = "not a job id, nor an array's task as ARRAY_TASK (12_3)"
    elif max(numbers) > DB_INT_MAX:
        why = f"Input should be less than or equal to {DB_INT_MAX}"
    elif task is not None:
        return runtime.store.task_job_id(numbers[0], numbers[1])
    else:
        return numbers[0]
    raise RequestValidationError([{"type": "value_error", "loc": ("path", "job_id"), "msg": why, "input": job_id}])


JobId = Annotated[int, Depends(job_id_of)]


@dataclasses.dataclass(frozen=True)
class Target:
    """What a route that changes jobs is given: one job, or every task of a job array. A plain id
    that is an array's (its first task's job id) is the whole array, as in Slurm's `scontrol hold
    12` and `scancel 12`; `12_0` is that first task alone."""

    job_id: int
    whole_array: bool


def target_of(
    job_id: Annotated[
        str, Path(description="A job id, a job array's id (every task), or an array's task as ARRAY_TASK (12_3).")
    ],
    runtime: UserRuntime,
) -> Target:
    resolved = job_id_of(job_id, runtime)
    return Target(resolved, job_id.isdecimal() and runtime.store.is_array(resolved))


JobOrArray = Annotated[Target, Depends(target_of)]


def array_out(outcome: ArrayOutcome) -> ArrayActionOut:
    return ArrayActionOut(**dataclasses.asdict(outcome))


def names_its_caller(route: Callable[..., Any]) -> Callable[..., Any]:
    """A route whose events say who asked ("cancel requested (by alice)"): a user's or an admin
    user's token (the operator's names no one, as before). FastAPI reads the route's own signature
    through functools.wraps, and passes `caller` by name."""

    @functools.wraps(route)
    def named(**kwargs: Any) -> Any:
        with acting_as(kwargs["caller"].name):
            return route(**kwargs)

    return named


def denied(caller: Caller, what: str) -> HTTPException:
    """Slurm's refusal of a user's change to another's job (scancel, scontrol: "Access/permission
    denied"), naming what and whose."""
    return HTTPException(403, f"Access/permission denied: {what} (you are {caller.name}; an admin may)")


def check_owner(runtime: Runtime, caller: Caller, job_id: int, action: str) -> None:
    """A user may change only their own jobs (an array's tasks are all its submitter's); an admin
    any. 404 for no such job, as for an admin."""
    if caller.admin:
        return
    owner = runtime.store.job_row(job_id)["spec"].get("user", "")
    if owner != caller.name:
        raise denied(caller, f"job {job_id} belongs to {owner or 'no user'}: only its owner may {action} it")


IdFilter = Annotated[int | None, BeforeValidator(plain_number), Query(ge=DB_INT_MIN, le=DB_INT_MAX)]


def job_out(
    row: dict[str, Any],
    attempts: list[dict[str, Any]] | None = None,
    detail: bool = False,
    dependencies: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = None,
) -> JobOut:
    spec = row["spec"]
    last_attempt = row["last_attempt_state"]
    ended = retry.end_cause(
        JobState(row["state"]),
        row["wait_reason"],
        row["cancel_requested"] or row["priority"] == 0,
        AttemptState(last_attempt) if last_attempt else None,
        row["last_attempt_exit_code"],
    )
    script = spec.get("script")
    return JobOut(
        id=row["id"],
        name=row["name"],
        state=row["state"],
        end_cause=ended,
        priority=row["priority"],
        exit_code=row["exit_code"],
        exit_signal=row["exit_signal"],
        cancelled_by=row["cancelled_by"],
        node=row["node_id"],
        attempts=row["attempt_count"],
        temp_failures=row["temp_failures"],
        nonzero_exits=row["perm_failures"],
        max_retries=spec.get("max_retries") or 0,
        command=list(spec["command"]),
        image=spec.get("image"),
        chdir=spec.get("chdir"),
        separate_stderr=bool(spec.get("separate_stderr")),
        script_bytes=len(script.encode()) if script is not None else None,
        script=script if detail else None,
        resources=ResourcesOut(
            vcpus=spec["vcpus"], ram_mib=spec["ram"], scratch_mib=spec["scratch"], gpus=spec["gpus"]
        ),
        nodes=spec["nodes"],
        submitted_at=row["submitted_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        wait_reason=row["wait_reason"],
        unplaceable=row["unplaceable"],
        cancel_requested=row["cancel_requested"],
        requeue_requested=row["requeue_requested"],
        held=row["held"],
        on_node_failure=spec.get("on_node_failure"),
        time_limit=spec.get("time_limit") or None,
        signal=spec.get("signal"),
        executor_ref=row["executor_ref"],
        not_before=spec.get("not_before"),
        locality=spec.get("locality"),
        traits=spec.get("traits") or {},
        forbidden_traits=spec.get("forbidden_traits") or {},
        min_platform=spec.get("min_platform"),
        reservation=spec.get("reservation") or "",
        cpu_capped=bool(spec.get("cpu_capped")),
        exclusive=bool(spec.get("exclusive")),
        user=spec.get("user", ""),
        tags=list(spec.get("tags", ())),
        dependency=spec.get("dependency"),
        depends_on=[DependencyOut(**d) for d in dependencies[0]] if dependencies is not None else None,
        needed_by=[DependencyOut(**d) for d in dependencies[1]] if dependencies is not None else None,
        attempt_list=[attempt_out(a) for a in attempts] if attempts is not None else None,
        explanation=row["explanation"] if detail else None,
        array_job_id=row["array_job_id"],
        array_task_id=row["array_task_id"],
        array=spec.get("array") if row["array_task_id"] is not None else None,
        array_throttle=row["array_throttle"],
    )


def attempt_out(row: dict[str, Any]) -> AttemptOut:
    return AttemptOut(
        id=row["id"],
        state=row["state"],
        node=row["node_id"],
        nodes=list(row["node_ids"]),
        exit_code=row["exit_code"],
        exit_signal=row["exit_signal"],
        assigned_at=row["assigned_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        reason=row["reason"],
        executor_ref=row["executor_ref"],
        cpu_seconds=row["cpu_seconds"],
        max_rss_mib=row["max_rss_mib"],
    )


@router.post("/jobs", status_code=201, responses=error_responses(409))
@names_its_caller
def submit(body: SubmitBody, runtime: UserRuntime, caller: CallerOf) -> SubmitResult:
    """Queue jobs. A job's `user` is whose it is: a user token's own (naming another is refused,
    403: Slurm's sbatch --uid is root's); the operator's and an admin's may name anyone, and a job
    naming none is the `submitter`'s (the operator's CLI sends its login name) or the admin's own."""
    jobs = owned_jobs(body, caller)
    if runtime.config.executor == "slurm":
        # Slurm runs the command on its nodes, where corral's agent and [containers] are not.
        images = [i for i, job in enumerate(jobs) if job.image is not None]
        if images:
            raise HTTPException(
                422,
                [
                    f"jobs.{i}.image: a container image runs on corral's agents, not in front of Slurm: run the"
                    " site's container tool in the command instead (e.g. srun --container-image, Pyxis)"
                    for i in images
                ],
            )
        unnamed = [
            f"jobs.{i}.env: {name!r} is no shell name (letters, digits and _, not first a digit): in front of Slurm"
            " corral's batch script sets the job's variables, and sets only those"
            for i, job in enumerate(jobs)
            for name in job.env
            if SHELL_NAME.fullmatch(name) is None
        ]
        # Slurm's own input variables act as sbatch options, with corral's Slurm user's rights.
        unnamed += [
            f"jobs.{i}.env: {why}"
            for i, job in enumerate(jobs)
            for name in job.env
            if (why := sbatch_variable_refusal(name))
        ]
        # A value sbatch cannot parse would fail every sbatch of the job: refused here, as sbatch would.
        unnamed += [
            f"jobs.{i}.env: {why}"
            for i, job in enumerate(jobs)
            for name, value in job.env.items()
            if (why := sbatch_value_refusal(name, value))
        ]
        if unnamed:
            raise HTTPException(422, unnamed)
    over = _submit_limit_refusals(jobs, runtime)
    if over:
        raise HTTPException(403, over)
    now = time.time()
    refused = _reservation_refusals(jobs, runtime, now)
    if refused:
        raise HTTPException(422, refused)
    try:
        ids = runtime.store.submit(jobs, now, body.key)
    except KeyReused as exc:
        raise HTTPException(409, str(exc)) from None
    runtime.wake()
    return SubmitResult(ids=ids)


def owned_jobs(body: SubmitBody, caller: Caller) -> list[JobRequest]:
    """The submitted jobs, each with its user: 403, one line per job, for a user's job that names
    another."""
    if caller.admin:
        default = caller.name or body.submitter
        return [job if job.user else job.model_copy(update={"user": default}) for job in body.jobs]
    others = [
        f"jobs.{i}.user: Access/permission denied: {job.user!r} is not you ({caller.name}): a user submits only"
        " as themselves (an admin may submit as another)"
        for i, job in enumerate(body.jobs)
        if job.user and job.user != caller.name
    ]
    # Priority comes first in every queue order: a user's job submitted above the default would
    # pass everyone's, where `corral priority` lets a user only lower theirs (Slurm: only an
    # operator or administrator sets sbatch --priority).
    others += [
        f"jobs.{i}.priority: Access/permission denied: {job.priority} is above {DEFAULT_PRIORITY}, the most a"
        f" user submits at ({caller.name}; an admin may submit higher, or raise it with corral priority)"
        for i, job in enumerate(body.jobs)
        if job.priority > DEFAULT_PRIORITY
    ]
    if others:
        raise HTTPException(403, others)
    return [job.model_copy(update={"user": caller.name}) for job in body.jobs]


def _submit_limit_refusals(jobs: list[JobRequest], runtime: Runtime) -> list[str]:
    """Slurm's QOSMaxSubmitJobPerUserLimit, one line per user whose open jobs this submission would
    take past their policy.users.max_submitted_jobs. Counted before the submission's transaction:
    submissions racing one another may pass it by what they add, which bounds it all the same."""
    adding: dict[str, int] = {}
    for job in jobs:
        tasks = job.to_array()
        adding[job.user] = adding.get(job.user, 0) + (len(tasks.task_ids) if tasks is not None else 1)
    limits = runtime.config.policy.users
    limited = {user: most for user in adding if (most := limits.of(user).max_submitted_jobs) is not None}
    if not limited:
        return []
    have = runtime.store.open_jobs_of(sorted(limited))
    return [
        f"QOSMaxSubmitJobPerUserLimit: {user or '(no user)'} has {have[user]:,} open jobs (queued, claimed or running)"
        f" and submits {adding[user]:,} more: policy.users.max_submitted_jobs lets a user have {most:,} at most;"
        " nothing of the submission is queued"
        for user, most in limited.items()
        if have[user] + adding[user] > most
    ]


def _reservation_refusals(jobs: list[JobRequest], runtime: Runtime, now: float) -> list[str]:
    """Slurm's "Requested reservation is invalid", one line per job that names an admin
    reservation in force on no node and no instance type (nothing of the submission is stored)."""
    named = [(i, job.reservation) for i, job in enumerate(jobs) if job.reservation]
    if not named:
        return []
    refusal = _reservation_refusal(runtime, now)
    return [f"jobs.{i}.reservation: {why}" for i, name in named if (why := refusal(name))]


# corral's reservations are attributes of its own nodes; Slurm's are Slurm's, and corral does not
# pass --reservation to sbatch: accepting one would run the job anywhere.
_NOT_IN_FRONT_OF_SLURM = (
    "{name!r}: corral's admin reservations are on its own nodes, not in front of Slurm: ask for a Slurm"
    " reservation with slurm.extra_args (--reservation) instead"
)


def _reservation_refusal(runtime: Runtime, now: float) -> Callable[[str], str | None]:
    """Why a job may not name reservation `name` (at submission, or moved by `corral update
    --reservation`), None when it is in force: the reservations in force read once."""
    if runtime.config.executor == "slurm":
        return lambda name: _NOT_IN_FRONT_OF_SLURM.format(name=name)
    types = runtime.config.instance_types
    held: list[reservations.Attributes] = [*runtime.store.live_node_attributes(), *(t.attributes for t in types)]
    return functools.partial(reservations.refusal, reservations=reservations.in_force(held, now))


@router.get("/jobs")
def list_jobs(
    runtime: UserRuntime,
    state: list[JobState] | None = Query(None),
    limit: int = Query(1000, ge=1, le=100_000),
    user: str | None = Query(None, description="only this user's jobs"),
    name: str | None = Query(None, description="only jobs of this name"),
    tag: str | None = Query(None, description="only jobs with this tag"),
    array: Annotated[
        int | None,
        BeforeValidator(plain_number),
        Query(ge=DB_INT_MIN, le=DB_INT_MAX, description="only the tasks of this job array (its id)"),
    ] = None,
    before: Annotated[
        int | None,
        BeforeValidator(plain_number),
        Query(ge=DB_INT_MIN, le=DB_INT_MAX, description="only jobs with a lower id: the page before"),
    ] = None,
) -> list[JobOut]:
    """The newest `limit` jobs that match every filter given, oldest first. An older page: the same
    filters with `before` the first id of this one (a run's jobs by its tag, a page at a time)."""
    picked = JobFilter(tuple(s.value for s in state or ()), user, name, tag, array)
    rows = runtime.store.list_job_rows(limit=limit, picked=picked, before=before)
    return [job_out(r) for r in rows]


@router.post("/jobs/cancel")
@names_its_caller
def cancel_matching(body: CancelMatchingBody, runtime: UserRuntime, caller: CallerOf) -> CancelMatchingOut:
    """Slurm's `scancel --state/-u/-n`: cancel every open job that matches all the filters given
    (at least one); the ids marked for cancellation. A user's cancels only their own jobs, and
    naming another user is refused (403)."""
    picked = filter_of_caller(body, caller, "cancels")
    ids = runtime.store.request_cancel_matching(time.time(), picked)
    runtime.wake()
    return CancelMatchingOut(ids=ids)


def filter_of_caller(body: CancelMatchingBody, caller: Caller, verb: str) -> JobFilter:
    """The jobs `body`'s filters pick, of the caller's own unless it is the operator: a user who
    names another user is refused (403), one who names none gets their own."""
    user = body.user
    if not caller.admin:
        if user is not None and user != caller.name:
            raise denied(caller, f"user: the jobs of {user} are theirs: a user {verb} only their own")
        user = caller.name
    return JobFilter(tuple(s.value for s in body.states or ()), user, body.name, body.tag, body.array)


@router.patch("/arrays/{array_job_id}")
@names_its_caller
def set_array_throttle(array_job_id: PathId, body: ThrottleBody, runtime: UserRuntime, caller: CallerOf) -> ThrottleOut:
    """Slurm's `scontrol update JobId=A ArrayTaskThrottle=N`: a job array's throttle, on all its
    tasks (0: no limit). Running tasks go on; the next pass starts no more than it allows."""
    check_owner(runtime, caller, array_job_id, "throttle")  # (an array's id is its first task's)
    result = runtime.store.set_array_throttle(array_job_id, body.throttle, time.time())
    runtime.wake()
    return ThrottleOut(**result)


@router.get("/jobs/{job_id}")
def show_job(job_id: JobId, runtime: UserRuntime) -> JobOut:
    store = runtime.store
    shown = job_out(store.job_row(job_id), store.attempts_of(job_id), True, store.dependency_rows(job_id))
    # (job.signal_requested, job.signalled, job.signal_dropped: the kinds that start so.)
    told = store.list_events(job_id=job_id, kind="job.signal%", limit=20)
    shown.signals = [SignalEventOut(at=e["at"], kind=e["kind"], message=e["message"]) for e in told]
    return shown


# The routes that change a job, given a job array's id, change every task of the array in a state
# the change applies to, in one transaction, and answer an ArrayActionOut (Slurm's `scontrol hold
# 12`, `scancel 12`); given `12_3`, that task alone.


@router.post("/jobs/{job_id}/cancel")
@names_its_caller
def cancel_job(target: JobOrArray, runtime: UserRuntime, caller: CallerOf) -> dict[str, Any] | ArrayActionOut:
    """Slurm's `scancel`: the next pass cancels the job (kills its run). A job array's id: every
    open task."""
    check_owner(runtime, caller, target.job_id, "cancel")
    store, now = runtime.store, time.time()
    result = (
        array_out(store.cancel_array(target.job_id, now))
        if target.whole_array
        else store.request_cancel(target.job_id, now)
    )
    runtime.wake()
    return result


@router.post("/jobs/signal", responses=error_responses(409))
@names_its_caller
def signal_matching(body: SignalMatchingBody, runtime: UserRuntime, caller: CallerOf) -> SignalMatchingOut:
    """Slurm's `scancel --signal SIG --state/-u/-n`: signal the command of every open job that
    matches all the filters given and runs; those that do not run are said by state, not
    signalled (scancel refuses each). A user's signals only their own jobs."""
    picked = filter_of_caller(body, caller, "signals")
    number = body.number
    refuse_signal_here(runtime, number, body.batch)
    ids, not_running = runtime.store.request_signal_matching(time.time(), picked, number, body.batch)
    runtime.wake()
    return SignalMatchingOut(ids=ids, not_running=not_running)


@router.post("/jobs/{job_id}/signal", responses=error_responses(409))
@names_its_caller
def signal_job(
    target: JobOrArray, body: SignalBody, runtime: UserRuntime, caller: CallerOf
) -> dict[str, Any] | ArrayActionOut:
    """Slurm's `scancel --signal SIG [--batch]`: the job's running command is sent the signal (its
    whole process group, or with `batch` its main process), once, by its agent at its next ping (or
    the next Slurm pass); the job is not cancelled. 409 for a job whose command does not run
    (queued, held, claimed, finished), naming its state; for a job array's id, each running task,
    the others said by state, and 409 only when none runs."""
    check_owner(runtime, caller, target.job_id, "signal")
    number = body.number
    refuse_signal_here(runtime, number, body.batch)
    store, now = runtime.store, time.time()
    try:
        if target.whole_array:
            result: dict[str, Any] | ArrayActionOut = array_out(
                store.signal_array(target.job_id, number, body.batch, now)
            )
        else:
            result = store.request_signal(target.job_id, number, body.batch, now)
    except (NotRunning, NotQueued) as exc:
        raise HTTPException(409, str(exc)) from None
    runtime.wake()
    return result


def refuse_signal_here(runtime: Runtime, number: int, main_only: bool) -> None:
    """409 for a signal this corral's executor cannot deliver as asked (in front of Slurm: no
    --batch, only the signals its batch script outlives)."""
    if runtime.config.executor == "slurm" and (refused := slurm_signal_refusal(number, main_only)):
        raise HTTPException(409, refused)


@router.post("/jobs/{job_id}/hold", responses=error_responses(409))
@names_its_caller
def hold_job(
    target: JobOrArray, runtime: UserRuntime, caller: CallerOf, body: HoldBody | None = None
) -> dict[str, Any] | ArrayActionOut:
    """Slurm's `scontrol hold`: a queued job stays queued and is not placed (nor booted for) until
    released. In front of Slurm, a claimed job (pending in Slurm's queue) is taken back by the
    next pass and held (`taken_back`). 409 for a job that is not queued (nor claimed); for a job
    array's id, every such task, and 409 only when it has none (nor any held already)."""
    check_owner(runtime, caller, target.job_id, "hold")
    take_back = runtime.config.executor == "slurm"
    reason = body.reason if body else ""
    try:
        if target.whole_array:
            outcome = runtime.store.hold_array(target.job_id, time.time(), reason, take_back=take_back)
            if take_back:
                runtime.wake()
            return array_out(outcome)
        result = runtime.store.hold(target.job_id, time.time(), reason, take_back=take_back)
    except NotQueued as exc:
        raise HTTPException(409, str(exc)) from None
    if result.get("taken_back"):
        runtime.wake()
    return result


@router.post("/jobs/{job_id}/requeue")
@names_its_caller
def requeue_job(
    target: JobOrArray, runtime: UserRuntime, caller: CallerOf, body: RequeueBody | None = None
) -> dict[str, Any] | ArrayActionOut:
    """Slurm's `scontrol requeue` (with `{"hold": true}`: `requeuehold`): the next pass stops a
    claimed or running job's run and queues it again, counting no failure; a finished job is queued
    again at once, as a job submitted now. A job array's id: each of its tasks."""
    check_owner(runtime, caller, target.job_id, "requeue")
    hold = body.hold if body else False
    store, now = runtime.store, time.time()
    result = (
        array_out(store.requeue_array(target.job_id, now, hold=hold))
        if target.whole_array
        else store.request_requeue(target.job_id, now, hold=hold)
    )
    runtime.wake()
    return result


@router.post("/jobs/{job_id}/release")
@names_its_caller
def release_job(target: JobOrArray, runtime: UserRuntime, caller: CallerOf) -> dict[str, Any] | ArrayActionOut:
    """Slurm's `scontrol release`. A job array's id: each of its held tasks."""
    check_owner(runtime, caller, target.job_id, "release")
    store, now = runtime.store, time.time()
    result = (
        array_out(store.release_array(target.job_id, now)) if target.whole_array else store.release(target.job_id, now)
    )
    runtime.wake()
    return result


@router.patch("/jobs/{job_id}")
@names_its_caller
def set_priority(
    target: JobOrArray, body: PriorityBody, runtime: UserRuntime, caller: CallerOf
) -> JobOut | ArrayActionOut:
    """A job's priority (0 cancels it). A job array's id: each of its tasks not finished."""
    check_owner(runtime, caller, target.job_id, "change the priority of")
    current = runtime.store.job_row(target.job_id)["priority"]
    if not caller.admin and body.priority > current:
        # Slurm: "Only the Slurm administrator or root can increase job's priority".
        raised = f"{current} to {body.priority}"
        raise denied(caller, f"job {target.job_id}: only an admin raises a job's priority ({raised})")
    store = runtime.store
    if target.whole_array:
        outcome = array_out(store.set_array_priority(target.job_id, body.priority, time.time()))
        runtime.wake()
        return outcome
    store.set_priority(target.job_id, body.priority, time.time())
    runtime.wake()
    return job_out(store.job_row(target.job_id))


@router.post("/jobs/{job_id}/update", responses=error_responses(409))
@names_its_caller
def update_job(
    target: JobOrArray, body: JobUpdateBody, runtime: UserRuntime, caller: CallerOf
) -> JobUpdateOut | ArrayActionOut:
    """Slurm's `scontrol update JobId=`: change what a job asked for. Resources, nodes, its
    requested start and its admin reservation only while it is queued (409 otherwise; a reservation
    in force nowhere is refused, 422, as at submission); its time limit, retries and name also
    while it is claimed or running. In front of Slurm, a running job's time limit is Slurm's to
    change (409), and a claimed job (pending in Slurm's queue) takes every change: the next pass
    takes it back from Slurm and submits it again. A job array's id: every task whose state takes
    the change (409 when none does); a value refused for one task changes none."""
    check_owner(runtime, caller, target.job_id, "update")
    changes = {key: getattr(body, key) for key in body.model_fields_set if key != "time_limit_add"}
    if body.reservation:
        # As at submission: a reservation in force nowhere is refused, not waited for.
        why = _reservation_refusal(runtime, time.time())(body.reservation)
        if why:
            raise HTTPException(422, [f"reservation: {why}"])
    # In front of Slurm, Slurm enforces a running job's time limit (scontrol update changes it there).
    slurm = runtime.config.executor == "slurm"
    while_running = UPDATABLE_WHILE_RUNNING - {"time_limit"} if slurm else UPDATABLE_WHILE_RUNNING
    store = runtime.store
    # Slurm: "Only the Slurm administrator or root can increase job's TimeLimit".
    may_lengthen = caller.admin
    try:
        if target.whole_array:
            outcome = store.update_array(
                target.job_id, changes, time.time(), body.time_limit_add, while_running, slurm, may_lengthen
            )
            runtime.wake()
            return array_out(outcome)
        result = store.update_job(
            target.job_id, changes, time.time(), body.time_limit_add, while_running, slurm, may_lengthen
        )
    except NotQueued as exc:
        raise HTTPException(409, str(exc)) from None
    except LimitLengthened as exc:
        raise denied(caller, str(exc)) from None
    runtime.wake()
    return JobUpdateOut(**result)


@router.get(
    "/jobs/{job_id}/logs", responses={200: {"content": {"application/octet-stream": {}}}, **error_responses(409)}
)
def job_logs(
    job_id: JobId,
    runtime: UserRuntime,
    caller: CallerOf,
    attempt: IdFilter = None,
    all_attempts: bool = False,
    offset: Annotated[
        int, Query(ge=0, le=2**62, description="from this byte of one attempt's output on (corral logs --follow)")
    ] = 0,
    stream: Annotated[
        Stream,
        Query(
            description="output (stdout, and stderr unless the job keeps it apart), or stderr: that of a job"
            " submitted with separate_stderr (corral logs --stderr)"
        ),
    ] = "output",
) -> Any:
    """A job's output, or its stderr kept apart: its owner's and an admin's alone (Slurm's output
    files are the owner's by their Unix mode; here the server holds them all)."""
    if offset and all_attempts:
        raise HTTPException(422, "offset reads one attempt's output: not with all_attempts")
    check_owner(runtime, caller, job_id, "read the output of")
    attempts = runtime.store.attempts_of(job_id)
    job = runtime.store.job_row(job_id)  # 404 for an unknown job
    if stream == "stderr" and not job["spec"].get("separate_stderr"):
        # An empty answer would read as "it wrote nothing to stderr".
        raise HTTPException(
            409,
            f"job {job_id} keeps its stderr in its output (read that); a job submitted with separate_stderr"
            " (corral submit --separate-stderr) keeps it apart",
        )
    if not attempts and not all_attempts:
        # An empty answer would read as "it ran and printed nothing".
        why = f" ({job['wait_reason']})" if job["wait_reason"] else ""
        raise HTTPException(409, f"job {job_id} has not run: it is {job['state']}{why}")
    if attempt is not None:
        chosen = [a for a in attempts if a["id"] == attempt]
        if not chosen:
            # Attempt ids count over the whole store, not per job: `--attempt 1` for a job's first
            # attempt is the natural guess, and was answered with no clue.
            theirs = ", ".join(str(a["id"]) for a in attempts) or "none"
            raise HTTPException(
                404,
                f"job {job_id} has no attempt {attempt} (its attempts: {theirs}; as corral job {job_id} lists them)",
            )
        attempts = chosen
    elif not all_attempts:
        attempts = attempts[-1:]
    parts: list[bytes | int] = []  # text, or an attempt whose output is sent from its file
    for a in attempts:
        if all_attempts:
            parts.append(f"==> attempt {a['id']} on {a['node_id']} ({a['state']}) <==\n".encode())
        keeper = None if runtime.logs.path(job_id, a["id"], stream).exists() else kept_elsewhere(runtime, a)
        if keeper is not None and not all_attempts:
            raise HTTPException(409, keeper)
        parts.append(f"({keeper})\n".encode() if keeper else a["id"])

    def output() -> Iterator[bytes]:
        # As it is read, a chunk at a time: an output may be larger than the server's memory.
        for part in parts:
            yield from [part] if isinstance(part, bytes) else runtime.logs.chunks(job_id, part, offset, stream)

    return StreamingResponse(output(), media_type="application/octet-stream")


def kept_elsewhere(runtime: UserRuntime, attempt: dict[str, Any]) -> str | None:
    """Where an attempt's output is, when another dispatcher sharing the store booted its node: the
    agent sends it to that dispatcher's server, which keeps it (an empty answer would read as "it
    printed nothing")."""
    node = runtime.store.node_row(attempt["node_id"])
    keeper = node["dispatcher_id"] if node else None
    if runtime.loop is None or keeper in (None, runtime.loop.dispatcher_id):
        return None
    return (
        f"the output of attempt {attempt['id']} is kept by dispatcher {keeper}, whose server its node"
        f" {attempt['node_id']} reports to: read it through that server (CORRAL_URL)"
    )


@router.get("/jobs/{job_id}/explain")
def explain_job(job_id: JobId, runtime: UserRuntime) -> dict[str, Any]:
    row = runtime.store.job_row(job_id)
    return {
        "id": job_id,
        "state": row["state"],
        "wait_reason": row["wait_reason"],
        "unplaceable": row["unplaceable"],
        "explanation": row["explanation"],
    }


@router.get("/nodes")
def list_nodes(runtime: UserRuntime, all_nodes: bool = Query(False, alias="all")) -> list[NodeOut]:
    now = time.time()
    running = runtime.store.running_counts()
    # Every live node (a fleet's listing cut at 1,000 hid nodes that bill); with the gone ones, the newest 1,000.
    rows = runtime.store.node_rows(include_gone=all_nodes, limit=1000 if all_nodes else None)
    return [node_out(row, running, now, runtime) for row in rows]


@router.patch("/nodes/{node_id}")
@names_its_caller
def set_node_attributes(
    node_id: str, body: NodeAttributesBody, request: Request, runtime: UserRuntime, caller: CallerOf
) -> NodeChangedOut:
    """A node's attributes, reservations and rack: an admin's to change (Slurm's scontrol update
    NodeName=). With no change it answers the node as it is (`corral node ID`), to anyone. A
    category nothing reads is set as asked, with a warning in the answer."""
    if not (body.set or body.unset or body.rack is not None):
        # A look: a node that is gone too, which is the one an on-call asks about after it failed.
        shown = runtime.store.node_row(node_id)
        if shown is None:
            raise NotFound(f"no node {node_id}")
        return NodeChangedOut(**node_out(shown, runtime.store.running_counts(), time.time(), runtime).model_dump())
    require_admin(request, runtime, caller)
    row = runtime.store.set_node_attributes(node_id, body.set, body.unset, body.rack, time.time())
    runtime.wake()
    node = node_out(row, runtime.store.running_counts(), time.time(), runtime)
    warnings = []
    if categories.CATEGORY in body.set:
        blocking = runtime.config.policy.placement.blocking_categories
        warnings = categories.unread(categories.of(body.set), blocking)
    return NodeChangedOut(**node.model_dump(), warnings=warnings)


def node_out(row: dict[str, Any], running: dict[str, int], now: float, runtime: Runtime) -> NodeOut:
    end = row["gone_at"] or now
    observing_since = runtime.loop.observing_since if runtime.loop is not None else 0.0
    outlook = lifecycle.outlook(
        node_from_row(row), now, runtime.config.policy.lifecycle, observing_since, runtime.config.cloud.ping_interval
    )
    return NodeOut(
        id=row["id"],
        instance_id=row["instance_id"],
        instance_type=row["instance_type"],
        state=row["state"],
        created_at=row["created_at"],
        age=end - row["created_at"],
        idle_for=(now - row["state_changed_at"]) if row["state"] == NodeState.IDLE.value else None,
        running=running.get(row["id"], 0),
        price_per_hour=row["price_per_hour"],
        resources=ResourcesOut(
            vcpus=row["vcpus"], ram_mib=row["ram_mib"], scratch_mib=row["scratch_mib"], gpus=row["gpus"]
        ),
        used_vcpus=row["used_vcpus"],
        used_ram_mib=row["used_ram_mib"],
        last_ping_at=row["last_ping_at"],
        reason=row["reason"],
        outlook=outlook,
        attributes=dict(row["attributes"] or {}),
        rack=row["rack"] or "",
        dispatcher_id=row["dispatcher_id"],
        zone=row.get("zone"),
        market=row.get("market"),
        agent_version=row.get("agent_version"),
    )


@router.get("/events")
def list_events(
    runtime: UserRuntime,
    job: IdFilter = None,
    node: str | None = None,
    kind: str | None = None,
    limit: int = Query(200, ge=1, le=100_000),
    before: Annotated[
        int | None,
        BeforeValidator(plain_number),
        Query(ge=DB_INT_MIN, le=DB_INT_MAX, description="only events with a lower id: the page before"),
    ] = None,
    since: Annotated[float | None, Query(allow_inf_nan=False, description="only events at or after (epoch s)")] = None,
    until: Annotated[float | None, Query(allow_inf_nan=False, description="only events before (epoch s)")] = None,
    after: Annotated[
        int | None,
        BeforeValidator(plain_number),
        Query(
            ge=DB_INT_MIN,
            le=DB_INT_MAX,
            description="only events with a higher id, the oldest `limit` of them: a follower's next page",
        ),
    ] = None,
) -> list[EventOut]:
    """The newest `limit` events that match every filter given, oldest first. An older page: the
    same filters with `before` the first id of this one. A follower (a workflow engine watching its
    jobs) gives `after` the last id it has read: the oldest `limit` events after it, none skipped
    (event ids follow commit order); an empty page means nothing new yet."""
    if since is not None and until is not None and not since < until:
        raise HTTPException(422, [f"since ({since:.0f}) must be before until ({until:.0f})"])
    rows = runtime.store.list_events(job, node, kind, limit, before=before, since=since, until=until, after=after)
    return [EventOut(**row) for row in rows]


@router.get("/events/kinds")
def event_kinds(runtime: UserRuntime) -> list[str]:
    """The kinds of event recorded, sorted: what `kind` may name (or start)."""
    return runtime.store.event_kinds()


@router.get("/status")
def status(runtime: UserRuntime) -> StatusOut:
    store, now = runtime.store, time.time()
    fleet = store.fleet_counts()
    counts = store.counts()
    policy = runtime.config.policy
    # In front of Slurm corral boots nothing: no fleet limits to speak of.
    boot = policy.boot if runtime.config.executor == "agent" else BootSettings(max_instances=0)
    failing = [a for a in store.paired_node_attributes() if health.HEALTH in a]
    category = runtime.config.health_check.category
    paused = runtime.loop.boot_pause(now) if runtime.loop is not None else None
    return StatusOut(
        now=now,
        jobs={state.value: counts[state.value] for state in JobState if counts.get(state.value)},
        held=store.held_count(),
        oldest_wait=store.oldest_wait(now),
        nodes=fleet.by_state,
        fleet=[
            FleetTypeOut(instance_type=name, nodes=nodes, price_per_hour=cost)
            for name, (nodes, cost) in sorted(fleet.by_type.items())
        ],
        cost_per_hour=fleet.cost_per_hour,
        vcpus=fleet.vcpus,
        max_instances=boot.max_instances,
        max_vcpus=boot.max_vcpus,
        max_cost_per_hour=boot.max_cost_per_hour,
        type_max_instances={
            t.name: t.max_instances
            for t in runtime.config.instance_types
            if t.max_instances is not None and runtime.config.executor == "agent"
        },
        backoffs=[BackoffOut(**row) for row in store.backoffs_in_force(now)],
        boots_paused_until=paused[0] if paused else None,
        boots_paused_reason=paused[1] if paused else "",
        failing_checks=len(failing),
        failing_checks_in_service=sum(1 for a in failing if category not in categories.of(a)),
        dispatchers=[
            DispatcherOut(**row, stale=is_stale(row["last_heartbeat"], now, policy)) for row in store.dispatcher_rows()
        ],
        store_id=store.store_id(),
    )


@router.post("/backoffs/clear", responses=error_responses(409))
@names_its_caller
def clear_backoffs(body: ClearBackoffsBody, runtime: AdminRuntime, caller: CallerOf) -> ClearBackoffsOut:
    """An operator's "try again now": end the back-offs in force of the instance types named (or of
    every type, `all`) and forget their failed boots in a row, after fixing what failed them (the
    AMI, a quota, a security group). A pass is woken, so the next boot of the type can be made at
    once; the other dispatchers sharing the store see it at their next pass. An event
    `type.backoff_cleared` records each. A name that is no configured instance type (422) or a type
    that is not backed off (409) is refused, naming it, and nothing is changed."""
    if body.all:
        names = None
    else:
        configured = [t.name for t in runtime.config.instance_types]
        unknown = [name for name in dict.fromkeys(body.instance_types) if name not in configured]
        if unknown:
            types = ", ".join(configured) or "none"
            raise HTTPException(422, [f"{name}: not an instance type of corral's config ({types})" for name in unknown])
        names = body.instance_types
    try:
        cleared = runtime.store.clear_backoffs(names, time.time())
    except NotBackedOff as exc:
        raise HTTPException(409, str(exc)) from None
    if cleared:
        runtime.wake()
    return ClearBackoffsOut(cleared=[ClearedBackoffOut(**dataclasses.asdict(c)) for c in cleared])


@router.get("/usage")
def usage(
    runtime: UserRuntime,
    since: float = Query(description="start of the window, epoch seconds"),
    until: float | None = Query(None, description="end of the window, epoch seconds; default: now"),
    by: accounting.GroupBy = "user",
    limit: int = Query(1000, ge=1, le=100_000, description="rows, the largest cost first"),
) -> UsageOut:
    """What the fleet billed in [since, until), each instance type's part of it used by jobs, and
    each user's (tag's, job's) work, share of the bill and how much of the CPU and RAM it asked for it
    used (sreport / sacct / seff)."""
    now = time.time()
    end = now if until is None else until
    if not since < end:
        # A list, as every 422's detail is (error_responses): one line per bad value.
        raise HTTPException(422, [f"since ({since:g}) must be before until ({end:g})"])
    nodes, attempts = runtime.store.usage_spans(since, end)
    report = accounting.usage(nodes, attempts, since, end, now, by)
    return UsageOut(
        since=report.since,
        until=report.until,
        by=report.by,
        jobs=report.jobs,
        billed=report.billed,
        used=report.used,
        unattributed=report.unattributed,
        rows=[UsageRowOut.model_validate(row, from_attributes=True) for row in report.rows[:limit]],
        total=UsageRowOut.model_validate(report.total, from_attributes=True),
        types=[TypeUsageOut.model_validate(kind, from_attributes=True) for kind in report.types],
    )


@router.get("/share")
def share(runtime: UserRuntime) -> ShareOut:
    """Each user's fair-share standing (Slurm's sshare), from the runs of the last
    FORGOTTEN_AFTER_HALF_LIVES half-lives up to the last calc time: the usage a fair-share queue is
    ordered by. Users with usage, with shares set, or with open jobs."""
    queue = runtime.config.policy.placement.queue
    settings = queue.fairshare
    calc_time, usage = usage_as_of_calc_time(runtime)
    open_jobs = runtime.store.open_jobs_by_user()
    rows = []
    for row in fairshare.standing(open_jobs, usage, settings):
        counts = open_jobs.get(row.user, {})
        running = counts.get(JobState.CLAIMED.value, 0) + counts.get(JobState.RUNNING.value, 0)
        rows.append(
            ShareRowOut(**dataclasses.asdict(row), queued=counts.get(JobState.QUEUED.value, 0), running=running)
        )
    return ShareOut(order=queue.order, half_life=settings.half_life, calc_time=calc_time, rows=rows)


def usage_as_of_calc_time(runtime: UserRuntime) -> tuple[float, dict[str, float]]:
    """The last fair-share calc time, and each user's usage then: what the live loop's passes order
    the queue by. From the loop's own ledger, brought up to the calc time, where it keeps one (a
    fair-share or multifactor order); else from the runs of the last FORGOTTEN_AFTER_HALF_LIVES
    half-lives, as the loop's first pass reads them."""
    settings = runtime.config.policy.placement.queue.fairshare
    calc_time = fairshare.calc_time(time.time(), settings)
    kept = runtime.loop.usage_ledger if runtime.loop is not None else None
    start = kept if kept is not None and kept.as_of <= calc_time else fairshare.remembered_from(calc_time, settings)
    spans = runtime.store.attempt_spans(start.as_of, calc_time) if calc_time > start.as_of else []
    return calc_time, dict(fairshare.advance(start, spans, calc_time, settings).usage)


@router.get("/queue")
def queue_order(runtime: UserRuntime, limit: int = Query(1000, ge=1, le=100_000)) -> QueueOut:
    """Slurm's sprio with squeue's order: the queued jobs that are not held, in the order the next
    pass takes them (`corral.core.admission`), with the factors that order them. Jobs not eligible
    yet (a dependency, a start asked for) hold their place and say why they wait."""
    settings = runtime.config.policy.placement.queue
    jobs = sorted(runtime.store.queued_jobs(), key=Job.queue_key)
    reads_usage, multifactor_order = settings.reads_usage(), settings.order == "multifactor"
    calc_time, usage = usage_as_of_calc_time(runtime) if reads_usage else (time.time(), {})
    users = list(runtime.store.open_jobs_by_user()) if reads_usage else []
    ordered = admission.ordered(jobs, users, usage, calc_time, settings)[:limit]
    # (The rows shown are scored again, few as they are: the order took every queued job's score.)
    factors = multifactor.scored(ordered, users, usage, calc_time, settings) if multifactor_order else {}
    fair = reads_usage and not multifactor_order
    totals = fairshare.Totals.of(users, usage, settings.fairshare) if fair else None
    weights = settings.multifactor
    out = []
    for position, job in enumerate(ordered, start=1):
        factor = factors.get(job.id)
        share = totals.factor(job.user, usage, settings.fairshare) if totals else None
        out.append(
            QueueRowOut(
                position=position,
                id=job.id,
                array_job_id=job.array.array_job_id if job.array else None,
                array_task_id=job.array.task_id if job.array else None,
                name=job.name,
                user=job.user,
                priority=job.priority,
                submitted_at=job.submitted_at,
                age=factor.age if factor else None,
                fairshare=factor.fairshare if factor else share,
                score=factor.score if factor else None,
                wait_reason=job.wait_reason,
            )
        )
    return QueueOut(
        order=settings.order,
        calc_time=calc_time,
        weight_age=weights.weight_age if multifactor_order else None,
        weight_fairshare=weights.weight_fairshare if multifactor_order else None,
        max_age=weights.max_age if multifactor_order else None,
        queued=len(jobs),
        rows=out,
    )


@router.get("/retention")
def retention_preview(
    runtime: AdminRuntime,
    jobs_after: Annotated[float | None, Query(gt=0, allow_inf_nan=False)] = None,
    output_after: Annotated[float | None, Query(gt=0, allow_inf_nan=False)] = None,
    events_after: Annotated[float | None, Query(gt=0, allow_inf_nan=False)] = None,
) -> RetentionOut:
    """What the next retention sweep would delete, counted and nothing deleted: by the running
    corral's [retention], or, for a value given, by that (seconds), to try one before setting it."""
    configured = runtime.config.retention
    tried = {"jobs_after": jobs_after, "output_after": output_after, "events_after": events_after}
    settings = configured.model_copy(update={key: value for key, value in tried.items() if value is not None})
    now = time.time()

    def cut(after: float | None) -> float | None:
        return None if after is None else now - after

    counts = runtime.store.purgeable(cut(settings.jobs_after), cut(settings.events_after))
    outputs = None
    if settings.output_kept_for is not None:
        outputs = len(runtime.store.output_to_remove(runtime.logs.job_ids(), now - settings.output_kept_for))
    return RetentionOut(
        configured=configured.enabled(),
        interval=settings.interval,
        jobs_after=settings.jobs_after,
        output_after=settings.output_after,
        events_after=settings.events_after,
        jobs_ended=None if settings.jobs_after is None else counts.jobs_ended,
        jobs=None if settings.jobs_after is None else counts.jobs,
        outputs=outputs,
        events=None if settings.events_after is None else counts.events,
    )


@router.get("/notify")
def notify_status(runtime: AdminRuntime) -> NotifyStatusOut:
    """Where the notifier is in the event log, against the newest event; the rules in force; which
    subjects each rule is quiet for (rearm) and how many events a threshold rule has counted."""
    rules = runtime.config.notify
    names = rule_names(rules)
    cursor = runtime.store.notify_cursor_status()
    newest = runtime.store.last_event_id()
    now = time.time()
    state = NotifyState.from_json(cursor["state"] if cursor else None)
    rearm = {name: rule.rearm for name, rule in zip(names, rules, strict=True)}
    quiet = [
        QuietOut(
            rule=rule, subject=subject, fired_at=a.fired_at, until=a.fired_at + rearm[rule], suppressed=a.suppressed
        )
        for rule, subjects in sorted(state.armed.items())
        if rule in rearm  # a rule since removed from the config keeps no one quiet
        for subject, a in sorted(subjects.items())
        if a.fired_at + rearm[rule] > now or a.suppressed
    ]
    windows = {name: rule.window for name, rule in zip(names, rules, strict=True) if rule.threshold}
    counts = {
        name: sum(1 for at in state.recent.get(name, []) if at > now - window) for name, window in windows.items()
    }
    cursor_state = cursor["state"] if cursor else {}
    waiting = cursor_state.get(RETRY_KEY, [])
    retries = [r for data in waiting if (r := Retry.from_json(data, names))]
    retrying = [
        RetryOut(
            rule=r.note.rule,
            event_id=r.note.event.id,
            kind=r.note.event.kind,
            job_id=r.note.event.job_id,
            node_id=r.note.event.node_id,
            tries=r.tries,
            due=r.due,
            error=r.error,
        )
        for r in sorted(retries, key=lambda r: r.due)
    ]
    return NotifyStatusOut(
        retrying=retrying,
        rules=[_rule_out(name, rule) for name, rule in zip(names, rules, strict=True)],
        last_event_id=cursor["last_event_id"] if cursor else None,
        moved_at=cursor["updated_at"] if cursor else None,
        newest_event_id=newest,
        waiting=cursor["waiting"] if cursor else None,
        quiet=quiet,
        threshold_counts=counts,
        sending=len(cursor_state.get(SENDING_KEY, [])),
    )


@router.post("/notify/skip")
@names_its_caller
def notify_skip(runtime: AdminRuntime, caller: CallerOf, body: NotifySkipBody | None = None) -> NotifySkipOut:
    """Move the notifier's cursor: to the newest event (a backlog nobody wants paged about is
    dropped), or to `to`, which may be back (the events after it are notified again: what a
    webhook that was down never got). An event `notify.moved` records it."""
    newest = runtime.store.last_event_id()
    to = newest if body is None or body.to is None else body.to
    if to > newest:
        raise HTTPException(422, [f"to: there is no event {to} yet (the newest is {newest})"])
    was = runtime.store.move_notify_cursor(to, time.time())
    runtime.wake()
    return NotifySkipOut(was=was, to=to)


def _rule_out(name: str, rule: NotifyRule) -> NotifyRuleOut:
    if rule.command is not None:
        action = f"command {rule.command[0]}"
    elif rule.webhook is not None:
        action = f"webhook {shown_url(rule.webhook)}"
    else:
        action = "log"
    return NotifyRuleOut(
        name=name,
        on=list(rule.on),
        action=action,
        rearm=rule.rearm,
        # A threshold rule's subject is the rule as a whole (corral.core.notify), whatever rearm_per says.
        rearm_per="rule" if rule.threshold is not None else rule.rearm_per,
        threshold=rule.threshold,
        window=rule.window,
    )


# ---- users and their tokens ------------------------------------------------------------------


@router.get("/whoami")
def whoami(caller: CallerOf) -> UserOut:
    """Who the request's token is: a user, or the operator (the data directory's token, no name)."""
    return UserOut(name=caller.name, admin=caller.admin)


@router.get("/users")
def list_users(runtime: AdminRuntime) -> list[UserOut]:
    return [UserOut(**row) for row in runtime.store.user_rows()]


@router.post("/users", status_code=201, responses=error_responses(409))
@names_its_caller
def add_user(body: UserBody, runtime: AdminRuntime, caller: CallerOf) -> NewUserOut:
    """A user with a token of their own, answered once (only its hash is kept). An event `user.added`."""
    now = time.time()
    try:
        token = runtime.store.add_user(body.name, body.admin, now)
    except UserExists as exc:
        raise HTTPException(409, str(exc)) from None
    shared = runtime.config.jobs_reach_the_data_directory()
    return NewUserOut(
        name=body.name, admin=body.admin, created_at=now, token=token, warnings=[shared] if shared else []
    )


@router.delete("/users/{name}")
@names_its_caller
def remove_user(name: str, runtime: AdminRuntime, caller: CallerOf) -> UserOut:
    """Remove a user: their token is refused from the next request on; their jobs stay, and run.
    An event `user.removed`."""
    runtime.store.remove_user(name, time.time())
    return UserOut(name=name)
