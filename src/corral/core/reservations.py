"""Admin reservations as a whole (Slurm's `scontrol create reservation`, seed 002's admin
reservations): which are in force, and what a job naming one that is not gets.

A reservation is held by nodes (an operator's `reservation=NAME` on a live node, with an optional
`reservation_until`) and by instance types (`reservation` among a type's attributes: the instances
booted of it carry it). It is in force while some node not gone or some instance type holds it and
its end has not come. Which nodes a job may use is the `reservation` placement filter's business
alone; this module only answers whether the reservation a job names exists at all:

- at submission, a job naming a reservation in force nowhere is refused, as Slurm refuses it
  ("Requested reservation is invalid");
- in the pass (`hold_back`), a queued job whose reservation has since ended, been removed, or lost
  its last node is neither placed nor booted for, and waits with a reason that says so (Slurm's
  ReservationDeleted), rather than running outside the reservation it asked for;
- in the lifecycle (`keeps`), a node an operator reserved is kept up while its reservation is in
  force, as Slurm keeps a reservation's nodes for it, however long it idles.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from corral.core.model import InstanceType, Job, Node, NodeState
from corral.placement import attributes as attr

Attributes = Mapping[str, attr.AttributeValue]


def in_force(holders: Iterable[Attributes], now: float) -> dict[str, float]:
    """The reservations the `holders` (node or instance type attributes) hold at `now`, each with
    its latest end (inf: open-ended). A holder whose `reservation_until` has passed holds none, as
    the placement filter reads it."""
    found: dict[str, float] = {}
    for attributes in holders:
        name = attr.first(attributes, attr.RESERVATION) if attributes else None
        if not name:
            continue
        until = attr.number(attributes, attr.RESERVATION_UNTIL)
        if until <= now:
            continue
        end = math.inf if math.isnan(until) else until
        found[name] = max(found.get(name, end), end)
    return found


def of_fleet(nodes: Iterable[Node], types: Iterable[InstanceType], now: float) -> dict[str, float]:
    """The reservations in force at `now` on the nodes not gone and on the instance types."""
    held = (n.attributes for n in nodes if n.attributes and n.state is not NodeState.GONE)
    return in_force([*held, *(dict(t.attributes) for t in types if t.attributes)], now)


def refusal(name: str, reservations: Mapping[str, float]) -> str | None:
    """Why a job naming reservation `name` is refused at submission; None when it is in force."""
    if not name or name in reservations:
        return None
    known = ", ".join(sorted(reservations)) or "none"
    return (
        f"Requested reservation is invalid: no admin reservation {name!r} is in force on any node or"
        f" instance type (in force: {known})"
    )


def gone(name: str) -> str:
    """A queued job's wait reason once its reservation is in force nowhere."""
    return (
        f"ReservationDeleted: reservation {name!r} is in force on no node and no instance type (it ended,"
        " was removed, or its nodes are gone); the job waits for it to be put back; or"
        " move the job to another (corral update --reservation) or cancel it"
    )


def hold_back(queue: list[Job], reservations: Mapping[str, float]) -> tuple[list[Job], dict[int, str]]:
    """Of `queue`, the jobs that may go on (in order), and the wait reasons of those whose
    reservation is in force nowhere."""
    held = {job.id: gone(job.reservation) for job in queue if job.reservation and job.reservation not in reservations}
    if not held:
        return queue, held
    return [job for job in queue if job.id not in held], held


def keeps(node: Node, itype: InstanceType | None, now: float) -> bool:
    """Whether an operator's admin reservation in force at `now` keeps `node` from being drained
    when it idles (read as seed 000's busy, as a hold is), until its `reservation_until`.

    Only a reservation the operator set on the node keeps it: one its instance type gives every
    instance booted of it would keep each of them up forever. The node's reservation is its
    type's when its name and its end (or the lack of one) are the type's; so setting a
    `reservation_until` of its own on such an instance does keep it, until then. A node whose
    type is no longer configured cannot be told apart and is not kept."""
    attributes = node.attributes
    name = attr.first(attributes, attr.RESERVATION) if attributes else None
    if not name or itype is None:
        return False
    until = attr.number(attributes, attr.RESERVATION_UNTIL)
    if until <= now or attr.number(attributes, attr.RESERVATION_START) > now:
        return False  # ended, or yet to start (until then the node takes other work too)
    given = dict(itype.attributes)
    if attr.first(given, attr.RESERVATION) != name:
        return True
    inherited_until = attr.number(given, attr.RESERVATION_UNTIL)
    return not (until == inherited_until or (math.isnan(until) and math.isnan(inherited_until)))
