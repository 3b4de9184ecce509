"""Alembic environment: uses the engine handed over by corral.store.migrate."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from alembic import context
from sqlalchemy import Connection, create_engine, text

from corral.store.migrate import BrokenForeignKeys
from corral.store.schema import metadata

config = context.config


def check_foreign_keys(connection: Connection, migrated: bool) -> None:
    # (table, rowid, parent table, foreign key's index) for each row that points nowhere.
    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
    if broken:
        raise BrokenForeignKeys([(str(row[0]), row[1], str(row[2])) for row in broken], migrated)


@contextmanager
def sqlite_keys_off_and_driver_hands_off(connection: Connection) -> Iterator[sqlite3.Connection]:
    """A batch migration rebuilds a table (copy, DROP, rename): with foreign keys enforced, the DROP
    of `jobs` failed ("FOREIGN KEY constraint failed") in every store holding an attempt. The
    pragma is a no-op inside a transaction, so it goes to the driver's connection before BEGIN.
    The driver must not manage transactions itself (its isolation_level, which Store's engine
    already sets to None): the migration run is the one transaction corral begins."""
    driver: sqlite3.Connection = connection.connection.driver_connection  # type: ignore[assignment]
    keys_were_on = driver.execute("PRAGMA foreign_keys").fetchone() == (1,)
    isolation_level = driver.isolation_level
    driver.isolation_level = None
    driver.execute("PRAGMA foreign_keys=OFF")
    try:
        yield driver
    finally:
        # An engine with a pool (one made from the URL) would hand this connection on as it is;
        # one that Ctrl-C invalidated (and closed) is not handed on.
        if not connection.invalidated:
            if keys_were_on:
                driver.execute("PRAGMA foreign_keys=ON")
            driver.isolation_level = isolation_level


def run_migrations(connection: Connection, sqlite: bool) -> None:
    # Begun before Alembic sees the connection, the transaction is "external" to it, and Alembic
    # leaves it alone: it does not commit after each revision (as it does on SQLite, whose DDL it
    # takes for non-transactional) nor at the end. Every revision, its `alembic_version` update and
    # the checks below commit together, or a failure anywhere rolls all of them back: the store is
    # at head, or exactly as it was.
    with connection.begin():
        if sqlite and not connection.connection.driver_connection.in_transaction:  # type: ignore[union-attr]
            # An engine without Store's "begin" listener: SQLAlchemy's begin emits nothing.
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        if connection.dialect.name == "postgresql":
            # Dispatchers started together on a new database would each create alembic_version
            # and the tables (one dies on a duplicate key): they migrate one at a time, and the
            # next finds the schema at head. PostgreSQL's DDL is transactional, so the lock is held
            # until the migration commits. (SQLite's writes begin IMMEDIATE: serialised already.)
            connection.execute(
                text("SELECT pg_advisory_xact_lock(hashtext('corral.migrate'), hashtext(current_schema()))")
            )
            # Not bounded as corral run bounds its sessions' idle transactions (Store): a backfill's
            # Python work between two statements ended the migration's session at a gap of 1 s on a
            # loaded host, and a dispatcher_stale of a few seconds would fail starts so. (Rolled
            # back whole, it would be tried again at the next start; a frozen migrating dispatcher
            # holds up only the others' starts.)
            connection.execute(text("SELECT set_config('idle_in_transaction_session_timeout', '0', true)"))
        context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
        with context.begin_transaction():
            # (A store at head is not checked: the check reads every row, at every start.)
            checked = sqlite and context.get_context().get_current_revision() != context.get_head_revision()
            if checked:
                # With the keys unenforced, rows that already point nowhere would go through the
                # migrations unseen; a store with such rows is not migrated at all.
                check_foreign_keys(connection, migrated=False)
            context.run_migrations()
            if checked:
                check_foreign_keys(connection, migrated=True)


engine = config.attributes.get("engine") or create_engine(config.get_main_option("sqlalchemy.url") or "")

with engine.connect() as connection:
    if connection.dialect.name == "sqlite":
        with sqlite_keys_off_and_driver_hands_off(connection):
            run_migrations(connection, sqlite=True)
    else:
        run_migrations(connection, sqlite=False)
