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
from corral.placement.availability import RESOURCES, AvailabilityPolicy, Policy, Resource, as_vector, room
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
        self.state_names = [node.state.value for node in nodes]
        self.attributes = [node.attributes for node in nodes]

        held = [attr.truthy(node.attributes, attr.HELD) is True for node in nodes]
        self.schedulable = np.array(
            [node.state in SCHEDULABLE_STATES and not h for node, h in zip(nodes, held, strict=True)], dtype=bool
        )
        self.why_unschedulable = [
            "" if ok else ("held" if h else node.state.value)
            for node, ok, h in zip(nodes, self.schedulable, held, strict=True)
        ]
        blocked_roles = set(settings.blocked_roles)
        self.reserved = np.array(
            [
                attr.truthy(node.attributes, attr.RESERVED) is True
                or bool(set(attr.values(node.attributes.get(attr.ROLE))) & blocked_roles)
                for node in nodes
            ],
            dtype=bool,
        )
        blocking = set(settings.blocking_categories)
        self.categories = [attr.values(node.attributes.get(attr.CATEGORY)) for node in nodes]
        self.category_blocked = np.array([bool(set(c) & blocking) for c in self.categories], dtype=bool)

        # Admin reservations: code 0 is "none"; a reservation past its end time no longer holds.
        self.reservation_names: list[str] = [""]
        codes: dict[str, int] = {"": 0}
        reservation = np.zeros(n, dtype=np.int64)
        for i, node in enumerate(nodes):
            name = attr.first(node.attributes, attr.RESERVATION) or ""
            until = attr.number(node.attributes, attr.RESERVATION_UNTIL)
            if name and not (until <= now):
                if name not in codes:
                    codes[name] = len(self.reservation_names)
                    self.reservation_names.append(name)
                reservation[i] = codes[name]
        self.reservation = reservation
        self.reservation_codes = codes

        limit = settings.max_jobs_per_node
        max_jobs = [attr.number(node.attributes, attr.MAX_JOBS) for node in nodes]
        self.max_jobs = np.array(
            [m if not math.isnan(m) else (limit if limit is not None else math.inf) for m in max_jobs], dtype=np.float64
        )
        self.has_job_limits = bool(np.isfinite(self.max_jobs).any()) if n else False
        pins = [attr.truthy(node.attributes, attr.CAPPED) for node in nodes]
        self.capped_pin = np.array([-1 if p is None else int(p) for p in pins], dtype=np.int64)
        # Lets the capness filter skip its work while no capped job or pin exists.
        self.any_capped = bool(self.capped_jobs.any() or (self.capped_pin != -1).any())

        # Platform versions become ordinal ranks over the fleet's distinct versions (-1: none), so a
        # minimum version is one comparison and "newest" is a min-max over ranks.
        keys = [_version(node.attributes) for node in nodes]
        self.platform_versions = sorted({k for k in keys if k is not None})
        rank_of = {k: r for r, k in enumerate(self.platform_versions)}
        self.platform_rank = np.array([-1 if k is None else rank_of[k] for k in keys], dtype=np.float64)
        self.platform_text = [attr.first(node.attributes, attr.PLATFORM) or "" for node in nodes]

        self.next_reboot = np.array([attr.number(node.attributes, attr.NEXT_REBOOT) for node in nodes])
        self.hardware = np.array([attr.number(node.attributes, attr.HARDWARE_PRIORITY) for node in nodes])
        failures = np.array([attr.number(node.attributes, attr.RECENT_FAILURES) for node in nodes])
        self.failures = np.where(np.isnan(failures), 0.0, failures) if n else failures

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

    def commit(self, node: int, vector: Floats, capped: bool) -> None:
        """Account one placed job on one node: its request is dedicated at once, and counts as
        utilized (the load bump) until the agent's next measurement includes it."""
        self.dedicated[:, node] += vector
        self.utilized[:, node] += vector
        for resource in RESOURCES:
            self._refresh_room(resource, node)
        self.jobs[node] += 1
        if capped:
            self.capped_jobs[node] += 1
            self.any_capped = True
        else:
            self.uncapped_jobs[node] += 1

    def checks_utilized(self, resource: Resource) -> bool:
        return self.policy[resource] is not Policy.DEDICATED


def _stack(items: Iterable[Resources]) -> Floats:
    rows = [as_vector(r) for r in items]
    if not rows:
        return np.zeros((len(RESOURCES), 0))
    return np.ascontiguousarray(np.stack(rows, axis=1))


def _version(attributes: Mapping[str, attr.AttributeValue]) -> attr.VersionKey | None:
    text = attr.first(attributes, attr.PLATFORM)
    return attr.version_key(text) if text else None
