"""A node whose disk holds less than the scratch its instance type promises is said so when its
agent pairs (an event and a warning), through a real `corral run` whose loopback agents read their
real disk. Placement is not changed: the job still runs there."""

from __future__ import annotations

import shutil

from tests.e2e.conftest import Corral
from tests.support import wait_until

CONFIG = """
[cloud]
ping_interval = "0.5s"

[loop]
interval = "0.5s"

[[instance_types]]
name = "honest"
vcpus = 2
ram = "1GiB"
price_per_hour = 0.01
scratch = "1MiB"

[[instance_types]]
name = "promising"
vcpus = 2
ram = "1GiB"
price_per_hour = 0.02
scratch = "1000TiB"

[policy.lifecycle]
idle_grace = "60s"
boot_grace = "60s"
"""


def test_a_node_promised_more_scratch_than_its_disk_has_is_an_event_naming_it(corral: Corral) -> None:
    assert shutil.disk_usage(corral.home).total < 1000 * 1024**4  # no disk here holds the promise
    corral.config.write_text(CONFIG)
    corral.start()
    small = int(corral.cli("submit", "--", "true").stdout)
    large = int(corral.cli("submit", "--scratch", "2MiB", "--", "true").stdout)
    wait_until(lambda: all(corral.jobs()[j]["state"] == "complete" for j in (small, large)), 60, "both jobs")

    nodes = {n["instance_type"]: n["id"] for n in corral.cli_json("nodes")}
    [event] = corral.cli_json("events", "--kind", "node.scratch_short")
    assert event["node_id"] == nodes["promising"] == corral.jobs()[large]["node"]
    message = event["message"]
    assert message.startswith(f"node {nodes['promising']} (promising) is promised 1024000.0 GiB of scratch")
    free_gib = float(message.split(" dir has ")[1].split(" GiB free")[0])
    assert 0 < free_gib < 1024000  # what the agent read of its real disk
    assert message.endswith("GiB free: jobs placed by their scratch may run out of disk")
    assert message in corral.server_log()  # and a warning in the server's log
