"""/api/health (readiness) and /api/live (liveness), as a load balancer and a watchdog poll them."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.support import served_app, wait_until

# Starlette runs a route that is not async in a pool of this many threads (anyio's default).
WORKER_THREADS = 40


def test_liveness_answers_while_health_checks_hang_on_a_store_that_does_not_answer(tmp_path: Path) -> None:
    """A store whose network drops packets does not refuse: each health check's query hangs until
    TCP gives up, minutes later. A load balancer polling every few seconds then held every worker
    thread, and a liveness check waiting for one would fail, and a watchdog restart corral, for an
    outage a restart cannot end."""
    with served_app(tmp_path) as (url, store):
        released = threading.Event()
        hung = []

        def hangs() -> None:
            hung.append(1)
            released.wait(60)

        store.answers = hangs  # type: ignore[method-assign]
        with ThreadPoolExecutor(WORKER_THREADS + 5) as polls:
            try:
                for _ in range(WORKER_THREADS + 5):
                    polls.submit(httpx.get, f"{url}/api/health", timeout=60)
                wait_until(lambda: len(hung) >= WORKER_THREADS, 30, "the health checks to take every worker thread")
                live = httpx.get(f"{url}/api/live", timeout=10)
            finally:
                released.set()
        assert live.status_code == 200 and live.json()["ok"] is True, live.text
