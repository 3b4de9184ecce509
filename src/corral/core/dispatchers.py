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
        if d.id != snapshot.dispatcher_id
        and now - max(d.last_heartbeat, observing) > settings.dispatch.dispatcher_stale
    }
