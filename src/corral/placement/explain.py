"""Why a job has no node: every filter is run over every node, without stopping at the first that
empties the set (users of DAPI, Nomad and kube-scheduler all complain about explanations that do).

For each filter, in the configured order: how many nodes it removed from those still standing,
how many fail it at all, a sample of node ids, and a sentence with quantities about the nearest
miss among the nodes that pass every other filter. Then the node that fails the fewest filters.
The one-line `reason` names the filter that took the survivors below what the job needs:
"INSUFFICIENT_RAM: needs 40 GiB RAM, the largest free is 30 GiB on n-17; no instance type has
more than 32 GiB".
"""

from __future__ import annotations

from typing import Any

import numpy as np

from corral.placement.arrays import EPSILON, Bools
from corral.placement.demand import Demand
from corral.placement.engine import Engine
from corral.placement.filters import CROWDED, RESOURCE_FILTERS, Filter
from corral.placement.locality import Resolved


def _masks(engine: Engine, demand: Demand, resolved: Resolved | None, everything: Bools) -> list[Bools]:
    """Each filter's mask; `everything` itself (not a copy) for a filter that removes nothing."""
    a = engine.arrays
    masks = []
    for f in engine.filters:
        if f.name == "locality" and (resolved is None or not resolved.hints.strict):
            # Soft hints never keep a job from a node that fits: they yield when they would empty the set.
            masks.append(everything)
            continue
        m = f.mask(a, demand, resolved)
        masks.append(everything if m is None else m)
    return masks


def _near_misses(engine: Engine, masks: list[Bools], resolved: Resolved) -> str:
    """Which filters the nodes near a strict `near` hint's targets fail ("b1 fails
    INSUFFICIENT_CPU"): what the request must give up to run there."""
    a = engine.arrays
    side = resolved.near.racks if resolved.hints.level == "rack" else resolved.near.nodes
    parts = []
    for i in np.flatnonzero(side)[: engine.settings.explain_sample]:
        fails = [f.code for f, m in zip(engine.filters, masks, strict=True) if f.name != "locality" and not m[i]]
        parts.append(f"{a.ids[i]} fails {', '.join(fails)}")
    return "; ".join(parts)


def _short_for_good(engine: Engine, demand: Demand) -> Filter | None:
    """The first resource filter whose request too few nodes could meet even empty: the reason the
    job waits whatever ends. A filter earlier in the order that only lacks room now (vcpus in use)
    named a wait that its end would not end: a job needing a GPU no node has read 'INSUFFICIENT_CPU'
    while the CPUs were busy."""
    a = engine.arrays
    for f in engine.filters:
        resource = RESOURCE_FILTERS.get(f.name)
        if resource is None or demand.amounts[resource] <= 0:
            continue
        most = a.capacity[resource] * max(float(a.ratio[resource]), 1.0)
        if np.count_nonzero(most >= demand.amounts[resource] - EPSILON) < demand.node_count:
            return f
    return None


def explain(engine: Engine, demand: Demand, *, quick: bool = False) -> dict[str, Any]:
    """The explanation of why `demand` finds no (or too few) nodes now. `quick` leaves out the
    per-filter sentences and the nearest node, keeping counts and the reason (for long queues)."""
    a = engine.arrays
    need = demand.node_count
    resolved = engine.resolve(demand)
    everything = np.ones(a.n, dtype=bool)
    masks = _masks(engine, demand, resolved, everything)
    types = engine.instance_types

    alive = everything
    alive_count = a.n
    rows: list[dict[str, Any]] = []
    reason = ""
    reason_filter: Filter | None = None
    # Nodes passing every filter except filter i: prefix & suffix products. Most filters remove
    # nothing for a given job: their rows are zeros, and they change no product.
    suffix = [everything]
    if not quick:
        for m in reversed(masks):
            suffix.append(suffix[-1] if m is everything else suffix[-1] & m)
        suffix.reverse()
    prefix = everything
    for i, (f, m) in enumerate(zip(engine.filters, masks, strict=True)):
        row: dict[str, Any] = {"filter": f.name, "code": f.code, "removed": 0, "failed": 0}
        if f.seed:
            row["seed"] = f.seed
        rows.append(row)
        if m is everything:
            continue
        before = alive_count
        removed = alive & ~m
        alive = alive & m
        after = alive_count = before - int(np.count_nonzero(removed))
        failing = ~m
        failed = int(np.count_nonzero(failing))
        row["removed"], row["failed"] = before - after, failed
        emptied = not reason and after < need <= before
        if failed and (not quick or emptied):
            shown = removed if before - after else failing
            row["sample"] = [a.ids[j] for j in np.flatnonzero(shown)[: engine.settings.explain_sample]]
            others = prefix & suffix[i + 1] if not quick else prefix
            # With no node that only this filter stops, the nodes still standing when it runs:
            # the figures are then of a node it removed, not of one an earlier filter took
            # (the free vcpus of a node held by a reservation say nothing about the request).
            scope = others if others.any() else prefix if prefix.any() else np.ones(a.n, dtype=bool)
            row["detail"] = f.describe(a, demand, scope, resolved, types)
            if f.name == "locality" and resolved is not None and CROWDED in row["detail"]:
                row["detail"] = row["detail"].replace(CROWDED, f"{CROWDED}: {_near_misses(engine, masks, resolved)}")
        if emptied:
            reason_filter = f
            reason = f"{f.code}: {row.get('detail', '')}".rstrip(": ")
            if need > 1:
                reason += f" (the job needs {need} nodes, {after} remain)"
        prefix = prefix & m

    survivors = alive_count
    if reason and reason_filter is not None and reason_filter.name in RESOURCE_FILTERS:
        for_good = _short_for_good(engine, demand)
        if for_good is not None and for_good is not reason_filter:
            reason = f"{for_good.code}: {for_good.describe(a, demand, np.ones(a.n, dtype=bool), resolved, types)}"
            if need > 1:
                reason += f" (the job needs {need} nodes)"
    if not a.n:
        reason = "NO_NODES: no running node takes work"
    elif not reason and survivors < need:
        reason = f"TOO_FEW_NODES: the job needs {need} nodes, {survivors} pass every filter"
    result: dict[str, Any] = {
        "job": demand.job_id,
        "request": demand.resources.describe() + (f" on each of {need} nodes" if need > 1 else ""),
        "availability": a.policy.describe(),
        "nodes": a.n,
        "survivors": survivors,
        "filters": rows,
        "reason": reason,
    }
    if not quick and a.n:
        fails = np.zeros(a.n, dtype=np.int64)
        for m in masks:
            if m is not everything:
                fails += ~m
        best = int(fails.argmin())
        result["nearest"] = {
            "node": a.ids[best],
            "fails": [f.code for f, m in zip(engine.filters, masks, strict=True) if not m[best]],
        }
    if resolved is not None:
        result["locality"] = {
            "strict": resolved.hints.strict,
            "level": resolved.hints.level,
            "near_running": resolved.near.running,
            "far_running": resolved.far.running,
            "not_running": resolved.near.absent + resolved.far.absent,
            "not_understood": resolved.unknown,
        }
    return result
