"""What of a job's environment reaches sbatch itself, which corral runs on its own host as its own
user: a job's LD_PRELOAD, SLURM_CONF, PATH, or (for a site's sbatch that is a wrapper script)
PYTHONPATH, BASH_ENV and the like would make sbatch run code the job's user chose, as corral. No
Slurm is needed: a stand-in `sbatch` on corral's PATH, a Python script as a site's wrapper may be,
records what it was started with and runs corral's batch script as Slurm would (its environment
exported whole)."""

from __future__ import annotations

import ast
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from corral.config import Config
from corral.executor.slurm import BATCH_SCRIPT, Slurm, sbatch_environment, sbatch_value_refusal
from tests.server.cli import corral
from tests.slurm.conftest import SlurmCluster
from tests.support import served_app

# Records its own LD_LIBRARY_PATH, SLURM_CONF, SBATCH_SIGNAL, SBATCH_ACCOUNT and path, then runs the batch script
# (the first argument that is not an option) with the rest, as slurmd would with --export=ALL.
STAND_IN_SBATCH = f"""#!{sys.executable}
import os, subprocess, sys
seen = [os.environ.get(name) for name in ("LD_LIBRARY_PATH", "SLURM_CONF", "SBATCH_SIGNAL", "SBATCH_ACCOUNT")]
with open(os.environ["SBATCH_SEEN"], "w") as file:
    file.write(repr((*seen, sys.argv[0])))
args = [a for a in sys.argv[1:] if not a.startswith("--")]
subprocess.run(["sh", *args], check=True)
print("42")
"""
VARIABLES = ("LD_LIBRARY_PATH", "SLURM_CONF", "PATH", "PYTHONPATH", "GREETING", "SBATCH_SIGNAL", "SBATCH_ACCOUNT")


def test_a_jobs_variables_reach_the_job_but_only_slurms_own_reach_sbatch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corrals_bin, users_bin, users_lib = tmp_path / "corral-bin", tmp_path / "alice-bin", tmp_path / "alice-lib"
    for directory in (corrals_bin, users_bin):
        directory.mkdir()
        program = directory / "sbatch"
        program.write_text(STAND_IN_SBATCH)
        program.chmod(program.stat().st_mode | stat.S_IXUSR)
    # The batch script asks scontrol for the job's node names, as Slurm would answer them; a real
    # scontrol here, with no job and the job's own SLURM_CONF, looked for a controller in DNS for 30 s.
    scontrol = users_bin / "scontrol"
    scontrol.write_text("#!/bin/sh\necho localhost\n")
    scontrol.chmod(scontrol.stat().st_mode | stat.S_IXUSR)
    users_lib.mkdir()
    pwned = tmp_path / "pwned"
    # Python runs it at the start of any script on a PYTHONPATH that holds it.
    (users_lib / "sitecustomize.py").write_text(f"open({str(pwned)!r}, 'w').write('ran as corral')\n")
    monkeypatch.setenv("PATH", f"{corrals_bin}{os.pathsep}{os.environ['PATH']}")
    for name in ("LD_LIBRARY_PATH", "SLURM_CONF", "PYTHONPATH"):
        monkeypatch.delenv(name, raising=False)
    script = tmp_path / "corral-batch.sh"
    script.write_text(BATCH_SCRIPT)
    seen, status, job_saw = tmp_path / "sbatch-seen", tmp_path / "status", tmp_path / "job-saw"
    job_env = {
        "LD_LIBRARY_PATH": "/home/alice/lib",
        "SLURM_CONF": "/home/alice/slurm.conf",
        "PATH": f"{users_bin}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "PYTHONPATH": str(users_lib),
        "GREETING": "a b 'c' $HOME",
        "SBATCH_SIGNAL": "B:USR1@60",  # Slurm's own: an sbatch option of how the job runs
        # One that would charge the job to an account of corral's choosing: stored before submission
        # refused it, it reaches the job only.
        "SBATCH_ACCOUNT": "another-group",
        # A job's own list names nothing: corral's is the one the script reads; nor does a job's
        # variable named as one of the script's own move where it records the exit status.
        "CORRAL_WITHHELD": "GREETING",
        "corral_status": str(tmp_path / "elsewhere"),
    }
    env = {**sbatch_environment(dict(os.environ), job_env), "SBATCH_SEEN": str(seen)}
    printed = " ".join(f'"${name}"' for name in VARIABLES)
    command = ["sh", "-c", f"printf '{'|'.join(['%s'] * len(VARIABLES))}' {printed} >{job_saw}"]

    assert Slurm().sbatch(["--parsable"], script, [str(status), "0", "", *command], env) == "42"

    # sbatch was corral's, ran without the job's loader path, Slurm config, Python path or account,
    # and read the Slurm option the job gave.
    sbatch_saw = (None, None, job_env["SBATCH_SIGNAL"], None, str(corrals_bin / "sbatch"))
    assert ast.literal_eval(seen.read_text()) == sbatch_saw
    assert not pwned.exists()
    # The job got every one of its values, as it asked for them.
    assert job_saw.read_text() == "|".join(job_env[name] for name in VARIABLES)
    assert status.read_text().startswith("exit=0 ")


def test_a_job_without_variables_runs_with_corrals_as_before(tmp_path: Path) -> None:
    own = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/opt/slurm/lib", "HOME": "/var/lib/corral"}
    env = sbatch_environment(own, {})
    assert env == {**own, "CORRAL_WITHHELD": ""}
    script = tmp_path / "corral-batch.sh"
    script.write_text(BATCH_SCRIPT)
    done = subprocess.run(
        ["sh", str(script), str(tmp_path / "status"), "0", "", "sh", "-c", 'printf "%s" "$LD_LIBRARY_PATH"'],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == "/opt/slurm/lib"


def test_in_front_of_slurm_a_variable_the_script_cannot_set_is_refused_at_submission(tmp_path: Path) -> None:
    # BASH_FUNC_cat%% is how bash exports a function: a wrapper sbatch in bash would run it as corral.
    config = Config(executor="slurm", instance_types=[])
    with served_app(tmp_path, config) as (url, store):
        job = {"command": ["true"], "env": {"OK": "1", "BASH_FUNC_cat%%": "() { id; }"}}
        answer = httpx.post(f"{url}/api/jobs", json={"jobs": [job]}, headers={"Authorization": "Bearer t"})
        assert answer.status_code == 422, answer.text
        assert answer.json()["detail"] == [
            "jobs.0.env: 'BASH_FUNC_cat%%' is no shell name (letters, digits and _, not first a digit): in front of"
            " Slurm corral's batch script sets the job's variables, and sets only those"
        ]
        assert store.list_job_rows() == []
    # One stored before is left out of sbatch's environment.
    assert "BASH_FUNC_cat%%" not in sbatch_environment({}, {"BASH_FUNC_cat%%": "() { id; }"})


def test_in_front_of_slurm_sbatch_variables_that_choose_the_account_or_placement_are_refused(tmp_path: Path) -> None:
    """corral runs sbatch as its own Slurm user: a job's SBATCH_ACCOUNT would charge it to any account
    corral may use (another group's), SBATCH_PARTITION or SBATCH_QOS run it where corral's settings
    do not. Only the variables of how a job runs inside its request go to sbatch."""
    config = Config(executor="slurm", instance_types=[])
    with served_app(tmp_path, config) as (url, store):
        env = {"SBATCH_ACCOUNT": "physics", "SBATCH_SIGNAL": "B:USR1@60", "SBATCH_GRES": "gpu:8", "OK": "1"}
        jobs = [{"command": ["true"], "env": env}, {"command": ["true"], "env": {"SBATCH_QOS": "high"}}]
        answer = httpx.post(f"{url}/api/jobs", json={"jobs": jobs}, headers={"Authorization": "Bearer t"})
        assert answer.status_code == 422, answer.text
        detail = answer.json()["detail"]
        assert detail[0] == (
            "jobs.0.env: 'SBATCH_ACCOUNT' would choose the Slurm account, QOS or partition the job is charged to or"
            " runs in: corral submits as its own Slurm user, so that is corral's setting (slurm.account), not a job's"
        )
        assert detail[1].startswith("jobs.0.env: 'SBATCH_GRES' is not an sbatch variable a job may set in front")
        assert detail[2].startswith("jobs.1.env: 'SBATCH_QOS' would choose the Slurm account, QOS or partition")
        assert len(detail) == 3 and store.list_job_rows() == []
        # The variables of how a job runs inside its request are accepted.
        fine = [{"command": ["true"], "env": {"SBATCH_SIGNAL": "B:USR1@60", "SBATCH_OPEN_MODE": "append"}}]
        answer = httpx.post(f"{url}/api/jobs", json={"jobs": fine}, headers={"Authorization": "Bearer t"})
        assert answer.status_code == 201, answer.text


def test_in_front_of_slurm_a_value_sbatch_cannot_take_is_refused_at_submission_every_way_in(tmp_path: Path) -> None:
    """SBATCH_SIGNAL=bogus made every sbatch of the job fail, and corral retried it as a temporary
    failure, again and again. Refused at submission now, naming the variable and its value: through
    the API, `corral submit -e` and a job file alike."""
    config = Config(executor="slurm", instance_types=[])
    with served_app(tmp_path, config) as (url, store):
        jobs = [
            {"command": ["true"], "env": {"SBATCH_SIGNAL": "bogus", "OK": "1"}},
            {"command": ["true"], "env": {"SBATCH_OPEN_MODE": "bogus", "SBATCH_SIGNAL": "B:USR1@60"}},
        ]
        answer = httpx.post(f"{url}/api/jobs", json={"jobs": jobs}, headers={"Authorization": "Bearer t"})
        assert answer.status_code == 422, answer.text
        assert answer.json()["detail"] == [
            "jobs.0.env: SBATCH_SIGNAL='bogus' is no value sbatch takes for it (sbatch reads it as its option): it"
            " takes [{R|B}:]<sig_num|sig_name>[@sig_time], e.g. B:USR1@60: a signal number 1-65535 or one of ABRT,"
            " ALRM, CONT, HUP, INT, KILL, QUIT, STOP, TERM, TSTP, TTIN, TTOU, URG, USR1, USR2, XCPU (SIG before it or"
            " not), and seconds 0-65535",
            "jobs.1.env: SBATCH_OPEN_MODE='bogus' is no value sbatch takes for it (sbatch reads it as its option): it"
            " takes append or truncate",
        ]

        done = corral(url, "submit", "-e", "SBATCH_SIGNAL=USR1@soon", "--", "true", check=False)
        assert done.returncode != 0
        assert "SBATCH_SIGNAL='USR1@soon' is no value sbatch takes for it" in done.stderr, done.stderr

        job_file = tmp_path / "jobs.jsonl"
        job_file.write_text(json.dumps({"command": ["true"], "env": {"SBATCH_PROFILE": "everything"}}) + "\n")
        done = corral(url, "submit", "--file", str(job_file), check=False)
        assert done.returncode != 0
        assert "SBATCH_PROFILE='everything' is no value sbatch takes for it" in done.stderr, done.stderr

        assert store.list_job_rows() == []
        # Values sbatch takes are accepted.
        fine = {"SBATCH_SIGNAL": "sigusr1@120", "SBATCH_OPEN_MODE": "truncate", "SBATCH_ACCTG_FREQ": "task=30"}
        answer = httpx.post(
            f"{url}/api/jobs",
            json={"jobs": [{"command": ["true"], "env": fine}]},
            headers={"Authorization": "Bearer t"},
        )
        assert answer.status_code == 201, answer.text


# Values of each variable a job may hand sbatch, those sbatch 22.05 takes and those it refuses.
# (Not here: a signal number sbatch reads as another, such as -10 or 99999, which corral refuses.)
SBATCH_VALUES = [
    *(
        ("SBATCH_SIGNAL", value)
        for value in [
            "bogus", "", "B:USR1@60", "USR1", "SIGUSR1", "usr1", "10", "010", "65535", "65536", "0", "R:USR1",
            "RB:USR1", "br:usr1", "X:USR1", " B:USR1", "B:", "USR1@", "USR1@ 60", "USR1@+60", "USR1@60 ", "USR1@-1",
            "USR1@65535", "USR1@65536", "USR1@abc", " USR1", "USR1 ", "XCPU", "TTOU", "PIPE", "WINCH", "RTMIN+1",
            "USR1x", "10x", "0x10", "B:10@5",
        ]
    ),
    *(("SBATCH_OPEN_MODE", value) for value in ["append", "truncate", "a", "T", "APPEND", "bogus", "", " append"]),
    *(
        ("SBATCH_ACCTG_FREQ", value)
        for value in ["30", "task=30", "energy=10,network=5", "filesystem=5", "", "bogus", "task=x", "task=-1", "foo=3"]
    ),
    *(
        ("SBATCH_PROFILE", value)
        for value in ["all", "NONE", "energy,task", "lustre", "network", "task,", "filesystem", "bogus", ""]
    ),
    *(("SBATCH_CPU_FREQ_REQ", value) for value in ["low", "2400000", "1000-2000:performance", ""]),
    *(("SBATCH_GPU_FREQ", value) for value in ["low", "low,memory=high", ""]),
    *(("SBATCH_MEM_BIND", value) for value in ["local", "verbose,local", ""]),
    *(("SBATCH_GPU_BIND", value) for value in ["closest", "map_gpu:0", ""]),
    *(("SBATCH_DISTRIBUTION", value) for value in ["block", "block:cyclic", "plane=2", ""]),
]  # fmt: skip


def test_corral_refuses_a_value_at_submission_only_where_the_real_sbatch_does(
    tmp_path: Path, slurm: SlurmCluster
) -> None:
    """corral's check of each SBATCH_PASSED value (sbatch_value_refusal) against sbatch's own:
    `sbatch --test-only` of the test cluster with the variable set. A value corral lets through
    that sbatch refuses would fail the job at sbatch (a permanent failure, test_slurm_executor.py);
    one corral refuses that sbatch takes would refuse a Slurm user's working job."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\ntrue\n")
    disagree = []
    for name, value in SBATCH_VALUES:
        done = subprocess.run(
            ["sbatch", "--test-only", "--output=/dev/null", str(script)],
            env={**slurm.env, name: value},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        sbatch_takes = done.returncode == 0
        if sbatch_takes != (sbatch_value_refusal(name, value) is None):
            disagree.append((name, value, done.stderr.strip()))
    assert disagree == []


@pytest.mark.parametrize("value", ["-10", "0", "99999", "65536"])
def test_a_signal_number_sbatch_would_read_as_another_is_refused(value: str) -> None:
    """sbatch keeps a number's low 16 bits (-10 is its signal 65526): not the signal the job meant."""
    assert (sbatch_value_refusal("SBATCH_SIGNAL", value) or "").startswith(f"SBATCH_SIGNAL={value!r} is no value")
    assert sbatch_value_refusal("GREETING", "bogus") is None  # not sbatch's
