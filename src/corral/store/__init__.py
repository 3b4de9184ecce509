"""Persistence through SQLAlchemy: SQLite by default, PostgreSQL by URL; Alembic migrations."""

from corral.store.store import InvalidJobs, JobFilter, NotFound, NotQueued, Store

__all__ = ["InvalidJobs", "JobFilter", "NotFound", "NotQueued", "Store"]
