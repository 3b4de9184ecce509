"""A job's request as the engine reads it: normalised, hashable, with keys for sharing work.

Jobs with the same `static_key` share the result of the filters that do not change within a pass
(state, reservations, categories, platform, traits); jobs with the same `key` are interchangeable
for placement: they share their filter work within a pass, and once one of them finds no node in a
pass the others need not look (capacity only shrinks within a pass).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from corral.core.model import Job, LocalityHints, Resources
from corral.placement.attributes import values

TraitSpec = tuple[tuple[str, tuple[str, ...]], ...]


def _spec(traits: dict[str, str | list[str]]) -> TraitSpec:
    if not traits:
        return ()
    return tuple(sorted((key, tuple(sorted(values(value)))) for key, value in traits.items()))


@functools.lru_cache(maxsize=4096)
def _vector(amounts: tuple[float, float, float, float]) -> npt.NDArray[np.float64]:
    vector = np.array(amounts, dtype=np.float64)
    vector.flags.writeable = False
    return vector


@dataclass(frozen=True, slots=True)
class Hints:
    near: tuple[str, ...]
    far: tuple[str, ...]
    strict: bool
    level: str  # "server" or "rack"

    @classmethod
    def of(cls, hints: LocalityHints | None) -> Hints | None:
        if hints is None or not (hints.near or hints.far):
            return None
        level = "rack" if hints.level == "rack" else "server"
        return cls(tuple(hints.near), tuple(hints.far), hints.strict, level)


@dataclass(frozen=True, slots=True)
class Demand:
    job_id: int
    resources: Resources
    node_count: int = 1
    traits: TraitSpec = ()
    forbidden: TraitSpec = ()
    min_platform: str | None = None
    capped: bool = False
    reservation: str = ""
    hints: Hints | None = None
    time_limit: float | None = None
    # When the job would end if it started now, given only while some node has an admin reservation
    # that starts later (the reservation-start filter reads it); part of `key`, so that requests
    # equal but for it are not taken for one.
    horizon: float | None = None
    # Slurm's --exclusive: only a node that runs nothing takes it, and nothing else while it runs.
    exclusive: bool = False
    amounts: tuple[float, float, float, float] = field(init=False, compare=False, hash=False, repr=False)
    static_key: tuple[object, ...] = field(init=False, compare=False, hash=False, repr=False)
    key: tuple[object, ...] = field(init=False, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        r = self.resources
        amounts = (float(r.vcpus), float(r.ram_mib), float(r.scratch_mib), float(r.gpus))
        # Computed once: the engine looks these up for every job, often many times.
        static_key = (self.traits, self.forbidden, self.min_platform, self.reservation)
        set_ = object.__setattr__
        set_(self, "amounts", amounts)
        set_(self, "static_key", static_key)
        key = (static_key, amounts, self.node_count, self.capped, self.hints, self.exclusive)
        set_(self, "key", key if self.horizon is None else (*key, self.horizon))

    @property
    def vector(self) -> npt.NDArray[np.float64]:
        """The request as a read-only array (cpu, ram, disk, gpu), for backfill: made when first
        asked for, since most jobs never need it, and shared by every request of the same amounts."""
        return _vector(self.amounts)

    def ending_by(self, horizon: float) -> Demand:
        """This request from a job that would end at `horizon` (see `horizon`)."""
        return replace(self, horizon=horizon)

    @classmethod
    def of(cls, job: Job) -> Demand:
        return cls(  # positional (in field order): cheaper than keywords, once per job
            job.id,
            job.resources,
            max(1, job.node_count),
            _spec(job.traits),
            _spec(job.forbidden_traits),
            job.min_platform,
            job.cpu_capped,
            job.reservation,
            Hints.of(job.locality),
            job.time_limit,
            None,
            job.exclusive,
        )
