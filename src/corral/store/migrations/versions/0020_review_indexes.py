"""Indexes a PostgreSQL DBA's review found missing on a big store: attempts by their end, which fair
share's spans of the last minutes read (a sequential scan of every attempt ever made); jobs by their
name, which `corral jobs --name` reads (a sequential scan of every job); and job_tags, a job's tags
one row each, which `corral jobs --tag` reads (it read the tags in the spec of every job)

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27 06:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

# (As jobspec.MAX_TAG was when this revision was written: a migration does not move with the code.)
MAX_TAG = 200


def upgrade() -> None:
    # A plain CREATE INDEX on both databases (PostgreSQL's CONCURRENTLY cannot run inside the
    # migration's transaction): it blocks writes to the table while it builds (docs/performance.md
    # has the times), and the store migrates while no older dispatcher runs.
    op.create_index("ix_attempts_finished", "attempts", ["finished_at"])
    # With the id: the newest jobs of a name first, a page at a time, with no sort of them all.
    op.create_index("ix_jobs_name", "jobs", ["name", "id"])

    op.create_table(
        "job_tags",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("tag", sa.String(length=MAX_TAG), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"]),
        sa.PrimaryKeyConstraint("job_id", "tag"),
    )
    # Each stored job's tags, once each (DISTINCT: a spec may name one twice). A tag longer than
    # MAX_TAG, which submission refuses since this revision, is cut to fit (PostgreSQL would refuse
    # it whole), and is found by its first MAX_TAG characters.
    if op.get_bind().dialect.name == "postgresql":
        backfill = sa.text(
            "INSERT INTO job_tags (job_id, tag) SELECT DISTINCT jobs.id, substr(tag, 1, :max_tag) FROM jobs,"
            " json_array_elements_text(CASE WHEN json_typeof(jobs.spec -> 'tags') = 'array'"
            " THEN jobs.spec -> 'tags' END) AS tag"
        )
    else:
        backfill = sa.text(
            "INSERT INTO job_tags (job_id, tag) SELECT DISTINCT jobs.id, substr(tags.value, 1, :max_tag)"
            " FROM jobs, json_each(jobs.spec, '$.tags') AS tags WHERE tags.type = 'text'"
        )
    op.execute(backfill.bindparams(max_tag=MAX_TAG))
    # Built after the rows are in: one sort, not an insert into it per row.
    op.create_index("ix_job_tags_tag", "job_tags", ["tag", "job_id"])


def downgrade() -> None:
    op.drop_index("ix_job_tags_tag", table_name="job_tags")
    op.drop_table("job_tags")
    op.drop_index("ix_jobs_name", table_name="jobs")
    op.drop_index("ix_attempts_finished", table_name="attempts")
