"""SIGKILL of corral mid-run loses no job: live agents' work is re-adopted, orphans are stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from corral.cloud.loopback import LoopbackCloud
from corral.core.model import GiB, InstanceType
from tests.e2e.conftest import CONFIG, CORRAL, Corral, free_port, wait_until
from tests.support import children


def test_sigkill_mid_run_then_restart_loses_nothing(corral: Corral) -> None:
    corral.start()
    running = int(corral.cli("submit", "--", "sh", "-c", "echo started; sleep 4; echo finished; exit 4").stdout)
    wait_until(lambda: corral.jobs()[running]["state"] == "running", 60, "the job to run")
    started_at = corral.cli_json("job", str(running))["started_at"]
    assert corral.stop(signal.SIGKILL) == -signal.SIGKILL

    # While corral is down: an instance that carries this cluster's tags but that corral never
    # recorded (as if its record were lost), whose agent never reaches the server: it only costs.
    cloud = LoopbackCloud(corral.home, f"http://127.0.0.1:{free_port()}", "corral", 0.5)
    orphan = cloud.create(InstanceType("small", 2, 2 * GiB, 0.085), "n-orphan", "no-such-token", {})
    assert orphan.id in {i.id for i in cloud.list()}

    # The command ends while corral is down; its agent keeps the exit until it can report it.
    time.sleep(max(0.0, started_at + 6 - time.time()))
    restarted = time.time()
    corral.start()
    queued_after = int(corral.cli("submit", "--", "echo", "after restart").stdout)
    wait_until(lambda: corral.jobs()[running]["state"] == "failed", 60, "the re-adopted job to finish")
    job = corral.cli_json("job", str(running))
    assert job["exit_code"] == 4 and job["attempts"] == 1, job
    # Recorded when it ended, not when the report arrived after the restart (a 4 s run is not 6+ s).
    assert job["finished_at"] < restarted and job["finished_at"] - job["started_at"] < 5.5, job
    assert corral.cli("logs", str(running)).stdout == "started\nfinished\n"

    wait_until(lambda: corral.jobs()[queued_after]["state"] == "complete", 60, "a new job to run after restart")
    wait_until(lambda: orphan.id not in {i.id for i in cloud.list()}, 30, "the orphan instance to be destroyed")
    assert any(e["node_id"] == "n-orphan" for e in corral.cli_json("events", "--kind", "node.orphan"))


def test_an_agent_that_dies_with_its_instance_gets_its_job_requeued(corral: Corral) -> None:
    corral.start()
    job_id = int(corral.cli("submit", "--", "sh", "-c", "sleep 2; echo second-try-$CORRAL_ATTEMPT_ID").stdout)
    wait_until(lambda: corral.jobs()[job_id]["state"] == "running", 60, "the job to run")
    node = corral.jobs()[job_id]["node"]
    instance_id = next(n["instance_id"] for n in corral.live_nodes() if n["id"] == node)
    LoopbackCloud(corral.home, "", "corral", 0.5).destroy(instance_id)
    wait_until(lambda: corral.jobs()[job_id]["state"] == "complete", 90, "the job to be retried elsewhere")
    job = corral.cli_json("job", str(job_id))
    first, second = job["attempt_list"]
    assert first["state"] == "tempfail" and second["state"] == "exited" and job["temp_failures"] == 1
    assert corral.cli("logs", str(job_id)).stdout == f"second-try-{second['id']}\n"


def test_a_stop_with_keep_fleet_leaves_the_work_running_for_the_next_corral(corral: Corral) -> None:
    # A restart to change the config: a clean stop would requeue the job (a temporary failure) and
    # run it again from the start on a new instance.
    corral.start("--keep-fleet")
    job_id = int(corral.cli("submit", "--", "sh", "-c", "echo started; sleep 5; echo finished").stdout)
    wait_until(lambda: corral.jobs()[job_id]["state"] == "running", 60, "the job to run")
    corral.stop(signal.SIGTERM)
    assert not (corral.home / "server.json").exists()  # the CLI would look for a dead server
    cloud = LoopbackCloud(corral.home, "", "corral", 0.5)
    assert len(cloud.list()) == 1  # its instance is still up

    corral.start()
    wait_until(lambda: corral.jobs()[job_id]["state"] == "complete", 60, "the job to finish")
    job = corral.cli_json("job", str(job_id))
    assert job["attempts"] == 1 and job["temp_failures"] == 0, job
    assert corral.cli("logs", str(job_id)).stdout == "started\nfinished\n"
    assert "job.requeued" not in [e["kind"] for e in corral.cli_json("events", "--job", str(job_id))]


def test_a_dispatcher_paused_longer_than_ping_stale_does_not_take_its_healthy_nodes_for_lost(
    corral: Corral,
) -> None:
    """Seen in a chaos review: corral SIGSTOPped (as a GC or VM pause stops it) for longer than
    ping_stale, while a job ended on its node: the first pass after it marked the node down, 'no
    ping for more than 4s', requeued the job and ran it again, though its exit 0 waited in the
    agent. Here the agent is stopped with corral and continued a second after it, so that the first
    pass after the pause surely runs before the agent is heard again, as it often does."""
    corral.config.write_text(CONFIG.replace("[policy.lifecycle]\n", '[policy.lifecycle]\nping_stale = "4s"\n'))
    corral.start()
    job_id = int(corral.cli("submit", "--", "sh", "-c", "echo started; while [ ! -e go ]; do sleep 0.1; done").stdout)
    wait_until(lambda: corral.api("GET", f"/api/jobs/{job_id}/logs").text == "started\n", 60, "the job to run")
    node = corral.jobs()[job_id]["node"]
    [run] = corral.cli_json("job", str(job_id))["attempt_list"]
    instance_id = next(n["instance_id"] for n in corral.live_nodes() if n["id"] == node)
    instance = json.loads((corral.home / "loopback" / instance_id / "instance.json").read_text())
    [agent] = children(int(instance["pid"]))  # its init's one child
    attempt_dir = corral.home / "loopback" / instance_id / "work" / "attempts" / str(run["id"])

    assert corral.process is not None
    os.kill(agent, signal.SIGSTOP)
    corral.process.send_signal(signal.SIGSTOP)
    try:
        (attempt_dir / "go").touch()  # the job ends (its keeper keeps its exit) while both are stopped
        time.sleep(5)  # more than ping_stale
    finally:
        corral.process.send_signal(signal.SIGCONT)
        time.sleep(1)
        os.kill(agent, signal.SIGCONT)

    def heard() -> bool:
        requeued = corral.cli_json("events", "--job", str(job_id), "--kind", "job.requeued")
        return corral.jobs()[job_id]["state"] == "complete" or bool(requeued)

    wait_until(heard, 30, "the job's end to be heard")
    job = corral.cli_json("job", str(job_id))
    assert job["state"] == "complete" and job["attempts"] == 1 and job["temp_failures"] == 0, job
    assert corral.cli_json("events", "--node", node, "--kind", "node.down") == []
    # Not lost: at most drained for idling once its job was done (idle_grace 2 s), which may be by now.
    drains = corral.cli_json("events", "--node", node, "--kind", "node.draining")
    assert all(e["message"].startswith("idle for more than idle_grace") for e in drains), drains


def test_submit_wait_and_logs_follow_outlast_a_crash_and_restart_of_corral(corral: Corral, tmp_path: Path) -> None:
    """Seen in a chaos review: `corral submit --wait` ended with exit 1, "cannot reach corral", when
    corral was killed while the job ran, and the job went on and completed after the restart. Exit 1
    is also what --wait gives for a job that failed: a script that took it for one ran the job again.
    `corral logs -f` ended so too, the rest of the output unread."""
    corral.start()
    said = tmp_path / "wait.err"
    following: subprocess.Popen[str] | None = None
    with said.open("w") as stderr:
        waiting = subprocess.Popen(
            [CORRAL, "submit", "--wait", "--", "sh", "-c", "echo started; while [ ! -e go ]; do sleep 0.1; done"],
            env=corral.env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        assert waiting.stdout is not None
        job_id = int(waiting.stdout.readline())
        wait_until(lambda: corral.jobs()[job_id]["state"] == "running", 60, "the job to run")
        following = subprocess.Popen(
            [CORRAL, "logs", "-f", str(job_id)],
            env=corral.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        [run] = corral.cli_json("job", str(job_id))["attempt_list"]
        instance_id = next(n["instance_id"] for n in corral.live_nodes() if n["id"] == run["node"])
        go = corral.home / "loopback" / instance_id / "work" / "attempts" / str(run["id"]) / "go"

        corral.stop(signal.SIGKILL)
        wait_until(
            lambda: waiting.poll() is not None or "waiting for it to answer again" in said.read_text(),
            30,
            "submit --wait to find corral gone",
        )
        assert waiting.poll() is None, said.read_text()
        corral.start()
        go.touch()
        assert waiting.wait(timeout=60) == 0, said.read_text()
        assert following.communicate(timeout=60)[0] == "started\n" and following.returncode == 0
    finally:
        for process in (waiting, following):
            if process is not None and process.poll() is None:
                process.kill()
    assert "corral answers again" in said.read_text()
    assert corral.jobs()[job_id]["state"] == "complete"
