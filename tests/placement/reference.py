"""A plain per-node reference implementation of placement: one node at a time, Python floats, no
NumPy, written from the documented rules (docs/placement.md) rather than from the engine's code.
The equivalence test checks that the vectorised engine chooses the same nodes."""

from __future__ import annotations

import math
import statistics
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from corral.core.model import Attempt, Job, Node, NodeState, Resources
from corral.placement import attributes as attr
from corral.placement.availability import Policy, Resource
from corral.placement.scorers import NOISE_SLOTS, pass_seed
from corral.placement.settings import PlacementSettings

MASK = (1 << 64) - 1
EPS = 1e-9


def splitmix(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def unit(x: int) -> float:
    return (x >> 11) * (1.0 / (1 << 53))


def vec(r: Resources) -> list[float]:
    return [r.vcpus, float(r.ram_mib), float(r.scratch_mib), float(r.gpus)]


def rack_of(n: Node) -> str:
    return n.rack or f"node:{n.id}"


@dataclass
class RefNode:
    node: Node
    dedicated: list[float]
    utilized: list[float]
    jobs: int = 0
    capped: int = 0
    uncapped: int = 0
    exclusive: int = 0  # jobs on it that run alone (--exclusive)

    @property
    def cap(self) -> list[float]:
        return vec(self.node.capacity)


@dataclass
class Reference:
    nodes: Sequence[Node]
    free: dict[str, Resources]
    attempts: Sequence[Attempt]
    all_jobs: Sequence[Job]
    all_nodes: Sequence[Node]
    settings: PlacementSettings
    now: float
    state: list[RefNode] = field(init=False)
    job_nodes: dict[int, list[str]] = field(init=False)
    tag_jobs: dict[str, set[int]] = field(init=False)

    def __post_init__(self) -> None:
        jobs = {j.id: j for j in self.all_jobs}
        self.policy = self.settings.availability_policy()
        self.ratio = [self.settings.overprovision.get(r.label, 1.0) for r in Resource]
        self.ratio_set = [r.label in self.settings.overprovision for r in Resource]
        self.state = []
        for n in self.nodes:
            cap = vec(n.capacity)
            free = vec(self.free[n.id])
            ref = RefNode(n, [c - f for c, f in zip(cap, free, strict=True)], vec(n.used))
            for a in self.attempts:
                if not a.state.active or n.id not in a.node_ids:
                    continue
                ref.jobs += 1
                job = jobs.get(a.job_id)
                if job is not None and job.cpu_capped:
                    ref.capped += 1
                else:
                    ref.uncapped += 1
                if job is not None and job.exclusive:
                    ref.exclusive += 1
                if n.used_at is None or a.started_at is None or a.started_at > n.used_at:
                    ref.utilized = [u + x for u, x in zip(ref.utilized, vec(a.resources), strict=True)]
            self.state.append(ref)
        self.job_nodes = {}
        for a in self.attempts:
            if a.state.active:
                self.job_nodes.setdefault(a.job_id, []).extend(a.node_ids)
        self.tag_jobs = {}
        for j in self.all_jobs:
            for t in j.tags:
                self.tag_jobs.setdefault(t, set()).add(j.id)
        self.rack_by_node = {n.id: rack_of(n) for n in self.all_nodes}
        versions = sorted({attr.version_key(v) for n in self.nodes if (v := attr.first(n.attributes, "platform"))})
        self.versions = versions
        self.ram_scale = max((n.capacity.ram_mib for n in self.nodes), default=1) * max(1.0, self.ratio[1]) or 1.0
        self.gpu_scale = max((n.capacity.gpus for n in self.nodes), default=1) * max(1.0, self.ratio[3]) or 1.0
        self.seed = pass_seed(self.now, self.settings.tie_break_seed)
        self.known_hardware = [
            h for n in self.nodes if not math.isnan(h := attr.number(n.attributes, "hardware_priority"))
        ]
        self._cheapest: dict[tuple[float, ...], float] = {}  # capacities never change, so neither does this

    # --- per-node rules ---

    def room(self, ref: RefNode, r: int) -> float:
        cap = ref.cap[r]
        dedicated_room = cap * self.ratio[r] - ref.dedicated[r]
        utilized_room = cap - ref.utilized[r]
        policy = self.policy[Resource(r)]
        if policy is Policy.DEDICATED:
            return dedicated_room
        if policy is Policy.UTILIZED:
            return utilized_room
        return min(dedicated_room, utilized_room)

    def passes(self, ref: RefNode, job: Job) -> bool:
        n, s, want = ref.node, self.settings, vec(job.resources)
        checks = {
            "state": n.state in (NodeState.IDLE, NodeState.BUSY)
            and attr.truthy(n.attributes, "held") is not True
            and not attr.number(n.attributes, attr.FAILURE_RESERVED_UNTIL) > self.now,
            "reserved": not (
                attr.truthy(n.attributes, "reserved") is True
                or any(role in s.blocked_roles for role in attr.values(n.attributes.get("role")))
            ),
            "reservation": self._reservation_ok(n, job),
            "reservation-start": self._reservation_start_ok(n, job),
            "category": not any(
                c in s.blocking_categories or c.endswith(("-failure", "-maintenance"))
                for c in attr.values(n.attributes.get("category"))
            ),
            "max-jobs": ref.jobs < self._max_jobs(n),
            "capness": self._capness_ok(ref, job),
            # An exclusive job only on a node that runs nothing; no job beside an exclusive one.
            "exclusive": ref.jobs == 0 if job.exclusive else ref.exclusive == 0,
            "platform": job.min_platform is None
            or (
                (v := attr.first(n.attributes, "platform")) is not None
                and attr.version_key(v) >= attr.version_key(job.min_platform)
            ),
            "traits": all(attr.matches(n.attributes.get(k), attr.values(v)) for k, v in job.traits.items())
            and not any(attr.matches(n.attributes.get(k), attr.values(v)) for k, v in job.forbidden_traits.items()),
            "overprovision": all(
                ref.cap[r] * self.ratio[r] - ref.dedicated[r] >= want[r] - EPS
                for r in range(4)
                if self.policy[Resource(r)] is Policy.UTILIZED and self.ratio_set[r] and want[r] > 0
            ),
            "min-cpu": want[0] <= 0 or self.room(ref, 0) >= want[0] - EPS,
            "min-ram": want[1] <= 0 or self.room(ref, 1) >= want[1] - EPS,
            "min-disk": want[2] <= 0 or self.room(ref, 2) >= want[2] - EPS,
            "gpus": want[3] <= 0 or self.room(ref, 3) >= want[3] - EPS,
        }
        return all(ok for name, ok in checks.items() if name in s.filters)

    def _reservation_ok(self, n: Node, job: Job) -> bool:
        name = attr.first(n.attributes, "reservation") or ""
        until = attr.number(n.attributes, "reservation_until")
        if not name or until <= self.now or attr.number(n.attributes, "reservation_start") > self.now:
            return True
        return job.reservation == name

    def _reservation_start_ok(self, n: Node, job: Job) -> bool:
        name = attr.first(n.attributes, "reservation") or ""
        until = attr.number(n.attributes, "reservation_until")
        start = attr.number(n.attributes, "reservation_start")
        if not name or until <= self.now or not start > self.now or job.reservation == name:
            return True
        return job.time_limit is not None and self.now + job.time_limit <= start

    def _max_jobs(self, n: Node) -> float:
        m = attr.number(n.attributes, "max_jobs")
        if not math.isnan(m):
            return m
        return self.settings.max_jobs_per_node if self.settings.max_jobs_per_node is not None else math.inf

    def _capness_ok(self, ref: RefNode, job: Job) -> bool:
        pin = attr.truthy(ref.node.attributes, "capped")
        if job.cpu_capped:
            return pin is True or (pin is None and ref.uncapped == 0)
        return pin is False or (pin is None and ref.capped == 0)

    # --- locality ---

    def targets(self, entries: Sequence[str], self_id: int) -> tuple[set[str], set[str], bool]:
        nodes: set[str] = set()
        for entry in entries:
            if entry.startswith("tag:"):
                ids = self.tag_jobs.get(entry[4:], set())
            else:
                try:
                    ids = {int(entry)}
                except ValueError:
                    continue
            for j in ids:
                if j != self_id:
                    nodes.update(self.job_nodes.get(j, ()))
        racks = {self.rack_by_node.get(n, f"node:{n}") for n in nodes}
        return nodes, racks, bool(nodes)

    def locality(self, job: Job) -> tuple[dict[str, bool], dict[str, bool], dict[str, float]] | None:
        """Per node id: allowed (strict form), far_ok, and the soft score."""
        h = job.locality
        if h is None or not (h.near or h.far):
            return None
        near_nodes, near_racks, near_on = self.targets(h.near, job.id)
        far_nodes, far_racks, far_on = self.targets(h.far, job.id)
        rack_level = h.level == "rack"
        allowed, far_ok, score = {}, {}, {}
        for ref in self.state:
            n = ref.node
            in_near_rack, in_far_rack = rack_of(n) in near_racks, rack_of(n) in far_racks
            near = in_near_rack if rack_level else n.id in near_nodes
            far = in_far_rack if rack_level else n.id in far_nodes
            far_ok[n.id] = not far
            allowed[n.id] = (not far_on or not far) and (not near_on or near)
            parts = []
            if near_on:
                parts.append(1.0 if near else (0.5 if in_near_rack and not rack_level else 0.0))
            if far_on:
                parts.append(0.0 if far else (0.5 if in_far_rack and not rack_level else 1.0))
            score[n.id] = sum(parts) / len(parts) if parts else 0.0
        if not (near_on or far_on):
            return None
        return allowed, far_ok, score

    # --- scores ---

    def scores(self, ref: RefNode, job: Job, soft: dict[str, float] | None) -> dict[str, float]:
        n, want, a = ref.node, vec(job.resources), ref.node.attributes
        room_ram = self.room(ref, 1)
        out: dict[str, float] = {}
        out["pack"] = 1.0 - (room_ram - want[1]) / self.ram_scale
        out["spread"] = (room_ram - want[1]) / self.ram_scale
        out["pack-gpus"] = 1.0 - (self.room(ref, 3) - want[3]) / self.gpu_scale
        rows = [0, 1] + [r for r in (2, 3) if want[r] > 0]
        fractions = []
        for r in rows:
            cap = ref.cap[r]
            used_after = cap - self.room(ref, r) + want[r]
            fractions.append(min(1.0, max(0.0, used_after / cap)) if cap > 0 else 1.0)
        out["balanced"] = 1.0 - 2.0 * statistics.pstdev(fractions)
        v = attr.first(a, "platform")
        if v is None:
            out["platform"] = 0.0
        elif len(self.versions) > 1:
            out["platform"] = self.versions.index(attr.version_key(v)) / (len(self.versions) - 1)
        else:
            out["platform"] = 1.0
        d = attr.number(a, "next_reboot")
        horizon = self.settings.reboot_horizon
        out["reboot"] = min(1.0, (d - self.now) / horizon) if d > self.now else 1.0
        known = self.known_hardware
        h = attr.number(a, "hardware_priority")
        if math.isnan(h):
            out["hardware"] = 0.0
        else:
            low, high = min(known), max(known)
            out["hardware"] = (h - low) / (high - low) if high > low else 1.0
        f = attr.number(a, "recent_failures")
        out["failures"] = 1.0 - min(1.0, (0.0 if math.isnan(f) else f) / self.settings.failure_saturation)
        cheapest = self.cheapest_per_job(want)
        mine = self._per_job(ref, want)
        out["price"] = (cheapest + 1e-6) / (mine + 1e-6) if math.isfinite(mine) else 0.0
        node_noise = unit(splitmix(zlib.crc32(n.id.encode()) ^ self.seed))
        slot = splitmix((job.id & MASK) ^ self.seed) % NOISE_SLOTS  # jobs share a few tie orders per pass
        job_noise = unit(splitmix(slot ^ self.seed))
        out["random"] = (node_noise + job_noise) % 1.0
        out["locality"] = soft[n.id] if soft is not None else 0.0
        return out

    def cheapest_per_job(self, want: list[float]) -> float:
        key = tuple(want)
        if key not in self._cheapest:
            finite = [p for r in self.state if math.isfinite(p := self._per_job(r, want))]
            self._cheapest[key] = min(finite) if finite else 0.0
        return self._cheapest[key]

    def _per_job(self, ref: RefNode, want: list[float]) -> float:
        copies = math.inf
        for r in range(4):
            if want[r] > 0:
                copies = min(copies, math.floor(ref.cap[r] / want[r] + 1e-9))
        if copies < 1:
            return math.inf
        return ref.node.price_per_hour / copies

    # --- one job ---

    def place(self, job: Job) -> list[str] | None:
        need = max(1, job.node_count)
        survivors = [ref for ref in self.state if self.passes(ref, job)]
        loc = self.locality(job) if "locality" in self.settings.filters else None
        soft_scores = None
        if job.locality is not None and (job.locality.near or job.locality.far):
            full = self.locality(job)
            soft_scores = full[2] if full else None
        if loc is not None:
            allowed, far_ok, _ = loc
            narrowed = [r for r in survivors if allowed[r.node.id]]
            strict = job.locality is not None and job.locality.strict
            if strict or len(narrowed) >= need:
                survivors = narrowed
            else:
                h = job.locality
                assert h is not None
                near_on = self.targets(h.near, job.id)[2]
                far_on = self.targets(h.far, job.id)[2]
                far_only = [r for r in survivors if far_ok[r.node.id]]
                if near_on and far_on and len(far_only) >= need:
                    survivors = far_only
        if len(survivors) < need:
            return None
        weights = self.settings.weights
        ranked = []
        alive = {id(ref) for ref in survivors}
        for pos, ref in enumerate(self.state):
            if id(ref) not in alive:
                continue
            s = self.scores(ref, job, soft_scores)
            total = sum(w * s[name] for name, w in weights.items() if w)
            ranked.append((-total, pos, ref))
        ranked.sort(key=lambda t: (t[0], t[1]))
        chosen = [ref for _, _, ref in ranked[:need]]
        want = vec(job.resources)
        for ref in chosen:
            ref.dedicated = [d + w for d, w in zip(ref.dedicated, want, strict=True)]
            ref.utilized = [u + w for u, w in zip(ref.utilized, want, strict=True)]
            ref.jobs += 1
            if job.cpu_capped:
                ref.capped += 1
            else:
                ref.uncapped += 1
            if job.exclusive:
                ref.exclusive += 1
        ids = [ref.node.id for ref in chosen]
        self.job_nodes.setdefault(job.id, []).extend(ids)
        for t in job.tags:
            self.tag_jobs.setdefault(t, set()).add(job.id)
        return ids
