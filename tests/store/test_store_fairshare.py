"""Fair share's usage as the live loop reads it from a real store (SQLite and PostgreSQL): runs
charged to their users, decayed, each second counted once however the calc times fall."""

from __future__ import annotations

import math

import pytest

from corral.config import Config
from corral.core.snapshot import Snapshot
from corral.loop import LiveLoop
from corral.store import Store

from .storekit import NOW, add_node, after_exit, claim, submit

HOUR = 3600.0


def fair_loop(store: Store) -> LiveLoop:
    config = Config.model_validate(
        {
            "policy": {
                "placement": {"queue": {"order": "fairshare", "fairshare": {"half_life": "1h", "calc_period": "10m"}}}
            }
        }
    )
    return LiveLoop(store, config, "d-test", clock=lambda: NOW)


def usage_at(loop: LiveLoop, now: float) -> dict[str, float]:
    snapshot = Snapshot([], [], [], [])
    loop.fill_usage(snapshot, now)
    return dict(snapshot.fairshare_usage)


def test_the_live_loop_charges_each_users_runs_decayed_and_once(store: Store) -> None:
    add_node(store, "n1", now=NOW - 7200)
    (alice,) = submit(store, 1, user="alice")
    (bob,) = submit(store, 1, user="bob")
    first = claim(store, alice, nodes=["n1"], now=NOW)
    second = claim(store, bob, nodes=["n1"], now=NOW)
    assert store.attempt_started(first, "n1", 11, NOW)
    assert store.attempt_started(second, "n1", 12, NOW)

    loop = fair_loop(store)
    # At the first calc time after NOW + 30 min, both have run one vCPU since NOW.
    early = usage_at(loop, NOW + 1800)
    calc = math.floor((NOW + 1800) / 600) * 600
    ran = HOUR / math.log(2.0) * (1 - 2 ** (-(calc - NOW) / HOUR))
    assert early == pytest.approx({"alice": ran, "bob": ran})

    # alice's run ends between two calc times; bob's goes on. An hour later she has been charged
    # for exactly her hour (counted in two parts), he for all his time.
    assert store.finish_attempt(first, "n1", 0, NOW + HOUR, after_exit(0, first))
    later_time = NOW + 2 * HOUR + 1
    later = usage_at(loop, later_time)
    calc = math.floor(later_time / 600) * 600
    alice_hour = HOUR / math.log(2.0) * (2 ** (-(calc - NOW - HOUR) / HOUR) - 2 ** (-(calc - NOW) / HOUR))
    bob_since = HOUR / math.log(2.0) * (1 - 2 ** (-(calc - NOW) / HOUR))
    assert later == pytest.approx({"alice": alice_hour, "bob": bob_since})
    # Read from scratch by a loop that starts now: the same.
    assert usage_at(fair_loop(store), later_time) == pytest.approx(later)
