"""Node health checks (Slurm's HealthCheckProgram, as NHC runs it): the agent runs the configured
command every `health_check.interval`; a failure (a non-zero exit, or no exit within the timeout)
puts the node in a failure category of seed 002 (`health_check.category`, `software-failure` by
default), with the check's word in its `health_check` attribute, so that the node takes no new
work, lets what runs finish, and is shut down and replaced as any broken node (seed 004); a
maintenance category keeps it out of service instead. A check that passes again takes back what a
failed one set (the node may still be finishing its work).

`change` is the decision, pure: the attributes to set and to unset on a node, given what it has and
the agent's latest result; None when nothing changes.
"""

from __future__ import annotations

from collections.abc import Mapping

from corral.core.categories import CATEGORY, of

HEALTH = "health_check"  # the node attribute a failed check leaves, with the check's word


def change(
    attributes: Mapping[str, str | list[str]], ok: bool, message: str, category: str
) -> tuple[dict[str, str | list[str]], list[str]] | None:
    categories = list(of(attributes))
    failed_before = HEALTH in attributes
    if not ok:
        said = f"failed: {message}" if message else "failed"
        if failed_before and attributes[HEALTH] == said and category in categories:
            return None
        wanted = categories if category in categories else [*categories, category]
        return {HEALTH: said, CATEGORY: wanted[0] if len(wanted) == 1 else wanted}, []
    if not failed_before:
        return None
    kept = [c for c in categories if c != category]
    if not kept:
        return {}, [HEALTH, CATEGORY]
    return {CATEGORY: kept[0] if len(kept) == 1 else kept}, [HEALTH]
