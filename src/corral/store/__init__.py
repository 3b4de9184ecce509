"""Persistence through SQLAlchemy: SQLite by default, PostgreSQL by URL; Alembic migrations."""

from corral.store.store import ClearedBackoff, InvalidJobs, JobFilter, NotBackedOff, NotFound, NotQueued, Store

__all__ = ["ClearedBackoff", "InvalidJobs", "JobFilter", "NotBackedOff", "NotFound", "NotQueued", "Store"]
