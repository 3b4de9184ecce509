"""Node lifetimes, and the cost gate between a running node and a new instance (elastic fleets).

An instance is paid for until its last job ends. A job placed on a running node whose work is
expected to end before the job's own keeps that node up longer: the job costs the node's whole
price for that extension, not the share it occupies. A new instance of the cheapest type that
holds the job costs that type's price for the job's run plus its boot. The gate keeps a job off
the nodes where the first costs more than `max_extension` times the second; the boot planner then
boots an instance for it.

Run times are not known, only time limits, which users over-estimate by a wide and varying
factor. So a run is taken to last a share of its limit, each share in `run_fractions` equally
likely, for the job and (independently) for each node's work, and the extension is the expected
one over those pairs. Node k's work under share f ends at the latest `start + f * limit` of its
jobs (and not before `now`); work without a time limit (and no `queue.default_time_limit`) never
ends, so a job on that node extends nothing.

Pure: from the snapshot's attempts and jobs, the node arrays and `now`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from corral.core.accounting import billed_seconds
from corral.core.model import Attempt, InstanceType, Job, Resources
from corral.placement.arrays import ANY_OF, MAX_OF, SUM_OF, Bools, Floats, Ints, NodeArrays
from corral.placement.demand import Demand
from corral.placement.settings import CostSettings, PlacementSettings
from corral.placement.work import WorkLedger


def node_ends(
    arrays: NodeArrays,
    attempts: Iterable[Attempt],
    jobs: Mapping[int, Job],
    now: float,
    fractions: Floats,
    default_limit: float | None = None,
) -> Floats:
    """(shares x nodes): when each node's running work ends if every job on it runs that share of
    its time limit; `now` for a node without work (or whose work is past it), inf for work without
    a limit. A placer keeps these in its WorkLedger between passes; this is the one-off."""
    ledger = WorkLedger([float(f) for f in fractions], default_limit)
    ledger.update(arrays.ids, arrays.index, [None] * arrays.n, attempts, jobs)
    return ledger.ends(now)


def expected_extension(ends: Floats, now: float, limit: float, fractions: Floats) -> Floats:
    """Per node (columns of `ends`): the mean, over pairs of shares (the node's, the job's), of how
    far a job of time limit `limit` started `now` runs past the node's work."""
    job_end = now + fractions * limit
    # (job share, node share, node): summed over the node's shares, then over the job's, each in
    # order (the same sums as one job share at a time).
    past = job_end[:, None, None] - ends[None, :, :]
    np.maximum(past, 0.0, out=past)
    total: Floats = SUM_OF(SUM_OF(past, axis=1), axis=0)
    result: Floats = total / (len(fractions) * len(fractions))
    return result


def gate_settings(settings: PlacementSettings) -> CostSettings | None:
    """The cost gate's settings where it can apply: on, and capacity not forced bounded (None)."""
    if settings.cost.max_extension > 0 and settings.queue.capacity != "bounded":
        return settings.cost
    return None


def mean_fraction(settings: CostSettings) -> float:
    return _mean(tuple(settings.run_fractions))


@functools.cache
def _mean(fractions: tuple[float, ...]) -> float:
    return float(np.array(fractions, dtype=np.float64).mean())


@dataclass(frozen=True, slots=True)
class Bill:
    """How a new instance of a type is billed: its hourly price, the granularity its time is
    rounded up to and the least it bills (seconds), as `corral.core.accounting.billed_seconds`."""

    price_per_hour: float
    granularity: float = 1.0
    minimum: float = 0.0

    @classmethod
    def of(cls, instance_type: InstanceType) -> Bill:
        return cls(instance_type.price_per_hour, instance_type.billing_granularity, instance_type.billing_minimum)


NO_INSTANCE = Bill(math.inf)  # no type that holds the job can be booted


def _instance_cost(bill: Bill, limit: float, run_fractions: tuple[float, ...], boot_time: float) -> float:
    """Expected cost (USD) of a new instance billed as `bill` for a job of time limit `limit`
    whose run is taken to last each of `run_fractions` of it alike, boot included. A new instance
    bills its rounding and minimum for the job alone: with hourly billing a 5-minute job's instance
    costs an hour, and a running node may keep it up for much more than those 5 minutes."""
    billed = sum(
        billed_seconds(0.0, share * limit + boot_time, bill.granularity, bill.minimum) for share in run_fractions
    )
    return bill.price_per_hour * billed / len(run_fractions) / 3600.0


def paid_after_boot(granularity: float, minimum: float, boot_time: float) -> float:
    """How long a new instance is paid for once booted: its first billing period (its minimum, or
    an hour with hourly billing) less its boot; 0 with per-second billing past a 60 s minimum."""
    return max(0.0, max(minimum, granularity if granularity > 1.0 else 0.0) - boot_time)


def costly_before_start(
    price: float, longest: float, paid_for: float, limit: float, new_bill: Bill, settings: CostSettings
) -> bool:
    """The cost gate's test for a node whose work has not started: an instance still booting, or
    one the boot planner is about to boot, with the longest time limit of the jobs already promised
    to it (0: none, inf: one without a limit) and how long it is paid for once up (`paid_after_boot`).
    Their runs and the job's all start when the node pairs, so only the limits count.
    The boot planner asks it, so that it does not promise a job room the gate will refuse once the
    node is up (the job would then wait for a second boot)."""
    key = (settings.max_extension, tuple(settings.run_fractions), settings.boot_time)
    return _costly_before_start(price, longest, paid_for, limit, new_bill, key)


@functools.lru_cache(maxsize=1 << 16)  # the planner asks again and again, pass after pass
def _costly_before_start(
    price: float,
    longest: float,
    paid_for: float,
    limit: float,
    new_bill: Bill,
    key: tuple[float, tuple[float, ...], float],
) -> bool:
    max_extension, run_fractions, boot_time = key
    if max_extension <= 0 or not math.isfinite(new_bill.price_per_hour):
        return False
    allowed = max_extension * _instance_cost(new_bill, limit, run_fractions, boot_time)
    # The job keeps the node up at most for its own expected run: enough to admit most nodes.
    if price * _mean(run_fractions) * limit / 3600.0 <= allowed:
        return False
    fractions = np.array(run_fractions, dtype=np.float64)
    ends = np.maximum(fractions * longest, paid_for)[:, None]
    extension = float(expected_extension(ends, 0.0, limit, fractions)[0])
    return price * extension / 3600.0 > allowed


Offers = list[tuple[Resources, Bill]]


def offers(instance_types: Sequence[InstanceType], unavailable: Mapping[str, float], now: float) -> Offers:
    """What the boot planner may boot now, as (capacity, bill): every type not in capacity
    back-off, cheapest first (the first offer that holds a request is the cheapest one that does)."""
    return sorted(
        ((t.capacity, Bill.of(t)) for t in instance_types if unavailable.get(t.name, 0.0) <= now),
        key=lambda offer: offer[1].price_per_hour,
    )


@dataclass(slots=True)
class GatePrices:
    """Per request, how a new instance would be billed and the most a node may cost the job: the
    same for every pass while the offers (types and back-offs) and the gate's settings are."""

    new_bill: dict[tuple[float, float, float, float], Bill] = field(default_factory=dict)
    allowed: dict[tuple[tuple[float, float, float, float], float | None], float] = field(default_factory=dict)
    settings: tuple[object, ...] = ()  # what `allowed` was worked out with

    def under(self, settings: CostSettings, default_limit: float | None) -> GatePrices:
        """These prices, forgetting the allowed costs if the gate's settings changed."""
        key = (settings.max_extension, tuple(settings.run_fractions), settings.boot_time, default_limit)
        if key != self.settings:
            self.allowed.clear()
            self.settings = key
        return self


class CostGate:
    """Built once per pass (lazily, by the placer, when an elastic job first needs it). `offers`:
    see `offers` (a placer keeps them while the types and the back-offs in force are the same)."""

    def __init__(
        self,
        arrays: NodeArrays,
        ends: Floats,
        offers: Offers,
        now: float,
        settings: CostSettings,
        default_limit: float | None = None,
        prices: GatePrices | None = None,
    ) -> None:
        """`prices`: what earlier gates of the same offers and settings worked out, to go on with."""
        self.arrays = arrays
        self.now = now
        self.settings = settings
        self.default_limit = default_limit
        self.fractions = np.array(settings.run_fractions, dtype=np.float64)
        self.mean_fraction = mean_fraction(settings)
        # When the work on each node of `arrays` ends (WorkLedger.latest_ends: not yet held at
        # `now`, which costs a pass over every node; the gate reads the few it looks at), copied
        # before a placement changes them.
        self.ends = ends
        self._own_ends = False
        self._offers = offers
        prices = (prices if prices is not None else GatePrices()).under(settings, default_limit)
        self._new_bill, self._allowed = prices.new_bill, prices.allowed
        self._top_price = float(MAX_OF(arrays.price)) if arrays.n else 0.0
        self._paid_until: Floats | None = None

    @property
    def paid_until(self) -> Floats:
        """Per node, until when it is paid for already (not before `now`): a job that ends by then
        keeps it up at no cost. With per-second billing that is `now` (or the end of a young node's
        billing minimum); with hourly billing the end of its current hour."""
        if self._paid_until is None:
            facts = self.arrays.facts
            age = np.maximum(self.now - facts.created_at, 0.0)
            granularity = facts.billing_granularity
            rounded = np.where(granularity > 1.0, np.ceil(age / np.maximum(granularity, 1.0) - 1e-9) * granularity, age)
            paid = facts.created_at + np.maximum(rounded, facts.billing_minimum)
            self._paid_until = np.maximum(paid, self.now)
        return self._paid_until

    @functools.cached_property
    def paid_hours_end(self) -> float:
        """The first end of a node's paid period (with billing granularity above a second) after
        which `paid_until` moves on: until then a node's expected extension can only grow."""
        periodic = self.arrays.facts.billing_granularity > 1.0
        return float(self.paid_until[periodic].min()) if periodic.any() else math.inf

    def limit(self, demand: Demand) -> float | None:
        return demand.time_limit if demand.time_limit is not None else self.default_limit

    def new_bill(self, demand: Demand) -> Bill:
        """How the type the boot planner would boot for the job bills (NO_INSTANCE: none)."""
        bill = self._new_bill.get(demand.amounts)
        if bill is None:
            request = demand.resources
            bill = next((bill for capacity, bill in self._offers if request.fits_in(capacity)), NO_INSTANCE)
            self._new_bill[demand.amounts] = bill
        return bill

    def new_instance_cost(self, demand: Demand) -> float:
        """Expected cost (USD) of a new instance of the cheapest fitting type for the job's run,
        boot included; inf when no type can be booted for it or the job has no time limit."""
        limit = self.limit(demand)
        bill = self.new_bill(demand)
        if limit is None or not math.isfinite(bill.price_per_hour):
            return math.inf
        return _instance_cost(bill, limit, tuple(self.settings.run_fractions), self.settings.boot_time)

    def allowed(self, demand: Demand) -> float:
        """The most a node may cost the job (the gate's ratio times a new instance; inf: any)."""
        # Asked for every elastic job a pass looks at; the jobs of a queue share a few requests.
        key = (demand.amounts, demand.time_limit)
        allowed = self._allowed.get(key)
        if allowed is None:
            allowed = self._allowed[key] = self.settings.max_extension * self.new_instance_cost(demand)
        return allowed

    def extension_cost(self, demand: Demand, among: Ints | None = None) -> Floats:
        """Per node (of `among`, if given): expected cost (USD) of the time the job keeps the node
        up beyond its work."""
        limit = self.limit(demand)
        every = slice(None) if among is None else among
        if limit is None:
            return np.zeros(self.arrays.n if among is None else len(among))
        ends = np.maximum(self.ends[:, every], self.paid_until[every])
        hours: Floats = expected_extension(ends, self.now, limit, self.fractions) / 3600.0
        result: Floats = self.arrays.price[every] * hours
        return result

    def _at_stake(self, demand: Demand) -> tuple[float, float, float] | None:
        """The job's time limit, the most a node may cost it, and the hours of its expected run;
        None when the gate keeps it off no node (off, no limit, no type to boot instead, or no
        node priced high enough to cost more)."""
        limit = self.limit(demand)
        if self.settings.max_extension <= 0 or limit is None:
            return None
        allowed = self.allowed(demand)
        if not math.isfinite(allowed):
            return None
        # A node can cost at most its price for the job's whole expected run: most nodes are
        # ruled in by that alone, without the per-node expectation.
        most = self.mean_fraction * limit / 3600.0
        if self._top_price * most <= allowed:
            return None
        return limit, allowed, most

    def verdict(self, demand: Demand, node: int) -> bool | None:
        """Whether `exclude` keeps the job off `node`: its expected extension there costs clearly
        more (True) or clearly less (False) than the job may cost; None when too close to tell
        (ask `exclude`). Worked out for the one node in Python floats, with a margin for the
        order in which the array form sums; cheaper than `exclude` for a node or two (the job's
        best node, the nodes changed since a refusal)."""
        at_stake = self._at_stake(demand)
        if at_stake is None:
            return False
        limit, allowed, _ = at_stake
        now = self.now
        paid = float(self.paid_until[node])
        ends = [end if end > paid else paid for end in self.ends[:, node].tolist()]
        total = 0.0
        for share in self.settings.run_fractions:
            job_end = now + share * limit
            total += sum([job_end - end if job_end > end else 0.0 for end in ends])
        cost = float(self.arrays.price[node]) * (total / len(ends) ** 2 / 3600.0)
        if cost < allowed * (1.0 - 1e-9):
            return False
        if cost > allowed * (1.0 + 1e-9):
            return True
        return None

    def exclude(self, demand: Demand, fitting: Callable[[], Ints | None] | None = None) -> Bools | None:
        """Nodes on which the job costs more than a new instance would (None: no such node, or no
        type not in back-off holds it), looking only at the nodes `fitting()` gives, if it gives
        any (those the job fits: the others are out anyway; asked for only when the prices do
        not settle it). Whether an instance may be booted for the job at all (capacity mode,
        `max_instances`) is the placer's `Capacity.bounded_for`."""
        at_stake = self._at_stake(demand)
        if at_stake is None:
            return None
        _, allowed, most = at_stake
        among = fitting() if fitting is not None else None
        if among is not None and (not len(among) or float(MAX_OF(self.arrays.price[among])) * most <= allowed):
            return None
        over = self.extension_cost(demand, among) > allowed
        if not ANY_OF(over):
            return None
        if among is None:
            return over
        costly = np.zeros(self.arrays.n, dtype=bool)
        costly[among[over]] = True
        return costly

    def placed(self, nodes: Iterable[int], demand: Demand) -> None:
        """A job placed this pass now holds its nodes up to its own end."""
        limit = self.limit(demand)
        end = np.full(len(self.fractions), math.inf) if limit is None else self.now + self.fractions * limit
        if not self._own_ends:
            self.ends, self._own_ends = self.ends.copy(), True
        # Not before `now` (limits are positive): a node's end as held at `now` is raised alike.
        for i in nodes:
            np.maximum(self.ends[:, i], end, out=self.ends[:, i])
