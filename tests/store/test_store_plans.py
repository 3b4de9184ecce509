"""How PostgreSQL runs the store's statements on a large store: what a DBA finds in EXPLAIN. Each
test fills a table as a store of months would be (events by the ten thousand), has PostgreSQL
ANALYZE it, as autovacuum does, and asks for the plan of the statement corral sends."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, text

from corral.retention import EVENT_BATCH
from corral.store import Store
from tests.store.conftest import pg_schema, require_postgresql

NOW = 1_800_000_000.0


@pytest.fixture
def pg_store() -> Iterator[Store]:
    require_postgresql()
    with pg_schema() as url:
        store = Store(url)
        try:
            store.migrate()
            yield store
        finally:
            store.close()


@contextmanager
def plans_of(store: Store, starting: str) -> Iterator[list[str]]:
    """The plans (EXPLAIN, not run) of the statements the store sends within that start with `starting`."""
    plans: list[str] = []

    def explain(_conn: Any, cursor: Any, statement: str, parameters: Any, _context: Any, many: bool) -> None:
        if not many and statement.lstrip().upper().startswith(starting):
            cursor.execute("EXPLAIN " + statement, parameters)
            plans.append("\n".join(str(row[0]) for row in cursor.fetchall()))

    event.listen(store.engine, "before_cursor_execute", explain)
    try:
        yield plans
    finally:
        event.remove(store.engine, "before_cursor_execute", explain)


def fill_events(store: Store, count: int, kind: str = "job.started") -> None:
    """`count` events of `kind`, one a second up to NOW, oldest first (as ids and times go together)."""
    with store.write() as conn:
        conn.execute(
            text(
                "INSERT INTO events (at, kind, job_id, node_id, message)"
                " SELECT :now - :count + g, :kind, g, NULL, 'started' FROM generate_series(1, :count) g"
            ),
            {"now": NOW, "count": count, "kind": kind},
        )
    with store.engine.connect() as conn:
        conn.execute(text("ANALYZE events"))
        conn.commit()


def test_a_retention_sweeps_batch_of_events_reads_the_events_by_their_key_not_the_whole_table(
    pg_store: Store,
) -> None:
    """Each batch's DELETE ... WHERE id IN (the batch's ids) was a hash join over a sequential
    scan of every event: 589 ms a batch of 10,000 over 700,000 events (65 ms by the key), growing
    with the table, each in a transaction after a pass."""
    fill_events(pg_store, 5 * EVENT_BATCH)
    with plans_of(pg_store, "DELETE") as plans:
        assert pg_store.purge_events(NOW - EVENT_BATCH, EVENT_BATCH) == EVENT_BATCH
    [plan] = plans
    assert "Seq Scan on events" not in plan, plan
    assert pg_store.list_events(limit=1)[0]["at"] == NOW  # the newest are kept
    assert len(pg_store.events_after(0, limit=10 * EVENT_BATCH)) == 4 * EVENT_BATCH


def test_listing_events_by_kind_reads_the_kind_index_not_every_event(pg_store: Store) -> None:
    """`corral events --kind node.` (a kind or its start: kind LIKE 'node.%') could not use
    ix_events_kind under the database's collation unless it is "C" (C.UTF-8 and en_US.UTF-8 are
    not): a sequential scan of every event for each listing, 114 ms over 700,000 events for the
    one `store.purged` (0.07 ms by the index)."""
    fill_events(pg_store, 5, "node.down")
    fill_events(pg_store, 50_000)
    fill_events(pg_store, 5, "node.drained")
    with plans_of(pg_store, "SELECT") as plans:
        listed = pg_store.list_events(kind="node.")
        exact = pg_store.list_events(kind="node.down")
    assert [e["kind"] for e in listed] == ["node.down"] * 5 + ["node.drained"] * 5
    assert [e["kind"] for e in exact] == ["node.down"] * 5
    assert plans and not [plan for plan in plans if "Seq Scan on events" in plan], plans
    assert pg_store.list_events(kind="job.st", limit=3)[-1]["kind"] == "job.started"
    assert pg_store.list_events(kind="nothing.") == []
