"""What a node's agent lists at each ping against what corral thinks runs there.

An attempt corral records as running on a node, that the node's agent lists in a ping neither as
running nor as finished, is one the agent has lost track of: a bug, a run it forgot, a start it
lost. Nothing would ever end it (no exit comes, the node keeps pinging), so it would hold its job and
its node's room for ever. As slurmctld fails or requeues a job that slurmd's report says is not
running on its node ("job not running on node": a node failure), and as Arvados cancels a container
whose crunch-run is gone, such an attempt ends as lost, the job's `on_node_failure` deciding.

The judgement must survive the order in which reports cross: a ping the agent composed before it
started an attempt may be received after the start report (they go on separate requests), and a
ping that took long may be received after the next. The agent pings one request at a time, so at
most one ping in a row can predate what the server knows; an attempt is taken for lost only once
UNLISTED_PINGS pings in a row left it out, the first of them at least UNLISTED_INTERVALS ping
intervals before the last (an agent that pings faster than the server's interval is not judged
sooner). An attempt still only assigned is not judged here (`dispatch.start_timeout` is), and an
exit reported in the same ping counts as a listing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

UNLISTED_PINGS = 3
UNLISTED_INTERVALS = 2.0


@dataclass(frozen=True, slots=True)
class Unlisted:
    """A running attempt that the latest pings of its node did not list."""

    since: float  # when the first of them was received
    pings: int  # how many in a row


def tally(
    before: Mapping[int, Unlisted], running: Iterable[int], listed: Collection[int], now: float
) -> dict[int, Unlisted]:
    """After a ping received at `now` that lists `listed` (running or finished): the attempts of
    `running` (those corral records as running on the node) it left out, each with the run of pings
    that left it out. A listing ends the run; an attempt no longer running is no longer tallied."""
    out = {}
    for attempt_id in running:
        if attempt_id in listed:
            continue
        earlier = before.get(attempt_id)
        out[attempt_id] = Unlisted(now, 1) if earlier is None else Unlisted(earlier.since, earlier.pings + 1)
    return out


def lost(unlisted: Mapping[int, Unlisted], now: float, ping_interval: float) -> list[int]:
    """The attempts to take for lost, in id order."""
    return sorted(
        attempt_id
        for attempt_id, seen in unlisted.items()
        if seen.pings >= UNLISTED_PINGS and now - seen.since >= UNLISTED_INTERVALS * ping_interval
    )


def loss(node_id: str, attempt_id: int, seen: Unlisted, now: float) -> str:
    """How the loss was seen, for the job's reason and the node's event."""
    return (
        f"the agent on node {node_id} lost attempt {attempt_id}: {seen.pings} pings over"
        f" {now - seen.since:.0f}s listed it neither as running nor as finished"
    )
