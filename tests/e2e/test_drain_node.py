"""An operator drains nodes of a real `corral run` (loopback cloud) through the CLI:
`drain=true` lets the running job finish, then the node is shut down and the queue gets another;
`drain=now` shuts the node down at once and its job is requeued and runs elsewhere."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.conftest import Corral, wait_until


def test_drain_lets_work_finish_and_drain_now_requeues_it(corral: Corral, tmp_path: Path) -> None:
    corral.config.write_text(corral.config.read_text().replace("max_instances = 4", "max_instances = 1"))
    corral.start()
    # Runs on the drained node until the test lets it end: a fixed sleep was outlasted by the CLI
    # calls below on a loaded machine, and the drained node was gone before `corral nodes` looked.
    go = tmp_path / "go"
    first = int(corral.cli("submit", "--", "sh", "-c", f"while [ ! -e {go} ]; do sleep 0.2; done").stdout)
    wait_until(lambda: corral.jobs()[first]["state"] == "running", 60, "the first job to run")
    [node] = corral.live_nodes()
    drained = node["id"]

    corral.cli("node", drained, "drain=true")
    listed = {n["id"]: n for n in corral.cli_json("nodes")}
    assert listed[drained]["attributes"]["drain"] == "true"
    listing = corral.cli("nodes").stdout
    assert "drain=true" in listing and "\n1 live node, $" in listing
    second = int(corral.cli("submit", "--", "sleep", "30").stdout)

    # The drain kills nothing; the second job waits for a node of its own (max_instances = 1).
    assert corral.jobs()[first]["state"] == "running" and corral.jobs()[second]["state"] == "queued"
    go.touch()
    wait_until(lambda: corral.jobs()[first]["state"] == "complete", 60, "the running job to finish")
    wait_until(lambda: corral.jobs()[second]["state"] == "running", 90, "the second job to run elsewhere")
    [replacement] = corral.live_nodes()
    assert replacement["id"] != drained and corral.jobs()[second]["node"] == replacement["id"]
    events = [(e["kind"], e["message"]) for e in corral.cli_json("events", "--node", drained)]
    assert ("node.down", "drain=true: drained by an operator, no work left on it") in events
    assert events[-1][0] == "node.gone"

    corral.cli("node", replacement["id"], "drain=now")
    # Shut down at once: the job is lost with the node, requeued (on_node_failure's default) and
    # run again on a new node.
    wait_until(lambda: replacement["id"] not in {n["id"] for n in corral.live_nodes()}, 60, "the node to be shut down")
    requeued = [e["message"] for e in corral.cli_json("events", "--job", str(second), "--kind", "job.requeued")]
    assert requeued and requeued[0].startswith(f"node {replacement['id']} shut down by an operator (drain=now)")
    wait_until(lambda: corral.jobs()[second]["attempts"] == 2, 90, "the job to run again")
    wait_until(lambda: corral.jobs()[second]["state"] == "running", 90, "the job to run again")
    assert corral.jobs()[second]["node"] not in (drained, replacement["id"])
    corral.cli("cancel", str(second))

    refused = corral.cli("node", corral.live_nodes()[0]["id"], "drain=soon", check=False)
    assert refused.returncode != 0 and "drain: 'soon' is not true, false or now" in refused.stderr + refused.stdout
