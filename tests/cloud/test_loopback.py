"""The loopback cloud with real agent processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.cloud.base import TAG_CLUSTER, TAG_INSTANCE_TYPE, TAG_NODE_ID, CloudError
from corral.cloud.loopback import LoopbackCloud
from corral.core.model import InstanceType
from tests.agent import peer as peer_module
from tests.support import alive, children
from tests.support import wait_until as wait_for

SMALL = InstanceType(name="t.small", vcpus=2, ram_mib=2048, price_per_hour=0.01, scratch_mib=4096)


def cmdline(pid: int) -> list[bytes]:
    # /proc/<pid>/cmdline of a live process can read empty for an instant while it starts up.
    raw = wait_for(lambda: Path(f"/proc/{pid}/cmdline").read_bytes(), 5, f"the cmdline of {pid}")
    return list(raw.split(b"\0"))


def unused_url() -> str:
    # Nothing listens here, so agents keep retrying to pair: enough for create / list / destroy.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def cloud(tmp_path: Path) -> Iterator[LoopbackCloud]:
    c = LoopbackCloud(tmp_path, unused_url(), "c1", ping_interval=0.2)
    yield c
    for instance in c.list():
        c.destroy(instance.id)


@pytest.fixture
def peer() -> Iterator[Any]:
    p = peer_module.Peer().start()
    yield p
    p.stop()


def record(cloud: LoopbackCloud, instance_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((cloud.root / instance_id / "instance.json").read_text())
    return data


def test_create_list_destroy(cloud: LoopbackCloud, tmp_path: Path) -> None:
    instance = cloud.create(SMALL, "node-1", "token-1", {"owner": "me"})
    assert instance.id.startswith("lb-") and len(instance.id) == 11
    assert instance.tags == {"owner": "me", TAG_CLUSTER: "c1", TAG_NODE_ID: "node-1", TAG_INSTANCE_TYPE: "t.small"}
    assert instance.node_id == "node-1"
    data = record(cloud, instance.id)
    assert data["id"] == instance.id and data["instance_type"] == "t.small" and data["tags"] == instance.tags
    assert data["created_at"] == instance.created_at > 0
    pid = data["pid"]
    assert alive(pid)
    argv = cmdline(pid)
    assert b"node-1" in argv and b"token-1" not in argv  # the token travels in the environment
    for flag, value in (("--vcpus", "2"), ("--ram-mib", "2048"), ("--scratch-mib", "4096"), ("--gpus", "0")):
        assert argv[argv.index(flag.encode()) + 1] == value.encode()
    # With no server to pair with, the agent keeps trying: a live, listed instance.
    log = cloud.root / instance.id / "agent.log"
    wait_for(lambda: log.exists() and b"retry pairing" in log.read_bytes(), 15, "a pairing retry in agent.log")

    other = cloud.create(SMALL, "node-2", "token-2", {})
    assert {i.id for i in cloud.list()} == {instance.id, other.id}
    listed = {i.id: i for i in cloud.list()}[instance.id]
    assert (listed.instance_type, listed.tags, listed.created_at) == ("t.small", instance.tags, instance.created_at)
    assert LoopbackCloud(tmp_path, cloud.server_url, "another-cluster").list() == []

    cloud.destroy(instance.id)
    assert not alive(pid)
    assert [i.id for i in cloud.list()] == [other.id]
    assert not (cloud.root / instance.id / "instance.json").exists()
    cloud.destroy(instance.id)  # already gone: no error
    cloud.destroy("lb-00000000")


def test_server_url_is_needed_and_settable(tmp_path: Path) -> None:
    cloud = LoopbackCloud(tmp_path, "", "c1")
    with pytest.raises(CloudError, match="server_url"):
        cloud.create(SMALL, "n", "t", {})
    cloud.server_url = unused_url()
    instance = cloud.create(SMALL, "n", "t", {})
    try:
        assert cloud.server_url.encode() in cmdline(record(cloud, instance.id)["pid"])
    finally:
        cloud.destroy(instance.id)


def test_agent_survives_the_death_of_its_parent(cloud: LoopbackCloud, tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import os, signal, sys
        from pathlib import Path
        from corral.cloud.loopback import LoopbackCloud
        from corral.core.model import InstanceType
        cloud = LoopbackCloud(Path(sys.argv[1]), sys.argv[2], "c1")
        instance = cloud.create(InstanceType("t.tiny", 1, 512, 0.0), "orphan", "tok", {})
        print(instance.id, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    parent = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path), cloud.server_url], capture_output=True, text=True, timeout=30
    )
    assert parent.returncode == -signal.SIGKILL
    instance_id = parent.stdout.strip()
    pid = record(cloud, instance_id)["pid"]
    assert alive(pid)
    # A fresh driver (a restarted server) finds the instance from its record and can destroy it.
    assert [i.id for i in cloud.list()] == [instance_id]
    cloud.destroy(instance_id)
    wait_for(lambda: not alive(pid), 10, "the orphaned agent to die")
    assert cloud.list() == []


def test_pid_reuse_guard(cloud: LoopbackCloud) -> None:
    impostor = subprocess.Popen(["sleep", "30"])
    try:
        for instance_id, pid in (("lb-0000beef", impostor.pid), ("lb-0000dead", 2**22 + 12345)):
            directory = cloud.root / instance_id
            directory.mkdir(parents=True)
            tags = {TAG_CLUSTER: "c1", TAG_NODE_ID: "n-" + instance_id, TAG_INSTANCE_TYPE: "t.small"}
            data = {"id": instance_id, "instance_type": "t.small", "tags": tags, "created_at": 1.0, "pid": pid}
            (directory / "instance.json").write_text(json.dumps(data))
        assert cloud.list() == []
        assert not (cloud.root / "lb-0000beef" / "instance.json").exists()
        assert not (cloud.root / "lb-0000dead" / "instance.json").exists()
        cloud.destroy("lb-0000beef")
        assert impostor.poll() is None, "a process that merely reuses the pid must not be touched"
    finally:
        impostor.kill()
        impostor.wait()


def test_instance_runs_real_work_and_destroy_stops_it(cloud: LoopbackCloud, peer: Any) -> None:
    cloud.server_url = peer.url
    state = peer.state
    token = state.add_token("lb-node")
    script = 'echo "$CORRAL_LOOPBACK_INSTANCE ${CORRAL_BOOT_TOKEN:-no-token}"; exec sleep 60'
    state.assign(1, "lb-node", ["sh", "-c", script])
    instance = cloud.create(SMALL, "lb-node", token, {})
    wait_for(lambda: 1 in state.started, 20, "the attempt to start on the loopback instance")
    assert state.nodes["lb-node"]["capacity"] == {"vcpus": 2.0, "ram_mib": 2048, "scratch_mib": 4096, "gpus": 0}
    wait_for(lambda: state.log_text(1), 10, "output")
    assert state.log_text(1) == f"{instance.id} no-token\n"
    work_pid = state.started[1]
    assert alive(work_pid)
    cloud.destroy(instance.id)
    assert not alive(work_pid)
    assert 1 not in state.finished  # lost with its node: the server's to requeue, not a command exit
    assert cloud.list() == []


def test_destroy_of_a_hung_agent_powers_off_its_work(cloud: LoopbackCloud, peer: Any) -> None:
    cloud.server_url = peer.url
    cloud.destroy_grace = 0.5
    state = peer.state
    token = state.add_token("hung")
    state.assign(1, "hung", ["sleep", "60"])
    instance = cloud.create(SMALL, "hung", token, {})
    wait_for(lambda: 1 in state.started, 20, "the attempt to start")
    init_pid = record(cloud, instance.id)["pid"]
    [agent_pid] = children(init_pid)
    os.kill(agent_pid, signal.SIGSTOP)  # an agent that can no longer act on SIGTERM
    cloud.destroy(instance.id)
    assert not alive(agent_pid) and not alive(init_pid)
    wait_for(lambda: not alive(state.started[1]), 5, "the attempt to be killed with its instance")


def test_a_fleet_stop_powers_off_every_instance_the_hung_among_the_clean(cloud: LoopbackCloud, peer: Any) -> None:
    """destroy_many SIGTERMs every instance at once and then SIGKILLs what outlived the grace:
    one hung agent does not keep the others' work running, nor escape its own power-off."""
    cloud.server_url = peer.url
    cloud.destroy_grace = 0.5
    state = peer.state
    instances = []
    for n in range(3):
        state.assign(n + 1, f"n{n}", ["sleep", "60"])
        instances.append(cloud.create(SMALL, f"n{n}", state.add_token(f"n{n}"), {}))
    wait_for(lambda: all(n + 1 in state.started for n in range(3)), 30, "the attempts to start")
    [hung_agent] = children(record(cloud, instances[1].id)["pid"])
    os.kill(hung_agent, signal.SIGSTOP)
    assert cloud.destroy_many([i.id for i in instances]) == {}
    assert not alive(hung_agent)
    work = [state.started[attempt_id] for attempt_id in (1, 2, 3)]
    wait_for(lambda: not any(alive(pid) for pid in work), 5, "the attempts to be killed with their instances")
    assert not any(n + 1 in state.finished for n in (0, 2)), "stopped by their agents, not ended by their commands"
    assert cloud.list() == []


def test_an_agent_that_exits_is_no_longer_listed(cloud: LoopbackCloud, peer: Any) -> None:
    cloud.server_url = peer.url
    instance = cloud.create(SMALL, "refused", "wrong-token", {})
    wait_for(lambda: cloud.list() == [], 20, "the refused agent to drop out of the list")
    assert b"pairing refused" in (cloud.root / instance.id / "agent.log").read_bytes()
    assert not (cloud.root / instance.id / "instance.json").exists()


def test_an_agent_started_by_a_corral_killed_before_its_record_is_listed(cloud: LoopbackCloud, tmp_path: Path) -> None:
    """A corral SIGKILLed mid-boot, the agent started and its pid not yet recorded: the next corral
    must see the instance (to adopt its node, or destroy it as an orphan), not leave it running
    unknown. The kill is put exactly there by the parent killing itself when the start returns."""
    script = textwrap.dedent(
        """
        import os, signal, subprocess, sys
        from pathlib import Path
        from corral.cloud import loopback
        from corral.core.model import InstanceType

        real_popen = subprocess.Popen

        def popen_then_die(*args, **kwargs):
            started = real_popen(*args, **kwargs)
            print(started.pid, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

        loopback.subprocess.Popen = popen_then_die
        cloud = loopback.LoopbackCloud(Path(sys.argv[1]), sys.argv[2], "c1")
        cloud.create(InstanceType("t.tiny", 1, 512, 0.0), "n-midboot", "tok", {})
        """
    )
    parent = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path), cloud.server_url], capture_output=True, text=True, timeout=30
    )
    assert parent.returncode == -signal.SIGKILL
    agent_pid = int(parent.stdout)
    try:
        assert alive(agent_pid)
        listed = cloud.list()
        assert [i.tags[TAG_NODE_ID] for i in listed] == ["n-midboot"]
        cloud.destroy(listed[0].id)
        wait_for(lambda: not alive(agent_pid), 10, "the agent to be destroyed with its instance")
        assert cloud.list() == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(agent_pid, signal.SIGKILL)


def test_a_record_whose_agent_never_started_is_forgotten(cloud: LoopbackCloud) -> None:
    """A corral killed after the record and before the start: no agent runs, no instance is listed."""
    directory = cloud.root / "lb-0000cafe"
    directory.mkdir(parents=True)
    tags = {TAG_CLUSTER: "c1", TAG_NODE_ID: "n-never", TAG_INSTANCE_TYPE: "t.small"}
    data = {"id": "lb-0000cafe", "instance_type": "t.small", "tags": tags, "created_at": 1.0, "pid": None}
    (directory / "instance.json").write_text(json.dumps(data))
    assert cloud.list() == []
    assert not (directory / "instance.json").exists()


def test_an_agent_that_dies_is_started_again_and_resumes_its_node(cloud: LoopbackCloud, peer: Any) -> None:
    """The instance's init restarts its agent as systemd does on EC2; before, the instance died with
    its agent, and its node was lost."""
    cloud.server_url = peer.url
    cloud.agent_restart_delay = 0.2
    state = peer.state
    state.assign(1, "phoenix", ["sh", "-c", "echo up; exec sleep 60"])
    instance = cloud.create(SMALL, "phoenix", state.add_token("phoenix"), {})
    wait_for(lambda: state.log_text(1) == "up\n", 20, "the attempt to run")
    init_pid = record(cloud, instance.id)["pid"]
    [agent_pid] = children(init_pid)
    os.kill(agent_pid, signal.SIGKILL)  # a crash, the OOM killer

    wait_for(lambda: state.resumes, 20, "the agent started again to resume its node")
    [again] = children(init_pid)
    assert again != agent_pid and state.resumes[0]["pid"] == again
    assert state.resumes[0]["running"] == [1] and state.lost == set()  # its run was re-adopted
    assert alive(state.started[1])
    assert [i.id for i in cloud.list()] == [instance.id]  # the instance lives on
    with state.lock:
        state.kill.add(1)  # the new agent can end the run it re-adopted, and report it
    wait_for(lambda: 1 in state.finished, 20, "the re-adopted run to be killed")
    assert state.finished[1][0] == 128 + signal.SIGTERM and not alive(state.started[1])
    state.assign(2, "phoenix", ["echo", "again"])
    wait_for(lambda: 2 in state.finished, 20, "the resumed node to run new work")
    said = (cloud.root / instance.id / "agent.log").read_text()
    assert '"msg": "the agent died; starting it again"' in said and '"died": "signal SIGKILL"' in said


def test_an_agent_that_exits_for_good_is_not_started_again(cloud: LoopbackCloud, peer: Any) -> None:
    """Exit 3 (the server forgot the node), like 2 (pairing refused, above) and 0, is final."""
    cloud.server_url = peer.url
    cloud.agent_restart_delay = 0.1
    state = peer.state
    instance = cloud.create(SMALL, "forgotten", state.add_token("forgotten"), {})
    wait_for(lambda: state.pings, 20, "the agent to ping")
    init_pid = record(cloud, instance.id)["pid"]
    state.forget = True
    wait_for(lambda: cloud.list() == [], 20, "the instance to end with its agent")
    assert not alive(init_pid)
    assert b"starting it again" not in (cloud.root / instance.id / "agent.log").read_bytes()
