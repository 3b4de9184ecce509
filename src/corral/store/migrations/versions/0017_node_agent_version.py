"""nodes.agent_version: the corral version of the agent a node runs (told at pairing and resuming)

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27 00:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable, no default: the nodes paired before it did not say which agent they run.
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("agent_version", sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("agent_version")
