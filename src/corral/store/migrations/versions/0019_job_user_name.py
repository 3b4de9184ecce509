"""jobs.user_name: the user a job's spec names, in a column of its own indexed with the state, so
that a submission counts its user's open jobs (policy.users.max_submitted_jobs) off the index
instead of reading the spec of every open job

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-27 06:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

# (As jobspec.MAX_USER was when this revision was written: a migration does not move with the code.)
MAX_USER = 64


def upgrade() -> None:
    # "" to start with (no rewrite of the table on either database: a constant default), then each
    # job that names a user takes it from its spec. A user longer than MAX_USER, which submission
    # refuses since this revision, is cut to fit (PostgreSQL would refuse it whole).
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("user_name", sa.String(length=MAX_USER), nullable=False, server_default=""))
    jobs = sa.table("jobs", sa.column("spec", sa.JSON()), sa.column("user_name", sa.String()))
    named = jobs.c.spec["user"].as_string()
    op.execute(jobs.update().where(named != "").values(user_name=sa.func.substr(named, 1, MAX_USER)))
    op.create_index("ix_jobs_user_state", "jobs", ["user_name", "state"])


def downgrade() -> None:
    op.drop_index("ix_jobs_user_state", table_name="jobs")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("user_name")
