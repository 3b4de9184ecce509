"""The shipped mixed CPU and GPU example (examples/simulate/gpu-mix): with the default weights, whose
pack-gpus scorer keeps jobs that ask for no GPU off free GPUs, the day costs less than with packing
by RAM alone, at about the same waits: CPU jobs no longer hold the dearest instances up."""

from __future__ import annotations

from pathlib import Path

from corral.sim.run import load_runs
from corral.sim.run import simulate as simulate_workload


def test_keeping_cpu_jobs_off_free_gpus_costs_less_on_the_shipped_mix() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "simulate" / "gpu-mix"
    runs = load_runs([example / "ram-only.toml", example / "default.toml"])
    ram_only, default = simulate_workload(example / "workload.jsonl", runs).results
    assert ram_only.completed == default.completed == 720
    assert default.cost < ram_only.cost * 0.98
    assert default.wait_mean < ram_only.wait_mean + 5.0
