"""A node an operator puts in a seed-002 failure category is broken (seed 004): its running job
finishes, then it goes down and is shut down (its loopback instance destroyed), and the queue gets a
new node in its place. A real `corral run` with the loopback cloud, driven through the CLI."""

from __future__ import annotations

from tests.e2e.conftest import Corral, wait_until


def test_a_node_in_a_failure_category_finishes_its_job_then_is_shut_down_and_replaced(corral: Corral) -> None:
    # One instance at most: the replacement can only boot once the broken node is gone.
    corral.config.write_text(corral.config.read_text().replace("max_instances = 4", "max_instances = 1"))
    corral.start()
    running = int(corral.cli("submit", "--", "sleep", "3").stdout)
    wait_until(lambda: corral.jobs()[running]["state"] == "running", 60, "the first job to run")
    [node] = corral.live_nodes()
    broken = node["id"]

    corral.cli("node", broken, "category=hardware-failure")
    waiting = int(corral.cli("submit", "--", "true").stdout)

    # The label kills nothing: the job completes on the broken node; nothing new goes there.
    wait_until(lambda: corral.jobs()[running]["state"] == "complete", 60, "the running job to finish")
    assert corral.jobs()[running]["exit_code"] == 0
    wait_until(lambda: corral.jobs()[waiting]["state"] == "complete", 90, "the waiting job to run elsewhere")
    assert corral.jobs()[waiting]["node"] != broken
    assert broken not in {n["id"] for n in corral.live_nodes()}

    kinds = [(e["kind"], e["message"]) for e in corral.cli_json("events", "--node", broken)]
    after = kinds[[k for k, _ in kinds].index("node.attributes") :]
    assert [k for k, _ in after if k.startswith("node.") and k != "node.idle"][:4] == [
        "node.attributes",
        "node.down",
        "node.shutting_down",
        "node.gone",
    ], after
    assert ("node.down", "hardware-failure: broken, no work left on it") in after
    # Once gone, the node still says why (corral nodes --all, corral node).
    assert [m for k, m in after if k == "node.gone"][0].startswith("shut down: hardware-failure: ")
    assert corral.cli_json("node", broken)["reason"].startswith("shut down: hardware-failure: ")
    assert ("job.complete", "exit 0") in kinds  # the job that ran there, listed with the node it ran on
    assert not (corral.home / "loopback").exists() or not any(
        broken in p.read_text() for p in (corral.home / "loopback").glob("*/instance.json")
    )
