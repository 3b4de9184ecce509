"""The live loop with a node in a seed-002 failure category that is not a cloud instance (a
standalone agent paired with a node record of its own): corral cannot shut it down, so it keeps it
out of service, never drained, until an operator clears the category."""

from __future__ import annotations

import time
from pathlib import Path

from corral.cloud.sim import SimCloud
from corral.core.model import ZERO
from corral.jobspec import JobRequest
from corral.loop import ControlLoop
from corral.sim.settings import SimSettings
from corral.store import Store
from tests.test_loop import CONFIG


def test_a_standalone_node_in_a_failure_category_stays_out_of_service_until_cleared(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    clock = [time.time()]
    itype = CONFIG.core_instance_types()[0]
    store.create_node("n-own", itype, "token", clock[0], "an agent on a machine of its own")
    assert store.pair_node("n-own", "token", itype.capacity, "workstation", clock[0])
    store.set_node_attributes("n-own", {"category": "network-failure"}, [], None, clock[0])
    cloud = SimCloud(CONFIG.core_instance_types(), SimSettings(), lambda: clock[0])
    loop = ControlLoop(store, cloud, CONFIG, "d-test", clock=lambda: clock[0])
    [job] = store.submit([JobRequest(command=["true"])], clock[0])

    first = loop.run_pass()
    assert first.decisions.placements == [] and len(first.decisions.boots) == 1  # a cloud instance serves the queue
    # Ten idle graces later (its agent still pinging), the node is neither drained nor shut down.
    clock[0] += 10 * CONFIG.policy.lifecycle.idle_grace
    store.record_ping("n-own", ZERO, clock[0])
    later = loop.run_pass()
    assert [d for d in later.decisions.node_decisions if d.node_id == "n-own"] == []
    assert store.node_row("n-own")["state"] == "idle"  # type: ignore[index]
    assert [e["kind"] for e in store.list_events(node_id="n-own")] == ["node.booting", "node.paired", "node.attributes"]

    store.set_node_attributes("n-own", {}, ["category"], None, clock[0])
    cleared = loop.run_pass()
    assert [(p.job_id, p.node_ids) for p in cleared.decisions.placements] == [(job, ("n-own",))]
