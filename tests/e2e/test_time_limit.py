"""A job's time limit is enforced (Slurm's `--time`), through a real `corral run`, its loopback
agents and a real command: the job ends failed with TIMEOUT, its process is killed, and the
`job.timeout` event reaches a [[notify]] rule."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from tests.e2e.conftest import Corral, wait_until


def test_a_job_past_its_time_limit_is_killed_and_fails_with_timeout(corral: Corral, tmp_path: Path) -> None:
    told = tmp_path / "told"
    corral.config.write_text(
        corral.config.read_text()
        + f"""
[[notify]]
name = "timeouts"
on = ["job.timeout"]
command = ["sh", "-c", "echo \\"$CORRAL_EVENT_KIND $CORRAL_JOB_ID\\" >> {told}"]
"""
    )
    corral.start()
    # Retries are for non-zero exits: a run that timed out would time out again.
    limited = int(corral.cli("submit", "--time-limit", "2s", "--max-retries", "2", "--", "sleep", "300").stdout)
    within = int(corral.cli("submit", "--time-limit", "1h", "--", "sleep", "1").stdout)
    wait_until(lambda: corral.jobs()[limited]["state"] == "failed", 120, "the time limit to end the job")

    job = corral.cli_json("job", str(limited))
    reason = "TIMEOUT: ran past its time limit of 2s"
    assert job["attempts"] == 1 and job["attempt_list"][0]["state"] == "timeout"
    assert job["attempt_list"][0]["reason"] == reason
    # Not retried although it had retries: `corral job` shows both, as scontrol show job does.
    shown = corral.cli("job", str(limited)).stdout
    assert "  time limit 2 s\n" in shown and "(retries 0 of 2," in shown
    timeouts = corral.cli_json("events", "--job", str(limited), "--kind", "job.timeout")
    assert [e["message"] for e in timeouts] == [reason]
    assert corral.cli_json("events", "--job", str(limited), "--kind", "job.failed") == []

    # The agent killed the command (the pid it reported), as it does for a cancel.
    (started,) = corral.cli_json("events", "--job", str(limited), "--kind", "job.running")
    pid = int(started["message"].rsplit("pid ", 1)[1])

    def still_sleeping() -> bool:
        try:
            return (Path("/proc") / str(pid) / "cmdline").read_bytes() == b"sleep\x00300\x00"
        except OSError:
            return False  # gone

    wait_until(lambda: not still_sleeping(), 30, "the timed-out command to be killed")
    wait_until(lambda: corral.jobs()[within]["state"] == "complete", 60, "the job within its limit to complete")
    wait_until(lambda: told.exists() and told.read_text() == f"job.timeout {limited}\n", 30, "the notification")


def test_a_job_past_its_time_limit_while_corral_is_down_is_ended_by_its_agent(corral: Corral) -> None:
    # slurmstepd's way: the node enforces the limit when the controller cannot. Before, the command
    # ran on for as long as corral was down, and an exit after the restart counted as a success.
    corral.start()
    job_id = int(corral.cli("submit", "--time-limit", "4s", "--", "sh", "-c", "echo started; exec sleep 300").stdout)
    wait_until(lambda: corral.jobs()[job_id]["state"] == "running", 60, "the job to run")
    assert corral.stop(signal.SIGKILL) == -signal.SIGKILL
    pid = running_pid(corral.home, job_id)

    def sleeping() -> bool:
        try:
            return (Path("/proc") / str(pid) / "cmdline").read_bytes() == b"sleep\x00300\x00"
        except OSError:
            return False

    wait_until(lambda: not sleeping(), 60, "the agent to end the command at its time limit")
    corral.start()
    wait_until(lambda: corral.jobs()[job_id]["state"] == "failed", 60, "the exit to be reported")
    job = corral.cli_json("job", str(job_id))
    (attempt,) = job["attempt_list"]
    assert attempt["state"] == "timeout" and attempt["exit_code"] == 128 + signal.SIGTERM, attempt
    assert attempt["exit_signal"] == signal.SIGTERM, attempt  # the agent's SIGTERM, told from an exit 143
    assert attempt["reason"].startswith("TIMEOUT: ran past its time limit of 4s (ended by the agent on "), attempt
    timeouts = corral.cli_json("events", "--job", str(job_id), "--kind", "job.timeout")
    assert [e["message"] for e in timeouts] == [attempt["reason"]]
    assert corral.cli("logs", str(job_id)).stdout == "started\n"


def running_pid(home: Path, job_id: int) -> int:
    """The pid of the job's command, from its agent's log (corral is down: no event to read it from)."""
    for log in home.glob("loopback/*/agent.log"):
        for line in log.read_text().splitlines():
            entry = json.loads(line) if line.startswith("{") else {}
            if entry.get("msg") == "attempt started" and entry.get("job_id") == job_id:
                return int(entry["pid"])
    raise AssertionError(f"no agent log says job {job_id} started")


def test_a_job_gets_its_signal_before_its_time_limit_checkpoints_and_completes(corral: Corral, tmp_path: Path) -> None:
    """sbatch's --signal through a real `corral run` and its loopback agent: a batch script whose
    `#SBATCH --signal=B:USR1@3` and 5 s limit have it checkpoint and end well before the limit."""
    corral.start()
    script = tmp_path / "train.sh"
    script.write_text(
        "#!/bin/sh\n#SBATCH --time=0:05\n#SBATCH --signal=B:USR1@3\n"
        "trap 'echo checkpoint; exit 0' USR1\necho training\nwhile :; do sleep 0.1; done\n"
    )
    job_id = int(corral.cli("submit", "--script", str(script)).stdout)
    wait_until(lambda: corral.jobs()[job_id]["state"] in ("complete", "failed"), 120, "the job to end")
    job = corral.cli_json("job", str(job_id))
    assert job["state"] == "complete" and job["signal"] == "B:USR1@3", job
    assert corral.cli("logs", str(job_id)).stdout == "training\ncheckpoint\n"
    assert job["finished_at"] - job["started_at"] < 5.0
