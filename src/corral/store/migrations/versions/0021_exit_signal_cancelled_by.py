"""attempts.exit_signal and jobs.exit_signal: the signal that killed a command, beside its exit code
(128+N, as before), so that a program that exited 137 is told from one SIGKILLed (an out-of-memory
kill's usual sign), as Slurm's ExitCode=0:9 tells it; and jobs.cancelled_by: who asked for a job's
cancel (a user, or the operator), which only its job.cancel_requested event said

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-27 13:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

# (As jobspec.MAX_USER was when this revision was written: a migration does not move with the code.)
MAX_USER = 64


def upgrade() -> None:
    # Nullable with no default: no rewrite of the table on either database. What was recorded before
    # stays as it was: an exit code of 128+N with no signal (whether a signal ended it is not known),
    # and no canceller (the job's job.cancel_requested event still says who, if anyone).
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("exit_signal", sa.Integer(), nullable=True))
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("exit_signal", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("cancelled_by", sa.String(length=MAX_USER), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("cancelled_by")
        batch_op.drop_column("exit_signal")
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_column("exit_signal")
