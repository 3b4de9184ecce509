"""Admin reservations in the simulator: its instances hold only their types' attributes, so a
reservation there is always a type's, which keeps no instance up (corral.core.reservations.keeps):
an instance of a reserved type idles out as any other, as the live loop decides."""

from __future__ import annotations

from corral.jobspec import JobRequest
from tests.sim.helpers import BIG, SMALL, config, decides_as_live, job, simulate


def test_an_instance_of_a_reserved_type_is_shut_down_once_it_idles() -> None:
    cfg = config(instance_types=[{**SMALL, "attributes": {"reservation": "team-a"}}, BIG])
    jobs = [job(1, run=100, request=JobRequest(command=["x"], reservation="team-a")), job(2, run=100, vcpus=4)]
    sim, r = simulate(jobs, cfg)
    assert r.completed == 2
    assert sorted(i.itype.name for i in sim.cloud.instances.values()) == ["big", "small"]
    # Both shut down after their idle grace: the reserved type's instance is not kept forever.
    assert r.boots == r.shutdowns == 2
    seen = decides_as_live(jobs, cfg)
    assert any(d.node_decisions for _, _, d in seen)
