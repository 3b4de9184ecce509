"""Alembic environment: uses the engine handed over by corral.store.migrate."""

from __future__ import annotations

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


engine = config.attributes.get("engine") or create_engine(config.get_main_option("sqlalchemy.url") or "")

with engine.connect() as connection:
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:
        # A batch migration rebuilds a table (copy, DROP, rename): with foreign keys enforced, the
        # DROP of `jobs` failed ("FOREIGN KEY constraint failed") in every store holding an
        # attempt, and corral could not start after the upgrade. The pragma is a no-op inside a
        # transaction, so it goes to the driver's connection before the first statement begins one;
        # the keys are checked once the migrations are done.
        connection.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")  # type: ignore[union-attr]
    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            # Dispatchers started together on a new database would each create alembic_version
            # and the tables (one dies on a duplicate key): they migrate one at a time, and the
            # next finds the schema at head. PostgreSQL's DDL is transactional, so the lock is held
            # until the migration commits. (SQLite's writes begin IMMEDIATE: serialised already.)
            connection.execute(
                text("SELECT pg_advisory_xact_lock(hashtext('corral.migrate'), hashtext(current_schema()))")
            )
        # (A store at head is not checked: the check reads every row, at every start.)
        checked = sqlite and context.get_context().get_current_revision() != context.get_head_revision()
        if checked:
            # With the keys unenforced, rows that already point nowhere would go through the
            # migrations unseen; a store with such rows is not migrated at all.
            check_foreign_keys(connection, migrated=False)
        context.run_migrations()
        if checked:
            check_foreign_keys(connection, migrated=True)
    connection.commit()
