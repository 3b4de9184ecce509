"""The server keeps each running attempt's job and nodes at hand for its log chunks: an attempt
whose end is reported is forgotten, and no more than ATTEMPT_CACHE_MAX are kept, so that a
server's memory does not grow with every attempt it has ever run (some 450 bytes each)."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
import uvicorn

from corral.config import Config
from corral.core.model import GiB, InstanceType, Resources
from corral.jobspec import JobRequest
from corral.server import app as server_app
from corral.server.app import Runtime, create_app
from corral.server.logstore import LogStore
from corral.store import Store
from tests.support import wait_until

SMALL = InstanceType("small", 2, 4 * GiB, 0.10)


def test_ended_attempts_are_forgotten_and_the_cache_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    runtime = Runtime(config=Config(), store=store, logs=LogStore(tmp_path / "logs"), api_token="t")
    store.create_node("n-1", SMALL, "boot-1", 1000.0, "test")
    node = {"Authorization": f"Bearer {store.pair_node('n-1', 'boot-1', SMALL.capacity, 'host-1', 1000.0)}"}
    jobs = store.submit([JobRequest(command=["true"]) for _ in range(3)], 1000.0)
    claimed = [store.claim(job_id, "d-test", ["n-1"], Resources(0.5, GiB), 1000.0) for job_id in jobs]
    attempts = [attempt_id for attempt_id in claimed if attempt_id is not None]
    monkeypatch.setattr(server_app, "ATTEMPT_CACHE_MAX", 2)
    try:
        server = uvicorn.Server(uvicorn.Config(create_app(runtime), host="127.0.0.1", port=0, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        wait_until(lambda: server.started or not thread.is_alive(), 10, "the server to start")
        url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
        with httpx.Client(base_url=url, timeout=30) as client:
            given = client.get("/api/agent/work", params={"wait": 0}, headers=node).json()["attempts"]
            assert sorted(a["attempt_id"] for a in given) == attempts
            assert len(runtime.attempt_jobs) == 2  # the oldest dropped
            for attempt_id in attempts:  # each chunk lands, from the cache or the store
                answer = client.post(f"/api/agent/attempts/{attempt_id}/log", content=b"out\n", headers=node)
                assert answer.status_code == 200, answer.text
                assert client.post(f"/api/agent/attempts/{attempt_id}/started", json={"pid": 1}, headers=node).json()
            finished = [{"attempt_id": a, "exit_code": 0} for a in attempts[:2]]
            assert client.post("/api/agent/ping", json={"finished": finished}, headers=node).status_code == 200
            answer = client.post(f"/api/agent/attempts/{attempts[2]}/finished", json={"exit_code": 0}, headers=node)
            assert answer.status_code == 200
        server.should_exit = True
        thread.join(10)
        assert runtime.attempt_jobs == {}
        assert [store.job_row(j)["state"] for j in jobs] == ["complete"] * 3
        assert all(runtime.logs.path(j, a).read_bytes() == b"out\n" for j, a in zip(jobs, attempts, strict=True))
    finally:
        store.close()
