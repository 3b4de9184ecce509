"""jobs.spec_rev: how many times a job's spec was changed after submission (corral update), so that
every dispatcher rebuilds its kept copy of the job

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28 01:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The jobs already there were never changed.
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("spec_rev", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("spec_rev")
