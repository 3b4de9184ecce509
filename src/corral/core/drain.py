"""An operator's drain of a node: Slurm's `scontrol update NodeName=N State=DRAIN` with the
power-saving `POWER_DOWN_ASAP` / `POWER_DOWN_FORCE`, Arvados dispatch-cloud's drain and kill.

Set as the node attribute `drain` (`corral node N drain=true`, or `PATCH /api/nodes/N`):
- `true` (or yes/on/1): the node takes no new work, what runs on it runs on, and once it is empty
  it is shut down, in any billing window (an instance kept only to finish its work earns nothing
  after it); a replacement is booted if the queue needs one;
- `now`: the node is shut down at once; its work is lost as on a failed node, so each job's
  `on_node_failure` (requeue, cancel or hold) decides what becomes of it;
- `false` (or no/off/0, or `--unset drain`) before it is empty: back in service (Slurm's RESUME).

The cloud's notice that it takes an instance back (a spot interruption, which the agent hears from
EC2's metadata service) drains it the same way, with the attribute `interruption` set to the
notice ("terminate at 2026-11-26T06:30:00Z"), which then says why it leaves.

`leaving` says why a node leaves service once empty: an interruption notice, a drain, or a seed-002
failure category.

A leaf module beside `corral.core.categories`: the snapshot index and the lifecycle read it, and
the placement package reads the spellings of yes and no from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from corral.core import categories

DRAIN = "drain"
INTERRUPTION = "interruption"
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off", ""})


class Drain(StrEnum):
    WHEN_EMPTY = "true"
    NOW = "now"


def flag(text: str) -> bool | None:
    """A yes/no attribute value: True, False, or None when it is neither."""
    word = text.strip().lower()
    return True if word in TRUE_WORDS else False if word in FALSE_WORDS else None


def readable(text: str) -> bool:
    """A value the API takes for `drain`: a yes, a no, or `now`."""
    return flag(text) is not None or text.strip().lower() == Drain.NOW


def requested(attributes: Mapping[str, str | list[str]]) -> Drain | None:
    """The drain an operator asked for (None: none, or a value that is neither a yes nor `now`,
    which the API refuses)."""
    value = attributes.get(DRAIN) if attributes else None
    if value is None:
        return None
    text = value if isinstance(value, str) else (str(value[0]) if value else "")
    if text.strip().lower() == Drain.NOW:
        return Drain.NOW
    return Drain.WHEN_EMPTY if flag(text) else None


def interruption(notice: str) -> dict[str, str | list[str]]:
    """The attributes a node the cloud gave notice for gets (`notice`: what is taken back when, as
    "terminate at 2026-11-26T06:30:00Z"): drained, with the notice. The server sets them when an
    agent hears EC2's notice; the simulator when its cloud gives one."""
    return {DRAIN: Drain.WHEN_EMPTY.value, INTERRUPTION: notice}


def leaving(attributes: Mapping[str, str | list[str]]) -> tuple[str, str] | None:
    """Why a node with these attributes leaves service once empty, as (what was set, what it
    means): the cloud's interruption notice (with the drain it comes with); a seed-002 failure
    category (it outranks a maintenance category given with it); or an operator's drain (it
    outranks a hold). None: it stays."""
    if not attributes:
        return None
    asked = requested(attributes)
    notice = attributes.get(INTERRUPTION)
    if notice is not None and asked is not None:
        return f"{INTERRUPTION}={notice if isinstance(notice, str) else ','.join(notice)}", "the cloud takes it back"
    failures = categories.failures(attributes)
    if failures:
        return ", ".join(failures), "broken"
    if asked is not None:
        return f"{DRAIN}={asked.value}", "drained by an operator"
    return None
