"""unavailable_types.boot_failures, boot_failed_at: an instance type's failed boots in a row (its
instances that did not pair within the boot grace) and when the last was, which its next failure's
back-off grows from (corral.core.capacity.boot_failed)

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26 16:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The back-offs already there were capacity errors': no failed boot in a row.
    with op.batch_alter_table("unavailable_types", schema=None) as batch_op:
        batch_op.add_column(sa.Column("boot_failures", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("boot_failed_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("unavailable_types", schema=None) as batch_op:
        batch_op.drop_column("boot_failed_at")
        batch_op.drop_column("boot_failures")
