"""Prometheus figures at /metrics: what the fleet costs now, how long jobs wait, and a count of
every event kind, for the alerts an operator sets (an idle bill, a starving queue, capacity
errors, nodes going down).

Gauges are read from the store at each scrape, so they are the store's (every dispatcher's),
not this process's. Counters count this process's passes, and the events written to the store
since this server started: a scrape reads the events after the last one it counted. A restart
starts them at 0 again, which Prometheus's `rate()` and `increase()` take as a counter reset.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from corral.core.events import EVENT_KINDS
from corral.core.model import JobState, NodeState
from corral.store import Store

# Seconds from a job's submission to its first start: a second to a day.
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 24 * 3600)
EVENT_PAGE = 5000


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    # The last event counted: the store's newest when the server started (Runtime sets it).
    event_cursor: int = 0

    def __post_init__(self) -> None:
        registry = self.registry
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
        self.passes = Counter("corral_passes", "Reconcile passes run", registry=registry)
        self.pass_errors = Counter("corral_pass_errors", "Reconcile passes that raised", registry=registry)
        self.pass_seconds = Histogram("corral_pass_seconds", "Duration of a reconcile pass", registry=registry)
        self._types_seen: set[str] = set()
        # Two scrapes at once must not count the same events twice.
        self._lock = threading.Lock()

    def refresh(self, store: Store, now: float) -> None:
        with self._lock:
            self._refresh_gauges(store, now)
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

    def _count_new_events(self, store: Store) -> None:
        while True:
            events = store.events_after(self.event_cursor, limit=EVENT_PAGE)
            if not events:
                return
            starts: dict[int, set[float]] = defaultdict(set)
            for event in events:
                self.events.labels(event["kind"]).inc()
                if event["kind"] == "job.running" and event["job_id"] is not None:
                    starts[event["job_id"]].add(event["at"])
            # A job's first start is counted once: in the page that holds its job.running event.
            for job_id, (submitted_at, first_start) in store.first_starts(starts).items():
                if first_start in starts[job_id]:
                    self.waits.observe(max(0.0, first_start - submitted_at))
            self.event_cursor = events[-1]["id"]
            if len(events) < EVENT_PAGE:
                return
