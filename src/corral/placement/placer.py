"""The placer plugged into `plan_pass`: the queue in order, each job through the engine, with EASY
backfill (or strict FIFO, or none) where capacity is bounded.

Bounded or elastic, per job (`queue.capacity = "auto"`): in an elastic fleet a job that does not
fit now gets a new instance from the boot planner, so holding running nodes back for it would only
idle them; a reservation is made only when no instance can be booted for the job: no instance
types, `max_instances` reached, its instances past `max_vcpus` or `max_cost_per_hour`
(`corral.core.limits`), or every type that could hold it (by the same filters) in capacity
back-off or at its own `max_instances`. `bounded` and `elastic` force one or the other.

Build a placer once per configuration with `make_placer`. Between passes it keeps what the nodes
say about themselves (`FleetFacts`), which instance types can take which request (`TypeFits`),
the work on the nodes and the engine over it, and where the last pass's queue loop stood
(`QueueWalk`), each while what it was worked out from is unchanged; every decision is the one a
fresh placer would make.
"""

from __future__ import annotations

import functools
import math
import operator
from collections import Counter
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from corral.core.limits import LiveFleet, SpendLimits
from corral.core.model import Job, Node, NodeState, Resources
from corral.core.snapshot import Placement, PlacementResult, Snapshot
from corral.placement import attributes as attr
from corral.placement.arrays import Bools, FleetFacts, Floats, Ints, NodeArrays, fleet_signature
from corral.placement.backfill import (
    LastReservation,
    Reservation,
    RunningEnds,
    Timeline,
    end_time,
    ending_reservations,
    reserve,
)
from corral.placement.boot import TypeRanker
from corral.placement.collector import collector_paused
from corral.placement.demand import Demand
from corral.placement.engine import Choice, Engine
from corral.placement.explain import explain
from corral.placement.lifetime import CostGate, GatePrices, Offers, gate_settings, offers
from corral.placement.locality import LocalityIndex
from corral.placement.roster import Roster
from corral.placement.settings import PlacementSettings, coerce
from corral.placement.work import WorkLedger

if TYPE_CHECKING:
    from corral.core.index import SnapshotIndex
    from corral.core.reconcile import Placer
    from corral.core.settings import PolicySettings

# Full explanations (every filter's sentence, nearest node) per pass; past this, unplaced jobs get
# the counts and the one-line reason only, so a queue of thousands of distinct misfits stays fast.
FULL_EXPLANATIONS_PER_PASS = 200


class Capacity:
    """Whether a job that does not fit now can expect a new instance (elastic) or must wait for
    running work to end (bounded)."""

    def __init__(
        self,
        snapshot: Snapshot,
        settings: PlacementSettings,
        max_instances: int | None,
        now: float,
        memo: FactsMemo | None = None,
        engine: Engine | None = None,
        limits: SpendLimits | None = None,
    ) -> None:
        self.engine = engine  # whose locality index says where a job's strict `near` targets run
        self.mode = settings.queue.capacity
        self.live = live_count(snapshot)
        self.max_instances = max_instances
        # max_vcpus and max_cost_per_hour (corral.core.limits): a job whose instances would pass
        # one is bounded, as one past max_instances.
        self.limits = limits if limits is not None and limits.any else None
        self._snapshot, self._now = snapshot, now
        self._fleet: LiveFleet | None = None
        self._past_limits: dict[tuple[float, int, int, int, int], bool] = {}
        self.has_types = bool(snapshot.instance_types)
        # Instance types' own max_instances (corral.core.planner): a job that only types at their
        # caps hold is bounded, as one past max_instances; and a type at its cap is no offer of a
        # new instance (to the cost gate, as a type in back-off). (None: no type has a cap.)
        self._type_room: dict[str, int] | None = None
        at_cap: frozenset[str] = frozenset()
        if any(t.max_instances is not None for t in snapshot.instance_types):
            self._type_room = type_room(snapshot)
            at_cap = frozenset(name for name, room in self._type_room.items() if room <= 0)
        self._past_caps: dict[tuple[object, int], bool] = {}
        self.fits = (memo or FactsMemo(settings)).type_fits(snapshot, now, at_cap)
        # Every demand is bounded (a fixed fleet: nothing can be booted): no need to ask per job.
        self.all_bounded = self.mode == "bounded" or (
            self.mode == "auto"
            and (not self.has_types or (max_instances is not None and self.live + 1 > max_instances))
        )

    def bounded_for(self, demand: Demand) -> bool:
        if self.all_bounded:
            return True
        if self.mode != "auto":
            return False  # elastic
        if self.max_instances is not None and self.live + demand.node_count > self.max_instances:
            return True
        if self.limits is not None and self._past_spend_limits(demand):
            return True
        if self._type_room is not None and self._past_type_caps(demand):
            return True
        return not self.fits.any_fits(demand) or self._pinned_to_running(demand)

    def _past_type_caps(self, demand: Demand) -> bool:
        """Whether the types that could hold the demand (by the filters, not backed off) have room
        under their own max_instances for fewer instances than it needs."""
        key = (demand.key[:4], demand.node_count)
        past = self._past_caps.get(key)
        if past is None:
            assert self._type_room is not None
            accepted, unavailable = self.fits.accepting(demand), self.fits.unavailable
            room = sum(
                self._type_room.get(t.name, math.inf)
                for t in self.fits.types
                if t.name in accepted and t.name not in unavailable
            )
            past = self._past_caps[key] = room < demand.node_count
        return past

    def _past_spend_limits(self, demand: Demand) -> bool:
        """Whether the instances the boot planner would boot for the demand (its cheapest type that
        has the room and is not backed off) would take the fleet past a limit."""
        request = demand.resources
        key = (request.vcpus, request.ram_mib, request.scratch_mib, request.gpus, demand.node_count)
        past = self._past_limits.get(key)
        if past is None:
            assert self.limits is not None
            snapshot, now = self._snapshot, self._now
            if self._fleet is None:
                gone = (NodeState.SHUTTING_DOWN, NodeState.GONE)
                self._fleet = LiveFleet.of(n for n in snapshot.nodes if n.state not in gone)
            room = self._type_room or {}
            holding = [
                t
                for t in snapshot.instance_types
                if request.fits_in(t.capacity)
                and snapshot.unavailable_types.get(t.name, 0.0) <= now
                and room.get(t.name, 1) > 0  # (the planner boots no type at its own cap)
            ]
            cheapest = min(holding, key=lambda t: t.price_per_hour, default=None)
            past = cheapest is not None and self.limits.refuses(self._fleet, cheapest, demand.node_count) is not None
            self._past_limits[key] = past
        return past

    def _pinned_to_running(self, demand: Demand) -> bool:
        """Strict `near` hints with a target running: only the targets' nodes (or racks) may take
        the job, and no new instance is either, so the pass boots none for it
        (`locality.pinned_to_running`). Taken for elastic, it got no reservation, and smaller jobs
        took each bit of room near its targets as it freed, for ever."""
        hints = demand.hints
        if hints is None or not hints.strict or not hints.near or self.engine is None:
            return False
        resolved = self.engine.resolve(demand)
        return resolved is not None and resolved.near.active


class TypeFits:
    """Whether some instance type could hold a demand now (`TypeRanker.any_fits`); the ranker is
    built lazily, and kept by a FactsMemo while the types, the back-offs in force, the types at
    their own max_instances and the types' own reservations are unchanged."""

    def __init__(
        self, snapshot: Snapshot, settings: PlacementSettings, now: float, at_cap: frozenset[str] = frozenset()
    ) -> None:
        self.types = list(snapshot.instance_types)
        self.unavailable = _not_bootable(snapshot, now, at_cap)
        self._settings = settings
        self._now = now
        self._ranker: TypeRanker | None = None
        self._offers: Offers | None = None
        self.prices = GatePrices()  # the cost gate's, of these offers
        reserved = [dict(t.attributes) for t in self.types if any(k == attr.RESERVATION for k, _ in t.attributes)]
        # (A reservation that starts later changes what these offers take then, too.)
        ends = [attr.number(a, key) for a in reserved for key in (attr.RESERVATION_UNTIL, attr.RESERVATION_START)]
        self._expires = min((end for end in ends if end > now), default=math.inf)

    def holds(self, snapshot: Snapshot, now: float, at_cap: frozenset[str] = frozenset()) -> bool:
        if now >= self._expires:
            return False
        return _not_bootable(snapshot, now, at_cap) == self.unavailable and snapshot.instance_types == self.types

    def offers(self) -> Offers:
        """The cost gate's offers (`lifetime.offers`): the same while this is kept."""
        if self._offers is None:
            self._offers = offers(self.types, self.unavailable, self._now)
        return self._offers

    def any_fits(self, demand: Demand) -> bool:
        return self._ranked().any_fits(demand)  # the ranker remembers each request's answer

    def accepting(self, demand: Demand) -> frozenset[str]:
        """The types whose new node the filters let the demand run on, back-offs aside."""
        return self._ranked().accepting(demand)

    def _ranked(self) -> TypeRanker:
        if self._ranker is None:
            self._ranker = TypeRanker(self.types, self._settings, now=self._now, unavailable=self.unavailable)
        return self._ranker


def live_count(snapshot: Snapshot) -> int:
    """Nodes that count against `max_instances` (not shutting down or gone)."""
    if snapshot.index is not None:
        by_state = snapshot.index.by_state
        return len(snapshot.index.nodes) - len(by_state[NodeState.SHUTTING_DOWN]) - len(by_state[NodeState.GONE])
    states = [n.state for n in snapshot.nodes]
    return len(states) - states.count(NodeState.SHUTTING_DOWN) - states.count(NodeState.GONE)


def _not_bootable(snapshot: Snapshot, now: float, at_cap: frozenset[str]) -> dict[str, float]:
    """The types no new instance of which the boot planner would boot now, and until when: those in
    capacity back-off, and those at their own max_instances (until one of their instances goes)."""
    found = {name: until for name, until in snapshot.unavailable_types.items() if until > now}
    for name in at_cap:
        found[name] = math.inf
    return found


def type_room(snapshot: Snapshot) -> dict[str, int]:
    """How many more instances each type with a max_instances of its own may have: its cap less its
    nodes not gone (a node shutting down still bills, and counts, as in the boot planner)."""
    live = Counter(n.instance_type for n in snapshot.nodes if n.state is not NodeState.GONE)
    return {
        t.name: max(0, t.max_instances - live[t.name]) for t in snapshot.instance_types if t.max_instances is not None
    }


def make_placer(
    settings: PolicySettings | PlacementSettings | Mapping[str, Any] | None = None, *, explanations: bool = True
) -> Placer:
    """A Placer for `plan_pass`; build it once per configuration and keep it (see FactsMemo).
    `explanations`: see `place`."""
    placement = coerce(settings)
    boot = getattr(settings, "boot", None)
    max_instances: int | None = getattr(boot, "max_instances", None)
    limits: SpendLimits | None = boot.spend_limits() if boot is not None else None
    memo = FactsMemo(placement)

    def placer(
        snapshot: Snapshot, queue: Sequence[Job], nodes: Sequence[Node], free: dict[str, Resources] | None, now: float
    ) -> PlacementResult:
        return place(
            snapshot,
            queue,
            nodes,
            free,
            now,
            placement,
            max_instances=max_instances,
            memo=memo,
            explanations=explanations,
            limits=limits,
        )

    return placer


class FactsMemo:
    """The last pass's FleetFacts and TypeFits, for as long as they describe the next pass, and
    the work on the nodes (a WorkLedger, updated every pass where attempts changed)."""

    def __init__(self, settings: PlacementSettings) -> None:
        self.settings = settings
        self.signature: list[tuple[object, ...]] | None = []  # None: not worked out (the index said)
        self.facts: FleetFacts | None = None
        self.fleet: tuple[SnapshotIndex, int] | None = None  # the kept index and version the facts are of
        self.fits: TypeFits | None = None
        self.work = new_ledger(settings)
        self.running = RunningEnds(settings.queue.default_time_limit)
        self.reservation = LastReservation(settings.queue.default_time_limit)
        self.demands = DemandMemo()
        self.walk: QueueWalk | None = None  # where the last pass's queue loop stood, if it may go on
        self.engine: Engine | None = None  # the last pass's, kept in step with `work`
        self.measured: tuple[tuple[object, int, FleetFacts], Measurements] | None = None
        self.roster: Roster | None = None
        self._weights = {name for name, weight in settings.weights.items() if weight}

    def engine_for(
        self, snapshot: Snapshot, nodes: Sequence[Node], now: float, jobs: Mapping[int, Job], slots: bool = False
    ) -> Engine:
        """The engine for this pass: the last pass's, renewed where the work on the nodes or their
        measurements changed, while the nodes are the same (the same FleetFacts); else a new one.
        `slots`: keep node slots (a Roster) over the kept index's nodes, if the caller hands over
        its schedulable list, instead of positions in the list (no explanations over slots)."""
        index = snapshot.index
        kept = self.engine
        if slots and index is not None and nodes is index.schedulable() and "price" not in self._weights:
            change = self.roster.update(index, now) if self.roster is not None else None
            roster = (
                self.roster if change is not None and self.roster is not None else Roster(index, self.settings, now)
            )
            self.roster = roster
            engine = build_engine(
                snapshot,
                roster.nodes,
                None,
                now,
                self.settings,
                roster.facts,
                jobs,
                self.work,
                kept,
                (roster.used_at, roster.used),
            )
            if engine is kept and change is not None and change.changed:
                if change.relisted:
                    engine.refleet(change.filled, change.grew)
                else:
                    # Only nodes that take no work came, went or changed: the state filter keeps
                    # them out, and the fleet's scales are over the others, so nothing a placement
                    # reads changed but the room of new slots (read when they take work).
                    engine.arrays.fill(change.filled)
            self.engine = engine
            return engine
        self.roster = None
        facts = self.facts_for(nodes, now, index)
        if index is not None and nodes is index.schedulable():
            # The index says whether any node brought a new measurement since the lists were read.
            key = (index, index.measured_version, facts)
            if self.measured is None or self.measured[0] != key:
                self.measured = (key, measurements(nodes))
            measured: Measurements | None = self.measured[1]
        else:
            measured = None
        engine = build_engine(snapshot, nodes, None, now, self.settings, facts, jobs, self.work, kept, measured)
        self.engine = engine
        return engine

    def facts_for(self, nodes: Sequence[Node], now: float, index: SnapshotIndex | None = None) -> FleetFacts:
        """`index`: the snapshot's kept index, if any; while `nodes` is its unchanged schedulable
        list, the nodes need no comparing."""
        fleet = (index, index.fleet_version) if index is not None and nodes is index.schedulable() else None
        if fleet is not None:
            # The index says when the list changed (or a node was reshaped): no comparing.
            if self.facts is None or not self.facts.valid_at(now) or fleet != self.fleet:
                self.facts, self.signature = FleetFacts(nodes, self.settings, now), None
        elif self.facts is not None and self.facts.valid_at(now):
            signature = fleet_signature(nodes)
            if signature != self.signature:
                self.facts, self.signature = FleetFacts(nodes, self.settings, now), signature
        else:
            self.facts, self.signature = FleetFacts(nodes, self.settings, now), fleet_signature(nodes)
        self.fleet = fleet
        assert self.facts is not None
        return self.facts

    def type_fits(self, snapshot: Snapshot, now: float, at_cap: frozenset[str] = frozenset()) -> TypeFits:
        if self.fits is None or not self.fits.holds(snapshot, now, at_cap):
            self.fits = TypeFits(snapshot, self.settings, now, at_cap)
        return self.fits


Measurements = tuple[list[float | None], list[Resources]]


def measurements(nodes: Sequence[Node]) -> Measurements:
    """Each node's measurement time and measured use, in order."""
    return [node.used_at for node in nodes], [node.used for node in nodes]


def new_ledger(settings: PlacementSettings) -> WorkLedger:
    """A WorkLedger for the cost gate's run shares and the queue's default time limit."""
    return WorkLedger(settings.cost.run_fractions, settings.queue.default_time_limit)


@collector_paused
def build_engine(
    snapshot: Snapshot,
    nodes: Sequence[Node],
    free: MutableMapping[str, Resources] | None,
    now: float,
    settings: PlacementSettings,
    facts: FleetFacts | None = None,
    jobs: Mapping[int, Job] | None = None,
    work: WorkLedger | None = None,
    kept: Engine | None = None,
    measured: Measurements | None = None,
) -> Engine:
    """`jobs` is the snapshot's jobs by id, if the caller has it; `work` a ledger kept between
    passes (updated here for this pass); `kept` the engine of the ledger's last pass, renewed and
    returned if it was built over the same nodes (`facts`); `measured` the nodes' measurements,
    if the caller has them."""
    if jobs is None:
        jobs = {job.id: job for job in snapshot.jobs}
    if facts is None:
        facts = FleetFacts(nodes, settings, now)
    if work is None:
        work = new_ledger(settings)
    used_at, used = measured or measurements(nodes)
    load = work.update(facts.ids, facts.index, used_at, snapshot.attempts, jobs, snapshot.index, snapshot.ending)
    index = LocalityIndex(snapshot.jobs, snapshot.attempts, snapshot.nodes)
    if kept is not None and free is None and kept.free is None and kept.arrays.facts is facts:
        written = work.written
        if written is not None:
            was = kept.arrays.used
            remeasured = (
                [i for i, (u, w) in enumerate(zip(used, was, strict=True)) if u != w]
                if used is not was and used != was
                else []
            )
            kept.renew(now, load, written + remeasured, used, index, snapshot.instance_types, work.started)
            return kept
    arrays = NodeArrays(nodes, load, settings, now, free, facts)
    return Engine(arrays, settings, now=now, locality=index, instance_types=snapshot.instance_types, free=free)


@collector_paused  # see corral.placement.collector: full collections cost a quarter of a pass
def place(
    snapshot: Snapshot,
    queue: Sequence[Job],
    nodes: Sequence[Node],
    free: MutableMapping[str, Resources] | None,
    now: float,
    settings: PlacementSettings,
    *,
    max_instances: int | None = None,
    memo: FactsMemo | None = None,
    explanations: bool = True,
    limits: SpendLimits | None = None,
) -> PlacementResult:
    """Places `queue` in order. Without `explanations`, a job's details hold only where it went
    or the one-line reason it waits, in short (no per-filter explanation, kept scores or
    reservation details): the same placements, for a caller nobody asks why (the simulator)."""
    result = PlacementResult()
    if not queue:
        return result
    jobs = snapshot.index.jobs if snapshot.index is not None else {job.id: job for job in snapshot.jobs}
    work = memo.work if memo is not None else new_ledger(settings)
    if memo is not None and free is None:
        engine = memo.engine_for(snapshot, nodes, now, jobs, slots=not explanations)
    else:
        facts = memo.facts_for(nodes, now, snapshot.index) if memo is not None else None
        engine = build_engine(snapshot, nodes, free, now, settings, facts, jobs, work)
        if memo is not None:
            memo.engine = None  # its ledger moved on without it
    arrays = engine.arrays
    policy = settings.queue
    # Built only if a reservation is tried: from what runs, plus what this pass placed before.
    timeline = LazyTimeline(
        lambda: (
            memo.running.timeline(arrays.index, snapshot.attempts, jobs, now, snapshot.index, snapshot.ending)
            if memo is not None
            else Timeline.of_running(arrays, snapshot.attempts, jobs, now, policy.default_time_limit)
        )
    )
    capacity: Capacity | None = None
    # The queue comes in its order (corral.core.admission: by priority, submission, fair share...).
    ordered = list(queue)

    # Demands that found no node this pass: the one-line reason and the details of their jobs.
    no_room: dict[tuple[object, ...], tuple[str, dict[str, Any], Demand]] = {}
    full_explanations = 0
    blocker: Job | None = None
    reservation: Reservation | None = None
    reserved: tuple[Demand, Bools] | None = None  # the blocked job's demand and eligible nodes
    on_reserved = False  # work placed on a reserved node after the reservation was made
    examined_after_block = 0
    # Requests running work never makes room for (no reservation), with their eligible nodes.
    never_fits: dict[tuple[object, ...], tuple[Demand, Bools]] = {}
    # Bounded requests the reservation held back, with the engine version then: a job of the same
    # request is held back too while nothing has been placed since (the room it would need, the
    # reservation's spare and the nodes are the same; a job that ends before the reservation
    # starts is never held back).
    held_back: dict[tuple[object, ...], int] = {}
    # Cost gate (elastic jobs): built when first needed; placements made before then are replayed.
    gate: CostGate | None = None
    gated_by_cost = gate_settings(settings) is not None and bool(snapshot.instance_types)
    placed_before_gate: list[tuple[list[int], Demand]] = []
    # What a placement later in the queue may open for a job left waiting (`PlacementResult.revisit`):
    # a node that a request the cost gate kept off every node it fits still fits after it; or any
    # node, for a job with strict locality hints or one without shared filter work.
    refused: dict[tuple[object, ...], Demand] = {}
    any_node = False
    truncated = False

    def kept_off(demand: Demand) -> None:
        nonlocal any_node
        if engine.fitting_known(demand):
            refused[demand.key] = demand
        else:
            any_node = True

    held_jobs: list[tuple[Job, Demand]] = []  # jobs held back by the reservation

    def wait_for(reservation: Reservation, job: Job, demand: Demand) -> None:
        held_jobs.append((job, demand))
        if explanations:
            reason = f"would delay job {reservation.job_id}, which has {reservation.describe(arrays, now)}"
            _wait(result, job, reason, reservation=_reservation_json(reservation, arrays, now))
        else:
            _wait(result, job, f"would delay job {reservation.job_id}, which has a reservation")

    demands = memo.demands if memo is not None else DemandMemo()
    make: Callable[[NodeArrays, Demand, Bools, Timeline, float], Reservation | None]
    make = memo.reservation.reserve if memo is not None else _reserving_from(None, policy.default_time_limit)
    # Down nodes that come back (seed 002 §5.4.5, NODEDOWNSTATEDELAYTIME): reservations count them
    # from `now + node_down_delay`, which floats with the clock, so no kept reservation or walk
    # holds from one pass to the next while there are any.
    down: Bools | None = None
    if policy.node_down_delay is not None and not arrays.schedulable.all():
        marked = np.array([why == NodeState.DOWN.value for why in arrays.why_unschedulable], dtype=bool)
        if marked.any():
            down = marked
            make = _reserving_from(np.where(marked, now + policy.node_down_delay, -math.inf), policy.default_time_limit)
    not_examined = ""
    blocker_reason = ""  # the blocked job's reason before its reservation is described
    # Read once: the loop below runs for every queued job, pass after pass.
    backfill, max_job_test, default_limit = policy.backfill, policy.max_job_test, policy.default_time_limit
    # An admin reservation that starts later: each job's request carries when it would end.
    upcoming = arrays.has_upcoming
    reasons, details_of = result.reasons, result.details
    placed_after_block = 0
    resume_at = 0  # the position of the first job not walked over last pass (see QueueWalk)
    walk: QueueWalk | None = None
    if memo is not None:
        walk, memo.walk = memo.walk, None
    if walk is not None and not explanations and free is None and down is None:
        resumed: Reservation | None | Literal[False] = False
        if walk.bounded:
            capacity = Capacity(snapshot, settings, max_instances, now, memo, engine, limits)
        if capacity is None or capacity.all_bounded:
            resumed = walk.resume(engine, ordered, now, snapshot, make, timeline.built, default_limit, work.started)
        if resumed is False:
            capacity = None  # made when a job first needs it, as in any pass
        else:
            resume_at = len(walk.waiting)
            # The walk's own copies (nothing else holds them, and nothing is recorded yet): taken
            # over, not copied again.
            result.reasons, result.details = reasons, details_of = walk.reasons, walk.details
            held_jobs = walk.held
            no_room, never_fits, held_back = walk.no_room, walk.never_fits, walk.held_back
            blocker, blocker_reason, reservation, reserved = walk.blocker, walk.blocker_reason, resumed, walk.reserved
            examined_after_block, truncated, not_examined = walk.examined_after_block, walk.truncated, walk.not_examined
            if blocker is not None and reservation is not None:
                # The one verdict that reads the clock: how soon the reservation starts.
                reason = f"{blocker_reason}; {reservation.describe(arrays, now, backfill)}"
                reasons[blocker.id] = reason
                details_of[blocker.id] = {**details_of[blocker.id], "reason": reason}
    kept_demands = demands.kept
    for position, job in enumerate(ordered[resume_at:] if resume_at else ordered, resume_at):
        # DemandMemo.of and Capacity.bounded_for, inlined for the usual case: this loop runs for
        # every job of a long queue whenever the walk starts from its head.
        kept = kept_demands.get(job.id)
        demand = kept[1] if kept is not None and kept[0] is job else demands.of(job)
        if upcoming:
            demand = demand.ending_by(end_time(now, demand.time_limit, default_limit, now))
        bounded = False
        if blocker is not None and capacity is not None:
            bounded = capacity.all_bounded or capacity.bounded_for(demand)
            if bounded:
                # Competes with the blocked job for the same fixed capacity.
                if backfill == "strict-fifo":
                    _wait(result, job, f"waiting behind job {blocker.id} (strict FIFO)", blocked_by=blocker.id)
                    continue
                examined_after_block += 1
                if examined_after_block > max_job_test:
                    truncated = True
                    not_examined = not_examined or (
                        f"not examined this pass: backfill looks at {max_job_test} jobs after job {blocker.id}"
                    )
                    if not capacity.all_bounded:
                        _wait(result, job, not_examined, blocked_by=blocker.id)
                        continue
                    # Every job from here on is bounded too, and not examined: no look at each.
                    for later in ordered[position:]:
                        _wait(result, later, not_examined, blocked_by=blocker.id)
                    break
        # A request found to fit nowhere earlier in this pass (capacity only shrinks within it;
        # requests with strict hints are never filed there) goes straight to its record: the
        # usual job of a long queue. Its reservation, if it is bounded, was tried with the first.
        misfit_record = no_room.get(demand.key)
        if misfit_record is not None:
            reasons[job.id] = misfit_record[0]
            details_of[job.id] = {**misfit_record[1], "job": job.id}
            continue
        # One that fit nowhere in an earlier pass, with nothing since that makes room: no look.
        remembered = engine.misfit(demand)
        fits_nowhere = remembered is not None
        end = end_time(now, demand.time_limit, default_limit, now) if not fits_nowhere else math.inf
        exclude = None
        # A job a new instance could serve is not held back, but it may not delay the reservation
        # either (strict FIFO: it keeps off the reserved nodes altogether).
        if reservation is not None and not fits_nowhere:
            if bounded and end > reservation.start and held_back.get(demand.key) == engine.version:
                wait_for(reservation, job, demand)
                continue
            exclude = (
                reservation.held
                if backfill == "strict-fifo"
                else reservation.holds_back(arrays, demand.vector, end, demand.exclusive)
            )

        costly = None
        chosen_first: Choice | None | Literal[False] = False  # the choice, made before the gate's mask
        if (
            gated_by_cost
            and not fits_nowhere
            and (demand.time_limit is not None or policy.default_time_limit is not None)
        ):
            # Only a job the boot planner can serve is kept off running nodes (by the same filters
            # as everywhere, so a trait no instance type has keeps it bounded).
            capacity = capacity or Capacity(snapshot, settings, max_instances, now, memo, engine, limits)
            if not capacity.bounded_for(demand):
                if gate is None:
                    gate = _cost_gate(capacity.fits, arrays, work.latest_ends(), now, settings, placed_before_gate)
                if exclude is None and demand.node_count == 1 and engine.still_refused(demand, gate):
                    kept_off(demand)
                    _wait(result, job, COSTLY_REASON)
                    continue
                fitting = functools.partial(_few_fitting, engine, demand)
                if demand.node_count == 1 and not explanations and engine.fitting_known(demand):
                    # The job's best node, the gate aside: if the gate lets the job onto it, it is
                    # the best the gate leaves (and if no node fits, the gate has no say).
                    chosen_first = engine.choose(demand, exclude, keep_top=False)
                    if chosen_first is not None and gate.verdict(demand, chosen_first.nodes[0]) is not False:
                        costly = gate.exclude(demand, fitting)  # not clearly let on: the mask says
                        if costly is not None and costly[chosen_first.nodes[0]]:
                            # The best of the nodes the gate leaves, below; None if it leaves none
                            # (counting costs less than ranking, and a job the gate keeps off its
                            # best node it usually keeps off all).
                            leaves_some = engine.placeable(demand, _either(exclude, costly))[0]
                            chosen_first = False if leaves_some else None
                else:
                    costly = gate.exclude(demand, fitting)
        if chosen_first is not False:
            choice = chosen_first
        else:
            choice = None if fits_nowhere else engine.choose(demand, _either(exclude, costly), keep_top=explanations)
        if choice is not None:
            engine.commit(demand, choice.nodes, job.tags)
            if any_node or any(engine.fits_on(other, choice.nodes) for other in refused.values()):
                result.revisit = True
            if gate is not None:
                gate.placed(choice.nodes, demand)
            elif gated_by_cost:
                placed_before_gate.append((choice.nodes, demand))
            result.placements.append(Placement(job.id, tuple(arrays.ids[i] for i in choice.nodes)))
            placed: dict[str, Any] = {"job": job.id, "placed_on": [arrays.ids[i] for i in choice.nodes]}
            if explanations:
                placed["top"] = choice.top
                if choice.evaluation.notes:
                    placed["notes"] = choice.evaluation.notes
            result.details[job.id] = placed
            if backfill != "none":
                timeline.add_later(end, choice.nodes, demand.amounts)
            if blocker is not None:
                placed_after_block += 1
            if reservation is not None and backfill == "easy":
                reservation.take(choice.nodes, demand.vector, end)
                held = reservation.held
                on_reserved = on_reserved or any(held[i] for i in choice.nodes)
            continue

        # Not placed: kept off running nodes by cost, held back by the reservation, or no node fits now.
        if demand.hints is not None and demand.hints.strict:
            any_node = True  # a target placed later may open a node for it
        # (A mask and `chosen_first` None: the job's best node fit outside the reservation's, so it fits.)
        if costly is not None and (chosen_first is None or engine.evaluate(demand, exclude).count >= demand.node_count):
            if exclude is None and gate is not None:
                engine.note_refused(demand, gate)
            kept_off(demand)
            _wait(result, job, COSTLY_REASON)
            continue
        if exclude is not None and engine.evaluate(demand).count >= demand.node_count:
            assert reservation is not None
            if bounded and demand.hints is None:
                held_back[demand.key] = engine.version
            wait_for(reservation, job, demand)
            continue
        quick = not explanations or full_explanations >= FULL_EXPLANATIONS_PER_PASS
        if remembered is not None and remembered.version == engine.version and remembered.quick == quick:
            known_misfit = remembered.explanation  # nothing changed on the nodes since it was made
        else:
            known_misfit = explain(engine, demand, quick=quick) if explanations else UNEXPLAINED
        full_explanations += not quick
        if not (demand.hints is not None and demand.hints.strict):
            # Capacity only shrinks within a pass, so the same demand will not fit later in it;
            # strict hints are the exception (a target placed later may open a node).
            _file_misfit(no_room, engine, demand, known_misfit, quick)
        # Shared by every job of this demand; only top-level keys are set per job below.
        details = dict(known_misfit)
        details["job"] = job.id
        reason = details["reason"] or "waiting for resources"

        if blocker is None and backfill != "none":
            capacity = capacity or Capacity(snapshot, settings, max_instances, now, memo, engine, limits)
            if capacity.bounded_for(demand):
                eligible = engine.static_mask(demand)
                if down is not None:
                    eligible = eligible | (down & engine.static_mask_but_state(demand))
                ending = ending_reservations(arrays)
                if ending is not None:
                    # Held by an admin reservation that ends: from its end the node takes any job.
                    eligible = eligible | (ending & engine.static_mask_but_reservation(demand))
                strict = engine.resolve(demand)
                if strict is not None and strict.hints.strict and engine.locality_filter:
                    allowed = strict.allowed()
                    if allowed is not None:
                        eligible = eligible & allowed
                # A demand that running work never makes room for stays so for the whole pass
                # (work placed later only adds load), so it is tried once.
                found = None if demand.key in never_fits else make(arrays, demand, eligible, timeline.built(), now)
                if found is None:
                    never_fits[demand.key] = (demand, eligible)
                if found is not None:
                    blocker, reservation = job, found
                    reserved = (demand, eligible)
                    blocker_reason = reason
                    reason += f"; {found.describe(arrays, now, backfill)}"
                    if explanations:
                        details["reservation"] = _reservation_json(found, arrays, now)
                    details["reason"] = reason
        reasons[job.id] = reason
        details_of[job.id] = details
    if truncated and result.placements:
        result.revisit = True  # the jobs looked at next pass are others
    if reserved is not None:
        assert reservation is not None  # made with `reserved`
        blocker_demand, eligible = reserved
        if not result.revisit and on_reserved:
            # The reservation made afresh next pass, with the work placed after it among what
            # runs, may hold other room than the one kept up to date here (a reserved node that
            # took work ending before the start may first fit later, and lose a tie). If it holds
            # the same, the jobs left waiting meet the same reservation and less room. Work placed
            # only on other nodes changes nothing of it: their first fits only move later (their
            # room at any time only shrinks), after the reserved nodes' in (time, position) order.
            result.revisit = not reservation.same_as(make(arrays, blocker_demand, eligible, timeline.built(), now))
        # Before its start, only the clock reaching it moves the reservation; from then on (work
        # past its limit is taken to end now) only the clock passing another end of running work
        # on a node it may use.
        # Or, on a node a window closes later, the clock passing the last start that ends by then.
        start = reservation.start
        result.revisit_from = (
            start if start > now else min(timeline.built().next_end(now, eligible), reservation.open_until)
        )
    if (
        memo is not None
        and not explanations
        and free is None
        and down is None
        and not result.revisit
        and not any_node
        and (capacity is None or capacity.all_bounded)
    ):
        # No cost gate and no strict locality hints: a later pass over the engine as this one
        # leaves it gives the jobs left waiting the same verdicts (see QueueWalk).
        waiting, left_details = ordered, dict(details_of)
        if result.placements:
            placed_ids = {p.job_id for p in result.placements}
            waiting = [job for job in ordered if job.id not in placed_ids]
            for job_id in placed_ids:
                del left_details[job_id]
        memo.walk = QueueWalk(
            engine,
            engine.refleets,
            bool(result.placements),
            waiting,
            dict(reasons),
            left_details,
            held_jobs,
            capacity is not None,
            no_room,
            never_fits,
            held_back,
            blocker,
            blocker_reason,
            reservation,
            reserved,
            examined_after_block - placed_after_block,  # what the next pass counts of these jobs
            truncated,
            not_examined,
        )
    demands.prune(ordered)
    return result


@dataclass(slots=True)
class QueueWalk:
    """Where `place`'s queue loop stood at the end of a pass without explanations, a cost gate,
    strict locality hints or a follow-up asked for (`PlacementResult.revisit`), with only bounded
    requests or no capacity question at all. The next pass over the same engine and nodes, whose
    queue begins with the jobs that pass left waiting, in the same order, starts its loop at the
    first new job with this state, if a fresh loop would give those jobs the same verdicts:
    - when the engine's work figures are as that pass left them (`Engine.as_left`: its placements
      carried out, nothing else), a job that fit nowhere still fits nowhere (room only shrank, and
      no filter reads the clock);
    - when work ended, came or was measured since, every request that fit nowhere must still fit
      nowhere (the engine's kept misfits look at the nodes changed since), and each one no
      reservation could be made for must still have none;
    - the reservation is made again and must be the same, when anything changed (work that
      started since moved its expected end, though not its node's room) or it has started;
    - a job it held back ends later still: held back again if it fits somewhere, but only on nodes
      it would delay; fitting nowhere if it fits nowhere; and if it fits a node it would not
      delay, the loop starts from the head (looked at when anything changed).
    Only the blocked job's reason, which says how soon its reservation starts, is written again.
    So a pass that only adds jobs at the queue's end, or follows an end of work that makes room
    for none of the jobs already waiting, walks the new jobs only, not the whole queue."""

    engine: Engine
    refleets: int  # the engine's, then: its nodes' facts are the same while it is
    placed: bool  # the pass placed jobs: the held-back ones need a look
    waiting: list[Job]
    reasons: dict[int, str]
    details: dict[int, dict[str, Any]]
    held: list[tuple[Job, Demand]]
    bounded: bool  # a Capacity was made (every request bounded)
    no_room: dict[tuple[object, ...], tuple[str, dict[str, Any], Demand]]  # misfits, with a demand of each
    never_fits: dict[tuple[object, ...], tuple[Demand, Bools]]
    held_back: dict[tuple[object, ...], int]
    blocker: Job | None
    blocker_reason: str
    reservation: Reservation | None
    reserved: tuple[Demand, Bools] | None
    examined_after_block: int
    truncated: bool
    not_examined: str

    def resume(
        self,
        engine: Engine,
        ordered: Sequence[Job],
        now: float,
        snapshot: Snapshot,
        make: Callable[[NodeArrays, Demand, Bools, Timeline, float], Reservation | None],
        timeline: Callable[[], Timeline],
        default_limit: float | None,
        started: bool,
    ) -> Reservation | None | Literal[False]:
        """The reservation in force if the pass at `now` may start where this walk ended (the
        verdicts of held-back jobs brought up to date); False if it may not. `started`: work
        started since that pass (its end moved from its assignment's time limit to its start's)."""
        waiting = self.waiting
        if not (
            engine is self.engine
            and engine.refleets == self.refleets
            and not snapshot.ending
            and len(ordered) >= len(waiting)
            and all(map(operator.is_, ordered, waiting))
        ):
            return False
        # Node figures moved since the verdicts: by this walk's own placements only (room only
        # shrank), or by work that ended, came or was measured, after which every request that
        # fit nowhere must still fit nowhere (the engine's kept misfits look at the nodes changed
        # since), and one that had no reservation must have none still. Work that started moved
        # its end, which the reservation counts, though not the room.
        moved = self.placed or not engine.as_left or started
        if not engine.as_left and (
            any(engine.misfit(demand) is None for _, _, demand in self.no_room.values())
            or any(
                make(engine.arrays, demand, eligible, timeline(), now) is not None
                for demand, eligible in self.never_fits.values()
            )
        ):
            return False
        reservation = self.reservation
        # Unstarted, with nothing changed, it stands (see LastReservation); a started one moves
        # with the clock. The walk's own placements, carried out as committed (`as_left`, and no
        # start moved an end), leave it standing too: the pass that made this walk left it as a
        # fresh one with them among the running work (it checked so where they took a reserved
        # node, and elsewhere they only move other nodes' first fits later). Its nodes may be in
        # another order than a fresh one's (ties at `now`): no verdict reads it, and a walk is
        # kept only without explanations, which would show it.
        if reservation is not None and (not engine.as_left or started or reservation.start <= now):
            assert self.reserved is not None
            demand, eligible = self.reserved
            found = make(engine.arrays, demand, eligible, timeline(), now)
            if found is None or not found.same_as(reservation, now):
                return False
            reservation = found
        if moved and self.held:
            # A job held back ends after the reservation's start still: held back again if it
            # fits somewhere but on the nodes it would delay, fitting nowhere if not; if it fits
            # on a node it would not delay, it is placed, and the walk must be made afresh.
            assert reservation is not None
            verdicts: dict[tuple[object, ...], bool] = {}
            still: list[tuple[Job, Demand]] = []
            for job, demand in self.held:
                held = verdicts.get(demand.key)
                if held is None:
                    end = end_time(now, demand.time_limit, default_limit, now)
                    exclude = reservation.holds_back(engine.arrays, demand.vector, end, demand.exclusive)
                    placeable, fitting = engine.placeable(demand, exclude)
                    if placeable:
                        return False
                    held = verdicts[demand.key] = fitting >= demand.node_count
                    if not held:
                        _file_misfit(self.no_room, engine, demand, UNEXPLAINED, quick=True)
                if held:
                    still.append((job, demand))
                else:  # as the loop gives a job of a request filed as fitting nowhere
                    reason, details, _ = self.no_room[demand.key]
                    self.reasons[job.id] = reason
                    self.details[job.id] = {**details, "job": job.id}
            self.held = still
        return reservation


def _reserving_from(
    ready: Floats | None, default_limit: float | None
) -> Callable[[NodeArrays, Demand, Bools, Timeline, float], Reservation | None]:
    """`reserve` with nodes usable only from `ready` on (a down node's `now + node_down_delay`;
    None: all now), taking a job without a time limit to run for `default_limit`."""

    def make(arrays: NodeArrays, demand: Demand, eligible: Bools, timeline: Timeline, now: float) -> Reservation | None:
        return reserve(arrays, demand, eligible, timeline, now, ready, default_limit)

    return make


def _file_misfit(
    no_room: dict[tuple[object, ...], tuple[str, dict[str, Any], Demand]],
    engine: Engine,
    demand: Demand,
    explanation: dict[str, Any],
    quick: bool,
) -> None:
    """No node takes `demand` now: its one-line reason and explanation, for the jobs of the same
    request after it, and the engine's kept misfit, for later passes."""
    no_room[demand.key] = (explanation["reason"] or "waiting for resources", explanation, demand)
    engine.note_misfit(demand, explanation, quick)


class DemandMemo:
    """Each queued job's Demand, kept from pass to pass for the same Job object (a job's request,
    nodes, traits, platform, cap, reservation, hints and time limit do not change in place: a shell
    that changes one hands over a new Job). What is kept is pruned to the jobs of the last pass
    once it holds twice as many (a look-up in the queue loop costs no bookkeeping)."""

    def __init__(self) -> None:
        self.kept: dict[int, tuple[Job, Demand]] = {}  # job id -> (the Job, its Demand); read only

    def of(self, job: Job) -> Demand:
        kept = self.kept.get(job.id)
        if kept is None or kept[0] is not job:
            kept = self.kept[job.id] = (job, Demand.of(job))
        return kept[1]

    def prune(self, queue: Sequence[Job]) -> None:
        """Keep only the jobs of this pass's `queue`, once many others are kept."""
        kept = self.kept
        if len(kept) > 2 * len(queue) + 64:
            self.kept = {job.id: kept[job.id] for job in queue if job.id in kept}


class LazyTimeline:
    """A Timeline built on first use; what is added before then is kept and added after the build,
    in order, so the result is the timeline built up front would be."""

    def __init__(self, build: Callable[[], Timeline]) -> None:
        self._build = build
        self._timeline: Timeline | None = None
        self._later: list[tuple[float, list[int], tuple[float, ...]]] = []

    def add_later(self, end: float, nodes: list[int], frees: tuple[float, ...]) -> None:
        if self._timeline is None:
            self._later.append((end, nodes, frees))
        else:
            for i in nodes:
                self._timeline.add(end, i, frees)

    def built(self) -> Timeline:
        if self._timeline is None:
            self._timeline = self._build()
            for end, nodes, frees in self._later:
                for i in nodes:
                    self._timeline.add(end, i, frees)
            self._later = []
        return self._timeline


COSTLY_REASON = "a new instance costs less than keeping a running node up longer for this job"
# What a placer without explanations records for a job no node takes.
UNEXPLAINED: dict[str, Any] = {"reason": ""}


def _cost_gate(
    fits: TypeFits,
    arrays: NodeArrays,
    ends: Floats,
    now: float,
    settings: PlacementSettings,
    placed: Sequence[tuple[list[int], Demand]],
) -> CostGate:
    gate = CostGate(arrays, ends, fits.offers(), now, settings.cost, settings.queue.default_time_limit, fits.prices)
    for nodes, demand in placed:
        gate.placed(nodes, demand)
    return gate


def _either(first: Bools | None, second: Bools | None) -> Bools | None:
    """The nodes either mask holds (None: no mask)."""
    if first is None:
        return second
    return first if second is None else first | second


def _few_fitting(engine: Engine, demand: Demand) -> Ints | None:
    """The nodes `demand` fits, for the cost gate to look at, if they are fewer than half the
    nodes (gathering them costs more than it saves when most nodes fit)."""
    fit = engine.fitting(demand)
    return fit if fit is not None and 2 * len(fit) < engine.arrays.n else None


def _wait(result: PlacementResult, job: Job, reason: str, **extra: Any) -> None:
    result.reasons[job.id] = reason
    result.details[job.id] = {"job": job.id, "reason": reason, **extra}


def _reservation_json(reservation: Reservation, arrays: NodeArrays, now: float) -> dict[str, Any]:
    return {
        "job": reservation.job_id,
        "start": reservation.start,
        "starts_in": max(0.0, reservation.start - now),
        "nodes": [arrays.ids[i] for i in reservation.nodes],
    }


def explain_job(
    snapshot: Snapshot,
    job: Job,
    now: float,
    settings: PolicySettings | PlacementSettings | Mapping[str, Any] | None = None,
    nodes: Sequence[Node] | None = None,
) -> dict[str, Any]:
    """A one-off explanation of where `job` could go now, outside a pass (e.g. for `corral explain`
    on a job the last pass did not look at): every filter over `nodes` (default: every node in the
    snapshot, so the `state` filter shows the ones that take no work)."""
    placement = coerce(settings)
    engine = build_engine(snapshot, list(snapshot.nodes if nodes is None else nodes), None, now, placement)
    demand = Demand.of(job)
    if engine.arrays.has_upcoming:
        demand = demand.ending_by(end_time(now, demand.time_limit, placement.queue.default_time_limit, now))
    return explain(engine, demand)
