"""The `sim` cloud driver: the CloudDriver protocol over a virtual clock, with injected faults."""

from __future__ import annotations

import statistics

import pytest

from corral.cloud.base import TAG_NODE_ID, CloudDriver, InsufficientCapacity
from corral.cloud.sim import SimCloud
from corral.core.model import GiB, InstanceType
from corral.sim.settings import SimSettings

SMALL = InstanceType("small", 2, 4 * GiB, 0.36)
HOURLY = InstanceType("hourly", 2, 4 * GiB, 0.36, billing_granularity=3600, billing_minimum=0)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def cloud(**settings: object) -> tuple[SimCloud, Clock]:
    clock = Clock()
    return SimCloud([SMALL, HOURLY], SimSettings.model_validate(settings), clock), clock


def test_it_is_a_cloud_driver_that_tags_lists_and_destroys() -> None:
    driver, clock = cloud()
    assert isinstance(driver, SimCloud)
    typed: CloudDriver = driver
    instance = typed.create(SMALL, "n-1", "token", {"owner": "test"})
    assert instance.tags[TAG_NODE_ID] == "n-1" and instance.tags["owner"] == "test"
    assert [i.id for i in typed.list()] == [instance.id]
    clock.now = 100
    typed.destroy(instance.id)
    typed.destroy(instance.id)  # already gone: no error
    assert typed.list() == [] and driver.stats.destroys == 1


@pytest.mark.parametrize(
    ("boot_delay", "check"),
    [
        ({"distribution": "fixed", "seconds": 45}, lambda d: set(d) == {45}),
        ({"distribution": "uniform", "low": 30, "high": 90}, lambda d: min(d) >= 30 and max(d) <= 90),
        ({"distribution": "lognormal", "seconds": 90, "sigma": 0.4}, lambda d: 80 < statistics.median(d) < 100),
    ],
)
def test_boot_delays_follow_the_configured_distribution(boot_delay: dict[str, object], check: object) -> None:
    driver, _ = cloud(boot_delay=boot_delay)
    delays = [driver.ready_at(driver.create(SMALL, f"n-{i}", "t", {}).id) for i in range(400)]
    assert callable(check) and check(delays)


def test_a_scheduled_outage_raises_insufficient_capacity_for_its_type_only() -> None:
    driver, clock = cloud(capacity={"outages": [{"instance_type": "small", "start": 100, "end": 200}]})
    clock.now = 150
    with pytest.raises(InsufficientCapacity) as error:
        driver.create(SMALL, "n-1", "t", {})
    assert error.value.instance_type == "small"
    driver.create(HOURLY, "n-2", "t", {})
    clock.now = 200
    driver.create(SMALL, "n-3", "t", {})
    assert driver.stats.capacity_errors == 1 and driver.stats.creates == 2


def test_random_outages_follow_the_seed_and_cover_about_the_expected_share_of_time() -> None:
    def outage_pattern(seed: int) -> list[bool]:
        driver, _ = cloud(seed=seed, capacity={"outages_per_day": 24, "outage_duration": 600})
        return [driver.out_of_capacity("small", t * 60.0) for t in range(20_000)]

    pattern = outage_pattern(1)
    assert pattern == outage_pattern(1) and pattern != outage_pattern(2)
    # One outage an hour lasting 10 minutes on average: out about 1 - exp(-1/6) of the time.
    assert 0.1 < sum(pattern) / len(pattern) < 0.22


def test_billing_rounds_up_to_the_granularity_and_charges_the_minimum() -> None:
    driver, clock = cloud()
    short = driver.create(SMALL, "n-1", "t", {})
    hourly = driver.create(HOURLY, "n-2", "t", {})
    clock.now = 10
    driver.destroy(short.id)
    clock.now = 3700
    driver.destroy(hourly.id)
    assert driver.instances[short.id].billed_seconds(clock.now) == 60  # the 60 s minimum
    assert driver.instances[hourly.id].billed_seconds(clock.now) == 7200
    assert driver.instances[hourly.id].cost(clock.now) == pytest.approx(0.72)


def test_instances_that_break_before_pairing_never_pair() -> None:
    driver, _ = cloud(failures={"per_instance_day": 86400 / 10}, boot_delay={"distribution": "fixed", "seconds": 60})
    readies = [driver.ready_at(driver.create(SMALL, f"n-{i}", "t", {}).id) for i in range(200)]
    # A failure every 10 s on average: almost all break within their 60 s boot.
    assert sum(r is None for r in readies) > 180


def test_a_type_with_its_own_failure_rate_fails_at_that_rate_and_the_others_at_theirs() -> None:
    """Spot instances: the cloud takes one type back often, the others keep the global rate (0)."""
    driver, _ = cloud(failures={"per_instance_day_by_type": {"small": 86400 / 10}})
    small = [driver.fails_at(driver.create(SMALL, f"s-{i}", "t", {}).id) for i in range(200)]
    hourly = [driver.fails_at(driver.create(HOURLY, f"h-{i}", "t", {}).id) for i in range(200)]
    assert statistics.mean(small) == pytest.approx(10, rel=0.25)
    assert all(f == float("inf") for f in hourly)
    assert driver.failure_at("hourly", 0) == float("inf") and driver.failure_at("small", 0) < float("inf")


def test_a_rate_for_one_type_leaves_the_failure_times_of_the_others_as_they_were() -> None:
    """Each type has its own stream: a what-if that makes one type spot compares like with like."""

    def hourly_lifetimes(**failures: object) -> list[float]:
        driver, _ = cloud(failures=failures)
        created = [driver.create(t, f"n-{i}", "t", {}) for i in range(20) for t in (SMALL, HOURLY)]
        return [driver.fails_at(c.id) for c in created if c.instance_type == "hourly"]

    base = hourly_lifetimes(per_instance_day=2)
    assert base == hourly_lifetimes(per_instance_day=2, per_instance_day_by_type={"small": 50})
    assert base != hourly_lifetimes(per_instance_day=3)


def test_a_type_whose_instances_never_pair_and_the_others_boot_as_they_did() -> None:
    """never_pairs_by_type: a broken AMI for one type. Its draws come from a stream of its own, so
    the other types' boot delays are those of a run without it."""

    def readies(**boot_delay: object) -> list[tuple[str, float | None]]:
        driver, _ = cloud(boot_delay=boot_delay)
        created = [driver.create(t, f"n-{i}", "t", {}) for i in range(20) for t in (SMALL, HOURLY)]
        return [(c.instance_type, driver.ready_at(c.id)) for c in created]

    base = readies()
    broken = readies(never_pairs_by_type={"small": 1.0})
    assert all(ready is None for name, ready in broken if name == "small")
    assert [r for r in broken if r[0] == "hourly"] == [r for r in base if r[0] == "hourly"]
    # A fraction below 1: some pair, some never do; the type's own rate beats the global one.
    some = readies(never_pairs=1.0, never_pairs_by_type={"small": 0.5})
    assert 0 < sum(ready is None for name, ready in some if name == "small") < 20
    assert all(ready is None for name, ready in some if name == "hourly")
