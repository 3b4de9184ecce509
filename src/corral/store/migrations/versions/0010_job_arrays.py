"""jobs.array_job_id, array_task_id, array_throttle: the tasks of a job array (corral submit
--array), found by their array in task order

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27 01:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: the jobs already there are no array's tasks.
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("array_job_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("array_task_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("array_throttle", sa.Integer(), nullable=True))
        batch_op.create_index("ix_jobs_array", ["array_job_id", "array_task_id"])


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_array")
        batch_op.drop_column("array_throttle")
        batch_op.drop_column("array_task_id")
        batch_op.drop_column("array_job_id")
