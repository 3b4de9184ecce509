"""Seed 000: the node manager policy matrix.

A node's state tuple (worker state, billing window, boot grace, idle grace) selects an action from
a table: nothing, START_DRAIN or START_SHUTDOWN. The table is data (`DEFAULT_MATRIX`), so an
operator can read it, and a test checks it against the seed's 48 entries.

Worker states (seed 000's mapping, corral's words on the right):
  unpaired - the cloud has it, no agent has paired (NodeState.BOOTING)
  busy     - running work, draining with work still on it, or in maintenance (an operator
             `held` hold or a seed-002 `*-maintenance` category: the seed's Slurm "maint"); a
             node in a seed-002 failure category (`*-failure`) while work still runs on it; an
             idle node kept for an operator's admin reservation while it is in force
             (corral.core.reservations.keeps: Slurm keeps a reservation's nodes for it)
  idle     - paired, no work
  down     - stale ping, drained and empty, or failed (NodeState.DOWN); a node in a
             failure category, or drained by an operator (`drain`), once no work runs on it
             (seed 004's broken node; Slurm's POWER_DOWN_ASAP)
The cloud's own "broken" state is deliberately not consulted: a node that does no useful work is
shut down by this table whatever the cloud says about it. An operator's (or a trigger's) failure
category is the word of someone who looked: it reads as Slurm's "fail"/"drain" (seed 000: down),
but only once the node is empty, because a label does not kill running work (seed 002 §5.4.6 acts
on a node going down, not on its category).
"""

from __future__ import annotations

from enum import StrEnum
from itertools import product

from corral.core import categories, drain
from corral.core.model import Node, NodeState
from corral.core.retry import format_seconds
from corral.core.settings import LifecycleSettings
from corral.core.snapshot import NodeAction
from corral.placement import attributes as attr


class WorkerState(StrEnum):
    UNPAIRED = "unpaired"
    BUSY = "busy"
    IDLE = "idle"
    DOWN = "down"


class BillingWindow(StrEnum):
    OPEN = "open"
    CLOSED = "closed"


class BootGrace(StrEnum):
    BOOT_WAIT = "boot wait"
    BOOT_EXCEEDED = "boot exceeded"


class IdleGrace(StrEnum):
    NOT_IDLE = "not idle"
    IDLE_WAIT = "idle wait"
    IDLE_EXCEEDED = "idle exceeded"


StateTuple = tuple[WorkerState, BillingWindow, BootGrace, IdleGrace]


def _default_action(state: StateTuple) -> NodeAction | None:
    worker, window, boot, idle = state
    if worker is WorkerState.DOWN:
        return NodeAction.START_SHUTDOWN
    if worker is WorkerState.UNPAIRED:
        return NodeAction.START_SHUTDOWN if boot is BootGrace.BOOT_EXCEEDED else None
    if worker is WorkerState.IDLE and window is BillingWindow.OPEN and idle is IdleGrace.IDLE_EXCEEDED:
        return NodeAction.START_DRAIN
    return None


DEFAULT_MATRIX: dict[StateTuple, NodeAction | None] = {
    state: _default_action(state) for state in product(WorkerState, BillingWindow, BootGrace, IdleGrace)
}


def worker_state(
    node: Node,
    now: float,
    settings: LifecycleSettings,
    observing_since: float,
    has_work: bool,
    heard: bool = False,
    reserved: bool = False,
) -> WorkerState:
    """`heard`: the shell heard from the node's agent at `now` (its ping is fresh whatever
    `last_ping_at` says). `reserved`: an operator's admin reservation in force keeps the node
    (corral.core.reservations.keeps), which needs its instance type to tell, so the caller says."""
    if node.state is NodeState.BOOTING:
        return WorkerState.UNPAIRED
    if node.state is NodeState.DOWN:
        return WorkerState.DOWN
    if not heard and ping_is_stale(node, now, settings, observing_since):
        return WorkerState.DOWN
    if node.attributes and drain.leaving(node.attributes) is not None:
        # Broken (seed 004) or drained by an operator: out of service, shut down (and, if the
        # queue needs one, replaced) once its work has ended, or at once when drained `now`.
        if has_work and drain.requested(node.attributes) is not drain.Drain.NOW:
            return WorkerState.BUSY
        return WorkerState.DOWN
    if node.attributes and in_maintenance(node):
        return WorkerState.BUSY
    if node.state is NodeState.DRAINING:
        return WorkerState.BUSY if has_work else WorkerState.DOWN
    if has_work or node.state is NodeState.BUSY or reserved:
        # A reserved node stays up for its reservation's jobs, as a held one does, until its end;
        # unlike a hold it still takes work (the reservation's), and a drain or silence outranks it.
        return WorkerState.BUSY
    return WorkerState.IDLE


def in_maintenance(node: Node) -> bool:
    """Seed 000 maps Slurm's "maint" to busy: left alone, never drained. corral's maintenance is an
    operator hold (`held: true`) or a seed-002 maintenance category (corral.core.categories)."""
    attributes = node.attributes
    return attr.truthy(attributes, attr.HELD) is True or categories.maintenance(attributes)


def ping_is_stale(node: Node, now: float, settings: LifecycleSettings, observing_since: float) -> bool:
    if node.state is NodeState.BOOTING:
        return False
    seen = max(node.last_ping_at or node.paired_at or node.created_at, observing_since)
    return now - seen > settings.ping_stale


def billing_window(node: Node, now: float, settings: LifecycleSettings) -> BillingWindow:
    """Open when shutting down now saves money: with per-period billing, only in the last
    `shutdown_window` of the current paid period; and not while the billing minimum has more than
    `shutdown_window` to run (an instance shut down before it is billed the minimum all the same)."""
    return BillingWindow.OPEN if billing_window_opens(node, now, settings) <= now else BillingWindow.CLOSED


def billing_window_opens(node: Node, at: float, settings: LifecycleSettings) -> float:
    """The first time from `at` on when the node's billing window is open (`at` itself if it is):
    what `billing_window` reads, and when the simulator wakes an idle node that waits for it."""
    window = settings.shutdown_window
    opens = max(at, node.created_at + node.billing_minimum - window)
    period = node.billing_granularity
    if period > window:
        into_period = (opens - node.created_at) % period
        if period - into_period > window:
            opens += period - into_period - window
    return opens


def boot_grace(node: Node, now: float, settings: LifecycleSettings, observing_since: float = 0.0) -> BootGrace:
    """Counted from the boot, or from a restart of the observer if later: an agent that came up while
    corral was down has been retrying its pairing and needs a moment to be heard, as a ping does."""
    booted = max(node.created_at, observing_since)
    return BootGrace.BOOT_WAIT if now - booted < settings.boot_grace else BootGrace.BOOT_EXCEEDED


def idle_grace(node: Node, worker: WorkerState, now: float, settings: LifecycleSettings) -> IdleGrace:
    if worker is not WorkerState.IDLE:
        return IdleGrace.NOT_IDLE
    if now - node.state_changed_at >= settings.idle_grace:
        return IdleGrace.IDLE_EXCEEDED
    return IdleGrace.IDLE_WAIT


def state_tuple(
    node: Node,
    now: float,
    settings: LifecycleSettings,
    observing_since: float,
    has_work: bool,
    heard: bool = False,
    reserved: bool = False,
) -> StateTuple:
    worker = worker_state(node, now, settings, observing_since, has_work, heard, reserved)
    return (
        worker,
        billing_window(node, now, settings),
        boot_grace(node, now, settings, observing_since),
        idle_grace(node, worker, now, settings),
    )


def decide(state: StateTuple, matrix: dict[StateTuple, NodeAction | None] = DEFAULT_MATRIX) -> NodeAction | None:
    return matrix[state]


def describe(state: StateTuple) -> str:
    return ", ".join(str(part) for part in state)


def in_words(state: StateTuple, node: Node, settings: LifecycleSettings, down_reason: str = "") -> str:
    """Why the matrix acts on `node`, for its reason and its event: what happened in words, then
    the seed-000 state tuple. The tuple alone misled: a node whose agent went quiet was shut down
    as "down, open, boot exceeded, not idle", which reads as a boot that failed. `down_reason`:
    why this pass marked it down (its record's reason is from before)."""
    worker, _, boot, idle = state
    if worker is WorkerState.DOWN:
        # A draining node's reason is its drain's, with that decision's state tuple: not repeated.
        drained = "drained, no work left on it" if node.state is NodeState.DRAINING else ""
        words = down_reason or drained or node.reason
    elif worker is WorkerState.UNPAIRED and boot is BootGrace.BOOT_EXCEEDED:
        words = f"its agent did not pair within boot_grace {format_seconds(settings.boot_grace)}"
    elif worker is WorkerState.IDLE and idle is IdleGrace.IDLE_EXCEEDED:
        words = f"idle for more than idle_grace {format_seconds(settings.idle_grace)}"
    else:
        words = ""
    return f"{words} ({describe(state)})" if words else describe(state)


def outlook(node: Node, now: float, settings: LifecycleSettings, observing_since: float, ping_interval: float) -> str:
    """What corral will do about a live node it has not heard from, and when, in words ('' when it
    hears from it as it should): an on-call looking at a booting node, or at a busy one whose
    agent went quiet, needs to know whether corral has noticed and when it gives the node up (its
    jobs then handled as on a lost node), not only the state it was last in. The deadlines are
    those `boot_grace` and `ping_is_stale` apply, `observing_since` included."""
    if node.state is NodeState.BOOTING:
        waited = _seconds(now - node.created_at)
        grace = format_seconds(settings.boot_grace)
        left = max(node.created_at, observing_since) + settings.boot_grace - now
        if left > 0:
            return f"agent not paired after {waited}: given up in {_seconds(left)} (boot_grace {grace})"
        return f"agent not paired after {waited}: past boot_grace {grace}, shut down at the next pass"
    if node.state not in (NodeState.IDLE, NodeState.BUSY, NodeState.DRAINING):
        return ""
    heard = node.last_ping_at or node.paired_at or node.created_at
    # A ping a little late is no news: only a silence of two intervals is worth a word.
    if now - heard <= 2 * ping_interval:
        return ""
    stale = format_seconds(settings.ping_stale)
    left = max(heard, observing_since) + settings.ping_stale - now
    silence = f"no ping for {_seconds(now - heard)}"
    if left > 0:
        return f"{silence}: down in {_seconds(left)} (ping_stale {stale}), its jobs then handled as on a lost node"
    return f"{silence}: past ping_stale {stale}, down at the next pass"


def _seconds(duration: float) -> str:
    """A duration to the second, as people write one (1m05s)."""
    whole = max(int(round(duration)), 0)
    minutes, seconds = divmod(whole, 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"
