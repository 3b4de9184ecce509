"""The shipped mixed CPU and GPU example (examples/simulate/gpu-mix): with the default weights, whose
pack-gpus scorer keeps jobs that ask for no GPU off free GPUs, the day costs less than with packing
by RAM alone, at about the same waits: CPU jobs no longer hold the dearest instances up."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.sim.run import load_runs
from corral.sim.run import simulate as simulate_workload
from tests.sim.helpers import config, job, simulate


def test_keeping_cpu_jobs_off_free_gpus_costs_less_on_the_shipped_mix() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "simulate" / "gpu-mix"
    runs = load_runs([example / "ram-only.toml", example / "default.toml"])
    ram_only, default = simulate_workload(example / "workload.jsonl", runs).results
    assert ram_only.completed == default.completed == 720
    assert default.cost < ram_only.cost * 0.98
    assert default.wait_mean < ram_only.wait_mean + 5.0
    # ... and the GPUs paid for are busier: the figure a GPU what-if is about.
    assert default.gpu_utilisation > ram_only.gpu_utilisation


GPU = {"name": "gpu", "vcpus": 4, "ram": "16GiB", "gpus": 2, "price_per_hour": 1.0, "billing_minimum": 0}
CPU = {"name": "cpu", "vcpus": 4, "ram": "16GiB", "price_per_hour": 0.2, "billing_minimum": 0}


def test_gpu_utilisation_is_the_gpu_seconds_used_over_those_billed() -> None:
    """Before, the results had the vcpus' utilisation only: on a GPU fleet, whether the dearest part
    of the bill, its GPUs, stood idle could not be read, nor compared between policies. A GPU node
    (2 GPUs) boots in 60 s and runs a one-GPU job for an hour and a CPU job beside it; idle for
    the 60 s grace, it is shut down: 1 GPU-hour used of 2 x 3,720 GPU-seconds billed."""
    cfg = config(instance_types=[GPU, CPU], policy={"lifecycle": {"idle_grace": 60}})
    jobs = [job(1, run=3600, vcpus=1, gpus=1), job(2, run=600, vcpus=1)]
    _, result = simulate(jobs, cfg)
    assert result.boots == 1  # the CPU job beside the GPU one
    assert result.gpu_utilisation == pytest.approx(3600 / (2 * 3720), abs=1e-3)
    assert result.summary()["gpu_utilisation"] == pytest.approx(3600 / (2 * 3720), abs=1e-3)
    # No GPU billed: no GPU figure (null in the JSON, "-" in the table), rather than 0%.
    _, cpu_only = simulate([job(1, run=600, vcpus=1)], config(instance_types=[CPU]))
    assert cpu_only.summary()["gpu_utilisation"] is None
