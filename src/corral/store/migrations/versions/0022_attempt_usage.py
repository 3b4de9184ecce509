"""attempts.cpu_seconds and attempts.max_rss_mib: what a run used on the node that ran its command,
as its agent measured it (Slurm's TotalCPU and MaxRSS, which seff reads), so that a job is sized by
what it used against what it asked for

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-27 18:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable with no default: no rewrite of the table on either database. A run recorded before
    # stays without them: what it used is not known.
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("cpu_seconds", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("max_rss_mib", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_column("max_rss_mib")
        batch_op.drop_column("cpu_seconds")
