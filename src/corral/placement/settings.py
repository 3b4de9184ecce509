"""Settings of the placement engine: which filters run in which order, scorer weights, the
availability policy, queue order and backfill. Everything has a default.

This module must not import corral.core.settings: that module embeds PlacementSettings, so the
import would be circular. Durations are parsed with corral.core.units directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from corral.core import categories
from corral.core.units import Float, Int, parse_duration
from corral.placement.availability import RESOURCE_NAMES, AvailabilityPolicy, parse_availability

Duration = Annotated[float, BeforeValidator(parse_duration)]

# Default order follows seed 003's table; the last column is the name used there.
FILTER_NAMES: tuple[str, ...] = (
    "state",  # hard-filter-running, hard-filter-invalid-servers
    "reserved",  # hard-filter-reserved, hard-filter-headnode
    "reservation",  # admin reservations (seed 002 §5.4.2, mrsvctl)
    "reservation-start",  # a reservation that starts later: only jobs that end by its start (Slurm's StartTime)
    "category",  # node categories that block work (seed 002 §5.4.2)
    "max-jobs",  # hard-filter-vm-count
    "capness",  # hard-filter-capness
    "exclusive",  # hard-filter-exclusive: Slurm's --exclusive, a job alone on its nodes
    "platform",  # hard-filter-platform-versions
    "traits",  # hard-filter-traits
    "overprovision",  # hard-filter-overprovision-ratios
    "min-ram",  # hard-filter-min-ram
    "min-cpu",  # hard-filter-min-cpu
    "min-disk",  # hard-filter-min-disk
    "gpus",
    "locality",  # soft-filter-locality-hints (hard when strict)
)

SCORER_NAMES: tuple[str, ...] = (
    "pack",  # sort-min-ram: least free RAM after placement
    "spread",  # sort-max-ram: most free RAM after placement
    "pack-gpus",  # least free GPUs after placement: jobs without GPUs keep off free GPUs
    "balanced",  # even use of cpu and RAM (kube-scheduler's NodeResourcesBalancedAllocation)
    "platform",  # newest platform version (RFD 24)
    "reboot",  # farthest next reboot date (RFD 24)
    "hardware",  # hardware class priority (RFD 24)
    "locality",  # soft locality hints
    "price",  # lowest price per job
    "random",  # tie-break (sort-random)
    "failures",  # fewer recent failures
)

# The seed's open question ranks "newer platform, then later reboot, then min RAM"; the weights
# keep packing first and let the others decide between nodes that pack about equally well.
DEFAULT_WEIGHTS: dict[str, float] = {
    "pack": 1.0,
    "pack-gpus": 1.0,
    "platform": 0.5,
    "reboot": 0.25,
    "hardware": 0.25,
    "locality": 1.0,
    "failures": 0.5,
    "random": 0.0001,
}
# Ranking instance types for a boot: the cheapest per job, then the tightest fit.
DEFAULT_BOOT_WEIGHTS: dict[str, float] = {"price": 1.0, "pack": 0.1}

# Seed 002 §5.4.2 categories under which a node takes no batch work.
DEFAULT_BLOCKING_CATEGORIES: tuple[str, ...] = categories.SEED_BLOCKING


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


FAIRSHARE_WEIGHT_NAMES = ("cpu", "ram", "gpu", "scratch")


class FairShareSettings(_Strict):
    """Slurm's fair-share factor (priority/multifactor, classic): used by queue.order = 'fairshare' and
    'multifactor'. See corral.core.fairshare."""

    half_life: Duration = Field(7 * 86400.0, gt=0, description="PriorityDecayHalfLife: usage this long ago counts half")
    calc_period: Duration = Field(
        300.0,
        gt=0,
        description="PriorityCalcPeriod: usage is brought up to date, and the order can change, at each multiple"
        " of this on the clock",
    )
    shares: dict[str, Float] = Field(
        default_factory=dict,
        description="per user: their shares (sacctmgr's Fairshare=); a user with twice the shares may use twice"
        " as much before their jobs go behind another's",
    )
    default_shares: Float = Field(1.0, gt=0, description="the shares of a user not in `shares`")
    weights: dict[str, Float] = Field(
        default_factory=lambda: {"cpu": 1.0},
        description="TRESBillingWeights: what a second of a run costs its user, per vCPU (cpu), GiB of RAM (ram),"
        " GPU (gpu) and GiB of scratch (scratch), times its nodes",
    )

    @field_validator("shares")
    @classmethod
    def _shares_positive(cls, value: dict[str, float]) -> dict[str, float]:
        for user, shares in value.items():
            if not shares > 0:
                raise ValueError(f"shares of {user!r} must be more than 0, not {shares}")
        return value

    @field_validator("weights")
    @classmethod
    def _known_weights(cls, value: dict[str, float]) -> dict[str, float]:
        for name, weight in value.items():
            if name not in FAIRSHARE_WEIGHT_NAMES:
                raise ValueError(f"unknown weight {name!r}: one of {', '.join(FAIRSHARE_WEIGHT_NAMES)}")
            if weight < 0:
                raise ValueError(f"weight {name!r} must not be negative, not {weight}")
        if not any(value.values()):
            raise ValueError("at least one weight must be more than 0, or no run costs anything")
        return value


class MultifactorSettings(_Strict):
    """Slurm's multifactor job priority (priority/multifactor): used by queue.order = 'multifactor'.
    See corral.core.multifactor."""

    weight_age: Float = Field(
        1000.0, ge=0, description="PriorityWeightAge: what a job that has waited max_age adds to its score"
    )
    weight_fairshare: Float = Field(
        10000.0,
        ge=0,
        description="PriorityWeightFairshare: what a user with no usage adds to their jobs' scores (the fair-share"
        " factor, 1 unused and 0.5 at par, times this; usage as in fairshare)",
    )
    max_age: Duration = Field(
        7 * 86400.0, gt=0, description="PriorityMaxAge: the wait at which the age factor stops growing (reaches 1)"
    )

    @model_validator(mode="after")
    def _some_weight(self) -> MultifactorSettings:
        if self.weight_age == 0 and self.weight_fairshare == 0:
            raise ValueError("weight_age and weight_fairshare are both 0: at least one must be more than 0")
        return self


class QueueSettings(_Strict):
    """Which job gets free room when capacity is bounded."""

    order: Literal["priority", "submit", "fairshare", "multifactor"] = Field(
        "priority",
        description="priority then submit time; submit time alone; fairshare: priority, then the users who"
        " used least for their shares (see fairshare), then submit time; or multifactor: priority, then a score"
        " of the job's age and its user's fair-share factor (see multifactor), then submit time",
    )
    fairshare: FairShareSettings = Field(default_factory=FairShareSettings)
    multifactor: MultifactorSettings = Field(default_factory=MultifactorSettings)
    backfill: Literal["easy", "strict-fifo", "none"] = Field(
        "easy",
        description=(
            "easy: the first blocked job gets a reservation, later jobs start only if they do not delay it; "
            "strict-fifo: the first blocked job blocks every later one; "
            "none: every job that fits starts (large jobs may starve)"
        ),
    )
    capacity: Literal["auto", "bounded", "elastic"] = Field(
        "auto",
        description=(
            "bounded: reservations always apply; elastic: a job that does not fit waits for a boot and holds "
            "nothing back; auto: bounded for a job when no instance can be booted for it"
        ),
    )
    max_job_test: Int = Field(500, ge=1, description="jobs examined after the first blocked one (bf_max_job_test)")
    default_time_limit: Duration | None = Field(
        None,
        description="assumed run time of jobs without a time limit, for placement only (it ends no job);"
        " none: they never end for backfill",
    )
    node_down_delay: Duration | None = Field(
        None,
        ge=0,
        description="seed 002 §5.4.5 NODEDOWNSTATEDELAYTIME: backfill's reservations count a down node that"
        " comes back (a fixed fleet's node under repair) as free from now + this, a time that floats with now;"
        " none: never (such a node's room is not counted). The simulator's fixed fleet only: no down node comes"
        " back in the live loop (it is shut down)",
    )

    def reads_usage(self) -> bool:
        """Whether the order reads the users' fair-share usage (`Snapshot.fairshare_usage`)."""
        return self.order in ("fairshare", "multifactor")


class CostSettings(_Strict):
    """Whether an elastic job goes on a running node or gets a new instance: the cheaper of the two.

    A job placed on a running node whose work is expected to end before the job's own keeps that
    node up (and paid for) longer; a job that ends earlier rides along for free. Run times are
    unknown, so they are taken as a share of the time limit, each share in `run_fractions` equally
    likely (users over-estimate: real logs show shares spread over 0..1)."""

    max_extension: Float = Field(
        1.0,
        ge=0.0,
        description=(
            "an elastic job skips a running node when the expected cost of keeping that node up longer for it is "
            "more than this many times the cost of a new instance for it; 0: off (any node that fits will do)"
        ),
    )
    run_fractions: list[Float] = Field(
        default_factory=lambda: [0.1, 0.3, 0.5, 0.7, 0.9],
        min_length=1,
        description="shares of its time limit a job may run, each equally likely",
    )
    boot_time: Duration = Field(
        90.0, ge=0.0, description="what a new instance is paid for before it runs the job (its boot)"
    )

    @field_validator("run_fractions")
    @classmethod
    def _fractions(cls, value: list[float]) -> list[float]:
        if any(not 0.0 < f <= 1.0 for f in value):
            raise ValueError("run fractions must lie in (0, 1]")
        return sorted(value)


class PlacementSettings(_Strict):
    filters: list[str] = Field(
        default_factory=lambda: list(FILTER_NAMES), description="filters in the order they run; omit one to skip it"
    )
    weights: dict[str, Float] = Field(
        default_factory=lambda: dict(DEFAULT_WEIGHTS),
        description="scorer weights for placing on running nodes; a negative weight reverses a scorer. A table"
        " given replaces the defaults: a scorer left out (locality, random: the tie-break) weighs 0",
    )
    boot_weights: dict[str, Float] = Field(
        default_factory=lambda: dict(DEFAULT_BOOT_WEIGHTS),
        description="scorer weights for ranking instance types (a table given replaces the defaults)",
    )
    availability: str = Field("COMBINED", description="seed 002 syntax, e.g. 'DEDICATED:PROC COMBINED:MEM'")
    overprovision: dict[str, Float] = Field(
        default_factory=dict,
        description="per resource (cpu, ram, disk, gpu): requests may reach capacity times this ratio",
    )
    max_jobs_per_node: Int | None = Field(None, ge=1, description="default when a node has no max_jobs attribute")
    blocked_roles: list[str] = Field(
        default_factory=lambda: ["head", "headnode"],
        description="nodes whose `role` attribute is one of these take no work",
    )
    blocking_categories: list[str] = Field(
        default_factory=lambda: list(DEFAULT_BLOCKING_CATEGORIES),
        description="nodes whose `category` attribute is one of these take no work (seed 002 categories);"
        " any `*-failure` or `*-maintenance` category takes none, listed or not",
    )
    reboot_horizon: Duration = Field(
        30 * 86400.0, gt=0, description="a planned reboot farther away than this scores as if none were planned"
    )
    failure_saturation: Float = Field(3.0, gt=0, description="recent failures at which the failure score is 0")
    tie_break_seed: Int = Field(0, description="mixed with the pass time into the tie-break term")
    explain_sample: Int = Field(5, ge=1, description="node ids listed per filter in an explanation")
    explain_top: Int = Field(3, ge=1, description="nodes whose scores are kept for a placed job")
    queue: QueueSettings = Field(default_factory=QueueSettings)
    cost: CostSettings = Field(default_factory=CostSettings)

    @field_validator("filters")
    @classmethod
    def _known_filters(cls, value: list[str]) -> list[str]:
        for name in value:
            if name not in FILTER_NAMES:
                raise ValueError(f"unknown filter {name!r} (known: {', '.join(FILTER_NAMES)})")
        if len(set(value)) != len(value):
            raise ValueError("a filter is listed twice")
        return value

    @field_validator("weights", "boot_weights")
    @classmethod
    def _known_scorers(cls, value: dict[str, float]) -> dict[str, float]:
        for name in value:
            if name not in SCORER_NAMES:
                raise ValueError(f"unknown scorer {name!r} (known: {', '.join(SCORER_NAMES)})")
        return value

    @field_validator("blocking_categories")
    @classmethod
    def _as_nodes_carry_them(cls, value: list[str]) -> list[str]:
        # A node's category is stored so spelt (corral node N category=HardwareFailure): a list in
        # Moab's spelling would match none.
        return [categories.normalise(name) for name in value]

    @field_validator("availability")
    @classmethod
    def _valid_availability(cls, value: str) -> str:
        return parse_availability(value).describe()

    @field_validator("overprovision", mode="before")
    @classmethod
    def _resource_ratios(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        ratios: dict[str, float] = {}
        for key, ratio in value.items():
            resource = RESOURCE_NAMES.get(str(key).upper())
            if resource is None:
                raise ValueError(f"unknown resource {key!r} (use cpu, ram, disk or gpu)")
            if not isinstance(ratio, int | float) or isinstance(ratio, bool) or ratio <= 0:
                raise ValueError(f"overprovision ratio for {key} must be a number above 0")
            ratios[resource.label] = float(ratio)
        return ratios

    def availability_policy(self) -> AvailabilityPolicy:
        return parse_availability(self.availability)


def coerce(value: object) -> PlacementSettings:
    """PlacementSettings from PlacementSettings, a PolicySettings (its `placement`, which may still
    be the raw dict of an older config object), a plain dict, or None (the defaults)."""
    if isinstance(value, PlacementSettings):
        return value
    if value is None:
        return PlacementSettings()
    if isinstance(value, Mapping):
        return PlacementSettings.model_validate(dict(value))
    inner = getattr(value, "placement", None)
    if inner is not None:
        return coerce(inner)
    raise TypeError(f"not placement settings: {type(value).__name__}")
