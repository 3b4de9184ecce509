"""The cost gate: an elastic job goes on a running node only if that costs no more than a new instance."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from placement_helpers import NOW, job, node, placed, run_pass, running

from corral.core.model import Attempt, GiB, InstanceType, Job, JobState, Node, NodeState, Resources
from corral.core.reconcile import plan_pass
from corral.core.settings import BootSettings, PolicySettings
from corral.core.snapshot import Snapshot
from corral.placement.arrays import NodeArrays
from corral.placement.demand import Demand
from corral.placement.lifetime import CostGate, expected_extension, node_ends, offers
from corral.placement.placer import COSTLY_REASON, make_placer
from corral.placement.settings import PlacementSettings
from corral.placement.work import measure_load

HOUR = 3600.0
SMALL = InstanceType("c5.large", 2, 4 * GiB, 0.085)
MEDIUM = InstanceType("c5.9xlarge", 36, 72 * GiB, 1.53)
BIG = InstanceType("c5.18xlarge", 72, 144 * GiB, 3.06)
TYPES = [SMALL, MEDIUM, BIG]


def big(node_id: str, price: float = BIG.price_per_hour, vcpus: float = 72) -> Node:
    return node(node_id, vcpus, vcpus * 2, price=price)


def work(attempt_id: int, node_id: str, vcpus: float, limit: float, started_ago: float = 100.0) -> tuple[Job, Attempt]:
    """A running job of `vcpus` with time limit `limit`, started `started_ago` seconds before NOW."""
    j = job(1000 + attempt_id, vcpus, vcpus, time_limit=limit, state=JobState.RUNNING)
    a = running(attempt_id, j.id, [node_id], j.resources, started_at=NOW - started_ago)
    return j, a


def test_node_ends_and_expected_extension() -> None:
    nodes = [node("a"), node("b"), node("c")]
    j1, a1 = work(1, "a", 1, 1000)
    j2, a2 = work(2, "a", 1, 3000)
    j3, a3 = work(3, "b", 1, 0.0)  # past its limit: taken to end now
    jobs = {j.id: j for j in (j1, j2, j3)}
    arrays = NodeArrays(nodes, measure_load(nodes, [a1, a2, a3], jobs), PlacementSettings(), NOW)
    fractions = np.array([0.5, 1.0])
    ends = node_ends(arrays, [a1, a2, a3], jobs, NOW, fractions)
    # a: the latest of start + share x limit (start = NOW - 100); b: now; c (no work): now.
    assert ends.tolist() == [[NOW + 1400, NOW, NOW], [NOW + 2900, NOW, NOW]]
    # A job of limit 4000 from NOW ends at NOW + 2000 or NOW + 4000; on node a the pairs give
    # 600, 0, 2600, 1100 seconds past the node's work; on an empty node 2000 or 4000.
    assert expected_extension(ends, NOW, 4000, fractions).tolist() == [1075.0, 3000.0, 3000.0]


def test_work_without_a_limit_never_ends() -> None:
    nodes = [node("a")]
    j, a = work(1, "a", 1, 1000)
    j.time_limit = None
    arrays = NodeArrays(nodes, measure_load(nodes, [a], {j.id: j}), PlacementSettings(), NOW)
    ends = node_ends(arrays, [a], {j.id: j}, NOW, np.array([0.5, 1.0]))
    assert np.isinf(ends).all()
    assert node_ends(arrays, [a], {j.id: j}, NOW, np.array([1.0]), default_limit=500.0).tolist() == [[NOW + 400]]


def test_a_long_small_job_goes_where_the_work_ends_later() -> None:
    # Both nodes are big and half full. n-soon's work ends within 10 minutes, n-late's within 20
    # hours (at least 2 h even if it runs only a tenth of its limit). Packing alone prefers n-soon
    # (less free RAM); the 1-vcpu job of up to 2 hours would keep it up for hours.
    nodes = [big("n-soon"), big("n-late")]
    j1, a1 = work(1, "n-soon", 40, 600)
    j2, a2 = work(2, "n-late", 36, 20 * HOUR)
    queue = [job(1, 1, 1, time_limit=2 * HOUR)]
    result = run_pass(nodes, queue, attempts=[a1, a2], other_jobs=[j1, j2], instance_types=TYPES)
    assert placed(result) == {1: ("n-late",)}
    # Without the gate, packing decides.
    off = run_pass(
        nodes,
        queue,
        attempts=[a1, a2],
        other_jobs=[j1, j2],
        instance_types=TYPES,
        settings={"cost": {"max_extension": 0}},
    )
    assert placed(off) == {1: ("n-soon",)}


def test_the_gate_judged_node_by_node_agrees_with_its_mask() -> None:
    """`CostGate.verdict` (one node, Python floats) says costly or not only where the gate's mask
    over every node says the same; near the threshold it leaves the answer to the mask."""
    rng = np.random.default_rng(5)
    nodes = [big(f"n{i}", price=float(rng.choice([0.085, 1.53, 3.06]))) for i in range(60)]
    pairs = [work(i, f"n{i}", 8, float(rng.choice([60, 900, 3 * HOUR, 20 * HOUR]))) for i in range(40)]
    jobs, attempts = {j.id: j for j, _ in pairs}, [a for _, a in pairs]
    arrays = NodeArrays(nodes, measure_load(nodes, attempts, jobs), PlacementSettings(), NOW)
    cost = PlacementSettings().cost
    fractions = np.array(cost.run_fractions)
    gate = CostGate(arrays, node_ends(arrays, attempts, jobs, NOW, fractions), offers(TYPES, {}, NOW), NOW, cost)
    seen = {True: 0, False: 0}
    for k, limit in enumerate([120.0, 1800.0, 2 * HOUR, 10 * HOUR]):
        demand = Demand(job_id=k, resources=Resources(1, 2 * GiB), time_limit=limit)
        mask = gate.exclude(demand)
        costly = np.zeros(arrays.n, dtype=bool) if mask is None else mask
        for i in range(arrays.n):
            said = gate.verdict(demand, i)
            if said is not None:
                assert said == bool(costly[i]), (limit, nodes[i].id)
                seen[said] += 1
        # Right at the threshold (the most the job may cost, give or take rounding) it cannot tell.
        allowed = gate.allowed(demand)
        hours = float(expected_extension(gate.ends[:, [0]], NOW, limit, fractions)[0]) / 3600.0
        if hours > 0:
            arrays.price[0], was = allowed / hours, arrays.price[0]
            assert gate.verdict(demand, 0) is None
            arrays.price[0] = was
    assert seen[True] > 20 and seen[False] > 20


def _a_big_node_ending_soon() -> tuple[list[Node], Job, Attempt, list[Job]]:
    """A big node whose work ends in ten minutes, and a queued ten-hour job of one vcpu."""
    nodes = [big("n-soon")]
    j1, a1 = work(1, "n-soon", 40, 600)
    for n in nodes:
        n.last_ping_at = NOW
    return nodes, j1, a1, [job(1, 1, 1, time_limit=10 * HOUR)]


def test_a_new_instance_rather_than_keeping_a_big_node_up() -> None:
    nodes, j1, a1, queue = _a_big_node_ending_soon()
    result = run_pass(nodes, queue, attempts=[a1], other_jobs=[j1], instance_types=TYPES)
    assert placed(result) == {}
    assert result.reasons[1] == COSTLY_REASON
    # Through plan_pass: the boot planner boots the cheapest type that holds it.
    snapshot = Snapshot(jobs=[j1, *queue], attempts=[a1], nodes=nodes, instance_types=TYPES, observing_since=0)
    settings = PolicySettings(boot=BootSettings(max_instances=10))
    decisions = plan_pass(snapshot, NOW, settings, placer=make_placer(settings))
    assert decisions.placements == []
    assert [b.instance_type for b in decisions.boots] == ["c5.large"]


def test_a_kept_placer_follows_the_gate_settings_changed_between_passes() -> None:
    """The gate's allowed costs are kept from pass to pass, but not past a change of its settings."""
    nodes, j1, a1, queue = _a_big_node_ending_soon()
    snapshot = Snapshot(jobs=[j1, *queue], attempts=[a1], nodes=nodes, instance_types=TYPES, observing_since=0)
    settings = PolicySettings(boot=BootSettings(max_instances=10))
    placer = make_placer(settings)
    assert plan_pass(snapshot, NOW, settings, placer=placer).placements == []
    settings.placement.cost.max_extension = 100.0  # keeping the big node up is allowed now
    (placement,) = plan_pass(snapshot, NOW + 1, settings, placer=placer).placements
    assert placement.node_ids == ("n-soon",)


def test_a_cheap_node_is_extended_rather_than_booting() -> None:
    # A node priced like the cheapest type: extending it costs no more than a new one (no boot).
    nodes = [node("n-small", 2, 4, price=SMALL.price_per_hour)]
    j1, a1 = work(1, "n-small", 1, 600)
    result = run_pass(nodes, [job(1, 1, 1, time_limit=10 * HOUR)], attempts=[a1], other_jobs=[j1], instance_types=TYPES)
    assert placed(result) == {1: ("n-small",)}


@pytest.mark.parametrize(
    "case",
    [
        "bounded by max_instances",
        "no instance types",
        "gate off",
        "no time limit",
        "capacity forced bounded",
        "a trait no instance type has",
    ],
)
def test_the_gate_applies_only_to_elastic_jobs_with_a_limit(case: str) -> None:
    nodes = [big("n-soon")]
    j1, a1 = work(1, "n-soon", 40, 600)
    traits = {"zone": "a"} if case == "a trait no instance type has" else {}
    if traits:
        nodes[0].attributes["zone"] = "a"
    queue = [job(1, 1, 1, time_limit=None if case == "no time limit" else 10 * HOUR, traits=traits)]
    settings: dict[str, object] = {}
    if case == "gate off":
        settings = {"cost": {"max_extension": 0}}
    if case == "capacity forced bounded":
        settings = {"queue": {"capacity": "bounded"}}
    result = run_pass(
        nodes,
        queue,
        attempts=[a1],
        other_jobs=[j1],
        instance_types=[] if case == "no instance types" else TYPES,
        max_instances=1 if case == "bounded by max_instances" else None,
        settings=settings,
    )
    assert placed(result) == {1: ("n-soon",)}


def test_jobs_placed_earlier_in_the_pass_count() -> None:
    # An idle node priced like a c5.9xlarge. Job 1 (32 vcpus, 20 h) costs the same there as on a new
    # c5.9xlarge, so it goes there; job 2 (1 vcpu, 4 h) then rides along with it. Alone, job 2
    # would not be worth keeping that node up for.
    nodes = [node("n", 36, 72, price=MEDIUM.price_per_hour)]
    long_job = job(1, 32, 32, time_limit=20 * HOUR)
    small_job = job(2, 1, 1, time_limit=4 * HOUR)
    both = run_pass(nodes, [long_job, small_job], instance_types=TYPES)
    assert placed(both) == {1: ("n",), 2: ("n",)}
    alone = run_pass(nodes, [small_job], instance_types=TYPES)
    assert placed(alone) == {}
    assert alone.reasons[2] == COSTLY_REASON


def test_a_gang_is_judged_per_node() -> None:
    nodes = [big("a"), big("b"), node("c", 2, 4, price=SMALL.price_per_hour)]
    j1, a1 = work(1, "a", 40, 20 * HOUR)
    j2, a2 = work(2, "b", 40, 600)
    j3, a3 = work(3, "c", 1, 20 * HOUR)
    result = run_pass(
        nodes,
        [job(1, 1, 1, nodes=2, time_limit=2 * HOUR)],
        attempts=[a1, a2, a3],
        other_jobs=[j1, j2, j3],
        instance_types=TYPES,
    )
    assert sorted(placed(result)[1]) == ["a", "c"]


def _booting(node_id: str, itype: InstanceType) -> Node:
    n = node(node_id, itype.vcpus, itype.ram_mib / GiB, price=itype.price_per_hour, state=NodeState.BOOTING)
    n.created_at = n.state_changed_at = NOW - 30
    return n


def _plan(nodes: list[Node], queue: list[Job], **placement: object) -> list[str]:
    """Instance types booted by a whole pass, the boot planner's answer for what did not fit."""
    snapshot = Snapshot(jobs=queue, attempts=[], nodes=nodes, instance_types=TYPES, observing_since=0)
    placement_settings = PlacementSettings.model_validate(placement)
    settings = PolicySettings(boot=BootSettings(max_instances=10), placement=placement_settings)
    decisions = plan_pass(snapshot, NOW, settings, placer=make_placer(settings))
    assert decisions.placements == []
    return [b.instance_type for b in decisions.boots]


def test_the_boot_planner_does_not_promise_room_the_gate_will_refuse() -> None:
    # A c5.18xlarge on its way, with nothing else waiting for it: once up, the gate would keep a
    # small 10-hour job off it (a c5.large costs far less), so the planner boots that c5.large
    # now instead of letting the job wait for the big one, then for a second boot.
    assert _plan([_booting("n-big", BIG)], [job(1, 1, 1, time_limit=10 * HOUR)]) == ["c5.large"]
    # With the gate off, the room on its way will do.
    assert _plan([_booting("n-big", BIG)], [job(1, 1, 1, time_limit=10 * HOUR)], cost={"max_extension": 0}) == []


def test_the_boot_planner_lets_a_shorter_job_ride_along() -> None:
    # A 64-vcpu job of up to 20 hours goes on the booting c5.18xlarge; a 1-vcpu job of up to 2
    # hours then ends before it in every pairing of run shares, so it rides along: no boot.
    queue = [job(1, 64, 64, time_limit=20 * HOUR), job(2, 1, 1, time_limit=2 * HOUR)]
    assert _plan([_booting("n-big", BIG)], queue) == []
    # A longer small job would keep the node up past the big one's work: it gets its own.
    queue = [job(1, 64, 64, time_limit=2 * HOUR), job(2, 1, 1, time_limit=20 * HOUR)]
    assert _plan([_booting("n-big", BIG)], queue) == ["c5.large"]


def test_instances_planned_in_the_same_pass_are_judged_alike() -> None:
    # Job 1 needs a c5.18xlarge; job 2 (small, longer) is not put in its spare room.
    queue = [job(1, 64, 64, time_limit=2 * HOUR), job(2, 1, 1, time_limit=20 * HOUR)]
    assert _plan([], queue) == ["c5.18xlarge", "c5.large"]
    # Shorter, it shares the planned instance.
    queue = [job(1, 64, 64, time_limit=20 * HOUR), job(2, 1, 1, time_limit=2 * HOUR)]
    assert _plan([], queue) == ["c5.18xlarge"]


def test_a_job_that_cannot_have_an_instance_takes_any_room_on_its_way() -> None:
    # max_instances reached (the booting node counts): the gate does not apply, as in the placer.
    snapshot = Snapshot(
        jobs=[job(1, 1, 1, time_limit=10 * HOUR)],
        attempts=[],
        nodes=[_booting("n-big", BIG)],
        instance_types=TYPES,
        observing_since=0,
    )
    settings = PolicySettings(boot=BootSettings(max_instances=1))
    decisions = plan_pass(snapshot, NOW, settings, placer=make_placer(settings))
    assert decisions.boots == []
    assert decisions.annotations[0].wait_reason == "waiting for an instance to boot (n-big)"


def test_settings_validate_fractions() -> None:
    assert PlacementSettings.model_validate({"cost": {"run_fractions": [0.9, 0.1]}}).cost.run_fractions == [0.1, 0.9]
    with pytest.raises(ValueError, match="run fractions"):
        PlacementSettings.model_validate({"cost": {"run_fractions": [0.0, 0.5]}})
    assert PlacementSettings.model_validate({"cost": {"boot_time": "2m"}}).cost.boot_time == 120.0


def test_a_job_kept_off_a_node_that_a_later_placement_lengthens_is_looked_at_again() -> None:
    """The placer says when a later pass could place a job it kept waiting although nothing else
    happens (`revisit`): the cost gate kept the job off a node whose work a job placed after it
    lengthened. A placement elsewhere changes nothing for it."""
    small = job(2, 1, 2, time_limit=4 * HOUR, priority=5)  # looked at first; a c5.large holds it
    long_job = job(1, 32, 1, time_limit=20 * HOUR)
    nodes = [node("n", 36, 72, price=MEDIUM.price_per_hour)]
    first = run_pass(nodes, [small, long_job], instance_types=TYPES)
    assert placed(first) == {1: ("n",)} and first.reasons[2] == COSTLY_REASON
    assert first.revisit
    # The next pass, with nothing else changed, places it: it rides along with the long job.
    attempt = running(1, 1, ["n"], long_job.resources, started_at=NOW)
    again = run_pass(nodes, [small], attempts=[attempt], other_jobs=[long_job], instance_types=TYPES, now=NOW + 1)
    assert placed(again) == {2: ("n",)}

    # The long job goes on a node with too little RAM for the small one: nothing to look at again.
    nodes = [node("n", 36, 72, price=MEDIUM.price_per_hour), node("m", 36, 1.5, price=MEDIUM.price_per_hour)]
    elsewhere = run_pass(nodes, [small, long_job], instance_types=TYPES)
    assert placed(elsewhere) == {1: ("m",)} and elsewhere.reasons[2] == COSTLY_REASON
    assert not elsewhere.revisit


def test_a_job_strictly_near_a_running_target_is_not_gated_by_cost() -> None:
    """No instance is booted for a job whose strict `near` target runs (none would be near it), so
    keeping it off the target's node as "a new instance costs less" left it waiting until its
    target ended: it takes the room there, as a bounded job does."""
    target, on_big = work(1, "big", 2, 600)  # the big node's only work ends soon
    target.tags = ("db",)
    near_db = job(2, 2, 2, time_limit=10 * HOUR, near=["tag:db"], strict=True)
    result = run_pass([big("big")], [near_db], attempts=[on_big], other_jobs=[target], instance_types=TYPES)
    assert placed(result) == {2: ("big",)}
    # A job without the hint is kept off it: a small instance costs less.
    anywhere = job(3, 2, 2, time_limit=10 * HOUR)
    result = run_pass([big("big")], [anywhere], attempts=[on_big], other_jobs=[target], instance_types=TYPES)
    assert result.reasons[3] == COSTLY_REASON


# --- billing periods: what a node is paid for already costs nothing to keep ------------------------


def _hourly(itype: InstanceType) -> InstanceType:
    return dataclasses.replace(itype, billing_granularity=HOUR)


HOURLY_TYPES = [_hourly(t) for t in TYPES]


def _hourly_big(node_id: str, age: float) -> Node:
    n = big(node_id)
    n.billing_granularity, n.created_at = HOUR, NOW - age
    return n


def test_with_hourly_billing_a_job_ending_within_the_paid_hour_keeps_the_node() -> None:
    # A c5.18xlarge ten minutes into its paid hour, its work ending within ten minutes, and a
    # 1-vcpu job of up to 45 minutes: billed by the second, keeping the big node up for it costs
    # far more than a c5.large (the gate boots one); billed by the hour, the node is paid for
    # the next 50 minutes whatever it runs, so the job goes on it.
    j1, a1 = work(1, "n", 40, 600)
    queue = [job(1, 1, 1, time_limit=45 * 60)]
    per_second = run_pass([big("n")], queue, attempts=[a1], other_jobs=[j1], instance_types=TYPES)
    assert placed(per_second) == {}
    assert per_second.reasons[1] == COSTLY_REASON
    hourly = run_pass([_hourly_big("n", 600)], queue, attempts=[a1], other_jobs=[j1], instance_types=HOURLY_TYPES)
    assert placed(hourly) == {1: ("n",)}
    # Near the end of its hour, the job would keep it up well into the next: a new instance.
    late = run_pass([_hourly_big("n", 3000)], queue, attempts=[a1], other_jobs=[j1], instance_types=HOURLY_TYPES)
    assert placed(late) == {}


def test_with_hourly_billing_a_new_instance_costs_its_whole_first_hour() -> None:
    arrays = NodeArrays([big("n")], None, PlacementSettings(), NOW)
    cost = PlacementSettings().cost
    five_minutes = Demand(job_id=1, resources=Resources(1, 2 * GiB), time_limit=300.0)
    ends = np.full((len(cost.run_fractions), 1), NOW)
    per_second = CostGate(arrays, ends, offers(TYPES, {}, NOW), NOW, cost)
    # Its run (half its limit, on average) and its boot, by the second.
    assert per_second.new_instance_cost(five_minutes) == pytest.approx(SMALL.price_per_hour * (150 + 90) / HOUR)
    hourly = CostGate(arrays, ends, offers(HOURLY_TYPES, {}, NOW), NOW, cost)
    assert hourly.new_instance_cost(five_minutes) == pytest.approx(SMALL.price_per_hour)


def test_with_hourly_billing_a_job_rides_along_on_an_instance_booting_for_the_hour() -> None:
    # As test_the_boot_planner_does_not_promise_room_the_gate_will_refuse, with a 45-minute job:
    # billed by the second the big node would cost it far more than a c5.large; billed by the
    # hour, it is paid for its first hour once up, which the job fits in.
    queue = [job(1, 1, 1, time_limit=45 * 60)]
    assert _plan([_booting("n-big", BIG)], queue) == ["c5.large"]
    booting = _booting("n-big", BIG)
    booting.billing_granularity = HOUR
    snapshot = Snapshot(jobs=queue, attempts=[], nodes=[booting], instance_types=HOURLY_TYPES, observing_since=0)
    settings = PolicySettings(boot=BootSettings(max_instances=10))
    assert plan_pass(snapshot, NOW, settings, placer=make_placer(settings)).boots == []


def test_a_kept_refusal_ends_with_the_paid_hour() -> None:
    """A kept placer remembers that the gate kept a request off every node, until a node changes;
    a node's next paid hour makes keeping it cheaper without any change to it, and the refusal
    must not outlive it: the kept placer places the job as a fresh one does."""
    j1, a1 = work(1, "n", 40, 600, started_ago=3000)  # its work has ended by every estimate
    queue = [job(1, 1, 1, time_limit=45 * 60)]
    nodes = [_hourly_big("n", HOUR - 100)]  # paid for 100 s more
    nodes[0].last_ping_at = NOW
    snapshot = Snapshot(jobs=[j1, *queue], attempts=[a1], nodes=nodes, instance_types=HOURLY_TYPES, observing_since=0)
    settings = PolicySettings(boot=BootSettings(max_instances=10))
    placer = make_placer(settings)
    first = plan_pass(snapshot, NOW, settings, placer=placer)
    assert first.placements == []
    assert [b.instance_type for b in first.boots] == ["c5.large"]  # (left out of the next snapshot)
    later = NOW + 200  # in its next paid hour
    nodes[0].last_ping_at = later
    assert [p.node_ids for p in plan_pass(snapshot, later, settings, placer=make_placer(settings)).placements] == [
        ("n",)
    ]
    assert [p.node_ids for p in plan_pass(snapshot, later, settings, placer=placer).placements] == [("n",)]
