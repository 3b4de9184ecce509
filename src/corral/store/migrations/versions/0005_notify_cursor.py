"""notify_cursor: the notifier's last handled event and its rules' rearm state

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25 20:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "notify_cursor",
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("last_event_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    op.drop_table("notify_cursor")
