"""dispatchers.stale_at: when a peer judged a dispatcher silent, so that it is said once (event
dispatcher.stale) and its return is said too (dispatcher.resumed)

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-30 01:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: a dispatcher silent before this migration is judged (and said) again once.
    with op.batch_alter_table("dispatchers", schema=None) as batch_op:
        batch_op.add_column(sa.Column("stale_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("dispatchers", schema=None) as batch_op:
        batch_op.drop_column("stale_at")
