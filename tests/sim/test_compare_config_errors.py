"""`corral simulate --compare` reads every config before it simulates anything: a bad one fails the
command at once, named by its file, instead of after the runs before it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("bad_text", "message"),
    [
        (
            '[sim.fleet]\nmode = "fixed"\nnodes = [{ instance_type = "m5.huge", count = 4 }]\n',
            "sim.fleet.nodes.0.instance_type: 'm5.huge' is not in instance_types",
        ),
        (
            '[sim.capacity]\noutages = [{ instance_type = "c5.larg", start = 0, end = "1d" }]\n',
            "sim.capacity.outages.0.instance_type: 'c5.larg' is not in instance_types",
        ),
        ("[sim]\ntick = inf\n", "sim.tick: inf is not a finite duration"),
    ],
)
def test_a_bad_config_of_a_comparison_fails_it_at_once_naming_the_file(
    tmp_path: Path, bad_text: str, message: str
) -> None:
    workload = tmp_path / "w.jsonl"
    workload.write_text('{"submit_time": 0, "vcpus": 1, "ram": "1GiB", "run_time": 60}\n')
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text("")
    bad.write_text(bad_text)
    args = ["simulate", str(workload), "--compare", str(good), str(bad), "--no-progress", "--workers", "1", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert f"{bad}: invalid configuration" in result.output and message in result.output
    assert '"runs"' not in result.output  # no results: nothing was simulated
