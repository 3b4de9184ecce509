"""Small hand-built fleets for the placement tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from corral.core.model import (
    Attempt,
    AttemptState,
    GiB,
    InstanceType,
    Job,
    LocalityHints,
    Node,
    NodeState,
    Resources,
)
from corral.core.settings import BootSettings, PolicySettings
from corral.core.snapshot import PlacementResult, Snapshot
from corral.placement.placer import make_placer
from corral.placement.settings import PlacementSettings

NOW = 10_000.0


def node(
    node_id: str,
    vcpus: float = 8,
    ram_gib: float = 32,
    *,
    scratch_gib: float = 100,
    gpus: int = 0,
    state: NodeState = NodeState.IDLE,
    rack: str = "",
    price: float = 1.0,
    used: Resources | None = None,
    used_at: float | None = None,
    **attributes: str | list[str],
) -> Node:
    return Node(
        id=node_id,
        instance_type="t",
        capacity=Resources(vcpus, int(ram_gib * GiB), int(scratch_gib * GiB), gpus),
        price_per_hour=price,
        state=state,
        rack=rack,
        used=used or Resources(0.0, 0, 0, 0),
        used_at=used_at,
        attributes=dict(attributes),
    )


def job(
    job_id: int,
    vcpus: float = 1,
    ram_gib: float = 1,
    *,
    scratch_gib: float = 0,
    gpus: int = 0,
    nodes: int = 1,
    priority: int = 1,
    submitted_at: float = 0.0,
    time_limit: float | None = None,
    tags: Sequence[str] = (),
    near: Sequence[str] = (),
    far: Sequence[str] = (),
    strict: bool = False,
    level: str = "server",
    **fields: Any,
) -> Job:
    locality = LocalityHints(tuple(near), tuple(far), strict, level) if near or far else None
    return Job(
        id=job_id,
        command=["true"],
        resources=Resources(vcpus, int(ram_gib * GiB), int(scratch_gib * GiB), gpus),
        node_count=nodes,
        priority=priority,
        submitted_at=submitted_at if submitted_at else float(job_id),
        time_limit=time_limit,
        tags=tuple(tags),
        locality=locality,
        **fields,
    )


def running(
    attempt_id: int,
    job_id: int,
    node_ids: Sequence[str],
    resources: Resources,
    *,
    started_at: float | None = NOW - 100,
) -> Attempt:
    return Attempt(
        id=attempt_id,
        job_id=job_id,
        node_ids=list(node_ids),
        resources=resources,
        state=AttemptState.RUNNING if started_at is not None else AttemptState.ASSIGNED,
        assigned_at=(started_at or NOW) - 1,
        started_at=started_at,
    )


def run_pass(
    nodes: Sequence[Node],
    queue: Sequence[Job],
    *,
    settings: PlacementSettings | dict[str, Any] | None = None,
    attempts: Sequence[Attempt] = (),
    other_jobs: Sequence[Job] = (),
    instance_types: Sequence[InstanceType] = (),
    now: float = NOW,
    max_instances: int | None = None,
) -> PlacementResult:
    """One placer call as plan_pass makes it; `free` is capacity less active attempts' requests."""
    free = {n.id: n.capacity for n in nodes}
    for attempt in attempts:
        for node_id in attempt.node_ids:
            if node_id in free:
                free[node_id] = free[node_id] - attempt.resources
    snapshot = Snapshot(
        jobs=list(other_jobs) + list(queue),
        attempts=list(attempts),
        nodes=list(nodes),
        instance_types=list(instance_types),
    )
    placement = (
        settings if isinstance(settings, PlacementSettings) else PlacementSettings.model_validate(settings or {})
    )
    if max_instances is not None:
        policy = PolicySettings(boot=BootSettings(max_instances=max_instances), placement=placement.model_dump())
        placer = make_placer(policy)
    else:
        placer = make_placer(placement)
    return placer(snapshot, list(queue), list(nodes), free, now)


def placed(result: PlacementResult) -> dict[int, tuple[str, ...]]:
    return {p.job_id: p.node_ids for p in result.placements}


def only(**weights: float) -> dict[str, Any]:
    """Settings whose scoring uses just these weights (no tie-break noise unless asked)."""
    return {"weights": weights}
