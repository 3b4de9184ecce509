"""Alembic environment: uses the engine handed over by corral.store.migrate."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, text

from corral.store.schema import metadata

config = context.config
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
        context.run_migrations()
        if sqlite:
            broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
            if broken:
                raise RuntimeError(f"the migrations left rows whose foreign keys point nowhere: {broken[:5]}")
    connection.commit()
