"""Alembic environment: uses the engine handed over by corral.store.migrate."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from corral.store.schema import metadata

config = context.config
engine = config.attributes.get("engine") or create_engine(config.get_main_option("sqlalchemy.url") or "")

with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()
