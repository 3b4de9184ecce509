"""Node health checks in a running corral (health_check; Slurm's HealthCheckProgram): the agent runs
the check the server gives it at pairing; a failure puts the node in the failure category, with an
event, so it takes no new work; a pass again takes that back, and what ran there goes on."""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import Corral, wait_until


def test_a_failing_check_takes_the_node_out_of_service_and_a_passing_one_puts_it_back(corral: Corral) -> None:
    sick = corral.home / "sick"
    # One node: the job that waits for the broken node cannot be run on a new one instead.
    corral.config.write_text(
        corral.config.read_text().replace("max_instances = 4", "max_instances = 1")
        + f'\n[health_check]\ncommand = ["test", "!", "-e", "{sick}"]\ninterval = "0.3s"\n'
    )
    corral.start()
    job = int(corral.cli("submit", "--", "sleep", "60").stdout)
    wait_until(lambda: corral.jobs()[job]["state"] == "running", 60, "the job to run")
    (node,) = corral.live_nodes()

    def health_events() -> list[str]:
        return [e["message"] for e in corral.cli_json("events", "--node", node["id"], "--kind", "node.health_check")]

    def attributes() -> dict[str, Any]:
        return dict(corral.cli_json("node", node["id"])["attributes"])

    sick.touch()
    wait_until(lambda: health_events() == ["health check failed: exit 1"], 30, "the failed check")
    assert attributes() == {"category": "software-failure", "health_check": "failed: exit 1"}
    assert "health_check=failed: exit 1" in corral.cli("nodes").stdout.replace("\n", " ")
    waiting = int(corral.cli("submit", "--", "true").stdout)
    wait_until(lambda: bool(corral.jobs()[waiting]["wait_reason"]), 30, "a pass to look at the new job")
    assert corral.jobs()[waiting]["state"] == "queued"  # a broken node takes no new work

    sick.unlink()
    wait_until(lambda: len(health_events()) == 2, 30, "the check passing again")
    assert health_events()[-1] == "health check passes again" and attributes() == {}
    assert corral.jobs()[job]["state"] == "running"  # what ran there went on
    wait_until(lambda: corral.jobs()[waiting]["state"] == "complete", 60, "the job that waited to run")
    corral.cli("cancel", str(job))
