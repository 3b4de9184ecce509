"""A spot interruption notice, as an agent reports it in its ping, at corral's real server (its app
served over HTTP, a real store): the node is drained and marked with the notice, once, with an event;
the pure pass then retires it as soon as it is empty, saying why."""

from __future__ import annotations

import httpx

from corral.core.model import Attempt, AttemptState, GiB, InstanceType, Job, JobState, Node, NodeState, Resources
from corral.core.reconcile import plan_pass
from corral.core.settings import PolicySettings
from corral.core.snapshot import Snapshot
from corral.store import Store

SMALL = InstanceType("small", 2, 4 * GiB, 0.10)
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
