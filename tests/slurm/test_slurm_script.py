"""A batch script (`corral submit --script job.sh -- ARG...`) in front of a real Slurm: corral's own
batch script runs it by its path, a copy written for its attempt under slurm.work_dir; its
arguments, output and exit code are the job's, its #SBATCH lines the Slurm job's request."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Corral
from tests.slurm.conftest import SlurmCluster
from tests.slurm.test_corral_run_slurm import corral_on
from tests.support import wait_until

SCRIPT = """#!/bin/sh
#SBATCH --job-name=from-script
#SBATCH --mem=300M
#SBATCH --account=ignored
echo "args: $# [$1] [$2] on slurm job $SLURM_JOB_ID"
stat -c %a "$0"
echo to stderr >&2
exit 3
"""


@pytest.fixture
def corral(tmp_path: Path, slurm: SlurmCluster) -> Iterator[Corral]:
    yield from corral_on(tmp_path, slurm, "0.3s")


def test_a_batch_script_runs_with_its_arguments_in_slurm(corral: Corral, slurm: SlurmCluster, tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text(SCRIPT)
    corral.start()
    submitted = corral.cli("submit", "--script", str(script), "--", "one arg", "two")
    assert "#SBATCH --account is not an option corral takes: ignored" in submitted.stderr
    job = int(submitted.stdout)
    script.write_text("#!/bin/sh\necho edited\n")  # the job runs what was submitted
    j = wait_until(lambda: (j := corral.jobs()[job])["state"] in ("complete", "failed") and j, 60, "the job to end")
    assert (j["state"], j["exit_code"], j["end_cause"]) == ("failed", 3, "exit")
    ref = j["executor_ref"]
    assert corral.cli("logs", str(job)).stdout == f"args: 2 [one arg] [two] on slurm job {ref}\n700\nto stderr\n"
    shown = slurm.show_job(str(ref))
    assert f"JobName=corral-{job}-from-script " in shown  # its directive, the Slurm job's name
    assert "MinMemoryNode=300M" in shown  # its directive, Slurm's request
    # The copy served its attempt and is gone with it.
    work = corral.home / "slurm" / "work" / "attempts"
    wait_until(lambda: not any(work.glob("*/job.sh")), 30, "the script's copy to be removed")


def test_an_array_scripts_tasks_read_their_ids_under_slurms_names_in_slurm(corral: Corral, tmp_path: Path) -> None:
    # corral sbatches each task as a Slurm job of its own, so Slurm sets no SLURM_ARRAY_*: corral does.
    script = tmp_path / "sweep.sh"
    script.write_text('#!/bin/sh\n#SBATCH --array=3-4\necho "task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_TASK_COUNT"\n')
    corral.start()
    ids = [int(i) for i in corral.cli("submit", "--script", str(script)).stdout.split()]
    wait_until(lambda: all(corral.jobs()[i]["state"] == "complete" for i in ids), 90, "both tasks to complete")
    assert [corral.cli("logs", str(i)).stdout for i in ids] == ["task 3 of 2\n", "task 4 of 2\n"]
