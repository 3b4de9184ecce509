"""policy.lifecycle.min_instances is a floor the pass boots up to, as an autoscaling group's minimum
size: a fleet that starts empty, or lost a kept node, is brought back to it without waiting for
work, with the cheapest type it may boot (not one in capacity back-off), within max_instances,
max_boots_per_pass and the spend limits; boots for jobs come first and count toward it."""

from __future__ import annotations

from corral.core.model import GiB, InstanceType, Job, Node, NodeState, Resources
from corral.core.reconcile import plan_pass
from corral.core.settings import PolicySettings
from corral.core.snapshot import Snapshot

NOW = 1000.0
SMALL = InstanceType("small", 2, 4 * GiB, 0.10)
LARGE = InstanceType("large", 16, 64 * GiB, 0.80)
TYPES = [LARGE, SMALL]


def policy(min_instances: int, **boot: object) -> PolicySettings:
    settings = PolicySettings()
    settings.lifecycle.min_instances = min_instances
    for key, value in boot.items():
        setattr(settings.boot, key, value)
    return settings


def booted(snapshot: Snapshot, settings: PolicySettings) -> list[str]:
    return [boot.instance_type for boot in plan_pass(snapshot, NOW, settings).boots]


def test_an_empty_fleet_is_booted_up_to_its_floor_with_the_cheapest_type() -> None:
    decisions = plan_pass(Snapshot([], [], [], TYPES), NOW, policy(2))
    assert [(b.instance_type, b.reason) for b in decisions.boots] == [("small", "min_instances (2): keeping 2 up")] * 2
    assert booted(Snapshot([], [], [], TYPES), policy(0)) == []


def test_nodes_booting_and_boots_for_jobs_count_toward_the_floor() -> None:
    # (within its boot grace: one past it did not pair, and backs its type off)
    on_its_way = Node("n1", SMALL.name, SMALL.capacity, SMALL.price_per_hour, NodeState.BOOTING, NOW - 60)
    assert booted(Snapshot([], [], [on_its_way], TYPES), policy(2)) == ["small"]
    big = Job(1, ["x"], Resources(16, 8 * GiB), submitted_at=NOW)
    assert booted(Snapshot([big], [], [], TYPES), policy(2)) == ["large", "small"]


def test_the_floor_keeps_within_the_fleets_limits() -> None:
    assert booted(Snapshot([], [], [], TYPES), policy(3, max_instances=2)) == ["small", "small"]
    assert booted(Snapshot([], [], [], TYPES), policy(3, max_boots_per_pass=1)) == ["small"]
    assert booted(Snapshot([], [], [], TYPES), policy(3, max_cost_per_hour=0.25)) == ["small", "small"]
    backed_off = Snapshot([], [], [], TYPES, unavailable_types={"small": NOW + 60})
    assert booted(backed_off, policy(1)) == ["large"]  # the cheapest it may boot now
