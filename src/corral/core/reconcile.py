"""One reconcile pass: (snapshot, now, settings) -> every decision of the pass.

This is the single place where the policies are combined. The live control loop and the simulator
both call `plan_pass`; neither holds any decision logic of its own.

Order of a pass:
1. claims of dispatchers that stopped heartbeating are released (TempFail);
2. nodes whose agent went silent, and nodes an operator drained `now` (corral.core.drain), are
   marked down; their attempts are lost, and the node-failure policy (seed 002 §5.4.6: requeue as
   a TempFail, cancel, or hold) decides their jobs' fate;
3. attempts assigned but never started within `start_timeout` are lost (TempFail); with
   `node_failure_reserve_time` (seed 002 §5.4.5), their nodes, still up, take no new work until
   `now` plus that time (NodeReserve);
4. jobs with priority 0 or a cancel request are cancelled, and those with a requeue request are
   stopped and queued again; then running attempts past their job's
   time limit plus `dispatch.time_limit_grace` (Slurm's OverTimeLimit) end, and their jobs fail
   (TIMEOUT, not retried; a run older than the observer only once `ping_stale` has passed);
   queued jobs whose dependency can never be satisfied are cancelled
   (policy.dispatch.kill_invalid_depend), and those whose dependency does not hold yet wait;
   instances that did not pair within the boot grace back their types off (seed 004's capacity
   back-off, corral.core.capacity.boot_failed), for this pass's placement and boots too;
5. queued jobs are placed on running nodes (held jobs, jobs waiting for a dependency, and tasks
   of a job array beyond its throttle, `corral.core.job_array`, are not: they are left out of the
   queue, so no instance is booted for them either);
6. the boot planner boots instances for what is left, or says why a job waits;
7. the lifecycle matrix (seed 000) drains and shuts down nodes (not an idle node an operator's
   admin reservation keeps up while it is in force, corral.core.reservations.keeps);
8. idle / busy marks follow from the work on each node.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from corral.core import admission, capacity, dependency, drain, lifecycle, reservations, retry
from corral.core.dispatchers import stale_dispatchers
from corral.core.index import SCHEDULABLE, AttemptsLeft, SnapshotIndex
from corral.core.limits import LiveFleet
from corral.core.model import InstanceType, Job, JobState, Node, NodeState, Resources
from corral.core.planner import PlannerMemo, plan_boots, warm_boots
from corral.core.settings import PolicySettings
from corral.core.snapshot import (
    Annotation,
    Decisions,
    NodeAction,
    NodeDecision,
    NodeMark,
    NodeReserve,
    PlacementResult,
    Snapshot,
)
from corral.placement.attributes import RESERVATION, transient_failure
from corral.placement.collector import collector_paused
from corral.placement.lifetime import gate_settings
from corral.placement.locality import LocalityIndex, pinned_to_running
from corral.placement.placer import make_placer

STALEABLE = frozenset((*SCHEDULABLE, NodeState.DRAINING))
LIVE = frozenset(state for state in NodeState if state.live)
LIVE_BUT_BUSY_OR_IDLE = tuple(state for state in NodeState if state.live and state not in SCHEDULABLE)
WAITING = "waiting for resources"  # a waiting job's reason when the placer gives none

# A placer takes the snapshot (whose attempts are those that hold room), the queue-ordered
# eligible jobs, the schedulable nodes, their free room if the caller has it (None: capacity less
# the snapshot's attempts' requests), and `now`; it returns placements and, for each job it could
# not place, the reason. It updates a given `free` in place.
Placer = Callable[[Snapshot, Sequence[Job], Sequence[Node], dict[str, Resources] | None, float], PlacementResult]


# With the cyclic collector paused, as a placement pass (corral.placement.collector): the live loop's
# pass over a long queue builds lists of every queued job (the index's groups, the boot planner's
# inputs), and each quarter's growth of the heap made the collector walk all of it, the 100,000
# jobs of the snapshot included, finding nothing to free: half of a steady pass's decide step over
# 100,000 queued jobs (bench/live_pass.py, 1.5 s -> 0.7 s).
@collector_paused
def plan_pass(
    snapshot: Snapshot,
    now: float,
    settings: PolicySettings,
    placer: Placer | None = None,
    planner: PlannerMemo | None = None,
) -> Decisions:
    # Written for speed (the simulator runs it hundreds of thousands of times): the pass reads the
    # snapshot through its index (kept between passes by the simulator and by the live loop's
    # store, built here for a snapshot without one), so it looks only at the groups a step
    # concerns: queued and flagged jobs, nodes by state, nodes without work. Per-node policy
    # functions run only on nodes whose answer can differ from "busy, nothing to do". The
    # decisions are those of the plain reading of the steps in the module docstring, in the same
    # order, with nodes and jobs in snapshot order.
    index = snapshot.index if snapshot.index is not None else SnapshotIndex.of(snapshot)
    decisions = Decisions()
    lifecycle_settings = settings.lifecycle
    observing = snapshot.observing_since
    nodes, by_state, active, work = index.nodes, index.by_state, index.attempts, index.work
    ended: set[int] = set()  # jobs whose fate this pass already decided

    def attempt_ids(job_id: int) -> tuple[int, ...]:
        return tuple(index.job_attempts.get(job_id, ()))

    def end_attempts(job: Job, reason: str, lost_node: str | None = None) -> None:
        """`reason`: for a lost node, how it was lost ("": its agent went silent)."""
        if job.id in ended:
            return
        ids = attempt_ids(job.id)
        decisions.job_outcomes.append(
            retry.after_temp_failure(job, now, settings.retry, reason, ids)
            if lost_node is None
            else retry.after_node_failure(job, now, settings.retry, lost_node, ids, reason)
        )
        ended.add(job.id)

    # 1. Dispatchers that stopped pinging: their claims are released as temporary failures.
    if snapshot.dispatchers:
        stale = stale_dispatchers(snapshot, now, settings)
        if stale:
            for job in index.jobs.values():
                if job.claimed_by in stale and job.state in (JobState.CLAIMED, JobState.RUNNING):
                    end_attempts(job, f"dispatcher {job.claimed_by} stopped heartbeating")

    # 2. Nodes gone silent: down, and their work is lost.
    down_now: set[str] = set()
    ping_stale = lifecycle_settings.ping_stale
    silent = nodes.values() if index.silent is None else index.silent.values()
    if silent and now - observing > ping_stale:
        # A cheap, generous pre-filter; lifecycle.ping_is_stale has the last word.
        horizon = now - ping_stale + 1.0
        quiet_for_long = [n for n in silent if (n.last_ping_at or n.paired_at or n.created_at) < horizon]
        for node in quiet_for_long if index.silent is None else index.in_node_order(quiet_for_long):
            if node.state in STALEABLE and lifecycle.ping_is_stale(node, now, lifecycle_settings, observing):
                down_now.add(node.id)
                decisions.node_marks.append(NodeMark(node.id, NodeState.DOWN, f"no ping for more than {ping_stale:g}s"))
    # Drained `now` by an operator (Slurm's POWER_DOWN_FORCE, Arvados' kill): down at once, and
    # what runs there is lost as on a failed node.
    killed: dict[str, str] = {}  # node id -> how its work was lost
    for node in index.in_node_order(index.leaving.values()) if index.leaving else ():
        if node.id not in down_now and drain.requested(node.attributes) is drain.Drain.NOW:
            drained_now = f"{drain.DRAIN}={drain.Drain.NOW.value}"
            down_now.add(node.id)
            killed[node.id] = f"node {node.id} shut down by an operator ({drained_now})"
            decisions.node_marks.append(NodeMark(node.id, NodeState.DOWN, f"{drained_now}: shut down by an operator"))
    lost_on = set(index.orphaned)  # work on nodes that are gone
    if down_now or by_state[NodeState.DOWN]:
        lost_on.update(node_id for node_id in (*down_now, *by_state[NodeState.DOWN]) if node_id in work)
    start_timeout = settings.dispatch.start_timeout
    late = (
        [a for a in index.assigned.values() if now - max(a.assigned_at, observing) > start_timeout]
        if index.assigned and now - observing > start_timeout
        else []
    )
    reserve_time = settings.dispatch.node_failure_reserve_time
    reserving: set[str] = set()  # nodes a transient failure reserves from this pass on
    if lost_on or late:
        jobs = index.jobs
        late_ids = {a.id for a in late}
        for attempt in active.values():
            if attempt.job_id not in jobs:
                continue
            lost_node = next((n for n in attempt.node_ids if n in lost_on), None)
            if lost_node is not None:
                end_attempts(jobs[attempt.job_id], killed.get(lost_node, ""), lost_node)
            elif attempt.id in late_ids:
                end_attempts(jobs[attempt.job_id], f"not started on {attempt.node_ids[0]} within the start timeout")
                if reserve_time > 0:
                    # A transient failure on nodes that are still up (seed 002 §5.4.5): they take
                    # no new work while it clears; their other work runs on.
                    until = now + reserve_time
                    why = f"{transient_failure(until)} (attempt {attempt.id} of job {attempt.job_id} not started"
                    for node_id in attempt.node_ids:
                        if node_id not in reserving:
                            reserving.add(node_id)
                            decisions.node_reservations.append(
                                NodeReserve(node_id, until, f"{why} on {node_id} within the start timeout)")
                            )

    # 4. Cancellation (priority 0 or an explicit request) and requeue requests.
    for job in index.in_job_order(index.flagged.values()) if index.flagged else ():
        if job.id in ended:
            continue
        outcome = retry.on_request(job, attempt_ids(job.id))
        if outcome is not None:
            decisions.job_outcomes.append(outcome)
            ended.add(job.id)

    # 4b. Time limits (Slurm's TIMEOUT): read off the index's heap, so a pass with none due looks
    # at one entry. A job cancelled above is cancelled, not timed out.
    grace = settings.dispatch.time_limit_grace
    if grace is not None and index.limits and index.next_limit() <= now - grace:
        said = f"+ {retry.format_seconds(grace)} grace, policy.dispatch.time_limit_grace" if grace else ""
        # A run that started before this observer (a restarted corral) may have ended on its node
        # while no one was listening, and its agent's report may not be in yet: its limit is judged
        # once agents have had ping_stale to be heard, as a node's silence is: a job that
        # ended well within its limit during an outage is not failed TIMEOUT before its exit is heard.
        settling = now - observing <= ping_stale
        for _, attempt_id in index.limits_reached(now - grace):
            if settling and (active[attempt_id].started_at or 0.0) < observing:
                continue
            job_id = active[attempt_id].job_id
            timed_out = index.jobs.get(job_id)
            if timed_out is None or job_id in ended:
                continue
            decisions.job_outcomes.append(
                retry.after_timeout(timed_out, timed_out.time_limit, attempt_ids(job_id), said)
            )
            ended.add(job_id)

    # 4c. Dependencies (Slurm's --dependency): a queued job waits until the jobs it names got far
    # enough; one whose dependency can never be satisfied is cancelled (kill_invalid_depend), and
    # so are the jobs that depend on it in turn, in this pass.
    judged = dependency.step(snapshot, index, ended, settings.dispatch.kill_invalid_depend, decisions.job_outcomes)
    blocked: AbstractSet[int] = judged.blocked
    dependency_reasons: Mapping[int, str] = judged.reasons

    # Nodes past policy.lifecycle.max_node_age (Karpenter's expireAfter): no new work; shut down once
    # empty, as a broken node is. Not on a fleet that cannot boot their replacements.
    max_age = lifecycle_settings.max_node_age
    expired: set[str] = set()
    if max_age is not None and settings.boot.max_instances > 0:
        horizon = now - max_age
        expired = {
            node_id
            for group in (by_state[NodeState.IDLE], by_state[NodeState.BUSY])
            for node_id, node in group.items()
            if node.created_at <= horizon and node_id not in down_now
        }

    # Nodes that hold work after this pass's endings, and the schedulable ones that hold none (by
    # id; read only: without endings they are the index's own).
    working: AbstractSet[str]
    unworked: Mapping[str, Node]
    idle_working: AbstractSet[str]
    busy_unworked: AbstractSet[str]
    idle_nodes = by_state[NodeState.IDLE]
    # Jobs ended while queued (the usual cancellation) held nothing: only the others free nodes.
    freeing = bool(ended) and any(job_id in index.job_attempts for job_id in ended)
    if freeing:
        ending = frozenset(i for job_id in ended for i in index.job_attempts.get(job_id, ()))
        holding = AttemptsLeft(active, ending).values()
        # A node the ending attempts leave is one they account for all the work of.
        lost = Counter(node_id for i in ending for node_id in active[i].node_ids)
        freed = {node_id for node_id, count in lost.items() if work[node_id] == count}
        working = work.keys() - freed
        unworked = {
            n.id: n
            for n in (*index.unworked.values(), *(nodes[i] for i in freed if i in nodes))
            if n.state in SCHEDULABLE
        }
        idle_working = idle_nodes.keys() & working
        busy_unworked = by_state[NodeState.BUSY].keys() & unworked.keys()
    else:
        working, unworked = work.keys(), index.unworked
        idle_working, busy_unworked = index.idle_working.keys(), index.busy_unworked.keys()

    # Instances that did not pair within the boot grace: the lifecycle matrix shuts them down in
    # step 7 (unpaired, boot exceeded), and their types are backed off from this pass on, as after
    # an insufficient-capacity error (corral.core.capacity.boot_failed): the planner boots the next
    # type that fits, not the same broken one again, and with every type failing boots nothing
    # until a back-off ends. A pairing of a type ends its row of failures first.
    unavailable = snapshot.unavailable_types
    rows = snapshot.boot_failures
    if rows and idle_nodes:
        ended_rows = capacity.paired_again(rows, index.in_node_order(idle_nodes.values()))
        if ended_rows:
            decisions.types_paired.extend(ended_rows)
            rows = {name: row for name, row in rows.items() if name not in ended_rows}
    if by_state[NodeState.BOOTING]:
        exceeded = lifecycle.BootGrace.BOOT_EXCEEDED
        failed_boots = [
            n
            for n in index.in_node_order(by_state[NodeState.BOOTING].values())
            if lifecycle.boot_grace(n, now, lifecycle_settings, observing) is exceeded
            and n.id not in index.leaving  # shut down for an operator's reason, not a failed boot
            and lifecycle.decide(lifecycle.state_tuple(n, now, lifecycle_settings, observing, False))
            is NodeAction.START_SHUTDOWN
        ]
        if failed_boots:
            backoffs = capacity.boot_failed(
                failed_boots, rows, unavailable, now, settings.boot, lifecycle_settings.boot_grace
            )
            decisions.type_backoffs.extend(backoffs)
            unavailable = {**unavailable, **{b.instance_type: b.until for b in backoffs}}

    # 5. Placement, in queue order.
    # Queued, not eligible yet: only a job with a requested start or a back-off can be (the
    # others' Job.eligible_at() is 0), so only those are asked.
    maybe_not_yet = index.deferred if now >= 0.0 else index.queued
    not_yet = (
        [job for job in maybe_not_yet.values() if job.id not in ended and job.eligible_at() > now]
        if maybe_not_yet
        else []
    )
    queue = admission.in_order(index, snapshot, settings, now)
    seen = dataclasses.replace(snapshot, attempts=holding, ending=ending) if freeing else snapshot
    if unavailable is not snapshot.unavailable_types:
        seen = dataclasses.replace(seen, unavailable_types=unavailable)  # the placer's offers too
    if ended or not_yet or blocked:
        left_out = ended.union(job.id for job in not_yet).union(blocked)
        queue = [job for job in queue if job.id not in left_out]
    # Job arrays' throttles (Slurm's %N) and users' limits (MaxJobsPerUser, MaxTRESPerUser=cpu): the
    # jobs they hold back beside what runs are neither placed nor booted for.
    queue, throttled = admission.within_limits(queue, index, ended, settings)
    if any(job.reservation for job in queue):
        # A job whose admin reservation is in force nowhere waits for it (Slurm's
        # ReservationDeleted) rather than running outside it: neither placed nor booted for.
        in_force = reservations.of_fleet(snapshot.nodes, snapshot.instance_types, now)
        queue, deleted = reservations.hold_back(queue, in_force)
        throttled = {**throttled, **deleted} if deleted else throttled
    if queue:
        # The placer works out the room on each node from the attempts that still hold it: not
        # those of jobs this pass ended (cancelled, lost, never started).
        schedulable = index.schedulable()
        if down_now or reserving or expired:
            schedulable = [
                n for n in schedulable if n.id not in down_now and n.id not in reserving and n.id not in expired
            ]
        if snapshot.away and settings.placement.queue.node_down_delay is not None:
            # Down nodes that come back (seed 002 §5.4.5): only backfill's reservations count them.
            down = NodeState.DOWN
            schedulable = [
                *schedulable,
                *(n if n.state is down else dataclasses.replace(n, state=down) for n in snapshot.away),
            ]
        result = (placer or make_placer(settings))(seen, queue, schedulable, None, now)
    else:
        result = PlacementResult()
    reasons = result.reasons
    decisions.placements.extend(result.placements)
    decisions.explanations.update(result.details)
    decisions.revisit, decisions.revisit_from = result.revisit, result.revisit_from
    placed_ids = {p.job_id for p in result.placements}
    placed_on = {node_id for p in result.placements for node_id in p.node_ids}  # they hold work now too
    waiting = [job for job in queue if job.id not in placed_ids] if placed_ids else queue

    # 6. Boots for what is left, but not for a job that strict locality pins near running work: no
    # new instance can take it (it would idle, be drained, and be booted again); the placer's
    # reason stands for it.
    for_boot = waiting
    if settings.boot.max_instances > 0 and any(
        job.locality is not None and job.locality.strict and job.locality.near for job in waiting
    ):
        running_ids = {job_id for job_id in index.job_attempts if job_id not in ended} | placed_ids
        running_tags = {tag for job_id in running_ids if (j := index.jobs.get(job_id)) for tag in j.tags}
        for_boot = [job for job in waiting if not pinned_to_running(job.locality, running_ids, running_tags)]
    booting = (
        [
            (n, n.capacity)
            for n in index.in_node_order(by_state[NodeState.BOOTING].values())
            if lifecycle.boot_grace(n, now, lifecycle_settings, observing) is lifecycle.BootGrace.BOOT_WAIT
            # (a drained one is shut down once it pairs: nothing waits for it)
            and not (n.attributes and drain.requested(n.attributes) is not None)
        ]
        if by_state[NodeState.BOOTING]
        else []
    )
    # Broken or drained cloud instances (a seed-002 failure category or an operator's drain,
    # corral.core.drain.leaving) that hold no work after this pass: the lifecycle matrix reads
    # them down and shuts them down below, so they count for no gang and no longer against
    # max_instances: a replacement boots in this pass.
    retiring = (
        [
            n
            for n in index.in_node_order([*index.leaving.values(), *(nodes[i] for i in expired - index.leaving.keys())])
            if n.id not in working and n.id not in placed_on and n.id not in down_now
        ]
        if index.leaving or expired
        else []
    )
    retiring_ids = {n.id for n in retiring}
    # Gangs may count on nodes up and without work (idle, or busy until this pass marks them
    # idle), idle for less than the boot grace (the time an instance may take to pair: the gang's
    # others should be up by then); see corral.core.planner. Listed only when a gang waits: the
    # planner's kept plan compares them.
    up_idle = (
        [
            n
            for n in index.in_node_order(unworked.values())
            if n.id not in placed_on
            and n.id not in down_now
            and n.id not in retiring_ids
            and n.id not in reserving  # a transient failure reserves it from this pass on
            and (n.state is NodeState.BUSY or now - n.state_changed_at < lifecycle_settings.boot_grace)
        ]
        if unworked and settings.boot.max_instances > 0 and any(job.node_count > 1 for job in for_boot)
        else []
    )
    # Where work runs after this pass's placements, for a gang whose strict locality hints say
    # which of those nodes it may count on (as the placer resolves them).
    locality = None
    if up_idle and any(job.node_count > 1 and job.locality is not None and job.locality.strict for job in for_boot):
        locality = LocalityIndex(seen.jobs, seen.attempts, seen.nodes)
        for p in result.placements:
            locality.add(p.job_id, index.jobs[p.job_id].tags, p.node_ids)
    # Every filed node is in one state's group (down_now holds only live nodes). A node shutting
    # down still bills, and counts: the shell marks one gone as soon as the cloud takes its
    # terminate, so one seen here is one the cloud would not terminate (corral's role without
    # ec2:TerminateInstances), and replacing it would grow a billed fleet past every limit.
    live = len(nodes) - len(by_state[NodeState.GONE]) - len(down_now) - len(retiring)
    # What they hold, for max_vcpus and max_cost_per_hour (only when set: it walks every node).
    fleet = (
        LiveFleet.of(
            n
            for n in nodes.values()
            if n.state is not NodeState.GONE and n.id not in down_now and n.id not in retiring_ids
        )
        if settings.boot.spend_limits().any
        else None
    )
    # The live instances of each type with a cap of its own (instance_types' max_instances), counted
    # as `live` is (only when one is set: it walks every node).
    of_type = (
        Counter(
            n.instance_type
            for n in nodes.values()
            if n.state is not NodeState.GONE and n.id not in down_now and n.id not in retiring_ids
        )
        if any(t.max_instances is not None for t in snapshot.instance_types)
        else None
    )
    plan = plan_boots(
        for_boot,
        booting,
        snapshot.instance_types,
        live,
        unavailable,
        now,
        settings.boot,
        gate_settings(settings.placement),
        settings.placement.queue.default_time_limit,
        planner,
        up_idle,
        settings.placement,
        locality,
        fleet,
        of_type,
    )
    decisions.boots.extend(plan.boots)
    # 6b. The fleet's floor (lifecycle.min_instances): booted up to it, not only kept from draining.
    decisions.boots.extend(
        warm_boots(
            live + len(plan.boots),
            lifecycle_settings.min_instances,
            snapshot.instance_types,
            unavailable,
            now,
            settings.boot,
            fleet,
            plan.boots,
            of_type,
        )
    )
    notes = plan.notes
    if not notes:
        # The placer's reason; an Annotation only where it differs from what the job shows (as
        # one comprehension: a long queue's jobs mostly keep theirs, pass after pass).
        decisions.annotations.extend(
            [
                Annotation(job.id, reason)
                for job in waiting
                if (reason := reasons.get(job.id, WAITING)) != job.wait_reason or job.unplaceable
            ]
        )
    else:
        for job in waiting:
            note = notes.get(job.id)
            if note is None:
                reason = reasons.get(job.id, WAITING)
                if reason != job.wait_reason or job.unplaceable:
                    decisions.annotations.append(Annotation(job.id, reason))
            elif note[0] != job.wait_reason or note[1] != job.unplaceable:
                decisions.annotations.append(Annotation(job.id, *note))
    for job in index.in_job_order(not_yet) if not_yet else ():
        if job.id in blocked:
            continue  # its dependency says why it waits
        why = job.not_yet_reason()
        if job.wait_reason != why:
            decisions.annotations.append(Annotation(job.id, why))
    if blocked:
        # A held job keeps its hold's reason.
        for job in index.in_job_order(index.dependent[job_id] for job_id in blocked):
            why = dependency_reasons[job.id]
            if not job.held and (job.wait_reason != why or job.unplaceable):
                decisions.annotations.append(Annotation(job.id, why))

    if throttled:
        for job in index.in_job_order(index.jobs[job_id] for job_id in throttled):
            why = throttled[job.id]
            if job.wait_reason != why or job.unplaceable:
                decisions.annotations.append(Annotation(job.id, why))

    # 7. Lifecycle matrix; 8. idle/busy marks. A shell that tracks pings heard at `now` from
    # every node not listed silent (whose `last_ping_at` it need not have written, then).
    silent_ones = index.silent
    live_after = live + len(decisions.boots)
    # Nodes without work, counted only where a drain is possible at all (a fixed fleet keeps every node).
    if live_after <= lifecycle_settings.min_instances:
        idle_count = 0
    else:
        idle_count = len([i for i in unworked if i not in placed_on and i not in down_now and i not in retiring_ids])
    quiet = _QUIET
    # Both only shrink as drains are decided, so a drain refused now is refused for every node.
    no_drains = live_after <= lifecycle_settings.min_instances or idle_count <= 0
    idle_grace, boot_grace = lifecycle_settings.idle_grace, lifecycle_settings.boot_grace
    if quiet.busy:
        # Busy nodes that keep their work need nothing: look at the others only. Idle nodes that
        # can only be drained, when no drain is possible, need a look only if they got work.
        attention: dict[str, Node] = {}
        for group in LIVE_BUT_BUSY_OR_IDLE:
            if by_state[group]:
                attention.update(by_state[group])
        for i in busy_unworked - placed_on if busy_unworked else ():
            attention[i] = nodes[i]
        for i in down_now:
            attention[i] = nodes[i]
        for n in retiring:
            attention[n.id] = n
        if quiet.idle_unless_drain and no_drains:
            for i in idle_working | (idle_nodes.keys() & placed_on):
                attention[i] = idle_nodes[i]
        else:
            attention.update(idle_nodes)
        looked_at = index.in_node_order(attention.values()) if attention else []
    else:
        looked_at = [n for n in nodes.values() if n.state in LIVE]
    types_by_name: dict[str, InstanceType] | None = None  # only once a reserved node is looked at
    down_reasons: dict[str, str] | None = None  # only once the matrix acts on a node
    for node in looked_at:
        has_work = node.id in working or node.id in placed_on
        if retiring_ids and node.id in retiring_ids:
            # Broken, drained or expired, and empty: down (an event that says why), then shut down by
            # the matrix, which reads it as the down node it now is.
            why, meaning = drain.leaving(node.attributes) or (
                f"max_node_age {retry.format_seconds(max_age or 0)}",
                "older than policy.lifecycle.max_node_age",
            )
            decisions.node_marks.append(NodeMark(node.id, NodeState.DOWN, f"{why}: {meaning}, no work left on it"))
            heard = silent_ones is not None and node.id not in silent_ones
            as_down = dataclasses.replace(node, state=NodeState.DOWN)
            state = lifecycle.state_tuple(as_down, now, lifecycle_settings, observing, has_work, heard)
            action = lifecycle.decide(state)
            if action is not None:
                decisions.node_decisions.append(NodeDecision(node.id, action, f"{why}: {lifecycle.describe(state)}"))
            continue
        if node.id not in down_now:
            current = node.state
            if current is NodeState.IDLE and has_work:
                decisions.node_marks.append(NodeMark(node.id, NodeState.BUSY))
            elif current is NodeState.BUSY and not has_work:
                decisions.node_marks.append(NodeMark(node.id, NodeState.IDLE))
            # Skip nodes whose state tuple can only select "no action" (a fact read off the matrix).
            if current is NodeState.BUSY or (has_work and current in STALEABLE):
                if quiet.busy:
                    continue
            elif current is NodeState.IDLE:
                if (quiet.idle_unless_drain and no_drains) or (
                    quiet.idle_wait and now - node.state_changed_at < idle_grace
                ):
                    continue
            elif (
                current is NodeState.BOOTING and quiet.boot_wait and now - max(node.created_at, observing) < boot_grace
            ):
                continue
        heard = silent_ones is not None and node.id not in silent_ones
        reserved = False
        if node.attributes and RESERVATION in node.attributes and not has_work:
            # An operator's admin reservation keeps the node up for it until it ends; one that
            # every instance of its type inherits does not (it would never idle out).
            if types_by_name is None:
                types_by_name = {t.name: t for t in snapshot.instance_types}
            reserved = reservations.keeps(node, types_by_name.get(node.instance_type), now)
        state = lifecycle.state_tuple(node, now, lifecycle_settings, observing, has_work, heard, reserved)
        action = lifecycle.decide(state)
        if action is NodeAction.START_DRAIN:
            if live_after <= lifecycle_settings.min_instances or idle_count <= 0 or node.id in plan.held:
                continue
            idle_count -= 1
            live_after -= 1
        if action is not None:
            if down_reasons is None:
                down_reasons = {m.node_id: m.reason for m in decisions.node_marks if m.state is NodeState.DOWN}
            why = lifecycle.in_words(state, node, lifecycle_settings, down_reasons.get(node.id, ""))
            decisions.node_decisions.append(NodeDecision(node.id, action, why))
    return decisions


@dataclass(frozen=True, slots=True)
class _Quiet:
    """Which node situations the lifecycle matrix answers with no action whatever the rest of the
    state tuple: they need no state tuple at all."""

    busy: bool  # any busy worker
    idle_wait: bool  # an idle worker within its idle grace
    idle_unless_drain: bool  # an idle worker, unless the action is a drain
    boot_wait: bool  # an unpaired worker within its boot grace


def _quiet_states(matrix: Mapping[lifecycle.StateTuple, NodeAction | None]) -> _Quiet:
    def only(allowed: tuple[NodeAction | None, ...], match: Callable[[lifecycle.StateTuple], bool]) -> bool:
        return all(action in allowed for state, action in matrix.items() if match(state))

    W, Idle, Boot = lifecycle.WorkerState, lifecycle.IdleGrace, lifecycle.BootGrace
    return _Quiet(
        busy=only((None,), lambda s: s[0] is W.BUSY),
        idle_wait=only((None,), lambda s: s[0] is W.IDLE and s[3] is Idle.IDLE_WAIT),
        idle_unless_drain=only((None, NodeAction.START_DRAIN), lambda s: s[0] is W.IDLE),
        boot_wait=only((None,), lambda s: s[0] is W.UNPAIRED and s[2] is Boot.BOOT_WAIT),
    )


_QUIET = _quiet_states(lifecycle.DEFAULT_MATRIX)


def next_time_limit_end(index: SnapshotIndex, settings: PolicySettings) -> float:
    """The time from which a pass ends a running attempt at its job's time limit with nothing else
    happening (inf: none): a shell that skips quiet passes (the simulator) runs one then."""
    end = settings.dispatch.enforced_limit(index.next_limit())
    return math.inf if end is None else end


def idle_nodes_can_drain(settings: PolicySettings, most_live: int) -> bool:
    """Whether an idle node's idle grace running out can lead to any decision, with never more than
    `most_live` nodes live: the matrix only ever drains an idle node, and a pass drains none while
    no more than `lifecycle.min_instances` are live (a fixed fleet, for one)."""
    return not _QUIET.idle_unless_drain or most_live > settings.lifecycle.min_instances
