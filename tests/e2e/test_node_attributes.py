"""An operator's memos on a live node (seeds 002 and 003): set from the CLI, read by the next pass."""

from __future__ import annotations

import json
import time

from tests.e2e.conftest import Corral, wait_until


def test_an_operator_holds_a_node_it_takes_no_work_and_is_not_drained_until_released(corral: Corral) -> None:
    corral.start()
    # The node is busy while the operator holds it, so that its idle grace cannot drain it first.
    first = int(corral.cli("submit", "--", "sleep", "300").stdout)
    wait_until(lambda: corral.jobs()[first]["state"] == "running", 60, "the first job to run")
    [node] = corral.live_nodes()
    held = node["id"]

    shown = corral.cli("node", held, "held=true", "category=hardware-maintenance", "--rack", "r1").stdout
    assert f"node {held}" in shown and "held = true" in shown and "rack r1" in shown
    row = corral.cli_json("node", held)
    assert row["attributes"] == {"held": "true", "category": "hardware-maintenance"} and row["rack"] == "r1"
    assert [e["message"] for e in corral.cli_json("events", "--node", held, "--kind", "node.attributes")] == [
        "held=true category=hardware-maintenance rack=r1"
    ]

    # Held: a new job boots a node of its own, and the held node outlives its idle grace (2 s).
    second = int(corral.cli("submit", "--", "true").stdout)
    wait_until(lambda: corral.jobs()[second]["state"] == "complete", 60, "the second job to finish")
    assert corral.jobs()[second]["node"] != held
    corral.cli("cancel", str(first))
    wait_until(lambda: {n["id"]: n["state"] for n in corral.live_nodes()}.get(held) == "idle", 60, "the node idle")
    time.sleep(4)
    assert {n["id"]: n["state"] for n in corral.live_nodes()}.get(held) == "idle"

    # A value the engine cannot read is refused with its key, and nothing changes.
    bad = corral.cli("node", held, "next_reboot=soon", check=False)
    assert bad.returncode != 0 and "next_reboot: not a time: 'soon'" in bad.stderr
    assert corral.cli_json("node", held)["attributes"] == {"held": "true", "category": "hardware-maintenance"}
    dated = corral.cli_json("node", held, "next_reboot=2030-01-01T00:00:00+00:00")
    assert dated["attributes"]["next_reboot"] == "1893456000"

    # A mistyped category would leave a broken node taking work: it is set as asked, with a warning.
    typo = corral.cli("node", held, "category=hardware-falure,benchmark", "--json")
    assert json.loads(typo.stdout)["attributes"]["category"] == ["hardware-falure", "benchmark"]
    assert "warning: category 'hardware-falure' is not one corral reads (did you mean 'hardware-failure'?):" in (
        typo.stderr
    )
    assert "'benchmark'" not in typo.stderr
    assert "warning" not in corral.cli("node", held, "category=hardware-maintenance").stderr

    # Released: drained after its idle grace, and gone.
    corral.cli("node", held, "--unset", "held", "--unset", "category")
    wait_until(lambda: held not in {n["id"] for n in corral.live_nodes()}, 60, "the released node to be drained")
