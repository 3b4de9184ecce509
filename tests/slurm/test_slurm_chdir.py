"""A job's working directory in front of a real Slurm (`corral submit --chdir DIR`): sbatch runs it
there (`--chdir`), its output and exit status still where corral reads them; a directory the node
cannot enter, which slurmstepd would swap for /tmp, fails the job with a line that names it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Corral
from tests.slurm.conftest import SlurmCluster
from tests.slurm.test_corral_run_slurm import corral_on
from tests.support import wait_until


@pytest.fixture
def corral(tmp_path: Path, slurm: SlurmCluster) -> Iterator[Corral]:
    yield from corral_on(tmp_path, slurm, "0.3s")


def ended(corral: Corral, job: int) -> dict[str, object]:
    return wait_until(
        lambda: (j := corral.jobs()[job])["state"] in ("complete", "failed", "cancelled") and j, 60, "the job to end"
    )


def test_a_job_runs_in_its_directory_under_slurm(corral: Corral, slurm: SlurmCluster, tmp_path: Path) -> None:
    shared = tmp_path / "shared" / "run42"
    shared.mkdir(parents=True)
    corral.start()
    job = int(corral.cli("submit", "-D", str(shared), "--", "sh", "-c", "pwd; echo made > out.txt").stdout)
    j = ended(corral, job)
    assert (j["state"], j["exit_code"]) == ("complete", 0)
    assert corral.cli("logs", str(job)).stdout == f"{shared}\n"  # the output is still where corral reads it
    assert (shared / "out.txt").read_text() == "made\n"
    assert f"  chdir      {shared}\n" in corral.cli("job", str(job)).stdout

    # Slurm itself was told: its WorkDir is the job's directory.
    waiting = int(corral.cli("submit", "-D", str(shared), "--", "sleep", "300").stdout)
    ref = wait_until(lambda: corral.jobs()[waiting]["executor_ref"], 30, "the sbatch")
    assert f"WorkDir={shared}" in slurm.show_job(str(ref))
    corral.cli("cancel", str(waiting))
    wait_until(lambda: corral.jobs()[waiting]["state"] == "cancelled", 30, "the cancel")


def test_a_directory_missing_on_the_slurm_node_fails_the_job_naming_it(corral: Corral, tmp_path: Path) -> None:
    missing = tmp_path / "not-mounted" / "run42"
    corral.start()
    job = int(corral.cli("submit", "-D", str(missing), "--", "pwd").stdout)
    j = ended(corral, job)
    assert (j["state"], j["exit_code"], j["end_cause"]) == ("failed", 1, "exit")  # not run in /tmp instead
    assert j["wait_reason"] == f"exit 1 (chdir to {missing} failed on its Slurm node)"
    output = corral.cli("logs", str(job)).stdout
    assert f"corral: chdir to {missing} failed on " in output
    assert "/tmp" not in output.splitlines()  # the command (pwd) never ran, in /tmp or anywhere
