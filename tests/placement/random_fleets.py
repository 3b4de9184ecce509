"""Random fleets, running work and queues for the property and equivalence tests."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from corral.core.model import Attempt, AttemptState, GiB, Job, LocalityHints, Node, NodeState, Resources

VERSIONS = ["1.8", "1.9", "1.10", "2.0"]
ZONES = ["a", "b", "c"]


@dataclass
class World:
    nodes: list[Node]
    attempts: list[Attempt]
    running_jobs: list[Job]
    queue: list[Job]
    settings: dict[str, Any]
    now: float = 50_000.0

    def free(self) -> dict[str, Resources]:
        free = {n.id: n.capacity for n in self.nodes}
        for a in self.attempts:
            for node_id in a.node_ids:
                if node_id in free:
                    free[node_id] = free[node_id] - a.resources
        return free


def world(seed: int, *, n_nodes: int | None = None, n_jobs: int | None = None, windows: bool = False) -> World:
    """`windows`: some nodes also hold admin reservations for a while only (started and ending,
    or starting later), some queued jobs have time limits, and the reservation-start filter is on
    (drawn apart, so the rest of the world is the one `seed` gives without)."""
    w = _world(seed, n_nodes, n_jobs)
    if windows:
        _add_windows(w, random.Random(seed + 1))
    return w


def _add_windows(w: World, rng: random.Random) -> None:
    for n in w.nodes:
        if rng.random() < 0.4:
            n.attributes["reservation"] = "maint"
        if "reservation" not in n.attributes:
            continue
        start = rng.choice([None, w.now + rng.choice([300.0, 900.0, 3000.0])])
        if start is not None:
            n.attributes["reservation_start"] = str(start)
        if rng.random() < 0.8:
            n.attributes["reservation_until"] = str((start or w.now) + rng.choice([200.0, 1200.0, 4000.0]))
    for job in w.queue:
        if rng.random() < 0.6:
            job.time_limit = rng.choice([100.0, 600.0, 2000.0])
    w.settings["filters"].append("reservation-start")


def _world(seed: int, n_nodes: int | None, n_jobs: int | None) -> World:
    rng = random.Random(seed)
    now = 50_000.0
    nodes = []
    for i in range(n_nodes or rng.randint(3, 30)):
        attrs: dict[str, str | list[str]] = {}
        if rng.random() < 0.7:
            attrs["platform"] = rng.choice(VERSIONS)
        if rng.random() < 0.5:
            attrs["zone"] = rng.sample(ZONES, rng.randint(1, 2)) if rng.random() < 0.5 else rng.choice(ZONES)
        if rng.random() < 0.3:
            attrs["ssd"] = "yes"
        if rng.random() < 0.3:
            attrs["next_reboot"] = str(now + rng.uniform(-86400, 60 * 86400))
        if rng.random() < 0.4:
            attrs["hardware_priority"] = str(rng.randint(1, 4))
        if rng.random() < 0.2:
            attrs["recent_failures"] = str(rng.randint(0, 5))
        if rng.random() < 0.05:
            attrs["role"] = "head"
        if rng.random() < 0.05:
            attrs["reserved"] = "true"
        if rng.random() < 0.05:
            attrs["category"] = "hardware-maintenance"
        if rng.random() < 0.1:
            attrs["max_jobs"] = str(rng.randint(1, 4))
        if rng.random() < 0.1:
            attrs["capped"] = rng.choice(["true", "false"])
        if rng.random() < 0.08:
            attrs["reservation"] = "maint"
        cpus = rng.choice([2, 4, 8, 16, 32])
        ram = cpus * rng.choice([2, 4, 8]) * GiB
        used = Resources(round(rng.uniform(0, cpus), 2), int(rng.uniform(0, ram)), 0, 0)
        nodes.append(
            Node(
                id=f"n{i:03d}",
                instance_type="t",
                capacity=Resources(cpus, ram, rng.choice([50, 200]) * GiB, rng.choice([0, 0, 0, 1, 4])),
                price_per_hour=round(cpus * rng.uniform(0.02, 0.06), 3),
                state=rng.choices([NodeState.IDLE, NodeState.BUSY, NodeState.DRAINING], [6, 3, 1])[0],
                rack=rng.choice(["r1", "r2", "r3", ""]),
                used=used if rng.random() < 0.7 else Resources(0.0, 0, 0, 0),
                used_at=now - rng.uniform(0, 60) if rng.random() < 0.8 else None,
                attributes=attrs,
            )
        )
    running_jobs, attempts = [], []
    for k in range(rng.randint(0, len(nodes))):
        host = rng.choice(nodes)
        request = Resources(rng.choice([0.5, 1, 2]), rng.choice([1, 2, 4]) * GiB, 0, 0)
        jid = 10_000 + k
        running_jobs.append(
            Job(
                id=jid,
                command=["x"],
                resources=request,
                tags=(rng.choice(["web", "db", "batch"]),),
                cpu_capped=rng.random() < 0.2,
                exclusive=rng.random() < 0.1,
                time_limit=rng.choice([None, 600.0, 3600.0]),
            )
        )
        started = rng.choice([None, now - rng.uniform(0, 120)])
        attempts.append(
            Attempt(
                id=k + 1,
                job_id=jid,
                node_ids=[host.id],
                resources=request,
                state=AttemptState.RUNNING if started is not None else AttemptState.ASSIGNED,
                assigned_at=now - 200,
                started_at=started,
            )
        )
    queue = []
    for j in range(n_jobs or rng.randint(1, 25)):
        jid = j + 1
        kw: dict[str, Any] = {}
        if rng.random() < 0.3:
            kw["traits"] = {"zone": rng.choice(ZONES) if rng.random() < 0.7 else [rng.choice(ZONES), "z"]}
        if rng.random() < 0.15:
            kw["forbidden_traits"] = {"ssd": rng.choice(["yes", "*"])}
        if rng.random() < 0.2:
            kw["min_platform"] = rng.choice(VERSIONS)
        if rng.random() < 0.15:
            kw["cpu_capped"] = True
        if rng.random() < 0.1:
            kw["exclusive"] = True
        if rng.random() < 0.05:
            kw["reservation"] = "maint"
        if rng.random() < 0.4:
            pool = ["tag:web", "tag:db", "tag:api", str(10_000 + rng.randint(0, 5)), str(rng.randint(1, 25))]
            kw["locality"] = LocalityHints(
                near=tuple(rng.sample(pool, rng.randint(0, 2))),
                far=tuple(rng.sample(pool, rng.randint(0, 2))),
                strict=rng.random() < 0.4,
                level=rng.choice(["server", "rack"]),
            )
        queue.append(
            Job(
                id=jid,
                command=["x"],
                resources=Resources(
                    rng.choice([0.5, 1, 2, 4, 8]),
                    rng.choice([1, 2, 4, 8, 16, 32]) * GiB,
                    rng.choice([0, 0, 10, 100]) * GiB,
                    rng.choice([0, 0, 0, 0, 1]),
                ),
                node_count=rng.choices([1, 2, 3], [8, 1, 1])[0],
                tags=(rng.choice(["web", "api", "batch"]),) if rng.random() < 0.5 else (),
                submitted_at=float(jid),
                **kw,
            )
        )
    names = ["pack", "spread", "balanced", "platform", "reboot", "hardware", "locality", "price", "random", "failures"]
    weights = {name: round(rng.uniform(-1, 2), 3) for name in rng.sample(names, rng.randint(1, 5))}
    weights["random"] = weights.get("random", 0.001) or 0.001  # ties broken the same way by both
    filters = [
        "state",
        "reserved",
        "reservation",
        "category",
        "max-jobs",
        "capness",
        "exclusive",
        "platform",
        "traits",
        "overprovision",
        "min-ram",
        "min-cpu",
        "min-disk",
        "gpus",
        "locality",
    ]
    if rng.random() < 0.3:
        filters.remove(rng.choice(filters))
    rng.shuffle(filters)
    settings: dict[str, Any] = {
        "weights": weights,
        "filters": filters,
        "availability": rng.choice(
            ["COMBINED", "DEDICATED", "UTILIZED", "DEDICATED:PROC COMBINED:MEM", "UTILIZED:MEM"]
        ),
        "queue": {"backfill": "none"},
    }
    if rng.random() < 0.3:
        settings["overprovision"] = {"cpu": rng.choice([1.5, 2.0, 4.0])}
    if rng.random() < 0.2:
        settings["max_jobs_per_node"] = rng.randint(1, 5)
    return World(nodes, attempts, running_jobs, queue, settings, now)
