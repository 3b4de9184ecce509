"""How large a request the server takes, over real HTTP: a body past its route's limit is refused
(413, naming the limit) before it is read, and a user route checks the API token before it reads
a body at all, so that no caller without a credential makes the server hold a large body in memory."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from corral.config import Config
from corral.core.model import GiB, InstanceType, Resources
from corral.jobspec import MAX_EXEC_STRING, JobRequest
from corral.server.app import WRONG_TOKEN
from corral.server.logstore import LogStore
from corral.server.models import MAX_AGENT_LIST, MAX_BODY, MAX_LOG_CHUNK_BODY, MAX_SUBMIT_BODY, MAX_SUBMITTED
from corral.store import Store
from tests.support import served_app

TOKEN = {"Authorization": "Bearer t"}
JSON = {"Content-Type": "application/json"}
SMALL = InstanceType("small", 2, 4 * GiB, 0.10)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Store]]:
    with served_app(tmp_path) as served:
        yield served


def test_a_user_route_wants_the_token_before_it_reads_the_body(served: tuple[str, Store]) -> None:
    url, store = served
    # Not JSON, and without a token: the body was parsed first (a 400 "the body is not JSON", after
    # holding all of it and its parse in memory), whatever its size, by anyone who could connect.
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        answer = httpx.post(f"{url}/api/jobs", content=b"[" * 100_000, headers={**JSON, **headers})
        assert answer.status_code == 401, answer.text
        assert answer.json()["detail"] in ("missing bearer token", WRONG_TOKEN)
    assert store.list_job_rows() == []
    # With the token, the same body is what it is.
    assert httpx.post(f"{url}/api/jobs", content=b"[", headers={**JSON, **TOKEN}).status_code == 400


def test_a_body_past_the_limit_is_refused_by_its_length_and_nothing_is_stored(served: tuple[str, Store]) -> None:
    url, store = served
    body = json.dumps({"set": {"note": "x" * MAX_BODY}}).encode()
    answer = httpx.patch(f"{url}/api/nodes/n-1", content=body, headers={**TOKEN, "Content-Type": "application/json"})
    assert answer.status_code == 413, answer.text
    assert answer.json() == {
        "detail": f"the request's body has more than {MAX_BODY:,} bytes, the most PATCH /api/nodes/n-1 takes"
    }
    # A body sent in chunks, with no length given, is counted as it comes.
    store.create_node("n-1", SMALL, "boot-1", 1000.0, "test")
    secret = store.pair_node("n-1", "boot-1", SMALL.capacity, "host-1", 1000.0)

    def chunks() -> Iterator[bytes]:
        yield b'{"running": ['
        for _ in range(MAX_BODY // 4096 + 1):
            yield b"1," * 2048
        yield b"1]}"

    answer = httpx.post(
        f"{url}/api/agent/ping",
        content=chunks(),
        headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
    )
    assert answer.status_code == 413, answer.text
    assert answer.json()["detail"].startswith("the request's body has more than")


def test_an_agent_log_chunk_past_its_limit_is_refused_and_nothing_is_written(
    served: tuple[str, Store], tmp_path: Path
) -> None:
    url, store = served
    store.create_node("n-1", SMALL, "boot-1", 1000.0, "test")
    secret = store.pair_node("n-1", "boot-1", SMALL.capacity, "host-1", 1000.0)
    [job_id] = store.submit([JobRequest(command=["true"])], 1000.0)
    attempt_id = store.claim(job_id, "d-test", ["n-1"], Resources(1, GiB), 1000.0)
    node = {"Authorization": f"Bearer {secret}"}
    log = f"{url}/api/agent/attempts/{attempt_id}/log"
    assert httpx.post(log, content=b"x" * MAX_BODY, headers=node).status_code == 200  # the agent's chunks fit
    answer = httpx.post(log, params={"offset": MAX_BODY}, content=b"y" * (MAX_LOG_CHUNK_BODY + 1), headers=node)
    assert answer.status_code == 413, answer.text
    assert (tmp_path / "logs" / str(job_id) / f"{attempt_id}.log").read_bytes() == b"x" * MAX_BODY


def test_a_ping_names_at_most_so_many_attempts(served: tuple[str, Store]) -> None:
    url, store = served
    store.create_node("n-1", SMALL, "boot-1", 1000.0, "test")
    secret = store.pair_node("n-1", "boot-1", SMALL.capacity, "host-1", 1000.0)
    # Each attempt a ping names as running is a write to the store: a node could make one ping
    # cost a hundred thousand transactions.
    many = list(range(1, MAX_AGENT_LIST + 2))
    answer = httpx.post(f"{url}/api/agent/ping", json={"running": many}, headers={"Authorization": f"Bearer {secret}"})
    assert answer.status_code == 422
    said = f"running: List should have at most {MAX_AGENT_LIST} items after validation, not {MAX_AGENT_LIST + 1}"
    assert answer.json()["detail"] == [said]


def test_a_submission_longer_than_any_is_refused_by_its_declared_length_unsent(served: tuple[str, Store]) -> None:
    url, store = served
    host, port = url.removeprefix("http://").split(":")
    # The header alone: the server answers without waiting for (or holding) a byte of the body.
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(
            b"POST /api/jobs HTTP/1.1\r\nHost: corral\r\nAuthorization: Bearer t\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n{" % (MAX_SUBMIT_BODY + 1)
        )
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
            answer += connection.recv(65536)
    head, body = answer.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 413 "), head
    assert json.loads(body) == {
        "detail": f"the request's body has more than {MAX_SUBMIT_BODY:,} bytes, the most POST /api/jobs takes"
    }
    assert store.list_job_rows() == []
    # A submission of the most jobs one may hold, as the CLI sends a job file, is under the limit.
    job = JobRequest(command=["python", "train.py", "--seed", "100000"], name="train-100000", tags=["sweep"])
    assert len(json.dumps(job.model_dump(mode="json"))) * MAX_SUBMITTED < MAX_SUBMIT_BODY


def test_an_attempts_output_past_server_max_output_is_cut_with_a_line_that_says_so(tmp_path: Path) -> None:
    # A job printing without end (`yes`) filled the disk that the store and every job's output share.
    config = Config.model_validate({"server": {"max_output": "1MiB"}})
    limit = 1024 * 1024
    with served_app(tmp_path, config) as (url, store):
        store.create_node("n-1", SMALL, "boot-1", 1000.0, "test")
        secret = store.pair_node("n-1", "boot-1", SMALL.capacity, "host-1", 1000.0)
        [job_id] = store.submit([JobRequest(command=["yes"])], 1000.0)
        attempt_id = store.claim(job_id, "d-test", ["n-1"], Resources(1, GiB), 1000.0)
        node = {"Authorization": f"Bearer {secret}"}
        log = f"{url}/api/agent/attempts/{attempt_id}/log"
        chunk = b"y\n" * (256 * 1024 // 2)
        # The agent sends it all, a chunk at a time: each is taken, those past the limit dropped.
        for offset in range(0, 3 * limit, len(chunk)):
            answer = httpx.post(log, params={"offset": offset}, content=chunk, headers=node)
            assert answer.status_code == 200, answer.text
        # A chunk sent again (after a lost answer) lands where it did.
        assert httpx.post(log, params={"offset": 0}, content=chunk, headers=node).status_code == 200
        output = httpx.get(f"{url}/api/jobs/{job_id}/logs", headers=TOKEN).content
    note = (
        f"\n[corral: this attempt's output was cut here, at {limit:,} bytes (server.max_output);"
        " the rest was not kept]\n"
    )
    assert output == chunk * (limit // len(chunk)) + note.encode()


def test_max_output_zero_keeps_all_of_it(tmp_path: Path) -> None:
    logs = LogStore(tmp_path, Config.model_validate({"server": {"max_output": 0}}).server.max_output_bytes)
    logs.write(1, 1, 0, b"x" * 3000)
    logs.write(1, 1, 3000, b"y")
    assert logs.path(1, 1).read_bytes() == b"x" * 3000 + b"y"


def test_a_job_that_exec_could_not_start_is_refused_at_submission(served: tuple[str, Store]) -> None:
    # A 50 MB variable was stored whole (the store, and every pass's memory) and the job then failed
    # on its node with exit 126, "Argument list too long".
    url, store = served
    cases = [
        ({"command": ["sh"], "env": {"BIG": "x" * (MAX_EXEC_STRING + 1)}}, "env.BIG: 131,076 bytes; exec takes"),
        ({"command": ["sh", "y" * MAX_EXEC_STRING]}, "command.1: 131,071 bytes"),
        ({"command": ["sh", *["y" * 100_000] * 11]}, "the command and environment have 1,100,014 bytes; at most"),
        # Not exec's, but stored with the job, held by every pass and shown to every user.
        (
            {"command": ["sh"], "tags": ["t" * 200] * 350},  # (a tag has at most 200 characters)
            "tags, traits, locality and the job's other fields but its command and environment have 70,000 bytes;"
            " at most 65,536",
        ),
    ]
    for job, said in cases:
        answer = httpx.post(f"{url}/api/jobs", json={"jobs": [{"command": ["true"]}, job]}, headers=TOKEN)
        if said.startswith("command.1"):  # the longest one exec takes
            assert answer.status_code == 201, answer.text
            continue
        assert answer.status_code == 422, answer.text
        [detail] = answer.json()["detail"]
        assert detail.startswith(f"jobs.1: {said}"), detail
    assert len(store.list_job_rows()) == 2
