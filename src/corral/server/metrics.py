"""Prometheus figures at /metrics: what the fleet costs now and in all, how long jobs wait, a
count of every event kind, whether the control loop passes, which instance types are backed off,
which dispatchers live and whether the notifier keeps up, for the alerts an operator sets (an
idle bill, a starving queue, capacity errors, a stuck loop, nodes going down).

Gauges are read from the store at each scrape, so they are the store's (every dispatcher's),
not this process's. Counters count this process's passes, and the events written to the store
since this server started: a scrape reads the events after the last one it counted. A restart
starts them at 0 again, which Prometheus's `rate()` and `increase()` take as a counter reset.
The fleet's cost in all is the store's own sum, so it survives a restart.
"""

from __future__ import annotations

import platform
import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

import corral
from corral.core.dispatchers import is_stale
from corral.core.events import EVENT_KINDS
from corral.core.model import JobState, NodeState
from corral.core.settings import PolicySettings
from corral.notifier import RETRY_KEY
from corral.store import Store, store_unreachable

# Seconds from a job's submission to its first start: a second to a day.
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 24 * 3600)
EVENT_PAGE = 5000

# A `*_created` series beside each counter and histogram (the time it was made) is ~55 series no
# alert or dashboard reads; Prometheus takes a counter reset from the drop to 0 without it. The
# switch is the library's, process-wide: this server's metrics are the process's only ones.
disable_created_metrics()
DISPATCHER_STATES = ("running", "stale", "stopped")


class FleetCostCollector(Collector):
    """`corral_fleet_cost_dollars_total`: what the fleet has cost in all, by instance type, as the
    store sums it at each scrape. A counter must never go down, and the store's sum can, a little:
    a node whose end a pass records at the pass's start time was billed up to the scrape's time by
    a scrape in between. Prometheus would read that dip as a counter reset and count the whole sum
    again, so each type's figure is held at its highest."""

    def __init__(self) -> None:
        self.dollars: dict[str, float] = {}

    def update(self, by_type: dict[str, float]) -> None:
        for instance_type, dollars in by_type.items():
            self.dollars[instance_type] = max(dollars, self.dollars.get(instance_type, 0.0))

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "corral_fleet_cost_dollars",
            "What the nodes have cost in all (hourly price over their lives so far, no billing rounding),"
            " by instance type; rate() of it is the spend",
            labels=["instance_type"],
        )
        for instance_type, dollars in sorted(self.dollars.items()):
            family.add_metric([instance_type], dollars)
        yield family


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    # The metrics this process knows without the store: all a scrape can serve while the store is
    # unreachable. Each is in `registry` too.
    own: CollectorRegistry = field(default_factory=CollectorRegistry)
    # The last event counted: the store's newest when the server started (Runtime sets it).
    event_cursor: int = 0

    def __post_init__(self) -> None:
        registry = self.registry
        # Which corral answers (a dashboard's "version" panel; `count by (version)` during an upgrade).
        build = Info("corral_build", "The corral version and Python of this server", registry=None)
        build.info({"version": corral.__version__, "python": platform.python_version()})
        self.store_up = Gauge(
            "corral_store_up",
            "1 if the store answered this scrape's reads, 0 if it was unreachable (then only this"
            " process's own metrics are served)",
            registry=None,
        )
        self.jobs = Gauge("corral_jobs", "Jobs by state", ["state"], registry=registry)
        self.jobs_held = Gauge("corral_jobs_held", "Queued jobs on hold (corral hold)", registry=registry)
        self.nodes = Gauge("corral_nodes", "Live nodes by state", ["state"], registry=registry)
        self.instances = Gauge(
            "corral_fleet_instances", "Live nodes by instance type", ["instance_type"], registry=registry
        )
        self.cost = Gauge("corral_fleet_cost_per_hour", "Summed hourly price of the live nodes", registry=registry)
        self.oldest_wait = Gauge(
            "corral_queue_oldest_wait_seconds",
            "How long the longest-waiting job that could run now has waited since submission (0: none waits)",
            registry=registry,
        )
        self.waits = Histogram(
            "corral_job_wait_seconds",
            "Seconds from a job's submission to its first start, for jobs started since this server started",
            buckets=WAIT_BUCKETS,
            registry=registry,
        )
        self.events = Counter(
            "corral_events", "Events written since this server started, by kind", ["kind"], registry=registry
        )
        # Every kind from 0: a series that first appears at 1 is no increase to Prometheus, so
        # `increase(corral_events_total{kind="capacity.unavailable"}[15m]) > 0` would miss the
        # first capacity error after each start.
        for kind in EVENT_KINDS:
            self.events.labels(kind)
        self.passes = Counter("corral_passes", "Reconcile passes run", registry=None)
        self.pass_errors = Counter("corral_pass_errors", "Reconcile passes that raised", registry=None)
        self.pass_seconds = Histogram("corral_pass_seconds", "Duration of a reconcile pass", registry=None)
        self.last_pass = Gauge(
            "corral_pass_last_success_timestamp_seconds",
            "Unix time at which this server's last reconcile pass ended without an error (0: none yet)",
            registry=None,
        )
        for own in (build, self.store_up, self.passes, self.pass_errors, self.pass_seconds, self.last_pass):
            registry.register(own)
            self.own.register(own)
        self.fleet_cost = FleetCostCollector()
        registry.register(self.fleet_cost)
        self.backoff = Gauge(
            "corral_instance_type_backoff_seconds",
            "Seconds an instance type is still backed off for (capacity or quota errors, instances that"
            " never paired, an unusable image or type); 0: it may boot",
            ["instance_type"],
            registry=registry,
        )
        self.boot_failures = Gauge(
            "corral_instance_type_boot_failures",
            "Failed boots in a row of an instance type that is backed off (instances that never paired)",
            ["instance_type"],
            registry=registry,
        )
        self.dispatchers = Gauge(
            "corral_dispatchers",
            "Dispatchers on the store, by state: running (heartbeating), stale (silent past"
            " dispatch.dispatcher_stale, its claims released), stopped (stopped cleanly)",
            ["state"],
            registry=registry,
        )
        self.notify_waiting = Gauge(
            "corral_notify_waiting_events",
            "Events the notifier has not read yet (0 without [[notify]] rules)",
            registry=registry,
        )
        self.notify_retries = Gauge(
            "corral_notify_retries_pending",
            "Notifications whose action failed and that wait to be tried again",
            registry=registry,
        )
        self._types_seen: set[str] = set()
        # Two scrapes at once must not count the same events twice.
        self._lock = threading.Lock()

    def exposition(
        self, store: Store, now: float, policy: PolicySettings | None = None, instance_types: Iterable[str] = ()
    ) -> bytes:
        """What a scrape answers: every metric, read from the store as of `now`; with the store
        unreachable, `corral_store_up 0` and this process's own metrics (its passes and their
        errors, the last good pass), not a failed scrape: an outage of the database is then an
        alert of its own, not `up == 0`, and the store's figures are absent rather than stale."""
        try:
            self.refresh(store, now, policy, instance_types)
        except Exception as exc:
            if store_unreachable(exc) is None:
                raise
            self.store_up.set(0)
            return generate_latest(self.own)
        self.store_up.set(1)
        return generate_latest(self.registry)

    def refresh(
        self, store: Store, now: float, policy: PolicySettings | None = None, instance_types: Iterable[str] = ()
    ) -> None:
        """Read the store's figures as of `now`; `instance_types` (the configured ones) are exported
        from 0, so that a type's first back-off or first node is a change, not a new series."""
        with self._lock:
            self._types_seen.update(instance_types)
            self._refresh_gauges(store, now)
            self._refresh_health(store, now, policy or PolicySettings())
            self._count_new_events(store)

    def _refresh_gauges(self, store: Store, now: float) -> None:
        counts = store.counts()
        for state in JobState:
            self.jobs.labels(state.value).set(counts.get(state.value, 0))
        self.jobs_held.set(store.held_count())
        fleet = store.fleet_counts()
        for node_state in NodeState:
            if node_state is not NodeState.GONE:
                self.nodes.labels(node_state.value).set(fleet.by_state.get(node_state.value, 0))
        # A type whose last node has gone reads 0 rather than keeping its last figure.
        self._types_seen.update(fleet.by_type)
        for instance_type in self._types_seen:
            self.instances.labels(instance_type).set(fleet.by_type.get(instance_type, (0, 0.0))[0])
        self.cost.set(fleet.cost_per_hour)
        self.oldest_wait.set(store.oldest_wait(now) or 0.0)
        cost_so_far = store.fleet_cost_so_far(now)
        self._types_seen.update(cost_so_far)
        self.fleet_cost.update({name: cost_so_far.get(name, 0.0) for name in self._types_seen})

    def _refresh_health(self, store: Store, now: float, policy: PolicySettings) -> None:
        backoffs = {row["instance_type"]: row for row in store.backoffs_in_force(now)}
        self._types_seen.update(backoffs)
        for instance_type in self._types_seen:
            row = backoffs.get(instance_type)
            self.backoff.labels(instance_type).set(max(0.0, row["until"] - now) if row else 0.0)
            self.boot_failures.labels(instance_type).set(row["boot_failures"] if row else 0)
        states = dict.fromkeys(DISPATCHER_STATES, 0)
        for row in store.dispatcher_rows():
            if row["stopped_at"] is not None:
                states["stopped"] += 1
            elif is_stale(row["last_heartbeat"], now, policy):
                states["stale"] += 1
            else:
                states["running"] += 1
        for state, count in states.items():
            self.dispatchers.labels(state).set(count)
        notifier = store.notify_cursor_status()
        self.notify_waiting.set(notifier["waiting"] if notifier else 0)
        self.notify_retries.set(len(notifier["state"].get(RETRY_KEY, [])) if notifier else 0)

    def _count_new_events(self, store: Store) -> None:
        while True:
            events = store.events_after(self.event_cursor, limit=EVENT_PAGE)
            if not events:
                return
            starts: dict[int, set[float]] = defaultdict(set)
            for event in events:
                if event["kind"] == "job.running" and event["job_id"] is not None:
                    starts[event["job_id"]].add(event["at"])
            # Read before anything is counted: a page is counted whole, with the cursor moved past
            # it, or not at all. Counted first, a store lost at this read had the next scrape count
            # the page again (an increase() of events that never happened, a false alert).
            first_starts = store.first_starts(starts)
            for event in events:
                self.events.labels(event["kind"]).inc()
            # A job's first start is counted once: in the page that holds its job.running event.
            for job_id, (submitted_at, first_start) in first_starts.items():
                if first_start in starts[job_id]:
                    self.waits.observe(max(0.0, first_start - submitted_at))
            self.event_cursor = events[-1]["id"]
            if len(events) < EVENT_PAGE:
                return
