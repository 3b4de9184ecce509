"""Hard filters: each says, for one job, which nodes may take it, with a stable reason code.

A filter's `mask` returns a boolean array over all nodes, or None when it removes nothing for this
job (the common case, which saves the work of combining an all-true array). `describe` explains,
with quantities, why nodes fail it; it looks at `scope`, the nodes that pass every *other* filter
(or, when there are none, the nodes still standing when it runs; all nodes when none is), so the
nearest miss it names is one that only this filter stops.

`static` filters depend only on the job's constraints and on facts that do not change within a
pass; the engine caches their combined mask per distinct constraint set.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from corral.core.model import GiB, InstanceType
from corral.placement import attributes as attr
from corral.placement.arrays import EPSILON, Bools, NodeArrays
from corral.placement.availability import RESOURCES, Policy, Resource
from corral.placement.demand import Demand
from corral.placement.locality import Resolved

Mask = Callable[[NodeArrays, Demand, "Resolved | None"], "Bools | None"]
Describe = Callable[[NodeArrays, Demand, Bools, "Resolved | None", Sequence[InstanceType]], str]


@dataclass(frozen=True, slots=True)
class Filter:
    name: str
    code: str
    seed: str  # the seed-003 (DAPI) name, where there is one, so users can find it
    static: bool
    mask: Mask
    describe: Describe


def _count(arrays: NodeArrays, n: int) -> str:
    """ "3 nodes", "1 node"; "instance types" for the boot planner's arrays (see NodeArrays.noun)."""
    return f"{n} {arrays.noun}{'' if n == 1 else 's'}"


def _sample(arrays: NodeArrays, where: Bools, limit: int = 3) -> str:
    ids = [arrays.ids[i] for i in np.flatnonzero(where)[:limit]]
    more = int(np.count_nonzero(where)) - len(ids)
    return ", ".join(ids) + (f" and {more} more" if more > 0 else "")


# --- state, reserved, reservations, categories -------------------------------------------------


def _state(a: NodeArrays, d: Demand, loc: Resolved | None) -> Bools | None:
    return None if a.schedulable.all() else a.schedulable


def _describe_state(a: NodeArrays, d: Demand, scope: Bools, loc: Resolved | None, types: Sequence[InstanceType]) -> str:
    counts = Counter(a.why_unschedulable[i] for i in np.flatnonzero(~a.schedulable))
    return "nodes not taking work: " + ", ".join(f"{n} {why}" for why, n in sorted(counts.items()))


def _reserved(a: NodeArrays, d: Demand, loc: Resolved | None) -> Bools | None:
    return ~a.reserved if a.reserved.any() else None


def _describe_reserved(
    a: NodeArrays, d: Demand, scope: Bools, loc: Resolved | None, types: Sequence[InstanceType]
) -> str:
    return f"reserved, or with a role that takes no work: {_sample(a, a.reserved)}"


def _reservation(a: NodeArrays, d: Demand, loc: Resolved | None) -> Bools | None:
    if len(a.reservation_names) == 1:
        return None
    own = a.reservation_codes.get(d.reservation, 0) if d.reservation else 0
    result: Bools = (a.reservation == 0) | (a.reservation == own)
    return result


def _describe_reservation(
    a: NodeArrays, d: Demand, scope: Bools, loc: Resolved | None, types: Sequence[InstanceType]
) -> str:
    held = Counter(a.reservation_names[c] for c in a.reservation if c)
    listing = ", ".join(f"{name} ({_count(a, n)})" for name, n in sorted(held.items()) if name != d.reservation)
    mine = f"; the job may use reservation {d.reservation!r}" if d.reservation else ""
    return f"held by admin reservations: {listing}{mine}"


def _reservation_start(a: NodeArrays, d: Demand, loc: Resolved | None) -> Bools | None:
    if not a.has_upcoming:
        return None
    ends = math.inf if d.horizon is None else d.horizon
    result: Bools = a.reservation_start >= ends
    own = a.reservation_codes.get(d.reservation, 0) if d.reservation else 0
    if own:
        result = result | (a.upcoming == own)
    return result


def _describe_reservation_start(
    a: NodeArrays, d: Demand, scope: Bools, loc: Resolved | None, types: Sequence[InstanceType]
) -> str:
    ends = math.inf if d.horizon is None else d.horizon
    starting = scope & (a.reservation_start < ends)
    starts = Counter(
        (a.reservation_names[a.upcoming[i]], float(a.reservation_start[i])) for i in np.flatnonzero(starting)
    )
    listing = ", ".join(
        f"{name} at {datetime.fromtimestamp(start, UTC):%Y-%m-%d %H:%M} UTC ({_count(a, n)})"
        for (name, start), n in sorted(starts.items(), key=lambda item: item[0][1])
    )
    limit = (
        "it has no time limit"
        if d.horizon is None or math.isinf(d.horizon)
        else f"it could run until {datetime.fromtimestamp(d.horizon, UTC):%Y-%m-%d %H:%M} UTC"
    )
    return (
        f"admin reservations start before the job would end ({limit}): {listing}; a shorter --time-limit,"
        " or naming the reservation, lets it run there until then"
    )


def _category(a: NodeArrays, d: Demand, loc: Resolved | None) -> Bools | None:
    return ~a.category_blocked if a.category_blocked.any() else None


def _describe_category(
    a: NodeArrays, d: Demand, scope: Bools, loc: Resolved | None, types: Sequence[InstanceType]
) -> str:
    counts = Counter(c for i in np.flatnonzero(a.category_blocked) for c in a.categories[i])
    return "in a category that takes no work: " + ", ".join(f"{c} ({n})" for c, n in sorted(counts.items()))


# --- job count, capness and exclusive ------------------------------------------------------------


def _max_jobs(a: NodeArrays, d: Demand, loc: Resolved | None) -> Bools | None:
    if not a.has_job_limits:
        return None
    result: Bools = a.jobs < a.max_jobs
    return result


def _describe_max_jobs(
    a: NodeArrays, d: Demand, scope: Bools, loc: Resolved | None, types: Sequence[InstanceType]
) -> str:
    full = np.flatnonzero(a.jobs >= a.max_jobs)
    if not len(full):
        return "no node is at its job limit"
    i = int(full[0])
    return f"at their job limit (e.g. {a.ids[i]} runs {a.jobs[i]:g} of {a.max_jobs[i]:g})"


def capness_mask(a: NodeArrays, capped: bool) -> Bools | None:
    if capped:
        result: Bools = (a.capped_pin == 1) | ((a.capped_pin == -1) & (a.uncapped_jobs == 0))
        return result
    if not a.any_capped:
        return None
    result = (a.capped_pin == 0) | ((a.capped_pin == -1) & (a.capped_jobs == 0))
    return result


def _capness(a: NodeArrays, d: Demand, loc: Resolved | None) -> Bools | None:
    return capness_mask(a, d.capped)


def _describe_capness(
    a: NodeArrays, d: Demand, scope: Bools, loc: Resolved | None, types: Sequence[InstanceType]
) -> str:
    if a.noun != "node":  # new nodes of instance types run nothing: only a pin rules them out
        pinned = "uncapped" if d.capped else "capped"
        return f"the job has {'a' if d.capped else 'no'} CPU cap; these {a.noun}s are pinned {pinned}"
    if d.capped:
        return "the job has a CPU cap; these nodes run uncapped jobs or are pinned uncapped"
    return "the job has no CPU cap; these nodes run capped jobs or are pinned capped"


def exclusive_mask(a: NodeArrays, exclusive: bool) -> Bools | None:
    """Slurm's --exclusive: an exclusive job only on a node that runs nothing (placed on this pass
    included: a commit counts), and no job on a node that runs an exclusive one."""
    if exclusive:
        result: Bools = a.jobs == 0
        return result
    if not a.any_exclusive:
        return None  # the usual pass: no exclusive work anywhere, nothing to combine
    result = a.exclusive_jobs == 0
    return result


def _exclusive(a: NodeArrays, d: Demand, loc: Resolved | None) -> Bools | None:
    return exclusive_mask(a, d.exclusive)


def _describe_exclusive(
    a: NodeArrays, d: Demand, scope: Bools, loc: Resolved | None, types: Sequence[InstanceType]
) -> str:
    if d.exclusive:
        busy = scope & (a.jobs > 0)
        if not busy.any():
            busy = a.jobs > 0
        i = int(np.flatnonzero(busy)[0]) if busy.any() else -1
        example = f" (e.g. {a.ids[i]} runs {_jobs(a.jobs[i])})" if i >= 0 else ""
        return f"the job runs alone (--exclusive); these {a.noun}s run other jobs{example}: it waits for one to empty"
    held = scope & (a.exclusive_jobs > 0)
    if not held.any():
        held = a.exclusive_jobs > 0
    return (
        f"these {a.noun}s run an exclusive job (--exclusive), which shares its node with no other: {_sample(a, held)}"
    )


def _jobs(n: float) -> str:
    return f"{n:g} job{'' if n == 1 else 's'}"


# --- platform and traits -------------------------------------------------------------------------


def platform_threshold(a: NodeArrays, minimum: str) -> int:
    """The lowest platform rank that satisfies `minimum` (ranks are ordinal over the fleet)."""
    return bisect.bisect_left(a.platform_versions, attr.version_key(minimum))


def _platform(a: NodeArrays, d: Demand, loc: Resolved | None) -> Bools | None:
    if d.min_platform is None:
        return None
    result: Bools = a.platform_rank >= platform_threshold(a, d.min_platform)
    return result


def _describe_platform(
    a: NodeArrays, d: Demand, scope: Bools, loc: Resolved | None, types: Sequence[InstanceType]
) -> str:
    ranked = np.where(scope, a.platform_rank, -1.0)
    if not a.n or ranked.max() < 0:
        return f"needs platform >= {d.min_platform}; no {a.noun} reports a platform version"
    best = int(ranked.argmax())
    return f"needs platform >= {d.min_platform}; the newest is {a.platform_text[best]} on {a.ids[best]}"


def _traits(a: NodeArrays, d: Demand, loc: Resolved | None) -> Bools | None:
    if not d.traits and not d.forbidden:
        return None
    mask = np.ones(a.n, dtype=bool)
    for key, wanted in d.traits:
        mask &= a.trait_mask(key, wanted)
    for key, unwanted in d.forbidden:
        mask &= ~a.trait_mask(key, unwanted)
    return mask


def _describe_traits(
    a: NodeArrays, d: Demand, scope: Bools, loc: Resolved | None, types: Sequence[InstanceType]
) -> str:
    parts = []
    for key, wanted in d.traits:
        have = int(np.count_nonzero(a.trait_mask(key, wanted)))
        parts.append(f"needs {key}={'|'.join(wanted)} ({have} of {a.n} {a.noun}s have it)")
    for key, unwanted in d.forbidden:
        have = int(np.count_nonzero(a.trait_mask(key, unwanted)))
        parts.append(f"forbids {key}={'|'.join(unwanted)} ({have} of {a.n} {a.noun}s have it)")
    return "; ".join(parts)


# --- resources -----------------------------------------------------------------------------------


def _unit(resource: Resource, amount: float) -> str:
    if resource in (Resource.RAM, Resource.DISK):
        return f"{round(amount / GiB, 2):g} GiB"
    if resource is Resource.CPU:
        return f"{round(amount, 3):g} vcpu"
    return f"{amount:g} GPU"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


_TYPE_CAPACITY = {
    Resource.CPU: lambda t: float(t.vcpus),
    Resource.RAM: lambda t: float(t.ram_mib),
    Resource.DISK: lambda t: float(t.scratch_mib),
    Resource.GPU: lambda t: float(t.gpus),
}
_NOUN = {Resource.CPU: "", Resource.RAM: " RAM", Resource.DISK: " scratch", Resource.GPU: ""}


def _overprovision(a: NodeArrays, d: Demand, loc: Resolved | None) -> Bools | None:
    # Under DEDICATED/COMBINED the ratio already lifts the resource filters' ceiling; only UTILIZED
    # resources would otherwise take requests without bound (the seed's 8 jobs on 4 processors).
    mask: Bools | None = None
    for resource in RESOURCES:
        if a.policy[resource] is Policy.UTILIZED and a.ratio_set[resource] and d.amounts[resource] > 0:
            fits = a.requested_room(resource) >= d.amounts[resource] - EPSILON
            mask = fits if mask is None else mask & fits
    return mask


def _describe_overprovision(
    a: NodeArrays, d: Demand, scope: Bools, loc: Resolved | None, types: Sequence[InstanceType]
) -> str:
    parts = []
    for resource in RESOURCES:
        if a.policy[resource] is Policy.UTILIZED and a.ratio_set[resource] and d.amounts[resource] > 0:
            left = np.where(scope, a.requested_room(resource), -np.inf)
            best = int(left.argmax()) if a.n else -1
            most = f"; the most left is {_unit(resource, left[best])} on {a.ids[best]}" if best >= 0 else ""
            parts.append(
                f"{resource.label} requests may reach {a.ratio[resource]:g} x capacity: "
                f"needs {_unit(resource, d.amounts[resource])}{most}"
            )
    return "; ".join(parts)


def resource_mask(a: NodeArrays, d: Demand, resource: Resource) -> Bools | None:
    wanted = d.amounts[resource]
    if wanted <= 0:
        return None
    result: Bools = a.room[resource] >= wanted - EPSILON
    return result


def _resource_filter(resource: Resource) -> tuple[Mask, Describe]:
    def mask(a: NodeArrays, d: Demand, loc: Resolved | None) -> Bools | None:
        return resource_mask(a, d, resource)

    def describe(a: NodeArrays, d: Demand, scope: Bools, loc: Resolved | None, types: Sequence[InstanceType]) -> str:
        wanted = d.amounts[resource]
        text = f"needs {_unit(resource, wanted)}{_NOUN[resource]}"
        if a.n:
            free = np.where(scope, a.room[resource], -np.inf)
            best = int(free.argmax())
            need = d.node_count
            rank = "largest"
            if need > 1 and np.count_nonzero(scope) >= need:
                # A gang fits only if its need-th best node does: that node's room is what the
                # request must come down to (the largest alone would say it fits).
                best = int(np.argsort(-free, kind="stable")[need - 1])
                rank = f"{_ordinal(need)} largest"
            text += f", the {rank} free is {_unit(resource, max(0.0, free[best]))} on {a.ids[best]}"
            policy = a.policy[resource]
            if policy is Policy.COMBINED:
                unrequested = a.capacity[resource, best] * a.ratio[resource] - a.dedicated[resource, best]
                unused = a.capacity[resource, best] - a.utilized[resource, best]
                if abs(unrequested - unused) > EPSILON:
                    text += (
                        f" ({_unit(resource, max(0.0, unrequested))} not requested,"
                        f" {_unit(resource, max(0.0, unused))} not in use)"
                    )
            elif policy is Policy.UTILIZED:
                text += " (measured use)"
        if types:
            largest = max(_TYPE_CAPACITY[resource](t) for t in types)
            if wanted > largest + EPSILON:
                text += f"; no instance type has more than {_unit(resource, largest)}"
        return text

    return mask, describe


# --- locality ------------------------------------------------------------------------------------


CROWDED = "none of those passes the other filters"  # explain.py names the filters they fail


def _locality(a: NodeArrays, d: Demand, loc: Resolved | None) -> Bools | None:
    return None if loc is None else loc.allowed()


def _describe_locality(
    a: NodeArrays, d: Demand, scope: Bools, loc: Resolved | None, types: Sequence[InstanceType]
) -> str:
    if loc is None:
        return "no locality hints"
    level = loc.hints.level
    parts = []
    if loc.far.running:
        side = loc.far.racks if level == "rack" else loc.far.nodes
        parts.append(f"away from {', '.join(loc.far.running)} ({level}s of {_sample(a, side)})")
    if loc.near.running:
        side = loc.near.racks if level == "rack" else loc.near.nodes
        where = _sample(a, side) if side.any() else "no node that takes work"
        crowded = f"; {CROWDED}" if side.any() and not (side & scope).any() else ""
        parts.append(f"near {', '.join(loc.near.running)} (on {where}{crowded})")
    absent = loc.near.absent + loc.far.absent
    if absent:
        parts.append(f"not running, so ignored: {', '.join(absent)}")
    if loc.unknown:
        parts.append(f"not understood: {', '.join(loc.unknown)} (use a job id or tag:NAME)")
    return ("strict: " if loc.hints.strict else "") + "; ".join(parts)


_ram_mask, _ram_describe = _resource_filter(Resource.RAM)
_cpu_mask, _cpu_describe = _resource_filter(Resource.CPU)
_disk_mask, _disk_describe = _resource_filter(Resource.DISK)
_gpu_mask, _gpu_describe = _resource_filter(Resource.GPU)

FILTERS: dict[str, Filter] = {
    f.name: f
    for f in (
        Filter(
            "state",
            "NODE_NOT_SCHEDULABLE",
            "hard-filter-running, hard-filter-invalid-servers",
            True,
            _state,
            _describe_state,
        ),
        Filter(
            "reserved",
            "NODE_RESERVED",
            "hard-filter-reserved, hard-filter-headnode",
            True,
            _reserved,
            _describe_reserved,
        ),
        Filter("reservation", "ADMIN_RESERVATION", "", True, _reservation, _describe_reservation),
        Filter(
            "reservation-start",
            "RESERVATION_STARTS",
            "",
            False,
            _reservation_start,
            _describe_reservation_start,
        ),
        Filter("category", "NODE_CATEGORY", "", True, _category, _describe_category),
        Filter("max-jobs", "MAX_JOBS_REACHED", "hard-filter-vm-count", False, _max_jobs, _describe_max_jobs),
        Filter("capness", "CAPNESS_MISMATCH", "hard-filter-capness", False, _capness, _describe_capness),
        Filter("exclusive", "EXCLUSIVE", "hard-filter-exclusive", False, _exclusive, _describe_exclusive),
        Filter("platform", "PLATFORM_TOO_OLD", "hard-filter-platform-versions", True, _platform, _describe_platform),
        Filter("traits", "TRAITS_MISMATCH", "hard-filter-traits", True, _traits, _describe_traits),
        Filter(
            "overprovision",
            "OVERPROVISION_LIMIT",
            "hard-filter-overprovision-ratios",
            False,
            _overprovision,
            _describe_overprovision,
        ),
        Filter("min-ram", "INSUFFICIENT_RAM", "hard-filter-min-ram", False, _ram_mask, _ram_describe),
        Filter("min-cpu", "INSUFFICIENT_CPU", "hard-filter-min-cpu", False, _cpu_mask, _cpu_describe),
        Filter("min-disk", "INSUFFICIENT_DISK", "hard-filter-min-disk", False, _disk_mask, _disk_describe),
        Filter("gpus", "INSUFFICIENT_GPU", "", False, _gpu_mask, _gpu_describe),
        Filter("locality", "LOCALITY", "soft-filter-locality-hints", False, _locality, _describe_locality),
    )
}

# Filters that compare one resource's room with the request; the engine inlines them (same test as
# `resource_mask`).
RESOURCE_FILTERS: dict[str, Resource] = {
    "min-ram": Resource.RAM,
    "min-cpu": Resource.CPU,
    "min-disk": Resource.DISK,
    "gpus": Resource.GPU,
}
