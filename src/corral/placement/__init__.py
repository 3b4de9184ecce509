"""The placement engine (issue 3): ordered hard filters, weighted scorers, locality hints,
availability policies, EASY backfill and explanations, vectorised over a structure of arrays.

Public API, each name imported from its own module: this package's top imports nothing, so the
configuration and the CLI read the placement settings without loading NumPy and the engine.
- `placer.make_placer(settings)` -> the `Placer` that `plan_pass` calls once per pass;
- `boot.rank_instance_types(job, instance_types, settings)` -> instance types ranked as new empty
  nodes, by the same filters and scorers, for the boot planner;
- `explain.explain(engine, demand)` -> why a job has no node, filter by filter
  (`placer.explain_job(snapshot, job, now, settings)` for a one-off outside a pass);
- `settings.PlacementSettings` -> the `placement` section of the policy settings.
See docs/placement.md.
"""
