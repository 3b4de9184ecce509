"""job_dependencies: each condition of a job's dependency (Slurm's --dependency), by the job it names

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # No job stored before this revision has a dependency (the request had no such field).
    op.create_table(
        "job_dependencies",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("depends_on", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"]),
        sa.ForeignKeyConstraint(["depends_on"], ["jobs.id"]),
        sa.PrimaryKeyConstraint("job_id", "kind", "depends_on"),
    )
    op.create_index("ix_job_dependencies_depends_on", "job_dependencies", ["depends_on"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_job_dependencies_depends_on", table_name="job_dependencies")
    op.drop_table("job_dependencies")
