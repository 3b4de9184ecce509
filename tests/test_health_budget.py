"""The budget of nodes a failed health check takes out of service (health_check.max_unhealthy), at
corral's real server (its app over HTTP, a real store), as agents report their checks in their
pings: past the budget a failure is recorded and told but the node stays in service, and it is
taken out once few enough nodes fail (Karpenter's node repair stops so when too many nodes are
unhealthy at once)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from corral.core.model import GiB, InstanceType
from corral.store import Store
from tests.support import served_app

SMALL = InstanceType("small", 2, 4 * GiB, 0.10)
NODES = ("n1", "n2", "n3", "n4", "n5")


def test_a_check_failing_on_most_nodes_takes_out_only_the_budget(tmp_path: Path) -> None:
    with served_app(tmp_path) as (url, store):  # max_unhealthy "20%" of five nodes: one
        secrets = {}
        for node_id in NODES:
            store.create_node(node_id, SMALL, f"boot-{node_id}", 1000.0, "test")
            secret = store.pair_node(node_id, f"boot-{node_id}", SMALL.capacity, f"host-{node_id}", 1000.0)
            assert secret is not None
            secrets[node_id] = secret

        def ping(node_id: str, ok: bool) -> None:
            body = {"running": [], "finished": [], "used": {"vcpus": 0, "ram_mib": 0}}
            body["health"] = {"ok": ok, "message": "" if ok else "exit 1"}
            headers = {"Authorization": f"Bearer {secrets[node_id]}"}
            answer = httpx.post(f"{url}/api/agent/ping", json=body, headers=headers)
            assert answer.status_code == 200, answer.text

        for _ in range(2):  # the second round of pings changes nothing
            for node_id in NODES:
                ping(node_id, ok=False)
        assert attributes(store) == {
            "n1": {"health_check": "failed: exit 1", "category": "software-failure"},
            **{node_id: {"health_check": "failed: exit 1"} for node_id in NODES[1:]},
        }
        held = (
            "health check failed: exit 1; not taken out of service: {} of 5 nodes fail their check, more than"
            " health_check.max_unhealthy = 20% lets go (the check, or something the nodes share, is likelier at fault)"
        )
        assert health_events(store) == [
            ("n1", "health check failed: exit 1"),
            *((node_id, held.format(n)) for n, node_id in enumerate(NODES[1:], start=2)),
        ]
        assert failing_checks(url) == (5, 4)  # corral status: "5 nodes fail ... (4 kept in service ...)"

        # Four of five fail still: n2 stays in service.
        ping("n1", ok=True)
        ping("n2", ok=False)
        assert attributes(store)["n2"] == {"health_check": "failed: exit 1"}
        # Once the others pass, n2 alone fails: within the budget, it is taken out.
        for node_id in ("n3", "n4", "n5"):
            ping(node_id, ok=True)
        ping("n2", ok=False)
        assert attributes(store) == {
            "n1": {},
            "n2": {"health_check": "failed: exit 1", "category": "software-failure"},
            "n3": {},
            "n4": {},
            "n5": {},
        }
        assert health_events(store)[-1] == ("n2", "health check failed: exit 1")
        assert failing_checks(url) == (1, 0)


def attributes(store: Store) -> dict[str, dict[str, Any]]:
    return {row["id"]: dict(row["attributes"] or {}) for row in store.node_rows()}


def health_events(store: Store) -> list[tuple[str, str]]:
    events = sorted(store.list_events(kind="node.health_check"), key=lambda e: e["id"])
    return [(e["node_id"], e["message"]) for e in events]


def failing_checks(url: str) -> tuple[int, int]:
    status = httpx.get(f"{url}/api/status", headers={"Authorization": "Bearer t"}).json()
    return status["failing_checks"], status["failing_checks_in_service"]
