"""Seed 002 §5.4.2 node categories, as the node manager reads them.

A node's `category` attribute (a string or a list; set by an operator or a trigger with
`corral node NODE category=...`) names what the node is doing or what is wrong with it. The
placement filters decide which categories take no work (`placement.blocking_categories`, and the
two families below whatever it lists: `out_of_service`); the lifecycle matrix (seed 000) reads the
two families:
- maintenance (`hardware-maintenance`, `software-maintenance`, `emergency-maintenance`, any
  `*-maintenance`): Slurm's "maint", busy: left alone, never drained;
- failure (`hardware-failure`, `network-failure`, `storage-failure`, `software-failure`,
  `batch-failure`, `general-failure`, any `*-failure`): broken (seed 004), shut down once empty.

A leaf module: the snapshot index reads it, and the placement package (which imports the index)
may not be imported by the index.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping

CATEGORY = "category"
MAINTENANCE_SUFFIX = "-maintenance"
FAILURE_SUFFIX = "-failure"

# Seed 002's categories as corral spells them (Moab's OtherFailure is `general-failure`, its
# Site1..Site8 are `site1`..`site8`): those under which a node takes no batch work (the default
# `placement.blocking_categories`), and those that only say what a node is doing.
SEED_BLOCKING: tuple[str, ...] = (
    "batch-failure",
    "benchmark",
    "emergency-maintenance",
    "grid-reservation",
    "hardware-failure",
    "hardware-maintenance",
    "network-failure",
    "general-failure",
    "personal-reservation",
    "software-failure",
    "software-maintenance",
    "standing-reservation",
    "storage-failure",
    "user-reservation",
    "vpc",
)
SEED_INFORMATIONAL: tuple[str, ...] = ("active", "idle", "job-reservation", "other", *(f"site{n}" for n in range(1, 9)))
SEED_CATEGORIES: frozenset[str] = frozenset(SEED_BLOCKING + SEED_INFORMATIONAL)


def normalise(name: str) -> str:
    """A category as corral spells it: Moab's `HardwareFailure`, `HWFailure`, `EmergencyMaintenance`
    or `hardware_failure` is `hardware-failure`, `hw-failure`, `emergency-maintenance`: the families
    are read by their `-failure` / `-maintenance` ending, which Moab's spelling hides."""
    kebab = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", name.strip())
    return re.sub(r"[\s_]+", "-", kebab).lower()


def of(attributes: Mapping[str, str | list[str]]) -> tuple[str, ...]:
    value = attributes.get(CATEGORY)
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(str(v) for v in value)


def maintenance(attributes: Mapping[str, str | list[str]]) -> bool:
    return any(c.endswith(MAINTENANCE_SUFFIX) for c in of(attributes))


def out_of_service(values: Iterable[str]) -> bool:
    """Whether these categories take a node out of service whatever `blocking_categories` says:
    a failure or maintenance category, which the lifecycle reads as broken or as maintenance. A
    node placed on would never empty (a broken one), or would be in maintenance with work on it."""
    return any(c.endswith((FAILURE_SUFFIX, MAINTENANCE_SUFFIX)) for c in values)


def unread(values: Iterable[str], blocking: Iterable[str]) -> list[str]:
    """A warning for each of these categories that nothing reads: not a seed 002 category, not
    `blocking` (`placement.blocking_categories`), not of the failure or maintenance family. An
    operator's `hardware-falure` would leave the broken node taking work, without a word."""
    known = SEED_CATEGORIES | set(blocking)
    warnings = []
    for value in values:
        if value in known or out_of_service([value]):
            continue
        close = difflib.get_close_matches(value, sorted(known), n=1)
        guess = f" (did you mean {close[0]!r}?)" if close else ""
        warnings.append(
            f"category {value!r} is not one corral reads{guess}: the node goes on taking work. A node takes"
            " none under any *-failure or *-maintenance category, or one of placement.blocking_categories"
        )
    return warnings


def failures(attributes: Mapping[str, str | list[str]]) -> tuple[str, ...]:
    """The failure categories among the node's (empty: it is not broken)."""
    return tuple(c for c in of(attributes) if c.endswith(FAILURE_SUFFIX)) if attributes else ()
