"""sim.failures.waves and waves_per_day_by_type: interruptions that come in bursts, as EC2 takes
spot instances back when a pool runs short, so that what policy.boot.interruption_backoff saves can
be measured (with independent lifetimes alone, a type taken back now is no likelier to be taken
back again soon)."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping

import pytest

from corral.cloud.sim import SimCloud
from corral.config import Config
from corral.core.model import GiB, InstanceType
from corral.sim.settings import SimSettings
from corral.workload.model import SimJob
from tests.sim.helpers import config, decides_as_live, job, simulate, skips_as_it_ticks

SMALL = InstanceType("small", 2, 4 * GiB, 0.10)
OTHER = InstanceType("other", 2, 4 * GiB, 0.20)


def created(failures: Mapping[str, object], at: float = 0.0, count: int = 2000) -> list[tuple[str, float]]:
    """(type, fails_at) of `count` instances of each type created at `at`, in turn."""
    clock = lambda: at  # noqa: E731
    driver = SimCloud([SMALL, OTHER], SimSettings.model_validate({"failures": failures}), clock)
    made = [driver.create(t, f"n-{i}-{t.name}", "token", {}) for i in range(count) for t in (SMALL, OTHER)]
    return [(m.instance_type, driver.fails_at(m.id)) for m in made]


def test_a_wave_takes_its_fraction_of_the_instances_up_throughout_it_and_only_while_it_lasts() -> None:
    wave = {"at": "1h", "instance_type": "small", "fraction": 0.5, "length": "10m"}
    times = created({"waves": [wave]})
    small = [f for name, f in times if name == "small"]
    hit = [f for f in small if f < math.inf]
    assert len(hit) / len(small) == pytest.approx(0.5, abs=0.04)
    assert all(3600 <= f < 4200 for f in hit)
    assert all(f == math.inf for name, f in times if name == "other")  # another type's pool is not short

    # Booted half way through, an instance is up for half the wave: 1 - sqrt(1 - 0.5) of them go.
    late = [f for name, f in created({"waves": [wave]}, at=3900) if name == "small"]
    assert sum(f < math.inf for f in late) / len(late) == pytest.approx(1 - math.sqrt(0.5), abs=0.04)
    assert all(3900 <= f < 4200 for f in late if f < math.inf)
    assert all(f == math.inf for name, f in created({"waves": [wave]}, at=4200) if name == "small")


def test_a_wave_only_brings_failures_forward_and_leaves_other_types_as_they_were() -> None:
    """The lifetimes keep their own stream: a what-if that adds waves compares like with like."""
    base = {"per_instance_day": 2}
    without = created(base, count=300)
    with_waves = created({**base, "waves_per_day_by_type": {"small": 3}}, count=300)
    assert [f for n, f in with_waves if n == "other"] == [f for n, f in without if n == "other"]
    pairs = [(w, b) for (n, w), (_, b) in zip(with_waves, without, strict=True) if n == "small"]
    assert all(w <= b for w, b in pairs)
    assert sum(w < b for w, b in pairs) > 20  # (the waves all instances share: 61 of 300 with seed 0)


def test_random_waves_come_in_bursts_at_the_rate_given() -> None:
    """Two waves a day, each taking half of what is up throughout: the failures come hundreds at a
    time, in bursts about two a day apart, until a dozen waves or so have taken all 4,000."""
    failures = {"waves_per_day_by_type": {"small": 2}, "wave_length": "20m", "wave_fraction": 0.5}
    times = sorted(f for n, f in created(failures, count=4000) if n == "small")
    assert times[-1] < math.inf
    bursts = [times[0]]
    for previous, current in zip(times, times[1:], strict=False):
        if current - previous > 1200:
            bursts.append(current)
    assert 8 <= len(bursts) <= 16  # 4000 / 2**12 < 1
    assert 1 <= len(bursts) / (times[-1] / 86400) <= 3  # (12 in 9.05 days with seed 0)
    assert len([t for t in times if t < bursts[1]]) == pytest.approx(2000, rel=0.1)


def test_the_same_seed_makes_the_same_waves_and_another_seed_others() -> None:
    def times(seed: int) -> list[float]:
        settings = SimSettings.model_validate({"seed": seed, "failures": {"waves_per_day_by_type": {"small": 4}}})
        driver = SimCloud([SMALL], settings, lambda: 0.0)
        return [driver.fails_at(driver.create(SMALL, f"n-{i}", "t", {}).id) for i in range(50)]

    assert times(1) == times(1) and times(1) != times(2)


@pytest.mark.parametrize(
    ("failures", "named"),
    [
        ({"waves": [{"at": 0, "instance_type": "smal"}]}, "sim.failures.waves.0.instance_type"),
        ({"waves_per_day_by_type": {"smal": 1}}, "sim.failures.waves_per_day_by_type.smal"),
        ({"waves": [{"at": 0, "instance_type": "small", "fraction": 1}]}, "sim.failures.waves.0.fraction"),
        ({"waves": [{"at": 0, "instance_type": "small", "length": 0}]}, "sim.failures.waves.0.length"),
        ({"wave_fraction": 0}, "sim.failures.wave_fraction"),
    ],
)
def test_a_bad_wave_is_named(failures: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named.replace(".", r"\.")):
        config(sim={"failures": failures})


SPOT = {"name": "spot", "vcpus": 2, "ram": "4GiB", "price_per_hour": 0.03, "attributes": {"capacity": "spot"}}
ON_DEMAND = {"name": "on-demand", "vcpus": 2, "ram": "4GiB", "price_per_hour": 0.10}


def wave_world(backoff: str) -> tuple[list[SimJob], Config]:
    """A job that fills a node every 30 s for two hours; half an hour in, spot's pool runs short
    for an hour and takes back 90% of what is up throughout, with EC2's two-minute notice."""
    wave = {"at": "30m", "instance_type": "spot", "fraction": 0.9, "length": "1h"}
    cfg = config(
        instance_types=[SPOT, ON_DEMAND],
        sim={"failures": {"waves": [wave], "notice_by_type": {"spot": "2m"}}},
        policy={"boot": {"interruption_backoff": backoff, "max_instances": 100}},
    )
    return [job(i, submit=30.0 * i, run=600, vcpus=2) for i in range(240)], cfg


def test_in_a_wave_the_interruption_back_off_keeps_work_off_the_pool_that_is_taken_back() -> None:
    """The back-off's worth, measured: without it the planner boots the cheapest type, spot, into
    the wave again and again; with it, on-demand while the wave's notices keep coming."""
    _, backed_off = simulate(*wave_world("10m"))
    _, not_backed_off = simulate(*wave_world("0s"))
    assert backed_off.reclaims > 0 and backed_off.interruption_backoffs > 0
    assert backed_off.reclaims < not_backed_off.reclaims / 2
    assert backed_off.work_lost_vcpu_hours < not_backed_off.work_lost_vcpu_hours / 2
    assert backed_off.requeues < not_backed_off.requeues
    assert backed_off.completed == not_backed_off.completed == 240


def test_waves_replay_the_same_three_ways() -> None:
    jobs, cfg = wave_world("10m")
    short = [j for j in jobs if j.submit < 4000]
    skips_as_it_ticks(copy.deepcopy(short), cfg)
    decides_as_live(copy.deepcopy(short), cfg)


def test_a_wave_outside_the_run_is_named() -> None:
    cfg = config(sim={"failures": {"waves": [{"at": "10d", "instance_type": "small"}]}})
    _, result = simulate([job(1)], cfg)
    assert result.outside_run == ["sim.failures.waves.0 (864000 s to 865800 s)"]
