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
