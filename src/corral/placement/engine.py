"""The engine of one pass: filters, then scorers, then the best node(s), then the capacity update.

Stages, in the order they run for a job:
1. static filters (their combined mask is cached per distinct set of constraints for the pass);
2. dynamic filters (capacity, job count, capness), on arrays kept current by `commit`;
3. locality hints: strict ones are a hard filter, soft ones narrow the survivors only when enough
   nodes remain (first dropping `near`, then everything), whatever their place in the filter list;
4. scores: the maintained per-node base (request-independent scorers) plus the job-dependent
   scorers, weighted; the best survivor wins, ties going to the lowest node index;
5. commit: the placed nodes' room, job counts and base scores are updated in place.

The configured filter order decides how an explanation reads (which filter "removed" which
nodes, and which one the one-line reason names); the survivors are the same in any order.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from corral.core.model import InstanceType, Resources
from corral.placement.arrays import Bools, Floats, Ints, NodeArrays
from corral.placement.demand import Demand
from corral.placement.filters import FILTERS, Filter
from corral.placement.locality import LocalityIndex, Resolved
from corral.placement.scorers import SCORERS, Index, PassScores, Scorer
from corral.placement.settings import SCORER_NAMES, PlacementSettings


@dataclass(slots=True)
class Evaluation:
    survivors: Bools
    count: int
    resolved: Resolved | None = None
    notes: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Choice:
    nodes: list[int]
    evaluation: Evaluation
    top: list[dict[str, Any]]


class Engine:
    def __init__(
        self,
        arrays: NodeArrays,
        settings: PlacementSettings,
        *,
        now: float,
        weights: Mapping[str, float] | None = None,
        locality: LocalityIndex | None = None,
        instance_types: Sequence[InstanceType] = (),
        free: MutableMapping[str, Resources] | None = None,
        filters: Sequence[str] | None = None,
    ) -> None:
        self.arrays = arrays
        self.settings = settings
        self.now = now
        self.filters: list[Filter] = [FILTERS[name] for name in (settings.filters if filters is None else filters)]
        self._static = [f for f in self.filters if f.static]
        self._dynamic = [f for f in self.filters if not f.static and f.name != "locality"]
        self.locality_filter = any(f.name == "locality" for f in self.filters)
        chosen = settings.weights if weights is None else weights
        self.weights: list[tuple[Scorer, float]] = [
            (SCORERS[name], float(chosen[name])) for name in SCORER_NAMES if chosen.get(name, 0.0)
        ]
        self._based = [(sc, w) for sc, w in self.weights if sc.base is not None]
        self._job_scored = [(sc, w) for sc, w in self.weights if sc.base is None]
        self._noisy = any(sc.name == "random" for sc, _ in self.weights)
        self.scores = PassScores(arrays, settings, now)
        self.base: Floats = self.base_scores(slice(None))
        self.locality = locality
        self.instance_types = list(instance_types)
        self.free = free
        self._all: Bools = np.ones(arrays.n, dtype=bool)
        self._static_cache: dict[tuple[object, ...], Bools] = {}

    # --- filtering ----------------------------------------------------------------------------

    def static_mask(self, demand: Demand) -> Bools:
        key = demand.static_key
        cached = self._static_cache.get(key)
        if cached is None:
            cached = self._all
            for f in self._static:
                m = f.mask(self.arrays, demand, None)
                if m is not None:
                    cached = cached & m
            self._static_cache[key] = cached
        return cached

    def hard_mask(self, demand: Demand, exclude: Bools | None = None) -> Bools:
        """Every filter but locality."""
        mask = self.static_mask(demand)
        for f in self._dynamic:
            m = f.mask(self.arrays, demand, None)
            if m is not None:
                mask = mask & m
        if exclude is not None:
            mask = mask & ~exclude
        return mask

    def resolve(self, demand: Demand) -> Resolved | None:
        if demand.hints is None or self.locality is None:
            return None
        return self.locality.resolve(demand.hints, self.arrays, demand.job_id)

    def evaluate(self, demand: Demand, exclude: Bools | None = None) -> Evaluation:
        mask = self.hard_mask(demand, exclude)
        need = demand.node_count
        resolved = self.resolve(demand)
        notes: list[str] = []
        allowed = resolved.allowed() if resolved is not None and self.locality_filter else None
        if resolved is not None and allowed is not None:
            narrowed = mask & allowed
            if resolved.hints.strict or np.count_nonzero(narrowed) >= need:
                mask = narrowed
            else:
                far_only = mask & resolved.far_ok() if resolved.far.active and resolved.near.active else None
                if far_only is not None and np.count_nonzero(far_only) >= need:
                    mask = far_only
                    notes.append(
                        f"soft locality: 'near {', '.join(resolved.near.running)}' ignored, no node there has room"
                    )
                elif np.count_nonzero(mask) >= need:
                    notes.append("soft locality: hints ignored, they would leave no node that fits")
        return Evaluation(mask, int(np.count_nonzero(mask)), resolved, notes)

    # --- scoring ------------------------------------------------------------------------------

    def base_scores(self, idx: Index) -> Floats:
        total: Floats = np.zeros(self.arrays.capacity[0, idx].shape)
        for scorer, weight in self._based:
            assert scorer.base is not None
            total = total + weight * scorer.base(self.scores, idx)
        return total

    def noise(self, demand: Demand) -> float:
        return self.scores.job_noise(demand.job_id) if self._noisy else 0.0

    def totals(self, demand: Demand, resolved: Resolved | None) -> Floats:
        """Weighted sum used to rank nodes: equal to the exact weighted sum up to a constant over
        nodes (the request part of pack / spread)."""
        total = self.base
        noise = self.noise(demand)
        for scorer, weight in self._job_scored:
            total = total + weight * scorer.exact(self.scores, demand, slice(None), resolved, noise)
        return total

    def exact_scores(self, demand: Demand, idx: Ints, resolved: Resolved | None) -> dict[str, Floats]:
        noise = self.noise(demand)
        return {sc.name: sc.exact(self.scores, demand, idx, resolved, noise) for sc, _ in self.weights}

    def describe_nodes(
        self, demand: Demand, idx: Ints, resolved: Resolved | None, chosen: set[int]
    ) -> list[dict[str, Any]]:
        exact = self.exact_scores(demand, idx, resolved)
        rows = []
        for k, i in enumerate(idx.tolist()):
            scores = {name: round(float(values[k]), 6) for name, values in exact.items()}
            total = sum(w * float(exact[sc.name][k]) for sc, w in self.weights)
            rows.append({"node": self.arrays.ids[i], "score": round(total, 6), "scores": scores, "chosen": i in chosen})
        return rows

    # --- choosing and committing --------------------------------------------------------------

    def choose(self, demand: Demand, exclude: Bools | None = None, *, keep_top: bool = True) -> Choice | None:
        evaluation = self.evaluate(demand, exclude)
        need = demand.node_count
        if evaluation.count < need:
            return None
        total = self.totals(demand, evaluation.resolved)
        masked = np.where(evaluation.survivors, total, -np.inf)
        if need == 1 and not keep_top:
            return Choice([int(masked.argmax())], evaluation, [])
        shown = self.settings.explain_top if keep_top else 0
        ranked = _best(masked, evaluation.survivors, max(need, shown))
        nodes = ranked[:need].tolist()
        top = (
            self.describe_nodes(demand, ranked[: max(need, shown)], evaluation.resolved, set(nodes)) if keep_top else []
        )
        return Choice(nodes, evaluation, top)

    def commit(self, demand: Demand, nodes: Sequence[int], tags: Sequence[str] = ()) -> None:
        a = self.arrays
        for i in nodes:
            a.commit(i, demand.vector, demand.capped)
            if self.free is not None:
                node_id = a.ids[i]
                self.free[node_id] = self.free[node_id] - demand.resources
        where = np.asarray(nodes, dtype=np.int64)
        self.base[where] = self.base_scores(where)
        if self.locality is not None:
            self.locality.add(demand.job_id, tags, [a.ids[i] for i in nodes])


def _best(masked: Floats, survivors: Bools, k: int) -> Ints:
    """The k best survivors, best first; equal scores go to the lower index (as a stable sort would)."""
    if k == 1:
        return np.array([int(masked.argmax())], dtype=np.int64)
    candidates = np.flatnonzero(survivors)
    k = min(k, len(candidates))
    values = masked[candidates]
    if len(candidates) > 4 * k:
        # Partition first so the sort is over a handful; widen by ties at the cut so none is lost.
        cut = np.partition(values, len(values) - k)[len(values) - k]
        keep = values >= cut
        candidates, values = candidates[keep], values[keep]
    order = np.argsort(-values, kind="stable")[:k]
    result: Ints = candidates[order]
    return result
