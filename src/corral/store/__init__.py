"""Persistence through SQLAlchemy: SQLite by default, PostgreSQL by URL; Alembic migrations."""

from corral.store.store import NotFound, Store

__all__ = ["NotFound", "Store"]
