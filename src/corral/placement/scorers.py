"""Scorers: each gives every node a score in 0..1 for a job (higher is better); the engine adds them
up with the configured weights, so a negative weight turns a preference around.

Scales are fixed for the pass (the fleet's largest RAM, highest price, platform range, reboot
horizon), so a score means the same for every job of the pass and placing one job never moves the
scores of nodes it did not touch.

`base` is set for scorers whose score is the same for every job up to a constant (pack and spread:
"free RAM after placement" is "free RAM now" less the request). The engine keeps their weighted sum
per node and refreshes it only on the nodes a placement changes; `exact` gives the true value,
which is what explanations show.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from corral.placement.arrays import Floats, Ints, NodeArrays
from corral.placement.availability import Resource
from corral.placement.demand import Demand
from corral.placement.locality import Resolved
from corral.placement.settings import PlacementSettings

Index = slice | Ints | int
U64 = npt.NDArray[np.uint64]
_MASK64 = (1 << 64) - 1


class PassScores:
    """Per-pass, per-node scores that depend on node attributes only."""

    def __init__(self, arrays: NodeArrays, settings: PlacementSettings, now: float) -> None:
        self.arrays = arrays
        self._settings = settings
        self.now = now
        self.refleet()

    def refleet(self) -> None:
        """The attribute scores, from the nodes' facts and the fleet's scales (over the nodes
        listed, see FleetFacts), and the pass's noise afresh."""
        self._renew_noise(self.now)
        a = self.arrays
        versions = len(a.platform_versions)
        platform = a.platform_rank / (versions - 1) if versions > 1 else (a.platform_rank >= 0).astype(np.float64)
        self.platform: Floats = np.where(a.platform_rank >= 0, platform, 0.0)

        self._reboot_dates = bool(np.isfinite(a.next_reboot).any())
        # Without reboot dates every node scores 1, as `_reboot` works out at length.
        self.reboot: Floats = self._reboot(self.now) if self._reboot_dates else np.ones(a.n)
        known = ~np.isnan(a.hardware)
        scaled = known if a.facts.listed is None else known & a.facts.listed
        if scaled.any():
            low, high = float(a.hardware[scaled].min()), float(a.hardware[scaled].max())
            spread = (a.hardware - low) / (high - low) if high > low else np.ones(a.n)
            self.hardware: Floats = np.where(known, spread, 0.0)
        else:
            self.hardware = np.zeros(a.n)

        self.failures: Floats = 1.0 - np.minimum(1.0, a.failures / self._settings.failure_saturation)

    def _reboot(self, now: float) -> Floats:
        # Farther is better up to `reboot_horizon`, beyond which a reboot is as good as none. A fixed
        # horizon rather than the fleet's range: one node due in an hour must not score like a node
        # with no reboot planned just because it is the only one with a date. Dates in the past are
        # ignored (ops may not have updated them): such a node scores like one with no date.
        a, horizon = self.arrays, self._settings.reboot_horizon
        future = a.next_reboot > now  # NaN compares False
        ahead = np.where(future, a.next_reboot - now, horizon)
        result: Floats = np.minimum(1.0, ahead / horizon)
        return result

    def _renew_noise(self, now: float) -> None:
        # Made when first read: a pass that ranks no node needs none of it.
        self.seed = pass_seed(now, self._settings.tie_break_seed)
        self._noise: Floats | None = None
        self._noise_values: list[float] | None = None
        self._last_job, self._last_slot = -1, 0
        self._slot_offsets: list[float | None] = [None] * NOISE_SLOTS

    @property
    def noise(self) -> Floats:
        """Every node's tie-break noise for this pass, in 0..1."""
        if self._noise is None:
            self._noise = _unit_interval(_splitmix(self.arrays.facts.id_hashes ^ np.uint64(self.seed)))
        return self._noise

    def noise_at(self, idx: Ints) -> Floats:
        """`noise` at the nodes `idx` (made for those alone while the whole is not needed)."""
        if self._noise is not None:
            result: Floats = self._noise[idx]
            return result
        return _unit_interval(_splitmix(self.arrays.facts.id_hashes[idx] ^ np.uint64(self.seed)))

    def noise_list(self, idx: Ints) -> list[float]:
        """`noise` at the nodes `idx`, as Python floats (the same values, worked out for those alone)."""
        if self._noise is not None:
            values = self.noise_values
            return [values[i] for i in idx.tolist()]
        seed = self.seed
        return [_unit_interval_int(_splitmix_int(h ^ seed)) for h in self.arrays.facts.id_hashes[idx].tolist()]

    def slot_offset(self, slot: int) -> float:
        """The offset that rotates every node's noise for the jobs of `slot`."""
        offset = self._slot_offsets[slot]
        if offset is None:
            offset = self._slot_offsets[slot] = _unit_interval_int(_splitmix_int(slot ^ self.seed))
        return offset

    def renew(self, now: float) -> bool:
        """The scores of the pass at `now` for the same nodes; True if the job-independent
        attribute scores changed (reboot dates count down), not only the tie-break noise."""
        if now == self.now:
            return False
        self.now = now
        self._renew_noise(now)
        if not self._reboot_dates:
            return False
        self.reboot = self._reboot(now)
        return True

    @property
    def noise_values(self) -> list[float]:
        """`noise` as Python floats, for reading one node at a time."""
        if self._noise_values is None:
            self._noise_values = self.noise.tolist()
        return self._noise_values

    def job_slot(self, job_id: int) -> int:
        """Jobs fall into NOISE_SLOTS slots, each with its own tie order, so the engine can keep
        each slot's noisy scores ready instead of adding noise for every job."""
        if job_id != self._last_job:
            self._last_job, self._last_slot = job_id, _splitmix_int((job_id & _MASK64) ^ self.seed) % NOISE_SLOTS
        return self._last_slot

    def job_noise(self, job_id: int) -> float:
        """The offset that rotates every node's noise for this job."""
        return self.slot_offset(self.job_slot(job_id))


NOISE_SLOTS = 16  # enough tie orders to share equal nodes out; few enough to stay in cache


def pass_seed(now: float, extra: int) -> int:
    """Deterministic: the same pass (same `now`) breaks ties the same way, in the loop and in replay."""
    return (int(round(now * 1000.0)) * 0xBF58476D1CE4E5B9 + extra * 0x94D049BB133111EB) & _MASK64


def _splitmix(x: U64) -> U64:
    with np.errstate(over="ignore"):
        x = x + _GOLDEN  # a new array: the caller's is left as it was
        x ^= x >> _SHIFT_30
        x *= _MIX_1
        x ^= x >> _SHIFT_27
        x *= _MIX_2
        x ^= x >> _SHIFT_31
        return x


# `_splitmix`'s constants as NumPy scalars, made once (it runs for a ranking's near nodes, pass after pass).
_GOLDEN, _MIX_1, _MIX_2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_SHIFT_30, _SHIFT_27, _SHIFT_31, _SHIFT_11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)


def _splitmix_int(x: int) -> int:
    """The same mix as `_splitmix`, on one Python int (cheaper than a one-element array)."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _unit_interval_int(x: int) -> float:
    return (x >> 11) * (1.0 / (1 << 53))


def _unit_interval(x: U64) -> Floats:
    result: Floats = (x >> _SHIFT_11).astype(np.float64) * (1.0 / (1 << 53))
    return result


Exact = Callable[[PassScores, Demand, Index, "Resolved | None", float], Floats]
Base = Callable[[PassScores, Index], Floats]
One = Callable[[PassScores, Demand, int, "Resolved | None", float], float]
BaseOne = Callable[[PassScores, int], float]


@dataclass(frozen=True, slots=True)
class Scorer:
    name: str
    seed: str
    exact: Exact
    base: Base | None = None  # see the module docstring
    static: bool = False  # exact does not depend on the job at all
    # `exact` for one node, in Python floats: the same IEEE operations in the same order, so the
    # same value, without NumPy's per-call cost (for the few nodes an explanation shows).
    one: One | None = None
    base_one: BaseOne | None = None  # `base` for one node, the same way (for commits)


def _free_ram_now(s: PassScores, idx: Index) -> Floats:
    result: Floats = s.arrays.room[Resource.RAM][idx] / s.arrays.ram_scale
    return result


def _pack_base(s: PassScores, idx: Index) -> Floats:
    result: Floats = 1.0 - _free_ram_now(s, idx)
    return result


def _pack_base_one(s: PassScores, i: int) -> float:
    return 1.0 - float(s.arrays.room[_RAM, i]) / s.arrays.ram_scale


def _free_ram_now_one(s: PassScores, i: int) -> float:
    return float(s.arrays.room[_RAM, i]) / s.arrays.ram_scale


def _pack(s: PassScores, d: Demand, idx: Index, loc: Resolved | None, noise: float) -> Floats:
    free_after = (s.arrays.room[Resource.RAM][idx] - d.amounts[Resource.RAM]) / s.arrays.ram_scale
    result: Floats = 1.0 - free_after
    return result


def _pack_one(s: PassScores, d: Demand, i: int, loc: Resolved | None, noise: float) -> float:
    return 1.0 - (float(s.arrays.room[_RAM, i]) - d.amounts[_RAM]) / s.arrays.ram_scale


def _spread(s: PassScores, d: Demand, idx: Index, loc: Resolved | None, noise: float) -> Floats:
    result: Floats = (s.arrays.room[Resource.RAM][idx] - d.amounts[Resource.RAM]) / s.arrays.ram_scale
    return result


def _spread_one(s: PassScores, d: Demand, i: int, loc: Resolved | None, noise: float) -> float:
    return (float(s.arrays.room[_RAM, i]) - d.amounts[_RAM]) / s.arrays.ram_scale


_RAM = int(Resource.RAM)  # a plain int indexes faster than the enum
_GPU = int(Resource.GPU)


def _pack_gpus_base(s: PassScores, idx: Index) -> Floats:
    result: Floats = 1.0 - s.arrays.room[Resource.GPU][idx] / s.arrays.gpu_scale
    return result


def _pack_gpus_base_one(s: PassScores, i: int) -> float:
    return 1.0 - float(s.arrays.room[_GPU, i]) / s.arrays.gpu_scale


def _pack_gpus(s: PassScores, d: Demand, idx: Index, loc: Resolved | None, noise: float) -> Floats:
    """Least free GPUs after placement: a job that asks for none keeps off nodes whose GPUs are free
    (a GPU instance it held would keep GPU jobs waiting, and is the dearest to keep up), and GPU
    jobs fill partly used GPU nodes first (pack's rule, for the scarce resource)."""
    free_after = (s.arrays.room[Resource.GPU][idx] - d.amounts[Resource.GPU]) / s.arrays.gpu_scale
    result: Floats = 1.0 - free_after
    return result


def _pack_gpus_one(s: PassScores, d: Demand, i: int, loc: Resolved | None, noise: float) -> float:
    return 1.0 - (float(s.arrays.room[_GPU, i]) - d.amounts[_GPU]) / s.arrays.gpu_scale


def _balanced(s: PassScores, d: Demand, idx: Index, loc: Resolved | None, noise: float) -> Floats:
    """1 - the spread (std) of the node's use fractions after placement, over cpu and RAM and over
    disk and GPUs when the job asks for them (kube-scheduler's balanced allocation)."""
    a = s.arrays
    rows = [Resource.CPU, Resource.RAM] + [r for r in (Resource.DISK, Resource.GPU) if d.amounts[r] > 0]
    fractions = []
    for r in rows:
        cap = a.capacity[r, idx]
        used_after = cap - a.room[r, idx] + d.amounts[r]
        fractions.append(np.clip(np.divide(used_after, cap, out=np.ones_like(cap), where=cap > 0), 0.0, 1.0))
    # Fractions lie in 0..1, so their standard deviation is at most 0.5.
    result: Floats = 1.0 - 2.0 * np.stack(fractions).std(axis=0)
    return result


def _price(s: PassScores, d: Demand, idx: Index, loc: Resolved | None, noise: float) -> Floats:
    """The cheapest price per job in the fleet divided by this node's: 1 for the cheapest, 0.5 for
    twice its price. Price per job is the hourly price over how many copies of the job the node's
    capacity holds. A ratio rather than a fraction of the highest price, so one expensive GPU type
    does not squash the differences between the ordinary ones."""
    per_job = _price_per_job(s.arrays, d, slice(None))
    holds = np.isfinite(per_job)
    cheapest = float(per_job[holds].min()) if holds.any() else 0.0
    result: Floats = np.where(holds[idx], (cheapest + _CENT) / (per_job[idx] + _CENT), 0.0)
    return result


_CENT = 1e-6  # keeps free (on-premises) nodes comparable instead of dividing by zero


def _price_per_job(a: NodeArrays, d: Demand, idx: Index) -> Floats:
    copies = np.full(a.capacity[0, idx].shape, np.inf)
    for r in Resource:
        if d.amounts[r] > 0:
            copies = np.minimum(copies, np.floor(a.capacity[r, idx] / d.amounts[r] + 1e-9))
    with np.errstate(divide="ignore"):
        result: Floats = np.where(copies >= 1, a.price[idx] / np.where(copies >= 1, copies, 1.0), np.inf)
    return result


def _attribute(field: str) -> Exact:
    def exact(s: PassScores, d: Demand, idx: Index, loc: Resolved | None, noise: float) -> Floats:
        result: Floats = getattr(s, field)[idx]
        return result

    return exact


def _attribute_base(field: str) -> Base:
    def base(s: PassScores, idx: Index) -> Floats:
        result: Floats = getattr(s, field)[idx]
        return result

    return base


def _locality(s: PassScores, d: Demand, idx: Index, loc: Resolved | None, noise: float) -> Floats:
    graded = loc.score() if loc is not None else None
    if graded is None:
        return np.zeros(s.arrays.capacity[0][idx].shape)
    result: Floats = graded[idx]
    return result


def _locality_one(s: PassScores, d: Demand, i: int, loc: Resolved | None, noise: float) -> float:
    graded = loc.score() if loc is not None else None
    return 0.0 if graded is None else float(graded[i])


def _random(s: PassScores, d: Demand, idx: Index, loc: Resolved | None, noise: float) -> Floats:
    result: Floats = (s.noise[idx] + noise) % 1.0
    return result


def _random_one(s: PassScores, d: Demand, i: int, loc: Resolved | None, noise: float) -> float:
    # Python's float % and NumPy's remainder are both fmod corrected to the divisor's sign.
    return (s.noise_values[i] + noise) % 1.0


SCORERS: dict[str, Scorer] = {
    sc.name: sc
    for sc in (
        Scorer("pack", "sort-min-ram", _pack, _pack_base, one=_pack_one, base_one=_pack_base_one),
        Scorer("spread", "sort-max-ram", _spread, _free_ram_now, one=_spread_one, base_one=_free_ram_now_one),
        Scorer("pack-gpus", "", _pack_gpus, _pack_gpus_base, one=_pack_gpus_one, base_one=_pack_gpus_base_one),
        Scorer("balanced", "", _balanced),
        Scorer("platform", "RFD 24 newest platform", _attribute("platform"), _attribute_base("platform"), True),
        Scorer("reboot", "RFD 24 next_reboot_date", _attribute("reboot"), _attribute_base("reboot"), True),
        Scorer("hardware", "RFD 24 hardware class", _attribute("hardware"), _attribute_base("hardware"), True),
        Scorer("locality", "soft-filter-locality-hints", _locality, one=_locality_one),
        Scorer("price", "", _price),
        Scorer("random", "sort-random", _random, one=_random_one),
        Scorer("failures", "", _attribute("failures"), _attribute_base("failures"), True),
    )
}
