"""A `[[notify]]` trigger that acts through the corral CLI (seed 002 §5.4.4): on `node.busy` it
drains the node (`corral node "$CORRAL_NODE_ID" drain=true`), against the corral that runs it; the
node finishes its job and is shut down."""

from __future__ import annotations

from tests.e2e.conftest import CORRAL, Corral, wait_until


def test_a_trigger_drains_a_node_through_the_cli(corral: Corral) -> None:
    rule = f"""
[[notify]]
name = "retire"
on = ["node.busy"]
command = ["sh", "-c", 'exec "{CORRAL}" node "$CORRAL_NODE_ID" drain=true']
"""
    corral.config.write_text(corral.config.read_text() + rule)
    corral.start()
    job = int(corral.cli("submit", "--", "sleep", "2").stdout)
    wait_until(lambda: corral.jobs()[job]["state"] == "complete", 60, "the job to complete")
    node = corral.jobs()[job]["node"]
    wait_until(lambda: node not in {n["id"] for n in corral.live_nodes()}, 60, "the drained node to go")
    kinds = [(e["kind"], e["message"]) for e in corral.cli_json("events", "--node", node)]
    assert ("node.attributes", "drain=true") in kinds
    assert ("node.down", "drain=true: drained by an operator, no work left on it") in kinds
    assert corral.cli_json("events", "--kind", "notify.failed") == []
