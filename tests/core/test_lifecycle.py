"""The node lifecycle matrix (seed 000) and the state tuple a node maps to."""

from __future__ import annotations

from typing import Unpack

import pytest
from tests.support import NodeFields

from corral.core import lifecycle
from corral.core.lifecycle import BillingWindow, BootGrace, IdleGrace, WorkerState
from corral.core.model import GiB, Node, NodeState, Resources
from corral.core.settings import LifecycleSettings
from corral.core.snapshot import NodeAction

# The table exactly as seed 000 prints it.
SEED_TABLE: dict[tuple[str, str, str, str], str | None] = {
    ("busy", "closed", "boot exceeded", "idle exceeded"): None,
    ("busy", "closed", "boot exceeded", "idle wait"): None,
    ("busy", "closed", "boot exceeded", "not idle"): None,
    ("busy", "closed", "boot wait", "idle exceeded"): None,
    ("busy", "closed", "boot wait", "idle wait"): None,
    ("busy", "closed", "boot wait", "not idle"): None,
    ("busy", "open", "boot exceeded", "idle exceeded"): None,
    ("busy", "open", "boot exceeded", "idle wait"): None,
    ("busy", "open", "boot exceeded", "not idle"): None,
    ("busy", "open", "boot wait", "idle exceeded"): None,
    ("busy", "open", "boot wait", "idle wait"): None,
    ("busy", "open", "boot wait", "not idle"): None,
    ("down", "closed", "boot exceeded", "idle exceeded"): "START_SHUTDOWN",
    ("down", "closed", "boot exceeded", "idle wait"): "START_SHUTDOWN",
    ("down", "closed", "boot exceeded", "not idle"): "START_SHUTDOWN",
    ("down", "closed", "boot wait", "idle exceeded"): "START_SHUTDOWN",
    ("down", "closed", "boot wait", "idle wait"): "START_SHUTDOWN",
    ("down", "closed", "boot wait", "not idle"): "START_SHUTDOWN",
    ("down", "open", "boot exceeded", "idle exceeded"): "START_SHUTDOWN",
    ("down", "open", "boot exceeded", "idle wait"): "START_SHUTDOWN",
    ("down", "open", "boot exceeded", "not idle"): "START_SHUTDOWN",
    ("down", "open", "boot wait", "idle exceeded"): "START_SHUTDOWN",
    ("down", "open", "boot wait", "idle wait"): "START_SHUTDOWN",
    ("down", "open", "boot wait", "not idle"): "START_SHUTDOWN",
    ("idle", "closed", "boot exceeded", "idle exceeded"): None,
    ("idle", "closed", "boot exceeded", "idle wait"): None,
    ("idle", "closed", "boot exceeded", "not idle"): None,
    ("idle", "closed", "boot wait", "idle exceeded"): None,
    ("idle", "closed", "boot wait", "idle wait"): None,
    ("idle", "closed", "boot wait", "not idle"): None,
    ("idle", "open", "boot exceeded", "idle exceeded"): "START_DRAIN",
    ("idle", "open", "boot exceeded", "idle wait"): None,
    ("idle", "open", "boot exceeded", "not idle"): None,
    ("idle", "open", "boot wait", "idle exceeded"): "START_DRAIN",
    ("idle", "open", "boot wait", "idle wait"): None,
    ("idle", "open", "boot wait", "not idle"): None,
    ("unpaired", "closed", "boot exceeded", "idle exceeded"): "START_SHUTDOWN",
    ("unpaired", "closed", "boot exceeded", "idle wait"): "START_SHUTDOWN",
    ("unpaired", "closed", "boot exceeded", "not idle"): "START_SHUTDOWN",
    ("unpaired", "closed", "boot wait", "idle exceeded"): None,
    ("unpaired", "closed", "boot wait", "idle wait"): None,
    ("unpaired", "closed", "boot wait", "not idle"): None,
    ("unpaired", "open", "boot exceeded", "idle exceeded"): "START_SHUTDOWN",
    ("unpaired", "open", "boot exceeded", "idle wait"): "START_SHUTDOWN",
    ("unpaired", "open", "boot exceeded", "not idle"): "START_SHUTDOWN",
    ("unpaired", "open", "boot wait", "idle exceeded"): None,
    ("unpaired", "open", "boot wait", "idle wait"): None,
    ("unpaired", "open", "boot wait", "not idle"): None,
}


def test_default_matrix_is_the_seed_table() -> None:
    assert len(lifecycle.DEFAULT_MATRIX) == 48
    for (worker, window, boot, idle), action in SEED_TABLE.items():
        state = (WorkerState(worker), BillingWindow(window), BootGrace(boot), IdleGrace(idle))
        assert lifecycle.decide(state) == (NodeAction(action) if action else None), state


SETTINGS = LifecycleSettings(boot_grace=600, idle_grace=60, ping_stale=60, shutdown_window=300)


def node(state: NodeState, /, **fields: Unpack[NodeFields]) -> Node:
    return Node(
        id="n-1",
        instance_type="t",
        capacity=Resources(2, 4 * GiB),
        price_per_hour=0.1,
        **NodeFields(state=state, **fields),
    )


def test_booting_node_is_unpaired_and_shut_down_only_after_boot_grace() -> None:
    n = node(NodeState.BOOTING)
    assert lifecycle.decide(lifecycle.state_tuple(n, 599, SETTINGS, 0, False)) is None
    state = lifecycle.state_tuple(n, 601, SETTINGS, 0, False)
    assert state[0] is WorkerState.UNPAIRED and state[2] is BootGrace.BOOT_EXCEEDED
    assert lifecycle.decide(state) is NodeAction.START_SHUTDOWN


def test_idle_node_drains_after_idle_grace_with_per_second_billing() -> None:
    n = node(NodeState.IDLE, paired_at=10, last_ping_at=1000, state_changed_at=950)
    assert lifecycle.decide(lifecycle.state_tuple(n, 1000, SETTINGS, 0, False)) is None
    assert lifecycle.decide(lifecycle.state_tuple(n, 1010, SETTINGS, 0, False)) is NodeAction.START_DRAIN


def test_drained_empty_node_reads_down_and_is_shut_down_but_not_while_it_has_work() -> None:
    n = node(NodeState.DRAINING, paired_at=10, last_ping_at=1000)
    assert lifecycle.worker_state(n, 1000, SETTINGS, 0, has_work=True) is WorkerState.BUSY
    assert lifecycle.decide(lifecycle.state_tuple(n, 1000, SETTINGS, 0, False)) is NodeAction.START_SHUTDOWN


def test_stale_ping_reads_down_but_not_before_the_observer_has_had_time_to_hear_it() -> None:
    n = node(NodeState.BUSY, paired_at=10, last_ping_at=100)
    assert lifecycle.worker_state(n, 200, SETTINGS, 0, True) is WorkerState.DOWN
    # A server that restarted at t=190 has not yet had ping_stale seconds to hear from the agent.
    assert lifecycle.worker_state(n, 200, SETTINGS, 190, True) is WorkerState.BUSY


def test_the_outlook_of_a_node_not_heard_from_says_when_corral_gives_it_up_and_agrees_with_the_matrix() -> None:
    """`corral nodes` showed a booting node whose agent would never pair, and a busy node whose
    agent had gone quiet, as if all were well: nothing said corral had noticed, nor when it would
    shut the one down or take the other's jobs for lost."""
    booting = node(NodeState.BOOTING, created_at=1000)
    assert lifecycle.outlook(booting, 1150, SETTINGS, 0, 2) == (
        "agent not paired after 2m30s: given up in 7m30s (boot_grace 10m)"
    )
    assert lifecycle.decide(lifecycle.state_tuple(booting, 1599, SETTINGS, 0, False)) is None
    assert lifecycle.outlook(booting, 1601, SETTINGS, 0, 2) == (
        "agent not paired after 10m01s: past boot_grace 10m, shut down at the next pass"
    )
    # A restarted server counts the grace from its start, as the matrix does.
    assert "given up in 10m" in lifecycle.outlook(booting, 1601, SETTINGS, 1601, 2)

    busy = node(NodeState.BUSY, created_at=0, paired_at=10, last_ping_at=1000)
    assert lifecycle.outlook(busy, 1003, SETTINGS, 0, 2) == "", "a ping a little late is no news"
    assert lifecycle.outlook(busy, 1045, SETTINGS, 0, 2) == (
        "no ping for 45s: down in 15s (ping_stale 1m), its jobs then handled as on a lost node"
    )
    assert lifecycle.worker_state(busy, 1061, SETTINGS, 0, True) is WorkerState.DOWN
    assert (
        lifecycle.outlook(busy, 1061, SETTINGS, 0, 2) == "no ping for 1m01s: past ping_stale 1m, down at the next pass"
    )
    for gone in (NodeState.DOWN, NodeState.SHUTTING_DOWN, NodeState.GONE):
        assert lifecycle.outlook(node(gone, last_ping_at=0), 5000, SETTINGS, 0, 2) == ""


def test_a_shutdown_says_why_in_words_before_the_state_tuple_and_says_it_once() -> None:
    idle = node(NodeState.IDLE, paired_at=10, last_ping_at=1000, state_changed_at=900)
    state = lifecycle.state_tuple(idle, 1000, SETTINGS, 0, False)
    drain_reason = lifecycle.in_words(state, idle, SETTINGS)
    assert drain_reason == "idle for more than idle_grace 1m (idle, open, boot exceeded, idle exceeded)"
    # Once empty, the drained node is shut down: its drain's reason (and tuple) is not repeated.
    draining = node(NodeState.DRAINING, paired_at=10, last_ping_at=1000, reason=drain_reason)
    state = lifecycle.state_tuple(draining, 1001, SETTINGS, 0, False)
    assert lifecycle.in_words(state, draining, SETTINGS) == (
        "drained, no work left on it (down, open, boot exceeded, not idle)"
    )


@pytest.mark.parametrize(
    ("age", "window"),
    [
        (100, BillingWindow.CLOSED),
        (3299, BillingWindow.CLOSED),
        (3301, BillingWindow.OPEN),
        (3700, BillingWindow.CLOSED),
    ],
)
def test_hourly_billing_opens_the_window_only_near_the_end_of_a_paid_hour(age: float, window: BillingWindow) -> None:
    n = node(NodeState.IDLE, billing_granularity=3600.0)
    assert lifecycle.billing_window(n, age, SETTINGS) is window


@pytest.mark.parametrize(
    ("minimum", "age", "window"),
    [
        (60.0, 0, BillingWindow.OPEN),  # EC2's 60 s: within any shutdown_window of 5m, so no change
        (600.0, 100, BillingWindow.CLOSED),  # 500 s of the minimum left: paid for whether it runs or not
        (600.0, 299, BillingWindow.CLOSED),
        (600.0, 300, BillingWindow.OPEN),  # its last shutdown_window
        (600.0, 5000, BillingWindow.OPEN),
        (0.0, 0, BillingWindow.OPEN),
    ],
)
def test_a_billing_minimum_keeps_the_window_closed_while_shutting_down_would_save_nothing(
    minimum: float, age: float, window: BillingWindow
) -> None:
    n = node(NodeState.IDLE, billing_granularity=1.0, billing_minimum=minimum)
    assert lifecycle.billing_window(n, age, SETTINGS) is window
    opens = lifecycle.billing_window_opens(n, age, SETTINGS)
    assert (opens == age) is (window is BillingWindow.OPEN)
    assert lifecycle.billing_window(n, opens, SETTINGS) is BillingWindow.OPEN


def test_a_minimum_and_hourly_billing_open_the_window_when_both_let_it() -> None:
    """A 2-hour minimum billed by the hour: nothing is saved before the last 5 minutes of the
    second hour; after it, the last 5 minutes of each hour as usual."""
    n = node(NodeState.IDLE, billing_granularity=3600.0, billing_minimum=7200.0)
    assert lifecycle.billing_window(n, 3400, SETTINGS) is BillingWindow.CLOSED  # end of hour 1: still the minimum
    assert lifecycle.billing_window_opens(n, 100, SETTINGS) == 6900
    assert lifecycle.billing_window(n, 7000, SETTINGS) is BillingWindow.OPEN
    assert lifecycle.billing_window_opens(n, 7300, SETTINGS) == 10500


def test_idle_node_in_a_closed_billing_window_is_kept() -> None:
    n = node(NodeState.IDLE, paired_at=1, last_ping_at=1000, state_changed_at=0, billing_granularity=3600.0)
    assert lifecycle.decide(lifecycle.state_tuple(n, 1000, SETTINGS, 0, False)) is None
    n.last_ping_at = 3400
    assert lifecycle.decide(lifecycle.state_tuple(n, 3400, SETTINGS, 0, False)) is NodeAction.START_DRAIN


@pytest.mark.parametrize(
    "attributes",
    [{"held": "true"}, {"category": "hardware-maintenance"}, {"category": ["active", "software-maintenance"]}],
)
def test_a_node_in_maintenance_reads_busy_and_is_not_drained_however_long_it_idles(
    attributes: dict[str, str | list[str]],
) -> None:
    """Seed 000: Slurm's maint state maps to busy (no action); corral's maintenance is an operator
    hold or a seed-002 maintenance category."""
    n = node(NodeState.IDLE, paired_at=10, last_ping_at=5000, state_changed_at=0, attributes=attributes)
    state = lifecycle.state_tuple(n, 5000, SETTINGS, 0, False)
    assert state[0] is WorkerState.BUSY and lifecycle.decide(state) is None
    # A drained node put in maintenance is kept too; silence still reads down.
    assert lifecycle.worker_state(node(NodeState.DRAINING, attributes=attributes), 50, SETTINGS, 0, False) is (
        WorkerState.BUSY
    )
    assert lifecycle.worker_state(n, 5100, SETTINGS, 0, False) is WorkerState.DOWN


def test_a_released_hold_is_not_maintenance() -> None:
    n = node(NodeState.IDLE, paired_at=10, last_ping_at=5000, state_changed_at=0, attributes={"held": "false"})
    assert lifecycle.decide(lifecycle.state_tuple(n, 5000, SETTINGS, 0, False)) is NodeAction.START_DRAIN


FAILURES = ["hardware-failure", "network-failure", "storage-failure", "software-failure", "batch-failure"]


@pytest.mark.parametrize("category", [*FAILURES, "general-failure", ["hardware-maintenance", "hardware-failure"]])
def test_a_cloud_instance_in_a_failure_category_reads_down_once_empty_whatever_its_window_and_graces(
    category: str | list[str],
) -> None:
    """Seed 004's broken node: a failure category (set by an operator or a trigger) takes the node
    out of service; once nothing runs on it, seed 000 reads it down and shuts it down at once, in a
    closed billing window and within its boot and idle graces alike (a broken node does no useful
    work). A failure outranks a maintenance category given with it."""
    hourly = node(
        NodeState.IDLE,
        paired_at=10,
        last_ping_at=100,
        state_changed_at=90,
        billing_granularity=3600.0,
        attributes={"category": category},
    )
    state = lifecycle.state_tuple(hourly, 100, SETTINGS, 0, False)
    assert state == (WorkerState.DOWN, BillingWindow.CLOSED, BootGrace.BOOT_WAIT, IdleGrace.NOT_IDLE)
    assert lifecycle.decide(state) is NodeAction.START_SHUTDOWN
    # A drained one too, and one marked busy whose work has just ended.
    for recorded in (NodeState.DRAINING, NodeState.BUSY):
        hourly.state = recorded
        assert lifecycle.worker_state(hourly, 100, SETTINGS, 0, False) is WorkerState.DOWN


def test_a_failure_category_does_not_stop_the_work_running_on_the_node() -> None:
    """A label kills nothing: the node reads busy (no action) while work runs on it."""
    n = node(NodeState.BUSY, paired_at=10, last_ping_at=5000, attributes={"category": "hardware-failure"})
    state = lifecycle.state_tuple(n, 5000, SETTINGS, 0, True)
    assert state[0] is WorkerState.BUSY and lifecycle.decide(state) is None


@pytest.mark.parametrize("category", ["hardware-maintenance", "active", "failure", "failure-analysis", ""])
def test_other_categories_are_not_failures(category: str) -> None:
    n = node(NodeState.IDLE, paired_at=10, last_ping_at=5000, state_changed_at=4990, attributes={"category": category})
    assert lifecycle.worker_state(n, 5000, SETTINGS, 0, False) is not WorkerState.DOWN


def test_a_node_an_admin_reservation_keeps_reads_busy_while_idle_but_not_once_drained_or_silent() -> None:
    """Kept for its reservation as a held node is; a drain that began before it was reserved goes
    on (a draining node takes no work, its reservation's neither), and silence still reads down."""
    n = node(NodeState.IDLE, paired_at=10, last_ping_at=5000, state_changed_at=0)
    state = lifecycle.state_tuple(n, 5000, SETTINGS, 0, False, reserved=True)
    assert state[0] is WorkerState.BUSY and lifecycle.decide(state) is None
    assert lifecycle.decide(lifecycle.state_tuple(n, 5000, SETTINGS, 0, False)) is NodeAction.START_DRAIN
    assert lifecycle.worker_state(node(NodeState.DRAINING), 50, SETTINGS, 0, False, reserved=True) is WorkerState.DOWN
    assert lifecycle.worker_state(n, 5100, SETTINGS, 0, False, reserved=True) is WorkerState.DOWN
