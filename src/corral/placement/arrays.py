"""The nodes of one pass as a structure of arrays, so filters and scorers run over all nodes at once.

Built once per pass from the snapshot; `commit` then applies each placement to the placed nodes
only (O(1) per node), so capacity is current for the next job without rebuilding anything.
Resource arrays have one row per `Resource` (cpu, ram, disk, gpu) and one column per node.
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from corral.core import categories, drain
from corral.core.index import SCHEDULABLE
from corral.core.model import ZERO, Node, Resources
from corral.placement import attributes as attr
from corral.placement.availability import RESOURCES, AvailabilityPolicy, Policy, Resource
from corral.placement.settings import PlacementSettings

Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]

EPSILON = 1e-9  # vcpus are fractional; a request equal to the room fits
# NumPy's reductions called directly: what ndarray.sum/.max and np.all/np.any call, without their
# Python-level wrappers (which cost as much as the work on a pass's small arrays, pass after pass).
SUM_OF, MAX_OF = np.add.reduce, np.maximum.reduce
ALL_OF, ANY_OF = np.logical_and.reduce, np.logical_or.reduce
FEW = 8  # refreshing this many nodes or fewer goes one scalar at a time


def rack_key(node: Node) -> str:
    """Nodes without a rack are each their own rack: unknown racks never make two nodes neighbours."""
    return node.rack or f"node:{node.id}"


@dataclass(frozen=True, slots=True)
class Load:
    """What runs on the nodes of one pass, per node position: the summed requests of active
    attempts (resources x nodes), the part of them not yet visible in the node's measured `used`,
    how many attempts there are, and how many of them are CPU-capped and how many exclusive
    (`work.WorkLedger`)."""

    dedicated: Floats
    unmeasured: Floats
    jobs: Floats
    capped: Ints
    exclusive: Ints


def fleet_signature(nodes: Sequence[Node]) -> list[tuple[object, ...]]:
    """Everything `FleetFacts` is computed from, per node; equal signatures give equal facts (up to
    the reservations that expire, see `FleetFacts.valid_at`)."""
    schedulable = SCHEDULABLE
    return [
        (
            n.id,
            None if n.state in schedulable else n.state,  # idle and busy read alike
            n.capacity,
            n.price_per_hour,
            n.rack,
            dict(n.attributes) if n.attributes else None,
        )
        for n in nodes
    ]


class FleetFacts:
    """What a list of nodes says about itself apart from the work on it: capacity, price, state,
    and everything read from attributes (roles, categories, reservations, job limits, platform,
    reboot dates, hardware class, failures, racks, traits). Read only, so a placer may keep it
    between passes while `fleet_signature` of its nodes is unchanged.

    A placer that keeps node slots (`corral.placement.roster`) changes single nodes with `put`
    and then `derive`s what depends on the whole fleet, over the nodes `listed` (those the caller
    would have handed over; None: all)."""

    def __init__(self, nodes: Sequence[Node], settings: PlacementSettings, now: float) -> None:
        n = len(nodes)
        self._settings, self._now = settings, now
        self._blocked_roles, self._blocking = set(settings.blocked_roles), set(settings.blocking_categories)
        self.ids = [node.id for node in nodes]
        self.index = {node_id: i for i, node_id in enumerate(self.ids)}
        self.n = n
        self.capacity = _stack(node.capacity for node in nodes)
        self.price = np.array([node.price_per_hour for node in nodes], dtype=np.float64)
        # How each node bills (the cost gate's paid-through times): fixed for a node's id.
        self.created_at = np.array([node.created_at for node in nodes], dtype=np.float64)
        self.billing_granularity = np.array([node.billing_granularity for node in nodes], dtype=np.float64)
        self.billing_minimum = np.array([node.billing_minimum for node in nodes], dtype=np.float64)
        self.attributes = [node.attributes for node in nodes]
        self.listed: Bools | None = None

        limit = settings.max_jobs_per_node
        self._default_max_jobs = float(limit) if limit is not None else math.inf
        self.schedulable = np.zeros(n, dtype=bool)
        self.reserved = np.zeros(n, dtype=bool)
        self.category_blocked = np.zeros(n, dtype=bool)
        self.reservation = np.zeros(n, dtype=np.int64)
        # A reservation that starts later (its code in `upcoming`): until then the node takes the
        # jobs that end by its start, and any job naming it.
        self.reservation_start = np.full(n, math.inf)
        self.upcoming = np.zeros(n, dtype=np.int64)
        # When the node's reservation (started or not) ends and it returns to general use (inf:
        # never); backfill counts a node closed to a job by a reservation from then.
        self.reservation_until = np.full(n, math.inf)
        self.max_jobs = np.full(n, self._default_max_jobs)
        self.capped_pin = np.full(n, -1, dtype=np.int64)
        self.next_reboot = np.full(n, math.nan)
        self.hardware = np.full(n, math.nan)
        self.failures = np.zeros(n)
        self.why_unschedulable = [""] * n
        self.categories: list[tuple[str, ...]] = [()] * n
        self.platform_text = [""] * n
        self.reservation_names: list[str] = [""]
        self.reservation_codes: dict[str, int] = {"": 0}
        # The earliest time a reservation seen here ends: these facts hold until then.
        self.expires = math.inf
        self._version_of: dict[str, attr.VersionKey] = {}
        self._keys: list[attr.VersionKey | None] = [None] * n
        # Nodes without attributes (most) need only their state: read for all at once.
        taking = [node.state in SCHEDULABLE for node in nodes]
        self.schedulable[:] = taking
        for i in (i for i, ok in enumerate(taking) if not ok):
            self.why_unschedulable[i] = nodes[i].state.value
        # One pass over the nodes with attributes reads every attribute the engine uses (a loop
        # per attribute over 10,000 nodes cost more than the rest of the build).
        for i, node in ((i, node) for i, node in enumerate(nodes) if node.attributes):
            self._read(i, node.attributes)
        self.rack_codes: dict[str, int] = {}
        codes = self.rack_codes
        self.rack = np.array([codes.setdefault(rack_key(node), len(codes)) for node in nodes], dtype=np.int64)
        self.rack_names = list(codes)
        self.trait_index: dict[str, dict[str, Bools]] = {}
        self.present: dict[str, Bools] = {}
        self.derive()

    def _read(self, i: int, a: Mapping[str, str | list[str]]) -> None:
        """Node i's facts from its attributes (every figure starts at its default)."""
        if attr.truthy(a, attr.HELD) is True:
            self.schedulable[i] = False
            self.why_unschedulable[i] = "held"
        if drain.requested(a) is not None:
            self.schedulable[i] = False
            self.why_unschedulable[i] = "drained"
        if attr.FAILURE_RESERVED_UNTIL in a:
            # A transient failure's reservation (seed 002 §5.4.5): no new work until it ends.
            until = attr.number(a, attr.FAILURE_RESERVED_UNTIL)
            if until > self._now:
                self.schedulable[i] = False
                self.why_unschedulable[i] = attr.transient_failure(until)
                self.expires = min(self.expires, until)
        self.reserved[i] = attr.truthy(a, attr.RESERVED) is True or bool(
            set(attr.values(a.get(attr.ROLE))) & self._blocked_roles
        )
        if attr.CATEGORY in a:
            self.categories[i] = attr.values(a[attr.CATEGORY])
            self.category_blocked[i] = bool(set(self.categories[i]) & self._blocking) or categories.out_of_service(
                self.categories[i]
            )
        name = attr.first(a, attr.RESERVATION)
        # A reservation past its end time no longer holds; code 0 is "none".
        until = attr.number(a, attr.RESERVATION_UNTIL)
        if name and not (until <= self._now):
            if name not in self.reservation_codes:
                self.reservation_codes[name] = len(self.reservation_names)
                self.reservation_names.append(name)
            start = attr.number(a, attr.RESERVATION_START)
            if start > self._now:
                self.reservation_start[i] = start
                self.upcoming[i] = self.reservation_codes[name]
                self.expires = min(self.expires, start)
            else:
                self.reservation[i] = self.reservation_codes[name]
            if not math.isnan(until):
                self.reservation_until[i] = until
            if until < self.expires:
                self.expires = until
        if attr.MAX_JOBS in a and not math.isnan(m := attr.number(a, attr.MAX_JOBS)):
            self.max_jobs[i] = m
        if attr.CAPPED in a and (pin := attr.truthy(a, attr.CAPPED)) is not None:
            self.capped_pin[i] = int(pin)
        text = attr.first(a, attr.PLATFORM)
        if text:
            self.platform_text[i] = text
            if text not in self._version_of:
                self._version_of[text] = attr.version_key(text)
            self._keys[i] = self._version_of[text]
        self.next_reboot[i] = attr.number(a, attr.NEXT_REBOOT)
        self.hardware[i] = attr.number(a, attr.HARDWARE_PRIORITY)
        if attr.RECENT_FAILURES in a and not math.isnan(f := attr.number(a, attr.RECENT_FAILURES)):
            self.failures[i] = f

    def derive(self, listed: Bools | None = None) -> None:
        """What depends on the whole fleet, over the nodes `listed` (None: all)."""
        self.listed = listed
        n = self.n
        self.has_job_limits = bool(np.isfinite(self.max_jobs).any()) if n else False
        self.has_upcoming = bool(self.upcoming.any()) if n else False
        # Whether some reservation closes a node to other jobs for a while only (one that starts
        # later, or ends): backfill's reservations then plan around it.
        self.has_windows = self.has_upcoming or (
            bool(((self.reservation != 0) & np.isfinite(self.reservation_until)).any()) if n else False
        )
        # Platform versions become ordinal ranks over the fleet's distinct versions (-1: none), so a
        # minimum version is one comparison and "newest" is a min-max over ranks.
        keys = self._keys
        if not self._version_of:  # no node says its platform: nothing to rank
            self.platform_versions = []
            self.platform_rank = np.full(n, -1.0)
            return
        counted = keys if listed is None else [k for k, on in zip(keys, listed.tolist(), strict=True) if on]
        self.platform_versions = sorted({k for k in counted if k is not None})
        if not self.platform_versions:
            self.platform_rank = np.full(n, -1.0)
        else:
            rank_of = {k: r for r, k in enumerate(self.platform_versions)}
            self.platform_rank = np.array([-1 if k is None else rank_of.get(k, -1) for k in keys], dtype=np.float64)

    def put(self, i: int, node: Node) -> None:
        """Slot i holds `node` now (a new node, or one whose state changed): its facts afresh.
        What depends on the whole fleet waits for `derive`."""
        self.ids[i] = node.id
        self.index[node.id] = i
        c = node.capacity
        self.capacity[:, i] = (c.vcpus, c.ram_mib, c.scratch_mib, c.gpus)
        self.price[i] = node.price_per_hour
        self.created_at[i] = node.created_at
        self.billing_granularity[i] = node.billing_granularity
        self.billing_minimum[i] = node.billing_minimum
        self.attributes[i] = node.attributes
        taking = node.state in SCHEDULABLE
        self.schedulable[i] = taking
        self.why_unschedulable[i] = "" if taking else node.state.value
        self.reserved[i] = self.category_blocked[i] = False
        self.reservation[i], self.capped_pin[i], self.failures[i] = 0, -1, 0.0
        self.reservation_start[i], self.upcoming[i], self.reservation_until[i] = math.inf, 0, math.inf
        self.max_jobs[i] = self._default_max_jobs
        self.next_reboot[i] = self.hardware[i] = math.nan
        self.categories[i], self.platform_text[i], self._keys[i] = (), "", None
        if node.attributes:
            self._read(i, node.attributes)
            self.trait_index.clear()
            self.present.clear()
        self.rack[i] = self.rack_codes.setdefault(rack_key(node), len(self.rack_codes))
        if len(self.rack_names) < len(self.rack_codes):
            self.rack_names.append(rack_key(node))
        if "id_hashes" in self.__dict__:
            self.id_hashes[i] = _id_hash(node.id)

    @functools.cached_property
    def id_hashes(self) -> npt.NDArray[np.uint64]:
        """A stable hash of each node id (the tie-break scorer's per-node seed)."""
        return np.array([_id_hash(node_id) for node_id in self.ids], dtype=np.uint64)

    def valid_at(self, now: float) -> bool:
        """Whether these facts still hold at `now` (no reservation they saw has ended)."""
        return now < self.expires


class NodeArrays:
    def __init__(
        self,
        nodes: Sequence[Node],
        load: Load | None,
        settings: PlacementSettings,
        now: float,
        free: Mapping[str, Resources] | None = None,
        facts: FleetFacts | None = None,
    ) -> None:
        """`load` is what runs on `nodes` (None: nothing); `facts` (of these very nodes, valid at
        `now`) saves rebuilding them, see FleetFacts."""
        if facts is None:
            facts = FleetFacts(nodes, settings, now)
        f = facts
        n = f.n
        self.ids, self.index, self.n = f.ids, f.index, n
        self.now = now  # the pass's (an engine kept between passes moves it on: `PlacementEngine.renew`)
        self.policy: AvailabilityPolicy = settings.availability_policy()
        # Which admin reservations close nodes to other jobs, as the filters in force say: those
        # in force now (the reservation filter), those that start later (reservation-start).
        self.closes_now = "reservation" in settings.filters
        self.closes_later = "reservation-start" in settings.filters
        # Fixed for these arrays, as is `capacity` until a `refleet` (counted in `refleets`).
        self.ratio = np.ones(len(RESOURCES))
        self.refleets = 0
        self.ratio_set = np.zeros(len(RESOURCES), dtype=bool)
        for resource in RESOURCES:
            if resource.label in settings.overprovision:
                self.ratio[resource] = settings.overprovision[resource.label]
                self.ratio_set[resource] = True

        self.capacity = f.capacity
        index = f.index
        # Only nodes with work (or a measurement) differ from zero: they are gathered and written
        # in one assignment each, rather than every node's row built in Python.
        if free is not None:
            # The caller's DEDICATED accounting (capacity less active requests) is authoritative.
            self.dedicated = np.zeros_like(self.capacity)
            busy = [
                (i, room)
                for i, node in enumerate(nodes)
                if (room := free.get(node.id, node.capacity)) is not node.capacity
            ]
            if busy:
                where = [i for i, _ in busy]
                self.dedicated[:, where] = self.capacity[:, where] - _stack(room for _, room in busy)
        elif load is not None:
            self.dedicated = load.dedicated.copy()
        else:
            self.dedicated = np.zeros_like(self.capacity)
        self.used = [node.used for node in nodes]  # the measurements read (see `refresh`)
        used: dict[str, tuple[float, ...]] = {
            node.id: (u.vcpus, u.ram_mib, u.scratch_mib, u.gpus)
            for node, u in zip(nodes, self.used, strict=True)
            if u is not ZERO and u != ZERO
        }
        self.utilized = _scatter(used, index, n)
        if load is not None:
            self.utilized += load.unmeasured
        self.room = np.empty_like(self.capacity)
        for resource in RESOURCES:
            self._refresh_room(resource, slice(None))

        self.jobs = load.jobs.copy() if load is not None else np.zeros(n)
        self.capped_jobs = load.capped.copy() if load is not None else np.zeros(n, dtype=np.int64)
        self.uncapped_jobs = self.jobs.astype(np.int64) - self.capped_jobs
        self.exclusive_jobs = load.exclusive.copy() if load is not None else np.zeros(n, dtype=np.int64)
        # Lets the exclusive filter skip its work for other jobs while no node runs an exclusive one.
        self.any_exclusive = bool(self.exclusive_jobs.any())

        self._policies = [self.policy[r] for r in RESOURCES]
        self._ratios = [float(x) for x in self.ratio]
        # What a column is, as explanations count them: "instance type" where each column is a
        # new node of a type (the boot planner's ranking), so "0 of 3 instance types have it".
        self.noun = "node"
        self._take_facts(f)

    def _take_facts(self, f: FleetFacts) -> None:
        """What the nodes say about themselves, and the fleet scales that follow from it."""
        self.facts = f
        self.price = f.price
        self.attributes = f.attributes
        self.schedulable = f.schedulable
        self.why_unschedulable = f.why_unschedulable
        self.reserved = f.reserved
        self.category_blocked = f.category_blocked
        self.categories = f.categories
        self.reservation = f.reservation
        self.reservation_codes = f.reservation_codes
        self.reservation_names = f.reservation_names
        self.reservation_start = f.reservation_start
        self.upcoming = f.upcoming
        self.has_upcoming = f.has_upcoming
        self.reservation_until = f.reservation_until
        self.has_windows = f.has_windows
        self.max_jobs = f.max_jobs
        self.has_job_limits = f.has_job_limits
        self.capped_pin = f.capped_pin
        # Lets the capness filter skip its work while no capped job or pin exists.
        self._pinned = bool((f.capped_pin != -1).any())
        self.any_capped = self._pinned or bool(self.capped_jobs.any())
        self.platform_versions = f.platform_versions
        self.platform_rank = f.platform_rank
        self.platform_text = f.platform_text
        self.next_reboot = f.next_reboot
        self.hardware = f.hardware
        self.failures = f.failures
        self.rack, self.rack_names, self.rack_codes = f.rack, f.rack_names, f.rack_codes
        self._trait_index = f.trait_index
        self._present = f.present

        # Fleet scales for normalising scores into 0..1; fixed for the pass so scores are comparable
        # between jobs and a placement does not move every other node's score.
        # The largest RAM room any node can have (the overprovision ratio can lift it above capacity),
        # so "free RAM / ram_scale" stays within 0..1.
        ram = self.capacity[Resource.RAM] if f.listed is None else self.capacity[Resource.RAM][f.listed]
        self.ram_scale = float(ram.max() * max(1.0, self.ratio[Resource.RAM])) if len(ram) else 1.0
        self.ram_scale = self.ram_scale or 1.0
        # The same for GPUs; a fleet without any gets 1, where every node's free GPUs are 0.
        gpus = self.capacity[Resource.GPU] if f.listed is None else self.capacity[Resource.GPU][f.listed]
        self.gpu_scale = float(gpus.max() * max(1.0, self.ratio[Resource.GPU])) if len(gpus) else 1.0
        self.gpu_scale = self.gpu_scale or 1.0

    def refleet(self, filled: list[int]) -> None:
        """The facts changed where nodes came (`filled`, slots that held none) or changed state:
        take them again; a new node holds no work, so its room is its capacity."""
        self.refleets += 1
        self.fill(filled)
        self._take_facts(self.facts)

    def fill(self, filled: list[int]) -> None:
        """The room of nodes new in slots `filled` (which held none): their capacity."""
        if filled:
            idx = np.array(filled, dtype=np.int64)
            for resource in RESOURCES:
                self._refresh_room(resource, idx)

    def refresh(self, load: Load, where: list[int], used: list[Resources]) -> list[int]:
        """Take the work at node positions `where` (in order) from `load` and their measured use
        from `used` (every node's), as the build does for every node; the room follows. Returns
        the positions (of `where`, in order) whose figures changed: often none of a node a pass
        placed on, whose figures its commit already moved to what its work now gives."""
        if len(where) > FEW:
            return self._refresh_many(load, np.array(where, dtype=np.int64), used)
        changed_at: list[int] = []
        lost_capped = lost_exclusive = False
        capacity, dedicated_of, utilized_of, room_of = self.capacity, self.dedicated, self.utilized, self.room
        held, unmeasured = load.dedicated, load.unmeasured
        # Scalar arithmetic on each column, read and written as Python floats one column at a
        # time: the same IEEE operations as `_refresh_many` (and the build), without NumPy's
        # per-call cost for the one or two nodes a pass usually changes.
        for i in where:
            u = used[i]
            dedicated = held[:, i].tolist()
            late = unmeasured[:, i].tolist()
            utilized = [
                float(u.vcpus) + late[0],
                float(u.ram_mib) + late[1],
                float(u.scratch_mib) + late[2],
                float(u.gpus) + late[3],
            ]
            room_left = _room_left(self._policies, self._ratios, capacity[:, i].tolist(), dedicated, utilized)
            changed = (
                dedicated_of[:, i].tolist() != dedicated
                or utilized_of[:, i].tolist() != utilized
                or room_of[:, i].tolist() != room_left
            )
            dedicated_of[:, i] = dedicated
            utilized_of[:, i] = utilized
            room_of[:, i] = room_left
            jobs, capped = float(load.jobs[i]), int(load.capped[i])
            uncapped = int(jobs) - capped
            was_capped = int(self.capped_jobs[i])
            exclusive, was_exclusive = int(load.exclusive[i]), int(self.exclusive_jobs[i])
            if changed or self.jobs[i] != jobs or was_capped != capped or was_exclusive != exclusive:
                changed_at.append(i)
            self.jobs[i], self.capped_jobs[i], self.uncapped_jobs[i] = jobs, capped, uncapped
            self.exclusive_jobs[i] = exclusive
            if capped:
                self.any_capped = True
            elif was_capped:
                lost_capped = True
            if exclusive:
                self.any_exclusive = True
            elif was_exclusive:
                lost_exclusive = True
        if lost_capped:  # only then may no node hold capped work any more: look at them all
            self.any_capped = self._pinned or bool(self.capped_jobs.any())
        if lost_exclusive:
            self.any_exclusive = bool(self.exclusive_jobs.any())
        return changed_at

    def _refresh_many(self, load: Load, where: Ints, used: list[Resources]) -> list[int]:
        figures = (self.dedicated, self.utilized, self.room, self.jobs, self.capped_jobs, self.exclusive_jobs)
        was = [values[..., where] for values in figures]
        self.dedicated[:, where] = load.dedicated[:, where]
        self.utilized[:, where] = _stack(used[i] for i in where.tolist()) + load.unmeasured[:, where]
        for resource in RESOURCES:
            self._refresh_room(resource, where)
        self.jobs[where] = load.jobs[where]
        self.capped_jobs[where] = load.capped[where]
        self.uncapped_jobs[where] = load.jobs[where].astype(np.int64) - load.capped[where]
        self.exclusive_jobs[where] = load.exclusive[where]
        self.any_capped = self._pinned or bool(self.capped_jobs.any())
        self.any_exclusive = bool(self.exclusive_jobs.any())
        now = figures
        differs = np.zeros(len(where), dtype=bool)
        for before, values in zip(was, now, strict=True):
            after = values[..., where]
            differs |= (before != after) if before.ndim == 1 else (before != after).any(axis=0)
        changed: list[int] = where[differs].tolist()
        return changed

    def _refresh_room(self, resource: Resource, where: slice | Ints | int) -> None:
        self.room[resource, where] = room(
            self.policy[resource],
            self.capacity[resource, where],
            self.dedicated[resource, where],
            self.utilized[resource, where],
            float(self.ratio[resource]),
        )

    def requested_room(self, resource: Resource) -> Floats:
        """Room left under the overprovision ceiling, judged by requests alone."""
        result: Floats = self.capacity[resource] * self.ratio[resource] - self.dedicated[resource]
        return result

    def trait_mask(self, key: str, wanted: tuple[str, ...]) -> Bools:
        """Nodes whose attribute `key` has any of `wanted` (or is present at all, for '*')."""
        if key not in self._trait_index:
            by_value: dict[str, list[int]] = {}
            present = np.zeros(self.n, dtype=bool)
            for i, attributes in enumerate(self.attributes):
                found = attr.values(attributes.get(key))
                if found:
                    present[i] = True
                for v in found:
                    by_value.setdefault(v, []).append(i)
            index: dict[str, Bools] = {}
            for v, where in by_value.items():
                mask = np.zeros(self.n, dtype=bool)
                mask[where] = True
                index[v] = mask
            self._trait_index[key] = index
            self._present[key] = present
        if attr.ANY_VALUE in wanted:
            return self._present[key]
        index = self._trait_index[key]
        masks = [index[v] for v in wanted if v in index]
        if not masks:
            return np.zeros(self.n, dtype=bool)
        if len(masks) == 1:
            return masks[0]
        return ANY_OF(masks)

    def commit(
        self, node: int, amounts: tuple[float, float, float, float], capped: bool, exclusive: bool = False
    ) -> None:
        """Account one placed job on one node: its request is dedicated at once, and counts as
        utilized (the load bump) until the agent's next measurement includes it.

        Scalar arithmetic on the one column: the same IEEE operations as the vectorised build, so
        an updated node's room is exactly what a rebuild would give."""
        dedicated_of, utilized_of, room_of = self.dedicated, self.utilized, self.room
        dedicated, utilized = dedicated_of[:, node].tolist(), utilized_of[:, node].tolist()
        room_left, capacity = room_of[:, node].tolist(), self.capacity[:, node].tolist()
        for r, amount in enumerate(amounts):
            if not amount:
                continue  # its figures stay as they are (the usual scratch and GPUs)
            dedicated[r] += amount
            utilized[r] += amount
            # `_room_left` for this resource alone.
            policy = self._policies[r]
            if policy is Policy.DEDICATED:
                room_left[r] = capacity[r] * self._ratios[r] - dedicated[r]
            elif policy is Policy.UTILIZED:
                room_left[r] = capacity[r] - utilized[r]
            else:
                room_left[r] = min(capacity[r] * self._ratios[r] - dedicated[r], capacity[r] - utilized[r])
        dedicated_of[:, node] = dedicated
        utilized_of[:, node] = utilized
        room_of[:, node] = room_left
        self.jobs[node] += 1
        if capped:
            self.capped_jobs[node] += 1
            self.any_capped = True
        else:
            self.uncapped_jobs[node] += 1
        if exclusive:
            self.exclusive_jobs[node] += 1
            self.any_exclusive = True


@functools.lru_cache(maxsize=1 << 16)  # node ids come back pass after pass, fleet after fleet
def _id_hash(node_id: str) -> int:
    return zlib.crc32(node_id.encode())


def _scatter(totals: Mapping[str, Sequence[float]], index: Mapping[str, int], n: int) -> Floats:
    """Per-node totals as a resources x nodes array, zero where a node has none."""
    result = np.zeros((len(RESOURCES), n))
    found = [(i, total) for node_id, total in totals.items() if (i := index.get(node_id)) is not None]
    if found:
        result[:, [i for i, _ in found]] = np.array([total for _, total in found], dtype=np.float64).T
    return result


def _stack(items: Iterable[Resources]) -> Floats:
    # One list per resource: NumPy converts a list of floats much faster than a list of rows.
    listed = list(items)
    if not listed:
        return np.zeros((len(RESOURCES), 0))
    return np.array(
        [
            [r.vcpus for r in listed],
            [r.ram_mib for r in listed],
            [r.scratch_mib for r in listed],
            [r.gpus for r in listed],
        ],
        dtype=np.float64,
    )


def room(
    policy: Policy,
    capacity: npt.NDArray[np.float64],
    dedicated: npt.NDArray[np.float64],
    utilized: npt.NDArray[np.float64],
    ratio: float,
) -> npt.NDArray[np.float64]:
    """Room for new work on each node, for one resource (arrays over nodes, or scalars in arrays).

    `ratio` lifts the DEDICATED ceiling (overprovisioning requests); measured use is physical, so
    the UTILIZED side always stops at the real capacity."""
    if policy is Policy.DEDICATED:
        return capacity * ratio - dedicated
    if policy is Policy.UTILIZED:
        return capacity - utilized
    return np.minimum(capacity * ratio - dedicated, capacity - utilized)


def _room_left(
    policies: list[Policy], ratios: list[float], capacity: list[float], dedicated: list[float], utilized: list[float]
) -> list[float]:
    """`room` for one node's column, resource by resource, on Python floats."""
    result = []
    for r, policy in enumerate(policies):
        if policy is Policy.DEDICATED:
            result.append(capacity[r] * ratios[r] - dedicated[r])
        elif policy is Policy.UTILIZED:
            result.append(capacity[r] - utilized[r])
        else:
            result.append(min(capacity[r] * ratios[r] - dedicated[r], capacity[r] - utilized[r]))
    return result
