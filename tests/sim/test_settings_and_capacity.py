"""The [sim] config section and the core's capacity back-off helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.config import Config, ConfigError, load_config
from corral.core import capacity
from corral.core.settings import BootSettings


def test_an_empty_config_has_a_working_sim_section() -> None:
    sim = Config().sim
    assert sim.fleet.mode == "elastic" and sim.boot_delay.distribution == "lognormal" and sim.tick is None


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[sim]\nticks = 1\n", "sim.ticks: unknown key"),
        ('[sim.fleet]\nmode = "fixed"\n', "sim.fleet: a fixed fleet needs nodes"),
        ("[sim.boot_delay]\nlow = 100\nhigh = 50\n", "high must not be less than low"),
        ("[sim]\ntick = 0\n", "tick must be more than 0"),
        ('[[sim.capacity.outages]]\nstart = "2h"\nend = "1h"\n', "end must not be before start"),
        ('[sim.workload]\ndefault_memory = "lots"\n', "sim.workload.default_memory: not a size"),
        ("[sim]\ntick = inf\n", "sim.tick: inf is not a finite duration"),
        ('[sim]\nhorizon = "inf"\n', "sim.horizon: 'inf' is not a finite duration"),
        ("[sim.boot_delay]\nsigma = nan\n", "sim.boot_delay.sigma: Input should be a finite number (got nan)"),
        ("[sim.capacity]\noutages_per_day = inf\n", "sim.capacity.outages_per_day: Input should be a finite number"),
        ("[sim.failures]\nper_instance_day = inf\n", "sim.failures.per_instance_day: Input should be a finite"),
        ("[sim.workload]\ntime_scale = inf\n", "sim.workload.time_scale: Input should be a finite number (got inf)"),
        ("[sim.workload]\ndefault_memory = nan\n", "sim.workload.default_memory: nan is not a finite size"),
    ],
)
def test_bad_sim_settings_name_the_key(tmp_path: Path, toml: str, message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert message in str(error.value)


def test_durations_and_sizes_are_written_as_people_write_them(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[sim]\ntick = "5s"\nhorizon = "2d"\n[sim.boot_delay]\nseconds = "2m"\n'
        '[sim.workload]\ndefault_memory = "2GiB"\n[[sim.failures.schedule]]\nat = "1h"\ncount = 3\n'
    )
    sim = load_config(path).sim
    assert (sim.tick, sim.horizon, sim.boot_delay.seconds) == (5, 172800, 120)
    assert sim.workload.default_memory == 2048 and sim.failures.schedule[0].at == 3600


def test_capacity_back_off_lasts_the_configured_time_and_is_never_shortened() -> None:
    settings = BootSettings(capacity_backoff=300)
    table: dict[str, float] = {}
    assert capacity.record_insufficient_capacity(table, "m5.large", 100, settings) == 400
    assert not capacity.is_available("m5.large", table, 399) and capacity.is_available("m5.large", table, 400)
    table["m5.large"] = 1000  # a longer back-off already running
    assert capacity.record_insufficient_capacity(table, "m5.large", 200, settings) == 1000
    assert capacity.is_available("c5.large", table, 0)


KNOWN = "(c5.large, m5.large, m5.xlarge, r5.xlarge"
OR_STAR = "; or '*' for every type)"


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (
            '[[sim.capacity.outages]]\ninstance_type = "c5.larg"\nstart = 0\nend = "1d"\n',
            f"  sim.capacity.outages.0.instance_type: 'c5.larg' is not in instance_types {KNOWN}{OR_STAR}",
        ),
        (
            '[[sim.failures.schedule]]\nat = "1h"\n[[sim.failures.schedule]]\nat = "2h"\ninstance_type = "m5.lage"\n',
            f"  sim.failures.schedule.1.instance_type: 'm5.lage' is not in instance_types {KNOWN}{OR_STAR}",
        ),
        (
            '[sim.fleet]\nmode = "fixed"\nnodes = [{instance_type = "m5.large"}, {instance_type = "m5.huge"}]\n',
            f"  sim.fleet.nodes.1.instance_type: 'm5.huge' is not in instance_types {KNOWN})",
        ),
        (
            '[sim.fleet]\nmode = "fixed"\nnodes = [{instance_type = "*"}]\n',
            f"  sim.fleet.nodes.0.instance_type: '*' is not in instance_types {KNOWN})",
        ),
        (
            '[sim.failures.per_instance_day_by_type]\n"m5.large" = 1\n"m5.lage" = 2\n',
            f"  sim.failures.per_instance_day_by_type.m5.lage: 'm5.lage' is not in instance_types {KNOWN})",
        ),
        (
            '[sim.boot_delay.never_pairs_by_type]\n"c5.larg" = 1\n',
            f"  sim.boot_delay.never_pairs_by_type.c5.larg: 'c5.larg' is not in instance_types {KNOWN})",
        ),
    ],
)
def test_an_unknown_instance_type_in_sim_is_named_when_the_config_is_read(
    tmp_path: Path, toml: str, message: str
) -> None:
    """A misspelt type in an outage or a scheduled failure used to match nothing, silently; one in a
    fixed fleet was found only when its run started (after the other runs of a --compare)."""
    path = tmp_path / "c.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert str(error.value).splitlines() == [f"{path}: invalid configuration", message]


def test_sim_may_name_any_configured_instance_type_or_every_one(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[[instance_types]]\nname = "a"\nvcpus = 2\nram = "4GiB"\nprice_per_hour = 1\n'
        '[[sim.capacity.outages]]\ninstance_type = "a"\nstart = 0\nend = 10\n'
        "[[sim.capacity.outages]]\nstart = 20\nend = 30\n"
        '[[sim.failures.schedule]]\nat = 5\ninstance_type = "a"\n[[sim.failures.schedule]]\nat = 6\n'
        '[sim.fleet]\nmode = "fixed"\nnodes = [{instance_type = "a", count = 2}]\n'
    )
    sim = load_config(path).sim
    assert [o.instance_type for o in sim.capacity.outages] == ["a", "*"]
    assert [f.instance_type for f in sim.failures.schedule] == ["a", "*"]
    path.write_text(path.read_text().replace('name = "a"', 'name = "b"'))
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert [line.split(":")[0] for line in str(error.value).splitlines()[1:]] == [
        "  sim.fleet.nodes.0.instance_type",
        "  sim.capacity.outages.0.instance_type",
        "  sim.failures.schedule.0.instance_type",
    ]


@pytest.mark.parametrize("mode", ["", 'mode = "elastic"\n'])
def test_fleet_nodes_need_a_fixed_fleet(tmp_path: Path, mode: str) -> None:
    """Nodes listed for an elastic fleet were silently ignored (the run booted instances)."""
    path = tmp_path / "c.toml"
    path.write_text(f'[sim.fleet]\n{mode}nodes = [{{ instance_type = "m5.large", count = 4 }}]\n')
    with pytest.raises(ConfigError, match=r"sim\.fleet: nodes are used only by a fixed fleet: set mode = 'fixed'"):
        load_config(path)
