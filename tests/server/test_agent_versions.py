"""Agents of another corral version than the server's (after an upgrade with --keep-fleet, or an AMI
baked with an older corral): each tells its version and agent protocol at pairing and resuming, the
server records the version (`corral nodes`), and refuses a protocol it does not speak, naming both;
an agent that does not say it knows a work item's field an older agent would ignore (chdir) is not
given a job that uses it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

import corral
import corral.server.agent_api
from corral.core.model import InstanceType, Resources
from corral.jobspec import JobRequest
from corral.store import Store
from tests.server.cli import corral as corral_cli
from tests.server.cli import corral_json

C5 = InstanceType("c5.large", vcpus=2, ram_mib=4096, price_per_hour=0.1)
CAPACITY = {"vcpus": 2, "ram_mib": 4096}


def booting(store: Store, node_id: str) -> str:
    store.create_node(node_id, C5, f"boot-{node_id}", 1000.0, "test")
    return f"boot-{node_id}"


def pair(url: str, node_id: str, token: str, **told: Any) -> httpx.Response:
    body = {"node_id": node_id, "boot_token": token, "capacity": CAPACITY, "hostname": f"host-{node_id}", **told}
    return httpx.post(f"{url}/api/agent/pair", json=body)


def test_corral_nodes_shows_the_version_each_agent_told_and_follows_a_restarted_one(
    served: tuple[str, Store],
) -> None:
    url, store = served
    old = pair(url, "n-old", booting(store, "n-old"))  # an agent of a corral that told nothing
    assert old.status_code == 200, old.text
    new = pair(url, "n-new", booting(store, "n-new"), agent_version="0.1.0", protocol=1)
    assert new.status_code == 200, new.text
    shown = {n["id"]: n["agent_version"] for n in corral_json(url, "nodes")}
    assert shown == {"n-old": None, "n-new": "0.1.0"}
    [told] = store.list_events(node_id="n-new", kind="node.paired")
    assert told["message"].startswith("agent (corral 0.1.0) on host-n-new: ")
    table = corral_cli(url, "nodes").stdout
    [old_line] = [line for line in table.splitlines() if line.lstrip().startswith("n-old")]
    [new_line] = [line for line in table.splitlines() if line.lstrip().startswith("n-new")]
    assert " 0.1.0 " in f"{new_line} " and " 0.1.0" not in old_line

    # The node's corral upgraded, its agent restarted: it resumes and tells its new version.
    secret = old.json()["secret"]
    body = {"node_id": "n-old", "hostname": "host-n-old", "agent_version": "0.2.0", "protocol": 1}
    resumed = httpx.post(f"{url}/api/agent/resume", json=body, headers={"Authorization": f"Bearer {secret}"})
    assert resumed.status_code == 200, resumed.text
    assert {n["id"]: n["agent_version"] for n in corral_json(url, "nodes")}["n-old"] == "0.2.0"
    [restarted] = store.list_events(node_id="n-old", kind="node.agent_restarted")
    assert restarted["message"].startswith("agent (corral 0.2.0) restarted on host-n-old")


def test_an_agent_of_a_protocol_the_server_does_not_speak_is_refused_naming_both(served: tuple[str, Store]) -> None:
    url, store = served
    refused = pair(url, "n1", booting(store, "n1"), agent_version="9.0.0", protocol=2)
    assert refused.status_code == 409
    assert refused.json()["detail"] == (
        f"this agent (corral 9.0.0) speaks agent protocol 2; this server (corral {corral.__version__}) speaks agent"
        " protocol 1: run an agent of a corral that speaks it (docs/agent.md, Versions)"
    )
    node = store.node_row("n1")
    assert node is not None and node["state"] == "booting" and node["agent_version"] is None  # its token unused

    paired = pair(url, "n1", "boot-n1", agent_version="0.1.0", protocol=1)
    secret = paired.json()["secret"]
    body = {"node_id": "n1", "agent_version": "9.0.0", "protocol": 2}
    resumed = httpx.post(f"{url}/api/agent/resume", json=body, headers={"Authorization": f"Bearer {secret}"})
    assert resumed.status_code == 409 and "speaks agent protocol 2" in resumed.json()["detail"]
    assert store.list_events(node_id="n1", kind="node.agent_restarted") == []


def test_a_real_agent_refused_for_its_protocol_exits_2_saying_why(
    served: tuple[str, Store], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server of a later protocol: the one fault a test cannot have from two real corrals of one
    checkout, so the server's spoken protocols are set for it."""
    url, store = served
    monkeypatch.setattr(corral.server.agent_api, "AGENT_PROTOCOLS_SPOKEN", (2,))
    argv = [sys.executable, "-m", "corral.agent", "--server", url, "--node-id", "n1", "--work-dir", str(tmp_path / "w")]
    argv += ["--vcpus", "2", "--ram-mib", "1024"]
    env = {**os.environ, "CORRAL_BOOT_TOKEN": booting(store, "n1")}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    said = [json.loads(line)["msg"] for line in done.stderr.splitlines() if line.startswith("{")]
    assert (
        f"pairing refused: this agent (corral {corral.__version__}) speaks agent protocol 1; this server (corral"
        f" {corral.__version__}) speaks agent protocol 2: run an agent of a corral that speaks it (docs/agent.md,"
        " Versions); exiting"
    ) in said, done.stderr


def test_a_job_with_chdir_is_not_given_to_an_agent_that_does_not_know_the_field(served: tuple[str, Store]) -> None:
    """An agent of a corral before `chdir` would ignore the field and run the job in its own
    directory: the server gives it no such attempt, ends it as a temporary failure naming the field
    and the agent's version, and gives the retry to an agent that says it knows the field."""
    url, store = served
    old = pair(url, "n-old", booting(store, "n-old"), agent_version="0.0.9", protocol=1).json()["secret"]
    new = pair(url, "n-new", booting(store, "n-new"), agent_version=corral.__version__, protocol=1).json()["secret"]
    plain, placed = store.submit([JobRequest(command=["pwd"]), JobRequest(command=["pwd"], chdir="/shared/run42")], 0.0)
    for job_id in (plain, placed):
        assert store.claim(job_id, "d1", ["n-old"], Resources(1, 512), time.time()) is not None

    given = httpx.get(f"{url}/api/agent/work?wait=0", headers={"Authorization": f"Bearer {old}"}).json()["attempts"]
    assert [(a["job_id"], a["chdir"]) for a in given] == [(plain, None)]  # the plain job runs as ever
    job = store.job_row(placed)
    assert job is not None and job["state"] == "queued" and job["temp_failures"] == 1
    said = (
        "the agent on node n-old (corral 0.0.9) does not know chdir, which the job uses and which it would ignore:"
        " upgrade the node's agent (docs/agent.md, Versions)"
    )
    assert job["wait_reason"].startswith(said)
    assert [e["message"] for e in store.list_events(job_id=placed, kind="job.requeued")] == [job["wait_reason"]]

    # Placed again, on a node whose agent knows the field (the claim takes it as the back-off ends).
    assert store.claim(placed, "d1", ["n-new"], Resources(1, 512), time.time()) is not None
    headers = {"Authorization": f"Bearer {new}"}
    given = httpx.get(f"{url}/api/agent/work", params={"wait": 0, "knows": ["chdir"]}, headers=headers).json()
    assert [(a["job_id"], a["chdir"]) for a in given["attempts"]] == [(placed, "/shared/run42")]


def test_an_exit_by_a_signal_reads_as_such_and_an_older_agents_128_plus_n_as_before(served: tuple[str, Store]) -> None:
    """An agent reports a command killed by signal N as exit 128+N and, since exit_signal, N beside
    it (a report's field an older server ignores): the job and its attempt say which, where 137 alone
    read the same for a program that exited 137 and one SIGKILLed. An agent of a corral before it
    sends no exit_signal: its 137 reads as an exit, as it always did."""
    url, store = served
    secret = pair(url, "n1", booting(store, "n1"), agent_version=corral.__version__).json()["secret"]
    killed, exited, old_agent = store.submit([JobRequest(command=["x"], name=n) for n in ("k", "e", "o")], 0.0)
    attempts = [store.claim(j, "d1", ["n1"], Resources(1, 512), time.time()) for j in (killed, exited, old_agent)]
    headers = {"Authorization": f"Bearer {secret}"}
    now = time.time()
    reports = [
        {"attempt_id": attempts[0], "exit_code": 137, "exit_signal": 9, "finished_at": now},
        {"attempt_id": attempts[1], "exit_code": 137, "finished_at": now},
    ]
    pinged = httpx.post(f"{url}/api/agent/ping", json={"finished": reports}, headers=headers)
    assert pinged.status_code == 200 and pinged.json()["ack"] == attempts[:2], pinged.text
    # The report route, as an older agent sends it.
    old = {"exit_code": 137, "finished_at": now}
    assert httpx.post(f"{url}/api/agent/attempts/{attempts[2]}/finished", json=old, headers=headers).status_code == 200

    listed = {j["id"]: j for j in corral_json(url, "jobs")}
    assert {j: (listed[j]["exit_code"], listed[j]["exit_signal"]) for j in listed} == {
        killed: (137, 9),
        exited: (137, None),
        old_agent: (137, None),
    }
    shown = corral_json(url, "job", str(killed))
    assert shown["wait_reason"] == "exit 137: killed by signal 9 (SIGKILL)"
    assert [(a["exit_code"], a["exit_signal"]) for a in shown["attempt_list"]] == [(137, 9)]
    printed = corral_cli(url, "job", str(killed)).stdout
    assert "exit code  137 (killed by signal 9 (SIGKILL))" in printed and "137 (SIGKILL)" in printed, printed
    assert "exit code  137   node" in corral_cli(url, "job", str(exited)).stdout
    said = [e["message"] for e in corral_json(url, "events", "--job", str(killed), "--kind", "job.failed")]
    assert said == ["exit 137: killed by signal 9 (SIGKILL)"]
    bad = {"exit_code": 137, "exit_signal": 0}
    refused = httpx.post(f"{url}/api/agent/attempts/{attempts[0]}/finished", json=bad, headers=headers)
    assert refused.status_code == 422 and "exit_signal" in refused.text


def test_a_job_with_separate_stderr_is_not_given_to_an_agent_that_does_not_know_the_field(
    served: tuple[str, Store],
) -> None:
    """An agent of a corral before `separate_stderr` (one that knows chdir only) would send the job's
    stderr in its output: it is not given the job, which is requeued naming the field, the node and
    the agent's version. A job that keeps its stderr in its output (false, the default) runs on it."""
    url, store = served
    old = pair(url, "n-old", booting(store, "n-old"), agent_version="0.0.9", protocol=1).json()["secret"]
    new = pair(url, "n-new", booting(store, "n-new"), agent_version=corral.__version__, protocol=1).json()["secret"]
    plain, apart = store.submit(
        [JobRequest(command=["true"], separate_stderr=False), JobRequest(command=["true"], separate_stderr=True)], 0.0
    )
    for job_id in (plain, apart):
        assert store.claim(job_id, "d1", ["n-old"], Resources(1, 512), time.time()) is not None
    headers = {"Authorization": f"Bearer {old}"}
    given = httpx.get(f"{url}/api/agent/work", params={"wait": 0, "knows": ["chdir"]}, headers=headers).json()
    assert [(a["job_id"], a["separate_stderr"]) for a in given["attempts"]] == [(plain, False)]
    job = store.job_row(apart)
    assert job is not None and job["state"] == "queued" and job["temp_failures"] == 1
    assert job["wait_reason"].startswith(
        "the agent on node n-old (corral 0.0.9) does not know separate_stderr, which the job uses and which it would"
        " ignore: upgrade the node's agent (docs/agent.md, Versions)"
    )

    assert store.claim(apart, "d1", ["n-new"], Resources(1, 512), time.time()) is not None
    headers = {"Authorization": f"Bearer {new}"}
    given = httpx.get(f"{url}/api/agent/work", params={"wait": 0, "knows": list(corral.AGENT_KNOWS)}, headers=headers)
    assert [(a["job_id"], a["separate_stderr"]) for a in given.json()["attempts"]] == [(apart, True)]


def test_a_batch_script_job_is_not_given_to_an_agent_that_does_not_know_the_field(served: tuple[str, Store]) -> None:
    """An agent of a corral before `script` would run the script's name (`job.sh`) as a program
    the node does not have (exit 127): it is given no such attempt; one that knows the field is given
    the script's text with the command that names it and its arguments."""
    url, store = served
    old = pair(url, "n-old", booting(store, "n-old"), agent_version="0.0.9", protocol=1).json()["secret"]
    new = pair(url, "n-new", booting(store, "n-new"), agent_version=corral.__version__, protocol=1).json()["secret"]
    text = "#!/bin/sh\necho hi\n"
    plain, script = store.submit([JobRequest(command=["pwd"]), JobRequest(command=["job.sh", "a"], script=text)], 0.0)
    for job_id in (plain, script):
        assert store.claim(job_id, "d1", ["n-old"], Resources(1, 512), time.time()) is not None

    # The agent before `script` knew the fields before it.
    headers = {"Authorization": f"Bearer {old}"}
    knew = {"wait": "0", "knows": ["chdir", "separate_stderr"]}
    given = httpx.get(f"{url}/api/agent/work", params=knew, headers=headers).json()["attempts"]
    assert [(a["job_id"], a["script"]) for a in given] == [(plain, None)]
    job = store.job_row(script)
    assert job is not None and job["state"] == "queued" and job["temp_failures"] == 1
    assert job["wait_reason"].startswith(
        "the agent on node n-old (corral 0.0.9) does not know script, which the job uses and which it would ignore"
    )

    assert store.claim(script, "d1", ["n-new"], Resources(1, 512), time.time()) is not None
    headers = {"Authorization": f"Bearer {new}"}
    given = httpx.get(f"{url}/api/agent/work", params={"wait": 0, "knows": list(corral.AGENT_KNOWS)}, headers=headers)
    assert [(a["job_id"], a["command"], a["script"]) for a in given.json()["attempts"]] == [
        (script, ["job.sh", "a"], text)
    ]
