"""A PostgreSQL store that answers but refuses a statement for now: a lock_timeout or
statement_timeout its DBA set on corral's role or in store.url, a deadlock, a serialization failure.
Its transaction is rolled back whole; the same request may be made again. corral says so in one line
naming the database's reason: not a 500 with a traceback (lock_timeout, deadlock), nor "the store is
unreachable" (statement_timeout, which made every pass count as an outage: no node was ever judged
silent while passes timed out)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from corral.cloud.sim import SimCloud
from corral.jobspec import JobRequest
from corral.loop import ControlLoop
from corral.sim.settings import SimSettings
from corral.store import Store, store_refused, store_unreachable
from tests.store.conftest import pg_conninfo, pg_schema, require_postgresql
from tests.store.storekit import wait_for_lock_waiters
from tests.support import served_app
from tests.test_loop import CONFIG

HEADERS = {"Authorization": "Bearer t"}


def with_settings(url: str, *settings: str) -> str:
    """The store URL with these PostgreSQL settings for its sessions, as a DBA puts them in store.url."""
    parsed = make_url(url)
    options = " ".join([str(parsed.query["options"]), *(f"-c{s}" for s in settings)])
    return parsed.update_query_dict({"options": options}).render_as_string(hide_password=False)


def schema_of(url: str) -> str:
    return str(make_url(url).query["options"]).split("search_path=", 1)[1].split()[0]


@pytest.fixture
def pg_url() -> Iterator[str]:
    require_postgresql()
    with pg_schema() as url:
        yield url


@pytest.fixture
def holder(pg_url: str) -> Iterator[psycopg.Connection]:
    """Another session on the store's schema, in a transaction, to hold locks the store must wait for."""
    with psycopg.connect(pg_conninfo()) as conn:
        conn.execute(f'SET search_path = "{schema_of(pg_url)}"')
        yield conn
        conn.rollback()


@pytest.mark.parametrize(
    ("setting", "said"),
    [("lock_timeout=100", "lock timeout"), ("statement_timeout=100", "statement timeout")],
)
def test_a_timeout_set_by_the_dba_answers_503_naming_it_and_the_request_succeeds_once_the_lock_is_free(
    tmp_path: Path, pg_url: str, holder: psycopg.Connection, setting: str, said: str
) -> None:
    with served_app(tmp_path, store_url=with_settings(pg_url, setting)) as (url, store):
        [job_id] = store.submit([JobRequest(command=["true"])], time.time())
        holder.execute("SELECT id FROM jobs WHERE id = %s FOR UPDATE", (job_id,))  # a long transaction of someone's
        refused = httpx.post(f"{url}/api/jobs/{job_id}/cancel", headers=HEADERS)
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"] == "5"
        detail = refused.json()["detail"]
        assert said in detail and "unreachable" not in detail, detail
        assert "rolled back" in detail and "try again" in detail
        assert store.job_row(job_id)["cancel_requested"] is False  # nothing of it was kept
        holder.rollback()
        assert httpx.post(f"{url}/api/jobs/{job_id}/cancel", headers=HEADERS).status_code == 200


def test_a_deadlock_is_told_as_a_refusal_for_now_not_as_an_outage(pg_url: str, holder: psycopg.Connection) -> None:
    store = Store(pg_url)
    try:
        store.migrate()
        first, second = store.submit([JobRequest(command=["true"]), JobRequest(command=["true"])], time.time())
        holder.execute("UPDATE jobs SET priority = 2 WHERE id = %s", (second,))
        caught: list[BaseException] = []

        def lock_in_the_other_order() -> None:
            try:
                with store.write() as conn:
                    conn.execute(text("UPDATE jobs SET priority = 3 WHERE id = :id"), {"id": first})
                    conn.execute(text("UPDATE jobs SET priority = 3 WHERE id = :id"), {"id": second})
            except OperationalError as exc:
                caught.append(exc)

        writer = threading.Thread(target=lock_in_the_other_order)
        writer.start()
        try:
            # The writer holds `first` and waits for our `second`; we now wait for its `first`:
            # PostgreSQL ends one of the two.
            wait_for_lock_waiters(store, 1)
            holder.execute("UPDATE jobs SET priority = 2 WHERE id = %s", (first,))
            holder.commit()
        except psycopg.errors.DeadlockDetected as exc:
            holder.rollback()
            writer.join()
            pytest.skip(f"PostgreSQL ended the test's own session, not the store's: {exc}")
        writer.join()
        [error] = caught
        assert store_unreachable(error) is None
        refused = store_refused(error)
        assert refused is not None and "deadlock" in refused
    finally:
        store.close()


def test_a_pass_cut_short_by_statement_timeout_is_no_outage_silence_goes_on_being_counted(
    pg_url: str, holder: psycopg.Connection
) -> None:
    """A pass refused by statement_timeout counted as the store unreachable: the next pass gave
    every node and peer its full grace again from then, so a dead node was never marked down
    while passes timed out."""
    store = Store(with_settings(pg_url, "statement_timeout=200"))
    try:
        store.migrate()
        loop = ControlLoop(store, SimCloud(CONFIG.core_instance_types(), SimSettings(), time.time), CONFIG, "d-test")
        loop.run_pass()
        observing_since = loop.observing_since
        holder.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")  # a DBA's maintenance, say
        with pytest.raises(OperationalError) as refused:
            loop.run_pass()
        assert store_refused(refused.value) is not None
        holder.rollback()
        loop.run_pass()
        assert loop.observing_since == observing_since
    finally:
        store.close()
