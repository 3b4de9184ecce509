"""Slurm's `scancel --signal` (corral cancel --signal) through the API and the agent protocol, over
real HTTP against corral's server app and SQLite: a running job's request is handed to its node's
agent in every ping answer until the agent says it sent it, then gone, with an event naming the
signal and who asked; a request whose attempt ended first is dropped with an event; a job that does
not run is refused naming its state; a user signals only their own jobs; a bad signal, KILL
included, is refused; in front of Slurm --batch is refused."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral.cloud.sim import SimCloud
from corral.config import Config, load_config
from corral.core.model import InstanceType, Resources
from corral.jobspec import JobRequest
from corral.loop import ControlLoop
from corral.sim.settings import SimSettings
from corral.store import Store
from tests.server.cli import corral as corral_cli
from tests.support import served_app

C5 = InstanceType("c5.large", vcpus=2, ram_mib=4096, price_per_hour=0.1)
OPERATOR = {"Authorization": "Bearer t"}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Store]]:
    with served_app(tmp_path) as app:
        yield app


def paired(url: str, store: Store, node_id: str = "n1") -> dict[str, str]:
    store.create_node(node_id, C5, f"boot-{node_id}", 1000.0, "test")
    body = {"node_id": node_id, "boot_token": f"boot-{node_id}", "capacity": {"vcpus": 2, "ram_mib": 4096}}
    secret = httpx.post(f"{url}/api/agent/pair", json=body).json()["secret"]
    return {"Authorization": f"Bearer {secret}"}


def running_job(store: Store, node_id: str = "n1", user: str = "") -> tuple[int, int]:
    """A job whose attempt the node's agent has started: (job id, attempt id)."""
    [job_id] = store.submit([JobRequest(command=["sleep", "60"], user=user)], time.time())
    attempt_id = store.claim(job_id, "d1", [node_id], Resources(1, 512), time.time())
    assert attempt_id is not None
    assert store.attempt_started(attempt_id, node_id, 4242, time.time())
    return job_id, attempt_id


def ping(url: str, node: dict[str, str], running: list[int], **extra: Any) -> dict[str, Any]:
    answer = httpx.post(f"{url}/api/agent/ping", json={"running": running, **extra}, headers=node)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def test_a_request_goes_to_the_agent_until_it_says_it_sent_it_and_the_job_runs_on(
    served: tuple[str, Store],
) -> None:
    url, store = served
    node = paired(url, store)
    job_id, attempt_id = running_job(store)
    asked = httpx.post(f"{url}/api/jobs/{job_id}/signal", json={"signal": "sigusr1"}, headers=OPERATOR)
    assert asked.status_code == 200, asked.text
    assert asked.json() == {"id": job_id, "state": "running", "changed": True, "attempt_id": attempt_id}
    [request] = ping(url, node, [attempt_id])["signals"]
    assert request["attempt_id"] == attempt_id and request["number"] == 10 and request["main_only"] is False
    # Handed out again until the agent says it sent it (its answer may have been lost on the way).
    assert ping(url, node, [attempt_id])["signals"] == [request]
    said = ping(url, node, [attempt_id], signalled=[{"id": request["id"], "to": "process group 4242"}])
    assert said["signals"] == [] and said["kill"] == []
    # Said sent twice (the ping's answer was lost): nothing more happens.
    assert ping(url, node, [attempt_id], signalled=[{"id": request["id"], "to": "process group 4242"}])["signals"] == []
    job = store.job_row(job_id)
    assert job["state"] == "running" and not job["cancel_requested"]
    kinds = [(e["kind"], e["message"]) for e in store.list_events(job_id=job_id, kind="job.signal")]
    assert kinds == [
        ("job.signal_requested", f"signal 10 (SIGUSR1) requested for attempt {attempt_id}, to its process group"),
        (
            "job.signalled",
            f"signal 10 (SIGUSR1) to its process group (asked by (operator)) sent to process group 4242 of attempt"
            f" {attempt_id} on node n1",
        ),
    ]
    shown = corral_cli(url, "job", str(job_id)).stdout
    assert "signalled" in shown and "SIGUSR1" in shown, shown


def test_a_request_whose_attempt_ended_first_is_dropped_with_an_event(served: tuple[str, Store]) -> None:
    url, store = served
    node = paired(url, store)
    job_id, attempt_id = running_job(store)
    asked = httpx.post(f"{url}/api/jobs/{job_id}/signal", json={"signal": "HUP", "batch": True}, headers=OPERATOR)
    assert asked.status_code == 200, asked.text
    # The run ends (its exit reported) before the agent's next ping hands the request out.
    finished = httpx.post(f"{url}/api/agent/attempts/{attempt_id}/finished", json={"exit_code": 0}, headers=node)
    assert finished.status_code == 200
    assert ping(url, node, [])["signals"] == []
    assert store.list_events(job_id=job_id, kind="job.signal_dropped") == []
    # The next pass drops it: a request its agent will never be handed (a lost node's too) is said so.
    config = Config.model_validate(
        {"instance_types": [{"name": C5.name, "vcpus": 2, "ram": "4GiB", "price_per_hour": 0.1}]}
    )
    ControlLoop(store, SimCloud(config.core_instance_types(), SimSettings(), time.time), config, "d-test").run_pass()
    [dropped] = store.list_events(job_id=job_id, kind="job.signal_dropped")
    assert dropped["message"] == (
        f"signal 1 (SIGHUP) to its main process (asked by (operator)) not sent to attempt {attempt_id}: its attempt"
        " ended before it was sent"
    )


def test_a_job_that_does_not_run_is_refused_by_id_and_state_and_the_others_are_signalled(
    served: tuple[str, Store],
) -> None:
    url, store = served
    paired(url, store)
    running, _ = running_job(store)
    [queued] = store.submit([JobRequest(command=["true"])], time.time())
    [claimed] = store.submit([JobRequest(command=["true"])], time.time())
    assert store.claim(claimed, "d1", ["n1"], Resources(1, 512), time.time()) is not None
    refused = httpx.post(f"{url}/api/jobs/{queued}/signal", json={"signal": "USR1"}, headers=OPERATOR)
    assert refused.status_code == 409
    assert refused.json()["detail"] == (
        f"job {queued} is queued: only a running job's command can be signalled (its command has not started)"
    )
    done = corral_cli(url, "cancel", "--signal", "USR1", str(queued), str(running), str(claimed), check=False)
    assert done.returncode == 1
    assert done.stdout == f"{running}: SIGUSR1 requested for the process group of attempt 1\n"
    assert f"{queued}: job {queued} is queued: only a running job's command can be signalled" in done.stderr
    assert f"{claimed}: job {claimed} is claimed" in done.stderr
    # By filter: the running ones signalled, each other one said by id and state.
    bulk = corral_cli(url, "cancel", "-s", "10", "--name", "", check=False)
    assert bulk.returncode == 1
    assert bulk.stdout == f"SIGUSR1 requested for the process group of 1 job: {running}\n"
    assert f"{queued}: queued: not running, not signalled" in bulk.stderr
    assert f"{claimed}: claimed: not running, not signalled" in bulk.stderr
    # Nothing was cancelled.
    assert not any(store.job_row(j)["cancel_requested"] for j in (running, queued, claimed))


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("KILL", "signal 9 (SIGKILL) cannot be caught, and would reach the run's keeper too: corral cancel ends a run"),
        ("STOP", "signal 19 (SIGSTOP) cannot be caught"),
        ("USR9", "'USR9' is no signal"),
        ("0", "'0' is no signal"),
    ],
)
def test_a_bad_signal_is_refused_by_the_cli_and_the_server(served: tuple[str, Store], value: str, said: str) -> None:
    url, store = served
    paired(url, store)
    job_id, _ = running_job(store)
    refused = corral_cli(url, "cancel", "--signal", value, str(job_id), check=False)
    assert refused.returncode != 0 and said in refused.stderr, refused.stderr
    answer = httpx.post(f"{url}/api/jobs/{job_id}/signal", json={"signal": value}, headers=OPERATOR)
    assert answer.status_code == 422 and said in answer.text
    assert corral_cli(url, "cancel", "--batch", str(job_id), check=False).returncode != 0  # (--batch alone)
    assert store.list_events(job_id=job_id, kind="job.signal") == []


def test_a_user_signals_only_their_own_jobs(served: tuple[str, Store]) -> None:
    url, store = served
    added = httpx.post(f"{url}/api/users", json={"name": "alice"}, headers=OPERATOR)
    alice = {"Authorization": f"Bearer {added.json()['token']}"}
    paired(url, store)
    theirs, _ = running_job(store, user="bob")
    own, own_attempt = running_job(store, user="alice")
    denied = httpx.post(f"{url}/api/jobs/{theirs}/signal", json={"signal": "USR1"}, headers=alice)
    assert denied.status_code == 403
    assert "Access/permission denied: job" in denied.json()["detail"] and "only its owner may signal it" in denied.text
    bulk = httpx.post(f"{url}/api/jobs/signal", json={"signal": "USR1", "user": "bob"}, headers=alice)
    assert bulk.status_code == 403
    # Her filter takes only her own.
    mine = httpx.post(f"{url}/api/jobs/signal", json={"signal": "USR1", "states": ["running"]}, headers=alice)
    assert mine.json() == {"ids": [own], "not_running": {}}
    [asked] = store.list_events(job_id=own, kind="job.signal_requested")
    assert asked["message"].endswith("(by alice)")
    assert store.list_events(job_id=theirs, kind="job.signal") == []
    # The operator any.
    assert httpx.post(f"{url}/api/jobs/{theirs}/signal", json={"signal": "USR1"}, headers=OPERATOR).status_code == 200
    del own_attempt


def test_in_front_of_slurm_batch_and_a_signal_the_batch_script_would_die_of_are_refused(tmp_path: Path) -> None:
    config = load_config(None, home=tmp_path, executor="slurm")
    with served_app(tmp_path, config) as (url, store):
        [job_id] = store.submit([JobRequest(command=["sleep", "60"])], time.time())
        batch = httpx.post(f"{url}/api/jobs/{job_id}/signal", json={"signal": "USR1", "batch": True}, headers=OPERATOR)
        assert batch.status_code == 409 and "the batch shell is corral's batch script" in batch.text
        term = httpx.post(f"{url}/api/jobs/{job_id}/signal", json={"signal": "TERM"}, headers=OPERATOR)
        assert term.status_code == 409 and "these reach the command: HUP, INT" in term.text
