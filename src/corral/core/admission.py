"""Which queued jobs a pass goes on with, and in which order, for both passes (`plan_pass` and the
Slurm batch pass, `corral.core.batch`):

- `in_order`: the queue in the order `queue.order` asks for: priority then submission ("priority");
  submission alone ("submit"); priority, then the users' usage per share, then submission
  ("fairshare", `corral.core.fairshare`); priority, then the jobs' scores of age and fair share,
  then submission ("multifactor", `corral.core.multifactor`);
- `within_limits`: of the jobs that could run now, those that the limits on running work let on,
  in that order: a job array's throttle (`corral.core.job_array`), then its user's limits
  (`corral.core.user_limits`); and the wait reasons of the others, which get no node and no boot.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from corral.core import fairshare, job_array, multifactor, user_limits
from corral.core.index import SnapshotIndex
from corral.core.model import Job
from corral.core.settings import PolicySettings
from corral.core.snapshot import Snapshot
from corral.placement.settings import QueueSettings


def in_order(index: SnapshotIndex, snapshot: Snapshot, settings: PolicySettings, now: float) -> list[Job]:
    users = (job.user for job in index.jobs.values())
    return ordered(index.in_queue_order(), users, snapshot.fairshare_usage, now, settings.placement.queue)


def ordered(
    queue: list[Job], users: Iterable[str], usage: Mapping[str, float], now: float, settings: QueueSettings
) -> list[Job]:
    """`queue`, given in queue order (priority, submission, id), in the order `settings.order` asks
    for; `users` (those of every open job: read only by "multifactor") and `usage` as the snapshot
    has them. `queue` itself under "priority"."""
    if settings.order == "submit":
        return sorted(queue, key=lambda job: (job.submitted_at, job.id))
    if settings.order == "fairshare":
        return fairshare.ordered(queue, usage, settings.fairshare)
    if settings.order == "multifactor" and queue:
        return multifactor.ordered(queue, users, usage, now, settings)
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
