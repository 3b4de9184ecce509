"""`corral status`: the whole system at a glance, from a running corral."""

from __future__ import annotations

import time

from corral.store import Store
from tests.e2e.conftest import Corral, wait_until


def test_status_shows_jobs_the_longest_wait_the_fleet_bill_back_offs_and_dispatchers(corral: Corral) -> None:
    corral.start()
    # No type has 64 vcpus: such a job waits for ever. The first is held, and waits no more.
    held = corral.cli("submit", "--vcpus", "64", "--", "true").stdout.strip()
    corral.cli("hold", held)
    sleeper = corral.cli("submit", "--", "sleep", "60").stdout.strip()
    waiting = corral.cli("submit", "--vcpus", "64", "--", "true").stdout.strip()
    corral.cli("submit", "--not-before", "2099-01-01", "--", "true")  # asked to wait: not counted as waiting
    wait_until(lambda: corral.jobs()[int(sleeper)]["state"] == "running", 60, "the sleeper to run")
    # Another dispatcher on the same store backed a type off after a capacity error.
    store = Store(f"sqlite:///{corral.home / 'corral.db'}")
    store.set_unavailable("medium", time.time() + 600, "InsufficientInstanceCapacity in us-east-1a", time.time())
    store.close()

    report = corral.cli_json("status")
    assert report["jobs"] == {"queued": 3, "running": 1}
    assert report["held"] == 1
    # The second 64-vcpu job's wait: the held job (older) and the not-yet job do not count.
    assert abs(report["oldest_wait"] - (report["now"] - corral.jobs()[int(waiting)]["submitted_at"])) < 1e-3
    live = {node["id"]: node["price_per_hour"] for node in corral.live_nodes()}
    assert sum(report["nodes"].values()) == len(live) >= 1
    assert abs(report["cost_per_hour"] - sum(live.values())) < 1e-6
    assert [(t["instance_type"], t["nodes"]) for t in report["fleet"]] == [("small", len(live))]
    assert report["vcpus"] == 2 * len(live)  # a small has 2
    assert [(b["instance_type"], b["reason"]) for b in report["backoffs"]] == [
        ("medium", "InsufficientInstanceCapacity in us-east-1a")
    ]
    (dispatcher,) = report["dispatchers"]
    assert corral.process is not None and dispatcher["pid"] == corral.process.pid
    assert not dispatcher["stale"]
    # The store's id, which the fleet's instances carry (corral-store): the same one the store keeps.
    check = Store(f"sqlite:///{corral.home / 'corral.db'}")
    assert report["store_id"] == check.store_id() and len(report["store_id"]) == 16
    check.close()

    text = corral.cli("status").stdout
    assert "3 queued, 1 running, 1 held" in text
    nodes = "1 node" if len(live) == 1 else f"{len(live)} nodes"
    assert f"{nodes}, {2 * len(live)} vcpus, ${sum(live.values()):.3f}/hour" in text
    assert "medium for 9m" in text and "InsufficientInstanceCapacity" in text
    assert f"pid {dispatcher['pid']}" in text
    assert f"{report['store_id']} (its instances' corral-store tag)" in text
