"""Ranking instance types for a job as if each were a new, empty node: the same filters and scorers
as placement, so the boot planner and the placer cannot disagree about what fits.

Scored with `boot_weights` (cheapest per job first by default). Locality is left out: a new node
hosts nothing and has no rack yet. A type in capacity back-off is listed as not fitting.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from corral.core.model import InstanceType, Job, Node, NodeState
from corral.placement.arrays import NodeArrays
from corral.placement.demand import Demand
from corral.placement.engine import Engine
from corral.placement.settings import PlacementSettings, coerce

if TYPE_CHECKING:
    from corral.core.settings import PolicySettings

NEW_NODE_PREFIX = "new:"


@dataclass(frozen=True, slots=True)
class TypeRank:
    instance_type: str
    fits: bool
    score: float  # weighted sum of `scores` (0 for a type that cannot hold the job)
    scores: dict[str, float] = field(default_factory=dict)  # per scorer, 0..1
    reason: str = ""  # why it does not fit ("INSUFFICIENT_RAM: ..."), empty when it fits


def virtual_node(instance_type: InstanceType) -> Node:
    return Node(
        id=NEW_NODE_PREFIX + instance_type.name,
        instance_type=instance_type.name,
        capacity=instance_type.capacity,
        price_per_hour=instance_type.price_per_hour,
        state=NodeState.IDLE,
        attributes=dict(instance_type.attributes),
        billing_granularity=instance_type.billing_granularity,
        billing_minimum=instance_type.billing_minimum,
    )


class TypeRanker:
    """Built once per pass (or per config): ranks types for any number of jobs."""

    def __init__(
        self,
        instance_types: Sequence[InstanceType],
        settings: PlacementSettings,
        *,
        now: float = 0.0,
        unavailable: Mapping[str, float] | None = None,
    ) -> None:
        self.types = list(instance_types)
        self.now = now
        self.unavailable = {name: until for name, until in (unavailable or {}).items() if until > now}
        arrays = NodeArrays([virtual_node(t) for t in self.types], None, settings, now)
        arrays.noun = "instance type"
        names = [name for name in settings.filters if name not in ("locality", "state")]
        self.engine = Engine(
            arrays, settings, now=now, weights=settings.boot_weights, instance_types=self.types, filters=names
        )
        self._cache: dict[tuple[object, ...], list[TypeRank]] = {}
        self._fits: dict[tuple[object, ...], bool] = {}
        self._accepting: dict[tuple[object, ...], frozenset[str]] = {}

    def rank(self, demand: Demand) -> list[TypeRank]:
        key = demand.key[:4]
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        engine = self.engine
        fits = engine.hard_mask(demand)
        idx = np.arange(engine.arrays.n, dtype=np.int64)
        exact = engine.exact_scores(demand, idx, None)
        ranks: list[TypeRank] = []
        for i, t in enumerate(self.types):
            if not fits[i]:
                ranks.append(TypeRank(t.name, False, 0.0, {}, self._why_not(demand, i)))
                continue
            scores = {name: round(float(values[i]), 6) for name, values in exact.items()}
            total = sum(w * float(exact[sc.name][i]) for sc, w in engine.weights)
            reason = ""
            if t.name in self.unavailable:
                reason = f"CAPACITY_BACKOFF: not tried again before {self.unavailable[t.name]:.0f}"
            ranks.append(TypeRank(t.name, not reason, round(total, 6), scores, reason))
        price = {t.name: t.price_per_hour for t in self.types}
        ranks.sort(key=lambda r: (not r.fits, -r.score, price[r.instance_type], r.instance_type))
        self._cache[key] = ranks
        return ranks

    def any_fits(self, demand: Demand) -> bool:
        """Whether some type holds the job and is not in capacity back-off: `any(r.fits for r in
        rank(demand))` without scoring the types or describing why the others do not fit."""
        key = demand.key[:4]
        cached = self._fits.get(key)
        if cached is None:
            mask = self.engine.hard_mask(demand)
            cached = any(bool(mask[i]) and t.name not in self.unavailable for i, t in enumerate(self.types))
            self._fits[key] = cached
        return cached

    def accepting(self, demand: Demand) -> frozenset[str]:
        """The types whose new, empty node the filters let the demand run on, capacity back-off
        aside (the boot planner, which weighs room and back-offs itself, asks this of a job
        that wants more of a node than room: traits, platform, reservation)."""
        key = demand.key[:4]
        cached = self._accepting.get(key)
        if cached is None:
            mask = self.engine.hard_mask(demand)
            cached = self._accepting[key] = frozenset(t.name for i, t in enumerate(self.types) if mask[i])
        return cached

    def why_none(self, demand: Demand, names: Sequence[str]) -> str:
        """Why the filters rule out a new node of every one of the types `names` for the demand:
        the filter, in the configured order, that removes the last of them, described over those
        still standing then ("PLATFORM_TOO_OLD: needs platform >= 2; the newest is 1.10 on
        new:big"), as `explain` names the filter that empties the nodes."""
        engine = self.engine
        wanted = set(names)
        alive = np.array([t.name in wanted for t in self.types], dtype=bool)
        for f in engine.filters:
            mask = f.mask(engine.arrays, demand, None)
            if mask is None:
                continue
            if not (alive & mask).any():
                return f"{f.code}: {f.describe(engine.arrays, demand, alive, None, ())}"
            alive &= mask
        return "does not fit"

    def _why_not(self, demand: Demand, i: int) -> str:
        """The first filter, in the configured order, that rules type i out, described on it alone."""
        engine = self.engine
        only = np.zeros(engine.arrays.n, dtype=bool)
        only[i] = True
        for f in engine.filters:
            mask = f.mask(engine.arrays, demand, None)
            if mask is not None and not mask[i]:
                return f"{f.code}: {f.describe(engine.arrays, demand, only, None, ())}"
        return "does not fit"


def rank_instance_types(
    job: Job,
    instance_types: Sequence[InstanceType],
    settings: PlacementSettings | PolicySettings | Mapping[str, Any] | None = None,
    *,
    now: float = 0.0,
    unavailable: Mapping[str, float] | None = None,
) -> list[TypeRank]:
    """Instance types for `job`, best first; types that cannot hold it last, each with its reason."""
    placement = coerce(settings)
    return TypeRanker(instance_types, placement, now=now, unavailable=unavailable).rank(Demand.of(job))
