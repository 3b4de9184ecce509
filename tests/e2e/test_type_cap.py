"""An instance type's own max_instances in a running corral (the loopback cloud): with one small and
one medium allowed, the second job boots the pricier medium instead of a second small, a job only a
medium holds waits saying the medium is at its cap, and `corral status` shows the caps."""

from __future__ import annotations

from tests.e2e.conftest import Corral, wait_until

CAPS = {
    'name = "small"\n': 'name = "small"\nmax_instances = 1\n',
    'name = "medium"\n': 'name = "medium"\nmax_instances = 1\n',
}


def test_a_capped_type_boots_the_next_cheapest_or_the_job_waits_naming_the_cap(corral: Corral) -> None:
    text = corral.config.read_text()
    for old, new in CAPS.items():
        text = text.replace(old, new)
    corral.config.write_text(text)
    corral.start()
    first = int(corral.cli("submit", "--vcpus", "2", "--", "sleep", "60").stdout)
    second = int(corral.cli("submit", "--vcpus", "2", "--", "sleep", "60").stdout)
    only_medium = int(corral.cli("submit", "--vcpus", "3", "--", "true").stdout)
    wait_until(lambda: all(corral.jobs()[job]["state"] == "running" for job in (first, second)), 60, "two jobs to run")
    reason = "waiting for resources: medium is at its max_instances (1)"
    wait_until(lambda: corral.jobs()[only_medium]["wait_reason"] == reason, 30, "the third job to say why it waits")
    assert sorted(node["instance_type"] for node in corral.live_nodes()) == ["medium", "small"]

    assert corral.cli_json("status")["type_max_instances"] == {"small": 1, "medium": 1}
    line = next(line for line in corral.cli("status").stdout.splitlines() if line.startswith("at most"))
    assert line.split(None, 2)[2].strip() == "4 instances, 1 small, 1 medium"
