"""Seed 004: capacity back-off after an insufficient-capacity error.

When the cloud has no capacity of an instance type, booting more of it now only collects more of
the same error (the seed's Slurm plugin learnt this the slow way, node by node). The type is put in
back-off: the boot planner skips it until `unavailable_until`, and picks the next cheapest type
that fits; after the back-off the type is tried again. Both shells record the error through these
functions, so the live loop and the simulator back off identically.

A type whose instance did not pair within the boot grace is backed off the same way, by the
reconcile pass itself (`boot_failed`, below); and so is a type the cloud takes an instance of back
(a spot interruption notice, `record_interruption`, below).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from corral.core.model import Node
from corral.core.retry import format_seconds
from corral.core.settings import BootSettings
from corral.core.snapshot import BootFailures, TypeBackoff
from corral.core.units import utc_text


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


# ---- spot interruptions -------------------------------------------------------------------------
#
# The cloud takes a spot instance back when it needs the capacity for someone paying more: its
# notice says that this type's spot pool is short now, as an insufficient-capacity error would. A
# type booted again at once is likely to be taken back again, its work lost twice; Karpenter marks
# the offering unavailable for a while (its unavailable-offerings cache) and so does corral. In
# corral a type has one market (cloud.ec2.market), so backing the type off backs off its spot
# offering only: the planner boots the next type that fits, an on-demand one included. Both shells
# call this when the notice comes (the server when an agent reports it, the simulator when its
# cloud gives one), so the live loop and the simulator back off identically. The back-off does not
# grow: spot capacity comes back by itself.


def record_interruption(
    unavailable: dict[str, float], instance_type: str, now: float, settings: BootSettings
) -> float | None:
    """Put `instance_type` in back-off in `unavailable` after a spot interruption notice for one of
    its instances; returns the end time, or None when `interruption_backoff` is 0 (off). A back-off
    already running is never shortened."""
    if settings.interruption_backoff <= 0:
        return None
    until = max(unavailable.get(instance_type, 0.0), now + settings.interruption_backoff)
    unavailable[instance_type] = until
    return until


def interruption_message(instance_type: str, node_id: str, notice: str, until: float, now: float) -> str:
    """The back-off's reason (`corral status`, the event `capacity.interruption`)."""
    return (
        f"spot interruption notice for node {node_id} ({notice}): {instance_type}'s spot capacity is short;"
        f" backed off for {format_seconds(max(0.0, until - now))} (policy.boot.interruption_backoff)"
    )


# ---- instances that never pair ------------------------------------------------------------------
#
# An instance that does not pair within `lifecycle.boot_grace` (a broken image, an agent install
# that fails, a security group that blocks the agent) is shut down by the lifecycle matrix (seed
# 000: unpaired, boot exceeded). Booting another of the same type for the same job would fail the
# same way, billed for a whole boot grace each time, for ever. So the type is backed off as after an
# insufficient-capacity error: the planner boots the next type that fits, and with every type
# failing, boots pause until a back-off ends. A broken image does not mend itself, so each failed
# try of the type in a row doubles its back-off (capacity_backoff, 2x, 4x, ... up to
# boot_failure_backoff_max); a pairing of the type ends the row, so a type that fails now and then
# (one slow boot) is back at capacity_backoff at its next failure.


def boot_failure_backoff(failures: int, settings: BootSettings) -> float:
    """How long a type is backed off at its `failures`-th failed boot in a row."""
    base = settings.capacity_backoff
    most = max(base, settings.boot_failure_backoff_max)
    return min(most, base * 2.0 ** min(max(failures - 1, 0), 64))


def boot_failed(
    failed: Iterable[Node],
    rows: Mapping[str, BootFailures],
    unavailable: Mapping[str, float],
    now: float,
    settings: BootSettings,
    boot_grace: float,
) -> list[TypeBackoff]:
    """The back-offs of the types of `failed`, instances this pass shuts down because they did
    not pair within `boot_grace`, given each type's row of failed boots so far (`rows`) and the
    back-offs in force (`unavailable`, never shortened).

    A row counts tries, not instances: an instance booted before its type's last failure was
    booted before anyone knew, as part of the try that failed then (several booted for a queue in
    one pass fail together), and leaves the row as it is; only one booted after it is a new try."""
    rows_now: dict[str, BootFailures] = {}
    ends: dict[str, float] = {}
    backoffs: list[TypeBackoff] = []
    for node in failed:
        name = node.instance_type
        row = rows_now.get(name) or rows.get(name)
        if row is None or row.count <= 0:
            count = 1
        elif node.created_at >= row.last_at:
            count = row.count + 1
        else:
            count = row.count
        rows_now[name] = BootFailures(count, now)
        until = max(ends.get(name, unavailable.get(name, 0.0)), now + boot_failure_backoff(count, settings))
        ends[name] = until
        in_a_row = f" ({count} failed boots of {name} in a row)" if count > 1 else ""
        reason = (
            f"did not pair within boot_grace {format_seconds(boot_grace)}; {name} backed off for"
            f" {format_seconds(until - now)}{in_a_row}"
        )
        backoffs.append(TypeBackoff(name, until, count, node.id, reason))
    return backoffs


def paired_again(rows: Mapping[str, BootFailures], paired: Iterable[Node]) -> list[str]:
    """The types whose row of failed boots ends: an instance of theirs paired at or after the row's
    last failure (`paired`: nodes that may have paired since; a node is idle when it pairs). The
    back-off in force runs its course: the row's end only makes the next failure a first one."""
    ended: list[str] = []
    for node in paired:
        name = node.instance_type
        row = rows.get(name)
        if row is None or row.count <= 0 or name in ended:
            continue
        if node.paired_at is not None and node.paired_at >= row.last_at:
            ended.append(name)
    return ended


def boot_failed_message(backoff: TypeBackoff, instance_id: str | None) -> str:
    """The event's words (`type.boot_failed`): which instance, and what became of its type."""
    instance = f"instance {instance_id} (node {backoff.node_id})" if instance_id else f"node {backoff.node_id}"
    return f"{instance} {backoff.reason}"


# ---- an operator's "try again now" --------------------------------------------------------------


def backoff_cleared_message(instance_type: str, until: float, boot_failures: int, now: float) -> str:
    """The event's words (`type.backoff_cleared`): which type, and what back-off was ended."""
    left = format_seconds(max(0, round(until - now)))
    row = ""
    if boot_failures > 0:
        row = f"; {boot_failures} failed boot{'' if boot_failures == 1 else 's'} in a row"
    return f"{instance_type}: back-off cleared by an operator (was until {utc_text(until)}, {left} more{row})"
