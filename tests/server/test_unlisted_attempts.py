"""An attempt corral has running on a node whose agent stops listing it (neither running nor
finished, ping after ping: the agent lost track of it) ends as on a lost node, at corral's real
server (its app over HTTP, a real store): before, it stayed running for ever, holding its job and
its node's room. Guarded against the order reports cross in: an attempt only assigned, an exit in
the same ping, a listing in between, pings too quick to span the grace."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral.agent.agent import Agent, AgentOptions
from corral.config import Config
from corral.core.model import AttemptState, JobState
from corral.store import Store
from tests.store.storekit import SMALL, add_node, claim, submit
from tests.support import served_app, wait_until

INTERVAL = 0.05  # the server's ping interval: the grace is two of them


def served_with(tmp_path: Path, ping_interval: float) -> Any:
    return served_app(tmp_path, Config.model_validate({"cloud": {"ping_interval": ping_interval}}))


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[httpx.Client, Store]]:
    """Node n1's agent, as the protocol sees it, against a server whose ping interval is INTERVAL."""
    with served_with(tmp_path, INTERVAL) as (url, store):
        secret = add_node(store, "n1")
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {secret}"}) as client:
            yield client, store


def running_on_n1(store: Store, **fields: Any) -> tuple[int, int]:
    [job_id] = submit(store, **fields)
    attempt_id = claim(store, job_id, nodes=["n1"])
    assert store.attempt_started(attempt_id, "n1", 4242, time.time())
    return job_id, attempt_id


def ping(client: httpx.Client, running: list[int], finished: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    body = {"running": running, "finished": finished or [], "used": {"vcpus": 0.0, "ram_mib": 0}}
    answer = client.post("/api/agent/ping", json=body)
    assert answer.status_code == 200, answer.text
    time.sleep(INTERVAL)  # the next ping comes an interval later, as an agent's does
    result: dict[str, Any] = answer.json()
    return result


def test_an_attempt_its_agent_no_longer_lists_ends_as_on_a_lost_node(agent: tuple[httpx.Client, Store]) -> None:
    client, store = agent
    job_id, attempt_id = running_on_n1(store)
    assert ping(client, [attempt_id])["kill"] == []
    # Two pings that leave it out may still be the order reports crossed in: it runs on.
    assert ping(client, [])["kill"] == []
    assert ping(client, [])["kill"] == []
    assert store.job_row(job_id)["state"] == JobState.RUNNING.value
    # The third, two intervals after the first: lost, and the agent told to kill it should it still hold it.
    assert ping(client, [])["kill"] == [attempt_id]

    said = f"the agent on node n1 lost attempt {attempt_id}: 3 pings over"
    job = store.job_row(job_id)
    assert job["state"] == JobState.QUEUED.value and job["temp_failures"] == 1
    assert job["wait_reason"].startswith(said) and "retry 1/" in job["wait_reason"]
    attempt = store.attempt_row(attempt_id)
    assert attempt is not None and attempt["state"] == AttemptState.TEMPFAIL.value
    [lost] = store.list_events(node_id="n1", kind="node.attempt_lost")
    assert lost["message"].startswith(said) and lost["job_id"] == job_id
    [requeued] = store.list_events(job_id=job_id, kind="job.requeued")
    assert requeued["node_id"] == "n1"
    assert store.attempts_on_node("n1").running == []  # its room is free again
    assert ping(client, [])["kill"] == []  # judged once


def test_the_jobs_on_node_failure_decides(agent: tuple[httpx.Client, Store]) -> None:
    client, store = agent
    held, _ = running_on_n1(store, on_node_failure="hold")
    cancelled, _ = running_on_n1(store, on_node_failure="cancel")
    for _ in range(3):
        ping(client, [])
    job = store.job_row(held)
    assert job["state"] == JobState.QUEUED.value and job["held"]
    assert store.job_row(cancelled)["state"] == JobState.CANCELLED.value


def test_a_listing_in_between_starts_the_count_again(agent: tuple[httpx.Client, Store]) -> None:
    client, store = agent
    job_id, attempt_id = running_on_n1(store)
    for running in ([], [], [attempt_id], [], [], [attempt_id], []):
        assert ping(client, running)["kill"] == []
    assert store.job_row(job_id)["state"] == JobState.RUNNING.value
    assert store.list_events(node_id="n1", kind="node.attempt_lost") == []


def test_an_exit_in_the_same_ping_is_a_listing(agent: tuple[httpx.Client, Store]) -> None:
    client, store = agent
    job_id, attempt_id = running_on_n1(store)
    finish = {"attempt_id": attempt_id, "exit_code": 0, "finished_at": time.time()}
    for _ in range(4):  # (sent again until acknowledged, as an agent does)
        assert ping(client, [], [finish])["ack"] == [attempt_id]
    assert store.job_row(job_id)["state"] == JobState.COMPLETE.value
    assert store.list_events(node_id="n1", kind="node.attempt_lost") == []


def test_an_attempt_assigned_and_not_started_is_not_judged_by_the_listing(
    agent: tuple[httpx.Client, Store],
) -> None:
    """The agent has not started it yet (its long-poll has not brought it): dispatch.start_timeout
    is what ends one that never starts."""
    client, store = agent
    [job_id] = submit(store)
    attempt_id = claim(store, job_id, nodes=["n1"])
    for _ in range(5):
        assert ping(client, [])["kill"] == []
    attempt = store.attempt_row(attempt_id)
    assert attempt is not None and attempt["state"] == AttemptState.ASSIGNED.value


def test_a_gang_is_judged_by_its_first_node_only(agent: tuple[httpx.Client, Store]) -> None:
    """A gang's command runs on its first node: the others never list it."""
    client, store = agent
    add_node(store, "n2")
    [job_id] = submit(store)
    attempt_id = claim(store, job_id, nodes=["n2", "n1"])
    assert store.attempt_started(attempt_id, "n2", 4242, time.time())
    for _ in range(4):
        assert ping(client, [])["kill"] == []  # n1's pings
    assert store.job_row(job_id)["state"] == JobState.RUNNING.value


def test_pings_quicker_than_the_servers_interval_wait_for_the_grace(tmp_path: Path) -> None:
    """An agent pinging far faster than the server's interval (its own --ping-interval) is not
    judged sooner: the grace is two of the server's intervals, whatever the number of pings."""
    with served_with(tmp_path, 10.0) as (url, store):
        secret = add_node(store, "n1")
        job_id, _ = running_on_n1(store)
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {secret}"}) as client:
            for _ in range(6):
                assert ping(client, [])["kill"] == []
        assert store.job_row(job_id)["state"] == JobState.RUNNING.value


def test_a_real_agent_that_loses_track_of_a_run_gets_its_job_requeued(tmp_path: Path) -> None:
    """A real agent (its ping, work and reporter loops, over HTTP) runs a job, then loses track of
    the run, as a bug in it would (the one fault injected: the run is dropped from its memory): its
    pings stop listing it, and the server ends it as lost instead of keeping it running for ever."""
    with served_with(tmp_path, 0.1) as (url, store):
        store.create_node("n1", SMALL, "boot-n1", time.time(), "test")
        options = AgentOptions(
            server=url,
            node_id="n1",
            boot_token="boot-n1",
            capacity={"vcpus": 4.0, "ram_mib": 8192, "scratch_mib": 0, "gpus": 0},
            work_dir=tmp_path / "agent",
            work_wait=0.5,
        )
        options.work_dir.mkdir()
        agent = Agent(options)
        thread = threading.Thread(target=agent.run, daemon=True)
        thread.start()
        run = None
        try:
            wait_until(lambda: store.node_row("n1")["paired_at"], 20, "the agent to pair")
            [job_id] = submit(store, command=["sleep", "600"])
            attempt_id = claim(store, job_id, nodes=["n1"], now=time.time())
            wait_until(lambda: store.job_row(job_id)["state"] == JobState.RUNNING.value, 20, "the run to start")
            run = agent.runner.get(attempt_id)
            assert run is not None
            agent.runner.forget(attempt_id)  # the agent loses it; its command runs on

            wait_until(lambda: store.job_row(job_id)["state"] == JobState.QUEUED.value, 30, "the job to be requeued")
            job = store.job_row(job_id)
            assert job["temp_failures"] == 1
            assert job["wait_reason"].startswith(f"the agent on node n1 lost attempt {attempt_id}: ")
            [lost] = store.list_events(node_id="n1", kind="node.attempt_lost")
            assert lost["job_id"] == job_id
            assert thread.is_alive()  # the node stays
        finally:
            agent.stop.set()
            thread.join(20)
            if run is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(run.pid, signal.SIGKILL)
