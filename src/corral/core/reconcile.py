"""One reconcile pass: (snapshot, now, settings) -> every decision of the pass.

This is the single place where the policies are combined. The live control loop and the simulator
both call `plan_pass`; neither holds any decision logic of its own.

Order of a pass:
1. claims of dispatchers that stopped heartbeating are released (TempFail);
2. nodes whose agent went silent are marked down; their attempts are lost (TempFail);
3. attempts assigned but never started within `start_timeout` are lost (TempFail);
4. jobs with priority 0 or a cancel request are cancelled;
5. queued jobs are placed on running nodes;
6. the boot planner boots instances for what is left, or says why a job waits;
7. the lifecycle matrix (seed 000) drains and shuts down nodes;
8. idle / busy marks follow from the work on each node.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from corral.core import lifecycle, retry
from corral.core.model import ZERO, Attempt, AttemptState, Job, JobState, Node, NodeState, Resources
from corral.core.planner import plan_boots
from corral.core.settings import PolicySettings
from corral.core.snapshot import (
    Annotation,
    Decisions,
    JobOutcome,
    NodeAction,
    NodeDecision,
    NodeMark,
    Placement,
    PlacementResult,
    Snapshot,
)

SCHEDULABLE = (NodeState.IDLE, NodeState.BUSY)

# A placer takes the snapshot, the queue-ordered eligible jobs, the schedulable nodes with their
# free room (capacity less active attempts' requests), and `now`; it returns placements and, for
# each job it could not place, the reason. It may update `free` in place.
Placer = Callable[[Snapshot, Sequence[Job], Sequence[Node], dict[str, Resources], float], PlacementResult]


def plan_pass(snapshot: Snapshot, now: float, settings: PolicySettings, placer: Placer | None = None) -> Decisions:
    decisions = Decisions()
    jobs = {job.id: job for job in snapshot.jobs}
    attempts_by_job: dict[int, list[Attempt]] = defaultdict(list)
    for attempt in snapshot.attempts:
        if attempt.state.active:
            attempts_by_job[attempt.job_id].append(attempt)
    ended: set[int] = set()  # jobs whose fate this pass already decided

    def end_attempts(job: Job, reason: str) -> None:
        if job.id in ended:
            return
        ids = tuple(a.id for a in attempts_by_job.get(job.id, ()))
        decisions.job_outcomes.append(retry.after_temp_failure(job, now, settings.retry, reason, ids))
        ended.add(job.id)

    # 1. Dispatchers that stopped pinging: their claims are released as temporary failures.
    stale_dispatchers = {
        d.id
        for d in snapshot.dispatchers
        if d.id != snapshot.dispatcher_id
        and now - max(d.last_heartbeat, snapshot.observing_since) > settings.dispatch.dispatcher_stale
    }
    for job in snapshot.jobs:
        if job.claimed_by in stale_dispatchers and job.state in (JobState.CLAIMED, JobState.RUNNING):
            end_attempts(job, f"dispatcher {job.claimed_by} stopped heartbeating")

    # 2. Nodes gone silent: down, and their work is lost.
    nodes = {node.id: node for node in snapshot.nodes}
    down_now: set[str] = set()
    for node in snapshot.nodes:
        if node.state in SCHEDULABLE + (NodeState.DRAINING,) and lifecycle.ping_is_stale(
            node, now, settings.lifecycle, snapshot.observing_since
        ):
            down_now.add(node.id)
            decisions.node_marks.append(
                NodeMark(node.id, NodeState.DOWN, f"no ping for more than {settings.lifecycle.ping_stale:g}s")
            )
    for attempt in snapshot.attempts:
        if not attempt.state.active or attempt.job_id not in jobs:
            continue
        lost_node = next(
            (n for n in attempt.node_ids if n in down_now or n not in nodes or nodes[n].state is NodeState.DOWN),
            None,
        )
        if lost_node is not None:
            end_attempts(jobs[attempt.job_id], f"node {lost_node} lost")
        elif (
            attempt.state is AttemptState.ASSIGNED
            and now - max(attempt.assigned_at, snapshot.observing_since) > settings.dispatch.start_timeout
        ):
            end_attempts(jobs[attempt.job_id], f"not started on {attempt.node_ids[0]} within the start timeout")

    # 4. Cancellation: priority 0 or an explicit request.
    for job in snapshot.jobs:
        if job.id in ended or not (job.priority == 0 or job.cancel_requested):
            continue
        ids = tuple(a.id for a in attempts_by_job.get(job.id, ()))
        reason = "priority set to 0" if job.priority == 0 else "cancelled by request"
        decisions.job_outcomes.append(JobOutcome(job.id, JobState.CANCELLED, reason, ids))
        ended.add(job.id)

    # Room on each schedulable node: capacity less what active attempts hold.
    allocated: dict[str, Resources] = defaultdict(lambda: ZERO)
    work_on: dict[str, int] = defaultdict(int)
    for attempt in snapshot.attempts:
        if attempt.state.active and attempt.job_id not in ended:
            for node_id in attempt.node_ids:
                allocated[node_id] = allocated[node_id] + attempt.resources
                work_on[node_id] += 1
    schedulable = [n for n in snapshot.nodes if n.state in SCHEDULABLE and n.id not in down_now]
    free = {n.id: n.capacity - allocated[n.id] for n in schedulable}

    # 5. Placement, in queue order.
    queue = queue_order(
        [
            job
            for job in snapshot.jobs
            if job.state is JobState.QUEUED and job.id not in ended and job.eligible_at() <= now
        ]
    )
    result = (placer or first_fit)(snapshot, queue, schedulable, free, now)
    reasons = result.reasons
    decisions.placements.extend(result.placements)
    decisions.explanations.update(result.details)
    placed_ids = {p.job_id for p in result.placements}
    for p in result.placements:
        for node_id in p.node_ids:
            work_on[node_id] += 1
    waiting = [job for job in queue if job.id not in placed_ids]

    # 6. Boots for what is left.
    booting = [
        (n, n.capacity)
        for n in snapshot.nodes
        if n.state is NodeState.BOOTING
        and lifecycle.boot_grace(n, now, settings.lifecycle) is lifecycle.BootGrace.BOOT_WAIT
    ]
    live = sum(1 for n in snapshot.nodes if n.state.live and n.id not in down_now)
    plan = plan_boots(waiting, booting, snapshot.instance_types, live, snapshot.unavailable_types, now, settings.boot)
    decisions.boots.extend(plan.boots)
    planner_reason = {a.job_id: a for a in plan.annotations}
    for job in waiting:
        note = planner_reason.get(job.id) or Annotation(job.id, reasons.get(job.id, "waiting for resources"))
        if note.wait_reason != job.wait_reason or note.unplaceable != job.unplaceable:
            decisions.annotations.append(note)
    for job in snapshot.jobs:
        if job.state is JobState.QUEUED and job.id not in ended and job.eligible_at() > now:
            why = "not before a requested start time" if (job.not_before or 0) >= (job.retry_at or 0) else "back-off"
            if job.wait_reason != why:
                decisions.annotations.append(Annotation(job.id, why))

    # 7. Lifecycle matrix; 8. idle/busy marks.
    idle_count = sum(1 for n in schedulable if work_on[n.id] == 0)
    live_after = live + len(plan.boots)
    for node in snapshot.nodes:
        if not node.state.live:
            continue
        has_work = work_on[node.id] > 0
        state = lifecycle.state_tuple(node, now, settings.lifecycle, snapshot.observing_since, has_work)
        if node.id not in down_now:
            if node.state is NodeState.IDLE and has_work:
                decisions.node_marks.append(NodeMark(node.id, NodeState.BUSY))
            elif node.state is NodeState.BUSY and not has_work:
                decisions.node_marks.append(NodeMark(node.id, NodeState.IDLE))
        action = lifecycle.decide(state)
        if action is NodeAction.START_DRAIN:
            if live_after <= settings.lifecycle.min_instances or idle_count <= 0:
                continue
            idle_count -= 1
            live_after -= 1
        if action is not None:
            decisions.node_decisions.append(NodeDecision(node.id, action, lifecycle.describe(state)))
    return decisions


def queue_order(jobs: list[Job]) -> list[Job]:
    """Highest priority first, then oldest submission, then lowest id."""
    return sorted(jobs, key=lambda job: (-job.priority, job.submitted_at, job.id))


def first_fit(
    snapshot: Snapshot, queue: Sequence[Job], nodes: Sequence[Node], free: dict[str, Resources], now: float
) -> PlacementResult:
    """The minimal placer: best fit by RAM left over, `node_count` distinct nodes per job.
    The placement engine (corral.placement) replaces it with filters and scorers."""
    placements: list[Placement] = []
    reasons: dict[int, str] = {}
    for job in queue:
        fitting = [n for n in nodes if job.resources.fits_in(free[n.id])]
        if len(fitting) < job.node_count:
            reasons[job.id] = (
                f"no running node has room for {job.resources.describe()}"
                if job.node_count == 1
                else f"fewer than {job.node_count} running nodes have room for {job.resources.describe()}"
            )
            continue
        fitting.sort(key=lambda n: (free[n.id].ram_mib - job.resources.ram_mib, free[n.id].vcpus, n.id))
        chosen = fitting[: job.node_count]
        for n in chosen:
            free[n.id] = free[n.id] - job.resources
        placements.append(Placement(job.id, tuple(n.id for n in chosen)))
    return PlacementResult(placements, reasons)
