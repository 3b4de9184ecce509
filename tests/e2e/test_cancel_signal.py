"""`corral cancel --signal` (Slurm's scancel -s) on a real `corral run` (loopback cloud, a real agent
and keeper): the running command gets the signal and goes on, and completes as it would have; with
--batch only its main process gets it, without it its whole process group; a job that does not run
is refused by id and state, and the command exits 1; each signal sent is an event."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.conftest import Corral, wait_until

# The main shell and its background child each trap USR1 and USR2 into a file (`main`, `child`); both run
# until `stop` exists, then the job exits 0. (`sleep` is killed by a signal to the group: the loops
# go on.)
SCRIPT = """
trap 'echo usr1 >> main' USR1
trap 'echo usr2 >> main' USR2
sh -c 'trap "echo usr1 >> child" USR1; trap "echo usr2 >> child" USR2; while [ ! -e stop ]; do sleep 0.1; done' &
echo ready > ready
while [ ! -e stop ]; do sleep 0.1; done
wait
echo done
"""


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_a_signal_reaches_the_running_command_which_goes_on_and_completes(corral: Corral, tmp_path: Path) -> None:
    corral.start()
    work = tmp_path / "work"
    work.mkdir()
    job = int(corral.cli("submit", "--chdir", str(work), "--", "sh", "-c", SCRIPT).stdout)
    after = int(corral.cli("submit", "--dependency", f"afterok:{job}", "--", "true").stdout)
    wait_until(lambda: (work / "ready").exists() and corral.jobs()[job]["state"] == "running", 60, "the job to run")

    # A job that waits is refused by id and state; the running one is signalled all the same.
    done = corral.cli("cancel", "--signal", "USR1", str(after), str(job), check=False)
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith(f"{job}: SIGUSR1 requested for the process group of attempt ")
    assert f"{after}: job {after} is queued: only a running job's command can be signalled" in done.stderr
    wait_until(lambda: lines(work / "main") == lines(work / "child") == ["usr1"], 30, "the whole group to get USR1")

    # --batch: the main process alone; the child it started does not get it.
    corral.cli("cancel", "-s", "SIGUSR2", "-b", str(job))
    wait_until(lambda: lines(work / "main") == ["usr1", "usr2"], 30, "the main process to get USR2")
    # The whole group (no --batch), by a filter: the child gets this one.
    assert corral.cli("cancel", "-s", "12", "--state", "R").stdout == (
        f"SIGUSR2 requested for the process group of 1 job: {job}\n"
    )
    wait_until(lambda: lines(work / "child") == ["usr1", "usr2"], 30, "the child to get USR2")
    assert lines(work / "main") == ["usr1", "usr2", "usr2"]  # (the child had not got the first)

    shown = corral.cli_json("job", str(job))
    assert shown["state"] == "running" and not shown["cancel_requested"]
    signalled = [e["message"] for e in corral.cli_json("events", "--job", str(job), "--kind", "job.signalled")]
    assert len(signalled) == 3, signalled
    assert "SIGUSR1" in signalled[0] and "process group" in signalled[0] and "(asked by (operator))" in signalled[0]
    assert "to its main process" in signalled[1] and "sent to main process" in signalled[1]
    assert "signalled" in corral.cli("job", str(job)).stdout

    # It runs on to its own end: complete, exit 0, one attempt; the job waiting for it then runs.
    (work / "stop").touch()
    wait_until(lambda: corral.jobs()[job]["state"] == "complete", 60, "the job to complete")
    ended = corral.jobs()[job]
    assert ended["exit_code"] == 0 and ended["exit_signal"] is None and ended["attempts"] == 1
    wait_until(lambda: corral.jobs()[after]["state"] == "complete", 60, "the job after it to run")
