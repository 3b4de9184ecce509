"""Node health checks (Slurm's HealthCheckProgram, as NHC runs it): the agent runs the configured
command every `health_check.interval`; a failure (a non-zero exit, or no exit within the timeout)
puts the node in a failure category of seed 002 (`health_check.category`, `software-failure` by
default), with the check's word in its `health_check` attribute, so that the node takes no new
work, lets what runs finish, and is shut down and replaced as any broken node (seed 004); a
maintenance category keeps it out of service instead. A check that passes again takes back what a
failed one set (the node may still be finishing its work).

A check that fails on many nodes at once more likely says something of the check, or of what the
nodes share (a file system, a licence server), than of each node: retiring every node it runs on
would stop the cluster and churn its instances. So, as Karpenter's node repair does, failed checks
take nodes out of service only while the nodes failing theirs are within `health_check.max_unhealthy`
(a count, or a share of the nodes in service rounded up, so that at least one node may always go);
past it a failure is recorded on the node and told as an event, and acted on once few enough fail.

`change` is the decision, pure: the attributes to set and to unset on a node, given what it has,
the agent's latest result and whether the budget lets it go; None when nothing changes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from corral.core.categories import CATEGORY, of

HEALTH = "health_check"  # the node attribute a failed check leaves, with the check's word


_BUDGET = re.compile(r"(\d+)(%?)")


def parse_max_unhealthy(value: object) -> str:
    """`health_check.max_unhealthy`: a count of nodes ("3", at least 1) or a share of the nodes in
    service ("20%", over 0 and at most 100)."""
    text = str(value).strip()
    found = _BUDGET.fullmatch(text)
    if found is None or isinstance(value, bool):
        raise ValueError(f"{value!r}: a count of nodes (e.g. 3) or a share of them (e.g. '20%')")
    number, share = int(found[1]), found[2] == "%"
    if number < 1 or (share and number > 100):
        raise ValueError(f"{value!r}: {'a share over 0% and at most 100%' if share else 'at least 1 node'}")
    return text


def may_take_out(failing: int, in_service: int, max_unhealthy: str) -> bool:
    """Whether failed checks may take nodes out of service while `failing` nodes (this one
    included) fail theirs among `in_service` (paired, not leaving). A share is rounded up, so at
    least one node may always go."""
    found = _BUDGET.fullmatch(max_unhealthy)
    assert found is not None, max_unhealthy  # parse_max_unhealthy checked it
    number = int(found[1])
    allowed = math.ceil(number * max(in_service, failing) / 100) if found[2] else number
    return failing <= max(allowed, 1)


def change(
    attributes: Mapping[str, str | list[str]],
    ok: bool,
    message: str,
    category: str,
    may_act: bool = True,
) -> tuple[dict[str, str | list[str]], list[str]] | None:
    """`may_act`: whether a failure may put the node in `category` now (may_take_out); when not, the
    failure is only recorded in the node's `health_check` attribute."""
    categories = list(of(attributes))
    failed_before = HEALTH in attributes
    if not ok:
        said = f"failed: {message}" if message else "failed"
        if category not in categories and not may_act:
            return None if attributes.get(HEALTH) == said else ({HEALTH: said}, [])
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
