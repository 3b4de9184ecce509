"""Through a running corral and the loopback cloud. A node's agent SIGKILLed while its job runs (a
crash, the OOM killer): the instance's init starts it again, as systemd does on EC2, the new agent
resumes the node and re-adopts the run the dead one started (its keeper ran on), which ends as it
would have; the node stays. An instance that dies with its agent (its init
SIGKILLed: the machine is gone): the node is lost, the job goes the same way, and what the dead
agent ran is stopped with its node. Either way the job never runs twice at once. A job in a
container is the hard case: the engine, not the agent's session, runs the container."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
from pathlib import Path

import pytest

from corral.cloud.loopback import LoopbackCloud
from tests.e2e.conftest import Corral
from tests.podman import (
    PROGRAM,
    RUN_ARGS,
    busybox_image,
    containers,
    containers_named,
    remove_named,
    start_leftovers,
)
from tests.support import alive, children, wait_until


def instance_pid(corral: Corral, node_id: str) -> int:
    """The pid of the node's instance: its init, whose SIGKILL powers the "machine" off."""
    instance_id = next(n["instance_id"] for n in corral.live_nodes() if n["id"] == node_id)
    record = json.loads((corral.home / "loopback" / instance_id / "instance.json").read_text())
    return int(record["pid"])


def agent_pid(corral: Corral, node_id: str) -> int:
    """The pid of the node's agent, which its instance's init runs (and starts again if it dies)."""
    [pid] = children(instance_pid(corral, node_id))
    return pid


def output(corral: Corral, job_id: int) -> str:
    return corral.api("GET", f"/api/jobs/{job_id}/logs").text


def events(corral: Corral, job_id: int, kind: str) -> list[str]:
    return [e["message"] for e in corral.api("GET", "/api/events", params={"job": job_id, "kind": kind}).json()]


def node_events(corral: Corral, node_id: str, kind: str) -> list[str]:
    return [e["message"] for e in corral.api("GET", "/api/events", params={"node": node_id, "kind": kind}).json()]


def attempt_dir(corral: Corral, node_id: str, attempt_id: int) -> Path:
    instance_id = next(n["instance_id"] for n in corral.live_nodes() if n["id"] == node_id)
    return corral.home / "loopback" / instance_id / "work" / "attempts" / str(attempt_id)


WAIT_FOR_GO = "echo start; while [ ! -e go ]; do sleep 0.1; done; echo end"
# The podman tests share the image tests/podman.py makes once: they run in one worker, as
# tests/conftest.py's "podman" group does for whole files.
PODMAN = pytest.mark.xdist_group("podman")


def test_a_killed_agent_is_started_again_its_node_stays_and_its_run_goes_on(corral: Corral) -> None:
    """Before, the node fell silent, was declared down after ping_stale and shut down, and the job
    was requeued: its work lost."""
    corral.start()
    job_id = int(corral.cli("submit", "--", "sh", "-c", WAIT_FOR_GO).stdout)
    wait_until(lambda: output(corral, job_id) == "start\n", 60, "the run's output")
    node = corral.jobs()[job_id]["node"]
    dead = agent_pid(corral, node)
    os.kill(dead, signal.SIGKILL)

    wait_until(lambda: node_events(corral, node, "node.agent_restarted"), 30, "the agent to be started again")
    [restarted] = node_events(corral, node, "node.agent_restarted")
    assert restarted.endswith("resumed with its saved credentials; it runs on attempts 1")
    (attempt_dir(corral, node, 1) / "go").touch()
    wait_until(lambda: corral.jobs()[job_id]["state"] == "complete", 60, "the job to complete")
    assert output(corral, job_id) == "start\nend\n"
    assert events(corral, job_id, "job.requeued") == []
    assert node in {n["id"] for n in corral.live_nodes()}
    assert node_events(corral, node, "node.down") == []
    assert agent_pid(corral, node) != dead


def test_a_dead_instances_job_is_requeued_and_its_process_stopped(corral: Corral) -> None:
    corral.start()
    job_id = int(corral.cli("submit", "--", "sh", "-c", "echo run-$CORRAL_ATTEMPT_ID; exec sleep 300").stdout)
    wait_until(lambda: output(corral, job_id) == "run-1\n", 60, "the first run's output")
    first_node = corral.jobs()[job_id]["node"]
    [started] = events(corral, job_id, "job.running")
    command_pid = int(started.rsplit(" pid ", 1)[1])  # "attempt 1 pid 4242": the command, which exec'd sleep
    assert alive(command_pid)
    os.kill(instance_pid(corral, first_node), signal.SIGKILL)  # the "machine" is gone, and its agent

    wait_until(lambda: events(corral, job_id, "job.requeued"), 30, "the job to be requeued")
    assert f"node {first_node} lost" in events(corral, job_id, "job.requeued")[0]
    wait_until(lambda: not alive(command_pid), 30, "the dead agent's command to be stopped with its node")


def on_node(node_id: str) -> list[str]:
    """The containers the node's agent started (it labels them with the node), running or not."""
    return containers(f"label=corral-node={node_id}")


@PODMAN
def test_a_killed_agents_container_run_goes_on_under_the_agent_started_again(corral: Corral) -> None:
    image = busybox_image()
    corral.config.write_text(
        corral.config.read_text()
        + f"\n[containers]\nprogram = {json.dumps(PROGRAM)}\nrun_args = {json.dumps(RUN_ARGS)}\n"
    )
    corral.start()
    job_id = int(corral.cli("submit", "--image", image, "--", "sh", "-c", WAIT_FOR_GO).stdout)
    wait_until(lambda: output(corral, job_id) == "start\n", 120, "the container to run")
    node = corral.jobs()[job_id]["node"]
    try:
        [first] = on_node(node)
        os.kill(agent_pid(corral, node), signal.SIGKILL)

        wait_until(lambda: node_events(corral, node, "node.agent_restarted"), 60, "the agent to be started again")
        assert on_node(node) == [first]  # re-adopted, not removed as a leftover
        (attempt_dir(corral, node, 1) / "go").touch()  # (the attempt's directory is mounted at its path)
        wait_until(lambda: corral.jobs()[job_id]["state"] == "complete", 60, "the job to complete")
        assert output(corral, job_id) == "start\nend\n"
        assert events(corral, job_id, "job.requeued") == []
    finally:
        for container_id in on_node(node):
            subprocess.run([*PROGRAM, "rm", "--force", "--time", "0", container_id], capture_output=True, check=False)


@PODMAN
def test_a_dead_instances_container_is_removed_with_its_node(corral: Corral) -> None:
    image = busybox_image()
    corral.config.write_text(
        corral.config.read_text()
        + f"\n[containers]\nprogram = {json.dumps(PROGRAM)}\nrun_args = {json.dumps(RUN_ARGS)}\n"
    )
    corral.start()
    job_id = int(corral.cli("submit", "--image", image, "--", "sh", "-c", "echo up; exec sleep 300").stdout)
    wait_until(lambda: output(corral, job_id) == "up\n", 120, "the container to run")
    first_node = corral.jobs()[job_id]["node"]
    try:
        assert len(on_node(first_node)) == 1
        os.kill(instance_pid(corral, first_node), signal.SIGKILL)

        # Before, the container ran on under the engine beside the job's next run, to its end.
        wait_until(lambda: on_node(first_node) == [], 30, "the lost node's container to be removed")
        # (The instance's power-off removes it before the pass that requeues the job records that.)
        wait_until(lambda: events(corral, job_id, "job.requeued"), 30, "the job to be requeued")
        assert f"node {first_node} lost" in events(corral, job_id, "job.requeued")[0]
    finally:
        for container_id in on_node(first_node):
            subprocess.run([*PROGRAM, "rm", "--force", "--time", "0", container_id], capture_output=True, check=False)


@PODMAN
def test_a_dead_instance_goes_with_the_containers_its_agent_left_and_no_other_corrals(tmp_path: Path) -> None:
    """The driver alone, as a restarted corral has it: the agent is gone, its containers are not.
    Seen (review): two corrals sharing one engine (two homes: two loopback setups, two clusters)
    whose stores drew the same node id: the power-off of one's dead instance killed and removed the
    other's running containers too, found by the node label alone. Now only the instance's own go:
    labelled with its agent's work dir, or (an older agent's) labelled with the node alone under a
    name that ends with that work dir's digits; an older agent's `corral-attempt-ID`, which nothing
    tells apart from another corral's, is left."""
    image = busybox_image()
    node_id = f"n-{secrets.token_hex(4)}"
    instance_id = "lb-0000dead"  # the same in both homes: instance ids are drawn per home too
    attempt_id = 9170 + secrets.randbelow(800)  # attempt ids are per store: both corrals run these
    clouds = {
        name: LoopbackCloud(tmp_path / name, "http://127.0.0.1:9", "corral", 0.5, container_program=PROGRAM)
        for name in ("one", "other")
    }
    started: dict[tuple[str, str], str] = {}
    try:
        # The instance's agent's work dir in each home.
        agent_dirs = {name: (cloud.root / instance_id / "work").resolve() for name, cloud in clouds.items()}
        started = start_leftovers(node_id, attempt_id, agent_dirs, image)
        directory = clouds["one"].root / instance_id
        directory.mkdir(parents=True)
        tags = {"corral-cluster": "corral", "corral-node-id": node_id, "corral-instance-type": "small"}
        record = {"id": instance_id, "instance_type": "small", "tags": tags, "created_at": 1.0, "pid": None}
        (directory / "instance.json").write_text(json.dumps(record))
        assert clouds["one"].list() == []  # its agent is dead: the instance is gone, and with it its containers

        gone = {key for key, name in started.items() if containers_named(name) == []}
        assert gone == {("one", "labelled"), ("one", "older agent's")}
    finally:
        remove_named(started.values())
