"""Persistence through SQLAlchemy: SQLite by default, PostgreSQL by URL; Alembic migrations."""

from corral.store.store import (
    CANCELLED_BY_OPERATOR,
    ArrayOutcome,
    AttemptUsage,
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
    "CANCELLED_BY_OPERATOR",
    "ArrayOutcome",
    "AttemptUsage",
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
