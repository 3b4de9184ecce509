"""Persistence through SQLAlchemy: SQLite by default, PostgreSQL by URL; Alembic migrations."""

from corral.store.store import InvalidJobs, NotFound, NotQueued, NotRunning, Store

__all__ = ["InvalidJobs", "NotFound", "NotQueued", "NotRunning", "Store"]
