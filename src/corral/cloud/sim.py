"""The `sim` cloud: the CloudDriver protocol over a virtual clock the caller supplies.

Instances boot after a delay drawn from the configured distribution, are billed per instance
type (price, granularity, minimum), and fail as configured: insufficient-capacity periods per type
(a schedule, or at random) make `create` raise the same `InsufficientCapacity` the EC2 driver
raises, instances fail at random, in waves (a spot pool running short) or on a schedule, and a
fraction of them (overall, or per type: a broken image) never pair. It decides nothing: what to do
about a failure is the core's business, exactly as with a real cloud.

Every random draw comes from a stream seeded by the simulation seed and the purpose (and instance
type), so a run is reproducible and one setting does not shift another's draws.
"""

from __future__ import annotations

import bisect
import builtins
import math
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from corral.cloud.base import (
    TAG_CLUSTER,
    TAG_INSTANCE_TYPE,
    TAG_NODE_ID,
    CloudError,
    CloudInstance,
    Ended,
    InsufficientCapacity,
    destroy_each,
)
from corral.core.accounting import billed_seconds
from corral.core.model import InstanceType
from corral.sim.settings import SimSettings

DAY = 86400.0


@dataclass(slots=True)
class SimInstance:
    instance: CloudInstance
    itype: InstanceType
    ready_at: float | None  # when its agent pairs; None: it never does
    fails_at: float  # math.inf: never
    terminated_at: float | None = None

    def billed_seconds(self, until: float) -> float:
        """Seconds billed from creation to termination (or `until`), rounded up to the billing
        granularity and no less than the billing minimum."""
        end = self.terminated_at if self.terminated_at is not None else until
        itype = self.itype
        return billed_seconds(self.instance.created_at, end, itype.billing_granularity, itype.billing_minimum)

    def cost(self, until: float) -> float:
        return self.billed_seconds(until) * self.itype.price_per_hour / 3600.0


@dataclass(slots=True)
class _OutageStream:
    """Random outages of one instance type: a Poisson process of starts, exponential lengths."""

    rng: random.Random
    rate: float  # per second
    mean_length: float
    next_start: float = 0.0
    current_end: float = -math.inf

    def __post_init__(self) -> None:
        self.next_start = self.rng.expovariate(self.rate) if self.rate > 0 else math.inf

    def active(self, now: float) -> bool:
        while self.next_start <= now:
            length = self.rng.expovariate(1.0 / self.mean_length) if self.mean_length > 0 else 0.0
            self.current_end = max(self.current_end, self.next_start + length)
            self.next_start += self.rng.expovariate(self.rate)
        return now < self.current_end


@dataclass(frozen=True, slots=True)
class _Wave:
    start: float
    end: float
    hazard: float  # failures per instance-second while it lasts


def _wave(start: float, fraction: float, length: float) -> _Wave:
    # The rate at which an instance up throughout the wave fails within it with probability `fraction`.
    return _Wave(start, start + length, -math.log1p(-fraction) / length)


class _WaveStream:
    """One instance type's waves in order of their starts: the scheduled ones, and a Poisson process
    of random ones, drawn as far as asked (so the same starts however the queries come)."""

    def __init__(self, scheduled: list[_Wave], seed: str, rate: float, fraction: float, length: float) -> None:
        self.waves = sorted(scheduled, key=lambda w: w.start)
        self.longest = max([length, *(w.end - w.start for w in scheduled)])
        self.hits = random.Random(f"{seed}:hits")  # which instances a wave takes, apart from when waves come
        rng = self._rng = random.Random(f"{seed}:starts")
        self._rate, self._fraction, self._length = rate, fraction, length
        self._next_start = rng.expovariate(rate) if rate > 0 else math.inf

    def from_(self, since: float) -> Iterator[_Wave]:
        """The waves that end after `since`, in order of their starts, for ever if they come at random."""
        i = bisect.bisect_left(self.waves, since - self.longest, key=lambda w: w.start)
        while True:
            while i == len(self.waves) or self._next_start <= self.waves[i].start:
                if self._next_start == math.inf:
                    return  # no random waves, and the scheduled ones are all past
                bisect.insort(self.waves, _wave(self._next_start, self._fraction, self._length), key=lambda w: w.start)
                self._next_start += self._rng.expovariate(self._rate)
            wave = self.waves[i]
            i += 1
            if wave.end > since:
                yield wave


@dataclass(slots=True)
class CloudStats:
    creates: int = 0
    destroys: int = 0
    capacity_errors: int = 0
    capacity_errors_by_type: dict[str, int] = field(default_factory=dict)
    failures: int = 0


class SimCloud:
    """A CloudDriver for simulations. `clock` returns the virtual time."""

    listing_lag = 0.0

    def __init__(
        self,
        instance_types: Iterable[InstanceType],
        settings: SimSettings,
        clock: Callable[[], float],
        cluster: str = "corral",
    ) -> None:
        self.types = {t.name: t for t in instance_types}
        self.settings = settings
        self.clock = clock
        self.cluster = cluster
        self.instances: dict[str, SimInstance] = {}
        self.stats = CloudStats()
        seed = settings.seed
        self._boot_rng = random.Random(f"{seed}:boot")
        self._fail_rng = random.Random(f"{seed}:failure")
        capacity = settings.capacity
        self._outages = {
            name: _OutageStream(
                random.Random(f"{seed}:outage:{name}"), capacity.outages_per_day / DAY, capacity.outage_duration
            )
            for name in self.types
        }
        # A stream per type, as for outages: giving one type a rate of its own (spot instances)
        # leaves the other types' failure times as they were.
        self._lifetimes = {
            name: (random.Random(f"{seed}:failure:{name}"), settings.failures.rate_per_day(name) / DAY)
            for name in self.types
        }
        # And a stream of waves per type that has any, which shifts no other draw.
        failures = settings.failures
        self._waves = {
            name: _WaveStream(
                [_wave(w.at, w.fraction, w.length) for w in failures.waves if w.instance_type in ("*", name)],
                f"{seed}:waves:{name}",
                failures.waves_per_day_by_type.get(name, 0.0) / DAY,
                failures.wave_fraction,
                failures.wave_length,
            )
            for name in self.types
            if failures.waves_per_day_by_type.get(name) or any(w.instance_type in ("*", name) for w in failures.waves)
        }
        # A stream per type named in boot_delay.never_pairs_by_type: its draws shift no boot delay.
        self._never_pairs_rngs = {
            name: random.Random(f"{seed}:never-pairs:{name}") for name in settings.boot_delay.never_pairs_by_type
        }
        self._next_id = 0

    # ---- the CloudDriver protocol --------------------------------------------------------------

    def create(self, instance_type: InstanceType, node_id: str, boot_token: str, tags: dict[str, str]) -> CloudInstance:
        now = self.clock()
        name = instance_type.name
        if self.out_of_capacity(name, now):
            self.stats.capacity_errors += 1
            self.stats.capacity_errors_by_type[name] = self.stats.capacity_errors_by_type.get(name, 0) + 1
            raise InsufficientCapacity(name, f"insufficient capacity for {name} (simulated)")
        self._next_id += 1
        instance_id = f"i-{self._next_id:08x}"
        all_tags = {**tags, TAG_CLUSTER: self.cluster, TAG_NODE_ID: node_id, TAG_INSTANCE_TYPE: name}
        instance = CloudInstance(instance_id, name, all_tags, created_at=now, state="pending")
        ready_at: float | None = now + self._boot_delay()
        fails_at = self.failure_at(name, now)
        if self._never_pairs(name):
            ready_at = None
        elif ready_at is not None and fails_at <= ready_at and not self.reclaims(name):
            ready_at = None  # it broke before its agent came up (one taken back is gone then instead)
        self.instances[instance_id] = SimInstance(instance, instance_type, ready_at, fails_at)
        self.stats.creates += 1
        return instance

    def list(self) -> list[CloudInstance]:
        return [s.instance for s in self.instances.values() if s.terminated_at is None]

    def check(self) -> str | None:
        return None  # nothing outside this machine to be refused by

    def why_gone(self, instance_ids: Sequence[str]) -> dict[str, Ended]:
        return {}

    def destroy(self, instance_id: str) -> None:
        sim = self.instances.get(instance_id)
        if sim is None or sim.terminated_at is not None:
            return
        sim.terminated_at = self.clock()
        sim.instance.state = "terminated"
        self.stats.destroys += 1

    def destroy_many(self, instance_ids: Sequence[str]) -> dict[str, CloudError]:
        return destroy_each(self.destroy, instance_ids)

    # ---- what the simulated world reads --------------------------------------------------------

    def out_of_capacity(self, name: str, now: float) -> bool:
        for outage in self.settings.capacity.outages:
            if outage.instance_type in ("*", name) and outage.start <= now < outage.end:
                return True
        stream = self._outages.get(name)
        return stream is not None and stream.rate > 0 and stream.active(now)

    def ready_at(self, instance_id: str) -> float | None:
        return self.instances[instance_id].ready_at

    def fails_at(self, instance_id: str) -> float:
        return self.instances[instance_id].fails_at

    def reclaims(self, instance_type: str) -> bool:
        """Whether the type's failures are the cloud taking its instances back (spot: a type given a
        notice in sim.failures.notice_by_type, even "0s"), rather than instances that break."""
        return instance_type in self.settings.failures.notice_by_type

    def reclaim(self, instance_id: str) -> None:
        """The cloud takes the instance back (a spot interruption): terminated, as EC2 terminates
        one, so it leaves the listing and its bill stops here."""
        sim = self.instances[instance_id]
        if sim.terminated_at is None:
            sim.terminated_at = self.clock()
            sim.instance.state = "terminated"
            self.stats.failures += 1

    def fail(self, instance_id: str) -> None:
        """The instance breaks: its agent stops; the cloud still bills it until it is destroyed."""
        sim = self.instances[instance_id]
        sim.instance.state = "broken"
        self.stats.failures += 1

    def failure_at(self, instance_type: str, now: float) -> float:
        """When an instance of the type, up from `now`, fails (math.inf: never): its exponential
        lifetime, or sooner, a wave it is up in (also for a fixed fleet's nodes, which are not cloud
        instances)."""
        rng, rate = self._lifetimes[instance_type]
        at = now + rng.expovariate(rate) if rate > 0 else math.inf
        stream = self._waves.get(instance_type)
        if stream is None:
            return at
        for wave in stream.from_(now):
            if wave.start >= at:
                break
            hit = max(wave.start, now) + stream.hits.expovariate(wave.hazard)
            at = min(at, hit) if hit < wave.end else at
        return at

    def choose(self, candidates: builtins.list[str], count: int) -> builtins.list[str]:
        """`count` of the given instance ids, drawn from the failure stream (for scheduled failures)."""
        ordered = sorted(candidates)
        return self._fail_rng.sample(ordered, min(count, len(ordered)))

    def _never_pairs(self, name: str) -> bool:
        """Whether an instance of the type booted now never pairs (its agent never comes up)."""
        spec = self.settings.boot_delay
        rng = self._never_pairs_rngs.get(name)
        if rng is None:
            return spec.never_pairs > 0 and self._boot_rng.random() < spec.never_pairs
        fraction = spec.never_pairs_by_type[name]
        return fraction >= 1 or (fraction > 0 and rng.random() < fraction)

    def _boot_delay(self) -> float:
        spec = self.settings.boot_delay
        if spec.distribution == "fixed":
            return float(spec.seconds)
        if spec.distribution == "uniform":
            return self._boot_rng.uniform(spec.low, spec.high)
        return spec.seconds * math.exp(self._boot_rng.gauss(0.0, spec.sigma)) if spec.sigma > 0 else float(spec.seconds)
