"""Properties over random fleets: a placed job always fits under the node's availability policy,
strict locality hints are never violated, and backfill's reservation never counts a node an admin
reservation closes to the job during its run."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from random_fleets import World, world

from corral.core.model import Job, NodeState
from corral.core.snapshot import PlacementResult, Snapshot
from corral.placement.availability import Policy, Resource
from corral.placement.placer import make_placer
from corral.placement.settings import PlacementSettings

EPS = 1e-6
RESOURCE_FILTER = ["min-cpu", "min-ram", "min-disk", "gpus"]  # a filter turned off checks nothing
PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


DEFAULT_LIMIT = 600.0


def place(w: World, backfill: str) -> PlacementResult:
    w.settings["queue"] = {"backfill": backfill, "capacity": "bounded", "default_time_limit": DEFAULT_LIMIT}
    snapshot = Snapshot(jobs=w.running_jobs + w.queue, attempts=w.attempts, nodes=w.nodes, instance_types=[])
    return make_placer(PlacementSettings.model_validate(w.settings))(snapshot, w.queue, w.nodes, w.free(), w.now)


def run(w: World, backfill: str) -> list[tuple[Job, tuple[str, ...]]]:
    result = place(w, backfill)
    jobs = {j.id: j for j in w.queue}
    return [(jobs[p.job_id], p.node_ids) for p in result.placements]


@PROPERTY
@given(st.integers(min_value=0, max_value=2**32), st.sampled_from(["none", "easy", "strict-fifo"]))
def test_placed_jobs_fit_under_the_availability_policy(seed: int, backfill: str) -> None:
    w = world(seed)
    placements = run(w, backfill)
    policy = PlacementSettings.model_validate(w.settings).availability_policy()
    ratios = PlacementSettings.model_validate(w.settings).overprovision
    nodes = {n.id: n for n in w.nodes}
    # Requests dedicated on each node, and load not yet measured (the one-pass bump).
    dedicated = {
        n.id: [
            n.capacity.vcpus - f.vcpus,
            n.capacity.ram_mib - f.ram_mib,
            n.capacity.scratch_mib - f.scratch_mib,
            n.capacity.gpus - f.gpus,
        ]
        for n, f in ((nodes[i], f) for i, f in w.free().items())
    }
    utilized = {n.id: [n.used.vcpus, n.used.ram_mib, n.used.scratch_mib, n.used.gpus] for n in w.nodes}
    for a in w.attempts:
        for node_id in a.node_ids:
            n = nodes[node_id]
            if n.used_at is None or a.started_at is None or a.started_at > n.used_at:
                for r, amount in enumerate(
                    (a.resources.vcpus, a.resources.ram_mib, a.resources.scratch_mib, a.resources.gpus)
                ):
                    utilized[node_id][r] += amount
    for job, node_ids in placements:
        assert len(set(node_ids)) == job.node_count
        want = [job.resources.vcpus, job.resources.ram_mib, job.resources.scratch_mib, job.resources.gpus]
        for node_id in node_ids:
            n = nodes[node_id]
            assert n.state in (NodeState.IDLE, NodeState.BUSY) or "state" not in w.settings["filters"]
            cap = [n.capacity.vcpus, n.capacity.ram_mib, n.capacity.scratch_mib, n.capacity.gpus]
            for r in range(4):
                dedicated[node_id][r] += want[r]
                utilized[node_id][r] += want[r]
                if want[r] <= 0 or RESOURCE_FILTER[r] not in w.settings["filters"]:
                    continue
                p = policy[Resource(r)]
                ratio = ratios.get(Resource(r).label, 1.0)
                if p is not Policy.UTILIZED:
                    assert dedicated[node_id][r] <= cap[r] * ratio + EPS, (job.id, node_id, r, "dedicated")
                if p is not Policy.DEDICATED:
                    assert utilized[node_id][r] <= cap[r] + EPS, (job.id, node_id, r, "utilized")


@PROPERTY
@given(st.integers(min_value=0, max_value=2**32), st.sampled_from(["none", "easy"]))
def test_strict_locality_is_never_violated(seed: int, backfill: str) -> None:
    w = world(seed)
    if "locality" not in w.settings["filters"]:
        w.settings["filters"].append("locality")
    placements = run(w, backfill)
    rack = {n.id: n.rack or f"node:{n.id}" for n in w.nodes}
    where: dict[int, list[str]] = {}
    for a in w.attempts:
        where.setdefault(a.job_id, []).extend(a.node_ids)
    tags: dict[str, set[int]] = {}
    for j in w.running_jobs + w.queue:
        for t in j.tags:
            tags.setdefault(t, set()).add(j.id)

    def hosts(entries: tuple[str, ...], self_id: int) -> set[str]:
        ids: set[int] = set()
        for e in entries:
            if e.startswith("tag:"):
                ids |= tags.get(e[4:], set())
            elif e.isdigit():
                ids.add(int(e))
        return {n for j in ids - {self_id} for n in where.get(j, ())}

    for job, node_ids in placements:
        h = job.locality
        if h is not None and h.strict:
            key = (lambda n: rack[n]) if h.level == "rack" else (lambda n: n)
            near = {key(n) for n in hosts(h.near, job.id)}
            far = {key(n) for n in hosts(h.far, job.id)}
            for node_id in node_ids:
                assert key(node_id) not in far, (job.id, node_id, "far")
                if near:
                    assert key(node_id) in near, (job.id, node_id, "near")
        where.setdefault(job.id, []).extend(node_ids)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=2**32))
def test_a_reservation_never_counts_a_node_closed_to_the_job_during_its_run(seed: int) -> None:
    w = world(seed, windows=True)
    result = place(w, "easy")
    nodes = {n.id: n for n in w.nodes}
    jobs = {j.id: j for j in w.queue}
    for job_id, details in result.details.items():
        reserved = details.get("reservation")
        if reserved is None or reserved["job"] != job_id:
            continue
        job = jobs[job_id]
        start = reserved["start"]
        end = start + (job.time_limit if job.time_limit is not None else DEFAULT_LIMIT)
        for node_id in reserved["nodes"]:
            a = nodes[node_id].attributes
            if a.get("reservation") != "maint" or job.reservation == "maint":
                continue
            closed_from = float(str(a.get("reservation_start", w.now)))
            closed_until = float(str(a.get("reservation_until", math.inf)))
            if closed_until <= w.now:
                continue  # ended: no reservation
            if "reservation" not in w.settings["filters"] and closed_from <= w.now:
                continue  # not kept for its reservation: placement ignores it
            assert end <= closed_from or start >= closed_until, (job_id, node_id, start, end)
