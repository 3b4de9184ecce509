"""Indexes a PostgreSQL DBA's review found missing on a big store: attempts by their end, which fair
share's spans of the last minutes read (a sequential scan of every attempt ever made), and jobs by
their name, which `corral jobs --name` reads (a sequential scan of every job)

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27 06:30:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain CREATE INDEX on both databases (PostgreSQL's CONCURRENTLY cannot run inside the
    # migration's transaction): it blocks writes to the table while it builds, about a second at
    # 500,000 jobs (docs/performance.md), and the store migrates while no older dispatcher runs.
    op.create_index("ix_attempts_finished", "attempts", ["finished_at"])
    # With the id: the newest jobs of a name first, a page at a time, with no sort of them all.
    op.create_index("ix_jobs_name", "jobs", ["name", "id"])


def downgrade() -> None:
    op.drop_index("ix_jobs_name", table_name="jobs")
    op.drop_index("ix_attempts_finished", table_name="attempts")
