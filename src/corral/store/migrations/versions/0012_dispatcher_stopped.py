"""dispatchers.stopped_at: when a dispatcher stopped cleanly, so that `corral status` tells a stop
from a crash (both read as a stale heartbeat before)

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-29 01:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: no dispatcher recorded before is known to have stopped cleanly.
    with op.batch_alter_table("dispatchers", schema=None) as batch_op:
        batch_op.add_column(sa.Column("stopped_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("dispatchers", schema=None) as batch_op:
        batch_op.drop_column("stopped_at")
