"""Deleting what has ended once it is old enough (`[retention]`): the live loop's shell around
the store's purges and the log store, run after a pass as the notifier is.

A sweep runs every `retention.interval`: ended jobs past `jobs_after` go in batches of
JOB_BATCH (one transaction each, one pass apart, so that a first sweep over a store of millions
never holds the store long), then events past `events_after`, then the output of jobs past
`output_after` (or `jobs_after`), and that of jobs no longer in the store (a peer dispatcher
deleted them; each dispatcher holds the output of the jobs it took in). A failure is logged and
the sweep starts again at the next interval: nothing in it is needed by anything else.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.exc import SQLAlchemyError

from corral.config import RetentionConfig
from corral.server.logstore import LogStore
from corral.store import Store

log = logging.getLogger("corral.retention")

JOB_BATCH = 1000
EVENT_BATCH = 10_000


@dataclass
class Sweep:
    after_id: int = 0  # the last job id looked at by this sweep's job batches
    jobs_done: bool = False
    events_done: bool = False
    jobs_deleted: int = 0
    events_deleted: int = 0


class Retention:
    def __init__(self, store: Store, logs: LogStore, settings: RetentionConfig, clock: Callable[[], float]) -> None:
        self.store = store
        self.logs = logs
        self.settings = settings
        self.clock = clock
        self.next_sweep_at = 0.0
        self.sweep: Sweep | None = None

    def after_pass(self) -> None:
        """One step of the sweep in progress, or a new sweep when one is due. Never raises."""
        now = self.clock()
        if self.sweep is None and now < self.next_sweep_at:
            return
        try:
            self.step(now)
        except (SQLAlchemyError, OSError) as exc:
            log.warning("retention sweep failed; it runs again in %.0fs: %s", self.settings.interval, exc)
            self.sweep = None
            self.next_sweep_at = now + self.settings.interval

    def step(self, now: float) -> None:
        sweep = self.sweep = self.sweep or Sweep()
        settings = self.settings
        if settings.jobs_after is not None and not sweep.jobs_done:
            deleted, last_seen = self.store.purge_jobs(now - settings.jobs_after, JOB_BATCH, now, sweep.after_id)
            self.logs.remove(deleted)
            sweep.jobs_deleted += len(deleted)
            sweep.after_id = last_seen
            sweep.jobs_done = last_seen == 0
            return
        if settings.events_after is not None and not sweep.events_done:
            count = self.store.purge_events(now - settings.events_after, EVENT_BATCH)
            sweep.events_deleted += count
            sweep.events_done = count < EVENT_BATCH
            return
        outputs_removed = 0
        if settings.output_kept_for is not None:
            due = self.store.output_to_remove(self.logs.job_ids(), now - settings.output_kept_for)
            self.logs.remove(due)
            outputs_removed = len(due)
        if sweep.jobs_deleted or sweep.events_deleted or outputs_removed:
            log.info(
                "retention sweep: %d ended jobs, %d events and the output of %d jobs deleted",
                sweep.jobs_deleted,
                sweep.events_deleted,
                outputs_removed,
            )
        self.sweep = None
        self.next_sweep_at = now + settings.interval
