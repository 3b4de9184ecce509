"""Which queued jobs a pass goes on with, and in which order, for both passes (`plan_pass` and the
Slurm batch pass, `corral.core.batch`):

- `in_order`: the queue in its order: priority then submission, or, with `queue.order =
  "fairshare"`, priority then the users' usage per share (`corral.core.fairshare`) then submission;
- `within_limits`: of the jobs that could run now, those that the limits on running work let on,
  in that order: a job array's throttle (`corral.core.job_array`), then its user's limits
  (`corral.core.user_limits`); and the wait reasons of the others, which get no node and no boot.
"""

from __future__ import annotations

from collections.abc import Collection

from corral.core import fairshare, job_array, user_limits
from corral.core.index import SnapshotIndex
from corral.core.model import Job
from corral.core.settings import PolicySettings
from corral.core.snapshot import Snapshot


def in_order(index: SnapshotIndex, snapshot: Snapshot, settings: PolicySettings) -> list[Job]:
    queue = index.in_queue_order()
    queue_settings = settings.placement.queue
    if queue_settings.order == "fairshare":
        return fairshare.ordered(queue, snapshot.fairshare_usage, queue_settings.fairshare)
    return queue


def within_limits(
    queue: list[Job], index: SnapshotIndex, ended: Collection[int], settings: PolicySettings
) -> tuple[list[Job], dict[int, str]]:
    """`queue` itself when nothing limits it (the usual pass: no copy)."""
    held_back: dict[int, str] = {}
    if index.throttled_arrays and queue:
        queue, held_back = job_array.throttle(queue, index.throttled_arrays, ended)
    if queue and settings.users.limited():
        queue, over_limit = user_limits.hold_back(queue, index.jobs.values(), ended, settings.users)
        held_back.update(over_limit)
    return queue, held_back
