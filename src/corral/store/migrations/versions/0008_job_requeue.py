"""jobs.requeue_requested, requeue_hold: a claimed or running job to stop and put back in the queue,
held if asked (corral requeue [--hold])

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26 04:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The server default fills the rows already there: no requeue was asked of them.
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("requeue_requested", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch_op.add_column(sa.Column("requeue_hold", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("requeue_hold")
        batch_op.drop_column("requeue_requested")
