"""Alembic environment: uses the engine handed over by corral.store.migrate."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, text

from corral.store.schema import metadata

config = context.config
engine = config.attributes.get("engine") or create_engine(config.get_main_option("sqlalchemy.url") or "")

with engine.connect() as connection:
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
    connection.commit()
