"""The nodes of one pass as a structure of arrays, so filters and scorers run over all nodes at once.

Built once per pass from the snapshot; `commit` then applies each placement to the placed nodes
only (O(1) per node), so capacity is current for the next job without rebuilding anything.
Resource arrays have one row per `Resource` (cpu, ram, disk, gpu) and one column per node.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from corral.core.model import Attempt, Job, Node, NodeState, Resources
from corral.placement import attributes as attr
from corral.placement.availability import RESOURCES, AvailabilityPolicy, Policy, Resource, room
from corral.placement.settings import PlacementSettings

Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]

SCHEDULABLE_STATES = (NodeState.IDLE, NodeState.BUSY)
EPSILON = 1e-9  # vcpus are fractional; a request equal to the room fits


def rack_key(node: Node) -> str:
    """Nodes without a rack are each their own rack: unknown racks never make two nodes neighbours."""
    return node.rack or f"node:{node.id}"


@dataclass(frozen=True, slots=True)
class Load:
    """What runs on the nodes: per node id, requests of active attempts, their count, and capness."""

    dedicated: Mapping[str, Resources]
    unmeasured: Mapping[str, Resources]  # requests not yet visible in the node's measured `used`
    jobs: Mapping[str, int]
    capped: Mapping[str, int]
    uncapped: Mapping[str, int]


def measure_load(nodes: Sequence[Node], attempts: Iterable[Attempt], jobs: Mapping[int, Job]) -> Load:
    by_id = {n.id: n for n in nodes}
    dedicated: dict[str, Resources] = {}
    unmeasured: dict[str, Resources] = {}
    count: dict[str, int] = {}
    capped: dict[str, int] = {}
    uncapped: dict[str, int] = {}
    for attempt in attempts:
        if not attempt.state.active:
            continue
        job = jobs.get(attempt.job_id)
        is_capped = bool(job and job.cpu_capped)
        for node_id in attempt.node_ids:
            node = by_id.get(node_id)
            if node is None:
                continue
            dedicated[node_id] = dedicated.get(node_id, Resources(0.0, 0, 0, 0)) + attempt.resources
            count[node_id] = count.get(node_id, 0) + 1
            tally = capped if is_capped else uncapped
            tally[node_id] = tally.get(node_id, 0) + 1
            # Seed 002's one-iteration load bump: a job the agent has not measured yet (not started,
            # or started after the last measurement) counts at its request until it shows up in `used`.
            if node.used_at is None or attempt.started_at is None or attempt.started_at > node.used_at:
                unmeasured[node_id] = unmeasured.get(node_id, Resources(0.0, 0, 0, 0)) + attempt.resources
    return Load(dedicated, unmeasured, count, capped, uncapped)


class NodeArrays:
    def __init__(
        self,
        nodes: Sequence[Node],
        load: Load,
        settings: PlacementSettings,
        now: float,
        free: Mapping[str, Resources] | None = None,
    ) -> None:
        n = len(nodes)
        self.nodes = list(nodes)
        self.ids = [node.id for node in nodes]
        self.index = {node_id: i for i, node_id in enumerate(self.ids)}
        self.n = n
        self.policy: AvailabilityPolicy = settings.availability_policy()
        self.ratio = np.ones(len(RESOURCES))
        self.ratio_set = np.zeros(len(RESOURCES), dtype=bool)
        for resource in RESOURCES:
            if resource.label in settings.overprovision:
                self.ratio[resource] = settings.overprovision[resource.label]
                self.ratio_set[resource] = True

        zero = Resources(0.0, 0, 0, 0)
        self.capacity = _stack(node.capacity for node in nodes)
        if free is not None:
            # The caller's DEDICATED accounting (capacity less active requests) is authoritative.
            self.dedicated = self.capacity - _stack(free.get(node.id, node.capacity) for node in nodes)
        else:
            self.dedicated = _stack(load.dedicated.get(node.id, zero) for node in nodes)
        self.utilized = _stack(node.used + load.unmeasured.get(node.id, zero) for node in nodes)
        self.room = np.empty_like(self.capacity)
        for resource in RESOURCES:
            self._refresh_room(resource, slice(None))

        self.jobs = np.array([load.jobs.get(i, 0) for i in self.ids], dtype=np.float64)
        self.capped_jobs = np.array([load.capped.get(i, 0) for i in self.ids], dtype=np.int64)
        self.uncapped_jobs = np.array([load.uncapped.get(i, 0) for i in self.ids], dtype=np.int64)
        self.price = np.array([node.price_per_hour for node in nodes], dtype=np.float64)
        self.attributes = [node.attributes for node in nodes]

        # One pass over the nodes reads every attribute the engine uses (a loop per attribute over
        # 10,000 nodes cost more than the rest of the build).
        blocked_roles = set(settings.blocked_roles)
        blocking = set(settings.blocking_categories)
        limit = settings.max_jobs_per_node
        default_max_jobs = float(limit) if limit is not None else math.inf
        schedulable = np.zeros(n, dtype=bool)
        reserved = np.zeros(n, dtype=bool)
        category_blocked = np.zeros(n, dtype=bool)
        reservation = np.zeros(n, dtype=np.int64)
        max_jobs = np.full(n, default_max_jobs)
        capped_pin = np.full(n, -1, dtype=np.int64)
        next_reboot = np.full(n, math.nan)
        hardware = np.full(n, math.nan)
        failures = np.zeros(n)
        self.why_unschedulable = [""] * n
        self.categories: list[tuple[str, ...]] = [()] * n
        self.platform_text = [""] * n
        self.reservation_names: list[str] = [""]
        codes: dict[str, int] = {"": 0}
        version_of: dict[str, attr.VersionKey] = {}
        keys: list[attr.VersionKey | None] = [None] * n
        for i, node in enumerate(nodes):
            a = node.attributes
            held = bool(a) and attr.truthy(a, attr.HELD) is True
            schedulable[i] = node.state in SCHEDULABLE_STATES and not held
            if not schedulable[i]:
                self.why_unschedulable[i] = "held" if held else node.state.value
            if not a:
                continue
            reserved[i] = attr.truthy(a, attr.RESERVED) is True or bool(
                set(attr.values(a.get(attr.ROLE))) & blocked_roles
            )
            if attr.CATEGORY in a:
                self.categories[i] = attr.values(a[attr.CATEGORY])
                category_blocked[i] = bool(set(self.categories[i]) & blocking)
            name = attr.first(a, attr.RESERVATION)
            # A reservation past its end time no longer holds; code 0 is "none".
            if name and not (attr.number(a, attr.RESERVATION_UNTIL) <= now):
                if name not in codes:
                    codes[name] = len(self.reservation_names)
                    self.reservation_names.append(name)
                reservation[i] = codes[name]
            if attr.MAX_JOBS in a and not math.isnan(m := attr.number(a, attr.MAX_JOBS)):
                max_jobs[i] = m
            if attr.CAPPED in a and (pin := attr.truthy(a, attr.CAPPED)) is not None:
                capped_pin[i] = int(pin)
            text = attr.first(a, attr.PLATFORM)
            if text:
                self.platform_text[i] = text
                if text not in version_of:
                    version_of[text] = attr.version_key(text)
                keys[i] = version_of[text]
            next_reboot[i] = attr.number(a, attr.NEXT_REBOOT)
            hardware[i] = attr.number(a, attr.HARDWARE_PRIORITY)
            if attr.RECENT_FAILURES in a and not math.isnan(f := attr.number(a, attr.RECENT_FAILURES)):
                failures[i] = f
        self.schedulable = schedulable
        self.reserved = reserved
        self.category_blocked = category_blocked
        self.reservation = reservation
        self.reservation_codes = codes
        self.max_jobs = max_jobs
        self.has_job_limits = bool(np.isfinite(max_jobs).any()) if n else False
        self.capped_pin = capped_pin
        # Lets the capness filter skip its work while no capped job or pin exists.
        self.any_capped = bool(self.capped_jobs.any() or (capped_pin != -1).any())
        # Platform versions become ordinal ranks over the fleet's distinct versions (-1: none), so a
        # minimum version is one comparison and "newest" is a min-max over ranks.
        self.platform_versions = sorted(set(version_of.values()))
        rank_of = {k: r for r, k in enumerate(self.platform_versions)}
        self.platform_rank = np.array([-1 if k is None else rank_of[k] for k in keys], dtype=np.float64)
        self.next_reboot = next_reboot
        self.hardware = hardware
        self.failures = failures

        self.rack_names: list[str] = []
        rack_codes: dict[str, int] = {}
        rack = np.empty(n, dtype=np.int64)
        for i, node in enumerate(nodes):
            key = rack_key(node)
            if key not in rack_codes:
                rack_codes[key] = len(self.rack_names)
                self.rack_names.append(key)
            rack[i] = rack_codes[key]
        self.rack = rack
        self.rack_codes = rack_codes

        # Fleet scales for normalising scores into 0..1; fixed for the pass so scores are comparable
        # between jobs and a placement does not move every other node's score.
        # The largest RAM room any node can have (the overprovision ratio can lift it above capacity),
        # so "free RAM / ram_scale" stays within 0..1.
        self.ram_scale = float(self.capacity[Resource.RAM].max() * max(1.0, self.ratio[Resource.RAM])) if n else 1.0
        self.ram_scale = self.ram_scale or 1.0

        self._policies = [self.policy[r] for r in RESOURCES]
        self._ratios = [float(x) for x in self.ratio]
        self._trait_index: dict[str, dict[str, Bools]] = {}
        self._present: dict[str, Bools] = {}

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
        return np.logical_or.reduce(masks)

    def commit(self, node: int, amounts: tuple[float, float, float, float], capped: bool) -> None:
        """Account one placed job on one node: its request is dedicated at once, and counts as
        utilized (the load bump) until the agent's next measurement includes it.

        Scalar arithmetic on the one column: the same IEEE operations as the vectorised build, so
        an updated node's room is exactly what a rebuild would give."""
        for r, amount in enumerate(amounts):
            if not amount:
                continue
            dedicated = float(self.dedicated[r, node]) + amount
            utilized = float(self.utilized[r, node]) + amount
            self.dedicated[r, node] = dedicated
            self.utilized[r, node] = utilized
            capacity = float(self.capacity[r, node])
            policy = self._policies[r]
            if policy is Policy.DEDICATED:
                self.room[r, node] = capacity * self._ratios[r] - dedicated
            elif policy is Policy.UTILIZED:
                self.room[r, node] = capacity - utilized
            else:
                self.room[r, node] = min(capacity * self._ratios[r] - dedicated, capacity - utilized)
        self.jobs[node] += 1
        if capped:
            self.capped_jobs[node] += 1
            self.any_capped = True
        else:
            self.uncapped_jobs[node] += 1


def _stack(items: Iterable[Resources]) -> Floats:
    rows = [(r.vcpus, r.ram_mib, r.scratch_mib, r.gpus) for r in items]
    if not rows:
        return np.zeros((len(RESOURCES), 0))
    return np.ascontiguousarray(np.array(rows, dtype=np.float64).T)
