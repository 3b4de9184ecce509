"""How PostgreSQL runs the store's statements on a large store: what a DBA finds in EXPLAIN. Each
test fills a table as a store of months would be (events by the ten thousand), has PostgreSQL
ANALYZE it, as autovacuum does, and asks for the plan of the statement corral sends. Those marked so
also run on SQLite, which plans without statistics (corral never has it ANALYZE a store)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Engine, event, text

from corral.jobspec import JobRequest
from corral.retention import EVENT_BATCH
from corral.store import JobFilter, Store
from tests.store.conftest import pg_schema, require_postgresql
from tests.store.storekit import add_node, claim, submit

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
    sqlite = store.engine.dialect.name == "sqlite"

    def explain(_conn: Any, cursor: Any, statement: str, parameters: Any, _context: Any, many: bool) -> None:
        if not many and statement.lstrip().upper().startswith(starting):
            # SQLite's EXPLAIN QUERY PLAN rows: (id, parent, unused, detail).
            cursor.execute(("EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN ") + statement, parameters)
            plans.append("\n".join(str(row[3] if sqlite else row[0]) for row in cursor.fetchall()))

    engines: set[Engine] = {store.engine, store.reader}  # (SQLite reads through an engine of their own)
    for engine in engines:
        event.listen(engine, "before_cursor_execute", explain)
    try:
        yield plans
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", explain)


def scans_whole(plan: str, table: str) -> bool:
    """Whether `plan` reads every row of `table` (PostgreSQL's Seq Scan, SQLite's SCAN)."""
    return any(
        line.strip().startswith((f"SCAN {table}", f"SCAN TABLE {table}")) or f"Seq Scan on {table}" in line
        for line in plan.splitlines()
    )


def analyze(store: Store, *tables: str) -> None:
    """Statistics as autovacuum keeps them on PostgreSQL; none on SQLite, as corral leaves it."""
    if store.engine.dialect.name == "postgresql":
        with store.engine.connect() as conn:
            for table in tables:
                conn.execute(text(f"ANALYZE {table}"))
            conn.commit()


def fill_jobs(store: Store, count: int, names: int) -> None:
    """`count` finished jobs named run-0 .. run-`names - 1` in turn, one a second up to NOW, each
    with one attempt that ran the second after it was submitted."""
    spec = JobRequest(command=["true"], user="alice").model_dump_json()
    series = "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < :count) "
    spec_value = "CAST(:spec AS JSON)" if store.engine.dialect.name == "postgresql" else ":spec"
    with store.write() as conn:
        conn.execute(
            text(
                series + "INSERT INTO jobs (name, state, priority, spec, user_name, submitted_at, temp_failures,"
                " perm_failures, attempt_count, wait_reason, unplaceable, cancel_requested, held, updated_at,"
                f" finished_at) SELECT 'run-' || (n % :names), 'complete', 1, {spec_value}, 'alice',"
                " :now - :count + n, 0, 0, 1, '', false, false, false, :now, :now - :count + n + 1 FROM g"
            ),
            {"count": count, "names": names, "spec": spec, "now": NOW},
        )
        conn.execute(
            text(
                "INSERT INTO attempts (job_id, node_id, node_ids, vcpus, ram_mib, scratch_mib, gpus, state,"
                " assigned_at, started_at, finished_at, exit_code, reason) SELECT id, 'n1', '[\"n1\"]', 1.0,"
                " 1024, 0, 0, 'exited', submitted_at, submitted_at, finished_at, 0, '' FROM jobs"
            )
        )
    analyze(store, "jobs", "attempts")


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


def test_fair_shares_spans_of_the_last_minutes_read_the_attempts_by_their_end_not_every_attempt(
    store: Store,
) -> None:
    """Fair share charges the attempts running in its window (the last 5 minutes, each pass under
    queue.order fairshare/multifactor): those not ended and those ended since. It read every attempt
    ever made: 67 ms at 300,000 on PostgreSQL, growing with history (2.3 ms by ix_attempts_finished)."""
    fill_jobs(store, 20_000, names=1000)
    add_node(store, "n1", now=NOW - 3600)
    [running] = submit(store, 1, now=NOW - 3600, user="bob")
    assert store.attempt_started(claim(store, running, now=NOW - 3600), "n1", 42, NOW - 3600)
    with plans_of(store, "SELECT") as plans:
        spans = store.attempt_spans(NOW - 300, NOW)
    assert plans and not [plan for plan in plans if scans_whole(plan, "attempts")], plans
    # The running one, and each that ended within the window (the one a second ran from NOW - 300 on).
    assert sorted(span.user for span in spans) == ["alice"] * 300 + ["bob"]


def test_listing_the_jobs_of_a_name_reads_the_name_index_not_every_job(store: Store) -> None:
    """`corral jobs --name X` (GET /api/jobs?name=X: the name exact) read every job: 139 ms at
    400,000 on PostgreSQL (0.04 ms by ix_jobs_name), the newest of the name first, a page at a time."""
    fill_jobs(store, 20_000, names=1000)
    with plans_of(store, "SELECT") as plans:
        named = store.list_job_rows(picked=JobFilter(name="run-7"))
        page_before = store.list_job_rows(limit=5, picked=JobFilter(name="run-7"), before=named[-5]["id"])
    assert plans and not [plan for plan in plans if scans_whole(plan, "jobs")], plans
    ids = [row["id"] for row in named]
    assert len(ids) == 20 and ids == sorted(ids) and {row["name"] for row in named} == {"run-7"}
    assert ids[-1] - ids[0] == 19 * 1000  # one job of the name in each thousand
    assert [row["id"] for row in page_before] == ids[-10:-5]


def test_listing_the_jobs_of_a_tag_reads_the_tag_index_not_every_job(store: Store) -> None:
    """`corral jobs --tag X` (and cancel --tag) read the tags in the spec of every job (json_each;
    PostgreSQL cast each spec's tags to jsonb): 1.7 s at 400,000 jobs on PostgreSQL. A job's tags
    are rows of job_tags, written at submission (a tag given twice, once), found by ix_job_tags_tag."""
    store.submit([JobRequest(command=["true"], tags=[f"batch-{i % 500}", "all", "all"]) for i in range(10_000)], NOW)
    analyze(store, "jobs", "job_tags")
    with plans_of(store, "SELECT") as plans:
        tagged = store.list_job_rows(picked=JobFilter(tag="batch-7"))
    assert plans and not [plan for plan in plans if scans_whole(plan, "jobs")], plans
    assert not [plan for plan in plans if scans_whole(plan, "job_tags")], plans
    ids = [row["id"] for row in tagged]
    assert len(ids) == 20 and ids[-1] - ids[0] == 19 * 500
    assert len(store.list_job_rows(limit=100_000, picked=JobFilter(tag="all"))) == 10_000
