"""sbatch's --signal ([B:]SIG[@TIME]: a signal some seconds before the time limit, to checkpoint)
through the real CLI and the API: the flag and a batch script's #SBATCH line end up in the stored
spec in one canonical form and `corral job` shows it; a bad value is refused naming it, by the
server too; `corral update` changes it while the job is queued; the agent's work item carries it
(its time counted back from the limit with the grace), and an agent that does not say it knows the
field is not given such a job."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import corral
from corral.config import load_config
from corral.core.model import InstanceType, Resources
from corral.jobspec import JobRequest
from corral.store import NotFound, Store
from tests.server.cli import corral as corral_cli
from tests.support import served_app

TOKEN = {"Authorization": "Bearer t"}
C5 = InstanceType("c5.large", vcpus=2, ram_mib=4096, price_per_hour=0.1)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Store]]:
    # A grace past the time limit (Slurm's OverTimeLimit): the signal still goes TIME before the limit.
    config = load_config(None, home=tmp_path, policy={"dispatch": {"time_limit_grace": 5}})
    with served_app(tmp_path, config) as app:
        yield app


def stored_signal(store: Store, job_id: int) -> str | None:
    job = store.job_row(job_id)
    assert job is not None
    return job["spec"].get("signal")


def test_the_flag_and_a_scripts_directive_are_stored_in_one_form_and_shown(
    served: tuple[str, Store], tmp_path: Path
) -> None:
    url, store = served
    flagged = int(corral_cli(url, "submit", "--signal", "b:sigusr1@120", "-t", "10", "--", "true").stdout)
    assert stored_signal(store, flagged) == "B:USR1@120"
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --time=10\n#SBATCH --signal=10\nsleep 1\n")
    from_script = int(corral_cli(url, "submit", "--script", str(script)).stdout)
    assert stored_signal(store, from_script) == "USR1@60"  # sbatch's default time
    # The command line wins over the script's line, as sbatch's does.
    overridden = int(corral_cli(url, "submit", "--script", str(script), "--signal", "TERM@5").stdout)
    assert stored_signal(store, overridden) == "TERM@5"
    shown = corral_cli(url, "job", str(flagged)).stdout
    assert "signal     SIGUSR1 (10) 120 s before the time limit, to its main process (B:) (B:USR1@120)" in shown
    assert httpx.get(f"{url}/api/jobs/{flagged}", headers=TOKEN).json()["signal"] == "B:USR1@120"


def test_a_job_without_a_time_limit_is_warned_that_its_signal_is_never_sent(served: tuple[str, Store]) -> None:
    url, store = served
    done = corral_cli(url, "submit", "--signal", "USR1", "--", "true")
    assert "--signal: a job without a time limit is never ended at one, so it is never sent its signal" in done.stderr
    assert stored_signal(store, int(done.stdout)) == "USR1@60"
    assert "no time limit: never sent" in corral_cli(url, "job", done.stdout.strip()).stdout


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("R:USR1@60", "Slurm's R: flag"),
        ("USR9", "'USR9' is no signal"),
        ("KILL@10", "signal 9 (SIGKILL) cannot be caught"),
        ("USR1@70000", "@70000 is not whole seconds before the time limit, 0 to 65535"),
        ("USR1@soon", "@soon is not whole seconds"),
        ("0", "'0' is no signal"),
    ],
)
def test_a_bad_signal_is_refused_naming_it_by_the_cli_and_the_server(
    served: tuple[str, Store], value: str, said: str
) -> None:
    url, store = served
    refused = corral_cli(url, "submit", "--signal", value, "-t", "10", "--", "true", check=False)
    assert refused.returncode != 0 and f"--signal: {value!r}: {said}" in refused.stderr, refused.stderr
    answer = httpx.post(f"{url}/api/jobs", json={"jobs": [{"command": ["true"], "signal": value}]}, headers=TOKEN)
    assert answer.status_code == 422
    assert f"jobs.0.signal: {value!r}: {said}" in str(answer.json()["detail"]), answer.text
    with pytest.raises(NotFound):  # nothing was submitted
        store.job_row(1)


def test_update_changes_a_queued_jobs_signal_and_refuses_a_bad_one(served: tuple[str, Store]) -> None:
    url, store = served
    job_id = int(corral_cli(url, "submit", "--signal", "USR1", "-t", "10", "--", "true").stdout)
    changed = corral_cli(url, "update", str(job_id), "--signal", "B:USR2@30")
    assert changed.stdout == f"{job_id}: signal USR1@60 -> B:USR2@30\n"
    assert stored_signal(store, job_id) == "B:USR2@30"
    refused = corral_cli(url, "update", str(job_id), "--signal", "R:USR1", check=False)
    assert refused.returncode != 0 and "Slurm's R: flag" in refused.stderr, refused.stderr
    cleared = corral_cli(url, "update", str(job_id), "--signal", "")
    assert cleared.stdout == f"{job_id}: signal B:USR2@30 -> none\n" and stored_signal(store, job_id) is None


def test_the_work_item_carries_the_signal_only_to_an_agent_that_knows_it(served: tuple[str, Store]) -> None:
    url, store = served
    secrets = {}
    for node_id in ("n-old", "n-new"):
        store.create_node(node_id, C5, f"boot-{node_id}", 1000.0, "test")
        body = {"node_id": node_id, "boot_token": f"boot-{node_id}", "capacity": {"vcpus": 2, "ram_mib": 4096}}
        secrets[node_id] = httpx.post(f"{url}/api/agent/pair", json=body).json()["secret"]
    plain, signalled = store.submit(
        [
            JobRequest(command=["true"], time_limit=100),
            JobRequest(command=["true"], time_limit=100, signal="B:USR1@30"),
        ],
        0.0,
    )
    for job_id in (plain, signalled):
        assert store.claim(job_id, "d1", ["n-old"], Resources(1, 512), time.time()) is not None

    # An agent before `signal` knew the fields before it: it would never send the signal.
    old = {"Authorization": f"Bearer {secrets['n-old']}"}
    knew = {"wait": "0", "knows": ["chdir", "separate_stderr", "script"]}
    given = httpx.get(f"{url}/api/agent/work", params=knew, headers=old).json()["attempts"]
    assert [(a["job_id"], a["signal"]) for a in given] == [(plain, None)]
    job = store.job_row(signalled)
    assert job is not None and job["state"] == "queued" and job["temp_failures"] == 1
    assert "does not know signal, which the job uses" in job["wait_reason"]

    assert store.claim(signalled, "d1", ["n-new"], Resources(1, 512), time.time()) is not None
    new = {"Authorization": f"Bearer {secrets['n-new']}"}
    knows = {"wait": "0", "knows": list(corral.AGENT_KNOWS)}
    [item] = httpx.get(f"{url}/api/agent/work", params=knows, headers=new).json()["attempts"]
    # The item's time_limit holds the 5 s grace: 30 s before the job's own limit is 35 s before it.
    assert item["time_limit"] == 105.0
    assert item["signal"] == {"number": 10, "before": 35.0, "main_only": True}


def test_a_job_files_signal_is_stored_and_a_bad_one_refused_naming_its_job(
    served: tuple[str, Store], tmp_path: Path
) -> None:
    url, store = served
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("- command: [./train.sh]\n  time_limit: 1h\n  signal: usr2@10\n")
    [job_id] = [int(line) for line in corral_cli(url, "submit", "-f", str(jobs)).stdout.split()]
    assert stored_signal(store, job_id) == "USR2@10"
    jobs.write_text("- command: [./train.sh]\n  time_limit: 1h\n  signal: R:USR2\n")
    refused = corral_cli(url, "submit", "-f", str(jobs), check=False)
    assert refused.returncode != 0 and "signal: 'R:USR2': Slurm's R: flag" in refused.stderr, refused.stderr
