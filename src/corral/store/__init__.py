"""Persistence through SQLAlchemy: SQLite by default, PostgreSQL by URL; Alembic migrations."""

from corral.store.store import NotFound, NotQueued, Store

__all__ = ["NotFound", "NotQueued", "Store"]
