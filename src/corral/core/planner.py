"""The boot planner: which instances to boot for the jobs that found no room on a running node.

Jobs are taken in queue order. A job first goes on capacity already on its way (instances still
booting), then on room left in an instance this pass already decided to boot, and only then asks
for a new instance: the cheapest type that fits it, within `max_instances` and skipping types in
capacity back-off, and within `max_vcpus` and `max_cost_per_hour` (`corral.core.limits`). A type
with a `max_instances` of its own (an account's quota for it) boots no instance past that cap,
counted over its live instances as `max_instances` counts the fleet's: the job boots the next
cheapest type that fits (a gang takes the room of each in price order), or, when every type that
fits is at its cap, waits naming them. A job no instance type can hold is unplaceable, with the
reason. For a job that
asks for more of a node than room (traits, a platform, a reservation), "fits" is also the placement
filters' word on a new node of the type, and it counts only on instances of such types on their
way: otherwise it would get an instance it can never run on (the cheaper spot type, for a job that
forbids spot), and another once that one idled out. With
`max_instances` 0 (a fixed fleet: nothing is ever booted) that is all the planner says; the
placer's reason for the other jobs stands.

An exclusive job (Slurm's --exclusive) runs alone on each of its nodes: it goes only on room on its
way that no other job was promised this pass (an instance booting, or a node up for a gang), else
boots its own instance (the cheapest type that fits it), and no other job is promised room on an
instance it was. (Which job an instance booting was booted for is not kept: each pass promises the
instances on their way afresh, in queue order, as it does for every job.)

A job that could have a new instance goes on room on its way only where the placer's cost gate
(`placement.cost`) will let it run once the instance is up; otherwise it would wait for that
instance, be refused by the gate, and only then get its own.

A gang (several nodes, started together) takes what room on its way it can, for as many of its
nodes as it can, and boots only the rest; when the rest are more than a pass may boot
(`max_boots_per_pass`), they boot over several passes (those booted earlier are on their way by
then), so no gang waits forever for a pass that could boot it whole. A gang also counts nodes up
and without work: the first of its instances to pair wait there for the others, and are no reason
to boot the gang again. It counts only those the placement filters let it run on (room aside, which
the planner counts itself): not a node under an operator hold, in a blocking category, reserved
for someone else or after a transient failure, pinned to the other capness; and for a gang that
asks for more than room, only a node with its traits and platform, in its reservation, that its
strict locality hints allow (where their targets run, from the caller's `LocalityIndex`). Counted,
a node it cannot run on would stand in for one the gang never gets, and it would neither start
nor boot; not counted, a node it can run on is no reason not to boot the gang again, each time one
of its instances pairs. The plan holds the nodes it counts (`BootPlan.held`): the lifecycle does
not drain them, for as long as the caller offers them (the reconcile pass: while they have been
idle for less than the boot grace, the time an instance may take to pair).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from corral.core.capacity import is_available
from corral.core.limits import LiveFleet
from corral.core.model import GiB, InstanceType, Job, Node, Resources
from corral.core.settings import BootSettings
from corral.core.snapshot import Boot
from corral.placement.arrays import NodeArrays
from corral.placement.boot import TypeRanker
from corral.placement.demand import Demand, Hints
from corral.placement.engine import Engine
from corral.placement.filters import RESOURCE_FILTERS
from corral.placement.lifetime import Bill, costly_before_start, paid_after_boot
from corral.placement.locality import LocalityIndex
from corral.placement.settings import CostSettings, PlacementSettings


@dataclass(slots=True)
class _Bin:
    label: str
    free: Resources
    price: float
    longest: float = 0.0  # the longest time limit of the jobs put on it (inf: one without a limit)
    up: bool = False  # a node up and idle (only gangs count on one)
    instance_type: str = ""
    # How long it is paid for once it takes work (its first billing period past its boot): work
    # that ends by then keeps it up at no cost (the cost gate's `paid_after_boot`).
    paid_for: float = 0.0
    taken: bool = False  # some job was promised room on it this pass: no exclusive job may have it
    exclusive: bool = False  # promised to an exclusive job (Slurm's --exclusive): no other job may share it


Note = tuple[str, bool]  # a wait reason, and whether the job is unplaceable


@dataclass(slots=True)
class BootPlan:
    """The boots, and per waiting job the planner has a word on, its wait reason and whether no
    instance type can ever hold it (a plan given again is the same object: not to be changed)."""

    boots: list[Boot]
    notes: dict[int, Note]
    held: frozenset[str] = frozenset()  # idle nodes gangs wait on: not to be drained


def why_no_type_fits(request: Resources, types: list[InstanceType]) -> str | None:
    """None if some type fits; else a sentence naming the resource no type has enough of."""
    if any(request.fits_in(t.capacity) for t in types):
        return None
    if not types:
        return "no instance types are configured"
    checks = [
        (request.vcpus, max(t.vcpus for t in types), "vcpu"),
        (request.ram_mib / GiB, max(t.ram_mib for t in types) / GiB, "GiB RAM"),
        (request.scratch_mib / GiB, max(t.scratch_mib for t in types) / GiB, "GiB scratch"),
        (request.gpus, max(t.gpus for t in types), "GPU"),
    ]
    for wanted, largest, unit in checks:
        if wanted > largest + 1e-9:
            if not largest:  # "the largest has 0 GPUs" said it in a roundabout way
                return f"no instance type has {_amount(wanted, unit)} (none has any)"
            return f"no instance type has {_amount(wanted, unit)} (the largest has {_amount(largest, unit)})"
    return f"no single instance type has {request.describe()} together"


def _amount(count: float, unit: str) -> str:
    """A count and its unit: 1 GPU, 2 GPUs, 0.5 vcpus, 64 GiB RAM (a unit of GiB stays as it is)."""
    plural = "" if count == 1 or unit.startswith("GiB") else "s"
    return f"{count:g} {unit}{plural}"


def warm_boots(
    live_after: int,
    min_instances: int,
    types: list[InstanceType],
    unavailable: dict[str, float],
    now: float,
    settings: BootSettings,
    fleet: LiveFleet | None,
    planned: list[Boot],
    of_type: Mapping[str, int] | None = None,
) -> list[Boot]:
    """The boots that bring the live instances (booting ones, and `planned`, this pass's boots for
    jobs, counted in `live_after`) up to `lifecycle.min_instances`, as an autoscaling group keeps its
    minimum size: a fleet that starts empty, or lost a kept node (a failure, an expiry), is brought
    back to its floor without waiting for work. The cheapest type not in capacity back-off, within
    max_instances, max_boots_per_pass and the spend limits (`fleet`: what the live instances hold,
    None when no spend limit is set), and below its own max_instances (`of_type`: the live
    instances of each type, None when no type has a cap)."""
    count = min(min(min_instances, settings.max_instances) - live_after, settings.max_boots_per_pass - len(planned))
    if count <= 0:
        return []  # (the usual pass: at or above the floor; the types are not looked at)
    available = [t for t in types if is_available(t.name, unavailable, now)]
    room: dict[str, int] = {}
    if of_type is not None:
        room = _type_room(types, of_type, planned)
        available = [t for t in available if room.get(t.name, 1) > 0]
    if not available:
        return []
    cheapest = min(available, key=lambda t: (t.price_per_hour, t.vcpus, t.ram_mib, t.name))
    count = min(count, room.get(cheapest.name, count))
    limits = settings.spend_limits()
    if limits.any and fleet is not None:
        by_name = {t.name: t for t in types}
        booked = [by_name[boot.instance_type] for boot in planned if boot.instance_type in by_name]
        after = LiveFleet(
            fleet.vcpus + sum(t.vcpus for t in booked), fleet.cost_per_hour + sum(t.price_per_hour for t in booked)
        )
        while count > 0 and limits.refuses(after, cheapest, count) is not None:
            count -= 1
    reason = f"min_instances ({min_instances}): keeping {min_instances} up"
    return [Boot(cheapest.name, reason) for _ in range(count)]


def plan_boots(
    waiting: list[Job],
    booting: list[tuple[Node, Resources]],
    types: list[InstanceType],
    live_instances: int,
    unavailable: dict[str, float],
    now: float,
    settings: BootSettings,
    cost: CostSettings | None = None,
    default_limit: float | None = None,
    memo: PlannerMemo | None = None,
    idle: list[Node] | None = None,
    placement: PlacementSettings | None = None,
    locality: LocalityIndex | None = None,
    fleet: LiveFleet | None = None,
    of_type: Mapping[str, int] | None = None,
) -> BootPlan:
    """`waiting` are the queue-ordered jobs that found no room now; `booting` the nodes on their
    way with the room they will have. `cost` is the placer's cost gate when it applies to jobs
    that can get a new instance (None: off); `default_limit` the time limit of jobs without one;
    `memo` what the caller keeps between its passes (None: nothing is kept); `idle` the nodes up
    and without work that gangs may count on (see the module docstring); `placement` the
    placer's settings, whose filters say which types a job that asks for more than room (traits,
    platform, reservation) may run on (None: room alone); `locality` where the pass's work runs,
    for the strict locality hints of a gang that waits while nodes are idle (None: such a gang
    counts no idle node); `fleet` what the `live_instances` hold, which `max_vcpus` and
    `max_cost_per_hour` limit (None: nothing, for a caller without those limits set); `of_type`
    the live instances of each type, which the types' own `max_instances` limit (None: no type
    has one)."""
    idle = idle or []
    if not waiting:
        return BootPlan([], {})
    kept = memo is not None
    memo = memo if memo is not None else PlannerMemo()
    order = memo.order_of(types)
    types_for = order.holding
    if settings.max_instances == 0 and not booting:
        # Nothing is ever booted (a fixed fleet): the placer's reason stands for each job, but
        # one that no type (of the fleet) holds can never run. (A request object seen held
        # before needs no call: this runs for every waiting job of a long queue, pass after pass.)
        held = order.held
        unheld = [job for job in waiting if id(job.resources) not in held and not types_for(job.resources)]
        return BootPlan([], {job.id: _unplaceable(job, types) for job in unheld})
    # The same jobs waiting on the same instances booting, under the same settings, get the same
    # plan: the usual pass of an elastic fleet while its instances boot. (Compared only when the
    # memo is kept: a memo of this call alone has no plan to give again.)
    inputs = (
        (
            order,
            [(job.id, job.resources, job.node_count, job.time_limit) for job in waiting],
            [(node.id, free, node.price_per_hour) for node, free in booting],
            # (Their attributes: what the filters read of them, see _UpNodes.)
            [(node.id, node.capacity, node.price_per_hour, dict(node.attributes) or None) for node in idle],
            live_instances,
            [t.name for t in types if unavailable.get(t.name, 0.0) > now] if unavailable else None,
            (settings.max_instances, settings.max_boots_per_pass, settings.max_vcpus, settings.max_cost_per_hour),
            fleet,
            None if of_type is None else sorted(of_type.items()),
            None if cost is None else (cost.max_extension, tuple(cost.run_fractions), cost.boot_time),
            default_limit,
        )
        if kept
        else None
    )
    last = memo.last
    if inputs is None or last is None or last[0] != inputs or now >= last[2]:
        made, until = _plan_boots(
            waiting,
            booting,
            idle,
            types,
            order,
            live_instances,
            unavailable,
            now,
            settings,
            cost,
            default_limit,
            None if placement is None else _Constraints(types, placement, now),
            None if placement is None or not idle else _UpNodes(idle, memo.verdicts_of(placement), now, locality),
            fleet or LiveFleet(),
            of_type,
        )
        last = memo.last = (inputs, made, until)
    return last[1]


class PlannerMemo:
    """What the boot planner keeps for one caller between passes: the instance types in price
    order while the caller hands the same types (the simulator hands the same list pass after pass,
    the live loop an equal one), and the last plan with the inputs it was made from. Each shell
    keeps its own, beside its placer, so that nothing a pass leaves behind is shared between
    callers."""

    __slots__ = ("last", "order", "up")

    def __init__(self) -> None:
        self.order: _TypeOrder | None = None
        self.up: _UpVerdicts | None = None
        # The inputs, the plan, and the time until which it holds (an idle node's reservation ends).
        self.last: tuple[tuple[object, ...] | None, BootPlan, float] | None = None

    def verdicts_of(self, placement: PlacementSettings) -> _UpVerdicts:
        """What the filters say of idle nodes, kept while the caller hands the same settings."""
        up = self.up
        if up is None or up.placement is not placement:
            up = self.up = _UpVerdicts(placement)
        return up

    def order_of(self, types: list[InstanceType]) -> _TypeOrder:
        order = self.order
        if order is None or order.seen != types:
            order = self.order = _TypeOrder(types)
        return order


def _plan_boots(
    waiting: list[Job],
    booting: list[tuple[Node, Resources]],
    idle: list[Node],
    types: list[InstanceType],
    order: _TypeOrder,
    live_instances: int,
    unavailable: dict[str, float],
    now: float,
    settings: BootSettings,
    cost: CostSettings | None,
    default_limit: float | None,
    constraints: _Constraints | None,
    up_nodes: _UpNodes | None,
    fleet: LiveFleet,
    of_type: Mapping[str, int] | None,
) -> tuple[BootPlan, float]:
    """The plan, and the time until which it holds with the same inputs."""
    types_for = order.holding
    boot_time = cost.boot_time if cost is not None else 0.0
    pending = [
        _Bin(
            node.id,
            free,
            node.price_per_hour,
            instance_type=node.instance_type,
            paid_for=paid_after_boot(node.billing_granularity, node.billing_minimum, boot_time),
        )
        for node, free in booting
    ]
    up = [_Bin(node.id, node.capacity, node.price_per_hour, up=True) for node in idle]
    held: set[str] = set()
    planned: list[_Bin] = []
    boots: list[Boot] = []
    notes: dict[int, Note] = {}
    budget = max(0, settings.max_instances - live_instances)
    limits = settings.spend_limits()
    spending = limits.any  # (the fleet grows with each boot planned: `fleet` below)
    verdicts: dict[tuple[float, float, float, float, Bill], bool] = {}
    # Per list of types that hold a request, those not in back-off (a long queue of a capped
    # fleet asks again and again in one pass).
    fitting_of: dict[int, list[InstanceType]] = {}
    capped = (f"waiting for resources: max_instances ({settings.max_instances}) reached", False)
    paced = (f"waiting for resources: max_boots_per_pass ({settings.max_boots_per_pass}) reached", False)
    # How many more instances each type with a cap of its own may have (less this pass's boots).
    room = None if of_type is None else _type_room(types, of_type, [])
    # The reason of each (request, nodes, time limit) that found no bin and no new instance since
    # the last boot planned: a job asking the same finds none either, for bins only fill up, and
    # the budget, the boots and the gate stay as they were until the next boot.
    settled: dict[
        tuple[
            float,
            int,
            int,
            int,
            int,
            float | None,
            frozenset[str] | None,
            bool,
            bool,
            tuple[NodeAsks, Hints | None] | None,
        ],
        Note,
    ] = {}

    for job in waiting:
        request = job.resources
        need = job.node_count
        limit = job.time_limit if job.time_limit is not None else default_limit
        pins = _pins_nodes(job)
        # The types a job that asks for more than room accepts (None: any that has the room).
        accepted = constraints.accepting(job) if constraints is not None and pins else None
        # (Plain numbers: a tuple of them hashes faster than the request. The capness, and what a
        # gang that pins nodes asks of one: which idle nodes a gang may count on.)
        asks = _asks(job) if pins and need > 1 and up else None
        key = (
            request.vcpus,
            request.ram_mib,
            request.scratch_mib,
            request.gpus,
            need,
            limit,
            accepted,
            job.cpu_capped,
            job.exclusive,
            asks,
        )
        note = settled.get(key)
        if note is not None:
            notes[job.id] = note
            continue
        holding = types_for(request)
        if not holding:
            notes[job.id] = _unplaceable(job, types)
            continue
        pending_for, planned_for = pending, planned
        if accepted is not None:
            allowed = [t for t in holding if t.name in accepted]
            if not allowed:
                # Booting one would never run it (a job that must not run on spot, and only spot
                # types have the room): no instance type can hold it. Not kept in `settled`: jobs
                # that ask for different traits or platforms share that key (no type accepts
                # either), and each gets its own filter's words.
                assert constraints is not None
                notes[job.id] = constraints.none_accepted(job, holding)
                continue
            # (A list of this job's own: not kept in fitting_of, whose keys are the ids of lists.)
            holding = allowed
            fitting = [t for t in holding if unavailable.get(t.name, 0.0) <= now]
            pending_for = [b for b in pending if b.instance_type in accepted]
            planned_for = [b for b in planned if b.instance_type in accepted]
        elif unavailable:
            kept_fitting = fitting_of.get(id(holding))
            if kept_fitting is None:
                kept_fitting = fitting_of[id(holding)] = [t for t in holding if unavailable.get(t.name, 0.0) <= now]
            fitting = kept_fitting
        else:
            fitting = holding
        # The types a new instance may be of: those below their own max_instances.
        bootable = fitting if room is None else [t for t in fitting if room.get(t.name, 1) > 0]
        refuses: Callable[[_Bin], bool] | None = None
        if (
            cost is not None
            and limit is not None
            and bootable
            and need <= budget
            and not (spending and limits.refuses(fleet, bootable[0], need))
        ):
            refuses = _gate(cost, limit, Bill.of(bootable[0]), verdicts)
        promise = math.inf if limit is None else limit
        exclusive = job.exclusive
        if need == 1:
            chosen = _take_bins(pending_for, request, need, promise, refuses, exclusive)
            if chosen is not None:
                notes[job.id] = (f"waiting for an instance to boot ({', '.join(chosen)})", False)
                continue
            chosen = _take_bins(planned_for, request, need, promise, refuses, exclusive)
            if chosen is not None:
                notes[job.id] = ("waiting for an instance to boot", False)
                continue
            on_the_way: list[_Bin] = []
        else:
            # As many of its nodes as room on its way holds (up, booting, or planned this pass).
            if not up:
                up_for = up
            elif up_nodes is not None:
                up_for = up_nodes.accepted(job, up)
            else:  # (no filters to ask: room alone, which says nothing of a node's traits)
                up_for = [] if pins else up
            bins = up_for + pending_for + planned_for
            on_the_way = _fitting_bins(bins, request, need, refuses, exclusive)
            if len(on_the_way) == need:
                _take(on_the_way, request, promise, exclusive)
                held.update(b.label for b in on_the_way if b.up)
                notes[job.id] = (_gang_waits(on_the_way, []), False)
                continue
        missing = need - len(on_the_way)
        if not fitting:
            blocked = sorted(t.name for t in holding)
            notes[job.id] = settled[key] = (
                # (Backed off for capacity, a quota or an AMI that cannot boot: `corral status`
                # shows each type's error.)
                f"instance types that fit are backed off for now: {', '.join(blocked)} (corral status says why)",
                False,
            )
            continue
        if need > settings.max_instances and need > 1:
            # Never, under this config: every node is an instance the loop boots, so it is
            # unplaceable as a job larger than every type (the placer, which runs first, still
            # places it on running nodes that have room, as after a restart that lowered the limit).
            reason = f"needs {need} nodes, max_instances is {settings.max_instances}"
            notes[job.id] = settled[key] = (reason, True)
            continue
        if room is not None and need > 1:
            most = sum(math.inf if t.max_instances is None else t.max_instances for t in holding)
            if need > most:
                # Never, under this config: the types that hold it cannot have that many at once.
                caps = ", ".join(f"{t.name} {t.max_instances}" for t in holding)
                reason = f"needs {need} nodes, the instance types that fit have max_instances {caps}"
                notes[job.id] = settled[key] = (reason, True)
                continue
        if missing > budget:
            # A gang short of instances while the fleet is below its cap said "max_instances reached"
            # beside a `corral nodes` that showed fewer: say how many it lacks and how many may boot.
            notes[job.id] = settled[key] = (
                capped
                if budget <= 0
                else (
                    f"waiting for resources: needs {missing} more instances at once, max_instances"
                    f" ({settings.max_instances}) leaves room for {budget}",
                    False,
                )
            )
            continue
        # The instances to boot, of which types: the cheapest below its own cap first, and for a
        # gang that one's room, then the next cheapest's.
        picks = [(bootable[0], missing)] if room is None else _share_out(bootable, missing, room)
        if picks is None:
            notes[job.id] = settled[key] = (f"waiting for resources: {_at_caps(fitting, room or {})}", False)
            continue
        if spending:
            never = limits.never(picks[0][0], need)
            if never is not None:
                what = f"a {picks[0][0].name}" if need == 1 else f"{need} × {picks[0][0].name}"
                reason = f"{what} would pass {never} on {'its' if need == 1 else 'their'} own"
                # Never, under this config (as a gang larger than max_instances): unplaceable, unless
                # a type that holds it and stays within the limit is only backed off or at its cap
                # for now. Calling that unplaceable sent an on-call to change a config that was fine.
                within = [t.name for t in holding if limits.never(t, need) is None]
                if within:
                    reason = (
                        f"waiting for resources: {reason}; {', '.join(within)} would not, and"
                        " may not boot now (backed off or at its max_instances: corral status says why)"
                    )
                notes[job.id] = settled[key] = (reason, not within)
                continue
            before_last = fleet
            for itype, count in picks[:-1]:
                before_last = before_last.plus(itype, count)
            past = limits.refuses(before_last, *picks[-1])
            if past is not None:
                notes[job.id] = settled[key] = (f"waiting for resources: {past} reached", False)
                continue
        # A gang boots what this pass still may; the rest in later passes. Others boot whole or wait.
        now_booted = min(missing, settings.max_boots_per_pass - len(boots))
        if now_booted <= 0:
            notes[job.id] = settled[key] = paced
            continue
        settled.clear()
        _take(on_the_way, request, promise, exclusive)
        held.update(b.label for b in on_the_way if b.up)
        new_labels: list[str] = []
        left = now_booted
        for itype, count in picks:
            count = min(count, left)
            left -= count
            for _ in range(count):
                boots.append(Boot(itype.name, f"job {job.id} needs {request.describe()}"))
                planned.append(
                    _Bin(
                        f"new {itype.name}",
                        itype.capacity - request,
                        itype.price_per_hour,
                        promise,
                        instance_type=itype.name,
                        paid_for=paid_after_boot(itype.billing_granularity, itype.billing_minimum, boot_time),
                        taken=True,
                        exclusive=exclusive,  # (its own instance: nobody else is promised room on it)
                    )
                )
                new_labels.append(f"new {itype.name}")
            if room is not None and itype.name in room:
                room[itype.name] -= count
            if spending:
                fleet = fleet.plus(itype, count)
        budget -= now_booted
        if need == 1:
            notes[job.id] = (f"waiting for an instance to boot ({picks[0][0].name})", False)
        else:
            later = "" if now_booted == missing else f"; {missing - now_booted} more to boot in later passes"
            notes[job.id] = (_gang_waits(on_the_way, new_labels) + later, False)
    return BootPlan(boots, notes, frozenset(held)), math.inf if up_nodes is None else up_nodes.until


def _gang_waits(on_the_way: list[_Bin], new_labels: list[str]) -> str:
    """A gang's wait, telling the nodes that boot from those already up and kept for it: one list of
    both read as if running nodes were booting."""
    up = [b.label for b in on_the_way if b.up]
    coming = [b.label for b in on_the_way if not b.up] + new_labels
    if not coming:
        return f"waiting to start on {', '.join(up)} (up and kept for it)"
    kept = f", with {', '.join(up)} up and kept for it" if up else ""
    return f"waiting for instances to boot ({', '.join(coming)}){kept}"


def _type_room(types: list[InstanceType], of_type: Mapping[str, int], planned: list[Boot]) -> dict[str, int]:
    """How many more instances each type with a max_instances of its own may have: its cap, less
    its live instances and the boots already `planned`."""
    room = {t.name: t.max_instances - of_type.get(t.name, 0) for t in types if t.max_instances is not None}
    for boot in planned:
        if boot.instance_type in room:
            room[boot.instance_type] -= 1
    return room


def _share_out(
    bootable: list[InstanceType], missing: int, room: Mapping[str, int]
) -> list[tuple[InstanceType, int]] | None:
    """`missing` new instances over the types (cheapest first), each within its room; None if
    their room together is less."""
    picks: list[tuple[InstanceType, int]] = []
    left = missing
    for itype in bootable:
        count = min(left, room.get(itype.name, left))
        if count > 0:
            picks.append((itype, count))
            left -= count
            if left == 0:
                return picks
    return None


def _at_caps(fitting: list[InstanceType], room: Mapping[str, int]) -> str:
    """Which of the types that fit a job are at their own max_instances (or have too little room
    left under it for a gang), for its wait reason."""
    said = []
    for itype in fitting:
        left = room.get(itype.name)
        if left is None:
            continue
        if left <= 0:
            said.append(f"{itype.name} is at its max_instances ({itype.max_instances})")
        else:
            said.append(f"{itype.name} has room for {left} more under its max_instances ({itype.max_instances})")
    return "; ".join(said)


def _pins_nodes(job: Job) -> bool:
    """Whether the job asks for more of a node than room: the planner, which knows only room, asks
    the placement filters which nodes (and instance types) may take it."""
    strict = job.locality is not None and job.locality.strict
    return bool(job.traits or job.forbidden_traits or job.min_platform or job.reservation or strict)


def _strict_hints(job: Job) -> Hints | None:
    """The job's locality hints, when they are a hard filter."""
    hints = job.locality
    return Hints.of(hints) if hints is not None and hints.strict else None


def _asks(job: Job) -> tuple[NodeAsks, Hints | None]:
    """What a job asks of a node beside room and capness, as the filters read it (jobs asking the
    same may count the same idle nodes)."""
    return (Demand.of(job).static_key, _strict_hints(job))


class _Constraints:
    """Which instance types the placement filters accept for a job that asks for more than room,
    as a new, empty node: the filters' ranker is built when a pass first meets such a job."""

    def __init__(self, types: list[InstanceType], placement: PlacementSettings, now: float) -> None:
        self._args = (types, placement, now)
        self._ranker: TypeRanker | None = None
        self._notes: dict[tuple[object, ...], Note] = {}

    def ranker(self) -> TypeRanker:
        if self._ranker is None:
            types, placement, now = self._args
            self._ranker = TypeRanker(types, placement, now=now)
        return self._ranker

    def accepting(self, job: Job) -> frozenset[str]:
        return self.ranker().accepting(Demand.of(job))

    def none_accepted(self, job: Job, holding: list[InstanceType]) -> Note:
        """The note of a job no type with room for it accepts: unplaceable (as a job larger than
        every type), with the filter that rules the last of those types out, described over them
        all (the newest platform among them, not that of the cheapest)."""
        demand = Demand.of(job)
        key = (demand.key[:4], tuple(t.name for t in holding))
        note = self._notes.get(key)
        if note is None:
            why = self.ranker().why_none(demand, [t.name for t in holding])
            note = self._notes[key] = (f"no instance type with room for it meets its constraints ({why})", True)
        return note


# What a job asks of a node as the filters read it (traits, forbidden traits, platform,
# reservation: Demand.static_key), and what a job that asks nothing of one asks.
NodeAsks = tuple[object, ...]
_NO_ASKS: NodeAsks = Demand(0, Resources(0, 0)).static_key


class _UpNodes:
    """Which of the nodes up and without work the placement filters let a gang run on, room aside
    (the planner counts room itself), in one pass; the verdicts come from the caller's
    `_UpVerdicts`, strict locality hints are resolved over `locality`."""

    def __init__(self, idle: list[Node], verdicts: _UpVerdicts, now: float, locality: LocalityIndex | None) -> None:
        self._idle, self._verdicts, self._now, self._locality = idle, verdicts, now, locality
        self._accepted: dict[tuple[NodeAsks, bool], list[int]] = {}
        self._arrays: NodeArrays | None = None  # the idle nodes, for locality hints
        self.until = math.inf  # when a verdict used ends (a reservation on a node ends then)

    def accepted(self, job: Job, up: list[_Bin]) -> list[_Bin]:
        """The bins of `up` (one per idle node, in the same order) whose node takes the job."""
        # A job that pins no nodes asks the filters nothing but its capness.
        demand = Demand.of(job) if _pins_nodes(job) else None
        key = (_NO_ASKS if demand is None else demand.static_key, job.cpu_capped)
        taken = self._accepted.get(key)
        if taken is None:
            oks, until = self._verdicts.of(self._idle, demand, job.cpu_capped, self._now)
            taken = self._accepted[key] = [i for i, ok in enumerate(oks) if ok]
            self.until = min(self.until, until)
        if demand is not None and demand.hints is not None and demand.hints.strict:
            allowed = self._allowed(demand)
            if allowed is not None:
                taken = [i for i in taken if allowed[i]]
        return [up[i] for i in taken]

    def _allowed(self, demand: Demand) -> list[bool] | None:
        """Which idle nodes the job's strict locality hints allow, as the locality filter says;
        None: all of them."""
        assert demand.hints is not None
        placement = self._verdicts.placement
        if "locality" not in placement.filters:  # (the placer does not apply hints either)
            return None
        # Where the targets run is no input of a kept plan (only this pass's index says it): a
        # plan that read it holds for this pass alone.
        self.until = self._now
        if self._locality is None:
            return [False] * len(self._idle)
        if self._arrays is None:
            self._arrays = NodeArrays(self._idle, None, placement, self._now)
        allowed = self._locality.resolve(demand.hints, self._arrays, demand.job_id).allowed()
        return None if allowed is None else allowed.tolist()


class _UpVerdicts:
    """Whether the placement filters (all but room and locality) let a job run on an idle node,
    kept by a PlannerMemo per kind of node and what the job asks: what the filters read of an idle
    node is its attributes (its state is idle or busy, and it runs nothing), and of the job its
    traits, platform, reservation and capness. The idle nodes of a fleet are mostly of a few kinds
    (most have no attributes), and the gangs of a queue ask for few sets of constraints, so the
    filters run once per kind and set, not in every pass a gang waits. Kept while the caller hands
    the same placement settings, each verdict until a reservation it read ends."""

    def __init__(self, placement: PlacementSettings) -> None:
        self.placement = placement
        self._names = [
            name
            for name in placement.filters
            if name not in RESOURCE_FILTERS and name not in ("overprovision", "locality")
        ]
        # Per (kind, what the job asks, capness): the verdict, and the times between which it holds.
        self._verdicts: dict[tuple[tuple[object, ...], NodeAsks, bool], tuple[bool, float, float]] = {}

    def of(self, nodes: list[Node], demand: Demand | None, capped: bool, now: float) -> tuple[list[bool], float]:
        """Each node's verdict for a job that asks what `demand` asks (None: nothing but its
        capness `capped`), and the time until which they all hold."""
        asks = _NO_ASKS if demand is None else demand.static_key
        keys = [(_kind(node), asks, capped) for node in nodes]
        verdicts = self._verdicts
        missing: dict[tuple[tuple[object, ...], NodeAsks, bool], Node] = {}
        for key, node in zip(keys, nodes, strict=True):
            known = verdicts.get(key)
            if (known is None or not known[1] <= now < known[2]) and key not in missing:
                missing[key] = node
        if missing:
            if len(verdicts) > 4096:
                verdicts.clear()
            # One node of each kind, through the engine's own filters.
            arrays = NodeArrays(list(missing.values()), None, self.placement, now)
            engine = Engine(arrays, self.placement, now=now, weights={}, filters=self._names)
            probe = next(iter(missing.values()))
            # What the job asks of a node, on one node's room, without the hints (not filtered here).
            asked = Demand(0, probe.capacity) if demand is None else demand
            mask = engine.hard_mask(
                dataclasses.replace(
                    asked, job_id=0, resources=probe.capacity, node_count=1, capped=capped, hints=None, time_limit=None
                )
            )
            until = arrays.facts.expires
            for k, key in enumerate(missing):
                verdicts[key] = (bool(mask[k]), now, until)
        found = [verdicts[key] for key in keys]
        return [ok for ok, _, _ in found], min(until for _, _, until in found)


def _kind(node: Node) -> tuple[object, ...]:
    """A node's attributes as a key: nodes alike in them are alike to the filters of `_UpVerdicts`."""
    attributes = node.attributes
    if not attributes:
        return ()
    return tuple(sorted((k, v if isinstance(v, str) else tuple(v)) for k, v in attributes.items()))


def _unplaceable(job: Job, types: list[InstanceType]) -> Note:
    return (why_no_type_fits(job.resources, types) or "", True)


class _TypeOrder:
    """The instance types cheapest first, and which of them hold each request seen so far (kept
    by a PlannerMemo, so that a pass does not sort the types and test every request against every
    type)."""

    def __init__(self, types: list[InstanceType]) -> None:
        self.seen = list(types)
        by_price = sorted(types, key=lambda t: (t.price_per_hour, t.vcpus, t.ram_mib))
        self._capacities = [(t, t.capacity) for t in by_price]
        self._holding: dict[Resources, list[InstanceType]] = {}
        self._seen: dict[int, tuple[Resources, list[InstanceType]]] = {}
        self.held: set[int] = set()  # the ids of the requests in `_seen` that some type holds

    def holding(self, request: Resources) -> list[InstanceType]:
        """The types that hold `request`, cheapest first (a list not to be changed)."""
        # By the object first: a queued job hands the same one pass after pass, and looking it up
        # by identity spares hashing its fields. The entry keeps the object, so its id stays its own.
        seen = self._seen.get(id(request))
        if seen is not None and seen[0] is request:
            return seen[1]
        found = self._holding.get(request)
        if found is None:
            found = self._holding[request] = [t for t, capacity in self._capacities if request.fits_in(capacity)]
        if len(self._seen) >= 4096:
            self._seen.clear()
            self.held.clear()
        self._seen[id(request)] = (request, found)
        if found:
            self.held.add(id(request))
        return found


def _gate(
    cost: CostSettings, limit: float, new_bill: Bill, verdicts: dict[tuple[float, float, float, float, Bill], bool]
) -> Callable[[_Bin], bool]:
    """Whether the cost gate will refuse a job of time limit `limit` on a bin, once it is up
    (`new_bill`: how the cheapest type that holds the job bills); answers kept for the pass."""

    def refuses(b: _Bin) -> bool:
        key = (b.price, b.longest, b.paid_for, limit, new_bill)
        verdict = verdicts.get(key)
        if verdict is None:
            verdict = verdicts[key] = costly_before_start(b.price, b.longest, b.paid_for, limit, new_bill, cost)
        return verdict

    return refuses


def _take_bins(
    bins: list[_Bin],
    request: Resources,
    need: int,
    limit: float,
    refuses: Callable[[_Bin], bool] | None,
    exclusive: bool = False,
) -> list[str] | None:
    """Reserve `request` on `need` distinct bins (best fit by RAM left) that the cost gate does not
    refuse; None if there are not enough."""
    if len(bins) < need:  # (once the fleet is capped, no new bins come in a pass)
        return None
    chosen = _fitting_bins(bins, request, need, refuses, exclusive)
    if len(chosen) < need:
        return None
    _take(chosen, request, limit, exclusive)
    return [b.label for b in chosen]


def _fitting_bins(
    bins: list[_Bin],
    request: Resources,
    most: int,
    refuses: Callable[[_Bin], bool] | None,
    exclusive: bool = False,
) -> list[_Bin]:
    """Up to `most` distinct bins that hold `request` and that the cost gate does not refuse, best
    fit (least RAM left) first. An exclusive job (Slurm's --exclusive) takes only a bin nobody was
    promised this pass (an instance booting, or a node up, for it alone); no job takes one promised
    to an exclusive job."""
    if exclusive:
        bins = [b for b in bins if not b.taken]
    elif any(b.exclusive for b in bins):
        bins = [b for b in bins if not b.exclusive]
    fitting = [b for b in bins if request.fits_in(b.free) and not (refuses and refuses(b))]
    if most == 1 and fitting:
        # The first best (min keeps the first of equal keys, as the stable sort puts it first).
        return [min(fitting, key=lambda b: (b.free.ram_mib - request.ram_mib, b.free.vcpus))]
    fitting.sort(key=lambda b: (b.free.ram_mib - request.ram_mib, b.free.vcpus))
    return fitting[:most]


def _take(bins: list[_Bin], request: Resources, limit: float, exclusive: bool = False) -> None:
    for b in bins:
        b.free = b.free - request
        b.longest = max(b.longest, limit)
        b.taken = True
        b.exclusive = b.exclusive or exclusive
