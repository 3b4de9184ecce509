"""An instance type's own max_instances (`[[instance_types]] max_instances`: an account's GPU
quota, a team's budget for one type): the pure pass boots no instance of a type past its cap,
counting the type's live instances as policy.boot.max_instances counts the fleet's; a job that fits
only capped-out types waits, saying which and their caps, and one that another type holds boots the
next cheapest instead."""

from __future__ import annotations

import dataclasses

from corral.core.model import Attempt, AttemptState, GiB, InstanceType, Job, JobState, Node, NodeState, Resources
from corral.core.reconcile import plan_pass
from corral.core.settings import PolicySettings
from corral.core.snapshot import Decisions, Snapshot

NOW = 1000.0
GPU = InstanceType("g5.xlarge", 4, 16 * GiB, 1.00, gpus=1, max_instances=2)
BIG_GPU = InstanceType("g5.2xlarge", 8, 32 * GiB, 1.20, gpus=1)
CPU = InstanceType("c5.large", 2, 4 * GiB, 0.10)


def gpu_jobs(count: int, nodes: int = 1, first: int = 1) -> list[Job]:
    return [
        Job(i, ["x"], Resources(2, GiB, gpus=1), node_count=nodes, submitted_at=i) for i in range(first, first + count)
    ]


def reasons(decisions: Decisions) -> dict[int, str]:
    return {a.job_id: a.wait_reason for a in decisions.annotations}


def node(node_id: str, itype: InstanceType, state: NodeState) -> Node:
    paired = None if state is NodeState.BOOTING else NOW - 20
    return Node(node_id, itype.name, itype.capacity, itype.price_per_hour, state, NOW - 30, paired, paired, NOW - 30)


def test_a_job_only_capped_out_types_hold_waits_naming_the_type_and_its_cap() -> None:
    decisions = plan_pass(Snapshot(gpu_jobs(3), [], [], [CPU, GPU]), NOW, PolicySettings())
    # Three GPU jobs, a cap of two: two boot (max_instances is 8), the third waits, saying why.
    assert [b.instance_type for b in decisions.boots] == ["g5.xlarge", "g5.xlarge"]
    assert reasons(decisions)[3] == "waiting for resources: g5.xlarge is at its max_instances (2)"
    assert not any(a.unplaceable for a in decisions.annotations)


def test_live_instances_of_the_type_count_and_gone_ones_do_not() -> None:
    booting = node("n1", GPU, NodeState.BOOTING)
    # Draining, with a job still running on it: it takes no new work but bills, and counts.
    draining = dataclasses.replace(node("n2", GPU, NodeState.BUSY), attributes={"drain": "true"})
    running = Job(9, ["x"], Resources(2, GiB, gpus=1), state=JobState.RUNNING, claimed_by="local")
    attempt = Attempt(9, 9, ["n2"], running.resources, AttemptState.RUNNING, assigned_at=NOW - 9, started_at=NOW - 9)
    gone = node("n3", GPU, NodeState.GONE)
    other = node("n4", CPU, NodeState.IDLE)
    # The booting one has room for job 1; job 2 finds the type at its cap.
    snapshot = Snapshot([running, *gpu_jobs(2)], [attempt], [booting, draining, gone, other], [CPU, GPU])
    decisions = plan_pass(snapshot, NOW, PolicySettings())
    assert decisions.boots == []
    assert reasons(decisions)[2] == "waiting for resources: g5.xlarge is at its max_instances (2)"
    # Once the draining one is gone, one boots.
    snapshot = Snapshot(gpu_jobs(2), [], [booting, dataclasses.replace(draining, state=NodeState.GONE)], [CPU, GPU])
    assert [b.instance_type for b in plan_pass(snapshot, NOW, PolicySettings()).boots] == ["g5.xlarge"]


def test_past_the_cap_a_job_boots_the_next_cheapest_type_that_holds_it() -> None:
    decisions = plan_pass(Snapshot(gpu_jobs(4), [], [], [GPU, BIG_GPU, CPU]), NOW, PolicySettings())
    assert [b.instance_type for b in decisions.boots] == ["g5.xlarge", "g5.xlarge", "g5.2xlarge", "g5.2xlarge"]
    assert reasons(decisions)[3] == "waiting for an instance to boot (g5.2xlarge)"
    # Without the cap, all four on the cheapest.
    uncapped = dataclasses.replace(GPU, max_instances=None)
    again = plan_pass(Snapshot(gpu_jobs(4), [], [], [uncapped, BIG_GPU, CPU]), NOW, PolicySettings())
    assert [b.instance_type for b in again.boots] == ["g5.xlarge"] * 4


def test_a_gang_shares_out_over_the_types_and_one_larger_than_their_caps_never_runs() -> None:
    capped_big = dataclasses.replace(BIG_GPU, max_instances=1)
    decisions = plan_pass(Snapshot(gpu_jobs(1, nodes=3), [], [], [GPU, capped_big]), NOW, PolicySettings())
    assert sorted(b.instance_type for b in decisions.boots) == ["g5.2xlarge", "g5.xlarge", "g5.xlarge"]

    never = plan_pass(Snapshot(gpu_jobs(1, nodes=4), [], [], [GPU, capped_big]), NOW, PolicySettings())
    assert never.boots == []
    (note,) = never.annotations
    assert note.unplaceable
    assert note.wait_reason == "needs 4 nodes, the instance types that fit have max_instances g5.xlarge 2, g5.2xlarge 1"

    # Room for two of the three now (one g5.xlarge up, running work): it waits, saying how much room
    # is left.
    up = node("n1", GPU, NodeState.BUSY)
    running = Job(9, ["x"], Resources(4, GiB, gpus=1), state=JobState.RUNNING, claimed_by="local")
    attempt = Attempt(9, 9, ["n1"], running.resources, AttemptState.RUNNING, assigned_at=NOW - 9, started_at=NOW - 9)
    snapshot = Snapshot([running, *gpu_jobs(1, nodes=3)], [attempt], [up], [GPU, capped_big])
    waiting = plan_pass(snapshot, NOW, PolicySettings())
    assert waiting.boots == []
    assert reasons(waiting)[1] == (
        "waiting for resources: g5.xlarge has room for 1 more under its max_instances (2);"
        " g5.2xlarge has room for 1 more under its max_instances (1)"
    )


def test_the_floor_boots_within_the_caps() -> None:
    policy = PolicySettings()
    policy.lifecycle.min_instances = 3
    cheap = dataclasses.replace(CPU, max_instances=1)
    pricier = InstanceType("m5.large", 2, 8 * GiB, 0.12)
    decisions = plan_pass(Snapshot([], [], [], [cheap, pricier]), NOW, policy)
    # The cheapest type is at its cap after one: the floor is the cheapest within the caps.
    assert [b.instance_type for b in decisions.boots] == ["c5.large"]
    decisions = plan_pass(Snapshot([], [], [node("n1", cheap, NodeState.IDLE)], [cheap, pricier]), NOW, policy)
    assert [b.instance_type for b in decisions.boots] == ["m5.large", "m5.large"]


def test_at_its_cap_a_waiting_job_holds_a_reservation_on_the_running_node_of_the_type() -> None:
    """As at max_instances: the job is bounded (EASY's reservation), so smaller jobs cannot take each
    bit of room on the capped type's nodes as it frees and starve it."""
    capped = dataclasses.replace(GPU, max_instances=1)
    busy = node("n1", capped, NodeState.BUSY)
    running = Job(1, ["x"], Resources(4, GiB, gpus=1), state=JobState.RUNNING, claimed_by="local", time_limit=600)
    attempt = Attempt(7, 1, ["n1"], running.resources, AttemptState.RUNNING, assigned_at=NOW - 60, started_at=NOW - 60)
    waiting = Job(2, ["x"], Resources(2, GiB, gpus=1), submitted_at=2)
    snapshot = Snapshot([running, waiting], [attempt], [busy], [CPU, capped])

    at_cap = plan_pass(snapshot, NOW, PolicySettings())
    assert at_cap.boots == []
    assert at_cap.explanations[2]["reservation"]["nodes"] == ["n1"]
    assert reasons(at_cap)[2] == "waiting for resources: g5.xlarge is at its max_instances (1)"
    free = plan_pass(dataclasses.replace(snapshot, instance_types=[CPU, GPU]), NOW, PolicySettings())
    assert [b.instance_type for b in free.boots] == ["g5.xlarge"] and "reservation" not in free.explanations[2]


def test_past_the_cap_the_spend_limits_are_those_of_the_next_cheapest_type() -> None:
    """The cheapest GPU type is at its cap; the next would pass max_cost_per_hour: the job waits for
    the spend limit and holds a reservation on the running node, as the planner says."""
    capped = dataclasses.replace(GPU, max_instances=1)
    busy = node("n1", capped, NodeState.BUSY)
    running = Job(1, ["x"], Resources(4, GiB, gpus=1), state=JobState.RUNNING, claimed_by="local", time_limit=600)
    attempt = Attempt(7, 1, ["n1"], running.resources, AttemptState.RUNNING, assigned_at=NOW - 60, started_at=NOW - 60)
    waiting = Job(2, ["x"], Resources(2, GiB, gpus=1), submitted_at=2)
    policy = PolicySettings()
    policy.boot.max_cost_per_hour = 2.0  # the g5.xlarge up ($1.00/h) and a g5.2xlarge ($1.20/h) pass it
    decisions = plan_pass(Snapshot([running, waiting], [attempt], [busy], [capped, BIG_GPU]), NOW, policy)
    assert decisions.boots == []
    assert reasons(decisions)[2] == "waiting for resources: max_cost_per_hour ($2.00/h) reached"
    assert decisions.explanations[2]["reservation"]["nodes"] == ["n1"]


def test_a_type_at_its_cap_is_no_new_instance_to_the_cost_gate() -> None:
    """The cost gate keeps a job off a running node only where a new instance costs less. With the
    cheapest type that holds the job at its cap, the new instance the planner would boot is the next
    one: a $5/h type, dearer than keeping a $3.06/h node whose work ends in ten minutes up for the
    job. Before, the gate priced the capped $0.085/h type, kept the job off the node, and the planner
    booted the $5/h instance for it."""
    small = InstanceType("c5.large", 2, 4 * GiB, 0.085, max_instances=1)
    pricey = InstanceType("x.large", 2, 4 * GiB, 5.0)
    big = InstanceType("c5.18xlarge", 72, 144 * GiB, 3.06)
    soon, full = node("n-soon", big, NodeState.BUSY), node("n-full", small, NodeState.BUSY)
    ending = Job(101, ["x"], Resources(40, 40 * GiB), state=JobState.RUNNING, claimed_by="local", time_limit=600)
    filling = Job(102, ["x"], Resources(2, 4 * GiB), state=JobState.RUNNING, claimed_by="local", time_limit=36000)
    began = NOW - 100
    attempts = [
        Attempt(1, 101, ["n-soon"], ending.resources, AttemptState.RUNNING, assigned_at=began, started_at=began),
        Attempt(2, 102, ["n-full"], filling.resources, AttemptState.RUNNING, assigned_at=began, started_at=began),
    ]
    queued = Job(1, ["x"], Resources(1, GiB), submitted_at=1, time_limit=36000)
    snapshot = Snapshot([ending, filling, queued], attempts, [soon, full], [small, pricey, big])
    decisions = plan_pass(snapshot, NOW, PolicySettings())
    assert [(p.job_id, p.node_ids) for p in decisions.placements] == [(1, ("n-soon",))]
    assert decisions.boots == []
