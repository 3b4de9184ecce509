"""The simulated world: a virtual clock, an event queue, the `sim` cloud and simulated agents,
driven by the core's reconcile pass.

Every decision comes from `corral.core.reconcile.plan_pass` (placements, boots, drains, shutdowns,
requeues, cancellations) or from `corral.core.retry` (what an attempt's exit does to its job);
this module only carries decisions out and plays the parts of the cloud, the agents and the users:
an instance pairs when its boot delay is over, an agent starts what it was given and reports the
exit when the recorded run time is over, a user cancels when the workload says so, a broken
instance's agent stops pinging (and the core notices, as it would in production).

Passes run on the grid of the live loop's interval (`sim.tick`, default `loop.interval`): at the
first tick after anything happens, and at every tick after a pass that changed something. Through
quiet stretches the clock jumps to the next tick at which a pass could decide differently: an
event, or a policy timer running out (boot grace, idle grace, billing window, ping staleness, start
timeout, retry back-off, not-before, capacity back-off). `every_tick=True` runs every tick instead;
a test checks that both give the same results.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from array import array
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

from corral.cloud.base import InsufficientCapacity
from corral.cloud.sim import SimCloud
from corral.config import Config
from corral.core import capacity, drain, fairshare, retry
from corral.core.accounting import AttemptSpan
from corral.core.dependency import DEPENDENCY, NEVER_SATISFIED, Dependency
from corral.core.index import SnapshotIndex
from corral.core.lifecycle import billing_window_opens
from corral.core.model import Attempt, AttemptState, InstanceType, Job, JobState, Node, NodeState, Resources
from corral.core.planner import PlannerMemo
from corral.core.reconcile import Placer, idle_nodes_can_drain, next_time_limit_end, plan_pass
from corral.core.settings import PolicySettings
from corral.core.snapshot import BootFailures, Decisions, JobOutcome, NodeAction, PlacementResult, Snapshot
from corral.placement.attributes import FAILURE_RESERVED_UNTIL
from corral.placement.placer import make_placer
from corral.sim.settings import ScheduledFailure
from corral.workload.model import SimJob, shape_gangs

# Event kinds, in the order they are handled when they fall on the same instant.
PAIR, START, END, FAIL, CANCEL, REPAIR, SCHEDULED_FAIL, NOTICE = range(8)
# Timer kinds: a policy threshold that may change a pass's answer at that time, if what set the
# timer still holds then (a node still booting, still idle since the same instant, ...).
W_BOOT, W_IDLE, W_STALE, W_JOB, W_CAPACITY, W_START, W_RESERVED, W_EXPIRE, W_RECLAIMED = range(9)
EPS = 1e-6  # "strictly after": a timer that fires when `now - t > limit` is due one grid step past t + limit
DISPATCHER = "sim"


class SimulationError(ValueError):
    """A configuration the simulator cannot run (the message names the key)."""


@dataclass(slots=True)
class JobRecord:
    """What the metrics need about one finished job."""

    state: JobState
    submit: float
    run: float  # the recorded run time; of a run ended at its time limit, how long it ran
    wait: float | None  # None if it never ran to the end of its recorded run (or time limit)


@dataclass(slots=True)
class Trace:
    """Samples taken at every pass, for the report's curves."""

    time: array[float] = field(default_factory=lambda: array("d"))
    fleet: array[float] = field(default_factory=lambda: array("d"))
    queued: array[float] = field(default_factory=lambda: array("d"))
    running: array[float] = field(default_factory=lambda: array("d"))
    # vcpus held by running attempts, and those of the instances up (booting, running or down but not
    # yet shut down): how full the fleet is
    busy_vcpus: array[float] = field(default_factory=lambda: array("d"))
    fleet_vcpus: array[float] = field(default_factory=lambda: array("d"))


@dataclass(slots=True)
class PassTimes:
    """Wall-clock seconds spent in the core's passes (`plan_pass`) and, within them, in the placer,
    so that the benchmark can tell them from the simulator's own work (the rest of a run)."""

    passes: float = 0.0
    placer: float = 0.0


@dataclass(slots=True)
class Counters:
    passes: int = 0
    boots: int = 0
    shutdowns: int = 0
    drains: int = 0
    capacity_errors: int = 0
    boot_failures: int = 0  # instances that did not pair within the boot grace (their types backed off)
    boots_skipped_in_backoff: int = 0
    node_failures: int = 0
    requeues: int = 0
    timeouts: int = 0  # jobs the core ended past their time limits (failed, TIMEOUT)
    # vcpu-seconds that running attempts had done when their node failed: work to do again
    lost_vcpu_seconds: float = 0.0
    placements: int = 0
    peak_fleet: int = 0
    peak_queue: int = 0
    explained: int = 0  # passes whose placer explained its choices (the placement engine does)
    notices: int = 0  # the cloud's notices ahead of failures (sim.failures.notice_by_type) heard by a node up
    # Failures of spot types (those in sim.failures.notice_by_type): the cloud took the instance back
    reclaims: int = 0
    interruption_backoffs: int = 0  # types backed off after a notice (policy.boot.interruption_backoff)


class Simulation:
    def __init__(
        self,
        jobs: list[SimJob],
        config: Config,
        *,
        label: str = "",
        every_tick: bool = False,
        check_index: bool = False,
        progress: Callable[[float], None] | None = None,
        on_pass: Callable[[Snapshot, float, Decisions], None] | None = None,
    ) -> None:
        self.config = config
        self.label = label
        self.every_tick = every_tick
        self.check_index = check_index
        self.progress = progress
        self.on_pass = on_pass
        sim = config.sim
        self.tick = float(sim.tick if sim.tick is not None else config.loop.interval)
        if self.tick <= 0:
            raise SimulationError("sim.tick (or loop.interval) must be more than 0")
        self.fixed = sim.fleet.mode == "fixed"
        all_types = {t.name: t for t in config.core_instance_types()}
        self.policy: PolicySettings = config.policy
        if self.fixed:
            self.types, self.fixed_nodes = self._fixed_fleet(all_types)
            # A fixed fleet as policy: the core may boot nothing and must keep every node; it
            # still places, orders the queue, and shuts down (for repair) nodes that fail.
            self.policy = config.policy.model_copy(deep=True)
            self.policy.boot.max_instances = 0
            self.policy.lifecycle.min_instances = len(self.fixed_nodes)
        else:
            self.types, self.fixed_nodes = list(all_types.values()), []
        self.types_by_name = {t.name: t for t in self.types}
        self.times = PassTimes()
        self.placer = self._timed(make_placer(self.policy, explanations=sim.explanations))
        self.planner = PlannerMemo()
        # Jobs larger than any one node run as gangs (of a fixed fleet, on a type it has enough of).
        counts = Counter(t.name for t in self.fixed_nodes) if self.fixed else None
        self.gangs = shape_gangs(jobs, self.types, counts)
        self.specs = jobs
        self.spec_of = {spec.id: spec for spec in jobs}
        # The jobs some job's dependency names (a whole array's tasks among them), and the end
        # states of those that ended: the core judges dependencies on them (the index holds open
        # jobs only).
        whole = {array_id for spec in jobs if spec.dependency is not None for _, array_id in spec.dependency.arrays}
        self.array_tasks: dict[int, list[int]] = {}
        for spec in jobs:
            if spec.array_job_id in whole:
                self.array_tasks.setdefault(spec.array_job_id, []).append(spec.id)
        self.named = {job_id for spec in jobs if spec.dependency is not None for job_id in spec.dependency.job_ids()}
        self.named.update(task for tasks in self.array_tasks.values() for task in tasks)
        self.finished: dict[int, JobState] = {}

        self.now = 0.0
        self.cloud = SimCloud(self.types, sim, lambda: self.now, config.cloud.cluster)
        # The world's open jobs, active attempts and nodes, filed for the core's pass: every change
        # to one of them is filed again (index.put_*) before the next pass.
        self.index = SnapshotIndex(track_pings=True)
        self.jobs: dict[int, Job] = self.index.jobs
        self.attempts: dict[int, Attempt] = self.index.attempts
        self.nodes: dict[str, Node] = self.index.nodes
        self.pinging: dict[str, Node] = {}  # nodes whose agent is up and pinging
        self.away: dict[str, Node] = {}  # a fixed fleet's failed nodes, down until repaired
        self.instance_of: dict[str, str] = {}
        self.unavailable: dict[str, float] = {}
        self.boot_failures: dict[str, BootFailures] = {}  # each type's failed boots in a row (the core's)
        # Attempts whose node broke, and when: their exit is never reported, and they did no work
        # from then (though the core learns of it only when the node's silence goes stale).
        self.doomed: dict[int, float] = {}
        # The types of the spot instances the cloud took back: gone from the world at once, while the
        # work lost on them is ended, and counted on their type, only at the next pass.
        self.taken_back: dict[str, str] = {}
        self.events: list[tuple[float, int, int, object]] = []
        self.wakes: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self._next_arrival = 0
        self._attempt_ids = 0
        self._node_ids = 0
        self.queued = 0  # jobs in QUEUED state
        self._boot_trouble = False  # a boot of this pass failed or was skipped
        self.revisit_from = math.inf  # the last pass's Decisions.revisit_from
        # Fair share (queue.order = "fairshare" or "multifactor"): the ledger as of the last calc time, and the runs
        # that ended since with some of their time not counted yet (corral.core.fairshare).
        queue = self.policy.placement.queue
        self.fairshare = queue.fairshare if queue.reads_usage() else None
        self.ledger = fairshare.UsageLedger(-math.inf)
        self.ended_spans: list[AttemptSpan] = []

        self.records: dict[int, JobRecord] = {}
        self.ended_run: dict[int, float] = {}  # job id -> time its recorded run ended (for waits)
        self.busy_vcpu_seconds: dict[str, float] = {}  # per instance type
        self.busy_gpu_seconds = 0.0  # GPU-seconds held by the attempts that ended
        # Now, for the report's curves: the vcpus running attempts hold (until their node fails), and
        # those of the instances up.
        self.busy_vcpus = 0.0
        self.fleet_vcpus = 0.0
        self.fixed_billing: list[tuple[InstanceType, float, float]] = []  # fixed nodes: (type, from, to)
        self.counters = Counters()
        self.trace = Trace()
        self.start_time = jobs[0].submit if jobs else 0.0
        horizon = sim.horizon if sim.horizon is not None else max((j.run for j in jobs), default=0.0) + 7 * 86400.0
        self.stop_at = (jobs[-1].submit if jobs else 0.0) + horizon
        self.stopped_early = False  # the horizon cut the run short
        self.end_time = self.start_time
        self.last_finish = self.start_time

    def live_config(self) -> Config:
        """The config a live loop would run this world with: the given one, with the fixed fleet's
        policy (boot nothing, keep every node) spelt out."""
        return self.config.model_copy(update={"policy": self.policy})

    # ---- setup -------------------------------------------------------------------------------

    def _fixed_fleet(self, all_types: dict[str, InstanceType]) -> tuple[list[InstanceType], list[InstanceType]]:
        nodes: list[InstanceType] = []
        for group in self.config.sim.fleet.nodes:
            nodes += [all_types[group.instance_type]] * group.count  # the config checked the names
        distinct = list({t.name: t for t in nodes}.values())
        return distinct, nodes

    def _timed(self, placer: Placer) -> Placer:
        times = self.times

        def timed(
            snapshot: Snapshot,
            queue: Sequence[Job],
            nodes: Sequence[Node],
            free: dict[str, Resources] | None,
            now: float,
        ) -> PlacementResult:
            started = perf_counter()
            try:
                return placer(snapshot, queue, nodes, free, now)
            finally:
                times.placer += perf_counter() - started

        return timed

    def _push(self, time: float, kind: int, ref: object) -> None:
        self._seq += 1
        heapq.heappush(self.events, (time, kind, self._seq, ref))

    def _wake(self, time: float, kind: int, ref: Any) -> None:
        self._seq += 1
        heapq.heappush(self.wakes, (time, kind, self._seq, ref))

    def _timer_holds(self, kind: int, ref: Any) -> bool:
        """Whether what set a timer still holds, so that a pass at its time could decide something.
        Asked of the earliest timer long before it is due, and a timer it drops is gone for good:
        only a condition that cannot hold again once it fails belongs here."""
        if kind == W_IDLE:
            node_id, since = ref
            node = self.nodes.get(node_id)
            return node is not None and node.state is NodeState.IDLE and node.state_changed_at == since
        if kind == W_BOOT:
            node = self.nodes.get(ref)
            return node is not None and node.state is NodeState.BOOTING
        if kind in (W_STALE, W_EXPIRE):
            return ref in self.nodes
        if kind == W_JOB:
            job = self.jobs.get(ref)
            return job is not None and job.state is JobState.QUEUED
        if kind == W_START:
            attempt = self.attempts.get(ref)
            return attempt is not None and attempt.state is AttemptState.ASSIGNED
        # W_CAPACITY: a type comes back. Only queued work can want it, but this is asked of the
        # earliest timer on every turn of the loop, long before it is due, and the queue may fill
        # by then: judged on the queue now, it would be dropped for good.
        # W_RECLAIMED: the cloud took an instance back; the next pass learns it is gone, as the live
        # loop's next listing does.
        return True

    def _next_timer(self) -> float:
        wakes = self.wakes
        while wakes:
            time, kind, _seq, ref = wakes[0]
            if self.every_tick or self._timer_holds(kind, ref):
                return time
            heapq.heappop(wakes)
        return math.inf

    def _grid(self, time: float) -> float:
        return math.ceil(time / self.tick - 1e-9) * self.tick

    # ---- the main loop -----------------------------------------------------------------------

    def run(self) -> Simulation:
        specs = self.specs
        if self.fixed:
            start = self._grid(self.start_time)
            self.now = start
            for itype in self.fixed_nodes:
                self._add_fixed_node(itype, start)
        for failure in self.config.sim.failures.schedule:
            self._push(failure.at, SCHEDULED_FAIL, failure)
        tick = self.tick
        last_pass = -math.inf
        again = math.inf  # a pass asked for at the next tick
        events, wakes = self.events, self.wakes
        progress_every = 2000
        while True:
            arrival = specs[self._next_arrival].submit if self._next_arrival < len(specs) else math.inf
            if arrival == math.inf and self._workload_over():
                # A fixed fleet's failures and repairs, and the failures of an elastic fleet's
                # instances kept warm (min_instances) and their replacements, would go on forever;
                # the recorded ends of runs cut at their time limits, and the failures drawn for
                # instances long shut down, change nothing. Instances still up are billed to here.
                break
            # Backfill's reservation may move with the clock alone then.
            sliding = self.revisit_from if self.queued else math.inf
            # A running job passing its time limit (and grace): the core ends it then.
            limit = next_time_limit_end(self.index, self.policy)
            # Fair share's usage and the jobs' ages, and so the queue's order, move on at each calc time.
            recalc = (
                fairshare.calc_time(last_pass, self.fairshare) + self.fairshare.calc_period
                if self.fairshare is not None and self.queued and last_pass > -math.inf
                else math.inf
            )
            due = min(arrival, events[0][0] if events else math.inf, self._next_timer(), again, sliding, limit, recalc)
            if due == math.inf:
                break
            at = self._grid(due)
            if at <= last_pass:
                at = last_pass + tick
            if at > self.stop_at:
                self.stopped_early = not self._nothing_left_to_run()
                if self.stopped_early:
                    # Nothing happens before the horizon (the next pass is past it), and the world,
                    # its instances and the work on them, runs until then: the bill and the busy
                    # time go up to it, not to the last pass.
                    self.now = max(self.now, self.stop_at)
                    trace = self.trace  # the report's fleet and queue curves go on to it too
                    for series, value in (
                        (trace.time, self.now),
                        (trace.fleet, len(self.nodes)),
                        (trace.queued, self.queued),
                        (trace.running, len(self.attempts)),
                        (trace.busy_vcpus, self.busy_vcpus),
                        (trace.fleet_vcpus, self.fleet_vcpus),
                    ):
                        series.append(value)
                break
            self._advance(at)
            while wakes and wakes[0][0] <= at:
                heapq.heappop(wakes)
            self.now = at
            decisions = self._pass(at)
            self.revisit_from = decisions.revisit_from
            last_pass = at
            pending = self.jobs or events or wakes or self._next_arrival < len(specs)
            again = at + tick if self._follow_up(decisions) or (self.every_tick and pending) else math.inf
            if self.progress is not None and self.counters.passes % progress_every == 0:
                self.progress(at)
        self.end_time = max(self.now, self.last_finish)
        if self.queued and not self.config.sim.explanations:
            self._explain_leftovers()
        return self

    def _explain_leftovers(self) -> None:
        """The jobs still queued at the end get the reasons the live loop would give them (its
        placer explains every waiting job; this run's did not, for speed): one pass more, whose
        decisions are not carried out, over the world as the run left it. Before, a fixed fleet's
        report counted a job asking for a trait no node has under "waiting for resources"."""
        now = self.now
        for node in self.pinging.values():
            node.last_ping_at = now  # heard from now, as the index promises the core
        snapshot = Snapshot(
            jobs=list(self.jobs.values()),
            attempts=list(self.attempts.values()),
            nodes=list(self.nodes.values()),
            instance_types=self.types,
            dispatcher_id=DISPATCHER,
            unavailable_types=self.unavailable,
            boot_failures=self.boot_failures,
            observing_since=self.start_time,
            away=list(self.away.values()),
            finished=dict(self.finished),
            array_tasks=self.array_tasks,
            fairshare_usage=self._usage(now) if self.fairshare is not None else {},
        )
        decisions = plan_pass(snapshot, now, self.policy, make_placer(self.policy), PlannerMemo())
        for note in decisions.annotations:
            job = self.jobs.get(note.job_id)
            if job is not None and job.state is JobState.QUEUED:
                job.wait_reason = note.wait_reason
                job.unplaceable = note.unplaceable

    def _workload_over(self) -> bool:
        """No open job can run any more and the fleet is down to what the policy keeps up for ever
        (a fixed fleet's nodes; an elastic fleet's min_instances)."""
        if not self.fixed and len(self.nodes) > self.policy.lifecycle.min_instances:
            return False  # instances still to drain and shut down: their idle time is billed
        return self._nothing_left_to_run()

    def _nothing_left_to_run(self) -> bool:
        """No open job can run any more: there are none, or every one is held (nobody releases a
        job in a simulation) or waits for a dependency that can never be satisfied (kept with
        `kill_invalid_depend = false`, or on such a job), with no cancellation on its way."""
        index = self.index
        stuck = set(index.held)
        if len(stuck) + len(index.dependent) < len(self.jobs):
            return False
        if index.dependent:
            stuck.update(self._stuck_for_good())
        if len(stuck) < len(self.jobs):
            return False
        return not self.jobs or not (index.flagged or any(kind == CANCEL for _, kind, _, _ in self.events))

    def _stuck_for_good(self) -> set[int]:
        """The queued jobs whose dependency can never be satisfied: the core said so, or they wait
        for such a job (or a held one), which stays queued, a state no condition is met by."""
        dependent = self.index.dependent
        stuck = {i for i, job in dependent.items() if job.wait_reason.startswith(NEVER_SATISFIED)}
        stuck.update(self.index.held)
        grew = True
        while grew:
            grew = False
            for job_id, job in dependent.items():
                if job_id in stuck or job.dependency is None or not job.wait_reason.startswith(DEPENDENCY):
                    continue  # (one not waiting for its dependency has it satisfied)
                named = [*job.dependency.job_ids(), *self._whole_array_tasks(job.dependency)]
                gone = self.finished
                if (
                    any(n in stuck for n in named)
                    if not job.dependency.any_of
                    else all(n in stuck or n in gone for n in named)
                ):
                    stuck.add(job_id)
                    grew = True
        return stuck

    def _whole_array_tasks(self, dependency: Dependency) -> list[int]:
        return [task for _, array_id in dependency.arrays for task in self.array_tasks.get(array_id, ())]

    def _follow_up(self, decisions: Decisions) -> bool:
        """Whether the next tick's pass could decide something new although no event comes: after
        a drain (the shutdown follows), a shutdown or a job's end (room or budget freed), a boot
        that failed or hit the per-pass limit, boots while work is queued (the planner then sees
        booting instances where it planned new ones), when the placer says a waiting job may fit
        after what it placed (`Decisions.revisit`), or when a job some dependency names was placed
        (it starts at once without a start latency, and `after:` waits for a start). Anything else
        changes nothing the pass reads: a waiting job still finds no room, and only waits longer
        (until the clock moves backfill's reservation: `Decisions.revisit_from`, which `run` waits
        for)."""
        trouble, self._boot_trouble = self._boot_trouble, False
        return bool(
            decisions.job_outcomes
            or any(d.action is NodeAction.START_DRAIN for d in decisions.node_decisions)
            or (self.queued and decisions.node_decisions)
            or trouble
            or len(decisions.boots) >= self.policy.boot.max_boots_per_pass
            or (self.queued and (decisions.boots or decisions.revisit))
            or (self.named and any(p.job_id in self.named for p in decisions.placements))
        )

    def _advance(self, until: float) -> None:
        """Apply arrivals and events up to `until`, each at its own time."""
        specs, events = self.specs, self.events
        count = len(specs)
        while True:
            arrival = specs[self._next_arrival].submit if self._next_arrival < count else math.inf
            event = events[0][0] if events else math.inf
            if arrival > until and event > until:
                return
            if arrival <= event:
                self.now = arrival
                self._arrive(specs[self._next_arrival])
                self._next_arrival += 1
            else:
                time, kind, _seq, ref = heapq.heappop(events)
                self.now = time
                self._handle(kind, ref, time)

    def _pass(self, now: float) -> Decisions:
        leaves = self.on_pass is not None or self.check_index
        if leaves:
            # The core reads pinging nodes as heard from now (the index's promise); a snapshot
            # that leaves the simulator shows it as the live loop's would.
            for node in self.pinging.values():
                node.last_ping_at = now
        # A pass reads the live views and changes nothing (the simulator changes them when it
        # carries the decisions out, after the pass); a snapshot that leaves gets copies.
        jobs, attempts, nodes = self.jobs.values(), self.attempts.values(), self.nodes.values()
        snapshot = Snapshot(
            jobs=list(jobs) if leaves else jobs,
            attempts=list(attempts) if leaves else attempts,
            nodes=list(nodes) if leaves else nodes,
            instance_types=self.types,
            dispatcher_id=DISPATCHER,
            unavailable_types=self.unavailable,
            boot_failures=dict(self.boot_failures) if leaves else self.boot_failures,
            observing_since=self.start_time,
            index=self.index,
            away=list(self.away.values()) if self.away else (),
            finished=dict(self.finished) if leaves else self.finished,
            array_tasks=self.array_tasks,
            fairshare_usage=self._usage(now) if self.fairshare is not None else {},
        )
        if self.check_index:
            self._check_index(snapshot, now)
        started = perf_counter()
        decisions = plan_pass(snapshot, now, self.policy, self.placer, self.planner)
        self.times.passes += perf_counter() - started
        if self.on_pass is not None:
            self.on_pass(snapshot, now, decisions)
        self._apply(decisions, now)
        counters = self.counters
        counters.passes += 1
        if decisions.explanations:
            counters.explained += 1
        fleet = len(self.nodes)
        counters.peak_fleet = max(counters.peak_fleet, fleet)
        counters.peak_queue = max(counters.peak_queue, self.queued)
        trace = self.trace
        trace.time.append(now)
        trace.fleet.append(fleet)
        trace.queued.append(self.queued)
        trace.running.append(len(self.attempts))
        trace.busy_vcpus.append(self.busy_vcpus)
        trace.fleet_vcpus.append(self.fleet_vcpus)
        return decisions

    def _check_index(self, snapshot: Snapshot, now: float) -> None:
        """That the kept index is the one a live loop would build from this snapshot (a test aid)."""
        fresh = SnapshotIndex.of(dataclasses.replace(snapshot, index=None))
        if self.index.describe() != fresh.describe():
            raise AssertionError(f"the simulator's index differs from its snapshot's at t={now}")
        silent = self.index.silent or {}
        heard = [n.id for n in snapshot.nodes if n.id not in silent and n.last_ping_at != now]
        if heard or set(silent) != {n.id for n in snapshot.nodes if n.id not in self.pinging}:
            raise AssertionError(f"the simulator's silent nodes are wrong at t={now}: {heard}")

    # ---- carrying decisions out ----------------------------------------------------------------

    def _apply(self, decisions: Decisions, now: float) -> None:
        for outcome in decisions.job_outcomes:
            self._outcome(outcome, now)
        nodes = self.nodes
        for mark in decisions.node_marks:
            node = nodes.get(mark.node_id)
            if node is None:
                continue
            node.state = mark.state
            node.reason = mark.reason
            self.index.put_node(node)
            if mark.state is NodeState.IDLE:
                node.state_changed_at = now
                self._wake_idle(node, now)
        for held in decisions.node_reservations:  # as the live loop records it: an attribute
            node = nodes.get(held.node_id)
            if node is not None:
                node.attributes = {**node.attributes, FAILURE_RESERVED_UNTIL: repr(held.until)}
                self.index.put_node(node, reshaped=True)
                self._wake(held.until, W_RESERVED, held.node_id)
        for placement in decisions.placements:
            self._place(placement.job_id, placement.node_ids, now)
        # Types backed off after instances that did not pair (the core's decision, recorded as the
        # live loop records it: a pairing's end of a row first, then the new rows).
        for name in decisions.types_paired:
            self.boot_failures.pop(name, None)
        for backoff in decisions.type_backoffs:
            name = backoff.instance_type
            self.unavailable[name] = max(self.unavailable.get(name, 0.0), backoff.until)
            self.boot_failures[name] = BootFailures(backoff.failures, now)
            self.counters.boot_failures += 1
            self._wake(backoff.until, W_CAPACITY, name)
        jobs = self.jobs
        for note in decisions.annotations:
            job = jobs.get(note.job_id)
            if job is not None:
                job.wait_reason = note.wait_reason
                job.unplaceable = note.unplaceable
        for boot in decisions.boots:
            self._boot(boot.instance_type, now)
        for decision in decisions.node_decisions:
            node = nodes.get(decision.node_id)
            if node is None:
                continue
            if decision.action is NodeAction.START_DRAIN:
                node.state = NodeState.DRAINING
                node.reason = decision.reason
                self.index.put_node(node)
                self.counters.drains += 1
            else:
                self._shutdown(node, now)

    def _outcome(self, outcome: JobOutcome, now: float) -> None:
        job = self.jobs.get(outcome.job_id)
        if job is None:
            return
        ran: float | None = None  # a timed-out run: how long it ran, its run in the results
        for attempt_id in outcome.attempt_ids:
            attempt = self.attempts.get(attempt_id)
            if attempt is None:
                continue
            if outcome.timeout:
                attempt.state = AttemptState.TIMEOUT  # its recorded end, still to come, is ignored
                if attempt.started_at is not None:
                    ran = now - attempt.started_at
            elif outcome.state is JobState.CANCELLED and not outcome.temp_failure:
                attempt.state = AttemptState.CANCELLED
            elif outcome.temp_failure:
                attempt.state = AttemptState.TEMPFAIL
            else:
                attempt.state = AttemptState.EXITED
            self._end_attempt(attempt, now)
        if outcome.timeout:
            self.counters.timeouts += 1
        if outcome.temp_failure:
            job.temp_failures += 1
        if outcome.perm_failure:
            job.perm_failures += 1
        if outcome.exit_code is not None:
            job.exit_code, job.exit_signal = outcome.exit_code, outcome.exit_signal  # (as the store records them)
        job.claimed_by = None
        was_queued = job.state is JobState.QUEUED
        job.state = outcome.state
        job.held = bool(outcome.hold)
        if outcome.state is JobState.QUEUED:
            self.counters.requeues += 1
            # The run that ended is not the job's end: only that of the attempt it ends with is.
            self.ended_run.pop(job.id, None)
            if outcome.hold:
                # Nobody releases it in a simulation: it stays queued, held, and is counted among
                # the jobs that never finished, with this reason.
                job.wait_reason = outcome.hold
            job.retry_at = outcome.retry_at
            if outcome.retry_at is not None:
                self._wake(outcome.retry_at, W_JOB, job.id)
            if not was_queued:
                self.queued += 1
            self.index.put_job(job)
            return
        if was_queued:
            self.queued -= 1
        job.finished_at = now
        self.index.drop_job(job.id)
        if job.id in self.named:
            self.finished[job.id] = outcome.state
        spec = self.spec_of[job.id]
        ended = self.ended_run.pop(job.id, None)
        run = spec.run
        if ran is not None:
            ended, run = now, ran  # its run ended at its time limit (and grace)
        wait = None if ended is None else max(0.0, ended - spec.submit - run)
        self.records[job.id] = JobRecord(outcome.state, spec.submit, run, wait)
        self.last_finish = max(self.last_finish, now)

    def _usage(self, now: float) -> Mapping[str, float]:
        """Each user's fair-share usage as of the last calc time, as the live loop brings it up to
        date from the store's runs (`LiveLoop.fill_usage`)."""
        settings = self.fairshare
        assert settings is not None
        calc_time = fairshare.calc_time(now, settings)
        if calc_time > self.ledger.as_of:
            spans = [
                *self.ended_spans,
                *(self._span(a, None) for a in self.attempts.values() if a.started_at is not None),
            ]
            self.ledger = fairshare.advance(self.ledger, spans, calc_time, settings)
            self.ended_spans = fairshare.still_counting(self.ended_spans, calc_time)
        return self.ledger.usage

    def _span(self, attempt: Attempt, finished_at: float | None) -> AttemptSpan:
        assert attempt.started_at is not None
        user = self.spec_of[attempt.job_id].user
        return AttemptSpan(
            attempt.job_id, user, (), (), attempt.resources, attempt.started_at, finished_at, len(attempt.node_ids)
        )

    def _end_attempt(self, attempt: Attempt, now: float) -> None:
        attempt.finished_at = now
        if self.fairshare is not None and attempt.started_at is not None:
            self.ended_spans.append(self._span(attempt, now))
        self.index.drop_attempt(attempt.id)
        broke = self.doomed.pop(attempt.id, None)
        if broke is None and attempt.started_at is not None:
            self.busy_vcpus -= attempt.resources.vcpus * len(attempt.node_ids)  # (a doomed one's, at its failure)
        self._add_busy(self.busy_vcpu_seconds, attempt, now if broke is None else broke)
        self.busy_gpu_seconds += self._gpu_seconds(attempt, now if broke is None else broke)

    def busy_vcpu_seconds_until(self, end: float) -> dict[str, float]:
        """Busy vcpu-seconds per instance type: those of the attempts that ended, and of those
        still running at `end` (a run stopped at its horizon), up to it."""
        busy = dict(self.busy_vcpu_seconds)
        for attempt in self.attempts.values():
            self._add_busy(busy, attempt, self.doomed.get(attempt.id, end))
        return busy

    def busy_gpu_seconds_until(self, end: float) -> float:
        """GPU-seconds held by the attempts that ended, and by those still running at `end`, up to it."""
        return self.busy_gpu_seconds + sum(
            self._gpu_seconds(attempt, self.doomed.get(attempt.id, end)) for attempt in self.attempts.values()
        )

    def _gpu_seconds(self, attempt: Attempt, until: float) -> float:
        if attempt.started_at is None or not attempt.resources.gpus:
            return 0.0
        return max(0.0, until - attempt.started_at) * attempt.resources.gpus * len(attempt.node_ids)

    def _add_busy(self, busy: dict[str, float], attempt: Attempt, until: float) -> None:
        """The vcpu-seconds an attempt held from its start `until` (its end, its node's failure or
        the horizon), on each of its nodes' types."""
        if attempt.started_at is None:
            return
        held = max(0.0, until - attempt.started_at) * attempt.resources.vcpus
        for node_id in attempt.node_ids:
            node = self.nodes.get(node_id)
            name = node.instance_type if node is not None else self.taken_back[node_id]
            busy[name] = busy.get(name, 0.0) + held

    def _place(self, job_id: int, node_ids: tuple[str, ...], now: float) -> None:
        job = self.jobs[job_id]
        self._attempt_ids += 1
        attempt = Attempt(
            self._attempt_ids, job_id, list(node_ids), job.resources, dispatcher_id=DISPATCHER, assigned_at=now
        )
        self.index.put_attempt(attempt)
        if job.state is JobState.QUEUED:
            self.queued -= 1
        job.state = JobState.CLAIMED
        job.claimed_by = DISPATCHER
        self.index.put_job(job)
        job.attempt_count += 1
        self.counters.placements += 1
        latency = self.config.sim.start_latency
        if latency > 0:
            self._push(now + latency, START, attempt.id)
            if latency >= self.policy.dispatch.start_timeout:
                self._wake(now + self.policy.dispatch.start_timeout + EPS, W_START, attempt.id)
        else:
            self._start(attempt, now)

    def _boot(self, type_name: str, now: float) -> None:
        if not capacity.is_available(type_name, self.unavailable, now):
            # This pass already learnt the type has no capacity; the next pass plans around it.
            self.counters.boots_skipped_in_backoff += 1
            self._boot_trouble = True
            return
        itype = self.types_by_name[type_name]
        self._node_ids += 1
        node_id = f"n-{self._node_ids:06d}"
        try:
            instance = self.cloud.create(itype, node_id, f"sim-token-{node_id}", {})
        except InsufficientCapacity:
            self.counters.capacity_errors += 1
            self._boot_trouble = True
            until = capacity.record_insufficient_capacity(self.unavailable, type_name, now, self.policy.boot)
            self._wake(until, W_CAPACITY, type_name)
            return
        self.counters.boots += 1
        node = Node(
            node_id,
            itype.name,
            itype.capacity,
            itype.price_per_hour,
            NodeState.BOOTING,
            created_at=now,
            state_changed_at=now,
            billing_granularity=itype.billing_granularity,
            billing_minimum=itype.billing_minimum,
            attributes=dict(itype.attributes),
        )
        self.index.put_node(node)  # silent until it pairs
        self.fleet_vcpus += itype.vcpus
        self.instance_of[node_id] = instance.id
        ready = self.cloud.ready_at(instance.id)
        if ready is not None:
            self._push(ready, PAIR, node_id)
        fails = self.cloud.fails_at(instance.id)
        if fails < math.inf and (ready is None or fails > ready or self.cloud.reclaims(itype.name)):
            self._push_failure(fails, itype.name, node_id)
        self._wake(now + self.policy.lifecycle.boot_grace, W_BOOT, node_id)
        max_age = self.policy.lifecycle.max_node_age
        if max_age is not None:
            self._wake(now + max_age, W_EXPIRE, node_id)  # it leaves service then (the core decides)

    def _shutdown(self, node: Node, now: float) -> None:
        self.index.drop_node(node.id)
        self.fleet_vcpus -= node.capacity.vcpus
        self.pinging.pop(node.id, None)
        self.counters.shutdowns += 1
        instance_id = self.instance_of.pop(node.id, None)
        if instance_id is not None:
            self.cloud.destroy(instance_id)
        if self.fixed:
            self.away[node.id] = node  # down until repaired (the snapshot's `away`)
            self._push(now + self.config.sim.fleet.repair_time, REPAIR, node)

    def _add_fixed_node(self, itype: InstanceType, now: float, node_id: str | None = None) -> None:
        if node_id is None:
            self._node_ids += 1
            node_id = f"f-{self._node_ids:06d}"
        node = Node(
            node_id,
            itype.name,
            itype.capacity,
            itype.price_per_hour,
            NodeState.IDLE,
            created_at=now,
            paired_at=now,
            last_ping_at=now,
            state_changed_at=now,
            billing_granularity=itype.billing_granularity,
            billing_minimum=itype.billing_minimum,
            attributes=dict(itype.attributes),
        )
        self.index.put_node(node)
        self.fleet_vcpus += itype.vcpus
        self._set_pinging(node, True)
        fails = self.cloud.failure_at(itype.name, now)
        if fails < math.inf:
            self._push_failure(fails, itype.name, node_id)

    def _push_failure(self, at: float, type_name: str, node_id: str) -> None:
        """The node's random failure at `at`, and the cloud's notice ahead of it, if its type gets one."""
        self._push(at, FAIL, node_id)
        notice = self.config.sim.failures.notice_by_type.get(type_name)
        if notice:
            self._push(at - notice, NOTICE, (node_id, at))

    def _notice(self, node_id: str, fails_at: float) -> None:
        """The cloud's notice that it takes the node back at `fails_at`: the node is drained, as
        corral's server drains one whose agent hears it (corral.server.agent_api.interrupted)."""
        node = self.nodes.get(node_id)
        if node is None or node_id not in self.pinging:
            return  # not up (yet, or any more): no agent to hear it
        node.attributes = {**node.attributes, **drain.interruption(f"terminate at {fails_at:g}")}
        self.index.put_node(node, reshaped=True)
        self.counters.notices += 1
        # The type's spot capacity is short: backed off as the server backs it off (the same core call).
        name = node.instance_type
        until = capacity.record_interruption(self.unavailable, name, self.now, self.policy.boot)
        if until is not None:
            self.counters.interruption_backoffs += 1
            self._wake(until, W_CAPACITY, name)

    def _set_pinging(self, node: Node, pinging: bool) -> None:
        """The node's agent pings from now on, or went silent: in the simulator's own list (in the
        order agents came up, which scheduled failures draw from) and in the core's index."""
        if pinging:
            self.pinging[node.id] = node
        else:
            self.pinging.pop(node.id, None)
        self.index.heard(node.id, pinging)

    # ---- timers ------------------------------------------------------------------------------

    def _wake_idle(self, node: Node, now: float) -> None:
        if self.fixed and not idle_nodes_can_drain(self.policy, len(self.fixed_nodes)):
            return  # its idle grace running out changes no decision
        lifecycle = self.policy.lifecycle
        due = now + lifecycle.idle_grace
        may_drain = [due]  # the times from which a drain may come
        if not self.fixed:
            # A gang waiting for its other nodes holds this one only so long (corral.core.planner),
            # keeping it from a drain until then.
            may_drain.append(now + lifecycle.boot_grace)
        for start in may_drain:
            self._wake(start, W_IDLE, (node.id, now))
            # With coarse billing (or a long billing minimum) an idle node is drained only once its
            # billing window opens: the first time from then on.
            opens = billing_window_opens(node, start, lifecycle)
            if opens > start:
                self._wake(opens, W_IDLE, (node.id, now))

    # ---- the simulated users, agents and cloud -------------------------------------------------

    def _arrive(self, spec: SimJob) -> None:
        job = spec.to_job()
        self.queued += 1
        if spec.cancel_at is not None:
            if spec.cancel_at <= spec.submit:
                job.cancel_requested = True
            else:
                self._push(spec.cancel_at, CANCEL, job.id)
        self.index.put_job(job)
        if job.not_before is not None and job.not_before > spec.submit:
            self._wake(job.not_before, W_JOB, job.id)

    def _handle(self, kind: int, ref: object, now: float) -> None:
        if kind == END:
            assert isinstance(ref, int)
            self._end(ref, now)
        elif kind == PAIR:
            assert isinstance(ref, str)
            node = self.nodes.get(ref)
            if node is not None and node.state is NodeState.BOOTING:
                node.state = NodeState.IDLE
                node.paired_at = node.last_ping_at = node.state_changed_at = now
                self.index.put_node(node)
                self._set_pinging(node, True)
                self._wake_idle(node, now)
        elif kind == START:
            assert isinstance(ref, int)
            attempt = self.attempts.get(ref)
            if attempt is not None:
                self._start(attempt, now)
        elif kind == FAIL:
            assert isinstance(ref, str)
            self._fail(ref, now)
        elif kind == CANCEL:
            assert isinstance(ref, int)
            job = self.jobs.get(ref)
            if job is not None:
                job.cancel_requested = True
                self.index.put_job(job)
        elif kind == REPAIR:
            assert isinstance(ref, Node)
            self.away.pop(ref.id, None)
            self._add_fixed_node(self.types_by_name[ref.instance_type], now, ref.id)
        elif kind == SCHEDULED_FAIL:
            assert isinstance(ref, ScheduledFailure)
            self._scheduled_failure(ref, now)
        elif kind == NOTICE:
            assert isinstance(ref, tuple)
            self._notice(*ref)

    def _start(self, attempt: Attempt, now: float) -> None:
        if attempt.state is not AttemptState.ASSIGNED or any(n not in self.pinging for n in attempt.node_ids):
            return  # an agent that is down starts nothing; the core times the attempt out
        attempt.state = AttemptState.RUNNING
        attempt.started_at = now
        self.busy_vcpus += attempt.resources.vcpus * len(attempt.node_ids)
        self.index.put_attempt(attempt)
        job = self.jobs[attempt.job_id]
        job.state = JobState.RUNNING
        self.index.put_job(job)
        if job.started_at is None:
            job.started_at = now
        self._push(now + self.spec_of[job.id].run, END, attempt.id)

    def _end(self, attempt_id: int, now: float) -> None:
        attempt = self.attempts.get(attempt_id)
        if attempt is None or attempt.state is not AttemptState.RUNNING or attempt_id in self.doomed:
            return
        job = self.jobs[attempt.job_id]
        spec = self.spec_of[job.id]
        self.ended_run[job.id] = now
        if spec.cancel_on_end:
            job.cancel_requested = True  # the user cancels it; the next pass does the rest
            self.index.put_job(job)
            return
        attempt.state = AttemptState.EXITED
        attempt.exit_code = spec.exit_code
        self._end_attempt(attempt, now)
        self._outcome(retry.after_exit(job, spec.exit_code, (attempt.id,)), now)

    def _fail(self, node_id: str, now: float) -> None:
        node = self.nodes.get(node_id)
        if node is None:
            return
        instance_id = self.instance_of.get(node_id)
        if instance_id is not None and self.cloud.reclaims(node.instance_type):
            self._reclaimed(node, instance_id, now)
            return
        if node_id not in self.pinging:
            return
        self._set_pinging(node, False)
        node.last_ping_at = now
        self.counters.node_failures += 1
        if instance_id is not None:
            self.cloud.fail(instance_id)
        self._doom_work(node_id, now)
        self._wake(now + self.policy.lifecycle.ping_stale + EPS, W_STALE, node_id)

    def _reclaimed(self, node: Node, instance_id: str, now: float) -> None:
        """The cloud takes a spot instance back (EC2 terminates it): it is gone from the cloud's
        listing and billed no more, booting or not. The live loop's next listing finds its
        instance vanished and ends the node (ControlLoop.sync_cloud); so does this, and the next
        pass finds its work on a node that is gone, lost (the core's node-failure policy)."""
        self.cloud.reclaim(instance_id)
        self.instance_of.pop(node.id, None)
        self.taken_back[node.id] = node.instance_type
        self.counters.node_failures += 1
        self.counters.reclaims += 1
        self._doom_work(node.id, now)
        self.index.drop_node(node.id)
        self.fleet_vcpus -= node.capacity.vcpus
        self.pinging.pop(node.id, None)
        self._wake(now, W_RECLAIMED, node.id)

    def _doom_work(self, node_id: str, now: float) -> None:
        """The attempts on a failed node: their exits are never reported, and they did no work from
        now (though the core learns of it later)."""
        for attempt in self.attempts.values():
            if node_id in attempt.node_ids and attempt.id not in self.doomed:
                self.doomed[attempt.id] = now
                if attempt.started_at is not None:
                    self.busy_vcpus -= attempt.resources.vcpus * len(attempt.node_ids)
                if attempt.state is AttemptState.RUNNING and attempt.started_at is not None:
                    done = (now - attempt.started_at) * attempt.resources.vcpus * len(attempt.node_ids)
                    self.counters.lost_vcpu_seconds += done

    def _scheduled_failure(self, failure: ScheduledFailure, now: float) -> None:
        wanted = failure.instance_type
        candidates = [n.id for n in self.pinging.values() if wanted in ("*", n.instance_type)]
        for node_id in self.cloud.choose(candidates, failure.count):
            self._fail(node_id, now)
