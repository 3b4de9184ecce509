"""Migrations: from empty, idempotent, and the Alembic head is exactly `schema.metadata`."""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, event, inspect, text

from corral.config import Config
from corral.core.snapshot import Decisions
from corral.jobspec import MAX_TAG, JobRequest
from corral.loop import LiveLoop, PassReport
from corral.store import JobFilter, Store
from corral.store.migrate import BrokenForeignKeys, OlderDispatchersRun, Starter, alembic_config, upgrade
from corral.store.schema import metadata

from .storekit import NOW, count_rows, submit


def table_columns(store: Store) -> dict[str, dict[str, bool]]:
    """table -> column -> nullable, as the database has them (Alembic's own table left out)."""
    with store.engine.connect() as conn:
        inspector = inspect(conn)
        return {
            table: {c["name"]: bool(c["nullable"]) for c in inspector.get_columns(table)}
            for table in inspector.get_table_names()
            if table != "alembic_version"
        }


def current_revision(store: Store) -> str | None:
    with store.engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision(store: Store) -> str | None:
    return ScriptDirectory.from_config(alembic_config(store.engine)).get_current_head()


def test_migrate_from_empty_creates_every_table_and_column_of_the_metadata(empty_store: Store) -> None:
    assert table_columns(empty_store) == {}
    empty_store.migrate()
    expected = {
        table.name: {column.name: bool(column.nullable) for column in table.columns} for table in metadata.sorted_tables
    }
    assert table_columns(empty_store) == expected
    head = head_revision(empty_store)
    assert head is not None
    assert current_revision(empty_store) == head


def test_alembic_head_matches_metadata_exactly(store: Store) -> None:
    """Autogenerate finds nothing to do: indexes, keys and types of the head equal `schema.py`."""
    with store.engine.connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata)
    assert diffs == []


def test_migrate_twice_is_a_no_op_and_keeps_data(empty_store: Store) -> None:
    empty_store.migrate()
    [job_id] = submit(empty_store)
    before = table_columns(empty_store)
    empty_store.migrate()
    assert table_columns(empty_store) == before
    assert count_rows(empty_store, "jobs") == 1
    assert empty_store.job_row(job_id)["submitted_at"] == NOW


def test_a_second_store_on_a_migrated_database_migrates_as_a_no_op(store: Store) -> None:
    """Two server processes starting on the same database both call migrate()."""
    other = Store(store.url)
    try:
        other.migrate()
        assert current_revision(other) == current_revision(store)
    finally:
        other.close()


def test_alembic_config_survives_percent_encoded_urls() -> None:
    """A password with '@' or '%', or `options=-csearch_path%3D...`, is percent-encoded in the URL;
    Alembic's config is a ConfigParser where a bare '%' is an interpolation error."""
    url = "postgresql+psycopg://corral:p%40ss%25word@db.example:5432/corral?options=-csearch_path%3Dx"
    engine = create_engine(url)
    try:
        config = alembic_config(engine)
        assert config.get_main_option("sqlalchemy.url") == engine.url.render_as_string(hide_password=False)
    finally:
        engine.dispose()


def test_upgrade_from_0002_keeps_the_jobs_there_and_none_is_held(empty_store: Store) -> None:
    """0003 adds jobs.held to a database that already holds jobs (both backends)."""
    upgrade(empty_store.engine, "0002")
    assert current_revision(empty_store) == "0002" and "held" not in table_columns(empty_store)["jobs"]
    spec = JobRequest(command=["echo", "old"]).model_dump(mode="json")
    with empty_store.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO jobs (name, state, priority, spec, submitted_at, temp_failures, perm_failures,"
                " attempt_count, wait_reason, unplaceable, cancel_requested, updated_at)"
                " VALUES ('old', 'queued', 1, :spec, :now, 0, 0, 0, '', false, false, :now)"
            ),
            {"spec": json.dumps(spec), "now": NOW},
        )
    empty_store.migrate()
    assert current_revision(empty_store) == head_revision(empty_store)
    [row] = empty_store.list_job_rows()
    assert row["name"] == "old" and row["held"] is False
    [job] = empty_store.load_snapshot("d1", [], NOW).jobs
    assert not job.held and job.on_node_failure is None
    assert empty_store.hold(row["id"], NOW)["changed"] and empty_store.job_row(row["id"])["held"] is True


def test_upgrade_to_0020_finds_the_jobs_of_each_tag_stored_before(empty_store: Store) -> None:
    """0020 fills job_tags from each stored job's spec: `corral jobs --tag` reads it since. A tag
    named twice is one row; a tag longer than the store keeps now (submission refuses it since) is
    found by its first MAX_TAG characters; a spec without tags, or with null, has none."""
    upgrade(empty_store.engine, "0019")
    long_tag = "t" * (MAX_TAG + 50)
    stored_tags: list[list[str] | None] = [["web", "nightly", "web"], [long_tag], [], None]
    with empty_store.engine.begin() as conn:
        for tags in stored_tags:
            spec = JobRequest(command=["echo", "old"]).model_dump(mode="json") | {"tags": tags}
            conn.execute(
                text(
                    "INSERT INTO jobs (name, state, priority, spec, user_name, submitted_at, temp_failures,"
                    " perm_failures, attempt_count, wait_reason, unplaceable, cancel_requested, updated_at)"
                    " VALUES ('old', 'queued', 1, :spec, '', :now, 0, 0, 0, '', false, false, :now)"
                ),
                {"spec": json.dumps(spec), "now": NOW},
            )
        del spec["tags"]  # (as a spec stored by a corral older than tags)
        conn.execute(text("UPDATE jobs SET spec = :spec WHERE id = 4"), {"spec": json.dumps(spec)})
    empty_store.migrate()

    def tagged(tag: str) -> list[int]:
        return [row["id"] for row in empty_store.list_job_rows(picked=JobFilter(tag=tag))]

    assert (tagged("web"), tagged("nightly"), tagged(long_tag[:MAX_TAG]), tagged(long_tag)) == ([1], [1], [2], [])
    assert count_rows(empty_store, "job_tags") == 3
    assert empty_store.submit([JobRequest(command=["new"], tags=["web"])], NOW) == [5]
    assert tagged("web") == [1, 5]


MIGRATE_WHEN_TOLD = """
import sys, time
from pathlib import Path
from corral.store import Store
store = Store(sys.argv[1])
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.005)
store.migrate()
store.close()
"""


def test_dispatchers_started_at_once_on_an_empty_database_both_migrate_it(db_url: str, tmp_path: Path) -> None:
    """Seen live: two `corral run` started together on a new PostgreSQL database; one died with
    'cannot open the store ...: duplicate key value violates unique constraint
    "pg_type_typname_nsp_index"' (both created alembic_version at once)."""
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", MIGRATE_WHEN_TOLD, db_url, str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    time.sleep(1.5)  # every process imported and waiting
    go.touch()
    errors = []
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        if proc.returncode != 0:
            errors.append(err.strip().splitlines()[-1])
    assert errors == []
    store = Store(db_url)
    try:
        assert current_revision(store) == head_revision(store)
    finally:
        store.close()


def store_at_0014_with_dispatcher(store: Store, stopped_at: float | None = None, heartbeat: float = NOW - 3) -> None:
    upgrade(store.engine, "0014")
    with store.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO dispatchers (id, started_at, last_heartbeat, host, pid, stopped_at)"
                " VALUES ('d-old', :at, :beat, 'host-a', 4242, :stopped)"
            ),
            {"at": NOW - 3600, "beat": heartbeat, "stopped": stopped_at},
        )


def test_an_upgraded_dispatcher_will_not_migrate_the_store_under_an_older_one_that_runs(empty_store: Store) -> None:
    """A rolling upgrade of dispatchers sharing a store: the first upgraded one migrated the schema
    under the older ones still running, which read it as the schema they knew."""
    store_at_0014_with_dispatcher(empty_store)
    head = head_revision(empty_store)
    with pytest.raises(OlderDispatchersRun) as refused:
        empty_store.migrate(Starter("d-new", NOW, stale_after=30.0))
    assert str(refused.value) == (
        f"its schema is at revision 0014 and this corral would migrate it to {head}, but a dispatcher of the"
        " older corral still runs on it (d-old on host-a pid 4242, last heartbeat 3 s ago), which would read the"
        " newer schema as the old one: stop every older dispatcher first, then start the upgraded ones"
    )
    assert current_revision(empty_store) == "0014"


@pytest.mark.parametrize(
    ("stopped_at", "heartbeat", "starter_id"),
    [(NOW - 60, NOW - 60, "d-new"), (None, NOW - 31, "d-new"), (None, NOW - 3, "d-old")],
    ids=["stopped", "silent past dispatcher_stale", "its own last run"],
)
def test_an_upgraded_dispatcher_migrates_once_no_other_runs(
    empty_store: Store, stopped_at: float | None, heartbeat: float, starter_id: str
) -> None:
    store_at_0014_with_dispatcher(empty_store, stopped_at, heartbeat)
    empty_store.migrate(Starter(starter_id, NOW, stale_after=30.0))
    assert current_revision(empty_store) == head_revision(empty_store)


def test_dispatchers_of_the_same_corral_start_beside_each_other(store: Store) -> None:
    """At the head nothing is migrated: a dispatcher joins running ones of its own version."""
    store.heartbeat("d-peer", NOW - 1, "host-b", 7)
    store.migrate(Starter("d-new", NOW, stale_after=30.0))
    assert current_revision(store) == head_revision(store)


class PassCounter(LiveLoop):
    """A live loop whose passes only count themselves: what LiveLoop.run_pass lets through."""

    passes = 0

    def _run_pass(self) -> PassReport:
        self.passes += 1
        return PassReport(Decisions())


def test_a_dispatcher_whose_store_a_newer_corral_migrated_under_it_makes_no_more_passes(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """The other side of a rolling upgrade: an older dispatcher that ran on when a newer one
    migrated the store (started in the moment the newer one checked) acted on a schema it did
    not know. It stops passing (and heartbeating: its peers take its claims over) and says why."""
    loop = PassCounter(store, Config(), "d-old", clock=lambda: NOW)
    loop.run_pass()
    assert loop.passes == 1
    head = head_revision(store)
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    with caplog.at_level(logging.ERROR, logger="corral.loop"):
        loop.run_pass()
        loop.run_pass()
    assert loop.passes == 1
    assert [r.getMessage() for r in caplog.records if r.name == "corral.loop"] == [
        f"the store was migrated to revision 0099 by a newer corral while this one, of revision {head}, ran: this"
        " dispatcher makes no more passes (it would read the newer schema as the old one); stop it, its peers take"
        " its claims over once it is silent"
    ]


def test_a_sqlite_store_with_rows_that_point_nowhere_is_not_migrated_and_says_which(tmp_path: Path) -> None:
    """A store written with its keys unenforced (by hand, by a tool) has an attempt of no job: the
    check after the migrations found it, and corral stopped with a traceback."""
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    upgrade(store.engine, "0014")
    with contextlib.closing(sqlite3.connect(tmp_path / "corral.db")) as raw:  # its keys unenforced, as sqlite3's
        raw.execute(
            "INSERT INTO attempts (job_id, node_id, node_ids, vcpus, ram_mib, scratch_mib, gpus, state,"
            " assigned_at, reason) VALUES (404, 'n1', '[\"n1\"]', 1, 1024, 0, 0, 'exited', ?, '')",
            (NOW,),
        )
        raw.commit()
    with pytest.raises(BrokenForeignKeys) as refused:
        store.migrate()
    assert str(refused.value) == (
        "1 row points nowhere (attempts row 1 names no jobs row); nothing was migrated: delete those rows, or"
        " restore a backup, then start again"
    )
    assert current_revision(store) == "0014"
    store.close()


def test_a_sqlite_migration_that_would_leave_rows_pointing_nowhere_is_rolled_back_whole(tmp_path: Path) -> None:
    """The check after the migrations said "the migrations left them so: restore the backup": the
    store was migrated, broken. The check is in the migrations' transaction now: nothing is kept."""
    path = tmp_path / "corral.db"
    store = Store(f"sqlite:///{path}")
    upgrade(store.engine, "0014")
    with store.engine.begin() as conn:
        conn.execute(text("INSERT INTO store_meta (name, value) VALUES ('kept', 'yes')"))
    with contextlib.closing(sqlite3.connect(path)) as raw:
        before = list(raw.iterdump())

    def a_faulty_last_revision(conn: object, cursor: sqlite3.Cursor, statement: str, *rest: object) -> None:
        # What a faulty migration would do: write an attempt of no job, with the keys off.
        if statement.startswith("UPDATE alembic_version SET version_num='0017'"):
            cursor.execute(
                "INSERT INTO attempts (job_id, node_id, node_ids, vcpus, ram_mib, scratch_mib, gpus, state,"
                " assigned_at, reason) VALUES (404, 'n1', '[\"n1\"]', 1, 1024, 0, 0, 'exited', 1.0, '')"
            )

    event.listen(store.engine, "before_cursor_execute", a_faulty_last_revision)
    try:
        with pytest.raises(BrokenForeignKeys) as refused:
            store.migrate()
    finally:
        store.close()
    assert str(refused.value) == (
        "1 row points nowhere (attempts row 1 names no jobs row); the migrations would have left them so (a fault"
        " of this corral's): nothing was migrated, the store is as it was; run the corral you upgraded from, and"
        " report it"
    )
    with contextlib.closing(sqlite3.connect(path)) as raw:
        assert list(raw.iterdump()) == before
