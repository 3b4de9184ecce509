"""jobs by state and submission time: the oldest waiting job (corral status, /metrics) is read off
an index instead of sorting every queued job at each scrape

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26 01:00:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The new index leads with the state, so it serves every query the old one did.
    op.create_index("ix_jobs_state_submitted", "jobs", ["state", "submitted_at", "id"])
    op.drop_index("ix_jobs_state", table_name="jobs")


def downgrade() -> None:
    op.create_index("ix_jobs_state", "jobs", ["state"])
    op.drop_index("ix_jobs_state_submitted", table_name="jobs")
