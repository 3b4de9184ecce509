"""nodes.zone and nodes.market: the availability zone of a node's instance and whether it is spot or
on-demand, for `corral nodes` and the dashboard (an operator triaging a zone's outage or a wave of
spot reclaims needs both)

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26 22:15:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: a node booted before this migration, or by a cloud that has no zones (loopback), has
    # none; the EC2 listing fills them in for the live ones at the next pass.
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("zone", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("market", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("market")
        batch_op.drop_column("zone")
