"""Fair share (Slurm's priority/multifactor fair-share factor, "classic"): with
`policy.placement.queue.order = "fairshare"`, queued jobs of equal priority go in the order of their
users' recent usage per share, the least first, then by submission.

- A run costs its user, per second, its billing rate: the weights (Slurm's TRESBillingWeights; by
  default 1 per vCPU) times what it holds on each node, times its nodes.
- Usage decays with a half-life (PriorityDecayHalfLife): a vCPU-second used one half-life ago
  counts half. A user's usage is the integral of their runs' rates, each second weighted by
  2^-(age / half_life), so it is exact however often it is brought up to date.
- Usage is brought up to date at each multiple of the calc period on the clock
  (PriorityCalcPeriod), by both shells alike (the live loop from the store's attempt spans, the
  simulator from its own), and the snapshot carries it (`Snapshot.fairshare_usage`): between two
  such times the order changes only as jobs come and go, so a pass at any time in between decides
  as one at every tick would.
- A user's place is usage / shares (sacctmgr's Fairshare=, `default_shares` for others); Slurm's
  factor 2^-(U/S), with U and S normalised over the users, orders them the same way, and is what
  `corral share` shows.

Pure: the shells give the spans, the times and the settings.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from corral.core.accounting import AttemptSpan
from corral.core.model import Job, Resources
from corral.placement.settings import FairShareSettings

# Usage older than this many half-lives is below a thousandth of its worth: a shell that starts
# reads the runs since then.
FORGOTTEN_AFTER_HALF_LIVES = 10


@dataclass(frozen=True, slots=True)
class UsageLedger:
    """Each user's decayed usage (billing-rate seconds) as of `as_of`."""

    as_of: float
    usage: Mapping[str, float] = field(default_factory=dict)


def calc_time(now: float, settings: FairShareSettings) -> float:
    """The latest multiple of the calc period at or before `now`: what usage is brought up to."""
    period = settings.calc_period
    return math.floor(now / period) * period


def remembered_from(calc_time: float, settings: FairShareSettings) -> UsageLedger:
    """An empty ledger as of FORGOTTEN_AFTER_HALF_LIVES half-lives before `calc_time`: where a shell
    with no ledger yet starts, reading the runs since then."""
    return UsageLedger(calc_time - FORGOTTEN_AFTER_HALF_LIVES * settings.half_life)


def billing_rate(request: Resources, node_count: int, settings: FairShareSettings) -> float:
    """What a second of a run costs its user: weights times the resources per node, times nodes."""
    weights = settings.weights
    per_node = (
        weights.get("cpu", 0.0) * request.vcpus
        + weights.get("ram", 0.0) * request.ram_mib / 1024
        + weights.get("gpu", 0.0) * request.gpus
        + weights.get("scratch", 0.0) * request.scratch_mib / 1024
    )
    return per_node * max(1, node_count)


def advance(
    ledger: UsageLedger, spans: Iterable[AttemptSpan], until: float, settings: FairShareSettings
) -> UsageLedger:
    """The ledger brought from `ledger.as_of` up to `until`: what it held, decayed, plus each span's
    run inside (as_of, until], decayed to `until`. `spans` must hold every run that went on at some
    time in that interval (a run that started before it was counted up to `as_of` already); a span
    outside it adds nothing."""
    since = ledger.as_of
    if until <= since:
        return ledger
    half_life = settings.half_life
    decay = 2.0 ** (-(until - since) / half_life) if math.isfinite(since) else 0.0
    usage = {user: value * decay for user, value in ledger.usage.items()}
    scale = half_life / math.log(2.0)
    for span in spans:
        start = max(span.started_at, since)
        end = until if span.finished_at is None else min(span.finished_at, until)
        if end <= start:
            continue
        rate = billing_rate(span.request, span.node_count, settings)
        if rate <= 0.0:
            continue
        # The integral of rate * 2^-((until - t) / half_life) over [start, end].
        worth = rate * scale * (2.0 ** (-(until - end) / half_life) - 2.0 ** (-(until - start) / half_life))
        usage[span.user] = usage.get(span.user, 0.0) + worth
    return UsageLedger(until, {user: value for user, value in usage.items() if value > 0.0})


def still_counting(spans: Iterable[AttemptSpan], until: float) -> list[AttemptSpan]:
    """Of the spans of ended runs a shell keeps between two calls of `advance`, those that went on
    after `until`: the next call counts the rest of them."""
    return [span for span in spans if span.finished_at is None or span.finished_at > until]


def shares_of(user: str, settings: FairShareSettings) -> float:
    return settings.shares.get(user, settings.default_shares)


def ordered(queue: Sequence[Job], usage: Mapping[str, float], settings: FairShareSettings) -> list[Job]:
    """`queue` in fair-share order: priority first, then usage per share (least first), then
    submission and id, as the queue is otherwise ordered."""
    per_share = {user: value / shares_of(user, settings) for user, value in usage.items()}
    return sorted(queue, key=lambda job: (-job.priority, per_share.get(job.user, 0.0), job.submitted_at, job.id))


@dataclass(frozen=True, slots=True)
class Totals:
    """The shares and usage that Slurm's classic factor normalises by: those of every user with
    open jobs, with usage or with shares set."""

    shares: float
    usage: float

    @classmethod
    def of(cls, users: Iterable[str], usage: Mapping[str, float], settings: FairShareSettings) -> Totals:
        explicit = settings.shares
        names = set(users).union(usage, explicit)  # every user in `shares` among them
        shares = sum(explicit.values()) + settings.default_shares * (len(names) - len(explicit))
        return cls(shares, sum(usage.values()))

    def norm_shares(self, user: str, settings: FairShareSettings) -> float:
        return shares_of(user, settings) / self.shares

    def norm_usage(self, user: str, usage: Mapping[str, float]) -> float:
        return usage.get(user, 0.0) / self.usage if self.usage > 0 else 0.0

    def factor(self, user: str, usage: Mapping[str, float], settings: FairShareSettings) -> float:
        """Slurm's classic fair-share factor 2^-(norm_usage / norm_shares): 1 unused, 0.5 at par."""
        return 2.0 ** (-self.norm_usage(user, usage) / self.norm_shares(user, settings))


@dataclass(frozen=True, slots=True)
class ShareRow:
    """One user's standing, as Slurm's sshare shows it."""

    user: str
    shares: float
    norm_shares: float  # their shares over all the listed users'
    usage: float  # decayed billing-rate seconds
    norm_usage: float  # their usage over all the listed users'
    factor: float  # Slurm's classic fair-share factor 2^-(norm_usage / norm_shares): 1 unused, 0.5 at par


def standing(users: Iterable[str], usage: Mapping[str, float], settings: FairShareSettings) -> list[ShareRow]:
    """Every user in `users`, in `usage` or in the settings' shares, the most deserving first."""
    names = sorted(set(users).union(usage, settings.shares))
    totals = Totals.of(names, usage, settings)
    rows = [
        ShareRow(
            user,
            shares_of(user, settings),
            totals.norm_shares(user, settings),
            usage.get(user, 0.0),
            totals.norm_usage(user, usage),
            totals.factor(user, usage, settings),
        )
        for user in names
    ]
    rows.sort(key=lambda row: (-row.factor, row.user))
    return rows
