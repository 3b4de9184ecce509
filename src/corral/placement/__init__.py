"""The placement engine (issue 3): ordered hard filters, weighted scorers, locality hints,
availability policies, EASY backfill and explanations, vectorised over a structure of arrays.

Public API:
- `make_placer(settings)` -> the `Placer` that `plan_pass` calls once per pass;
- `rank_instance_types(job, instance_types, settings)` -> instance types ranked as new empty nodes,
  by the same filters and scorers, for the boot planner;
- `explain(engine, demand)` -> why a job has no node, filter by filter (`explain_job(snapshot, job,
  now, settings)` for a one-off outside a pass);
- `PlacementSettings` -> the `placement` section of the policy settings.
See docs/placement.md.
"""

from corral.placement.boot import TypeRank, TypeRanker, rank_instance_types
from corral.placement.demand import Demand
from corral.placement.engine import Engine
from corral.placement.explain import explain
from corral.placement.placer import build_engine, explain_job, make_placer, place
from corral.placement.settings import PlacementSettings

__all__ = [
    "Demand",
    "Engine",
    "PlacementSettings",
    "TypeRank",
    "TypeRanker",
    "build_engine",
    "explain",
    "explain_job",
    "make_placer",
    "place",
    "rank_instance_types",
]
