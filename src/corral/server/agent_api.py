"""The agent protocol: pair with a one-time boot token, ping, long-poll for work, report start,
output and exit. See docs/agent.md."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import time
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request

from corral import AGENT_KNOWS, AGENT_PROTOCOLS_SPOKEN, __version__
from corral.core import capacity, categories, drain, health, listing, retry
from corral.core.model import GiB, Job, NodeState, Resources
from corral.core.settings import DispatchSettings
from corral.core.signals import parse_job_signal
from corral.core.snapshot import JobOutcome
from corral.server.app import Runtime
from corral.server.deps import AgentNode, AnyRuntime
from corral.server.logstore import LogGap, Stream
from corral.server.models import (
    AgentVersionIn,
    ContainersOut,
    FinishedBody,
    HealthCheckOut,
    PairBody,
    PairResult,
    PathId,
    PingBody,
    PingResult,
    ResourcesOut,
    ResumeBody,
    ResumeResult,
    SignalOut,
    SignalRequestOut,
    StartedBody,
    WorkItemOut,
    WorkOut,
    error_responses,
)
from corral.store import AttemptUsage, NotFound
from corral.store.store import WorkItem

router = APIRouter(prefix="/api/agent", responses=error_responses(400, 401, 403, 404, 409, 413, 422))
log = logging.getLogger("corral.server")

AttemptId = PathId


def refuse_unspoken_protocol(body: AgentVersionIn) -> None:
    """An agent of a corral whose agent protocol this server does not speak is refused (409) with
    both versions, before it takes the node: it would misread the work it is given."""
    if body.protocol in AGENT_PROTOCOLS_SPOKEN:
        return
    spoken = ", ".join(str(p) for p in AGENT_PROTOCOLS_SPOKEN)
    raise HTTPException(
        409,
        f"this agent (corral {body.agent_version or 'unknown'}) speaks agent protocol {body.protocol}; this server"
        f" (corral {__version__}) speaks agent protocol {spoken}: run an agent of a corral that speaks it"
        " (docs/agent.md, Versions)",
    )


@router.post("/pair")
def pair(body: PairBody, runtime: AnyRuntime) -> PairResult:
    refuse_unspoken_protocol(body)
    capacity = Resources(body.capacity.vcpus, body.capacity.ram_mib, body.capacity.scratch_mib, body.capacity.gpus)
    now = time.time()
    secret = runtime.store.pair_node(body.node_id, body.boot_token, capacity, body.hostname, now, body.agent_version)
    if secret is None:
        raise HTTPException(403, "unknown node, or boot token wrong or already used")
    if body.work_dir_free_mib is not None and body.work_dir_free_mib < capacity.scratch_mib:
        warn_scratch_short(runtime, body.node_id, capacity.scratch_mib, body.work_dir_free_mib, now)
    runtime.wake()
    return PairResult(node_id=body.node_id, secret=secret, **node_settings(runtime))


@router.post("/resume")
def resume(body: ResumeBody, node: AgentNode, runtime: AnyRuntime) -> ResumeResult:
    """The agent of a paired node started again (it died, the OOM killer took it, an upgrade
    restarted it) and comes back with the secret it saved at pairing, where a boot token would be
    refused: the node stays. The runs it was carrying that the new agent does not run on died with
    the old agent (or the new one stopped them) and end as a lost node's do, under the job's
    `on_node_failure`: Slurm treats a batch job its restarted slurmd no longer has as a node
    failure, and this too is a run lost to the infrastructure, counted as a temporary failure (a
    job that kills its own agent is not requeued for ever)."""
    node_id = node["id"]
    if body.node_id != node_id:
        raise HTTPException(403, f"this secret is node {node_id}'s, not node {body.node_id}'s")
    refuse_unspoken_protocol(body)
    now = time.time()
    settings = runtime.config.policy.retry
    running = ", ".join(str(a) for a in body.running)
    agent = f"agent (corral {body.agent_version or 'unknown'}) restarted on {body.hostname or '?'} (pid {body.pid})"
    message = f"{agent}, resumed with its saved credentials" + (f"; it runs on attempts {running}" if running else "")

    def lost(job: Job, attempt_id: int) -> JobOutcome:
        said = f"the agent on node {node_id} restarted; attempt {attempt_id} was lost"
        return retry.after_node_failure(job, now, settings, node_id, (attempt_id,), said)

    ended = runtime.store.resume_node(node_id, body.running, message, now, lost, body.agent_version)
    log.warning("node %s: %s; attempts lost: %s", node_id, message, ended or "none", extra={"node_id": node_id})
    runtime.wake()
    stored, stderr_stored = {}, {}
    for attempt_id in body.running:
        row = runtime.store.attempt_row(attempt_id)
        if row is not None and node_id in row["node_ids"]:
            stored[attempt_id] = runtime.logs.size(row["job_id"], attempt_id)
            # (Said of every run: 0 for one whose job keeps no stderr apart, which the agent ignores.)
            stderr_stored[attempt_id] = runtime.logs.size(row["job_id"], attempt_id, "stderr")
    return ResumeResult(
        node_id=node_id, lost=ended, output_stored=stored, stderr_stored=stderr_stored, **node_settings(runtime)
    )


def node_settings(runtime: Runtime) -> dict[str, Any]:
    """What pairing and resuming tell an agent of how its node works: ping interval, health
    check, container engine."""
    check, containers = runtime.config.health_check, runtime.config.containers
    return {
        "ping_interval": runtime.config.cloud.ping_interval,
        "health_check": HealthCheckOut(command=check.command, interval=check.interval, timeout=check.timeout)
        if check.command
        else None,
        "containers": ContainersOut(program=containers.program, run_args=containers.run_args),
    }


def warn_scratch_short(runtime: Runtime, node_id: str, promised_mib: int, free_mib: int, now: float) -> None:
    """A node whose disk has less than the scratch it reports (its instance type's) is said so, once,
    at pairing. Placement still counts on the promise: this is for the operator (an AMI whose root
    file system was not grown, an instance-storage disk not mounted at the work dir)."""
    row = runtime.store.node_row(node_id)
    instance_type = row["instance_type"] if row else "?"
    message = (
        f"node {node_id} ({instance_type}) is promised {promised_mib / GiB:.1f} GiB of scratch but its agent's work"
        f" dir has {free_mib / GiB:.1f} GiB free: jobs placed by their scratch may run out of disk"
    )
    log.warning("%s", message)
    runtime.store.add_event(now, "node.scratch_short", message, node_id=node_id)


def interrupted(runtime: Runtime, node_id: str, instance_type: str, action: str, when: str, now: float) -> None:
    """The cloud's notice that it takes the node back (a spot interruption, two minutes ahead): the
    node is drained at once, as `corral node N drain=true` would (no new work; what runs may end in
    time), and marked with the notice, which says why it leaves service. Its instance type is backed
    off for `policy.boot.interruption_backoff` (corral.core.capacity.record_interruption, which the
    simulator calls too): the cloud is short of its spot capacity."""
    notice = f"{action} at {when}"
    message = f"the cloud takes it back: {notice} (spot interruption notice)"
    log.warning("node %s: %s", node_id, message, extra={"node_id": node_id})
    runtime.store.add_event(now, "node.interruption", message, node_id=node_id)
    with contextlib.suppress(NotFound):  # (gone meanwhile: nothing to drain)
        runtime.store.set_node_attributes(node_id, drain.interruption(notice), [], None, now)
    # The store keeps a longer back-off already recorded, so this pass's table starts empty.
    until = capacity.record_interruption({}, instance_type, now, runtime.config.policy.boot)
    if until is not None:
        reason = capacity.interruption_message(instance_type, node_id, notice, until, now)
        log.warning("%s: %s", instance_type, reason)
        runtime.store.set_unavailable(instance_type, until, reason, now, "capacity.interruption", node_id=node_id)
    runtime.wake()


def checked(runtime: Runtime, node: dict[str, Any], ok: bool, message: str, now: float) -> None:
    """The agent's health check (corral.core.health): a failure puts the node in the configured
    category while few enough nodes fail theirs, a pass after one takes it back; each change is an
    event."""
    attributes = node["attributes"] or {}
    check = runtime.config.health_check
    failing = paired = 0
    may_act = True
    if not ok and check.category not in categories.of(attributes):
        failing, paired = runtime.health_tally.count(runtime.store, now)
        failing += health.HEALTH not in attributes  # this node, not counted yet
        may_act = health.may_take_out(failing, paired, check.max_unhealthy)
    found = health.change(attributes, ok, message, check.category, may_act)
    if found is None:
        return
    setting, unsetting = found
    said = f"health check failed: {message}" if not ok else "health check passes again"
    if not may_act:
        said += (
            f"; not taken out of service: {failing} of {paired} nodes fail their check, more than"
            f" health_check.max_unhealthy = {check.max_unhealthy} lets go (the check, or something the"
            " nodes share, is likelier at fault)"
        )
    log.log(logging.INFO if ok else logging.WARNING, "node %s: %s", node["id"], said, extra={"node_id": node["id"]})
    runtime.store.add_event(now, "node.health_check", said, node_id=node["id"])
    with contextlib.suppress(NotFound):  # (gone meanwhile)
        runtime.store.set_node_attributes(node["id"], setting, unsetting, None, now)
    if health.HEALTH in setting and health.HEALTH not in attributes:
        runtime.health_tally.changed(+1)
    elif health.HEALTH in unsetting:
        runtime.health_tally.changed(-1)
    runtime.wake()


def finish_attempt(
    runtime: Runtime,
    node_id: str,
    attempt_id: int,
    exit_code: int,
    finished_at: float | None,
    timed_out: bool = False,
    reason: str = "",
    exit_signal: int | None = None,
    cpu_seconds: float | None = None,
    max_rss_mib: int | None = None,
) -> None:
    """Record an exit, at the time the agent saw it, and let the core say what it means for the
    job (complete, retry, failed; TIMEOUT when the agent ended it at its time limit). `exit_signal`:
    the signal that killed the command, which an agent of an older corral does not send (None: its
    128+N reads as an exit, as it always did). `cpu_seconds` and `max_rss_mib`: what the run used,
    None where not known (an older agent sends neither); kept also for a run corral had already
    ended (a cancel, a time limit), whose exit is not recorded."""

    def outcome_of(job: Job) -> JobOutcome:
        if timed_out:
            said = f"ended by the agent on {node_id}, the server not having ended it in time"
            return retry.after_timeout(job, job.time_limit, (attempt_id,), said)
        return retry.after_exit(job, exit_code, (attempt_id,), reason, exit_signal)

    used = AttemptUsage(cpu_seconds, max_rss_mib)
    if runtime.store.finish_attempt(
        attempt_id, node_id, exit_code, time.time(), outcome_of, finished_at, exit_signal, used=used
    ):
        runtime.forget_attempt(attempt_id)
        runtime.wake()


@router.post("/ping")
def ping(body: PingBody, node: AgentNode, runtime: AnyRuntime) -> PingResult:
    node_id = node["id"]
    now = time.time()
    if node["state"] in (NodeState.SHUTTING_DOWN.value, NodeState.GONE.value):
        with runtime.unlisted_lock:
            runtime.unlisted.pop(node_id, None)  # (its attempts were ended with it)
        return PingResult(kill=list(body.running), ack=[f.attempt_id for f in body.finished], shutdown=True)
    runtime.store.record_ping(node_id, Resources(body.used.vcpus, body.used.ram_mib, 0, 0), now)
    if body.interruption is not None and drain.INTERRUPTION not in (node["attributes"] or {}):
        interrupted(runtime, node_id, node["instance_type"], body.interruption.action, body.interruption.time, now)
    if body.health is not None:
        checked(runtime, node, body.health.ok, body.health.message, now)
    acked = []
    for finished in body.finished:
        finish_attempt(
            runtime,
            node_id,
            finished.attempt_id,
            finished.exit_code,
            finished.finished_at,
            finished.timed_out,
            finished.reason,
            finished.exit_signal,
            finished.cpu_seconds,
            finished.max_rss_mib,
        )
        acked.append(finished.attempt_id)
    for attempt_id in body.running:
        # A start report lost to a server restart: the agent's word that it runs is enough.
        runtime.store.attempt_started(attempt_id, node_id, 0, now)
    # Before the signals still to send are read: one said sent is not handed out again.
    runtime.store.signals_sent({s.id: s.to for s in body.signalled}, now, node_id)
    here = runtime.store.attempts_on_node(node_id)
    wanted = here.wanted(body.running)
    lost = end_unlisted(runtime, node_id, here.running, {*body.running, *acked}, now)
    killed = [a for a in body.running if a not in wanted] + lost
    return PingResult(
        # (A lost attempt too: should the agent still hold it somewhere, it must not run on.)
        kill=killed,
        ack=acked,
        shutdown=False,
        time_limits={a: runtime.config.policy.dispatch.enforced_limit(limit) for a, limit in wanted.items()},
        # In every answer until the agent says it sent each (at least once: docs/agent.md, Signals).
        signals=[
            SignalRequestOut(id=r.id, attempt_id=r.attempt_id, number=r.number, main_only=r.main_only)
            for r in here.signals
            if r.attempt_id not in killed
        ],
    )


def end_unlisted(runtime: Runtime, node_id: str, running: list[int], listed: set[int], now: float) -> list[int]:
    """The node's running attempts that its agent has stopped listing (neither running nor finished)
    for long enough (corral.core.listing) end as a lost node's do, under the job's
    `on_node_failure`, a temporary failure: the agent lost track of them, and no exit will ever
    come. Returns those ended."""
    with runtime.unlisted_lock:
        unlisted = listing.tally(runtime.unlisted.get(node_id, {}), running, listed, now)
        if unlisted:
            runtime.unlisted[node_id] = unlisted
        else:
            runtime.unlisted.pop(node_id, None)
    judged = listing.lost(unlisted, now, runtime.config.cloud.ping_interval)
    if not judged:
        return []
    settings = runtime.config.policy.retry

    def outcome_of(job: Job, attempt_id: int) -> JobOutcome:
        said = listing.loss(node_id, attempt_id, unlisted[attempt_id], now)
        return retry.after_node_failure(job, now, settings, node_id, (attempt_id,), said)

    def message_of(attempt_id: int) -> str:
        return listing.loss(node_id, attempt_id, unlisted[attempt_id], now)

    ended = runtime.store.end_unlisted_attempts(node_id, judged, now, outcome_of, message_of)
    with runtime.unlisted_lock:
        for attempt_id in judged:
            runtime.unlisted.get(node_id, {}).pop(attempt_id, None)
    if ended:
        said = "node %s: its agent lost attempts %s; they end as on a lost node"
        log.warning(said, node_id, ended, extra={"node_id": node_id})
        runtime.wake()
    return ended


def unknown_fields(item: WorkItem) -> list[str]:
    """The fields of AGENT_KNOWS that the work item uses (set, and not to false: a job that keeps
    its stderr in its output runs as on any agent)."""
    return [name for name in AGENT_KNOWS if getattr(item, name) not in (None, False)]


def work_it_knows(runtime: Runtime, node: dict[str, Any], knows: set[str]) -> list[WorkItem]:
    """The node's work that its agent can run as the jobs ask. An attempt using a field that the
    agent did not say it knows (an agent of an older corral, which would ignore it: run a --chdir job
    in its own directory) is not given out: it ends as a temporary failure of the node's, naming the
    field, and the job is retried with back-off, on a node whose agent knows it if there is one."""
    node_id = node["id"]
    items = runtime.store.work_for(node_id)
    runnable = []
    now = time.time()
    for item in items:
        missing = [name for name in unknown_fields(item) if name not in knows]
        if not missing:
            runnable.append(item)
            continue
        said = (
            f"the agent on node {node_id} (corral {node.get('agent_version') or 'unknown'}) does not know"
            f" {', '.join(missing)}, which the job uses and which it would ignore: upgrade the node's agent"
            " (docs/agent.md, Versions)"
        )

        def outcome_of(job: Job, said: str = said, attempt_id: int = item.attempt_id) -> JobOutcome:
            return retry.after_temp_failure(job, now, runtime.config.policy.retry, said, (attempt_id,))

        if runtime.store.end_unstartable(item.attempt_id, node_id, now, outcome_of):
            log.warning("job %s: %s", item.job_id, said, extra={"node_id": node_id, "job_id": item.job_id})
            runtime.wake()
    return runnable


@router.get("/work")
async def work(
    node: AgentNode,
    runtime: AnyRuntime,
    wait: float = Query(20.0, ge=0.0, le=60.0),
    knows: list[str] = Query([], max_length=100),
) -> WorkOut:
    """`knows`: the fields of AGENT_KNOWS that the agent acts on (none: an agent of a corral before them)."""
    node_id = node["id"]
    event = runtime.node_event(node_id)
    deadline = asyncio.get_running_loop().time() + wait
    known = set(knows)
    while True:
        event.clear()
        items = await asyncio.to_thread(work_it_knows, runtime, node, known)
        remaining = deadline - asyncio.get_running_loop().time()
        if items or remaining <= 0 or runtime.stopping:
            break
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout=remaining)
    for item in items:
        runtime.remember_attempt(item.attempt_id, item.job_id, frozenset(item.node_ids))
    return WorkOut(
        attempts=[
            WorkItemOut(
                attempt_id=i.attempt_id,
                job_id=i.job_id,
                command=i.command,
                image=i.image,
                chdir=i.chdir,
                separate_stderr=i.separate_stderr,
                script=i.script,
                signal=signal_out(i.signal, runtime.config.policy.dispatch),
                env=i.env,
                node_ids=i.node_ids,
                resources=ResourcesOut(
                    vcpus=i.resources.vcpus,
                    ram_mib=i.resources.ram_mib,
                    scratch_mib=i.resources.scratch_mib,
                    gpus=i.resources.gpus,
                ),
                time_limit=runtime.config.policy.dispatch.enforced_limit(i.time_limit),
            )
            for i in items
        ]
    )


def signal_out(stored: str | None, dispatch: DispatchSettings) -> SignalOut | None:
    """A job's --signal as its agent acts on it: its TIME counted back from the work item's
    time_limit, which holds the grace (the signal goes TIME before the job's own limit, as Slurm
    sends it before the end time, not before OverTimeLimit's kill)."""
    if not stored:
        return None
    job_signal = parse_job_signal(stored)
    return SignalOut(
        number=job_signal.number,
        before=job_signal.before + (dispatch.time_limit_grace or 0.0),
        main_only=job_signal.main_only,
    )


@router.post("/attempts/{attempt_id}/started")
def started(attempt_id: AttemptId, body: StartedBody, node: AgentNode, runtime: AnyRuntime) -> dict[str, bool]:
    """The agent started an attempt, at the time it gives (not later than now: a clock ahead of the
    server's does not make a run start in the future): a report held back while the server was down
    does not shorten the run that time limits and usage count."""
    now = time.time()
    at = now if body.started_at is None else min(now, body.started_at)
    if not runtime.store.attempt_started(attempt_id, node["id"], body.pid, at):
        raise HTTPException(409, "attempt no longer wanted")
    return {"ok": True}


@router.post("/attempts/{attempt_id}/log", responses=error_responses(507))
async def log_chunk(
    attempt_id: AttemptId,
    request: Request,
    node: AgentNode,
    runtime: AnyRuntime,
    offset: int = Query(0, ge=0),
    stream: Stream = Query("output", description="output, or stderr for a job that keeps it apart"),
) -> dict[str, bool]:
    data = await request.body()
    known = runtime.attempt_jobs.get(attempt_id)
    if known is None:
        row = await asyncio.to_thread(runtime.store.attempt_row, attempt_id)
        if row is None:
            raise HTTPException(404, f"no attempt {attempt_id} on this node")
        known = (row["job_id"], frozenset(row["node_ids"]))
        runtime.remember_attempt(attempt_id, *known)
    job_id, node_ids = known
    if node["id"] not in node_ids:  # a node writes the output of its own attempts only
        raise HTTPException(404, f"no attempt {attempt_id} on this node")
    try:
        cut = await asyncio.to_thread(runtime.logs.write, job_id, attempt_id, offset, data, stream)
    except LogGap as exc:
        raise HTTPException(409, str(exc)) from None
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        # The agent sends it again (any 5xx is a server away to it), from the same offset, over
        # whatever part of this chunk was written; a run that has ended reports its end without the
        # rest after half a minute (corral.agent.agent.LOG_STUCK_AFTER). One line now and then, not
        # a traceback per chunk of every agent.
        said = (
            f"job output cannot be stored: {exc.strerror} ({runtime.logs.root}); agents send it again, and"
            " report a run's end without the rest of its output after half a minute"
        )
        if runtime.output_refusals.due():
            log.error("%s (logged once per %gs)", said, runtime.output_refusals.every)
        raise HTTPException(507, said) from None
    if cut:
        log.warning(
            "job %s: attempt %s's %s reached server.max_output (%s bytes): the rest is dropped",
            job_id,
            attempt_id,
            stream,
            runtime.logs.max_bytes,
        )
    return {"ok": True}


@router.post("/attempts/{attempt_id}/finished")
def finished(attempt_id: AttemptId, body: FinishedBody, node: AgentNode, runtime: AnyRuntime) -> dict[str, bool]:
    finish_attempt(
        runtime,
        node["id"],
        attempt_id,
        body.exit_code,
        body.finished_at,
        body.timed_out,
        body.reason,
        body.exit_signal,
        body.cpu_seconds,
        body.max_rss_mib,
    )
    return {"ok": True}
