"""signal_requests: signals asked for a running attempt (`corral cancel --signal`, Slurm's scancel
--signal) that its agent, or the Slurm pass, has not sent yet, kept so that a request outlives a
server restart

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-27 21:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A new table: nothing stored before this revision asked for a signal.
    op.create_table(
        "signal_requests",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("attempt_id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("main_only", sa.Boolean(), nullable=False),
        sa.Column("requested_at", sa.Float(), nullable=False),
        sa.Column("requested_by", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["attempt_id"], ["attempts.id"]),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_signal_requests_attempt", "signal_requests", ["attempt_id"])
    op.create_index("ix_signal_requests_job", "signal_requests", ["job_id"])


def downgrade() -> None:
    op.drop_index("ix_signal_requests_job", table_name="signal_requests")
    op.drop_index("ix_signal_requests_attempt", table_name="signal_requests")
    op.drop_table("signal_requests")
