"""The sbatch options a job's request becomes (`SlurmLoop.sbatch_options`): no Slurm is needed, only
the loop's config."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from corral.config import load_config
from corral.executor.slurm_loop import SlurmLoop
from corral.jobspec import JobRequest
from corral.store import Store


def options_of(tmp_path: Path, **fields: object) -> list[str]:
    config = load_config(None, home=tmp_path, executor="slurm")
    # The options are made from the job and the config alone: no store is asked.
    loop = SlurmLoop(cast(Store, None), config, "d-test", tmp_path / "logs")
    job = JobRequest.model_validate({"command": ["true"], **fields}).to_job(7, 0.0)
    return loop.sbatch_options(job, 3)


def test_an_exclusive_job_is_sbatched_with_exclusive_and_its_request(tmp_path: Path) -> None:
    """Slurm's --exclusive (the job alone on its nodes) reaches sbatch, each node of a gang; the job
    still asks for its CPUs and memory. A job that is not exclusive does not ask it."""
    exclusive = options_of(tmp_path, exclusive=True, nodes=2, vcpus=4, ram="2GiB")
    assert "--exclusive" in exclusive
    assert {"--nodes=2", "--cpus-per-task=4", "--mem=2048M"} <= set(exclusive)
    assert "--exclusive" not in options_of(tmp_path, nodes=2, vcpus=4)
