"""The `[sim]` section of corral's config: the simulated world, not the policy.

Everything that decides (placement, boots, drains, shutdowns, retries, capacity back-off) comes
from `policy`, exactly as in the live loop. This section only says what the simulated cloud and
workload do: how long boots take, when capacity runs out, when instances fail, and whether the
fleet is elastic or a fixed set of nodes. Every key has a default (docs/simulator.md).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from corral.core.units import Duration, Float, Int, SizeMiB


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # no nan or inf


class BootDelaySettings(_Strict):
    """Time from `create` until the instance's agent pairs. `lognormal` is the realistic one: most
    boots near the median, a long tail of slow ones."""

    distribution: Literal["fixed", "uniform", "lognormal"] = "lognormal"
    seconds: Duration = Field(90.0, description="fixed: the delay; lognormal: the median")
    low: Duration = Field(60.0, description="uniform: shortest delay")
    high: Duration = Field(180.0, description="uniform: longest delay")
    sigma: Float = Field(0.35, ge=0, description="lognormal: shape (standard deviation of the log)")
    never_pairs: Float = Field(0.0, ge=0, le=1, description="fraction of instances whose agent never pairs")
    never_pairs_by_type: dict[str, Annotated[Float, Field(ge=0, le=1)]] = Field(
        default_factory=dict,
        description=(
            "{name from instance_types = fraction}: that type's fraction instead of never_pairs (1: a type whose "
            "instances never pair, as with a broken AMI or an agent install that fails)"
        ),
    )

    def never_pairs_of(self, instance_type: str) -> float:
        return self.never_pairs_by_type.get(instance_type, self.never_pairs)

    @model_validator(mode="after")
    def _ordered(self) -> BootDelaySettings:
        if self.high < self.low:
            raise ValueError("high must not be less than low")
        return self


class Outage(_Strict):
    """An insufficient-capacity period: `create` of the type fails from `start` until `end`, times on
    the workload's own clock (its submit times, not from its first submission)."""

    instance_type: str = Field("*", description="an instance type name, or '*' for every type")
    start: Duration
    end: Duration

    @model_validator(mode="after")
    def _ordered(self) -> Outage:
        if self.end < self.start:
            raise ValueError("end must not be before start")
        return self


class CapacitySettings(_Strict):
    """Injected insufficient-capacity errors, by schedule or at random per instance type."""

    outages: list[Outage] = Field(
        default_factory=list,
        description=(
            "{instance_type = a name from instance_types or '*', start, end}: create fails in [start, end); the times "
            "are on the workload's own clock, that of its submit times, not from its first submission (an SWF log's "
            "first submission may be days after 0: see docs/simulator.md)"
        ),
    )
    outages_per_day: Float = Field(0.0, ge=0, description="random outages per instance type per simulated day")
    outage_duration: Duration = Field(1800.0, description="mean length of a random outage (exponential)")


class ScheduledFailure(_Strict):
    """At `at`, `count` running instances (of `instance_type`, or any) fail: their agents stop pinging.
    `at` is on the workload's own clock, like outages."""

    at: Duration
    count: Int = Field(1, ge=1)
    instance_type: str = "*"


class Wave(_Strict):
    """A wave of interruptions of one instance type (an EC2 spot pool running short), at a time of
    its own. See FailureSettings.waves."""

    at: Duration
    instance_type: str = Field(min_length=1, description="a name from instance_types, or '*' for every type")
    fraction: Float = Field(
        0.5, gt=0, lt=1, description="of the type's instances up throughout the wave, the share it takes"
    )
    length: Duration = Field(1800.0, gt=0, description="how long the wave lasts")


class FailureSettings(_Strict):
    per_instance_day: Float = Field(0.0, ge=0, description="random failures per instance per simulated day")
    per_instance_day_by_type: dict[str, Annotated[Float, Field(ge=0)]] = Field(
        default_factory=dict,
        description=(
            "{name from instance_types = failures per instance per day}: that type's rate instead of "
            "per_instance_day (spot instances, which the cloud takes back, or a flaky hardware class)"
        ),
    )

    notice_by_type: dict[str, Annotated[Duration, Field(ge=0)]] = Field(
        default_factory=dict,
        description=(
            "{name from instance_types = warning}: the cloud's notice before each random failure of that type "
            "(EC2 spot: '2m'); from then the node is drained, as corral's server drains a node whose agent hears "
            "a spot interruption notice"
        ),
    )

    def rate_per_day(self, instance_type: str) -> float:
        return self.per_instance_day_by_type.get(instance_type, self.per_instance_day)

    schedule: list[ScheduledFailure] = Field(
        default_factory=list,
        description=(
            "{at, count = 1, instance_type = '*' or a name from instance_types}: that many running instances fail "
            "at `at`, on the workload's own clock (as for capacity.outages)"
        ),
    )

    # Independent lifetimes alone make a type taken back now no likelier to be taken back again
    # soon; EC2 takes spot instances back in bursts when a pool runs short, which is what
    # policy.boot.interruption_backoff is for. Waves make such bursts, so that it can be measured.
    waves: list[Wave] = Field(
        default_factory=list,
        description=(
            "{at, instance_type = a name from instance_types or '*', fraction = 0.5, length = '30m'}: from `at` (on"
            " the workload's own clock) for `length`, the type's instances fail (a spot type's are taken back, with"
            " its notice) at a rate that takes `fraction` of those up throughout; instances booted meanwhile too"
        ),
    )
    waves_per_day_by_type: dict[str, Annotated[Float, Field(ge=0)]] = Field(
        default_factory=dict,
        description="{name from instance_types = waves per simulated day}: waves of that type at random times",
    )
    wave_fraction: Float = Field(
        0.5, gt=0, lt=1, description="a random wave's share of the type's instances up throughout it"
    )
    wave_length: Duration = Field(1800.0, gt=0, description="how long a random wave lasts")


class FixedNodes(_Strict):
    instance_type: str = Field(min_length=1, description="a name from instance_types")
    count: Int = Field(1, ge=1)


class FleetSettings(_Strict):
    """`elastic`: the policy boots and shuts down instances. `fixed`: `nodes` are there from the start
    and never boot or stop (an on-premises cluster or a Slurm partition); a failed one is repaired
    and back after `repair_time`."""

    mode: Literal["elastic", "fixed"] = Field(
        "elastic",
        description="elastic: the policy boots and stops instances; fixed: `nodes` only, never booted or stopped",
    )
    nodes: list[FixedNodes] = Field(
        default_factory=list,
        description="fixed fleet only (an error otherwise): {instance_type = a name from instance_types, count = 1}",
    )
    repair_time: Duration = Field(3600.0, description="fixed fleet: how long a failed node is away")

    @model_validator(mode="after")
    def _nodes_for_fixed(self) -> FleetSettings:
        if self.mode == "fixed" and not self.nodes:
            raise ValueError("a fixed fleet needs nodes (e.g. nodes = [{instance_type = 'm5.xlarge', count = 10}])")
        if self.mode != "fixed" and self.nodes:
            # Listed nodes would be silently unused: an elastic fleet boots what the policy decides.
            raise ValueError(
                f"nodes are used only by a fixed fleet: set mode = 'fixed' to run on them (mode is {self.mode!r};"
                " an elastic fleet boots instance_types as the policy decides)"
            )
        return self


class WorkloadSettings(_Strict):
    """How SWF jobs become corral job requests (docs/simulator.md); the command line overrides."""

    scale: Float = Field(1.0, gt=0, description="vcpus per SWF processor")
    time_scale: Float = Field(1.0, gt=0, description="multiplies submit times: 0.5 makes arrivals twice as dense")
    default_memory: SizeMiB = Field(1024, description="RAM per processor when the log has none")


class SimSettings(_Strict):
    seed: Int = 0
    tick: Duration | None = Field(
        None, description="seconds between reconcile passes while work is pending; default loop.interval"
    )
    start_latency: Duration = Field(0.0, description="from placement until the agent starts the attempt")
    horizon: Duration | None = Field(
        None,
        description=(
            "stop this long after the last submission even if work is left (jobs that can never run would keep "
            "the policy booting forever); default: the longest recorded run time plus 7 days"
        ),
    )
    explanations: bool = Field(
        False,
        description=(
            "have the placer explain every job it does not place, as the live loop does (for `on_pass` hooks "
            "and tests); a replay reads no explanations, and the decisions are the same either way"
        ),
    )
    boot_delay: BootDelaySettings = Field(default_factory=BootDelaySettings)
    capacity: CapacitySettings = Field(default_factory=CapacitySettings)
    failures: FailureSettings = Field(default_factory=FailureSettings)
    fleet: FleetSettings = Field(default_factory=FleetSettings)
    workload: WorkloadSettings = Field(default_factory=WorkloadSettings)

    @model_validator(mode="after")
    def _positive_tick(self) -> SimSettings:
        if self.tick is not None and self.tick <= 0:
            raise ValueError("tick must be more than 0")
        return self
