"""Node attribute conventions: the keys in `Node.attributes` (and `InstanceType.attributes`) that
the placement engine reads, and how their string values are understood.

Every other attribute is a trait, matched by a job's `traits` / `forbidden_traits`. A value may be a
list (a node with `zone: [a, b]` matches a job asking for `zone: b`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TypeAlias

from corral.core.categories import CATEGORY  # seed 002 node category, e.g. "hardware-maintenance"; may be a list
from corral.core.drain import DRAIN, flag  # an operator's drain: true, or now
from corral.core.health import HEALTH  # a failed health check's word

AttributeValue: TypeAlias = str | list[str]

PLATFORM = "platform"  # version string; "1.10" > "1.9", "20240301T000000Z" > "20231101T000000Z"
NEXT_REBOOT = "next_reboot"  # epoch seconds of the planned reboot
HARDWARE_PRIORITY = "hardware_priority"  # number; higher is better hardware
RESERVED = "reserved"  # true: no new work at all (hard-filter-reserved)
ROLE = "role"  # e.g. "head"; roles in settings.blocked_roles take no work (hard-filter-headnode)
RESERVATION = "reservation"  # admin reservation name: only jobs with that `reservation` may use the node
RESERVATION_UNTIL = "reservation_until"  # epoch seconds when the reservation ends (absent: open-ended)
# epoch seconds when the reservation starts (absent: in force now); before then the node takes any
# job that ends by then (its time limit), as Slurm's nodes do before a reservation's StartTime
RESERVATION_START = "reservation_start"
MAX_JOBS = "max_jobs"  # jobs the node may run at once (hard-filter-vm-count)
CAPPED = "capped"  # true/false pins the node's capness; absent: follows the jobs running on it
RECENT_FAILURES = "recent_failures"  # recent failures on this node, as an operator counts them (corral node)
HELD = "held"  # true: an operator hold; the node takes no new work
# epoch seconds until which the node takes no new work after a transient failure (seed 002 §5.4.5,
# NODEFAILURERESERVETIME): set by the pass, see policy.dispatch.node_failure_reserve_time
FAILURE_RESERVED_UNTIL = "failure_reserved_until"

ENGINE_KEYS = frozenset(
    {
        PLATFORM,
        NEXT_REBOOT,
        HARDWARE_PRIORITY,
        RESERVED,
        ROLE,
        CATEGORY,
        RESERVATION,
        RESERVATION_UNTIL,
        RESERVATION_START,
        MAX_JOBS,
        CAPPED,
        RECENT_FAILURES,
        HELD,
        DRAIN,
        FAILURE_RESERVED_UNTIL,
    }
)

ANY_VALUE = "*"  # in a job's traits: the key must be present; in forbidden_traits: it must be absent

_VERSION_PART = re.compile(r"\d+|[A-Za-z]+")

VersionKey: TypeAlias = tuple[tuple[int, int, str], ...]


def transient_failure(until: float) -> str:
    """Why a node under a transient failure's reservation takes no work (seed 002 §5.4.5): its end
    as a time a reader knows (the epoch seconds in `%g` read '1.7957e+09', ten minutes off)."""
    return f"TRANSIENT_FAILURE: reserved until {datetime.fromtimestamp(until, UTC):%Y-%m-%d %H:%M:%S} UTC"


def values(value: AttributeValue | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(str(v) for v in value)


def first(attributes: Mapping[str, AttributeValue], key: str) -> str | None:
    found = values(attributes.get(key))
    return found[0] if found else None


def truthy(attributes: Mapping[str, AttributeValue], key: str) -> bool | None:
    """True / False for a recognised spelling, None when absent or unreadable."""
    text = first(attributes, key)
    if text is None:
        return None
    return flag(text)


def number(attributes: Mapping[str, AttributeValue], key: str) -> float:
    """The attribute as a float, NaN when absent or not a number (so one bad value does not stop
    a pass; the node simply scores as if the attribute were missing)."""
    text = first(attributes, key)
    if text is None:
        return math.nan
    try:
        return float(text)
    except ValueError:
        return math.nan


def version_key(text: str) -> VersionKey:
    """Orders versions part by part, numbers numerically: 1.9 < 1.10 < 1.10a."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p.lower()) for p in _VERSION_PART.findall(text))


def matches(node_value: AttributeValue | None, wanted: Sequence[str]) -> bool:
    """A node value (or list of values) matches when any of them is among the wanted values."""
    have = values(node_value)
    if ANY_VALUE in wanted:
        return bool(have)
    return any(v in wanted for v in have)


def service_notes(attributes: Mapping[str, AttributeValue], now: float, when: Callable[[float], str]) -> list[str]:
    """What takes a node out of service (a drain, a hold, a category; a transient failure's
    reservation while it lasts) or would (a failed health check: kept in service while too many
    nodes fail theirs), and whose admin reservation it is in (and until when), `when` writing a
    time: the notes of `corral nodes` and of the dashboard's nodes."""
    notes = [
        f"{key}={value if isinstance(value, str) else ','.join(value)}"
        for key in (DRAIN, HELD, CATEGORY, HEALTH)
        if (value := attributes.get(key))
    ]
    reservation = first(attributes, RESERVATION)
    if reservation:
        # Its end matters as much as its name: until then only its jobs run there, and an
        # operator's reservation keeps the node up while it idles.
        ends = number(attributes, RESERVATION_UNTIL)
        end = "" if math.isnan(ends) else f" {'until' if ends > now else 'ended'} {when(ends)}"
        starts = number(attributes, RESERVATION_START)
        start = f" from {when(starts)}" if starts > now else ""
        notes.append(f"{RESERVATION}={reservation}{start}{end}")
    until = number(attributes, FAILURE_RESERVED_UNTIL)
    if until > now:
        notes.append(f"transient failure: no work until {when(until)}")
    return notes
