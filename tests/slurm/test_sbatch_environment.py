"""What of a job's environment reaches sbatch itself, which corral runs on its own host as its own
user: a job's LD_PRELOAD, LD_LIBRARY_PATH, SLURM_CONF or PATH would make sbatch run code the job's
user chose, as corral. No Slurm is needed: a stand-in `sbatch` on corral's PATH records what it
was started with and runs corral's batch script as Slurm would (its environment exported whole)."""

from __future__ import annotations

import ast
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from corral.executor.slurm import BATCH_SCRIPT, Slurm, sbatch_environment

# Records its own LD_LIBRARY_PATH, SLURM_CONF and path, then runs the batch script (the first
# argument that is not an option) with the rest, as slurmd would with --export=ALL.
STAND_IN_SBATCH = f"""#!{sys.executable}
import os, subprocess, sys
with open(os.environ["SBATCH_SEEN"], "w") as seen:
    seen.write(repr((os.environ.get("LD_LIBRARY_PATH"), os.environ.get("SLURM_CONF"), sys.argv[0])))
args = [a for a in sys.argv[1:] if not a.startswith("--")]
subprocess.run(["sh", *args], check=True)
print("42")
"""


def test_a_jobs_loader_slurm_and_path_variables_reach_the_job_but_not_sbatch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corrals_bin, users_bin = tmp_path / "corral-bin", tmp_path / "alice-bin"
    for directory in (corrals_bin, users_bin):
        directory.mkdir()
        program = directory / "sbatch"
        program.write_text(STAND_IN_SBATCH)
        program.chmod(program.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{corrals_bin}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    monkeypatch.delenv("SLURM_CONF", raising=False)
    script = tmp_path / "corral-batch.sh"
    script.write_text(BATCH_SCRIPT)
    seen, status, job_saw = tmp_path / "sbatch-seen", tmp_path / "status", tmp_path / "job-saw"
    job_env = {
        "LD_LIBRARY_PATH": "/home/alice/lib",
        "SLURM_CONF": "/home/alice/slurm.conf",
        "PATH": f"{users_bin}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "GREETING": "a b",
        # A job's own list names nothing: corral's is the one the script reads.
        "CORRAL_WITHHELD": "GREETING",
    }
    env = {**sbatch_environment(dict(os.environ), job_env), "SBATCH_SEEN": str(seen)}
    command = ["sh", "-c", f'printf "%s|%s|%s|%s" "$LD_LIBRARY_PATH" "$SLURM_CONF" "$PATH" "$GREETING" >{job_saw}']

    assert Slurm().sbatch(["--parsable"], script, [str(status), *command], env) == "42"

    # sbatch was corral's, and ran without the job's loader path or Slurm config.
    assert ast.literal_eval(seen.read_text()) == (None, None, str(corrals_bin / "sbatch"))
    # The job got every one of its values, as it asked for them.
    assert job_saw.read_text() == "|".join(job_env[k] for k in ("LD_LIBRARY_PATH", "SLURM_CONF", "PATH", "GREETING"))
    assert status.read_text().startswith("exit=0 ")


def test_a_job_without_such_variables_runs_with_corrals_as_before(tmp_path: Path) -> None:
    own = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/opt/slurm/lib", "HOME": "/var/lib/corral"}
    env = sbatch_environment(own, {"GREETING": "hi"})
    assert env == {**own, "GREETING": "hi", "CORRAL_WITHHELD": ""}
    script = tmp_path / "corral-batch.sh"
    script.write_text(BATCH_SCRIPT)
    done = subprocess.run(
        ["sh", str(script), str(tmp_path / "status"), "sh", "-c", 'printf "%s" "$LD_LIBRARY_PATH"'],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == "/opt/slurm/lib"
