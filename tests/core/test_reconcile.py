"""The reconcile pass: what one pass decides for a given snapshot and time."""

from __future__ import annotations

import dataclasses
from typing import TypedDict, Unpack

from tests.support import AttemptFields, JobFields

from corral.core.model import (
    Attempt,
    AttemptState,
    Dispatcher,
    GiB,
    InstanceType,
    Job,
    JobState,
    LocalityHints,
    Node,
    NodeState,
    Resources,
)
from corral.core.planner import BootPlan, PlannerMemo, plan_boots
from corral.core.reconcile import idle_nodes_can_drain, plan_pass
from corral.core.settings import PolicySettings
from corral.core.snapshot import NodeAction, Snapshot

SMALL = InstanceType("small", 2, 4 * GiB, 0.10)
LARGE = InstanceType("large", 8, 32 * GiB, 0.40)
CHEAP_BIG = InstanceType("cheap-big", 8, 32 * GiB, 0.30)
TYPES = [SMALL, LARGE]


def job(job_id: int, vcpus: float = 1, ram_gib: float = 1, **fields: Unpack[JobFields]) -> Job:
    return Job(id=job_id, command=["true"], resources=Resources(vcpus, int(ram_gib * GiB)), **fields)


def idle_node(node_id: str, itype: InstanceType = SMALL, now: float = 1000.0) -> Node:
    return Node(
        id=node_id,
        instance_type=itype.name,
        capacity=itype.capacity,
        price_per_hour=itype.price_per_hour,
        state=NodeState.IDLE,
        created_at=0,
        paired_at=1,
        last_ping_at=now,
        state_changed_at=now,
    )


def settings(**boot: object) -> PolicySettings:
    policy = PolicySettings()
    for key, value in boot.items():
        setattr(policy.boot, key, value)
    return policy


def test_a_queued_job_goes_on_an_idle_node_that_fits() -> None:
    snap = Snapshot(jobs=[job(1)], attempts=[], nodes=[idle_node("n1")], instance_types=TYPES)
    decisions = plan_pass(snap, 1000.0, settings())
    assert [(p.job_id, p.node_ids) for p in decisions.placements] == [(1, ("n1",))]
    assert decisions.boots == []


def test_higher_priority_first_when_room_is_short() -> None:
    snap = Snapshot(
        jobs=[job(1, vcpus=2, priority=1, submitted_at=1), job(2, vcpus=2, priority=5, submitted_at=2)],
        attempts=[],
        nodes=[idle_node("n1")],
        instance_types=TYPES,
    )
    decisions = plan_pass(snap, 1000.0, settings(max_instances=1))
    assert [p.job_id for p in decisions.placements] == [2]
    assert any(a.job_id == 1 and "max_instances" in a.wait_reason for a in decisions.annotations)


def test_the_cheapest_type_that_fits_is_booted_and_a_second_job_shares_it() -> None:
    snap = Snapshot(
        jobs=[job(1, ram_gib=8), job(2, ram_gib=8)], attempts=[], nodes=[], instance_types=[SMALL, LARGE, CHEAP_BIG]
    )
    decisions = plan_pass(snap, 0.0, settings())
    assert [b.instance_type for b in decisions.boots] == ["cheap-big"]


def test_jobs_wait_for_a_booting_node_instead_of_booting_another() -> None:
    booting = Node(id="n1", instance_type="small", capacity=SMALL.capacity, price_per_hour=0.1, created_at=0)
    snap = Snapshot(jobs=[job(1)], attempts=[], nodes=[booting], instance_types=TYPES)
    decisions = plan_pass(snap, 10.0, settings())
    assert decisions.boots == []
    assert "waiting for an instance to boot (n1)" in decisions.annotations[0].wait_reason


def test_a_node_that_booted_while_corral_was_down_gets_its_boot_grace_from_the_restart() -> None:
    """Its agent came up while the server was down and retries its pairing: the first pass after a
    restart shut it down as never paired and booted a replacement (a second boot, billed), as it
    would have a silent node had staleness not counted from the restart too."""
    grace = PolicySettings().lifecycle.boot_grace
    booting = Node(id="n1", instance_type="small", capacity=SMALL.capacity, price_per_hour=0.1, created_at=0)
    restarted_at = grace + 100.0
    snap = Snapshot([job(1)], [], [booting], TYPES, observing_since=restarted_at)
    decisions = plan_pass(snap, restarted_at + 1, settings())
    assert decisions.node_decisions == [] and decisions.boots == []
    assert "waiting for an instance to boot (n1)" in decisions.annotations[0].wait_reason
    # Still silent a full boot grace after the restart: shut down, its type backed off, and the
    # next type that fits booted.
    later = plan_pass(dataclasses.replace(snap, index=None), restarted_at + grace + 1, settings())
    assert [(d.node_id, d.action) for d in later.node_decisions] == [("n1", NodeAction.START_SHUTDOWN)]
    assert [(b.instance_type, b.node_id) for b in later.type_backoffs] == [("small", "n1")]
    assert [b.instance_type for b in later.boots] == ["large"]


def test_an_exclusive_job_boots_its_own_instance_and_shares_none() -> None:
    """Slurm's --exclusive: an exclusive job gets the cheapest type that fits it to itself; a job after
    it is promised no room on that instance (nor an exclusive one room on another job's)."""
    snap = Snapshot(
        jobs=[job(1, exclusive=True), job(2), job(3, exclusive=True)], attempts=[], nodes=[], instance_types=TYPES
    )
    decisions = plan_pass(snap, 0.0, settings())
    # Three small instances: without --exclusive, jobs 1 and 2 share one (a small has 2 vCPUs).
    assert [b.instance_type for b in decisions.boots] == ["small", "small", "small"]
    assert [b.reason.split(" needs")[0] for b in decisions.boots] == ["job 1", "job 2", "job 3"]
    plain = Snapshot(jobs=[job(1), job(2)], attempts=[], nodes=[], instance_types=TYPES)
    assert [b.instance_type for b in plan_pass(plain, 0.0, settings()).boots] == ["small"]


def test_an_exclusive_job_waits_only_on_an_instance_booting_that_no_other_job_was_promised() -> None:
    booting = [
        Node(id=f"n{i}", instance_type="small", capacity=SMALL.capacity, price_per_hour=0.1, created_at=0)
        for i in (1, 2)
    ]
    snap = Snapshot(
        jobs=[job(1, submitted_at=1), job(2, exclusive=True, submitted_at=2), job(3, submitted_at=3)],
        attempts=[],
        nodes=booting,
        instance_types=TYPES,
    )
    decisions = plan_pass(snap, 10.0, settings())
    assert decisions.boots == []
    said = {a.job_id: a.wait_reason for a in decisions.annotations}
    # Job 1 takes room on n1; job 2 takes the other instance whole; job 3 goes beside job 1, not job 2.
    assert "waiting for an instance to boot (n1)" in said[1]
    assert "waiting for an instance to boot (n2)" in said[2]
    assert "waiting for an instance to boot (n1)" in said[3]
    # With n1 and n2 both promised, a second exclusive job boots one of its own.
    snap = dataclasses.replace(snap, jobs=[*snap.jobs, job(4, exclusive=True, submitted_at=4)])
    decisions = plan_pass(snap, 10.0, settings())
    assert [b.reason.split(" needs")[0] for b in decisions.boots] == ["job 4"]


def test_a_job_larger_than_every_type_is_unplaceable_with_the_reason() -> None:
    snap = Snapshot(jobs=[job(1, ram_gib=40)], attempts=[], nodes=[], instance_types=TYPES)
    decisions = plan_pass(snap, 0.0, settings())
    assert decisions.boots == []
    (note,) = decisions.annotations
    assert note.unplaceable and note.wait_reason == "no instance type has 40 GiB RAM (the largest has 32 GiB RAM)"


def test_max_instances_caps_boots() -> None:
    snap = Snapshot(jobs=[job(i, vcpus=2) for i in range(1, 6)], attempts=[], nodes=[], instance_types=[SMALL])
    decisions = plan_pass(snap, 0.0, settings(max_instances=3))
    assert len(decisions.boots) == 3


def test_nodes_the_cloud_would_not_terminate_still_count_against_the_fleet_limits() -> None:
    """A node shutting down bills until the cloud takes its terminate (the shell marks it gone
    then): one still shutting down in a snapshot is one whose terminate was refused (corral's role
    without ec2:TerminateInstances). Replaced as if gone, the billed fleet grew past max_instances
    and the spend cap with every node that idled out."""
    stuck = [dataclasses.replace(idle_node(f"n{i}"), state=NodeState.SHUTTING_DOWN) for i in (1, 2)]
    snap = Snapshot(jobs=[job(1, vcpus=2)], attempts=[], nodes=stuck, instance_types=[SMALL])
    capped = plan_pass(snap, 1000.0, settings(max_instances=2))
    assert capped.boots == []
    assert capped.annotations[0].wait_reason == "waiting for resources: max_instances (2) reached"
    spend = plan_pass(snap, 1000.0, settings(max_instances=10, max_cost_per_hour=0.25))
    assert spend.boots == []
    assert "max_cost_per_hour ($0.25/h) reached" in spend.annotations[0].wait_reason
    assert [b.instance_type for b in plan_pass(snap, 1000.0, settings(max_instances=3)).boots] == ["small"]


def test_the_boot_plan_follows_what_changed_since_the_last_pass() -> None:
    """Pass after pass over the same jobs and settings objects (as the simulator hands them), a
    plan kept between passes (a PlannerMemo, as the shells keep one) follows each input that
    changed in place: a job's request, the settings, the instances booting, the nodes live, a
    type's back-off running out."""
    jobs = [job(i, vcpus=2, ram_gib=3) for i in range(1, 5)]
    nodes: list[Node] = []
    snap = Snapshot(jobs=jobs, attempts=[], nodes=nodes, instance_types=TYPES, unavailable_types={"small": 110.0})
    policy = settings(max_instances=3)
    kept = PlannerMemo()

    def boots(now: float = 100.0) -> list[str]:
        return [b.instance_type for b in plan_pass(snap, now, policy, planner=kept).boots]

    assert boots() == boots() == ["large"]  # one holds all four
    jobs[0].resources = Resources(8, 3 * GiB)
    assert boots() == ["large", "large"]  # the first fills one alone
    policy.boot.max_instances = 1
    assert boots() == ["large"]
    assert "max_instances (1) reached" in plan_pass(snap, 100.0, policy, planner=kept).annotations[-1].wait_reason
    policy.boot.max_instances = 4

    def booting(node_id: str) -> Node:
        node = idle_node(node_id, LARGE)
        node.state, node.created_at, node.state_changed_at = NodeState.BOOTING, 90.0, 90.0
        return node

    nodes.append(booting("n1"))
    assert boots() == ["large"]  # the first waits for the one booting
    nodes[0] = booting("n2")  # another instance on its way instead
    assert (
        "waiting for an instance to boot (n2)"
        in plan_pass(snap, 100.0, policy, planner=kept).annotations[0].wait_reason
    )
    policy.boot.max_instances = 2
    assert boots() == ["large"]
    tiny = idle_node("n3")
    tiny.capacity = Resources(1, 1 * GiB)  # holds none of the jobs, but counts against max_instances
    nodes.append(tiny)
    assert boots() == []
    nodes.pop()
    assert boots() == ["large"]
    assert boots(now=120.0) == ["small"]  # small instances are cheaper, and out of back-off now


def test_a_kept_plan_is_given_again_for_a_new_list_of_the_same_types() -> None:
    """The live loop hands a new list of the same instance types each pass: its kept plan still
    serves while nothing else changed; a list with another type gets a plan of its own."""
    waiting = [job(1, vcpus=6)]
    kept = PlannerMemo()

    def plan(types: list[InstanceType]) -> BootPlan:
        return plan_boots(waiting, [], types, 0, {}, 100.0, settings(max_instances=3).boot, memo=kept)

    first = plan(list(TYPES))
    assert [b.instance_type for b in first.boots] == ["large"]
    assert plan(list(TYPES)) is first
    assert [b.instance_type for b in plan([SMALL, CHEAP_BIG]).boots] == ["cheap-big"]


def test_a_gang_takes_room_on_its_way_for_some_of_its_nodes_and_boots_only_the_rest() -> None:
    """In queue order: a gang goes on room already on its way for as many of its nodes as it can,
    and boots the rest within max_instances; a later gang asking the same finds nothing left."""
    queue = [
        job(1),  # boots a small instance, with a vcpu to spare
        job(2, node_count=3),  # that spare vcpu and two more instances: the last two max_instances allows
        job(3, node_count=2),  # the two spare vcpus those two leave
        job(4, node_count=3),  # asks what job 2 asked: nothing left
        job(5, node_count=3),
    ]
    snap = Snapshot(jobs=queue, attempts=[], nodes=[], instance_types=TYPES)
    decisions = plan_pass(snap, 100.0, settings(max_instances=3))
    assert [b.instance_type for b in decisions.boots] == ["small"] * 3
    reasons = {a.job_id: a.wait_reason for a in decisions.annotations}
    assert reasons[2] == "waiting for instances to boot (new small, new small, new small)"
    assert reasons[3] == "waiting for instances to boot (new small, new small)"
    assert reasons[4] == reasons[5] == "waiting for resources: max_instances (3) reached"


def test_a_request_held_back_for_its_long_limit_does_not_hold_back_a_short_one() -> None:
    """The cost gate keeps a job with a long time limit off a dear instance on its way, where one
    asking the same with a short limit may go: one held back (here by max_boots_per_pass) says
    nothing of the other."""
    first = job(1, vcpus=2, time_limit=10 * 3600.0)  # boots the one small instance this pass may, and fills it
    long_one = job(2, time_limit=10 * 3600.0)
    short_one = job(3, time_limit=60.0)
    booting = idle_node("n1", LARGE)
    booting.state, booting.created_at, booting.state_changed_at = NodeState.BOOTING, 90.0, 90.0
    snap = Snapshot(jobs=[first, long_one, short_one], attempts=[], nodes=[booting], instance_types=TYPES)
    decisions = plan_pass(snap, 100.0, settings(max_instances=10, max_boots_per_pass=1))
    reasons = {a.job_id: a.wait_reason for a in decisions.annotations}
    assert reasons[3] == "waiting for an instance to boot (n1)"
    assert reasons[1] == "waiting for an instance to boot (small)"
    assert reasons[2] == "waiting for resources: max_boots_per_pass (1) reached"


def test_a_fixed_fleet_says_why_a_job_waits_and_which_can_never_run() -> None:
    """With max_instances 0 nothing is booted: a job that does not fit now keeps the placer's
    reason; one that no type of the fleet holds is unplaceable."""
    node = idle_node("n1")
    snap = Snapshot(
        jobs=[job(1, vcpus=2), job(2, vcpus=2), job(3, vcpus=64)], attempts=[], nodes=[node], instance_types=[SMALL]
    )
    decisions = plan_pass(snap, 1000.0, settings(max_instances=0))
    assert [p.job_id for p in decisions.placements] == [1] and decisions.boots == []
    notes = {a.job_id: a for a in decisions.annotations}
    assert "max_instances" not in notes[2].wait_reason and not notes[2].unplaceable
    assert notes[3].unplaceable and "no instance type has 64 vcpus" in notes[3].wait_reason


def test_an_unplaceable_jobs_reason_counts_in_words() -> None:
    """It said "no instance type has 1 GPUs (the largest has 0 GPUs)"."""

    def gpu_job(job_id: int, gpus: int) -> Job:
        return Job(id=job_id, command=["true"], resources=Resources(gpus=gpus))

    wanted = [gpu_job(1, 1), gpu_job(2, 3), job(3, vcpus=9)]
    snap = Snapshot(jobs=wanted, attempts=[], nodes=[], instance_types=[SMALL, dataclasses.replace(LARGE, gpus=1)])
    reasons = {a.job_id: a.wait_reason for a in plan_pass(snap, 1000.0, settings()).annotations}
    assert reasons == {
        1: "waiting for an instance to boot (large)",
        2: "no instance type has 3 GPUs (the largest has 1 GPU)",
        3: "no instance type has 9 vcpus (the largest has 8 vcpus)",
    }
    snap = Snapshot(jobs=[gpu_job(1, 1)], attempts=[], nodes=[], instance_types=[SMALL])
    assert [a.wait_reason for a in plan_pass(snap, 1000.0, settings()).annotations] == [
        "no instance type has 1 GPU (none has any)"
    ]


def test_a_type_in_capacity_back_off_is_skipped() -> None:
    snap = Snapshot(jobs=[job(1)], attempts=[], nodes=[], instance_types=TYPES, unavailable_types={"small": 500.0})
    assert [b.instance_type for b in plan_pass(snap, 100.0, settings()).boots] == ["large"]
    assert [b.instance_type for b in plan_pass(snap, 600.0, settings()).boots] == ["small"]


def test_a_gang_needs_distinct_nodes() -> None:
    nodes = [idle_node("n1")]
    snap = Snapshot(jobs=[job(1, node_count=2)], attempts=[], nodes=nodes, instance_types=TYPES)
    decisions = plan_pass(snap, 1000.0, settings())
    assert decisions.placements == []
    # n1 holds both, but a gang's nodes are distinct: it waits on n1 for one and boots the other.
    # Its reason tells the node up from the one that boots: "(n1, new small)" read as if n1 booted.
    assert [b.instance_type for b in decisions.boots] == ["small"]
    assert (
        decisions.annotations[0].wait_reason == "waiting for instances to boot (new small), with n1 up and kept for it"
    )
    nodes.append(idle_node("n2"))
    (placement,) = plan_pass(snap, 1000.0, settings()).placements
    assert sorted(placement.node_ids) == ["n1", "n2"]


def booting_node(node_id: str, itype: InstanceType = SMALL, since: float = 900.0) -> Node:
    node = idle_node(node_id, itype)
    node.state, node.created_at, node.state_changed_at, node.paired_at = NodeState.BOOTING, since, since, None
    return node


def test_a_gang_waits_on_its_first_nodes_up_and_keeps_them_from_draining() -> None:
    """The first of a gang's instances to pair wait idle for the others: the gang counts them, boots
    no second set, and they are not drained though their idle grace ran out, until they have been
    idle as long as the boot grace (the time an instance may take to pair)."""
    up = idle_node("n1")
    up.state_changed_at = 700.0  # idle since 700: the idle grace (60 s) ran out long ago
    snap = Snapshot(
        jobs=[job(1, vcpus=2, node_count=3)],
        attempts=[],
        nodes=[up, booting_node("n2"), booting_node("n3")],
        instance_types=TYPES,
    )
    policy = settings()
    decisions = plan_pass(snap, 1000.0, policy)
    assert decisions.boots == [] and decisions.node_decisions == []
    assert decisions.annotations[0].wait_reason == "waiting for instances to boot (n2, n3), with n1 up and kept for it"
    # Idle for the whole boot grace (600 s): no longer held; drained, and the gang boots another.
    up.last_ping_at = 700.0 + policy.lifecycle.boot_grace
    later = plan_pass(snap, up.last_ping_at, policy)
    assert [b.instance_type for b in later.boots] == ["small"]
    assert [(d.node_id, d.action) for d in later.node_decisions] == [("n1", NodeAction.START_DRAIN)]


class NodeAsks(TypedDict, total=False):
    """What a job may ask of a node's attributes (the Job fields the placement filters read)."""

    traits: dict[str, str | list[str]]
    forbidden_traits: dict[str, str | list[str]]
    min_platform: str | None
    locality: LocalityHints | None


# A type whose nodes have what the constrained gangs below ask of a node, and a cheaper one whose
# nodes have not.
ZONED = dataclasses.replace(SMALL, name="small-a", price_per_hour=0.12, attributes=(("platform", "3"), ("zone", "a")))
ZONE_B = dataclasses.replace(SMALL, name="small-b", attributes=(("zone", "b"),))

# Each way a gang asks the filters about a node's attributes.
ASKING_ATTRIBUTES: dict[str, NodeAsks] = {
    "traits": {"traits": {"zone": "a"}},
    "forbidden traits": {"forbidden_traits": {"zone": "b"}},
    "platform": {"min_platform": "2"},
}


def typed_node(node_id: str, itype: InstanceType, state: NodeState = NodeState.IDLE) -> Node:
    """A node as its type boots it: with the type's attributes; idle since 700 (the idle grace,
    60 s, ran out long ago), or booting."""
    node = dataclasses.replace(idle_node(node_id, itype), attributes=dict(itype.attributes), state_changed_at=700.0)
    if state is NodeState.BOOTING:
        node.state, node.created_at, node.state_changed_at, node.paired_at = state, 900.0, 900.0, None
    return node


def test_a_constrained_gang_waits_on_its_first_nodes_up_and_starts_without_another_boot() -> None:
    """A gang that asks for traits, a platform or strict locality counted no idle node: each time
    one of its instances paired before the others, it booted one more (a whole second set, in the
    end), and the early ones were drained. It counts those the filters let it run on, holds them up,
    and starts on its own instances once they are all up."""
    strict: dict[str, NodeAsks] = {
        "strict locality": {"locality": LocalityHints(far=("tag:db",), strict=True, level="rack")}
    }
    for why, asks in {**ASKING_ATTRIBUTES, **strict}.items():
        nodes = [
            typed_node("n1", ZONED),
            typed_node("n2", ZONED, NodeState.BOOTING),
            typed_node("n3", ZONED, NodeState.BOOTING),
        ]
        snap = Snapshot(
            jobs=[job(1, vcpus=2, node_count=3, **asks)], attempts=[], nodes=nodes, instance_types=[ZONE_B, ZONED]
        )
        decisions = plan_pass(snap, 1000.0, settings())
        assert decisions.boots == [] and decisions.node_decisions == [], why
        assert (
            decisions.annotations[0].wait_reason == "waiting for instances to boot (n2, n3), with n1 up and kept for it"
        ), why
        for node in nodes[1:]:
            node.state, node.paired_at, node.state_changed_at = NodeState.IDLE, 1000.0, 1000.0
        started = plan_pass(snap, 1001.0, settings())
        assert started.boots == [] and [sorted(p.node_ids) for p in started.placements] == [["n1", "n2", "n3"]], why


def test_a_constrained_gang_boots_only_the_nodes_it_lacks_beside_idle_nodes_it_can_run_on() -> None:
    """Two idle nodes meet the gang's constraints and two do not: it counts the two, boots two of
    the type that meets them, holds its two up and lets the others drain."""
    for why, asks in ASKING_ATTRIBUTES.items():
        nodes = [
            typed_node(node_id, itype)
            for node_id, itype in (("m1", ZONED), ("o1", ZONE_B), ("m2", ZONED), ("o2", ZONE_B))
        ]
        snap = Snapshot(
            jobs=[job(1, vcpus=2, node_count=4, **asks)], attempts=[], nodes=nodes, instance_types=[ZONE_B, ZONED]
        )
        decisions = plan_pass(snap, 1000.0, settings())
        assert decisions.placements == [], why
        assert [b.instance_type for b in decisions.boots] == ["small-a"] * 2, why
        assert decisions.annotations[0].wait_reason == (
            "waiting for instances to boot (new small-a, new small-a), with m1, m2 up and kept for it"
        ), why
        drained = sorted(d.node_id for d in decisions.node_decisions if d.action is NodeAction.START_DRAIN)
        assert drained == ["o1", "o2"], why


def test_a_gang_with_strict_rack_locality_counts_no_idle_node_in_a_far_target_s_rack() -> None:
    """The locality filter, over where the pass's work runs: a strict `far` at rack level keeps the
    gang off an idle node beside a target. A plan kept between passes is made again when a target
    starts there, though the waiting jobs and the idle nodes are the same."""
    db = job(9, tags=("db",), state=JobState.CLAIMED, claimed_by="local")
    other = job(8, vcpus=2, state=JobState.RUNNING)  # fills the busy node
    busy = dataclasses.replace(idle_node("busy"), state=NodeState.BUSY, rack="r1")
    beside, apart = (
        dataclasses.replace(idle_node("beside"), rack="r1"),
        dataclasses.replace(idle_node("apart"), rack="r2"),
    )
    for level, counted in (("rack", ["apart"]), ("server", ["beside", "apart"])):
        gang = job(1, vcpus=2, node_count=3, locality=LocalityHints(far=("tag:db",), strict=True, level=level))
        filling = Attempt(1, 8, ["busy"], Resources(2, GiB), AttemptState.RUNNING, "local", assigned_at=900.0)
        attempts = [filling]
        snap = Snapshot(jobs=[gang, db, other], attempts=attempts, nodes=[busy, beside, apart], instance_types=TYPES)
        kept, policy = PlannerMemo(), settings()
        # No target runs yet: nothing to keep away from.
        assert len(plan_pass(snap, 1000.0, policy, planner=kept).boots) == 1, level
        on_busy = Attempt(2, 9, ["busy"], Resources(1, GiB), AttemptState.RUNNING, "local", assigned_at=1000.0)
        attempts.append(on_busy)
        decisions = plan_pass(snap, 1001.0, policy, planner=kept)
        assert len(decisions.boots) == 3 - len(counted), level
        labels = ", ".join(["new small"] * (3 - len(counted)))
        reasons = {a.job_id: a.wait_reason for a in decisions.annotations}
        assert (
            reasons[1] == f"waiting for instances to boot ({labels}), with {', '.join(counted)} up and kept for it"
        ), level
        # Without the locality filter the placer keeps no hint, nor does the planner.
        policy.placement.filters = [name for name in policy.placement.filters if name != "locality"]
        assert len(plan_pass(snap, 1002.0, policy).boots) == 1, level


def test_a_far_target_placed_in_the_same_pass_keeps_a_strict_gang_off_its_rack() -> None:
    """As the placer counts jobs it placed earlier in the pass as targets, so does the planner."""
    db = job(9, tags=("db",), traits={"disk": "ssd"}, priority=2)  # placed first, on the only ssd node
    ssd = dataclasses.replace(idle_node("ssd"), attributes={"disk": "ssd"}, rack="r1")
    beside, apart = (
        dataclasses.replace(idle_node("beside"), rack="r1"),
        dataclasses.replace(idle_node("apart"), rack="r2"),
    )
    gang = job(1, vcpus=2, node_count=3, locality=LocalityHints(far=("tag:db",), strict=True, level="rack"))
    snap = Snapshot(jobs=[db, gang], attempts=[], nodes=[ssd, beside, apart], instance_types=TYPES)
    decisions = plan_pass(snap, 1000.0, settings())
    assert [(p.job_id, p.node_ids) for p in decisions.placements] == [(9, ("ssd",))]
    reasons = {a.job_id: a.wait_reason for a in decisions.annotations}
    assert reasons[1] == "waiting for instances to boot (new small, new small), with apart up and kept for it"


def test_gangs_asking_the_same_room_but_different_constraints_count_their_own_idle_nodes() -> None:
    """The planner skips a job that asks what one before it found no room or boot for; two gangs of
    one request that ask for different traits may count different idle nodes, so one's 'max_instances
    reached' is not the other's."""
    both = dataclasses.replace(SMALL, attributes=(("disk", "ssd"), ("zone", "a")))
    zoned_only = [dataclasses.replace(idle_node(f"z{i}", both), attributes={"zone": "a"}) for i in (1, 2)]
    snap = Snapshot(
        jobs=[
            job(1, vcpus=2, node_count=3, traits={"disk": "ssd"}),  # counts neither: needs 3, 1 may boot
            job(2, vcpus=2, node_count=3, traits={"zone": "a"}),  # counts both: boots the 1 it lacks
        ],
        attempts=[],
        nodes=zoned_only,
        instance_types=[both],
    )
    decisions = plan_pass(snap, 1000.0, settings(max_instances=3))
    assert [b.instance_type for b in decisions.boots] == ["small"]
    reasons = {a.job_id: a.wait_reason for a in decisions.annotations}
    # Not "max_instances (3) reached" beside a fleet of 2: what it lacks, and what may boot.
    assert reasons[1] == "waiting for resources: needs 3 more instances at once, max_instances (3) leaves room for 1"
    assert reasons[2] == "waiting for instances to boot (new small), with z1, z2 up and kept for it"


# Idle nodes the placement filters keep a job off, whatever its request: an operator hold, a
# maintenance category, another's admin reservation, a transient failure's reservation (until 5000).
KEPT_OFF: dict[str, dict[str, str | list[str]]] = {
    "held": {"held": "true"},
    "maintenance": {"category": "hardware-maintenance"},
    "reserved for another": {"reservation": "other-team"},
    "transient failure": {"failure_reserved_until": "5000"},
}


def kept_off_nodes() -> list[Node]:
    return [dataclasses.replace(idle_node(f"off-{i}"), attributes=a) for i, a in enumerate(KEPT_OFF.values())]


def test_a_gang_counts_only_idle_nodes_the_filters_let_it_run_on() -> None:
    """A gang that pins no nodes counts idle nodes as room it will start on: not those the placer
    keeps every job off (held, in maintenance, reserved for someone else, reserved after a transient
    failure). Counting them, it neither started nor booted, for as long as the boot grace: here it
    counts n1 and boots the two nodes it lacks, and holds no kept-off node up."""
    snap = Snapshot(
        jobs=[job(1, vcpus=2, node_count=3)],
        attempts=[],
        nodes=[idle_node("n1"), *kept_off_nodes()],
        instance_types=TYPES,
    )
    decisions = plan_pass(snap, 1000.0, settings())
    assert decisions.placements == []
    assert [b.instance_type for b in decisions.boots] == ["small", "small"]
    assert (
        decisions.annotations[0].wait_reason
        == "waiting for instances to boot (new small, new small), with n1 up and kept for it"
    )
    # Any one of them alone is no room either.
    for why, attributes in KEPT_OFF.items():
        off = dataclasses.replace(idle_node("n2"), attributes=attributes)
        one = Snapshot(
            jobs=[job(1, vcpus=2, node_count=2)], attempts=[], nodes=[idle_node("n1"), off], instance_types=TYPES
        )
        assert [b.instance_type for b in plan_pass(one, 1000.0, settings()).boots] == ["small"], why


def test_a_gang_that_cannot_boot_says_so_rather_than_wait_on_nodes_it_cannot_use() -> None:
    """At max_instances, the kept-off idle nodes were counted as the gang's room ("waiting for
    instances to boot (n1, off-0, off-1)", which would never come true); it says what it waits for."""
    nodes = [idle_node("n1"), *kept_off_nodes()]
    snap = Snapshot(jobs=[job(1, vcpus=2, node_count=3)], attempts=[], nodes=nodes, instance_types=TYPES)
    (note,) = plan_pass(snap, 1000.0, settings(max_instances=len(nodes))).annotations
    assert note.wait_reason == f"waiting for resources: max_instances ({len(nodes)}) reached"


def test_a_gang_does_not_count_a_node_a_transient_failure_reserves_in_the_same_pass() -> None:
    """A node whose attempt did not start within the start timeout is reserved by this very pass
    (seed 002 §5.4.5); it is no room for a gang behind, though its attribute is not written yet."""
    policy = settings()
    policy.dispatch.node_failure_reserve_time = 600.0
    late = Attempt(7, 2, ["n2"], Resources(2, GiB), AttemptState.ASSIGNED, "local", assigned_at=0.0)
    snap = Snapshot(
        jobs=[job(1, vcpus=2, node_count=2), job(2, vcpus=2, state=JobState.CLAIMED, claimed_by="local")],
        attempts=[late],
        nodes=[idle_node("n1"), dataclasses.replace(idle_node("n2"), state=NodeState.BUSY)],
        instance_types=TYPES,
    )
    decisions = plan_pass(snap, 1000.0, policy)
    assert [r.node_id for r in decisions.node_reservations] == ["n2"]
    assert [b.instance_type for b in decisions.boots] == ["small"]
    reasons = {a.job_id: a.wait_reason for a in decisions.annotations}
    assert reasons[1] == "waiting for instances to boot (new small), with n1 up and kept for it"


def test_a_kept_boot_plan_follows_the_idle_nodes_a_gang_may_count_on() -> None:
    """A plan kept between passes (PlannerMemo), and what the filters said of each idle node, are
    made again when an idle node's attributes change in place (an operator holds it) and when a
    reservation on one ends."""
    n2 = idle_node("n2")
    snap = Snapshot(
        jobs=[job(1, vcpus=2, node_count=3)], attempts=[], nodes=[idle_node("n1"), n2], instance_types=TYPES
    )
    kept, policy = PlannerMemo(), settings()  # one settings object, as the shells hand theirs

    def boots(now: float) -> int:
        return len(plan_pass(snap, now, policy, planner=kept).boots)

    assert boots(1000.0) == boots(1001.0) == 1
    n2.attributes["held"] = "true"
    assert boots(1002.0) == 2
    n2.attributes = {"failure_reserved_until": "1040"}
    assert boots(1003.0) == boots(1039.0) == 2
    assert boots(1040.0) == 1  # its reservation ended: the gang counts it again


def test_a_capped_gang_does_not_count_an_idle_node_pinned_uncapped() -> None:
    """The filters that depend on the job apply too: a node pinned `capped: false` takes no capped job."""
    uncapped = dataclasses.replace(idle_node("n2"), attributes={"capped": "false"})
    nodes = [idle_node("n1"), uncapped]
    capped = Snapshot(
        jobs=[job(1, vcpus=2, node_count=2, cpu_capped=True)], attempts=[], nodes=nodes, instance_types=TYPES
    )
    assert [b.instance_type for b in plan_pass(capped, 1000.0, settings()).boots] == ["small"]
    plain = Snapshot(jobs=[job(1, vcpus=2, node_count=2)], attempts=[], nodes=nodes, instance_types=TYPES)
    assert [sorted(p.node_ids) for p in plan_pass(plain, 1000.0, settings()).placements] == [["n1", "n2"]]


SPOT = dataclasses.replace(SMALL, name="small-spot", price_per_hour=0.03, attributes=(("capacity", "spot"),))


def test_a_job_that_forbids_a_trait_gets_the_cheapest_type_without_it() -> None:
    """Before, the planner chose by room alone: it booted the cheaper spot type, the placer never
    put the job on it, and it was shut down idle and booted again, pass after pass."""
    no_spot: dict[str, str | list[str]] = {"capacity": "spot"}
    snap = Snapshot(
        jobs=[job(1, forbidden_traits=no_spot), job(2, forbidden_traits=no_spot), job(3)],
        attempts=[],
        nodes=[],
        instance_types=[SPOT, SMALL, LARGE],
    )
    decisions = plan_pass(snap, 0.0, settings())
    # Jobs 1 and 2 share one small; job 3 takes no room on it: it may run on spot, which is cheaper.
    assert sorted(b.instance_type for b in decisions.boots) == ["small", "small-spot"]


def test_a_job_waits_on_a_booting_node_only_of_a_type_it_accepts() -> None:
    on_its_way = dataclasses.replace(booting_node("n1", SPOT), attributes={"capacity": "spot"})
    snap = Snapshot(
        jobs=[job(1, forbidden_traits={"capacity": "spot"})],
        attempts=[],
        nodes=[on_its_way],
        instance_types=[SPOT, SMALL],
    )
    decisions = plan_pass(snap, 1000.0, settings())
    assert [b.instance_type for b in decisions.boots] == ["small"]


def test_a_job_no_instance_type_accepts_boots_nothing_and_says_why() -> None:
    snap = Snapshot(jobs=[job(1, traits={"gpu_model": "a100"})], attempts=[], nodes=[], instance_types=[SPOT, SMALL])
    decisions = plan_pass(snap, 0.0, settings())
    assert decisions.boots == []
    (note,) = decisions.annotations
    # Unplaceable, as a job larger than every type: every node is an instance corral boots, so
    # only an operator's `corral node NODE gpu_model=a100` could ever run it (the placer, which
    # runs first every pass, would then place it). Before, it waited for ever, counted against
    # its user's policy.users limits.
    assert note.unplaceable
    # The filter's counts are over the instance types (it said "0 of 2 nodes have it").
    assert note.wait_reason == (
        "no instance type with room for it meets its constraints"
        " (TRAITS_MISMATCH: needs gpu_model=a100 (0 of 2 instance types have it))"
    )


def test_jobs_no_instance_type_accepts_each_get_their_own_filter_s_reason() -> None:
    """Before, the second job (same room, another constraint) got the first's reason: job 2,
    which asks for a platform, read "TRAITS_MISMATCH: needs gpu_model=a100", in `corral jobs`
    and in the simulator's "never finished" note alike. And a platform was described on the
    cheapest type alone ("no instance type reports a platform version") when another reports
    one: the user needs the newest there is."""
    newer = dataclasses.replace(LARGE, attributes=(("platform", "1.10"),))
    snap = Snapshot(
        jobs=[job(1, traits={"gpu_model": "a100"}), job(2, min_platform="2.0"), job(3, min_platform="2.0")],
        attempts=[],
        nodes=[],
        instance_types=[SMALL, newer],
    )
    notes = {n.job_id: n for n in plan_pass(snap, 0.0, settings()).annotations}
    assert notes[1].wait_reason.endswith("(TRAITS_MISMATCH: needs gpu_model=a100 (0 of 2 instance types have it))")
    assert notes[2].wait_reason.endswith("(PLATFORM_TOO_OLD: needs platform >= 2.0; the newest is 1.10 on new:large)")
    assert notes[3] == dataclasses.replace(notes[2], job_id=3)
    assert all(n.unplaceable for n in notes.values())


def test_why_no_instance_type_meets_a_job_s_constraints_speaks_of_types() -> None:
    """Each filter that can rule a type out names types, not nodes, in the planner's reason."""
    reserved = dataclasses.replace(
        SMALL, attributes=(("reservation", "team-a"), ("platform", "1.2"), ("capped", "false"))
    )
    cases = {
        "forbids capacity=spot (1 of 1 instance types have it)": (
            [SPOT],
            job(1, forbidden_traits={"capacity": "spot"}),
        ),
        "needs platform >= 2; no instance type reports a platform version": ([SMALL], job(1, min_platform="2")),
        "needs platform >= 2; the newest is 1.2 on new:small": (
            [reserved],
            job(1, min_platform="2", reservation="team-a"),
        ),
        "held by admin reservations: team-a (1 instance type)": ([reserved], job(1, min_platform="1")),
        "the job has a CPU cap; these instance types are pinned uncapped": (
            [reserved],
            job(1, cpu_capped=True, reservation="team-a"),
        ),
    }
    for expected, (types, one) in cases.items():
        snap = Snapshot(jobs=[one], attempts=[], nodes=[], instance_types=types)
        (note,) = plan_pass(snap, 0.0, settings()).annotations
        assert note.wait_reason.endswith(f"{expected})"), note.wait_reason
        assert note.unplaceable


def test_a_gang_larger_than_a_pass_may_boot_boots_over_several_passes() -> None:
    nodes: list[Node] = []
    snap = Snapshot(jobs=[job(1, vcpus=2, node_count=3)], attempts=[], nodes=nodes, instance_types=TYPES)
    policy = settings(max_boots_per_pass=2)
    first = plan_pass(snap, 100.0, policy)
    assert [b.instance_type for b in first.boots] == ["small", "small"]
    assert first.annotations[0].wait_reason == (
        "waiting for instances to boot (new small, new small); 1 more to boot in later passes"
    )
    nodes.extend([booting_node("n1", since=100.0), booting_node("n2", since=100.0)])
    second = plan_pass(snap, 101.0, policy)
    assert [b.instance_type for b in second.boots] == ["small"]
    nodes.append(booting_node("n3", since=101.0))
    assert plan_pass(snap, 102.0, policy).boots == []


def test_a_gang_of_more_nodes_than_max_instances_says_so() -> None:
    snap = Snapshot(jobs=[job(1, node_count=4)], attempts=[], nodes=[], instance_types=TYPES)
    decisions = plan_pass(snap, 100.0, settings(max_instances=3))
    assert decisions.boots == []
    (note,) = decisions.annotations
    # Unplaceable: every node is an instance, so it can never run under this config. Before, it
    # waited unflagged ("waiting for resources: ..."), for ever.
    assert note.wait_reason == "needs 4 nodes, max_instances is 3" and note.unplaceable


def test_not_before_and_back_off_hold_a_job() -> None:
    n1 = idle_node("n1")
    snap = Snapshot(
        jobs=[job(1, not_before=2000.0), job(2, retry_at=1500.0)],
        attempts=[],
        nodes=[n1],
        instance_types=TYPES,
    )
    decisions = plan_pass(snap, 1000.0, settings())
    assert decisions.placements == []
    reasons = {a.job_id: a.wait_reason for a in decisions.annotations}
    assert reasons == {
        1: "not before its requested start, 1970-01-01 00:33:20 UTC",
        2: "back-off after a temporary failure, until 1970-01-01 00:25:00 UTC",
    }
    n1.last_ping_at = 1600.0
    assert [p.job_id for p in plan_pass(snap, 1600.0, settings()).placements] == [2]


def running(job_id: int, node_id: str, attempt_id: int = 1, **fields: Unpack[AttemptFields]) -> tuple[Job, Attempt]:
    j = job(job_id, state=JobState.RUNNING, claimed_by="local")
    return j, Attempt(attempt_id, job_id, [node_id], j.resources, AttemptState.RUNNING, "local", **fields)


def test_a_silent_node_goes_down_and_its_job_is_requeued_with_back_off() -> None:
    j, a = running(1, "n1")
    silent = idle_node("n1", now=100.0)
    silent.state = NodeState.BUSY
    decisions = plan_pass(Snapshot([j], [a], [silent], TYPES), 1000.0, settings())
    assert [(m.node_id, m.state) for m in decisions.node_marks] == [("n1", NodeState.DOWN)]
    (outcome,) = decisions.job_outcomes
    assert outcome.state is JobState.QUEUED and outcome.temp_failure and outcome.retry_at == 1005.0
    assert outcome.attempt_ids == (1,)
    assert [(d.node_id, d.action) for d in decisions.node_decisions] == [("n1", NodeAction.START_SHUTDOWN)]


def test_temp_failures_past_the_budget_fail_the_job() -> None:
    j, a = running(1, "gone-node")
    j.temp_failures = 5
    (outcome,) = plan_pass(Snapshot([j], [a], [], TYPES), 1000.0, settings()).job_outcomes
    assert outcome.state is JobState.FAILED
    # The reason counts this failure too, as the job's record does (temporary failures 6).
    assert outcome.reason == "node gone-node lost; gave up after 6 temporary failures"


def test_priority_zero_cancels_a_running_job() -> None:
    j, a = running(1, "n1")
    j.priority = 0
    busy = idle_node("n1")
    busy.state = NodeState.BUSY
    (outcome,) = plan_pass(Snapshot([j], [a], [busy], TYPES), 1000.0, settings()).job_outcomes
    assert outcome.state is JobState.CANCELLED and outcome.attempt_ids == (1,)


def test_room_freed_by_a_cancellation_is_used_in_the_same_pass() -> None:
    # n1 (2 vcpus) runs job 1 (2 vcpus), which the user cancels; job 2 waits for 2 vcpus. The pass
    # that kills job 1 gives its whole node to job 2: neither its request nor its (unmeasured)
    # load counts any more, under the default COMBINED availability.
    j = job(1, 2, state=JobState.RUNNING, claimed_by="local", cancel_requested=True)
    a = Attempt(1, 1, ["n1"], j.resources, AttemptState.RUNNING, "local", assigned_at=900.0, started_at=900.0)
    busy = idle_node("n1")
    busy.state = NodeState.BUSY
    decisions = plan_pass(Snapshot([j, job(2, 2)], [a], [busy], TYPES), 1000.0, settings())
    assert [o.state for o in decisions.job_outcomes] == [JobState.CANCELLED]
    assert [(p.job_id, p.node_ids) for p in decisions.placements] == [(2, ("n1",))]
    assert decisions.boots == []


def test_a_cancellation_frees_only_the_nodes_it_leaves_without_work() -> None:
    # n1 runs jobs 1 and 2, n2 runs job 3; jobs 1 and 3 are cancelled. n2 is left without work
    # and reads as idle; n1 still runs job 2, stays busy and takes no drain.
    def running_on(job_id: int, node_id: str) -> tuple[Job, Attempt]:
        j = job(job_id, state=JobState.RUNNING, claimed_by="local", cancel_requested=job_id != 2)
        a = Attempt(job_id, job_id, [node_id], j.resources, AttemptState.RUNNING, "local", 900.0, started_at=900.0)
        return j, a

    (j1, a1), (j2, a2), (j3, a3) = running_on(1, "n1"), running_on(2, "n1"), running_on(3, "n2")
    n1, n2 = idle_node("n1"), idle_node("n2")
    n1.state = n2.state = NodeState.BUSY
    decisions = plan_pass(Snapshot([j1, j2, j3], [a1, a2, a3], [n1, n2], TYPES), 1000.0, settings())
    assert sorted(o.job_id for o in decisions.job_outcomes) == [1, 3]
    assert [(m.node_id, m.state) for m in decisions.node_marks] == [("n2", NodeState.IDLE)]
    assert decisions.node_decisions == []


def test_claims_of_a_dispatcher_that_stopped_heartbeating_are_released() -> None:
    j, a = running(1, "n1")
    j.claimed_by = "other"
    busy = idle_node("n1")
    busy.state = NodeState.BUSY
    snap = Snapshot(
        [j], [a], [busy], TYPES, dispatcher_id="me", dispatchers=[Dispatcher("me", 1000.0), Dispatcher("other", 900.0)]
    )
    (outcome,) = plan_pass(snap, 1000.0, settings()).job_outcomes
    assert outcome.temp_failure and "dispatcher other stopped heartbeating" in outcome.reason
    snap.dispatchers[1] = Dispatcher("other", 990.0)
    assert plan_pass(snap, 1000.0, settings()).job_outcomes == []


def test_an_attempt_never_started_is_lost() -> None:
    j = job(1, state=JobState.CLAIMED)
    a = Attempt(1, 1, ["n1"], j.resources, AttemptState.ASSIGNED, "local", assigned_at=0.0)
    busy = idle_node("n1")
    busy.state = NodeState.BUSY
    (outcome,) = plan_pass(Snapshot([j], [a], [busy], TYPES), 1000.0, settings()).job_outcomes
    assert outcome.temp_failure and "not started" in outcome.reason


def test_idle_nodes_drain_after_the_grace_and_min_instances_is_kept() -> None:
    nodes = [idle_node("n1", now=1000.0), idle_node("n2", now=1000.0)]
    for n in nodes:
        n.state_changed_at = 100.0
    policy = settings()
    decisions = plan_pass(Snapshot([], [], nodes, TYPES), 1000.0, policy)
    assert sorted(d.node_id for d in decisions.node_decisions if d.action is NodeAction.START_DRAIN) == ["n1", "n2"]
    policy.lifecycle.min_instances = 1
    decisions = plan_pass(Snapshot([], [], nodes, TYPES), 1000.0, policy)
    assert len(decisions.node_decisions) == 1


def test_idle_grace_matters_only_while_a_drain_is_possible() -> None:
    """A shell may skip waking up for an idle grace that can change no decision (a fixed fleet)."""
    nodes = [idle_node("n1", now=1000.0), idle_node("n2", now=1000.0)]
    for n in nodes:
        n.state_changed_at = 100.0
    policy = settings()
    policy.lifecycle.min_instances = 2
    assert not idle_nodes_can_drain(policy, 2)
    assert plan_pass(Snapshot([], [], nodes, TYPES), 1000.0, policy).node_decisions == []
    assert idle_nodes_can_drain(policy, 3)
    nodes.append(idle_node("n3", now=1000.0))
    nodes[-1].state_changed_at = 100.0
    assert len(plan_pass(Snapshot([], [], nodes, TYPES), 1000.0, policy).node_decisions) == 1


def test_a_node_that_gets_work_is_marked_busy_and_not_drained() -> None:
    n = idle_node("n1")
    n.state_changed_at = 0.0
    decisions = plan_pass(Snapshot([job(1)], [], [n], TYPES), 1000.0, settings())
    assert decisions.placements and decisions.node_decisions == []
    assert [(m.node_id, m.state) for m in decisions.node_marks] == [("n1", NodeState.BUSY)]


def test_an_idle_node_in_maintenance_is_not_drained() -> None:
    held, free = idle_node("held"), idle_node("free")
    held.attributes = {"held": "true"}
    for n in (held, free):
        n.state_changed_at = 100.0
    decisions = plan_pass(Snapshot([], [], [held, free], TYPES), 1000.0, settings())
    assert [(d.node_id, d.action) for d in decisions.node_decisions] == [("free", NodeAction.START_DRAIN)]


def test_no_instance_is_booted_for_a_job_held_near_running_work_by_strict_locality() -> None:
    """A new instance never hosts a job, nor shares a rack with one: for a strict `near` whose
    targets run, booting it only paid for a node the job could not use, drained after its idle
    grace and booted again, pass after pass. The job waits with the placer's reason instead."""
    web = job(1, 2, 1, tags=("web",), state=JobState.RUNNING)
    full = idle_node("n1")
    full.state = NodeState.BUSY
    on_full = Attempt(1, 1, ["n1"], Resources(2, GiB), AttemptState.RUNNING, assigned_at=900, started_at=900)
    near = job(2, locality=LocalityHints(near=("tag:web",), strict=True))
    near_by_id = job(3, locality=LocalityHints(near=("1",), strict=True, level="rack"))
    decisions = plan_pass(Snapshot([web, near, near_by_id], [on_full], [full], TYPES), 1000.0, settings())
    assert decisions.boots == []
    reasons = {a.job_id: a.wait_reason for a in decisions.annotations}
    # The placer's reason: the target's node is full (the filter that removed it comes first).
    full_reason = "INSUFFICIENT_CPU: needs 1 vcpu, the largest free is 0 vcpu on n1"
    assert reasons == {2: full_reason, 3: full_reason}
    # Strict `far`, or `near` a target that runs nowhere, a new instance does satisfy.
    far = job(4, locality=LocalityHints(far=("tag:web",), strict=True))
    nowhere = job(5, locality=LocalityHints(near=("tag:db",), strict=True))
    for waiting in (far, nowhere):
        decisions = plan_pass(Snapshot([web, waiting], [on_full], [full], TYPES), 1000.0, settings())
        assert [b.instance_type for b in decisions.boots] == ["small"]


def test_a_job_whose_admin_reservation_is_in_force_nowhere_waits_and_says_so() -> None:
    """Slurm keeps a job whose reservation was deleted pending (ReservationDeleted): it had run on
    any unreserved node, or been booted for, as if it had named none. The same job runs once the
    reservation holds a node again; a reservation a type holds is in force with no node up."""
    ended = idle_node("n1")
    ended.attributes = {"reservation": "team-a", "reservation_until": "999"}  # ended at 999
    free = idle_node("n2")
    waiting = job(1, reservation="team-a")
    snap = Snapshot(jobs=[waiting, job(2)], attempts=[], nodes=[ended, free], instance_types=TYPES)
    decisions = plan_pass(snap, 1000.0, settings())
    assert [p.job_id for p in decisions.placements] == [2] and decisions.boots == []
    [note] = decisions.annotations
    assert note.job_id == 1 and note.wait_reason.startswith("ReservationDeleted: reservation 'team-a'")
    assert not note.unplaceable

    ended.attributes = {"reservation": "team-a", "reservation_until": "2000"}  # put back
    again = plan_pass(
        Snapshot(jobs=[job(1, reservation="team-a")], attempts=[], nodes=[ended], instance_types=TYPES),
        1000.0,
        settings(),
    )
    assert [(p.job_id, p.node_ids) for p in again.placements] == [(1, ("n1",))]

    by_type = dataclasses.replace(SMALL, attributes=(("reservation", "team-a"),))
    booted = plan_pass(
        Snapshot(jobs=[job(1, reservation="team-a")], attempts=[], nodes=[], instance_types=[by_type]),
        1000.0,
        settings(),
    )
    assert [b.instance_type for b in booted.boots] == ["small"]


def drains(nodes: list[Node], now: float, types: list[InstanceType] = TYPES) -> list[str]:
    """The nodes a pass at `now` drains, with every agent heard at `now`."""
    for n in nodes:
        n.last_ping_at = now
    decisions = plan_pass(Snapshot([], [], nodes, types), now, settings())
    return [d.node_id for d in decisions.node_decisions if d.action is NodeAction.START_DRAIN]


def test_an_idle_node_an_operator_reserved_is_kept_until_its_reservation_ends() -> None:
    """Slurm keeps a reservation's nodes for it: an idle node reserved for a team until Friday had
    been drained after its idle grace, the reservation dying with it and its jobs left waiting
    (ReservationDeleted). It is kept as a held node is, and after its end the normal idle grace
    applies, counted from when it went idle: it is drained at once."""
    reserved, free = idle_node("reserved"), idle_node("free")
    reserved.attributes = {"reservation": "team-a", "reservation_until": "5000"}
    for n in (reserved, free):
        n.state_changed_at = 100.0
    assert drains([reserved, free], 1000.0) == ["free"]
    assert drains([reserved], 4999.0) == []
    assert drains([reserved], 5000.0) == ["reserved"]
    # Open-ended, it is kept until the operator unsets it.
    reserved.attributes = {"reservation": "team-a"}
    assert drains([reserved], 10**9) == []
    del reserved.attributes["reservation"]
    assert drains([reserved], 10**9) == ["reserved"]


def test_a_reservation_an_instance_inherits_from_its_type_does_not_keep_it() -> None:
    """A type's reservation is on every instance booted of it: kept, none would ever idle out.
    The node's reservation is its type's when its name and end are; an end of the node's own (an
    operator's reservation_until) does keep it, and so does another name."""
    reserved_type = dataclasses.replace(SMALL, name="reserved-small", attributes=(("reservation", "team-a"),))
    types = [reserved_type, LARGE]
    inherited = idle_node("inherited", reserved_type)
    inherited.attributes = dict(reserved_type.attributes)
    inherited.state_changed_at = 100.0
    assert drains([inherited], 1000.0, types) == ["inherited"]
    inherited.attributes = {"reservation": "team-a", "reservation_until": "5000"}
    assert drains([inherited], 1000.0, types) == []
    inherited.attributes = {"reservation": "team-b"}
    assert drains([inherited], 1000.0, types) == []
    # A type that is not configured any more cannot tell: the instance is not kept.
    assert drains([inherited], 1000.0, [LARGE]) == ["inherited"]


def test_a_reserved_node_is_still_drained_by_an_operator_and_still_takes_its_reservations_jobs() -> None:
    """The reservation keeps the node from the idle drain only: an operator's drain outranks it,
    silence still reads down, and the reservation's jobs go on it (unlike a held node)."""
    reserved = idle_node("reserved")
    reserved.attributes = {"reservation": "team-a", "drain": "true"}
    reserved.state_changed_at = 100.0
    decisions = plan_pass(Snapshot([], [], [reserved], TYPES), 1000.0, settings())
    assert [(m.node_id, m.state) for m in decisions.node_marks] == [("reserved", NodeState.DOWN)]
    reserved.attributes = {"reservation": "team-a"}
    reserved.last_ping_at = 0.0
    decisions = plan_pass(Snapshot([], [], [reserved], TYPES), 1000.0, settings())
    assert [(m.node_id, m.state) for m in decisions.node_marks] == [("reserved", NodeState.DOWN)]
    reserved.last_ping_at = 1000.0
    decisions = plan_pass(Snapshot([job(1, reservation="team-a")], [], [reserved], TYPES), 1000.0, settings())
    assert [(p.job_id, p.node_ids) for p in decisions.placements] == [(1, ("reserved",))]
