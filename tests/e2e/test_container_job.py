"""A job with a container image through a running corral (`corral submit --image`): the loopback
cloud's agent, told the engine at pairing ([containers]), runs the command in the image through a
real podman, and the job's output and exit are the command's; with --chdir, in that directory. In
front of Slurm such a job is refused at submission, naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from corral.config import Config
from tests.e2e.conftest import Corral, wait_until
from tests.podman import PROGRAM, RUN_ARGS, busybox_image
from tests.support import served_app


def test_a_job_with_an_image_runs_in_it(corral: Corral) -> None:
    image = busybox_image()
    corral.config.write_text(
        corral.config.read_text()
        + f"\n[containers]\nprogram = {json.dumps(PROGRAM)}\nrun_args = {json.dumps(RUN_ARGS)}\n"
    )
    corral.start()
    job = int(corral.cli("submit", "--image", image, "-e", "WHO=box", "--", "sh", "-c", "echo $WHO $PATH").stdout)
    wait_until(lambda: corral.jobs()[job]["state"] == "complete", 120, "the job to complete")
    assert corral.cli("logs", str(job)).stdout == "box /bin\n"  # the image's PATH: it ran in the image
    assert f"  image      {image}\n" in corral.cli("job", str(job)).stdout


def test_a_job_with_an_image_and_chdir_runs_in_that_directory_mounted_at_its_path(
    corral: Corral, tmp_path: Path
) -> None:
    """`--chdir` with `--image`: the directory (a shared file system's, on a cluster) is mounted in
    the container at the path every node sees, and is its working directory."""
    image = busybox_image()
    corral.config.write_text(
        corral.config.read_text()
        + f"\n[containers]\nprogram = {json.dumps(PROGRAM)}\nrun_args = {json.dumps(RUN_ARGS)}\n"
    )
    shared = tmp_path / "shared" / "run42"
    shared.mkdir(parents=True)
    (shared / "input.txt").write_text("from the node\n")
    corral.start()
    script = "pwd; cat input.txt; echo made > out.txt"
    job = int(corral.cli("submit", "--image", image, "-D", str(shared), "--", "sh", "-c", script).stdout)
    wait_until(lambda: corral.jobs()[job]["state"] == "complete", 120, "the job to complete")
    assert corral.cli("logs", str(job)).stdout == f"{shared}\nfrom the node\n"
    assert (shared / "out.txt").read_text() == "made\n"  # written where the node sees it


def test_in_front_of_slurm_a_job_with_an_image_is_refused(tmp_path: Path) -> None:
    with served_app(tmp_path, Config(executor="slurm")) as (url, store):
        jobs = [{"command": ["true"]}, {"command": ["true"], "image": "docker.io/library/python:3.12"}]
        answer = httpx.post(f"{url}/api/jobs", json={"jobs": jobs}, headers={"Authorization": "Bearer t"})
        assert answer.status_code == 422
        [line] = answer.json()["detail"]
        assert line.startswith("jobs.1.image: a container image runs on corral's agents, not in front of Slurm")
        assert store.list_job_rows() == []  # nothing was submitted
