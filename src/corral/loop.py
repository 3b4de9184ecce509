"""The live control loop: one reconcile pass = snapshot -> core -> actions -> drivers -> store.

`decide` is the only decision call; it is the same function the simulator calls. Everything else
here is I/O: reading the store and the cloud, carrying decisions out, recording what happened.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from corral.cloud.base import (
    TAG_NODE_ID,
    TAG_STORE,
    CloudDriver,
    CloudError,
    CloudInstance,
    ImageUnusable,
    InsufficientCapacity,
    QuotaExceeded,
    TypeUnusable,
)
from corral.config import Config
from corral.core import capacity, dispatchers, fairshare
from corral.core.model import AttemptState, NodeState
from corral.core.planner import PlannerMemo
from corral.core.reconcile import Placer, plan_pass
from corral.core.snapshot import BootFailures, Decisions, NodeAction, Snapshot
from corral.placement.attributes import FAILURE_RESERVED_UNTIL
from corral.placement.placer import make_placer
from corral.store import NotFound, Store, store_unreachable

if TYPE_CHECKING:
    from corral.notifier import Notifier
    from corral.retention import Retention

log = logging.getLogger("corral.loop")

# Explanations rewritten in one pass because the fleet changed under them (see refresh_explanations).
EXPLANATIONS_PER_PASS = 100


def decide(
    snapshot: Snapshot, now: float, config: Config, placer: Placer | None = None, planner: PlannerMemo | None = None
) -> Decisions:
    """Every decision of a pass. The simulator calls the same core function. A placer kept between
    passes (`make_placer(config.policy)`) saves rebuilding what the nodes say about themselves; a
    kept PlannerMemo, the boot planner's work when the queue and the instances on their way are
    the same as the pass before."""
    return plan_pass(snapshot, now, config.policy, placer, planner)


def new_node_id() -> str:
    return "n-" + secrets.token_hex(4)


class PauseWatch:
    """Notices when this whole process was paused: a garbage-collection or VM pause, SIGSTOP, a
    machine starved of CPU. Meanwhile the server could record no ping, start or exit; the first
    pass after, judging silence by the clock alone, declared every healthy node down and ran its
    work again, finished runs whose exits waited in their agents too. A thread ticks every
    `tick` seconds of the monotonic clock; a tick later than `threshold` is a pause, and so is a
    tick overdue when asked (the pass may run before the ticker after the process resumes)."""

    def __init__(self, threshold: float, tick: float = 0.25, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.threshold = threshold
        self.tick_every = min(tick, threshold / 4)
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._last_tick = monotonic()
        self._pauses = 0
        self._longest = 0.0  # the longest pause not yet told (seconds)

    def start(self) -> PauseWatch:
        threading.Thread(target=self._run, name="pause-watch", daemon=True).start()
        return self

    def _run(self) -> None:
        while True:
            time.sleep(self.tick_every)
            self.tick()

    def tick(self) -> None:
        now = self._monotonic()
        with self._lock:
            gap = now - self._last_tick
            if gap > self.threshold:
                self._pauses += 1
                self._longest = max(self._longest, gap)
            self._last_tick = now

    def pauses(self) -> tuple[int, float]:
        """How many pauses so far (one going on until now counted), and the longest of those not
        told before."""
        self.tick()
        with self._lock:
            longest, self._longest = self._longest, 0.0
            return self._pauses, longest


def pause_threshold(config: Config) -> float:
    """A pause that can make an agent that pings look silent is longer than ping_stale less a ping
    interval (at least half of ping_stale, which config checks); half of that is caught with room to
    spare, and is still far longer than the watch's ticks come late on a busy machine."""
    return (config.policy.lifecycle.ping_stale - config.cloud.ping_interval) / 2


@dataclass
class PassReport:
    decisions: Decisions
    started_nodes: set[str] = field(default_factory=set)  # nodes that were given new attempts
    duration: float = 0.0


class LiveLoop:
    """What every live loop shares, whatever runs the work (a cloud of corral's agents:
    ControlLoop; Slurm: corral.executor.slurm_loop.SlurmLoop): the store, the dispatcher's
    identity, the clock, and passes and the clean stop serialised. A subclass sets its own state
    after calling this initialiser, and implements `_run_pass` and `_shutdown_fleet`."""

    # Carries out the [[notify]] rules after each pass (serve sets it when the config has some).
    notifier: Notifier | None = None
    # Deletes what has ended once it is old enough, a step after each pass ([retention]; serve sets it).
    retention: Retention | None = None

    def __init__(
        self, store: Store, config: Config, dispatcher_id: str, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.config = config
        self.dispatcher_id = dispatcher_id
        self.clock = clock
        self.observing_since = clock()
        self._serial = threading.Lock()  # a pass and the fleet's shutdown never overlap
        self.stopped = False
        self._ledger: fairshare.UsageLedger | None = None  # fair share's, read at the first pass
        self._store_lost = False  # the last pass failed because the store could not be reached
        self._told_moved_on = False  # the store's schema moved on under this corral, logged once

    @property
    def usage_ledger(self) -> fairshare.UsageLedger | None:
        """Fair share's ledger as of the last pass's calc time (None before the first pass, and
        under an order that reads no usage): what GET /api/share and /api/queue go on from."""
        return self._ledger

    def fill_usage(self, snapshot: Snapshot, now: float) -> None:
        """Puts in the snapshot each user's fair-share usage as of the last calc time, brought up to
        it from the store's runs (read since FORGOTTEN_AFTER_HALF_LIVES half-lives back at the first
        pass, then since the previous calc time): the usage a fair-share queue is ordered by."""
        queue = self.config.policy.placement.queue
        if not queue.reads_usage():
            return
        settings = queue.fairshare
        calc_time = fairshare.calc_time(now, settings)
        ledger = self._ledger or fairshare.remembered_from(calc_time, settings)
        if calc_time > ledger.as_of:
            spans = self.store.attempt_spans(ledger.as_of, calc_time)
            ledger = fairshare.advance(ledger, spans, calc_time, settings)
        self._ledger = ledger
        snapshot.fairshare_usage = ledger.usage

    def tell_silent_dispatchers(self, snapshot: Snapshot, now: float) -> None:
        """Records the peers this pass judges silent for the first time (their claims are released
        by the core's decisions), each with an event."""
        if snapshot.dispatchers:
            self.store.dispatchers_silent(dispatchers.newly_silent(snapshot, now, self.config.policy), now)

    def run_pass(self) -> PassReport:
        # One at a time with shutdown_fleet: a stop that ran beside a pass would miss the instances
        # the pass boots (or a node it created before its instance id was known), and leave them
        # running; a pass asked for after the stop does nothing.
        with self._serial:
            if self.stopped:
                return PassReport(Decisions())
            try:
                moved_on = self.store.schema_moved_on()
                if moved_on is not None:
                    if not self._told_moved_on:
                        log.error("%s", moved_on)
                        self._told_moved_on = True
                    return PassReport(Decisions())
                if self._store_lost:
                    # No ping, heartbeat or report could be recorded while the store was unreachable:
                    # silence is counted from now, as after a restart, or every agent and peer
                    # dispatcher would be judged silent for the outage (nodes marked down and their
                    # work run again, peers' claims released) at the first pass that reads the store.
                    self.observing_since = max(self.observing_since, self.clock())
                report = self._serialised_pass()
            except Exception as exc:
                self._store_lost = store_unreachable(exc) is not None
                raise
            self._store_lost = False
        if self.notifier is not None:
            self.notifier.after_pass()  # never raises; the actions run on its own thread
        if self.retention is not None:
            self.retention.after_pass()  # never raises
        return report

    def _serialised_pass(self) -> PassReport:
        # Passes of the dispatchers sharing the store, one at a time (Store.pass_lock): what a
        # pass places and boots is counted on its snapshot. A peer stuck in its pass is waited
        # for half of dispatcher_stale at most, before anyone judges this one silent.
        with self.store.pass_lock(self.config.policy.dispatch.dispatcher_stale / 2) as serialised:
            if not serialised:
                log.warning("another dispatcher's pass held the store's pass lock too long; this pass runs beside it")
            return self._run_pass()

    def _run_pass(self) -> PassReport:
        raise NotImplementedError

    def check_settings(self) -> str | None:
        """What would make every pass fail, asked once at start (`corral run` refuses to start
        with it): what is wrong, naming the setting, or None."""
        return None

    def boot_pause(self, now: float) -> tuple[float, str] | None:
        """Until when this dispatcher boots nothing after failed boots the cloud said were no one
        type's fault, and the last of them (`corral status`); None: it boots."""
        return None

    def shutdown_fleet(self, reason: str) -> None:
        """Clean stop: requeue running work as a temporary failure, stop what runs it, record it.
        Waits for a pass in flight to end; no pass runs after it."""
        with self._serial:
            self.stopped = True
            self._shutdown_fleet(reason)

    def _shutdown_fleet(self, reason: str) -> None:
        raise NotImplementedError


class ControlLoop(LiveLoop):
    """The live loop over a cloud: boots and shuts down instances whose agents run the work."""

    def __init__(
        self,
        store: Store,
        cloud: CloudDriver,
        config: Config,
        dispatcher_id: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(store, config, dispatcher_id, clock)
        self.cloud = cloud
        self.instance_types = {t.name: t for t in config.core_instance_types()}
        self.placer = make_placer(config.policy)
        self.planner = PlannerMemo()
        self._explained: dict[int, dict[str, Any]] = {}  # a waiting job's explanation as last written
        # After a boot failed for a reason that is not the type's (an API error, throttling past
        # botocore's retries, a bad image), no boot is tried before this time; the pause doubles
        # with each such failure in a row, up to capacity_backoff, so that a broken cloud account
        # does not leave a failed node record and its events every pass.
        self._boots_paused_until = -math.inf
        self._boot_pause_reason = ""
        self._boot_errors_in_a_row = 0
        self.store_id = store.store_id()
        self._foreign: set[str] = set()  # another store's instances seen under this cluster, told once
        # Instances the cloud would not terminate (told once each; tried again every pass).
        self._undestroyed: set[str] = set()
        # Set by `corral run` (serve): this process's pauses, after which silence is counted anew.
        self.pause_watch: PauseWatch | None = None
        self._pauses_told = 0

    def _run_pass(self) -> PassReport:
        started = self.clock()
        self.store.heartbeat(self.dispatcher_id, started, socket.gethostname(), os.getpid())
        self.sync_cloud(started)
        snapshot = self.store.load_snapshot(
            self.dispatcher_id, list(self.instance_types.values()), self.observing_since
        )
        now = self.clock()
        if self.paused_meanwhile(now):
            snapshot.observing_since = self.observing_since
        self.fill_usage(snapshot, now)
        self.tell_silent_dispatchers(snapshot, now)
        decisions = decide(snapshot, now, self.config, self.placer, self.planner)
        report = PassReport(decisions)
        self.execute(decisions, snapshot, now, report)
        report.duration = self.clock() - started
        return report

    def check_settings(self) -> str | None:
        """The cloud driver's own start check (ec2: the credentials)."""
        return self.cloud.check()

    def paused_meanwhile(self, now: float) -> bool:
        """Whether this process was paused since the last pass looked (its snapshot read
        included): then silence is counted from `now`, as after a restart or a store outage."""
        if self.pause_watch is None:
            return False
        pauses, longest = self.pause_watch.pauses()
        if pauses == self._pauses_told:
            return False
        self._pauses_told = pauses
        log.warning(
            "this dispatcher was paused for %.1fs (a GC or VM pause, SIGSTOP, no CPU): no ping could be"
            " heard meanwhile; nodes and peer dispatchers are given their full grace from now",
            longest,
        )
        self.observing_since = max(self.observing_since, now)
        return True

    def boot_pause(self, now: float) -> tuple[float, str] | None:
        if now >= self._boots_paused_until:
            return None
        return self._boots_paused_until, self._boot_pause_reason

    # ---- observe ------------------------------------------------------------------------------

    def sync_cloud(self, now: float) -> None:
        """Reconcile the store's nodes with what the cloud has: a node whose instance vanished is
        gone (its work is lost and requeued by the next pass); a tagged instance corral has no
        live node for is an orphan and is destroyed. Only nodes this dispatcher booted are judged
        by this cloud's listing: another dispatcher's (sharing the store) may live in a cloud of
        its own (each loopback cloud is its own machine); if that one stops, its nodes fall silent
        and are marked down."""
        try:
            instances = self.cloud.list()
        except CloudError as exc:
            log.warning("cloud list failed: %s", exc)
            return
        instances = self._own(instances, now)
        by_node = {inst.node_id: inst for inst in instances if inst.node_id}
        # Every live node: the listing's newest 1,000 took an older node's instance for an orphan.
        live_nodes = {row["id"]: row for row in self.store.node_rows(limit=None)}
        # What the cloud says ended the instances that vanished while corral was not shutting them
        # down, asked at once for all (a spot reclaim may take many in one pass).
        ended = [
            row["instance_id"]
            for node_id, row in live_nodes.items()
            if row["dispatcher_id"] in (None, self.dispatcher_id)
            and row["instance_id"]
            and node_id not in by_node
            and row["state"] != NodeState.SHUTTING_DOWN.value
        ]
        why_gone = self.cloud.why_gone(ended) if ended else {}
        unfinished: list[tuple[str, str]] = []  # (node, instance) of shutdowns to finish
        for node_id, row in live_nodes.items():
            mine = row["dispatcher_id"] in (None, self.dispatcher_id)
            if mine and not row["instance_id"] and node_id in by_node:
                # A crash between the node's record and the cloud's answer to its boot: the tags say
                # which instance it is. Without its id the node's shutdown would destroy nothing (the
                # next pass's orphan sweep did) and a vanished instance would go unnoticed.
                row["instance_id"] = by_node[node_id].id
                self.store.set_instance_id(node_id, row["instance_id"], by_node[node_id].zone, by_node[node_id].market)
            elif mine and node_id in by_node and row["zone"] is None and by_node[node_id].zone:
                # Booted before migration 0015 (or its create's answer said no zone): the listing says.
                listed = by_node[node_id]
                self.store.set_instance_id(node_id, listed.id, listed.zone, listed.market)
            if (
                mine
                and not row["instance_id"]
                and node_id not in by_node
                and row["state"] == NodeState.BOOTING.value
                and row["created_at"] < self.observing_since <= now - self.cloud.listing_lag
            ):
                # A boot a crash cut short between the node's record and the cloud's create: no
                # instance will ever pair. Left booting, the queue waited for it a whole boot_grace
                # after the restart, and its end then backed its type off as one that fails to boot.
                said = "its boot was cut short: corral stopped before the cloud made its instance"
                self.store.mark_node(node_id, NodeState.GONE, said, now)
            elif mine and row["instance_id"] and node_id not in by_node:
                gone = "instance disappeared from the cloud"
                if row["state"] != NodeState.SHUTTING_DOWN.value:
                    # Not corral's shutdown (a spot reclaim, a terminate from the console, a KMS key
                    # EC2 could not use): the node failed, and says so, with the cloud's reason, as a
                    # silent one does (node.down, which [[notify]] rules page on), before its record ends.
                    cloud_said = why_gone.get(row["instance_id"])
                    gone += f" ({cloud_said.reason})" if cloud_said else ""
                    vanished = f"instance {row['instance_id']} {gone.removeprefix('instance ')}"
                    self.store.mark_node(node_id, NodeState.DOWN, vanished, now)
                    if cloud_said and cloud_said.launch_error and row["state"] == NodeState.BOOTING.value:
                        in_force = {b["instance_type"]: b["until"] for b in self.store.backoffs_in_force(now)}
                        self._back_off(row["instance_type"], cloud_said.launch_error, now, in_force)
                self.store.mark_node(node_id, NodeState.GONE, gone, now)
            elif mine and row["state"] == NodeState.SHUTTING_DOWN.value and node_id in by_node:
                # A shutdown that a crash (or a SIGKILL during a clean stop) cut short between its
                # record and the cloud's answer. No pass looks at a node shutting down again, and the
                # instance is no orphan (its node is live): finish it, or it runs, and is billed, for
                # ever, with whatever its agent still ran (the job already runs again elsewhere).
                # Also a terminate the cloud refused before: the node stays shutting down until it
                # takes one, so that `corral nodes` shows what still bills.
                instance_id = by_node[node_id].id
                if instance_id not in self._undestroyed:
                    log.info(
                        "finishing the shutdown of node %s (instance %s)",
                        node_id,
                        instance_id,
                        extra={"node_id": node_id, "instance_id": instance_id},
                    )
                unfinished.append((node_id, instance_id))
        orphans = [inst for inst in instances if inst.node_id not in live_nodes]
        # Terminated together, in as few cloud calls as it takes (a store restored from an old
        # backup may leave hundreds of orphans).
        told = {inst.id for inst in orphans if inst.id in self._undestroyed}
        refused = self._terminate_many(unfinished, now, [inst.id for inst in orphans])
        for node_id, instance_id in unfinished:
            if instance_id not in refused:
                self.store.mark_node(node_id, NodeState.GONE, "shut down (its shutdown was cut short)", self.clock())
        told_now: list[tuple[str, str | None]] = []
        for inst in orphans:
            failed = refused.get(inst.id)
            # An instance without the node tag was started as no node of a corral (by hand, or by a
            # launch template that copied the cluster tag): "(node None)" said nothing of it.
            # (The event of a tagged one names its node in its own field.)
            which = f"node {inst.node_id}" if inst.node_id else f"no {TAG_NODE_ID} tag"
            said = f"instance {inst.id}" + ("" if inst.node_id else f" ({which})")
            if failed is None:
                log.info(
                    "destroyed orphan instance %s (%s)",
                    inst.id,
                    which,
                    extra={"instance_id": inst.id, "node_id": inst.node_id},
                )
                told_now.append((f"{said} has no live node record; destroyed", inst.node_id))
            elif inst.id not in told:
                message = f"{said} has no live node record; terminating it failed: {failed}; tried again each pass"
                told_now.append((message, inst.node_id))
        if told_now:
            self.store.add_node_events(now, "node.orphan", told_now)

    def _own(self, instances: list[CloudInstance], now: float) -> list[CloudInstance]:
        """The instances of this store's dispatchers (and untagged ones, from before instances
        carried their store). Another store's, under the same `cloud.cluster`, are left alone: they
        are no orphans of this one. Each is recorded once (event `cloud.foreign`)."""
        own: list[CloudInstance] = []
        for inst in instances:
            if inst.store_id in (None, self.store_id):
                own.append(inst)
            elif inst.id not in self._foreign:
                self._foreign.add(inst.id)
                message = (
                    f"instance {inst.id} carries cloud.cluster {self.config.cloud.cluster!r} but was booted by "
                    f"another corral store ({inst.store_id}); left alone: give each corral its own cloud.cluster"
                )
                log.warning("%s", message)
                self.store.add_event(now, "cloud.foreign", message)
        return own

    # ---- act ----------------------------------------------------------------------------------

    def execute(self, decisions: Decisions, snapshot: Snapshot, now: float, report: PassReport) -> None:
        self.store.apply_outcomes(decisions.job_outcomes, now)
        # A transaction per run of marks to one state, in the core's order: a pass that places work
        # on hundreds of idle nodes marks each busy, and a transaction each was 6 s of a first pass
        # on SQLite (bench/live_pass.py).
        run: dict[str, str] = {}
        for number, mark in enumerate(decisions.node_marks):
            run[mark.node_id] = mark.reason
            following = decisions.node_marks[number + 1] if number + 1 < len(decisions.node_marks) else None
            if following is None or following.state is not mark.state or following.node_id in run:
                self.store.mark_nodes(run, mark.state, now)
                run = {}
        for held in decisions.node_reservations:  # seed 002 §5.4.5: the placement filters read it
            try:
                self.store.set_node_attributes(held.node_id, {FAILURE_RESERVED_UNTIL: repr(held.until)}, [], None, now)
            except NotFound:
                continue  # gone since the snapshot: nothing to reserve
            self.store.add_event(now, "node.transient_failure", held.reason, node_id=held.node_id)
        jobs = {job.id: job for job in snapshot.jobs}
        claims = [(p.job_id, p.node_ids, jobs[p.job_id].resources) for p in decisions.placements]
        claimed = self.store.claim_many(claims, self.dispatcher_id, now, decisions.explanations)
        report.started_nodes.update(p.node_ids[0] for p in decisions.placements if p.job_id in claimed)
        if len(snapshot.dispatchers) > 1:
            # Work another dispatcher sharing the store placed: the agents of this one's nodes
            # long-poll this server, which that claim did not wake (they would wait out their poll).
            report.started_nodes.update(
                attempt.node_ids[0]
                for attempt in snapshot.attempts
                if attempt.state is AttemptState.ASSIGNED and attempt.dispatcher_id != self.dispatcher_id
            )
        self.store.annotate_many(decisions.annotations, decisions.explanations, now)
        self.refresh_explanations(decisions, now)
        self.store.drop_ended_signals(now)
        # The back-off table as this pass learns it: after an insufficient-capacity error the pass's
        # other boots of that type are not tried (seed 004), as in the simulator.
        unavailable = dict(snapshot.unavailable_types)
        self.record_boot_failures(decisions, now, unavailable)
        for boot in decisions.boots:
            if now < self._boots_paused_until:
                break
            self._boot(boot.instance_type, boot.reason, now, unavailable)
        # The pass's shutdowns are recorded first and their instances terminated together, in as few
        # cloud calls as it takes: an idle fleet that drains at once is hundreds of them.
        shutdowns: dict[str, str] = {}
        for decision in decisions.node_decisions:
            if decision.action is NodeAction.START_DRAIN:
                self.store.mark_node(decision.node_id, NodeState.DRAINING, decision.reason, now)
            else:
                shutdowns[decision.node_id] = decision.reason
        if shutdowns:
            self.store.mark_nodes(shutdowns, NodeState.SHUTTING_DOWN, now)
            rows = self.store.node_rows(limit=None)
            instance_of = {row["id"]: row["instance_id"] for row in rows if row["id"] in shutdowns}
            refused = self._terminate_many(
                [(node_id, instance_id) for node_id, instance_id in instance_of.items() if instance_id], now
            )
            # Those the cloud would not terminate are still billed: shutting down until it takes one (sync_cloud).
            # Why it was shut down stays its reason once gone (`corral nodes --all`, `corral node`),
            # where "shut down (down)" left an on-call to search the events for the cause.
            gone = {node_id: f"shut down: {why}" for node_id, why in shutdowns.items()}
            for node_id, instance_id in instance_of.items():
                if instance_id in refused:
                    del gone[node_id]
            self.store.mark_nodes(gone, NodeState.GONE, self.clock())

    def record_boot_failures(self, decisions: Decisions, now: float, unavailable: dict[str, float]) -> None:
        """The core's back-offs of types whose instances did not pair within the boot grace (their
        shutdowns follow, as node decisions), in the store and in this pass's back-off table; and the
        rows of failed boots that a pairing ended."""
        for name in decisions.types_paired:
            self.store.end_boot_failures(name)
        for backoff in decisions.type_backoffs:
            name = backoff.instance_type
            unavailable[name] = max(unavailable.get(name, 0.0), backoff.until)
            row = self.store.node_row(backoff.node_id)
            message = capacity.boot_failed_message(backoff, row["instance_id"] if row else None)
            log.warning("%s: %s", name, message, extra={"instance_type": name, "node_id": backoff.node_id})
            self.store.set_unavailable(
                name,
                backoff.until,
                message,
                now,
                "type.boot_failed",
                BootFailures(backoff.failures, now),
                backoff.node_id,
            )

    def refresh_explanations(self, decisions: Decisions, now: float) -> None:
        """Keep `corral explain` current. A waiting job's explanation changes with the fleet (its
        figures, sample nodes, node counts) while its one-line reason often does not, and only a
        changed reason is annotated (with its explanation). So the explanations that changed since
        they were last written are written too: at most EXPLANATIONS_PER_PASS a pass, in queue
        order, so that a long queue's refresh does not stall the loop; the rest follow."""
        placed = {p.job_id for p in decisions.placements}
        annotated = {note.job_id for note in decisions.annotations}
        last = self._explained
        kept: dict[int, dict[str, Any]] = {}
        changed: dict[int, dict[str, Any]] = {}
        for job_id, explanation in decisions.explanations.items():
            if job_id in placed:
                continue
            if job_id in annotated or last.get(job_id) == explanation:
                kept[job_id] = explanation
            elif len(changed) < EXPLANATIONS_PER_PASS:
                changed[job_id] = kept[job_id] = explanation
            elif job_id in last:
                kept[job_id] = last[job_id]
        self.store.refresh_explanations(changed, now)
        self._explained = kept

    def _boot(self, type_name: str, reason: str, now: float, unavailable: dict[str, float]) -> None:
        if not capacity.is_available(type_name, unavailable, now):
            return  # this pass already learnt the type has no capacity; the next pass plans around it
        itype = self.instance_types[type_name]
        node_id = new_node_id()
        boot_token = secrets.token_urlsafe(24)
        self.store.create_node(node_id, itype, boot_token, now, reason, self.dispatcher_id)
        try:
            instance = self.cloud.create(itype, node_id, boot_token, {TAG_STORE: self.store_id})
        except (InsufficientCapacity, QuotaExceeded, TypeUnusable) as exc:
            self._back_off(type_name, exc, now, unavailable)
            self.store.mark_node(node_id, NodeState.GONE, f"boot failed: {exc}", now)
            return
        except CloudError as exc:
            self._boot_errors_in_a_row += 1
            pause = min(
                self.config.loop.interval * 2 ** (self._boot_errors_in_a_row - 1),
                self.config.policy.boot.capacity_backoff,
            )
            self._boots_paused_until = now + pause
            self._boot_pause_reason = f"boot of {type_name} failed: {exc}"
            self.store.mark_node(node_id, NodeState.GONE, f"boot failed: {exc}; no boot for {pause:g} s", now)
            log.warning(
                "boot of %s failed: %s; no boot for %g s",
                type_name,
                exc,
                pause,
                extra={"instance_type": type_name, "node_id": node_id},
            )
            return
        self._boot_errors_in_a_row = 0
        self.store.set_instance_id(node_id, instance.id, instance.zone, instance.market)

    def _back_off(self, type_name: str, exc: CloudError, now: float, unavailable: dict[str, float]) -> None:
        """A type the cloud refused to boot, or whose instance it ended in its launch. An account
        limit (EC2's vCPU quota is per group of types) is, to the planner, a type that cannot be had
        for now, as a capacity error is: it boots another type that fits. So is a type the cloud
        will not boot as configured (a bad AMI, a name it does not know, a KMS key its volumes may
        not use: a config mistake, told apart by its event): the other types boot on, as
        Karpenter's other node pools do beside one with a bad image."""
        until = capacity.record_insufficient_capacity(unavailable, type_name, now, self.config.policy.boot)
        if isinstance(exc, ImageUnusable):
            kind = "type.image_unusable"
        elif isinstance(exc, TypeUnusable):
            kind = "type.unusable"
        else:
            kind = "capacity.unavailable"
        self.store.set_unavailable(type_name, until, str(exc), now, kind)
        if isinstance(exc, TypeUnusable):
            log.warning("%s: %s not booted for %g s", exc, type_name, until - now, extra={"instance_type": type_name})

    def _terminate_many(
        self, nodes: list[tuple[str, str]], now: float, orphans: list[str] | None = None
    ) -> dict[str, str]:
        """Destroy the instances of these shutting-down (node, instance) pairs, and the `orphans`,
        together: what the cloud said of each instance it would not terminate. A node whose instance it would not
        terminate (corral's role lacks ec2:TerminateInstances, termination protection, a throttle
        past botocore's retries) stays shutting down and says why once (event
        `node.shutting_down`); sync_cloud tries again each pass. Marked gone instead, it vanished
        from `corral nodes` while it ran and billed, and its instance read as an orphan at every
        pass after."""
        told = {instance_id for _, instance_id in nodes if instance_id in self._undestroyed}
        refused = self._destroy_many([instance_id for _, instance_id in nodes] + (orphans or []))
        for node_id, instance_id in nodes:
            failed = refused.get(instance_id)
            if failed is not None and instance_id not in told:
                message = f"terminating instance {instance_id} failed: {failed}; tried again each pass"
                self.store.add_event(now, "node.shutting_down", message, node_id=node_id)
        return refused

    def _destroy_many(self, instance_ids: list[str]) -> dict[str, str]:
        """Terminate instances: what the cloud said of each it would not take (logged, and the
        instance remembered as one it would not terminate). The new ones go in one `destroy_many`;
        one refused before is tried in a call of its own, so that a refusal that lasts (a protected
        instance, a role that may not terminate) does not make the cloud look for it among the
        others' every pass."""
        if not instance_ids:
            return {}
        fresh = [instance_id for instance_id in dict.fromkeys(instance_ids) if instance_id not in self._undestroyed]
        refused = self.cloud.destroy_many(fresh) if fresh else {}
        for instance_id in dict.fromkeys(instance_ids):
            if instance_id in self._undestroyed:
                refused.update(self.cloud.destroy_many([instance_id]))
        for instance_id in dict.fromkeys(instance_ids):
            if instance_id in refused:
                log.warning(
                    "destroy %s failed: %s", instance_id, refused[instance_id], extra={"instance_id": instance_id}
                )
                self._undestroyed.add(instance_id)
            else:
                self._undestroyed.discard(instance_id)
        return {instance_id: str(exc) for instance_id, exc in refused.items()}

    def _shutdown_fleet(self, reason: str) -> None:
        """Requeue this dispatcher's running work as a temporary failure and destroy its instances."""
        from corral.core import retry

        now = self.clock()
        snapshot = self.store.load_snapshot(self.dispatcher_id, list(self.instance_types.values()), 0.0)
        jobs = {job.id: job for job in snapshot.jobs}
        # This dispatcher's fleet (another sharing the store keeps its own), and the work that stops
        # with it: what runs on it, and what this dispatcher claimed.
        fleet = [row for row in self.store.node_rows(limit=None) if row["dispatcher_id"] in (None, self.dispatcher_id)]
        stopping = {row["id"] for row in fleet}
        for attempt in snapshot.attempts:
            job = jobs.get(attempt.job_id)
            if job is not None and (job.claimed_by == self.dispatcher_id or stopping.intersection(attempt.node_ids)):
                self.store.apply_outcome(
                    retry.after_temp_failure(job, now, self.config.policy.retry, reason, (attempt.id,)), now
                )
        # Every node is recorded shutting down before any instance is terminated (a stop killed
        # meanwhile leaves them for the next corral to finish), then all are terminated together:
        # one cloud call per instance, a fleet of 500 took minutes, past systemd's stop timeout, and
        # what the stop did not reach billed on.
        self.store.mark_nodes(dict.fromkeys((row["id"] for row in fleet), reason), NodeState.SHUTTING_DOWN, now)
        refused = self._terminate_many([(row["id"], row["instance_id"]) for row in fleet if row["instance_id"]], now)
        # Those the cloud would not terminate are left shutting down: the next corral's first pass finishes them.
        gone = [row["id"] for row in fleet if row["instance_id"] not in refused]
        self.store.mark_nodes(dict.fromkeys(gone, reason), NodeState.GONE, self.clock())
