"""A spot interruption notice, as an agent reports it in its ping, at corral's real server (its app
served over HTTP, a real store): the node is drained and marked with the notice, once, with an event;
its instance type is backed off (its spot capacity is short), shown by `corral status` until it ends
or `corral backoff clear` ends it; the pure pass then retires the node as soon as it is empty, saying
why, and boots another type meanwhile."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from corral.config import Config
from corral.core import capacity
from corral.core.model import Attempt, AttemptState, GiB, InstanceType, Job, JobState, Node, NodeState, Resources
from corral.core.reconcile import plan_pass
from corral.core.settings import BootSettings, PolicySettings
from corral.core.snapshot import Snapshot
from corral.store import Store
from tests.server.cli import corral, corral_json
from tests.support import served_app

SMALL = InstanceType("small", 2, 4 * GiB, 0.10)
SPOT = InstanceType("c5.large", 2, 4 * GiB, 0.03, attributes=(("capacity", "spot"),))
ON_DEMAND = InstanceType("m5.large", 2, 8 * GiB, 0.096)
NOTICE = {"action": "terminate", "time": "2026-11-26T06:30:00Z"}


def test_the_server_drains_a_node_the_cloud_takes_back_once(served: tuple[str, Store]) -> None:
    url, store = served
    store.create_node("n1", SMALL, "boot-n1", 1000.0, "test")
    secret = store.pair_node("n1", "boot-n1", SMALL.capacity, "host-n1", 1000.0)
    ping = {"running": [], "finished": [], "used": {"vcpus": 0, "ram_mib": 0}, "interruption": NOTICE}
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {secret}"}) as client:
        for _ in range(2):
            answer = client.post("/api/agent/ping", json=ping)
            assert answer.status_code == 200 and answer.json()["shutdown"] is False
        bad = client.post("/api/agent/ping", json={**ping, "interruption": {"action": "x" * 100, "time": "t"}})
        assert bad.status_code == 422
    row = store.node_row("n1")
    assert row is not None
    assert row["attributes"] == {"drain": "true", "interruption": "terminate at 2026-11-26T06:30:00Z"}
    [event] = store.list_events(kind="node.interruption")
    assert event["message"] == "the cloud takes it back: terminate at 2026-11-26T06:30:00Z (spot interruption notice)"


def test_a_node_under_notice_takes_no_work_and_leaves_once_empty() -> None:
    attributes: dict[str, str | list[str]] = {"drain": "true", "interruption": "terminate at 2026-11-26T06:30:00Z"}
    now = 1000.0
    doomed = Node(
        "n1", SMALL.name, SMALL.capacity, SMALL.price_per_hour, NodeState.BUSY, 0, 1, now, now, attributes=attributes
    )
    running = Job(1, ["x"], Resources(1, GiB), state=JobState.RUNNING, claimed_by="local")
    attempt = Attempt(7, 1, ["n1"], Resources(1, GiB), AttemptState.RUNNING, assigned_at=now, started_at=now)
    queued = Job(2, ["x"], Resources(1, GiB), submitted_at=now)
    busy = plan_pass(Snapshot([running, queued], [attempt], [doomed], [SMALL]), now, PolicySettings())
    assert busy.placements == []  # room for it, but not on a node the cloud takes back
    assert [b.instance_type for b in busy.boots] == ["small"]
    assert busy.node_decisions == []  # what runs there runs on

    empty = plan_pass(Snapshot([queued], [], [doomed], [SMALL]), now, PolicySettings())
    [mark] = empty.node_marks
    assert (mark.state, mark.reason) == (
        NodeState.DOWN,
        "interruption=terminate at 2026-11-26T06:30:00Z: the cloud takes it back, no work left on it",
    )


def notify_interruption(url: str, store: Store, node_id: str, instance_type: InstanceType) -> None:
    """An agent of `instance_type` pairs and reports EC2's notice, at two pings."""
    store.create_node(node_id, instance_type, f"boot-{node_id}", time.time(), "test")
    secret = store.pair_node(node_id, f"boot-{node_id}", instance_type.capacity, f"host-{node_id}", time.time())
    ping = {"running": [], "finished": [], "used": {"vcpus": 0, "ram_mib": 0}, "interruption": NOTICE}
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {secret}"}) as client:
        for _ in range(2):
            assert client.post("/api/agent/ping", json=ping).status_code == 200


def test_a_notice_backs_its_type_off_where_back_offs_are_shown_until_an_operator_clears_it(
    served: tuple[str, Store],
) -> None:
    url, store = served  # corral's default config: c5.large among its types, interruption_backoff 5m
    before = time.time()
    notify_interruption(url, store, "n1", SPOT)

    [backoff] = corral_json(url, "status")["backoffs"]
    assert backoff["instance_type"] == "c5.large"
    assert before + 300 <= backoff["until"] <= time.time() + 300
    assert backoff["reason"] == (
        "spot interruption notice for node n1 (terminate at 2026-11-26T06:30:00Z): c5.large's spot capacity is"
        " short; backed off for 5m (policy.boot.interruption_backoff)"
    )
    assert "c5.large for " in corral(url, "status").stdout
    [event] = corral_json(url, "events", "--kind", "capacity.interruption")  # once, for two pings
    assert event["node_id"] == "n1" and event["message"].startswith("c5.large until ")
    assert store.load_snapshot("d", [SPOT], observing_since=0.0).unavailable_types.keys() == {"c5.large"}

    cleared = corral(url, "backoff", "clear", "c5.large")
    assert cleared.stdout.startswith("c5.large: back-off cleared (was until ")
    assert corral_json(url, "status")["backoffs"] == []


def test_with_interruption_backoff_0_a_notice_backs_nothing_off(tmp_path: Path) -> None:
    config = Config.model_validate({"policy": {"boot": {"interruption_backoff": "0s"}}})
    with served_app(tmp_path, config) as (url, store):
        notify_interruption(url, store, "n1", SPOT)
        assert corral_json(url, "status")["backoffs"] == []
        assert store.list_events(kind="capacity.interruption") == []
        assert len(store.list_events(kind="node.interruption")) == 1  # the node is drained all the same


def test_the_pass_boots_another_type_while_the_spot_type_is_backed_off_and_it_again_after() -> None:
    """The core's reading of the back-off the notice set: the queue's job gets the on-demand type,
    dearer, until the back-off ends; then the cheaper spot type again."""
    now = 1000.0
    unavailable: dict[str, float] = {}
    until = capacity.record_interruption(unavailable, SPOT.name, now, BootSettings())
    assert until == now + 300
    # A second notice (another node of the type) never shortens it.
    assert capacity.record_interruption(unavailable, SPOT.name, now - 100, BootSettings()) == until
    queued = Job(1, ["x"], Resources(1, GiB), submitted_at=now)

    def boots(at: float) -> list[str]:
        snapshot = Snapshot([queued], [], [], [SPOT, ON_DEMAND], unavailable_types=dict(unavailable))
        return [b.instance_type for b in plan_pass(snapshot, at, PolicySettings()).boots]

    assert boots(now + 1) == ["m5.large"]
    assert boots(now + 299) == ["m5.large"]
    assert boots(until) == ["c5.large"]
    assert capacity.record_interruption({}, SPOT.name, now, BootSettings(interruption_backoff=0)) is None
