"""Seed 004: capacity back-off after an insufficient-capacity error.

When the cloud has no capacity of an instance type, booting more of it now only collects more of
the same error (the seed's Slurm plugin learnt this the slow way, node by node). The type is put in
back-off: the boot planner skips it until `unavailable_until`, and picks the next cheapest type
that fits; after the back-off the type is tried again. Both shells record the error through these
functions, so the live loop and the simulator back off identically.
"""

from __future__ import annotations

from corral.core.settings import BootSettings


def unavailable_until(now: float, settings: BootSettings) -> float:
    """Until when an instance type that just failed with insufficient capacity is not tried."""
    return now + settings.capacity_backoff


def is_available(instance_type: str, unavailable: dict[str, float], now: float) -> bool:
    """The planner's reading of the back-off table: a type is tried again once its time has come."""
    return unavailable.get(instance_type, 0.0) <= now


def record_insufficient_capacity(
    unavailable: dict[str, float], instance_type: str, now: float, settings: BootSettings
) -> float:
    """Put `instance_type` in back-off in `unavailable` (the shell's table); returns the end time.
    A later error never shortens a back-off already running."""
    until = max(unavailable.get(instance_type, 0.0), unavailable_until(now, settings))
    unavailable[instance_type] = until
    return until
