"""Persistence through SQLAlchemy: SQLite by default, PostgreSQL by URL; Alembic migrations."""

from corral.store.store import (
    ArrayOutcome,
    ClearedBackoff,
    InvalidJobs,
    JobFilter,
    KeyReused,
    LimitLengthened,
    NotBackedOff,
    NotFound,
    NotQueued,
    Store,
    UserExists,
    acting_as,
    store_refused,
    store_unreachable,
)

__all__ = [
    "ArrayOutcome",
    "ClearedBackoff",
    "InvalidJobs",
    "JobFilter",
    "KeyReused",
    "LimitLengthened",
    "NotBackedOff",
    "NotFound",
    "NotQueued",
    "Store",
    "store_refused",
    "store_unreachable",
    "UserExists",
    "acting_as",
]
