"""Seed 001's dispatcher heartbeats: whose claims are released because it stopped pinging."""

from __future__ import annotations

from corral.core.settings import PolicySettings
from corral.core.snapshot import Snapshot


def stale_dispatchers(snapshot: Snapshot, now: float, settings: PolicySettings) -> set[str]:
    """The other dispatchers silent for more than `dispatch.dispatcher_stale` (judged from when
    this one started observing, so a restart does not release everyone's claims at once)."""
    observing = snapshot.observing_since
    return {
        d.id
        for d in snapshot.dispatchers
        if d.id != snapshot.dispatcher_id and is_stale(d.last_heartbeat, now, settings, observing)
    }


def newly_silent(snapshot: Snapshot, now: float, settings: PolicySettings) -> list[str]:
    """The stale dispatchers not yet said to be so, that did not stop cleanly: each is told once
    (event `dispatcher.stale`), where their released claims only say it job by job."""
    stale = stale_dispatchers(snapshot, now, settings)
    return sorted(d.id for d in snapshot.dispatchers if d.id in stale and not (d.stopped or d.judged_stale))


def is_stale(last_heartbeat: float, now: float, settings: PolicySettings, observing_since: float = 0.0) -> bool:
    """A dispatcher silent for more than `dispatch.dispatcher_stale`, counted from its last
    heartbeat or from when the judge started observing, whichever is later."""
    return now - max(last_heartbeat, observing_since) > settings.dispatch.dispatcher_stale
