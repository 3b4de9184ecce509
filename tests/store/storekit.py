"""Helpers shared by the store tests (the fixtures are in conftest.py)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from corral.core import retry
from corral.core.model import GiB, InstanceType, Job, Resources
from corral.core.snapshot import JobOutcome
from corral.jobspec import JobRequest
from corral.store import Store, schema

NOW = 1_700_000_000.0  # explicit clock values everywhere; the store never reads a clock
SMALL = InstanceType("small", vcpus=4.0, ram_mib=8 * GiB, price_per_hour=0.10)
ONE_CPU = Resources(1.0, 1 * GiB, 0, 0)


def after_exit(exit_code: int, attempt_id: int) -> Callable[[Job], JobOutcome]:
    """What the agent API asks the core when an attempt exits (Store.finish_attempt's outcome_of)."""
    return lambda job: retry.after_exit(job, exit_code, (attempt_id,))


def request(name: str = "", **fields: Any) -> JobRequest:
    fields.setdefault("command", ["echo", name or "hello"])
    return JobRequest(name=name, **fields)


def submit(store: Store, count: int = 1, now: float = NOW, **fields: Any) -> list[int]:
    return store.submit([request(f"job-{i}", **fields) for i in range(count)], now)


def add_node(store: Store, node_id: str, now: float = NOW, itype: InstanceType = SMALL) -> str:
    """A paired (idle) node with a fresh ping at `now`; returns its secret."""
    store.create_node(node_id, itype, f"boot-{node_id}", now, "test")
    secret = store.pair_node(node_id, f"boot-{node_id}", itype.capacity, f"host-{node_id}", now)
    assert secret is not None
    return secret


def claim(
    store: Store,
    job_id: int,
    dispatcher: str = "d1",
    nodes: Sequence[str] = ("n1",),
    resources: Resources = ONE_CPU,
    now: float = NOW,
) -> int:
    attempt_id = store.claim(job_id, dispatcher, list(nodes), resources, now)
    assert attempt_id is not None, f"job {job_id} could not be claimed"
    return attempt_id


def event_kinds(store: Store, job_id: int) -> list[str]:
    return [e["kind"] for e in store.list_events(job_id=job_id)]


def count_rows(store: Store, table: str) -> int:
    with store.read() as conn:
        return int(conn.execute(select(func.count()).select_from(schema.metadata.tables[table])).scalar_one())


def all_rows(store: Store, table: str) -> list[dict[str, Any]]:
    t = schema.metadata.tables[table]
    with store.read() as conn:
        return [dict(r._mapping) for r in conn.execute(select(t).order_by(*t.primary_key.columns))]


def snapshot_of_tables(store: Store) -> dict[str, list[dict[str, Any]]]:
    """Every row of every table: to assert that an operation changed nothing at all."""
    return {name: all_rows(store, name) for name in schema.metadata.tables}


class SideTransaction:
    """Another client's open write transaction on the store's database, outside the store: it holds
    its locks until `commit()`, so a test can line up store calls behind it and release them at once.
    Use it as a context manager: leaving the block without commit() rolls back, so a failing test
    never leaves store calls blocked behind it.

    PostgreSQL locks rows; SQLite (BEGIN IMMEDIATE) takes the database's single write lock."""

    def __init__(self, store: Store) -> None:
        url = make_url(store.url)
        self.postgresql = url.get_backend_name() == "postgresql"
        self.conn: Any
        if self.postgresql:
            self.conn = psycopg.connect(url.set(drivername="postgresql").render_as_string(hide_password=False))
        else:
            self.conn = sqlite3.connect(str(url.database), isolation_level=None, timeout=30)
            self.conn.execute("BEGIN IMMEDIATE")

    def __enter__(self) -> SideTransaction:
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.close()  # rolls back whatever was not committed

    def execute(self, sql: str) -> None:
        self.conn.execute(sql)

    def commit(self) -> None:
        if self.postgresql:
            self.conn.commit()
        else:
            self.conn.execute("COMMIT")


def pg_sessions(url: str, condition: str) -> list[tuple[Any, ...]]:
    """The pg_stat_activity rows (state, wait_event_type) of this test's PostgreSQL sessions (its
    URL's application_name) that meet `condition`, an SQL condition on pg_stat_activity."""
    parsed = make_url(url)
    conninfo = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        query = f"SELECT state, wait_event_type FROM pg_stat_activity WHERE application_name = %s AND {condition}"
        return [tuple(row) for row in conn.execute(query, (parsed.query["application_name"],)).fetchall()]


def lock_waiters(store: Store) -> int | None:
    """How many of this test's PostgreSQL connections wait for a lock; None on SQLite (not observable)."""
    if make_url(store.url).get_backend_name() != "postgresql":
        return None
    return len(pg_sessions(store.url, "wait_event_type = 'Lock'"))


def wait_for_lock_waiters(store: Store, count: int, timeout: float = 20.0) -> None:
    """Poll (with a deadline) until `count` store calls are blocked on locks. On SQLite this cannot be
    observed and returns at once: the calls then run in whatever order they reach the write lock."""
    deadline = time.monotonic() + timeout
    while True:
        waiting = lock_waiters(store)
        if waiting is None or waiting >= count:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{waiting} of {count} store calls blocked after {timeout}s")
        time.sleep(0.01)


def attempts_to_kill(store: Store, node_id: str, running: list[int]) -> list[int]:
    """Of the attempts an agent says it runs, those its ping's answer tells it to kill (as the agent
    API reads them off `Store.attempts_on_node`)."""
    wanted = store.attempts_on_node(node_id).wanted(running)
    return [a for a in running if a not in wanted]
