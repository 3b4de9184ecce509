"""corral while its PostgreSQL store goes away and comes back (a restart for a minor upgrade, a
failover, a network blip): a private PostgreSQL cluster of this module's own, stopped and started
under a real store, server, control loop and notifier. Never the shared server: others' tests use it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text, update
from sqlalchemy.exc import OperationalError

from corral.cloud.base import TAG_STORE
from corral.cloud.sim import SimCloud
from corral.config import Config
from corral.core.model import NodeState
from corral.core.snapshot import Decisions
from corral.jobspec import JobRequest
from corral.loop import ControlLoop, LiveLoop, PassReport
from corral.notifier import Notifier
from corral.server.app import Runtime, create_app
from corral.server.logstore import LogStore
from corral.server.metrics import Metrics
from corral.sim.settings import SimSettings
from corral.store import Store, store_unreachable
from corral.store.schema import jobs as J
from tests.e2e.conftest import free_port
from tests.store.storekit import SMALL, add_node
from tests.support import served_app, wait_until
from tests.test_notifier import Receiver

START = 1_000_000.0
LAST_PASS = "corral_pass_last_success_timestamp_seconds"


def postgres_program(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/local/bin:/usr/lib/postgresql/15/bin")
    assert found, f"{name} (PostgreSQL's) is not installed: the store outage tests need a cluster of their own"
    return found


@dataclass
class PrivateCluster:
    """A PostgreSQL cluster in a temp dir on a free port, which only this module's tests use."""

    data: Path
    port: int
    as_owner: list[str]  # PostgreSQL refuses to run as root: as its own user then

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _ctl(self, *args: str) -> None:
        subprocess.run(
            [*self.as_owner, postgres_program("pg_ctl"), "-D", str(self.data), *args], check=True, timeout=60
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._ctl("-o", options, "-l", str(self.data / "server.log"), "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-m", mode, "-w", "stop")


@pytest.fixture(scope="module")
def cluster() -> Iterator[PrivateCluster]:
    root = Path(tempfile.mkdtemp(prefix="corral-pg-outage-"))
    as_owner: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        as_owner = ["runuser", "-u", "postgres", "--"]
    data = root / "data"
    initdb = [*as_owner, postgres_program("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "--no-sync"]
    subprocess.run(initdb, check=True, timeout=120, capture_output=True)
    private = PrivateCluster(data, free_port(), as_owner)
    private.start()
    try:
        yield private
    finally:
        with_stop = subprocess.run(
            [*as_owner, postgres_program("pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], capture_output=True
        )
        assert with_stop.returncode in (0, 1), with_stop.stderr  # 1: already stopped by a failed test
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def store(cluster: PrivateCluster) -> Iterator[Store]:
    """A store on the private cluster, in a schema of this test's own."""
    schema = f"outage_{os.getpid()}_{time.monotonic_ns()}"
    admin = Store(cluster.url)
    with admin.write() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    admin.close()
    fresh = Store(f"{cluster.url}?options=-csearch_path%3D{schema}")
    fresh.migrate()
    try:
        yield fresh
    finally:
        fresh.close()


def test_the_api_answers_503_saying_the_store_is_unreachable_and_serves_again_once_it_is_back(
    cluster: PrivateCluster, store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Seen: with PostgreSQL stopped, `corral jobs` said 'error: Internal Server Error', and the
    server logged a traceback for each request (300 in 27 s, the agents' pings among them)."""
    with served_app(tmp_path, store_url=store.url) as (url, _store):
        headers = {"Authorization": "Bearer t"}
        submitted = httpx.post(f"{url}/api/jobs", json={"jobs": [{"command": ["true"]}]}, headers=headers)
        assert submitted.status_code == 201, submitted.text
        cluster.stop()
        try:
            with caplog.at_level(logging.WARNING, logger="corral.server"):
                listing = httpx.get(f"{url}/api/jobs", headers=headers, timeout=30)
                refused = httpx.post(f"{url}/api/jobs", json={"jobs": [{"command": ["true"]}]}, headers=headers)
        finally:
            cluster.start()
        for answer in (listing, refused):
            assert answer.status_code == 503, answer.text
            assert answer.json()["detail"].startswith("the store is unreachable ("), answer.text
            assert answer.json()["detail"].endswith("): try again shortly"), answer.text
            assert answer.headers["Retry-After"] == "5"
        said = [r for r in caplog.records if "store unreachable" in r.getMessage()]
        assert said and all(r.exc_info is None for r in said)  # one line, no traceback
        assert "GET /api/jobs answered 503" in said[0].getMessage()

        # The pool's connections died with the server; the next request is served on a new one.
        again = httpx.get(f"{url}/api/jobs", headers=headers)
        assert again.status_code == 200, again.text
        assert [job["command"] for job in again.json()] == [["true"]]  # the one refused was not kept


def test_health_says_the_store_is_unreachable_while_liveness_stays_up(
    cluster: PrivateCluster, store: Store, tmp_path: Path
) -> None:
    """Seen: with PostgreSQL stopped, /api/health answered 200 while every other call answered 503,
    so a load balancer kept sending work to a dispatcher that could do none. Readiness (/api/health)
    now says so; liveness (/api/live) stays up, so that a watchdog does not restart corral in a loop
    through an outage a restart cannot end."""
    with served_app(tmp_path, store_url=store.url) as (url, _store):
        before = httpx.get(f"{url}/api/health")
        assert before.status_code == 200 and before.json()["store"] == "reachable", before.text
        cluster.stop()
        try:
            health = httpx.get(f"{url}/api/health", timeout=30)
            live = httpx.get(f"{url}/api/live", timeout=30)
        finally:
            cluster.start()
        assert health.status_code == 503, health.text
        assert health.json()["ok"] is False
        assert health.json()["store"].startswith("unreachable: "), health.text
        assert health.headers["Retry-After"] == "5"
        assert live.status_code == 200 and live.json()["ok"] is True, live.text
        assert httpx.get(f"{url}/api/health").status_code == 200  # ready again, on a new connection


def test_metrics_say_the_store_is_down_and_keep_the_loops_own_figures_through_an_outage(
    cluster: PrivateCluster, store: Store, tmp_path: Path
) -> None:
    """Seen: with PostgreSQL stopped, /metrics answered 503, so Prometheus saw `up == 0` (corral
    down, by the guide's CorralDown) and lost the very figures that tell a store outage:
    corral_pass_errors_total and the last good pass."""

    def scrape(url: str) -> dict[str, float]:
        response = httpx.get(f"{url}/metrics", timeout=30)
        assert response.status_code == 200, response.text
        samples = (s for family in text_string_to_metric_families(response.text) for s in family.samples)
        return {sample.name: sample.value for sample in samples if not sample.labels}

    with served_app(tmp_path, store_url=store.url) as (url, _store):
        before = scrape(url)
        assert before["corral_store_up"] == 1 and "corral_jobs_held" in before
        cluster.stop()
        try:
            during = scrape(url)
        finally:
            cluster.start()
        assert during["corral_store_up"] == 0
        assert {"corral_passes_total", "corral_pass_errors_total", LAST_PASS} <= set(during)
        # The store's figures are absent, not frozen at what they were before it went away.
        assert "corral_jobs_held" not in during and "corral_queue_oldest_wait_seconds" not in during
        assert scrape(url)["corral_store_up"] == 1


def test_events_read_just_before_an_outage_are_counted_once_in_metrics(cluster: PrivateCluster, store: Store) -> None:
    """Seen (in the code): a scrape counted a page of events, then read the jobs' first starts; the
    store lost at that read, the next scrape counted the page again: one node.down became two, and
    `increase()` alerts fired on events that never happened."""
    metrics = Metrics()
    metrics.event_cursor = store.last_event_id()
    store.add_event(START, "node.down", "no ping for 30s", node_id="n-1")
    store.add_event(START, "job.running", "on n-1", job_id=1)
    read_first_starts = store.first_starts

    def first_starts_as_the_store_goes(job_ids: Any) -> dict[int, tuple[float, float]]:
        cluster.stop()
        return read_first_starts(job_ids)

    store.first_starts = first_starts_as_the_store_goes  # type: ignore[method-assign]
    try:
        with pytest.raises(OperationalError):
            metrics.refresh(store, START)
    finally:
        store.first_starts = read_first_starts  # type: ignore[method-assign]
        cluster.start()
    metrics.refresh(store, START)
    assert metrics.registry.get_sample_value("corral_events_total", {"kind": "node.down"}) == 1


def test_a_node_heard_before_an_outage_longer_than_ping_stale_is_not_marked_down_for_it(
    cluster: PrivateCluster, store: Store
) -> None:
    """Seen: PostgreSQL down for 27 s under `ping_stale = 10s`: the first pass after it marked a node
    down, 'no ping for more than 10s', because its agent's pings had been refused meanwhile (a node
    with work would have had its work run again under `on_node_failure`)."""
    config = Config.model_validate(
        {
            "instance_types": [{"name": "small", "vcpus": 4, "ram": "8GiB", "price_per_hour": 0.1}],
            "policy": {"lifecycle": {"ping_stale": "10s", "idle_grace": "1h"}},
        }
    )
    clock = [START]
    cloud = SimCloud(config.core_instance_types(), SimSettings(), lambda: clock[0])
    instance = cloud.create(SMALL, "n1", "boot-n1", {TAG_STORE: store.store_id()})
    loop = ControlLoop(store, cloud, config, "d-outage", clock=lambda: clock[0])
    add_node(store, "n1", START)
    store.set_instance_id("n1", instance.id)
    loop.run_pass()

    clock[0] = START + 5
    cluster.stop("immediate")
    try:
        with pytest.raises(Exception) as failed:
            loop.run_pass()
        assert store_unreachable(failed.value) is not None
    finally:
        cluster.start()

    clock[0] = START + 60  # the agent's pings were refused all along
    loop.run_pass()
    assert "node.down" not in [e["kind"] for e in store.list_events(node_id="n1")]
    assert [(n["id"], n["state"]) for n in store.node_rows(limit=None)] == [("n1", NodeState.IDLE.value)]

    clock[0] = START + 71  # silent for ping_stale since the store came back: that is a silent node
    loop.run_pass()
    assert "node.down" in [e["kind"] for e in store.list_events(node_id="n1")]


def test_a_failed_webhook_handed_back_during_an_outage_is_still_tried_again(
    cluster: PrivateCluster, store: Store
) -> None:
    """The worker hands a failed action back to the loop's thread, which keeps it in the store as a
    retry at the next pass. Seen (in the code): a pass whose store read failed dropped what it had
    taken back, and the page was never tried again, nor said to have failed."""
    posted: list[dict[str, Any]] = []
    handler = type("Handler", (Receiver,), {"posted": posted, "refuse": [503]})
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    rules = Config.model_validate(
        {
            "notify": [
                {"name": "chat", "on": ["job.failed"], "webhook": f"http://127.0.0.1:{receiver.server_address[1]}/"}
            ]
        }
    ).notify
    clock = [START]
    notifier = Notifier(store, rules, lambda: clock[0])
    try:
        notifier.after_pass()
        store.add_event(START, "job.failed", "exit 1", job_id=7, node_id="n-1")
        assert notifier.after_pass() == 1
        # The refusal handed back to the loop's thread (nothing public tells it before the next pass).
        wait_until(lambda: notifier._back, 20, "the worker to hand the refused webhook back")

        # The store goes away after the pass has read the cursor (and taken the worker's hand-back),
        # before it reads the new events: the outage is real, its moment arranged.
        read_events = store.events_after

        def events_after_an_outage(after: int, limit: int = 500) -> list[dict[str, Any]]:
            cluster.stop()
            return read_events(after, limit)

        store.events_after = events_after_an_outage  # type: ignore[method-assign,assignment]
        try:
            assert notifier.after_pass() == 0  # the store gone: logged, the loop goes on
        finally:
            store.events_after = read_events  # type: ignore[method-assign]
            cluster.start()

        wait_until(lambda: notifier.after_pass() == 0 and store.notify_cursor(), 20, "the cursor read again")
        cursor = store.notify_cursor()
        assert cursor is not None
        assert [(r["rule"], r["tries"]) for r in cursor[1].get("retry", [])] == [("chat", 1)]
        clock[0] = START + 10
        assert notifier.after_pass() == 1
        wait_until(lambda: posted, 20, "the webhook sent again")
        assert [(p["rule"], p["event"]["job_id"]) for p in posted] == [("chat", 7)]
    finally:
        notifier.close()
        receiver.shutdown()
        receiver.server_close()


def test_a_session_ended_inside_a_write_is_told_as_the_store_unreachable_and_nothing_of_it_is_kept(
    store: Store,
) -> None:
    """Seen: pg_terminate_backend under corral run while agents reported: the agent API answered 500
    with SQLAlchemy's 'Can't reconnect until invalid transaction is rolled back', which hid the
    store's own error (so no 503 for the agent, and a traceback in the log)."""
    [job_id] = store.submit([JobRequest(command=["true"])], START)
    with pytest.raises(OperationalError) as ended, store.write() as conn:
        conn.execute(update(J).where(J.c.id == job_id).values(priority=0))
        store._event(conn, START, "job.updated", "half of a write", job_id=job_id)
        with store.engine.connect() as other:
            session = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
            other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": session})
            other.commit()
        conn.exec_driver_sql("SELECT 1")
    assert store_unreachable(ended.value) is not None
    assert "terminating connection" in str(ended.value.orig)

    # The next write takes a new connection; nothing of the ended one's transaction was kept.
    assert store.job_row(job_id)["priority"] != 0
    assert [e["kind"] for e in store.list_events(job_id=job_id)] == ["job.queued"]


def test_a_stop_while_the_store_is_unreachable_leaves_the_fleet_for_the_next_start_and_ends_cleanly(
    cluster: PrivateCluster, store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Seen: Ctrl-C of corral run with PostgreSQL stopped: 'Application shutdown failed. Exiting.'
    after a traceback, and the stop's last steps (the notifier's, the server's address file) skipped."""
    config = Config.model_validate(
        {"instance_types": [{"name": "small", "vcpus": 4, "ram": "8GiB", "price_per_hour": 0.1}]}
    )
    cloud = SimCloud(config.core_instance_types(), SimSettings(), time.time)
    instance = cloud.create(SMALL, "n1", "boot-n1", {TAG_STORE: store.store_id()})
    add_node(store, "n1", time.time())
    store.set_instance_id("n1", instance.id)
    runtime = Runtime(
        config=config,
        store=store,
        logs=LogStore(tmp_path / "logs"),
        api_token="t",
        loop=ControlLoop(store, cloud, config, "d-outage"),
    )
    stopped: list[bool] = []
    runtime.on_stop.append(lambda: stopped.append(True))
    server = uvicorn.Server(uvicorn.Config(create_app(runtime), host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 10, "the server to start")
    cluster.stop()
    try:
        with caplog.at_level(logging.INFO):
            server.should_exit = True
            thread.join(30)
    finally:
        cluster.start()
    assert not thread.is_alive()
    assert stopped == [True]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR and "shutdown failed" in r.getMessage()]
    [said] = [r for r in caplog.records if "the fleet and its work are left running" in r.getMessage()]
    assert said.getMessage().startswith("store unreachable: ") and said.exc_info is None
    assert [i.id for i in cloud.list()] == [instance.id]  # still running, for the next start to take back
    assert [(n["id"], n["state"]) for n in store.node_rows(limit=None)] == [("n1", NodeState.IDLE.value)]


class PassThenOutage(LiveLoop):
    """A loop whose first pass ends just as the store goes away (the outage is real, its moment
    arranged); it counts its passes."""

    def __init__(self, store: Store, config: Config, cluster: PrivateCluster) -> None:
        super().__init__(store, config, "d-outage")
        self.cluster = cluster
        self.passes = 0

    def _run_pass(self) -> PassReport:
        if self.passes == 0:
            self.cluster.stop()
        self.passes += 1  # (after the stop: the test starts the cluster again once it sees a pass)
        return PassReport(Decisions())

    def _shutdown_fleet(self, reason: str) -> None:
        pass


def test_the_loop_goes_on_when_the_store_goes_away_right_after_a_pass(
    cluster: PrivateCluster, store: Store, tmp_path: Path
) -> None:
    """Seen (in the code): the dashboard's sample of the store after a pass was the one read of the
    loop outside its guard: the store gone just then ended the control loop's task for good, and
    the server went on answering with no pass ever run again."""
    config = Config.model_validate({"loop": {"interval": "0.05s"}})
    loop = PassThenOutage(store, config, cluster)
    runtime = Runtime(config=config, store=store, logs=LogStore(tmp_path / "logs"), api_token="t", loop=loop)

    async def run_until_passes_again() -> None:
        runtime.wake_event = asyncio.Event()
        task = asyncio.create_task(runtime.run_loop())
        try:
            while loop.passes < 1:
                await asyncio.sleep(0.05)
            await asyncio.to_thread(cluster.start)
            deadline = time.monotonic() + 30
            while loop.passes < 3 and not task.done() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert not task.done(), task.exception()
            assert loop.passes >= 3
        finally:
            task.cancel()

    try:
        asyncio.run(run_until_passes_again())
    finally:
        if not (cluster.data / "postmaster.pid").exists():
            cluster.start()
