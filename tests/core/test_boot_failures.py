"""Instances that never pair: the lifecycle matrix shuts one down once its boot grace has run out
(seed 000: unpaired, boot exceeded), and the pass backs its type off as after an
insufficient-capacity error (seed 004), so that the planner boots the next type that fits instead
of the same broken one, for ever. Each failed try of a type in a row doubles its back-off (from
policy.boot.capacity_backoff up to boot_failure_backoff_max); a pairing of the type ends the row."""

from __future__ import annotations

from corral.core import capacity
from corral.core.model import GiB, InstanceType, Job, Node, NodeState, Resources
from corral.core.reconcile import plan_pass
from corral.core.settings import PolicySettings
from corral.core.snapshot import BootFailures, NodeAction, Snapshot, TypeBackoff

SMALL = InstanceType("small", 2, 4 * GiB, 0.10)
LARGE = InstanceType("large", 8, 32 * GiB, 0.40)
TYPES = [SMALL, LARGE]
GRACE = PolicySettings().lifecycle.boot_grace  # 600 s
BACKOFF = PolicySettings().boot.capacity_backoff  # 300 s
NOW = 10_000.0


def job(job_id: int) -> Job:
    return Job(id=job_id, command=["true"], resources=Resources(1, 1 * GiB), submitted_at=0.0)


def booting(node_id: str, itype: InstanceType = SMALL, created_at: float = NOW - GRACE - 1) -> Node:
    return Node(node_id, itype.name, itype.capacity, itype.price_per_hour, NodeState.BOOTING, created_at, None)


def idle(node_id: str, itype: InstanceType, paired_at: float) -> Node:
    return Node(
        node_id,
        itype.name,
        itype.capacity,
        itype.price_per_hour,
        NodeState.IDLE,
        created_at=paired_at - 60,
        paired_at=paired_at,
        last_ping_at=NOW,
        state_changed_at=NOW,
    )


def test_a_type_whose_instance_did_not_pair_is_backed_off_and_the_next_type_that_fits_boots() -> None:
    snap = Snapshot(jobs=[job(1)], attempts=[], nodes=[booting("n1")], instance_types=TYPES)
    decisions = plan_pass(snap, NOW, PolicySettings())
    # The matrix's shutdown, saying why as before.
    [shutdown] = decisions.node_decisions
    assert (shutdown.node_id, shutdown.action) == ("n1", NodeAction.START_SHUTDOWN)
    assert shutdown.reason == "its agent did not pair within boot_grace 10m (unpaired, open, boot exceeded, not idle)"
    # Its type backed off for capacity_backoff, from this pass on: the job gets the next type.
    assert decisions.type_backoffs == [
        TypeBackoff("small", NOW + BACKOFF, 1, "n1", "did not pair within boot_grace 10m; small backed off for 5m")
    ]
    assert [b.instance_type for b in decisions.boots] == ["large"]
    assert capacity.boot_failed_message(decisions.type_backoffs[0], "i-0abc") == (
        "instance i-0abc (node n1) did not pair within boot_grace 10m; small backed off for 5m"
    )


def test_with_every_type_failing_boots_pause_until_a_back_off_ends() -> None:
    # large failed before and is backed off; now small's instance did not pair either.
    rows = {"large": BootFailures(1, NOW - 100)}
    snap = Snapshot(
        jobs=[job(1)],
        attempts=[],
        nodes=[booting("n2")],
        instance_types=TYPES,
        unavailable_types={"large": NOW - 100 + BACKOFF},
        boot_failures=rows,
    )
    decisions = plan_pass(snap, NOW, PolicySettings())
    assert [b.instance_type for b in decisions.type_backoffs] == ["small"]
    assert decisions.boots == []
    [note] = decisions.annotations
    assert note.wait_reason == "instance types that fit are backed off for now: large, small (corral status says why)"
    # The next pass, both still backed off: still nothing booted, nothing else decided.
    after = Snapshot(
        jobs=[job(1)],
        attempts=[],
        nodes=[],
        instance_types=TYPES,
        unavailable_types={"large": NOW - 100 + BACKOFF, "small": NOW + BACKOFF},
        boot_failures={**rows, "small": BootFailures(1, NOW)},
    )
    assert plan_pass(after, NOW + 60, PolicySettings()).boots == []
    # When large's back-off ends, large is tried again.
    assert [b.instance_type for b in plan_pass(after, NOW - 100 + BACKOFF, PolicySettings()).boots] == ["large"]


def test_each_failed_try_in_a_row_doubles_the_back_off_up_to_its_cap() -> None:
    policy = PolicySettings()
    policy.boot.boot_failure_backoff_max = 3600.0

    def backoff(rows: dict[str, BootFailures]) -> TypeBackoff:
        snap = Snapshot(jobs=[job(1)], attempts=[], nodes=[booting("n3")], instance_types=TYPES, boot_failures=rows)
        [decided] = plan_pass(snap, NOW, policy).type_backoffs
        return decided

    # The node was booted after the last failure of its type (at NOW - 2000): a new try.
    third = backoff({"small": BootFailures(2, NOW - GRACE - 2000)})
    assert (third.failures, third.until) == (3, NOW + 4 * BACKOFF)
    assert (
        third.reason
        == "did not pair within boot_grace 10m; small backed off for 20m (3 failed boots of small in a row)"
    )
    capped = backoff({"small": BootFailures(9, NOW - GRACE - 2000)})
    assert (capped.failures, capped.until) == (10, NOW + 3600)
    # Another type's row is not this one's.
    assert backoff({"large": BootFailures(5, NOW - GRACE - 2000)}).failures == 1
    # A cap below capacity_backoff leaves the back-off at capacity_backoff.
    policy.boot.boot_failure_backoff_max = 60.0
    assert backoff({"small": BootFailures(4, NOW - GRACE - 2000)}).until == NOW + BACKOFF


def test_instances_booted_in_one_try_count_once() -> None:
    # Three booted together for a queue fail together: one failed try, one back-off.
    nodes = [booting("a"), booting("b"), booting("c", created_at=NOW - GRACE - 5)]
    snap = Snapshot(jobs=[job(1)], attempts=[], nodes=nodes, instance_types=TYPES)
    decisions = plan_pass(snap, NOW, PolicySettings())
    assert [(b.node_id, b.failures, b.until) for b in decisions.type_backoffs] == [
        ("a", 1, NOW + BACKOFF),
        ("b", 1, NOW + BACKOFF),
        ("c", 1, NOW + BACKOFF),
    ]
    assert len(decisions.node_decisions) == 3
    # One booted before the type's last failure fails later: the same try, no longer back-off
    # than the one in force (which it never shortens).
    later = Snapshot(
        jobs=[job(1)],
        attempts=[],
        nodes=[booting("d", created_at=NOW - GRACE - 30)],
        instance_types=TYPES,
        unavailable_types={"small": NOW + 200},
        boot_failures={"small": BootFailures(2, NOW - 100)},
    )
    [same_try] = plan_pass(later, NOW, PolicySettings()).type_backoffs
    assert (same_try.failures, same_try.until) == (2, NOW + 2 * BACKOFF)


def test_a_pairing_of_the_type_ends_its_row() -> None:
    rows = {"small": BootFailures(3, NOW - 500)}
    # An instance of small paired since its last failure: the row ends (the back-off in force
    # runs its course), and the next failure is a first one again.
    paired = idle("p1", SMALL, paired_at=NOW - 30)
    snap = Snapshot(jobs=[], attempts=[], nodes=[paired, booting("n4")], instance_types=TYPES, boot_failures=rows)
    decisions = plan_pass(snap, NOW, PolicySettings())
    assert decisions.types_paired == ["small"]
    assert [(b.failures, b.until) for b in decisions.type_backoffs] == [(1, NOW + BACKOFF)]
    # One that paired before the failure says nothing of the type since.
    old = idle("p0", SMALL, paired_at=NOW - 600)
    snap = Snapshot(jobs=[], attempts=[], nodes=[old], instance_types=TYPES, boot_failures=rows)
    assert plan_pass(snap, NOW, PolicySettings()).types_paired == []
    # Nor does another type's pairing.
    snap = Snapshot(jobs=[], attempts=[], nodes=[idle("p2", LARGE, NOW - 30)], instance_types=TYPES, boot_failures=rows)
    assert plan_pass(snap, NOW, PolicySettings()).types_paired == []


def test_an_instance_within_its_boot_grace_backs_nothing_off() -> None:
    snap = Snapshot(jobs=[job(1)], attempts=[], nodes=[booting("n5", created_at=NOW - GRACE + 1)], instance_types=TYPES)
    decisions = plan_pass(snap, NOW, PolicySettings())
    assert decisions.type_backoffs == [] and decisions.node_decisions == [] and decisions.boots == []
