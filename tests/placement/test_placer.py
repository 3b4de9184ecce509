"""The engine behind plan_pass's Placer seam."""

from __future__ import annotations

from placement_helpers import NOW, job, node

from corral.core.model import GiB, InstanceType
from corral.core.reconcile import plan_pass
from corral.core.settings import BootSettings, PolicySettings
from corral.core.snapshot import Snapshot
from corral.placement.placer import make_placer


def test_plan_pass_with_the_engine() -> None:
    nodes = [node("n1", 4, 16), node("n2", 4, 16)]
    for n in nodes:
        n.last_ping_at = NOW
    queue = [job(1, 2, 8), job(2, 2, 8, traits={"zone": "nowhere"}), job(3, 2, 64)]
    snapshot = Snapshot(
        jobs=queue, attempts=[], nodes=nodes, instance_types=[InstanceType("m", 8, 32 * GiB, 1.0)], observing_since=0
    )
    settings = PolicySettings(boot=BootSettings(max_instances=2))
    decisions = plan_pass(snapshot, NOW, settings, placer=make_placer(settings))
    assert [p.job_id for p in decisions.placements] == [1]
    assert decisions.explanations[1]["top"][0]["chosen"] is True
    assert decisions.explanations[2]["reason"].startswith("TRAITS_MISMATCH")
    notes = {a.job_id: a for a in decisions.annotations}
    assert notes[3].unplaceable  # the boot planner's word: no instance type has 64 GiB


def test_free_is_updated_in_place() -> None:
    nodes = [node("n1", 4, 16)]
    free = {"n1": nodes[0].capacity}
    queue = [job(1, 1, 4)]
    snapshot = Snapshot(jobs=queue, attempts=[], nodes=nodes, instance_types=[])
    make_placer(None)(snapshot, queue, nodes, free, NOW)
    assert free["n1"].ram_mib == 12 * GiB and free["n1"].vcpus == 3
