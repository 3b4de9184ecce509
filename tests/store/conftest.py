"""Fixtures of the store suite: every test runs on SQLite (a temp file) and on PostgreSQL.

PostgreSQL: each test gets its own uniquely named schema (selected through the URL's
`options=-csearch_path=...`), dropped afterwards; the `public` schema is never touched, so runs
of several developers may share the database. Where PostgreSQL cannot be reached the PostgreSQL
variants skip with the reason -- unless `CI=true`, where that is a failure: CI never goes green
without them. Set `CORRAL_TEST_PG_URL` to use another server.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from corral.store import Store

PG_URL = os.environ.get("CORRAL_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
BACKENDS = ["sqlite", "postgresql"]


def pg_conninfo() -> str:
    """The test server as a libpq URL (for psycopg directly, without SQLAlchemy)."""
    return make_url(PG_URL).set(drivername="postgresql").render_as_string(hide_password=False)


@functools.cache
def pg_unavailable() -> str | None:
    """Why PostgreSQL cannot be used, or None when it can (asked once per session)."""
    try:
        with psycopg.connect(pg_conninfo(), connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:  # any failure to connect means "unavailable"; say which
        return f"PostgreSQL not reachable at {make_url(PG_URL).render_as_string()}: {exc}".strip()
    return None


def require_postgresql() -> None:
    reason = pg_unavailable()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true: PostgreSQL tests must run, but {reason}", pytrace=False)
    pytest.skip(reason)


@contextmanager
def pg_schema() -> Iterator[str]:
    """A fresh schema for one test; yields a store URL whose search_path is that schema."""
    name = f"corral_test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(pg_conninfo(), autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{name}"')
    try:
        # application_name lets a test find its own backends in pg_stat_activity (see storekit.lock_waiters).
        url = make_url(PG_URL).update_query_dict({"options": f"-csearch_path={name}", "application_name": name})
        yield url.render_as_string(hide_password=False)
    finally:
        with psycopg.connect(pg_conninfo(), autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """An empty database (no tables) on the backend under test."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'corral.db'}"
        return
    require_postgresql()
    with pg_schema() as url:
        yield url


@pytest.fixture
def empty_store(db_url: str) -> Iterator[Store]:
    """A store on an empty database: migrations not yet run."""
    store = Store(db_url)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def store(empty_store: Store) -> Store:
    """A migrated store on a fresh database."""
    empty_store.migrate()
    return empty_store
