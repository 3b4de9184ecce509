"""What a DBA sees of corral's sessions in pg_stat_activity."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from corral.core.model import Job
from corral.jobspec import JobRequest, job_from_stored
from corral.store import Store
from tests.store.conftest import pg_schema, require_postgresql
from tests.store.storekit import pg_sessions

NOW = 1_800_000_000.0


@pytest.fixture
def pg_url() -> Iterator[str]:
    require_postgresql()
    with pg_schema() as url:
        yield url


def application_name(store: Store) -> str:
    with store.read() as conn:
        return str(conn.execute(text("SELECT current_setting('application_name')")).scalar_one())


def test_corral_names_its_sessions_with_its_dispatcher_so_a_dba_can_tell_them_apart(pg_url: str) -> None:
    """Without it every corral session was a blank application_name beside psql's and the other
    applications': which dispatcher held a lock or sat idle in a transaction could not be told."""
    unnamed = make_url(pg_url).difference_update_query(["application_name"]).render_as_string(hide_password=False)
    for url, given, shown in [
        (unnamed, None, "corral"),
        (unnamed, "corral d-web-1", "corral d-web-1"),
        (pg_url, "corral d-web-1", make_url(pg_url).query["application_name"]),  # the DBA's, in store.url, wins
    ]:
        store = Store(url) if given is None else Store(url, application_name=given)
        try:
            assert application_name(store) == shown
        finally:
            store.close()


def test_a_passs_snapshot_holds_no_transaction_open_while_it_builds_the_jobs(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen on a store of 100,000 queued jobs: the snapshot's REPEATABLE READ transaction stayed
    open, idle, for 24 s of the first pass while each job was built from its spec (and 2-4 s of
    every pass after, refreshing them): a long-held snapshot holds VACUUM back on every table, and
    a DBA's idle_in_transaction_session_timeout ended the session under the pass."""
    store = Store(pg_url)
    try:
        store.migrate()
        [first] = store.submit([JobRequest(command=["true"])], NOW)
        store.submit([JobRequest(command=["true"], dependency=f"afterok:{first}") for _ in range(2)], NOW)
        seen: list[list[str]] = []

        def built_and_sessions_seen(spec: Any, *args: Any) -> Job:
            seen.append(sessions_in_transaction(pg_url))
            return job_from_stored(spec, *args)

        monkeypatch.setattr("corral.store.store.job_from_stored", built_and_sessions_seen)
        jobs = store.load_snapshot("d-test", [], NOW).jobs
        assert [job.dependency is not None for job in jobs] == [False, True, True]
        assert seen and seen == [[]] * len(seen), seen
    finally:
        store.close()


def sessions_in_transaction(url: str) -> list[str]:
    """This test's sessions that are in a transaction, and not running a statement."""
    return [str(row[0]) for row in pg_sessions(url, "state LIKE 'idle in transaction%%'")]
