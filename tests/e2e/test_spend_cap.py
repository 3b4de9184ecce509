"""policy.boot.max_cost_per_hour in a running corral: the second instance would pass the cap, so
the second job waits on the first node, saying why, and `corral status` shows the cap."""

from __future__ import annotations

from tests.e2e.conftest import Corral, wait_until

CAP = """
[policy.boot]
max_instances = 4
max_cost_per_hour = 0.10
"""


def test_no_boot_past_the_spend_cap(corral: Corral) -> None:
    # A "small" costs $0.085/hour: one fits under $0.10, two do not.
    corral.config.write_text(corral.config.read_text().replace("[policy.boot]\nmax_instances = 4\n", CAP))
    corral.start()
    first = int(corral.cli("submit", "--vcpus", "2", "--", "sleep", "30").stdout)
    second = int(corral.cli("submit", "--vcpus", "2", "--", "true").stdout)
    wait_until(lambda: corral.jobs()[first]["state"] == "running", 60, "the first job to run")
    reason = "waiting for resources: max_cost_per_hour ($0.10/h) reached"
    wait_until(lambda: corral.jobs()[second]["wait_reason"] == reason, 30, "the second job to say why it waits")
    assert len(corral.live_nodes()) == 1

    report = corral.cli_json("status")
    assert (report["max_instances"], report["max_cost_per_hour"], report["max_vcpus"]) == (4, 0.10, None)
    line = next(line for line in corral.cli("status").stdout.splitlines() if line.startswith("at most"))
    assert line.split(None, 2)[2].strip() == "4 instances, $0.100/hour"
