"""Policy settings: what the core's decisions depend on, validated by pydantic.

Durations are seconds; in a config file they may also be written "90s", "5m", "1h30m".
Everything has a default, so an empty config is a working one.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from corral.core.limits import SpendLimits
from corral.core.model import OnNodeFailure
from corral.core.units import Duration, Float, Int, parse_duration
from corral.placement.settings import PlacementSettings


def parse_time_limit_grace(value: Any) -> Any:
    """A duration, or "unlimited" (Slurm's `OverTimeLimit=UNLIMITED`): time limits are not enforced."""
    if isinstance(value, str) and value.strip().lower() == "unlimited":
        return None
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise ValueError(f"{exc}; or 'unlimited' to never end a job at its time limit") from None


TimeLimitGrace = Annotated[float | None, BeforeValidator(parse_time_limit_grace)]


class _Strict(BaseModel):
    # No nan or inf: a non-finite number in a config is a mistake, never a "never" (which a large
    # finite value says, where it makes sense).
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class RetrySettings(_Strict):
    """Seed 001 retry: TempFail (infrastructure) retries with exponential back-off up to a count;
    PermFail (the command's non-zero exit) is final unless the job asks for retries."""

    max_temp_failures: Int = Field(5, ge=0, description="TempFails before the job fails; 0 = never retry")
    backoff_initial: Duration = 5.0
    backoff_factor: Float = Field(2.0, ge=1.0)
    backoff_max: Duration = 600.0
    on_node_failure: OnNodeFailure = Field(
        "requeue",
        description="what a lost node does to its jobs (seed 002 §5.4.6, the system level): requeue (a"
        " temporary failure, retried), cancel, or hold (requeued, held until `corral release`); a job's"
        " own on_node_failure wins",
    )

    def backoff(self, temp_failures: int) -> float:
        """Delay before the next try after the n-th temporary failure (n >= 1)."""
        delay = self.backoff_initial * self.backoff_factor ** max(0, temp_failures - 1)
        return float(min(delay, self.backoff_max))


class LifecycleSettings(_Strict):
    """Seed 000 node manager policy inputs."""

    boot_grace: Duration = Field(600.0, gt=0, description="time an instance may take to pair before it is shut down")
    idle_grace: Duration = Field(60.0, description="idle time before an idle node is drained")
    ping_stale: Duration = Field(
        60.0, gt=0, description="a node whose last ping is older is down; at least two of cloud.ping_interval"
    )
    # Billing window (seed 000): with per-hour billing, shut down only in the last `shutdown_window`
    # of a paid period (the rest is already paid for). Per-second billing keeps the window open.
    shutdown_window: Duration = Field(
        300.0, description="with coarse billing, the part at the end of each paid period when shutdown is allowed"
    )
    min_instances: Int = Field(
        0,
        ge=0,
        description="nodes kept up: never drained below this, and booted up to it (the cheapest type) without"
        " waiting for work; at most policy.boot.max_instances",
    )
    max_node_age: Duration | None = Field(
        None,
        gt=0,
        description="Karpenter's expireAfter: a node this old takes no new work, and is shut down once empty (any"
        " billing window, min_instances notwithstanding) and replaced if the queue needs it; none: never. Only where"
        " instances can be booted (policy.boot.max_instances > 0)",
    )


class BootSettings(_Strict):
    max_instances: Int = Field(8, ge=0, description="instances (booting or running) at most")
    max_boots_per_pass: Int = Field(
        16, ge=1, description="instances booted in one pass at most; a larger gang boots over several passes"
    )
    capacity_backoff: Duration = Field(
        300.0, description="after an insufficient-capacity error, how long that instance type is not tried"
    )
    interruption_backoff: Duration = Field(
        300.0,
        ge=0,
        description="after a spot interruption notice (the cloud takes an instance back), how long that instance"
        " type is not booted: its spot capacity is short (Karpenter's unavailable offerings); 0: boot it again at once",
    )
    boot_failure_backoff_max: Duration = Field(
        3600.0,
        description="an instance that did not pair within lifecycle.boot_grace backs its type off for"
        " capacity_backoff, doubled with each such failure of the type in a row (a pairing of the type ends the"
        " row), up to this (at least capacity_backoff)",
    )
    max_vcpus: Float | None = Field(
        None,
        gt=0,
        description="vCPUs of the instances (booting or running) at most (Karpenter's limits.cpu); none: no cap",
    )
    max_cost_per_hour: Float | None = Field(
        None,
        gt=0,
        description="the list prices per hour of the instances (booting or running) at most, in the instance types'"
        " currency: a boot that would pass it waits; none: no cap",
    )

    def spend_limits(self) -> SpendLimits:
        return SpendLimits(self.max_vcpus, self.max_cost_per_hour)


class DispatchSettings(_Strict):
    dispatcher_stale: Duration = Field(60.0, gt=0, description="claims of a dispatcher silent this long are released")
    start_timeout: Duration = Field(120.0, gt=0, description="an assigned attempt that has not started is lost")
    node_failure_reserve_time: Duration = Field(
        0.0,
        ge=0,
        description="after a transient failure on a node that stays up (an attempt not started on it within"
        " start_timeout), the node takes no new work for this long (seed 002 §5.4.5, Moab's"
        " NODEFAILURERESERVETIME); 0 = off",
    )
    time_limit_grace: TimeLimitGrace = Field(
        0.0,
        description="a running job is ended (failed, TIMEOUT; event job.timeout) once it has run its time limit"
        " plus this long (Slurm's OverTimeLimit, default 0 there too); 'unlimited' = never end a job at its"
        " limit. queue.default_time_limit is only a placement assumption and ends nothing",
    )
    kill_invalid_depend: bool = Field(
        True,
        description="a queued job whose dependency can never be satisfied (afterok on a job that failed or was"
        " cancelled, afternotok on one that completed) is cancelled, reason DependencyNeverSatisfied (Slurm's"
        " kill_invalid_depend); false: it stays queued with that reason until cancelled",
    )

    def enforced_limit(self, time_limit: float | None) -> float | None:
        """When corral ends a run with this time limit (seconds of run, or a time when given the
        end of a limit): the limit plus the grace; None when either is none."""
        return None if time_limit is None or self.time_limit_grace is None else time_limit + self.time_limit_grace


class UserLimits(_Strict):
    max_submitted_jobs: Int | None = Field(
        None,
        ge=1,
        description="Slurm's MaxSubmitJobsPerUser: a user's open jobs (queued, claimed or running, an array's"
        " tasks each) at most; a submission past it is refused whole (at submission: the simulator refuses none)",
    )
    max_running_jobs: Int | None = Field(
        None, ge=1, description="Slurm's MaxJobsPerUser: a user's jobs claimed or running at once at most"
    )
    max_running_vcpus: Float | None = Field(
        None,
        gt=0,
        description="Slurm's MaxTRESPerUser=cpu: vCPUs a user's claimed or running jobs hold at most (a job"
        " holds its vcpus times its nodes)",
    )


class UserLimitSettings(UserLimits):
    """Limits on each user's running work (corral.core.user_limits), none by default, and on their
    open jobs, 100,000 by default: a user's loop of submissions would otherwise grow the store and
    every pass without end."""

    max_submitted_jobs: Int | None = Field(
        100_000,
        ge=1,
        description="Slurm's MaxSubmitJobsPerUser: a user's open jobs (queued, claimed or running, an array's"
        " tasks each) at most; a submission past it is refused whole (at submission: the simulator refuses none)",
    )

    by_user: dict[str, UserLimits] = Field(
        default_factory=dict,
        description="per user: their limits instead of the ones above (a limit left out: none for them)",
    )

    def of(self, user: str) -> UserLimits:
        return self.by_user.get(user, self)

    def limited(self) -> bool:
        """Whether any user has a limit (a pass asks nothing otherwise)."""
        return any(
            limits.max_running_jobs is not None or limits.max_running_vcpus is not None
            for limits in (self, *self.by_user.values())
        )


class PolicySettings(_Strict):
    retry: RetrySettings = Field(default_factory=RetrySettings)
    lifecycle: LifecycleSettings = Field(default_factory=LifecycleSettings)
    boot: BootSettings = Field(default_factory=BootSettings)
    dispatch: DispatchSettings = Field(default_factory=DispatchSettings)
    users: UserLimitSettings = Field(default_factory=UserLimitSettings)
    # The placement engine's own settings (filters, scorers, availability, queue order): see
    # corral.placement.settings and docs/placement.md.
    placement: PlacementSettings = Field(default_factory=PlacementSettings)
