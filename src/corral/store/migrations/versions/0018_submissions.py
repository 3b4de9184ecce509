"""submissions: a client's key for each submission, so that one sent again after its answer was
lost queues its jobs once (an idempotency key, as Stripe's and Kubernetes' clients send)

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27 00:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "submissions",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("body_hash", sa.String(length=64), nullable=False),
        sa.Column("job_ids", sa.JSON(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_index("ix_submissions_at", "submissions", ["at"])


def downgrade() -> None:
    op.drop_index("ix_submissions_at", table_name="submissions")
    op.drop_table("submissions")
