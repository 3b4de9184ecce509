"""attempts.executor_ref: the executor's own id of an attempt (the Slurm job id)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25 19:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("executor_ref", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_column("executor_ref")
