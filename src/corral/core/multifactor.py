"""Slurm's multifactor job priority (priority/multifactor), of two factors: with
`policy.placement.queue.order = "multifactor"`, queued jobs of equal priority go in the order of
their scores, the highest first, then by submission.

- The score is `weight_age` × the age factor + `weight_fairshare` × the fair-share factor
  (PriorityWeightAge, PriorityWeightFairshare).
- The age factor is the time a job has waited since it could first run (its submission, or the
  start it asked for) over `max_age` (PriorityMaxAge), at most 1: a job that waits long enough
  climbs past any user's standing, which fair share alone never lets it do.
- The fair-share factor is Slurm's classic 2^-(U/S) of the job's user (`corral.core.fairshare`):
  usage and shares normalised over the users with usage, with shares set, or with open jobs.
- Both as of the last calc time (PriorityCalcPeriod, `fairshare.calc_period`): between two such
  times the order changes only as jobs come and go, as under fair share alone.

Pure: the shells give the usage, the time and the settings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from corral.core import fairshare
from corral.core.model import Job
from corral.placement.settings import QueueSettings


@dataclass(frozen=True, slots=True)
class Factors:
    """One queued job's factors and score, as Slurm's sprio shows them."""

    age: float  # 0 just submitted, 1 at max_age and after
    fairshare: float  # its user's fair-share factor: 1 unused, 0.5 at par
    score: float  # weight_age * age + weight_fairshare * fairshare


def age_factor(job: Job, calc_time: float, max_age: float) -> float:
    waited = calc_time - max(job.submitted_at, job.not_before or 0.0)
    return min(1.0, max(0.0, waited / max_age))


def scored(
    queue: Sequence[Job], users: Iterable[str], usage: Mapping[str, float], calc_time: float, settings: QueueSettings
) -> dict[int, Factors]:
    """The factors of each job in `queue`; `users`, the users of every open job, and those with
    usage or shares, are whom the fair-share factor is normalised over."""
    weights = settings.multifactor
    totals = fairshare.Totals.of(users, usage, settings.fairshare)
    standing: dict[str, float] = {}
    factors = {}
    for job in queue:
        age = age_factor(job, calc_time, weights.max_age)
        share = standing.get(job.user)
        if share is None:
            share = standing[job.user] = totals.factor(job.user, usage, settings.fairshare)
        factors[job.id] = Factors(age, share, weights.weight_age * age + weights.weight_fairshare * share)
    return factors


def ordered(
    queue: Sequence[Job], users: Iterable[str], usage: Mapping[str, float], now: float, settings: QueueSettings
) -> list[Job]:
    """`queue` in multifactor order: priority first, then score (highest first), then submission
    and id, as the queue is otherwise ordered."""
    factors = scored(queue, users, usage, fairshare.calc_time(now, settings.fairshare), settings)
    return sorted(queue, key=lambda job: (-job.priority, -factors[job.id].score, job.submitted_at, job.id))
